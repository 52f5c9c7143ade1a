"""timeline.py: the one gap algorithm (step and span scope) and the kernel table, checked
by hand on small tables and against the union time on a real H200 trace."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from conftest import FIXTURES
from perfdoctor.pipeline import load_trace
from perfdoctor.analysis.metrics import analyze
from perfdoctor.analysis.steps import union_ns
from perfdoctor.analysis.timeline import kernel_table, merged_gaps, span_gaps


def _acts(rows: list[tuple[int, int, str]]) -> pd.DataFrame:
    return pd.DataFrame(
        {"start_ns": [r[0] for r in rows], "end_ns": [r[1] for r in rows], "name": [r[2] for r in rows], "correlation": list(range(len(rows)))}
    )


def test_gaps_by_hand_with_overlapping_streams_and_two_steps() -> None:
    # step 0: A [0,10) and, on another stream, B [2,5) inside it; C [14,20): one gap 10..14.
    # step 1: D [30,40), E [45,50): one gap 40..45. Nothing between steps (scope "step").
    acts = _acts([(0, 10, "A"), (2, 5, "B"), (14, 20, "C"), (30, 40, "D"), (45, 50, "E")])
    g = merged_gaps(acts, np.array([0, 0, 0, 1, 1]))
    assert g[["step", "start_ns", "end_ns", "length_ns", "before", "after"]].values.tolist() == [
        [0, 10, 14, 4, "B", "C"],
        [1, 40, 45, 5, "D", "E"],
    ]
    assert g["window_start_ns"].tolist() == [0, 30]
    # scope "span": one group, the 10 ns between the steps is a gap too
    s = merged_gaps(acts, np.zeros(5, dtype=np.int64))
    assert s["length_ns"].tolist() == [4, 10, 5]


def test_span_gaps_add_up_to_the_idle_time_of_a_real_trace() -> None:
    p = load_trace(FIXTURES / "h200-decode-graph-10steps.kineto.json.gz")
    a = analyze(p)
    lo, hi = a.steps.span
    busy = union_ns(p.activities["start_ns"].to_numpy(), p.activities["end_ns"].to_numpy(), lo, hi)
    gaps = span_gaps(p, a.steps.span)
    assert int(gaps["length_ns"].sum()) == (hi - lo) - busy
    # the step-scope gaps are the part of it inside the steps' GPU windows
    assert int(a.timeline.gaps["length_ns"].sum()) == int(a.timeline.steps["idle_ns"].sum())
    assert a.value("gpu_idle_ratio") == pytest.approx(gaps["length_ns"].sum() / (hi - lo), rel=1e-12)


def test_kernel_table_by_hand() -> None:
    acts = pd.DataFrame(
        {
            "kind": ["kernel", "kernel", "kernel", "memcpy"],
            "name": ["void gemm_kernel<1>(int)", "void gemm_kernel<2>(int)", "softmax_warp_forward", "Memcpy DtoD"],
            "start_ns": [0, 100, 300, 400],
            "end_ns": [50, 250, 310, 900],
        }
    )
    k = kernel_table(acts, steps=2)
    assert k["kernel"].tolist() == ["gemm_kernel", "softmax_warp_forward"]  # both gemm instantiations, one label
    assert k["count"].tolist() == [2, 1] and k["total_ns"].tolist() == [200, 10]
    assert k["ms_per_step"].tolist() == [pytest.approx(100e-6), pytest.approx(5e-6)]
    assert k["share"].tolist() == [pytest.approx(200 / 210), pytest.approx(10 / 210)]
    assert k["family"].tolist() == ["gemm", "softmax"]
