"""Programs with no module and no range, traced whole on an H100 (tests/fixtures/wild,
kmeans_fit.py): the automatic step is the loop iteration, and a loop that waits for the GPU
at each of its turns is named and batched, not graphed."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import FIXTURES
from perfdoctor.analysis.metrics import analyze
from perfdoctor.pipeline import load_trace
from perfdoctor.rules.engine import evaluate, load_rules
from perfdoctor.rules.signals import sync_loop_turns

WILD = FIXTURES / "wild"


def _facts(name: str) -> dict:
    return json.loads((WILD / f"{name}.facts.json").read_text())


def test_three_fits_of_k_means_step_once_per_iteration_at_the_programs_own_time() -> None:
    facts = _facts("kmeans-scatter")
    a = analyze(load_trace(WILD / "h100-kmeans-scatter.kineto.json.gz"))
    # one fit's run of iterations (the longest stretch), its first and last left at the edges;
    # before 5641487: 3 steps, one per fit (175 ms)
    assert a.steps.how.endswith(f"{facts['syncs_per_iteration']} sync-delimited parts per step")
    assert facts["iterations"][0] - 2 <= a.steps.count <= facts["iterations"][0]
    assert a.metrics["step_latency_ms_p50"].value == pytest.approx(facts["ms_per_step_traced"], rel=0.05)
    assert sync_loop_turns(a).value == 1  # three different waits per iteration: no loop of them


def test_a_nonzero_per_cluster_is_a_loop_that_waits_and_the_advice_batches_it() -> None:
    facts = _facts("kmeans-per-cluster")
    a = analyze(load_trace(WILD / "h100-kmeans-per-cluster.kineto.json.gz"))
    assert a.steps.how.endswith(f"{facts['syncs_per_iteration']} sync-delimited parts per step")
    assert a.metrics["step_latency_ms_p50"].value == pytest.approx(facts["ms_per_step_traced"], rel=0.05)
    # every cluster's turn alike but the first, which also launches the distances and the centres' clone
    assert sync_loop_turns(a).value == facts["clusters"] - 1
    per_step = np.asarray(a.timeline.steps["critical_path_ns"]) / 1e6
    assert np.median(per_step) == pytest.approx(a.metrics["step_latency_ms_p50"].value)
    findings = {f.rule_id: f for f in evaluate(load_rules(), a)}
    bubbles = findings["memory-bubbles"]
    assert bubbles.status == "fail" and "Python loop that waits for the GPU at every turn" in bubbles.remediation.steps[0]
    assert not any("Capture the step in a CUDA graph" in s for s in bubbles.remediation.steps)
    assert "index_add_" in bubbles.remediation.snippet and "reduce-overhead" not in bubbles.remediation.snippet
    assert "turns of one loop" in findings["host-syncs"].remediation.steps[0]
