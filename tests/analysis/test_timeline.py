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
from perfdoctor.analysis.timeline import device_idle, kernel_table, merged_gaps, span_gaps


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


def test_a_gap_filled_by_another_steps_kernel_is_no_gap() -> None:
    # step 0's own work leaves 120..160 empty, but step 1's kernel (another stream) runs
    # 130..150 inside it: the device idled only 120..130 and 150..160.
    step_gaps = merged_gaps(_acts([(110, 120, "A"), (160, 170, "C")]), np.array([0, 0]))
    device = merged_gaps(_acts([(110, 120, "A"), (130, 150, "B"), (160, 170, "C")]), np.zeros(3, dtype=np.int64))
    g = device_idle(step_gaps, device)
    assert g[["step", "start_ns", "end_ns", "length_ns", "before", "after", "window_start_ns"]].values.tolist() == [
        [0, 120, 130, 10, "A", "B", 110],
        [0, 150, 160, 10, "B", "C", 110],
    ]
    # two overlapping steps that share one idle piece count it once, in the earlier step
    both = merged_gaps(_acts([(110, 120, "A"), (160, 170, "C"), (100, 115, "X"), (200, 210, "Y")]), np.array([0, 0, 1, 1]))
    shared = device_idle(both, merged_gaps(_acts([(100, 120, "A"), (160, 170, "C"), (200, 210, "Y")]), np.zeros(3, dtype=np.int64)))
    assert shared[["step", "start_ns", "end_ns"]].values.tolist() == [[0, 120, 160], [1, 170, 200]]


def test_no_gap_is_longer_than_the_devices_longest_idle(tmp_path) -> None:
    # hta/negative_queue_length_values_check: five overlapping steps; each step's own work
    # leaves 147-155 ms holes that the other steps' work fills. The device's longest idle,
    # from the raw events (union of kernels, copies and memsets), bounds every gap.
    import gzip
    import json

    path = FIXTURES.parent.parent.parent / "shared" / "traces" / "hta" / "negative_queue_length_values_check__rank0.json.gz"
    if not path.exists():
        pytest.skip(f"{path.parent.parent} is absent (the shared real traces)")
    ev = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    t0 = min(e["ts"] for e in ev if "ts" in e)  # epoch-µs timestamps: shifted until the loader reads them
    for e in ev:
        if "ts" in e:
            e["ts"] -= t0
    shifted = tmp_path / "rank0.json"
    shifted.write_text(json.dumps({**json.loads(gzip.decompress(path.read_bytes())), "traceEvents": ev}))
    gpu = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    idle, reach = [], gpu[0][1]
    for s, e in gpu[1:]:
        if s > reach:
            idle.append((reach, s))
        reach = max(reach, e)
    longest_us = max(b - a for a, b in idle)
    assert 64.6e3 < longest_us < 64.7e3  # the traces README: 64.65 ms

    a = analyze(load_trace(shifted))
    g = a.timeline.gaps
    assert g["length_ns"].max() == pytest.approx(longest_us * 1e3, abs=1e3)
    # every gap is one of the device's idle intervals, and none is counted twice
    starts = np.array([x for x, _ in idle]) * 1e3
    ends = np.array([y for _, y in idle]) * 1e3
    k = np.clip(np.searchsorted(starts, g["start_ns"].to_numpy() - 1e3), 0, len(starts) - 1)  # idle is sorted
    assert np.abs(starts[k] - g["start_ns"].to_numpy()).max() <= 1e3
    assert np.abs(ends[k] - g["end_ns"].to_numpy()).max() <= 1e3
    assert not g.duplicated(["start_ns", "end_ns"]).any()
