"""The numpy paths that replaced pandas calls on the serial part of ``perfdoctor analyze``
(docs/performance.md, "hf 80 MB — the serial analysis"), each checked against the pandas (or
object-compare) code it replaced, on the Kineto fixtures and on synthetic data that reaches
the edges (missing keys, ties, many groups)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from conftest import FIXTURES
from perfdoctor.analysis import attribution, hostgaps
from perfdoctor.analysis.attribution import BUSY_PARTS, activity_part_codes, activity_parts, kernel_part, part_is
from perfdoctor.analysis.bounds import FLOP_CLASSES, _heaviest_dtype
from perfdoctor.analysis.metrics import analyze
from perfdoctor.analysis.steps import first_by_correlation, is_sync, unit_signatures
from perfdoctor.analysis.timeline import SEGMENTS_BY_LOOP, group_cummax
from perfdoctor.names.api import is_copy
from perfdoctor.names.codes import equals, factorize
from perfdoctor.pipeline import load_trace
from perfdoctor.rules.evidence import grouped

TRACES = sorted(FIXTURES.glob("*.kineto.json.gz")) + sorted((FIXTURES / "wild").glob("*.kineto.json.gz"))


@pytest.fixture(scope="module", params=TRACES, ids=lambda p: p.name.split(".")[0])
def analysis(request):
    return analyze(load_trace(request.param))


def test_group_cummax_is_pandas_groupby_cummax(analysis) -> None:
    acts = analysis.timeline.activities
    group = acts["step"].to_numpy(np.int64)
    order = np.lexsort((acts["start_ns"].to_numpy(), group))
    e, g = acts["end_ns"].to_numpy(np.int64)[order], group[order]
    np.testing.assert_array_equal(group_cummax(e, g), pd.Series(e).groupby(g).cummax().to_numpy(np.int64))


@pytest.mark.parametrize("groups", [1, 3, SEGMENTS_BY_LOOP, SEGMENTS_BY_LOOP + 1, 2000])
def test_group_cummax_by_slices_and_by_pandas(groups: int) -> None:
    rng = np.random.default_rng(groups)
    g = np.sort(rng.integers(-1, groups, 5000))
    e = rng.integers(0, 10**15, 5000)
    np.testing.assert_array_equal(group_cummax(e, g), pd.Series(e).groupby(g).cummax().to_numpy(np.int64))
    assert group_cummax(e[:0], g[:0]).size == 0


def test_parts_by_code_are_the_parts_row_by_row(analysis) -> None:
    t = analysis.timeline
    acts = t.activities
    by_row = np.array([kernel_part(n, k, f) for n, k, f in zip(acts["name"], acts["kind"], t.families)], dtype=object)
    np.testing.assert_array_equal(activity_parts(t), by_row)
    parts, codes = activity_part_codes(t)
    assert activity_part_codes(t)[0] is parts  # once per Timeline
    for p in BUSY_PARTS:
        np.testing.assert_array_equal(part_is(t, p), by_row == p)
    np.testing.assert_array_equal(part_is(t, FLOP_CLASSES), np.isin(by_row, FLOP_CLASSES))


def test_heaviest_dtype_is_groupby_idxmax() -> None:
    rng = np.random.default_rng(7)
    for _ in range(2000):
        n = int(rng.integers(1, 30))
        dtype = rng.choice(np.array(["", "float32", "bfloat16", "float16", None], dtype=object), n)
        dur = rng.integers(0, 5, n).astype(np.float64)  # small whole numbers: many ties
        m = rng.random(n) < 0.6
        codes, uniques = factorize(dtype)
        w = pd.Series(dur[m]).groupby(dtype[m]).sum()
        w = w[w.index != ""]
        assert _heaviest_dtype(dur[m], codes[m], uniques) == (str(w.idxmax()) if not w.empty else "")


def test_grouped_is_dict_like_agg(analysis) -> None:
    calls = analysis.profile.calls
    s = calls[is_sync(calls["name"]).to_numpy()]
    s = s.assign(dur=s["end_ns"] - s["start_ns"])
    acts = analysis.timeline.activities
    c = acts[equals(acts["kind"], "memcpy")]
    c = c.assign(dur=c["end_ns"] - c["start_ns"], nbytes=c["bytes"].fillna(0))
    for frame, keys, named in ((s, "name", dict(count=("dur", "size"), total=("dur", "sum"), mean=("dur", "mean"))),
                               (c, ["copy_kind"], dict(count=("dur", "size"), total=("dur", "sum"), nbytes=("nbytes", "sum"))),
                               (c, ["copy_kind", "host_mem"], dict(count=("dur", "size"), total=("dur", "sum"), nbytes=("nbytes", "sum")))):
        if frame.empty:
            continue
        pd.testing.assert_frame_equal(grouped(frame, keys, **named), frame.groupby(keys).agg(**named), check_exact=True)


def test_grouped_drops_missing_keys_as_groupby_does() -> None:
    rng = np.random.default_rng(3)
    c = pd.DataFrame({"copy_kind": rng.choice(np.array(["HtoD", "DtoH", None], dtype=object), 300),
                      "host_mem": rng.choice(np.array(["pinned", "", np.nan], dtype=object), 300),
                      "dur": rng.integers(1, 1000, 300), "nbytes": rng.random(300) * 1e6})
    named = dict(count=("dur", "size"), total=("dur", "sum"), nbytes=("nbytes", "sum"), mean=("dur", "mean"))
    for keys in ("copy_kind", ["copy_kind"], ["copy_kind", "host_mem"]):
        pd.testing.assert_frame_equal(grouped(c, keys, **named), c.groupby(keys).agg(**named), check_exact=True)


def _first_by_pandas(acts: pd.DataFrame) -> pd.Series:
    return acts[["start_ns", "correlation", "name"]].sort_values("start_ns", kind="stable").drop_duplicates("correlation").set_index("correlation")["name"]


def test_first_by_correlation_is_the_pandas_lookup(analysis) -> None:
    acts = analysis.profile.activities
    if acts.empty:
        return
    corrs, names = first_by_correlation(acts)
    ref = _first_by_pandas(acts).sort_index()
    np.testing.assert_array_equal(corrs, ref.index.to_numpy(np.int64))
    assert names.tolist() == ref.tolist()


def test_first_by_correlation_ties_and_order() -> None:
    acts = pd.DataFrame({"start_ns": np.array([5, 1, 5, 1, 9, 0], dtype=np.int64), "correlation": np.array([7, 7, 3, 3, 3, -1], dtype=np.int64),
                         "name": pd.Series(["a", "b", "c", "d", "e", None], dtype=object)})
    corrs, names = first_by_correlation(acts)
    ref = _first_by_pandas(acts).sort_index()
    assert corrs.tolist() == ref.index.tolist() == [-1, 3, 7]
    assert names[1:].tolist() == ref.tolist()[1:] == ["d", "b"] and pd.isna(names[0]) and pd.isna(ref.iloc[0])  # a missing name stays missing


def _waits_by_object_compares(h, analysis, windows, lo, hi, idle, first=0):
    """attribution._waits as it was (main 9eee2cb), with the copy calls' time as host sync
    (2026-12-05): every label an object compare per interval."""
    n = len(windows)
    out = {p: np.zeros(n, dtype=np.int64) for p in attribution.WAIT_PARTS}
    sites: dict[str, float] = {}
    syncs: dict[str, float] = {}
    if h.empty:
        out["unattributed"] = idle.copy()
        return out, sites, syncs
    pos = pd.Series(np.arange(n), index=windows.index)
    where = pos.reindex(h["step"].to_numpy()).to_numpy()
    ok = ~np.isnan(where)
    h = h[ok]
    g = where[ok].astype(np.int64)
    s = np.clip(h["start_ns"].to_numpy(np.int64), lo[g], hi[g])
    e = np.clip((h["start_ns"] + h["length_ns"]).to_numpy(np.int64), lo[g], hi[g])
    length = np.clip(e - s, 0, None)
    r = analysis.profile.ranges
    dl = r[equals(r["source"], attribution.DATA_LOADER_SOURCE)]
    loading = hostgaps.Intervals(dl).covered(s, e) if not dl.empty else np.zeros(len(h), dtype=np.int64)
    rest = length - loading
    np.add.at(out["data_loading"], g, loading)
    host = h["host"].to_numpy(dtype=object)
    site = h["site"].to_numpy(dtype=object)
    busy = np.minimum(h["busy_ns"].to_numpy(np.int64), rest)
    codes, sites_named = factorize(site)
    comm = np.array([bool(attribution._COMM_CALL.search(str(x))) for x in sites_named], dtype=bool)[codes]
    calls = analysis.profile.calls
    sync_ends = np.sort(calls.loc[is_sync(calls["name"]).to_numpy(), "end_ns"].to_numpy(np.int64)) if not calls.empty else np.zeros(0, np.int64)
    returned = np.searchsorted(sync_ends, e, side="right") > np.searchsorted(sync_ends, s, side="left")
    host = np.where((host == "unknown") & returned, "waiting", host)
    copies = calls[is_copy(calls["name"])] if not calls.empty else calls  # the host inside a copy call: host sync (2026-12-05)
    in_copy = np.zeros(len(h), dtype=np.int64)
    if not copies.empty:
        unknown = host == "unknown"
        in_copy[unknown] = np.minimum(hostgaps.Intervals(copies).covered(s[unknown], e[unknown]), rest[unknown])
    np.add.at(out["host_sync"], g, in_copy)
    rest = rest - in_copy
    lead = h["where"].to_numpy(dtype=object) == hostgaps.LEAD_IN
    late = np.where(lead, "host_before_launch", "host_late")
    for label, part in (("waiting", "host_sync"), ("launching", "launch_cadence"), ("short", "launch_cadence")):
        m = host == label
        if label == "waiting":
            np.add.at(out["comm_wait"], g[m & comm], rest[m & comm])
            m = m & ~comm
        np.add.at(out[part], g[m], rest[m])
    for part in ("host_late", "host_before_launch"):
        m = (host == "unknown") & (late == part)
        np.add.at(out[part], g[m], rest[m])
    m = host == "busy"
    np.add.at(out["host_python"], g[m], busy[m])
    for part in ("host_late", "host_before_launch"):
        np.add.at(out[part], g[m & (late == part)], (rest - busy)[m & (late == part)])
    steps = max(n - first, 1)
    mine = g >= first
    for i in np.flatnonzero(m & (busy > 0) & mine):
        key = str(site[i]) or "(no user frame: library code)"
        sites[key] = sites.get(key, 0.0) + busy[i] / 1e6 / steps
    for i in np.flatnonzero((host == "waiting") & (rest > 0) & mine):
        key = str(site[i]) or "(a sync returned inside the gap)"
        syncs[key] = syncs.get(key, 0.0) + rest[i] / 1e6 / steps
    labelled = sum(out[p] for p in attribution.WAIT_PARTS)
    out["unattributed"] = idle - labelled
    return out, sites, syncs


def test_waits_by_codes_are_the_object_compares(analysis, monkeypatch) -> None:
    seen = []
    real = attribution._waits
    monkeypatch.setattr(attribution, "_waits", lambda *a, **k: seen.append((a, k)) or real(*a, **k))
    attribution.attribute(analysis)
    if not seen:
        return  # no step with GPU work
    (h, *rest), kw = seen[0]
    rng = np.random.default_rng(len(h))
    labels = np.array(["unknown", "waiting", "launching", "short", "busy", "other"], dtype=object)
    # the trace's own labels, then every label on every kind of interval (the relabelling, the lead-ins, the sites)
    for hosts in (h["host"], rng.choice(labels, len(h))):
        hh = h.assign(host=hosts, site=np.where(rng.random(len(h)) < 0.5, "ncclAllReduce", "train.py(3): step") if hosts is not h["host"] else h["site"])
        got, want = real(hh, *rest, **kw), _waits_by_object_compares(hh, *rest, **kw)
        assert got[1:] == want[1:]
        assert got[0].keys() == want[0].keys()
        for p in want[0]:
            np.testing.assert_array_equal(got[0][p], want[0][p], err_msg=p)


def _queue_delay_by_pandas(profile, table, activity_step):
    """serving.queue_delay as it was (main 9eee2cb): pandas' sort, drop_duplicates and a Series of every call's id."""
    acts, calls = profile.activities, profile.calls
    step = np.asarray(activity_step, dtype=np.int64)
    n = len(table)
    first_gpu = np.full(n, -1, dtype=np.int64)
    first_corr = np.full(n, -1, dtype=np.int64)
    mine = np.flatnonzero(step >= 0)
    if mine.size:
        a = pd.DataFrame({"s": step[mine], "start": acts["start_ns"].to_numpy()[mine], "corr": acts["correlation"].to_numpy()[mine]})
        first = a.sort_values(["s", "start"], kind="stable").drop_duplicates("s")
        first = first[first["s"] < n]
        first_gpu[first["s"].to_numpy()] = first["start"].to_numpy()
        first_corr[first["s"].to_numpy()] = first["corr"].to_numpy()
    launch_at = pd.Series(pd.array(calls["start_ns"].to_numpy(), dtype="Int64"), index=calls["correlation"].to_numpy())
    launch_at = launch_at[~launch_at.index.duplicated(keep="first") & (launch_at.index >= 0)]
    host_start = (table["host_start_ns"] if "host_start_ns" in table else table["start_ns"]).to_numpy(np.int64)
    has = first_gpu >= 0
    out = pd.DataFrame(index=table.index)
    out["first_gpu_ns"] = pd.array(np.where(has, first_gpu, 0), dtype="Int64")
    out.loc[~has, "first_gpu_ns"] = pd.NA
    out["launch_ns"] = launch_at.reindex(np.where(has, first_corr, -1)).to_numpy()
    out["queue_delay_ns"] = out["first_gpu_ns"] - out["launch_ns"]
    out["host_to_gpu_ns"] = out["first_gpu_ns"] - pd.array(host_start, dtype="Int64")
    return out


def test_queue_delay_is_the_pandas_one(analysis) -> None:
    from perfdoctor.analysis.serving import queue_delay

    p, steps = analysis.profile, analysis.steps
    pd.testing.assert_frame_equal(queue_delay(p, steps.table, steps.activity_step), _queue_delay_by_pandas(p, steps.table, steps.activity_step))


def test_queue_delay_ties_repeated_ids_and_missing_launches() -> None:
    from perfdoctor.analysis.serving import queue_delay
    from perfdoctor.profile import Profile

    rng = np.random.default_rng(11)
    for _ in range(50):
        n_acts, n_calls, n_steps = int(rng.integers(0, 40)), int(rng.integers(0, 40)), int(rng.integers(1, 6))
        acts = pd.DataFrame({"start_ns": rng.integers(0, 20, n_acts), "correlation": rng.integers(-1, 15, n_acts)})
        calls = pd.DataFrame({"start_ns": rng.integers(0, 20, n_calls), "correlation": rng.integers(-1, 15, n_calls)})
        p = Profile(activities=acts, calls=calls)
        table = pd.DataFrame({"host_start_ns": rng.integers(0, 5, n_steps)})
        step = rng.integers(-1, n_steps + 1, n_acts)  # a step past the table too
        pd.testing.assert_frame_equal(queue_delay(p, table, step), _queue_delay_by_pandas(p, table, step))


def test_frame_never_shares_memory_with_its_data() -> None:
    """profile.frame wraps each column without a copy, relying on the DataFrame to copy them
    into its blocks: a change to the caller's arrays never reaches the table."""
    from perfdoctor.profile import frame
    from perfdoctor.schema import CALL_COLUMNS

    data = {"name": np.array(["a", "b"], dtype=object), "start_ns": np.array([1, 2], dtype=np.int64),
            "end_ns": np.array([3, 4], dtype=np.int64), "tid": np.array([0, 0], dtype=np.int64)}
    t = frame(CALL_COLUMNS, data)
    data["name"][0], data["start_ns"][0] = "changed", 99
    assert t["name"].tolist() == ["a", "b"] and t["start_ns"].tolist() == [1, 2] and t["correlation"].tolist() == [-1, -1]
    for col, values in data.items():
        assert not np.shares_memory(t[col].to_numpy(), values), col


def test_has_role_is_classify_column(analysis) -> None:
    from perfdoctor.names.api import ROLES, classify, has_role

    names = pd.concat([analysis.profile.calls["name"], pd.Series([None, np.nan, "cudaStreamBeginCapture", "cudaGraphLaunch"], dtype=object)],
                      ignore_index=True)
    table = classify(names)
    for role in ROLES:
        np.testing.assert_array_equal(has_role(names, role), table[role].to_numpy(), err_msg=role)
    with pytest.raises(ValueError):
        has_role(names, "base")


def test_first_start_is_the_first_call_by_id(analysis) -> None:
    from perfdoctor.rules.evidence import _first_start

    calls = analysis.profile.calls
    by_corr = calls[calls["correlation"] >= 0].drop_duplicates("correlation").set_index("correlation")["start_ns"]
    corr, start = calls["correlation"].to_numpy(np.int64), calls["start_ns"].to_numpy()
    wanted = np.r_[analysis.timeline.gaps["after_correlation"].to_numpy(np.int64)[:200], -1, 10**12]
    repeated = calls.loc[calls["correlation"].duplicated(keep=False), "correlation"].to_numpy(np.int64)[:20]
    for w in np.r_[wanted, repeated]:
        got, want = _first_start(corr, start, w), by_corr.get(w)
        assert (got is None and want is None) or int(got) == int(want), w


def test_factorize_without_copy_is_the_remembered_answer() -> None:
    names = np.array(["a", "b", "a", "c"] * 10, dtype=object)
    codes, uniques = factorize(names)
    shared, shared_uniques = factorize(names, copy=False)
    again, _ = factorize(names, copy=False)
    np.testing.assert_array_equal(shared, codes)
    assert shared_uniques.tolist() == uniques.tolist() == ["a", "b", "c"]
    assert again is shared  # handed out as kept: read only
    codes[:] = 0  # a copy (the default) is the caller's own
    np.testing.assert_array_equal(factorize(names)[0], shared)
    assert factorize(names)[0] is not shared


@pytest.mark.parametrize("seed", range(8))
def test_unit_signatures_are_the_tuples_factorized(seed: int) -> None:
    """Units keyed by their codes' bytes number as the tuples of their codes did: units that
    repeat, units one a prefix of another, one-launch units, codes above 255 (several bytes)."""
    rng = np.random.default_rng(seed)
    patterns = [rng.integers(0, rng.choice([3, 300]), rng.integers(1, 12)) for _ in range(5)]
    patterns.append(patterns[0][:-1] if len(patterns[0]) > 1 else patterns[0])  # a prefix of another unit
    units = [patterns[i] for i in rng.integers(0, len(patterns), rng.integers(1, 60))]
    families = np.concatenate(units).astype(np.intp)
    cut = np.cumsum([len(u) for u in units])[:-1]
    replaced = pd.factorize(pd.Series([tuple(c) for c in np.split(families, cut)]))[0]
    np.testing.assert_array_equal(unit_signatures(families, cut), replaced)


def _busy_sorting_each_class(analysis, windows, lo, hi) -> dict:
    """attribution._busy as it was: each class's union sorted again (union_per_group)."""
    from perfdoctor.analysis.timeline import union_per_group

    t = analysis.timeline
    acts = t.activities
    n = len(windows)
    where = pd.Series(np.arange(n), index=windows.index).reindex(acts["step"].to_numpy()).to_numpy()
    ok = ~np.isnan(where)
    g = np.where(ok, where, 0).astype(np.int64)
    s = np.clip(acts["start_ns"].to_numpy(np.int64), lo[g], hi[g])
    e = np.clip(acts["end_ns"].to_numpy(np.int64), lo[g], hi[g])
    out, covered, mask = {}, np.zeros(n, dtype=np.int64), np.zeros(len(acts), dtype=bool)
    for p in BUSY_PARTS:
        mask |= ok & part_is(t, p)
        union = union_per_group(s[mask], e[mask], g[mask], n)
        out[p] = union - covered
        covered = union
    return out


def test_busy_sorted_once_is_each_class_sorted_again(analysis) -> None:
    t = analysis.timeline.steps
    w = t[t["gpu_start_ns"].notna() & t["critical_path_ns"].notna()]
    if w.empty:
        pytest.skip("no step with GPU work")
    hi = w["gpu_end_ns"].astype("int64").to_numpy()
    lo = hi - w["critical_path_ns"].astype("int64").to_numpy()
    for window in ((lo, hi), (lo + (hi - lo) // 3, hi - (hi - lo) // 3)):  # whole windows, and windows clipping activities
        got, want = attribution._busy(analysis, w, *window), _busy_sorting_each_class(analysis, w, *window)
        assert list(got) == list(want)
        for p in want:
            assert got[p].dtype == want[p].dtype
            np.testing.assert_array_equal(got[p], want[p])


@pytest.mark.parametrize("seed", range(4))
def test_sorted_union_of_a_stable_sorted_subset_is_the_union(seed: int) -> None:
    from perfdoctor.analysis.timeline import sorted_union_per_group, union_per_group

    rng = np.random.default_rng(seed)
    size, n = 3000, 7
    s = rng.integers(0, 400, size)  # many ties
    e = s + rng.integers(0, 60, size)
    g = rng.integers(0, n, size)
    order = np.lexsort((s, g))
    for mask in (rng.random(size) < 0.3, np.ones(size, dtype=bool), np.zeros(size, dtype=bool)):
        rows = order[mask[order]]
        np.testing.assert_array_equal(sorted_union_per_group(s[rows], e[rows], g[rows], n), union_per_group(s[mask], e[mask], g[mask], n))


def test_any_shaped_is_shaped_ops_any(analysis) -> None:
    from perfdoctor.analysis.bounds import any_shaped, shaped_ops
    from perfdoctor.names.codes import one_object

    ops = analysis.profile.ops
    assert any_shaped(ops) == bool(shaped_ops(ops).any())
    for dims in ([b""] * 5, [b"", b"[[1]]", b""], [b"[[1]]"] * 3, [b"[]", b"[]"]):  # one object per row, or several
        table = pd.DataFrame({"dims": pd.Series(dims, dtype=object)})
        assert any_shaped(table) == bool(shaped_ops(table).any())
    word = b"shape"
    assert one_object(np.array([word] * 4, dtype=object))
    assert not one_object(np.array([word, bytes(bytearray(word))], dtype=object))  # equal, but two objects


def _largest_per_pair_by_pandas(gaps: pd.DataFrame, top: int) -> tuple[list[int], list[int]]:
    ranked = gaps.assign(row=np.arange(len(gaps))).sort_values(["length_ns", "row"], ascending=[False, True])
    reps = ranked.drop_duplicates(["before", "after"]).head(top)
    steps = [gaps.loc[(gaps["before"] == r.before) & (gaps["after"] == r.after) & (gaps["length_ns"] >= 0.5 * r.length_ns), "step"].nunique()
             for r in reps.itertuples()]
    return reps.index.tolist(), steps


@pytest.mark.parametrize("seed", range(6))
def test_largest_gap_per_pair_is_the_sorted_drop_duplicates(seed: int) -> None:
    """evidence._largest_per_pair (the m longest, m grown) against sorting every gap: ties,
    a pair that fills the longest hundreds (m grows), fewer pairs than rows, one gap."""
    from perfdoctor.rules.evidence import TOP, _largest_per_pair

    rng = np.random.default_rng(seed)
    n = [1, 5, 300, 2000, 2000, 5000][seed]
    names = np.array([f"k{i}" for i in range(6 if seed != 4 else 40)], dtype=object)
    length = rng.integers(1, 50, n) * 1000  # many ties
    before, after = names[rng.integers(0, len(names), n)], names[rng.integers(0, len(names), n)]
    if seed >= 3:  # one pair holds the 600 longest: the first guesses of m see one pair only
        before[:600], after[:600], length[:600] = "sync", "next", 10**6 + rng.integers(0, 3, 600)
    gaps = pd.DataFrame({"step": rng.integers(0, 9, n), "length_ns": length, "before": pd.array(before, dtype="str"),
                         "after": pd.array(after, dtype="str")})
    got = _largest_per_pair(gaps)
    rows, steps = _largest_per_pair_by_pandas(gaps, TOP)
    assert got.index.tolist() == rows
    assert got["steps"].tolist() == steps
