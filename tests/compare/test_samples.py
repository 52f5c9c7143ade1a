"""compare/samples.py: the per-step samples a diff tests, and which metric each stands behind.

The shipped demo bundles (perfdoctor/demo/data, recorded on an H200 by scripts/record-demo)
have a light timing pass; the H200 eager trace has none.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES
from perfdoctor.compare.samples import LIGHT_SAMPLE, SAMPLE_NOISE_FLOORS, SAMPLE_UNITS, SAMPLED_METRICS, compare_step_samples, step_samples
from perfdoctor.pipeline import diagnose

import perfdoctor.demo.data

DEMO = Path(perfdoctor.demo.data.__file__).parent
EAGER5 = FIXTURES / "h200-llama1b-eager-5steps.kineto.json.gz"


@pytest.fixture(scope="module")
def graph():
    return diagnose(DEMO / "graph", rules=None)


def test_every_sample_has_a_unit_and_a_noise_floor() -> None:
    samples = {s for s, _ in SAMPLED_METRICS.values()} | {LIGHT_SAMPLE}
    assert samples == set(SAMPLE_UNITS) == set(SAMPLE_NOISE_FLOORS)


def test_latency_samples_are_the_series_the_metrics_came_from(graph) -> None:
    """A light pass: the latency samples are the analysis's steady series, not a second cut of it."""
    s = step_samples(graph.analysis)
    assert s[LIGHT_SAMPLE] is graph.analysis.light_series.critical_path_ms
    assert s["step_latency_ms"] is s[LIGHT_SAMPLE]
    assert graph.analysis.value("step_latency_ms_p50") == pytest.approx(float(np.percentile(s[LIGHT_SAMPLE], 50)))


def test_the_rate_sample_is_the_series_the_rate_came_from(graph) -> None:
    """steps_per_s from the light pass: its sample is the light pass's counted intervals,
    whose count over their sum is the rate (before: the traced steps' completions, none in
    a bundle without a trace: "inconclusive — need more steps" for 16 steps a side)."""
    a = graph.analysis
    s = step_samples(a)
    assert a.metrics["steps_per_s"].source == "light"
    intervals = s["step_interval_ms"]
    assert intervals.size == a.light_series.cadence.intervals == len(a.light_series.critical_path_ms) - 1 - a.light_series.cadence.pauses
    assert a.value("steps_per_s") == pytest.approx(intervals.size / (intervals.sum() / 1e3), rel=1e-9)


def test_a_trace_without_a_light_pass_has_traced_samples() -> None:
    a = diagnose(EAGER5, step="decode_step", rules=None).analysis
    s = step_samples(a)
    assert LIGHT_SAMPLE not in s and a.light_series is None
    assert len(s["step_latency_ms"]) == a.steps.count == 5
    assert s["launches_per_step"].mean() == pytest.approx(a.value("launches_per_step"))


def test_counts_have_no_noise_floor_even_when_the_user_sets_one(graph) -> None:
    s = step_samples(graph.analysis)
    c = compare_step_samples(s, s, noise_floor=0.5)
    assert c["launches_per_step"].noise_floor == 0.0
    assert c["step_gpu_ms"].noise_floor == 0.5


def test_step_kernels_is_the_steps_own_work_not_kernels_per_step(graph) -> None:
    """kernels_per_step counts every kernel in the profiled span, those launched between the
    steps' ranges too; the sample counts each step's own kernels, under its own name."""
    s, a = step_samples(graph.analysis), graph.analysis
    assert "kernels_per_step" not in s
    assert s["step_kernels"].sum() == a.timeline.steps["kernels"].sum()
    assert s["step_kernels"].mean() < a.value("kernels_per_step")  # the demo's decode loop launches work between steps
    assert SAMPLED_METRICS["kernels_per_step"] == ("step_kernels", +1)
