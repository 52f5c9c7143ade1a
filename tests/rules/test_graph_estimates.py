"""Issue 28: on graph-replayed steps, launch-rate wins only the idle between the graph's own
kernels (one graph launch per step is the floor short of a megakernel) and launches-per-step
the idle next to the eager work beside the graphs: the two estimates split the launch gaps,
and neither tells a graph-replayed step to capture a CUDA graph.

The hand count reads the demo graph engine's raw Kineto events: kernels a cudaGraphLaunch
replayed share its correlation id; a gap is inside a replay when the activities on both
sides of it are such kernels."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from perfdoctor.pipeline import diagnose
from perfdoctor.rules.estimates import Gaps, beside_graph_gaps, graph_replay_gaps, idle_between_kernels

ROOT = Path(__file__).resolve().parents[2]
GRAPH = ROOT / "perfdoctor" / "demo" / "data" / "graph"


@pytest.fixture(scope="module")
def graph():
    return diagnose(GRAPH)


def _hand_inside_replay_ms(d) -> float:
    """Median over steps of the gaps between two consecutive GPU activities both replayed."""
    with gzip.open(GRAPH / "raw" / "torch-trace.json.gz", "rt") as fh:
        events = json.load(fh)["traceEvents"]
    replays = {e["args"]["correlation"] for e in events if e.get("cat") == "cuda_runtime" and e["name"] == "cudaGraphLaunch"}
    gpu = sorted((e["ts"], e["ts"] + e["dur"], e["args"].get("correlation") in replays) for e in events
                 if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    origin = d.profile.origin.time_origin_ns or 0  # the Profile's ns are after this trace time
    steps = d.analysis.timeline.with_gpu
    per_step = []
    for row in steps.itertuples():
        lo, hi = (row.gpu_start_ns - origin) / 1e3, (row.gpu_end_ns - origin) / 1e3  # µs, the raw events' unit
        mine = [g for g in gpu if lo <= g[0] and g[1] <= hi]
        per_step.append(sum(max(0.0, b[0] - a[1]) for a, b in zip(mine, mine[1:]) if a[2] and b[2]) / 1e3)
    return float(np.median(per_step))


def test_inside_replay_gaps_against_a_hand_count(graph):
    got = graph_replay_gaps(graph.analysis, None, {"residual_gap_us": 0.0}, {})
    assert got.how.gaps is Gaps.IN_REPLAY
    uncapped = got.how.ms
    assert uncapped == pytest.approx(_hand_inside_replay_ms(graph), rel=0.02)


def test_the_two_estimates_split_the_launch_gaps(graph):
    """With no residual and no cap, inside + beside = every launch gap (medians of per-step
    sums need not add, so the check is on the per-gap masks through the mean of one step)."""
    a = graph.analysis
    whole = idle_between_kernels(a, None, {"residual_gap_us": 0.0}, {}).ms_per_step
    inside = graph_replay_gaps(a, None, {"residual_gap_us": 0.0}, {}).ms_per_step
    beside = beside_graph_gaps(a, None, {"residual_gap_us": 0.0}, {}).ms_per_step
    assert inside > 0 and beside > 0
    assert inside <= whole + 1e-12 and beside <= whole + 1e-12


def test_graphed_steps_are_not_told_to_capture_a_graph(graph):
    for f in graph.findings:
        if f.rule_id in ("launch-rate", "launches-per-step") and f.status == "fail":
            assert "replay" in f.title.lower() or "beside" in f.title.lower(), f.title
            assert not any(s.startswith("Capture the") for s in f.remediation.steps), f.rule_id
    rate = next(f for f in graph.findings if f.rule_id == "launch-rate")
    assert rate.estimate_kind == "graph_replay_gaps"
    lps = next(f for f in graph.findings if f.rule_id == "launches-per-step")
    assert lps.estimate_kind == "beside_graph_gaps"
