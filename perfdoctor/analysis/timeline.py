"""The derived tables of one analysis: steps, their activities, gaps, kernels — built once.

Every number perfdoctor prints about steps comes from the tables here, so the metric
table, the rules' evidence, the estimates, the terminal summary, the HTML report and the
diff cannot disagree about what a step's latency or a gap is. Before this module there
were four step-latency derivations, two gap algorithms (two different "largest gaps"
tables in one ``perfdoctor analyze``) and two top-kernel tables; now there is one of each.

:func:`build` makes a :class:`Timeline` from a Profile and its :class:`~perfdoctor.analysis.steps.Steps`;
:func:`perfdoctor.analysis.metrics.analyze` builds it once and keeps it on the Analysis
(``analysis.timeline``). All functions are pure (DataFrames in, DataFrames out).

The step table (``Timeline.steps``), one row per step in host order:

=================  ====================================================================
name, tid          the step range and the thread it ran on
host_start_ns,     the host range
host_end_ns
gpu_start_ns,      the step's GPU window: first start / last end of the GPU activities
gpu_end_ns         its launches issued (``<NA>`` when it launched none)
kernels, launches  counts
critical_path_ns   ``gpu_end[k] − max(host_start[k], gpu_end[k−1])`` over the steps with
                   GPU work (:func:`perfdoctor.analysis.steady.critical_path_ns`); NaN without GPU work
host_lead_ns       ``max(0, gpu_end[k−1] − host_start[k])``: how far ahead of the GPU the
                   host issued the step (NaN for the first step with GPU work)
host_before_gpu_ns critical path − GPU window, ``max(0, gpu_start[k] − max(host_start[k],
                   gpu_end[k−1]))`` (:func:`perfdoctor.analysis.steady.host_before_gpu_ns`):
                   the step's host work before its GPU work (data loading); NaN without GPU work
busy_ns            union of the step's GPU activities (streams overlapping count once)
idle_ns            GPU window − busy: the bubbles inside the step
copy_ns,           time in the step's copies + memsets, and in pageable copies
pageable_ns
=================  ====================================================================
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pandas as pd

from perfdoctor.names import families

from perfdoctor.analysis import steady
from perfdoctor.names.kernels import family as kernel_family, gemm_precision, label
from perfdoctor.names.codes import equals, factorize, per_name
from perfdoctor.profile import Profile
from perfdoctor.analysis.steps import Steps, is_sync

GAP_COLUMNS = ["step", "start_ns", "end_ns", "length_ns", "before", "after", "after_correlation", "window_start_ns", "after_sync"]
KERNEL_COLUMNS = ["kernel", "family", "name", "count", "total_ns", "mean_ns", "per_step", "ms_per_step", "share"]


SEGMENTS_BY_LOOP = 256  # group_cummax: up to this many groups, one numpy call each; more, pandas' groupby


def group_cummax(values: np.ndarray, group: np.ndarray) -> np.ndarray:
    """The running maximum of int64 ``values`` within each group, ``group`` sorted (each
    group's rows one slice): ``pd.Series(values).groupby(group).cummax()`` as an int64 array.
    A step's activities are one group, so a trace has a few to a few hundred: one
    ``np.maximum.accumulate`` per slice costs ~0.3 ms on HF 80 MB's 47k activities against
    pandas' ~1.3 ms, and the timeline and the attribution ask 13 times per analysis."""
    values = np.asarray(values, dtype=np.int64)
    if values.size == 0:
        return values.copy()
    bounds = np.flatnonzero(np.r_[True, group[1:] != group[:-1], True])
    if bounds.size - 1 > SEGMENTS_BY_LOOP:
        return pd.Series(values).groupby(group).cummax().to_numpy(np.int64)
    out = np.empty_like(values)
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        np.maximum.accumulate(values[a:b], out=out[a:b])
    return out


def merged_gaps(acts: pd.DataFrame, group: np.ndarray) -> pd.DataFrame:
    """THE gap algorithm: idle intervals between activities of the same group.

    ``acts`` has start_ns, end_ns, name, correlation; ``group`` labels each row (a step, or
    one label for a whole span). Within a group, sorted by start, a gap opens after
    activity i when everything up to i has ended (the running maximum of the ends,
    ``reach``) before activity i+1 starts — so a short kernel on a second stream inside a
    long one does not create a fake gap. Returns the gaps with the group in ``step``, the
    names around each gap, the correlation of the activity after it, and where the group's
    first activity started (``window_start_ns``).
    """
    if acts.empty:
        return pd.DataFrame({c: pd.Series(dtype=object if c in ("before", "after") else "int64") for c in GAP_COLUMNS[:-1]})
    order = np.lexsort((acts["start_ns"].to_numpy(), group))
    g = np.asarray(group)[order]
    s = acts["start_ns"].to_numpy(np.int64)[order]
    e = acts["end_ns"].to_numpy(np.int64)[order]
    names = acts["name"].to_numpy()[order]
    corr = acts["correlation"].to_numpy()[order]
    reach = group_cummax(e, g)
    first = np.r_[True, g[1:] != g[:-1]]
    window_start = s[np.flatnonzero(first)][np.cumsum(first) - 1]
    same = g[1:] == g[:-1]
    idx = np.flatnonzero(same & (s[1:] > reach[:-1]))
    out = pd.DataFrame(
        {
            "step": g[idx + 1].astype("int64"),
            "start_ns": reach[idx],
            "end_ns": s[idx + 1],
            "before": names[idx],
            "after": names[idx + 1],
            "after_correlation": corr[idx + 1],
            "window_start_ns": window_start[idx + 1],
        }
    )
    out["length_ns"] = out["end_ns"] - out["start_ns"]
    return out[GAP_COLUMNS[:-1]]


def device_idle(step_gaps: pd.DataFrame, device_gaps: pd.DataFrame) -> pd.DataFrame:
    """The parts of each step gap in which the device did nothing at all.

    A step's gap can be filled by another step's work or another stream's (the steps of a
    pipelined loop overlap; a side stream runs a copy for the next step), and then it is no
    bubble. ``device_gaps`` are the gaps of all activities together (:func:`merged_gaps`
    with one group). A step gap opens at the end of one activity and closes at the start of
    another, so every device gap that meets it lies inside it: the step gap becomes those
    device gaps (none, one or several), keeping the step and its ``window_start_ns``; the
    names and correlation around each piece are the device's (the work that ended the idle).
    """
    ds = device_gaps["start_ns"].to_numpy(np.int64)
    de = device_gaps["end_ns"].to_numpy(np.int64)  # sorted too: device gaps are disjoint
    first = np.searchsorted(ds, step_gaps["start_ns"].to_numpy(np.int64), side="left")
    last = np.searchsorted(de, step_gaps["end_ns"].to_numpy(np.int64), side="right")
    count = np.clip(last - first, 0, None)
    rows = np.repeat(np.arange(len(step_gaps)), count)
    pieces = np.repeat(first, count) + (np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count))
    out = device_gaps.iloc[pieces].reset_index(drop=True)
    out["step"] = step_gaps["step"].to_numpy()[rows]
    out["window_start_ns"] = step_gaps["window_start_ns"].to_numpy()[rows]
    # Overlapping steps can share an idle piece: it is counted once, in the earliest step.
    first_step = np.bincount(pieces)[pieces] == 1 if pieces.size else np.ones(0, dtype=bool)  # pieces are >= 0: a bincount is groupby's size
    if not first_step.all():
        order = np.lexsort((out["step"].to_numpy(), pieces))
        keep = np.zeros(len(out), dtype=bool)
        keep[order[np.r_[True, pieces[order][1:] != pieces[order][:-1]]]] = True
        out = out[keep].reset_index(drop=True)
    return out[GAP_COLUMNS[:-1]]


def _mark_after_sync(gaps: pd.DataFrame, sync_ends: np.ndarray) -> pd.DataFrame:
    """``after_sync``: a synchronizing call returned inside the gap — the GPU ran dry
    because the host waited for it, then had to issue new work from scratch."""
    ends = np.sort(np.asarray(sync_ends, dtype=np.int64))
    first = np.searchsorted(ends, gaps["start_ns"].to_numpy(dtype=np.int64), side="left")
    last = np.searchsorted(ends, gaps["end_ns"].to_numpy(dtype=np.int64), side="right")
    return gaps.assign(after_sync=last > first)


def union_per_group(starts: np.ndarray, ends: np.ndarray, group: np.ndarray, n: int) -> np.ndarray:
    """Per group 0..n-1, the length of the union of its intervals."""
    if starts.size == 0:
        return np.zeros(n, dtype=np.int64)
    order = np.lexsort((starts, group))
    return sorted_union_per_group(starts[order], ends[order], group[order], n)


def sorted_union_per_group(s: np.ndarray, e: np.ndarray, g: np.ndarray, n: int) -> np.ndarray:
    """:func:`union_per_group` of intervals already in its order: by group, then start
    (ties in their order of before)."""
    out = np.zeros(n, dtype=np.int64)
    if s.size == 0:
        return out
    reach = group_cummax(e, g)
    previous = np.r_[np.iinfo(np.int64).min, reach[:-1]]
    previous[np.r_[True, g[1:] != g[:-1]]] = np.iinfo(np.int64).min
    np.add.at(out, g, np.clip(e - np.maximum(s, previous), 0, None))
    return out


def step_table(steps: Steps, activities: pd.DataFrame) -> pd.DataFrame:
    """The step table (module docstring) from the steps and their activities (``step`` column)."""
    t = steps.table.copy()
    n = len(t)
    step = activities["step"].to_numpy(np.int64)
    s = activities["start_ns"].to_numpy(np.int64)
    e = activities["end_ns"].to_numpy(np.int64)
    t["busy_ns"] = union_per_group(s, e, step, n)
    has_gpu = t["gpu_start_ns"].notna().to_numpy()
    window = np.zeros(n, dtype=np.int64)
    window[has_gpu] = (t.loc[has_gpu, "gpu_end_ns"].astype("int64") - t.loc[has_gpu, "gpu_start_ns"].astype("int64")).to_numpy()
    t["idle_ns"] = window - t["busy_ns"].to_numpy()
    dur = e - s
    copies = activities["kind"].isin(("memcpy", "memset")).to_numpy()
    pageable = equals(activities["kind"], "memcpy") & equals(activities["host_mem"], "pageable")
    t["copy_ns"] = np.bincount(step[copies], weights=dur[copies], minlength=n).astype("int64")[:n] if n else []
    t["pageable_ns"] = np.bincount(step[pageable], weights=dur[pageable], minlength=n).astype("int64")[:n] if n else []
    cp = np.full(n, np.nan)
    lead = np.full(n, np.nan)
    before = np.full(n, np.nan)
    if has_gpu.any():
        h = t.loc[has_gpu, "host_start_ns"].to_numpy(np.int64)
        g = t.loc[has_gpu, "gpu_end_ns"].astype("int64").to_numpy()
        cp[has_gpu] = steady.critical_path_ns(h, g)
        lead[np.flatnonzero(has_gpu)[1:]] = steady.host_lead_ns(h, g)
        before[has_gpu] = steady.host_before_gpu_ns(h, t.loc[has_gpu, "gpu_start_ns"].astype("int64").to_numpy(), g)
    t["critical_path_ns"] = cp
    t["host_lead_ns"] = lead
    t["host_before_gpu_ns"] = before
    return t


def kernel_table(activities: pd.DataFrame, steps: int) -> pd.DataFrame:
    """Kernels inside the steps grouped by their readable label (:func:`perfdoctor.names.kernels.label`):
    count, total and mean time, per step figures and share of kernel time, longest first."""
    kernel = equals(activities["kind"], "kernel")
    if not kernel.any():
        return pd.DataFrame(columns=KERNEL_COLUMNS)
    steps = max(steps, 1)
    # Grouped by label code, the labels computed once per distinct name; label codes are in
    # order of first appearance, as a groupby(sort=False) would number them.
    codes, uniques = factorize(activities["name"].to_numpy(dtype=object)[kernel])
    label_of_name, label_names = pd.factorize(pd.Series([label(u) for u in uniques], dtype=object))
    group = label_of_name[codes]
    dur = (activities["end_ns"].to_numpy(np.int64) - activities["start_ns"].to_numpy(np.int64))[kernel]
    n = len(label_names)
    count = np.bincount(group, minlength=n).astype(np.int64)
    total = np.bincount(group, weights=dur, minlength=n).astype(np.int64)  # exact below 2**53 ns (104 days)
    first_name = np.full(n, len(uniques), dtype=np.int64)
    np.minimum.at(first_name, label_of_name, np.arange(len(uniques)))  # the group's first name in row order
    g = pd.DataFrame(
        {
            "kernel": np.asarray(label_names, dtype=object),
            "count": count,
            "total_ns": total,
            "mean_ns": total / count,
            "name": np.asarray(uniques, dtype=object)[first_name],
        }
    )
    g = g.sort_values(["total_ns", "count"], ascending=False, kind="stable").reset_index(drop=True)
    # families.py: communication / attention / norm / softmax / conv / gemm / memory /
    # reduction / elementwise / other (NCCL, Triton and ROCm names included)
    # with the kind, as every other caller asks (names.kernels.family): lru_cache keys family(n)
    # and family(n, "kernel") apart, and each miss is ~0.1 ms of regexes over a long name
    g["family"] = g["name"].map(kernel_family)
    g["per_step"] = g["count"] / steps
    g["ms_per_step"] = g["total_ns"] / steps / 1e6
    g["share"] = g["total_ns"] / g["total_ns"].sum()
    return g[KERNEL_COLUMNS]


@dataclass
class Timeline:
    """The derived tables of one analysis (module docstring). Build with :func:`build`."""

    steps: pd.DataFrame  # the step table
    activities: pd.DataFrame  # GPU activities owned by a step, with a ``step`` column
    gaps: pd.DataFrame  # device idle between a step's activities (scope "step"), with after_sync
    kernels: pd.DataFrame  # kernel table, every kernel label (take .head(n) for a top n)
    span: tuple[int, int] | None
    in_span: pd.DataFrame  # every GPU activity starting inside S (the contract's population for
    # kernels_per_step, short kernels, copies; a step-owned activity is always in it)
    built_from: Steps | None = None  # the Steps object these tables derive from
    host_gaps: pd.DataFrame | None = None  # hostgaps.gap_hosts of these steps, computed on first use
    # rules.estimates._launch_gaps of these gaps, computed on first use (three estimates read it per analysis)
    launch_gaps: np.ndarray | None = field(default=None, repr=False, compare=False)
    # rules.estimates._waiting of these gaps, computed on first use (the sync-wait estimate and the launch gaps read it)
    waiting_gaps: np.ndarray | None = field(default=None, repr=False, compare=False)
    # attribution.activity_part_codes of these activities, computed on first use (the attribution and the bounds read it)
    part_codes: tuple[np.ndarray, np.ndarray] | None = field(default=None, repr=False, compare=False)

    @cached_property
    def with_gpu(self) -> pd.DataFrame:
        """The rows of the step table that launched GPU work."""
        return self.steps[self.steps["gpu_start_ns"].notna()]

    @cached_property
    def is_kernel(self) -> np.ndarray:
        """Which rows of ``activities`` are kernels (boolean array)."""
        return equals(self.activities["kind"], "kernel")

    @cached_property
    def step_kernels(self) -> pd.DataFrame:
        """The kernels among the step activities (same columns and index)."""
        return self.activities[self.is_kernel]

    @cached_property
    def span_is_kernel(self) -> np.ndarray:
        """Which rows of ``in_span`` are kernels (boolean array)."""
        return equals(self.in_span["kind"], "kernel")

    @cached_property
    def span_kernels(self) -> pd.DataFrame:
        """The kernels among the activities in the profiled span (same columns and index)."""
        return self.in_span[self.span_is_kernel]

    @cached_property
    def step_kernel_families(self) -> np.ndarray:
        """The family of every row of :attr:`step_kernels`."""
        return self.families[self.is_kernel]

    @cached_property
    def gemm_kernels(self) -> pd.DataFrame:
        """The GEMM kernels among the step kernels (same columns and index), with the
        precision each name states (``precision``: :func:`perfdoctor.names.kernels.gemm_precision`):
        what the fp32-GEMM signal, its estimate and its evidence read."""
        k = self.step_kernels[equals(self.step_kernel_families, "gemm")]
        return k.assign(precision=per_name(k["name"], gemm_precision).to_numpy())

    @cached_property
    def families(self) -> np.ndarray:
        """The family of every step activity (:func:`perfdoctor.names.families.family` of its
        name and kind), aligned with ``activities``: computed once per distinct pair, once
        per analysis, for every rule, evidence table and report that groups by family."""
        return families.families(self.activities["name"], self.activities["kind"]).to_numpy()

    def critical_path_ms(self) -> np.ndarray:
        return self.with_gpu["critical_path_ns"].to_numpy(np.float64) / 1e6

    def host_lead_ms(self) -> np.ndarray:
        lead = self.with_gpu["host_lead_ns"].to_numpy(np.float64)
        return lead[np.isfinite(lead)] / 1e6


def build(profile: Profile, steps: Steps) -> Timeline:
    """The Timeline of ``profile`` for ``steps``."""
    acts = profile.activities
    owner = steps.activity_step.to_numpy()
    owner = np.where(owner < len(steps.table), owner, -1)  # a step table cut short keeps its first steps
    # assign, not copy() then a column set: pandas >= 3 copies the taken rows once, not twice
    # (HF 80 MB: 47k rows x 16 columns, ~6 MB and its pages); pandas 2 copies as before.
    mine = acts[owner >= 0].assign(step=owner[owner >= 0])
    # A gap is time the device did nothing at all (any stream, any step's work), not only
    # a pause in the step's own work: hta/negative_queue_length_values_check read five
    # 147-155 ms "gaps" filled by the other steps' work (its largest device idle is 64.65 ms).
    gaps = device_idle(merged_gaps(mine, mine["step"].to_numpy(np.int64)), merged_gaps(acts, np.zeros(len(acts), dtype=np.int64)))
    calls = profile.calls
    in_step = steps.call_step.to_numpy() >= 0
    gaps = _mark_after_sync(gaps, calls.loc[in_step & is_sync(calls["name"]).to_numpy(), "end_ns"].to_numpy())
    if steps.span is not None:
        lo, hi = steps.span
        in_span = acts[(acts["start_ns"] >= lo) & (acts["start_ns"] <= hi)]
    else:
        in_span = acts.iloc[0:0]
    return Timeline(
        steps=step_table(steps, mine),
        activities=mine,
        gaps=gaps,
        kernels=kernel_table(mine, steps.count),
        span=steps.span,
        in_span=in_span,
        built_from=steps,
    )


def span_gaps(profile: Profile, span: tuple[int, int] | None) -> pd.DataFrame:
    """Gaps of the whole device across the profiled span (scope "span": between steps too),
    by the same algorithm as the step gaps, with ``step`` = -1."""
    acts = profile.activities
    if span is None or acts.empty:
        return merged_gaps(acts.iloc[0:0], np.zeros(0, dtype=np.int64))
    lo, hi = span
    a = acts[(acts["end_ns"] > lo) & (acts["start_ns"] < hi)]
    g = merged_gaps(a, np.zeros(len(a), dtype=np.int64))
    return g.assign(step=-1)
