"""A folder of many ranks (issue 30 item 9) against the single-rank pipeline run on each rank.

The reference any faster multi-rank path must reproduce: each rank loaded and analysed on
its own (``analyze`` on the step the first rank uses), the cross-rank metrics added, the
rule packs evaluated. ``diagnose_ranks`` on the folder must give, per rank, the same
analysis JSON, the same findings and the same per-step communication table, and the
cross-rank view (table, straggler, metrics) must be the one built from those independent
runs. Exact equality: both sides do the same float operations on the same inputs.

The folder: 12 ranks of ``bench/many_ranks.py``'s small trace (5 steps, a GEMM and an
all-reduce each), with different all-reduce times per rank, one straggler (a longer GEMM)
and one rank of a different structure (an extra elementwise kernel per step).
"""

import importlib.util
import json
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from perfdoctor.analysis.metrics import analyze
from perfdoctor.analysis.ranks import collective_table, diagnose_ranks, find_straggler, rank_steps
from perfdoctor.collectors import torch_profiler
from perfdoctor.pipeline import load_ruleset
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
    return diagnose_ranks(folder)


@pytest.fixture(scope="module")
def alone(folder, together):
    """Each rank through the single-trace pipeline, the cross-rank metrics added before the rules."""
    ruleset = load_ruleset((), ())
    cross = together.view.metrics()
    out = {}
    step = None
    for k in range(RANKS):
        a = analyze(torch_profiler.load(folder / f"rank{k}.pt.trace.json"), step=step)
        step = step or a.steps.name
        per, source = rank_steps(a)
        coll = collective_table(a)
        a.metrics.update({key: replace(m) for key, m in cross.items()})
        out[k] = (a, per, source, coll, evaluate(ruleset, a))
    return out


def test_the_folder_has_a_straggler_and_an_odd_rank(together):
    assert [r.rank for r in together.view.runs] == list(range(RANKS))
    assert together.view.straggler is not None and together.view.straggler.rank == STRAGGLER
    table = together.view.table().set_index("rank")
    assert table.loc[ODD, "busy_ms_p50"] != table.loc[0, "busy_ms_p50"]  # the extra kernel counts as work


def test_per_rank_analysis_and_findings_equal_the_single_rank_pipeline(together, alone):
    per_rank = together.view.to_json()["per_rank"]
    for k, (a, _, _, _, findings) in alone.items():
        assert per_rank[str(k)] == json.loads(json.dumps(a.to_json())), f"rank {k}"
        assert [f.to_json() for f in together.findings[k]] == [f.to_json() for f in findings], f"rank {k}"


def test_per_step_tables_and_cross_rank_view_equal_the_single_rank_pipeline(together, alone):
    view = together.view
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
