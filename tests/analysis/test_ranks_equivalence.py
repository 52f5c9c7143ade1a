"""A folder of many ranks (issue 30 item 9) against the single-rank pipeline run on each rank.

The reference any faster multi-rank path must reproduce: each rank loaded and analysed on
its own (``analyze`` on the step the first rank uses), the rule packs evaluated with the
cross-rank view as their input. The door (``pipeline.diagnose``) on the folder must give,
per rank, the same analysis JSON (``per_rank``: with the cross-rank metrics beside the
rank's own), the same findings and the same per-step communication table, and the
cross-rank view (table, straggler, metrics) must be the one built from those independent
runs. Exact equality: both sides do the same float operations on the same inputs.

The folder: 12 ranks of ``bench/many_ranks.py``'s small trace (5 steps, a GEMM and an
all-reduce each), with different all-reduce times per rank, one straggler (a longer GEMM)
and one rank of a different structure (an extra elementwise kernel per step).

The grouped path (a folder of more than ``ranks.FULL_VIEW_RANKS`` traces: one full
analysis per structure group, the other ranks' per-step statistics from their own times)
must give the same view: every rank's STEP_COLUMNS, the straggler, the rank table and the
metrics equal, and the ranks it analyses in full the same analyses and findings; here on
this folder, on bench/many_ranks.py's, and where the endpoints of a rank lie in another order.
"""

import importlib.util
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfdoctor.analysis import ranks
from perfdoctor.reports.json import finding_json
from perfdoctor.analysis.metrics import analyze
from perfdoctor.analysis.ranks import STEP_COLUMNS, collective_table, find_straggler, rank_steps
from perfdoctor.collectors import torch_profiler
from perfdoctor.pipeline import diagnose, load_ruleset
from perfdoctor.rules.engine import evaluate

BENCH = Path(__file__).parents[2] / "bench" / "many_ranks.py"
RANKS, STRAGGLER, ODD = 12, 5, 9


def _bench():
    spec = importlib.util.spec_from_file_location("many_ranks", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_folder(folder: Path) -> Path:
    bench = _bench()
    folder.mkdir(parents=True, exist_ok=True)
    for k in range(RANKS):
        trace = bench.rank_trace(k, RANKS)
        events = trace["traceEvents"]
        for e in events:
            if k == STRAGGLER and e["name"] == "sm90_xmma_gemm_bf16":
                e["dur"] = 700  # works 0.3 ms longer per step: the others wait in the all-reduce
            if e["name"].startswith("ncclDevKernel"):
                e["dur"] += 3 * k  # every rank its own timing
        if k == ODD:  # a different structure: one more kernel per step, launched after the GEMM
            extra = []
            for s in range(bench.STEPS):
                t0 = 1_000_000 + s * bench.STEP_US
                corr = 1000 + s
                extra += [
                    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t0 + 20, "dur": 4,
                     "args": {"correlation": corr}},
                    {"ph": "X", "cat": "kernel", "name": "vectorized_elementwise_kernel", "pid": 0, "tid": 7, "ts": t0 + 441, "dur": 8,
                     "args": {"correlation": corr, "device": 0, "stream": 7}},
                ]
            events += extra
        (folder / f"rank{k}.pt.trace.json").write_text(json.dumps(trace))
    return folder


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return build_folder(tmp_path_factory.mktemp("many") / "ranks")


@pytest.fixture(scope="module")
def together(folder):
    return diagnose(folder)


@pytest.fixture(scope="module")
def alone(folder, together):
    """Each rank through the single-trace pipeline, its rules given the cross-rank view."""
    ruleset = load_ruleset((), ())
    out = {}
    step = None
    for k in range(RANKS):
        a = analyze(torch_profiler.load(folder / f"rank{k}.pt.trace.json"), step=step)
        step = step or a.steps.name
        per, source = rank_steps(a)
        coll = collective_table(a)
        out[k] = (a, per, source, coll, evaluate(ruleset, a, together.cross_rank))
    return out


def test_the_folder_has_a_straggler_and_an_odd_rank(together):
    assert [r.rank for r in together.cross_rank.runs] == list(range(RANKS))
    assert together.cross_rank.straggler is not None and together.cross_rank.straggler.rank == STRAGGLER
    table = together.cross_rank.table().set_index("rank")
    assert table.loc[ODD, "busy_ms_p50"] != table.loc[0, "busy_ms_p50"]  # the extra kernel counts as work


def test_per_rank_analysis_and_findings_equal_the_single_rank_pipeline(together, alone):
    per_rank = together.cross_rank.to_json()["per_rank"]
    cross = {key: m.to_json() for key, m in together.cross_rank.metrics().items()}
    for k, (a, _, _, _, findings) in alone.items():
        own = a.to_json()
        assert per_rank[str(k)] == json.loads(json.dumps({**own, "metrics": {**own["metrics"], **cross}})), f"rank {k}"
        assert "straggler_delay_ms" not in a.metrics  # the view is the rules' input, never written into a rank
        assert [finding_json(f) for f in together.rank_findings[k]] == [finding_json(f) for f in findings], f"rank {k}"
    assert together.findings is together.rank_findings[together.rank]  # the Diagnosis is the report rank's


def test_per_step_tables_and_cross_rank_view_equal_the_single_rank_pipeline(together, alone):
    view = together.cross_rank
    for k, (_, per, source, _, _) in alone.items():
        pd.testing.assert_frame_equal(view.per_step[k], per, check_exact=True)
        assert view.comm_source[k] == source
    straggler, why = find_straggler({k: v[1] for k, v in alone.items()}, {k: v[3] for k, v in alone.items()})
    assert why is None and straggler == view.straggler
    table = view.table()
    for k, (a, per, _, _, _) in alone.items():
        row = table[table["rank"] == k].iloc[0]
        assert row["step_ms_p50"] == a.metrics["step_latency_ms_p50"].value
        assert row["traced_step_ms_p50"] == float(per["step_ms"].median())
        assert row["busy_ms_p50"] == float(per["busy_ms"].median())
        assert row["exposed_comm_ms_p50"] == float(per["exposed_ms"].median())


# --- the grouped path (many ranks): the same view from one full analysis per structure group ---


def _grouped(folder: Path):
    """The door's diagnosis with every folder taken as many ranks (grouped_view)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ranks, "FULL_VIEW_RANKS", 0)
        return diagnose(folder)


def assert_same_view(grouped, full) -> None:
    """The grouped diagnosis against the full one: every rank's STEP_COLUMNS (exact), the
    cross-rank view, and the full analyses and findings of the ranks it analysed."""
    g, f = grouped.cross_rank, full.cross_rank
    assert list(g.per_step) == list(f.per_step)
    for k in f.per_step:
        pd.testing.assert_frame_equal(g.per_step[k], f.per_step[k], check_exact=True, obj=f"rank {k}")
        assert list(g.per_step[k].columns) == list(STEP_COLUMNS)
    assert g.comm_source == f.comm_source and g.step_p50 == f.step_p50 and g.devices == f.devices
    assert g.straggler == f.straggler and g.straggler_reason == f.straggler_reason
    pd.testing.assert_frame_equal(g.table(), f.table(), check_exact=True)
    gj, fj = g.to_json(), f.to_json()
    assert {k: v for k, v in gj.items() if k != "per_rank"} == {k: v for k, v in fj.items() if k != "per_rank"}
    for k, analysis in gj["per_rank"].items():
        assert analysis == fj["per_rank"][k], f"rank {k}"
        assert [finding_json(x) for x in grouped.rank_findings[int(k)]] == [finding_json(x) for x in full.rank_findings[int(k)]], f"rank {k}"
    assert grouped.rank == full.rank


@pytest.fixture(scope="module")
def grouped(folder):
    return _grouped(folder)


def test_grouped_path_equals_the_full_pipeline(grouped, together):
    assert_same_view(grouped, together)
    analysed = {r.rank for r in grouped.cross_rank.runs}
    # the first rank, the straggler and the odd rank (each its own group: the longer GEMM
    # reaches past the all-reduce's start), the report rank; not every rank
    assert {0, STRAGGLER, ODD, grouped.rank} <= analysed and len(analysed) < RANKS


def test_grouped_path_on_the_bench_folder(tmp_path):
    """bench/many_ranks.py's folder: one structure, one order; two full analyses (the
    first rank, the group's representative) and the ranks the view singles out."""
    bench, n = _bench(), 24
    for k in range(n):
        (tmp_path / f"rank{k}.pt.trace.json").write_text(json.dumps(bench.rank_trace(k, n)))
    keys = {ranks.read_times(f)[1] for f in ranks.trace_files(tmp_path)}
    assert len(keys) == 1
    grouped = _grouped(tmp_path)
    assert_same_view(grouped, diagnose(tmp_path))
    assert len(grouped.cross_rank.runs) <= 4


def test_a_rank_whose_endpoints_lie_in_another_order_is_analysed_alone(tmp_path):
    """Same structure, times in another order: a tie (the GEMM ends as the all-reduce
    starts) and an all-reduce that runs past the next step's start. Each is its own group
    (never the others' sums), so analysed in full, and the view equals the full pipeline's."""
    bench, n, tie, late = _bench(), 8, 3, 6
    for k in range(n):
        trace = bench.rank_trace(k, n)
        for e in trace["traceEvents"]:
            if k == tie and e["name"] == "sm90_xmma_gemm_bf16":
                e["dur"] = 410  # ends at t0 + 450, the all-reduce's start
            if k == late and e["name"].startswith("ncclDevKernel") and e["ts"] < 1_000_000 + bench.STEP_US:
                e["dur"] = 601  # the first step's all-reduce ends past the second step's start (and on no other endpoint)
        (tmp_path / f"rank{k}.pt.trace.json").write_text(json.dumps(trace))
    keys = {k: ranks.read_times(tmp_path / f"rank{k}.pt.trace.json")[1] for k in range(n)}
    for k in (tie, late):  # the same structure, another order
        assert keys[k][0] == keys[0][0] and keys[k][1] != keys[0][1]
    grouped = _grouped(tmp_path)
    assert {tie, late} <= {r.rank for r in grouped.cross_rank.runs}
    assert_same_view(grouped, diagnose(tmp_path))
    # the order is what makes the sums exact: rank 1's sums on the late rank's times are
    # wrong (its first step's all-reduce and critical path cut at rank 1's GPU window: 0.5
    # and 0.95 ms where the late rank's own pipeline reads 0.601 and 1.051 ms)
    one = analyze(torch_profiler.load(tmp_path / "rank1.pt.trace.json"), step=grouped.cross_rank.runs[0].analysis.steps.name)
    ends = [ranks.read_times(tmp_path / f"rank{k}.pt.trace.json")[2] for k in (1, late)]
    assert len(ends[0]) == len(ends[1])
    frames, _, _ = ranks.group_steps(one, np.stack(ends))
    assert not frames[1].equals(grouped.cross_rank.per_step[late])


def test_grouped_path_numbers_and_reads_ranks_as_the_loader(tmp_path):
    """A trace without distributedInfo (numbered by file order, with a warning) and one
    with a launch whose duration is not a number (the loader drops that event; the grouped
    reader leaves the trace to it: analysed in full): the same ranks, warnings and view."""
    bench, n = _bench(), 8
    for k in range(n):
        trace = bench.rank_trace(k, n)
        if k == 2:
            del trace["distributedInfo"]
        if k == 5:
            trace["traceEvents"][2]["dur"] = "x"
        (tmp_path / f"rank{k}.pt.trace.json").write_text(json.dumps(trace))
    assert ranks.read_times(tmp_path / "rank5.pt.trace.json")[1] is None
    grouped, full = _grouped(tmp_path), diagnose(tmp_path)
    assert grouped.cross_rank.warnings == full.cross_rank.warnings and len(full.cross_rank.warnings) == 1
    assert 5 in {r.rank for r in grouped.cross_rank.runs}
    assert_same_view(grouped, full)
