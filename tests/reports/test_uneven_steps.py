"""The mean step beside the median when the light pass's steps are uneven (a training loop
that waits for its DataLoader every few iterations): a program's own "ms per iteration" is
a mean, and the report must give the number it can be checked against. And a warning when
the traced steps ran much faster than the untraced ones: the window is another regime."""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path

from perfdoctor import pipeline
from perfdoctor.analysis.metrics import FASTER_TRACE, SLOWER_TRACE
from perfdoctor.reports.summary import UNEVEN, header_lines, trace_window_lines, uneven_steps_lines

DATA = Path(pipeline.__file__).parent / "demo" / "data"  # the recorded H200 bundles


def with_rate(analysis, steps_per_s: float):
    """The demo's analysis with another untraced step rate (the median left as measured)."""
    m = analysis.metrics["steps_per_s"]
    analysis.metrics["steps_per_s"] = dataclasses.replace(m, value=steps_per_s)
    return analysis


def test_even_steps_say_nothing_and_uneven_ones_give_the_mean():
    analysis = pipeline.diagnose(DATA / "eager").analysis
    p50 = analysis.value("step_latency_ms_p50")
    rate = analysis.value("steps_per_s")
    assert analysis.light is not None and p50 and rate
    # The recorded eager engine: its median and its mean (1 / rate) within UNEVEN of each other.
    assert abs(1e3 / rate / p50 - 1) <= UNEVEN
    assert uneven_steps_lines(analysis) == []
    # Mean 1.47x the median, as train_loop.py with 4 workers on the H200 (46.7 vs 68.8 ms).
    lines = uneven_steps_lines(with_rate(analysis, 1e3 / (p50 * 1.47)))
    assert len(lines) == 1
    assert f"median {p50:.3g} ms" in lines[0] and f"mean {p50 * 1.47:.3g} ms" in lines[0]


def test_a_trace_alone_gets_no_line():
    # Traced steps are stretched by the tracer: the program's untimed loop is not comparable.
    from conftest import FIXTURES

    analysis = pipeline.diagnose(FIXTURES / "h200-decode-eager-5steps.kineto.json.gz").analysis
    cp = analysis.timeline.critical_path_ms()
    assert abs(statistics.fmean(cp) / statistics.median(cp) - 1) > UNEVEN  # uneven, yet
    assert analysis.light is None and uneven_steps_lines(analysis) == []


def test_a_trace_window_faster_than_the_untraced_steps_is_named():
    analysis = pipeline.diagnose(DATA / "eager").analysis
    ratio = analysis.metrics["profiler_overhead_ratio"]
    assert ratio.value > 1 and trace_window_lines(analysis) == []  # the recorded eager engine: the tracer adds time
    # prefetch_train.py on the H200 (2026-12-05): its window took the batches its producer made
    # during the slow first iteration, 22.5 ms traced against 59.2 ms untraced
    light = analysis.value("step_latency_ms_p50")
    analysis.metrics["profiler_overhead_ratio"] = dataclasses.replace(ratio, value=0.38)
    traced = analysis.metrics["traced_step_latency_ms_p50"]
    analysis.metrics["traced_step_latency_ms_p50"] = dataclasses.replace(traced, value=0.38 * light)
    (line,) = trace_window_lines(analysis)
    assert line.startswith("trace window: its steps took 0.38x") and f"p50 {0.38 * light:.3g} ms against {light:.3g} ms" in line
    assert line in header_lines(analysis)
    analysis.metrics["profiler_overhead_ratio"] = dataclasses.replace(ratio, value=FASTER_TRACE + 0.01)
    assert trace_window_lines(analysis) == []


def test_a_trace_window_far_slower_than_a_tracer_makes_it_is_named():
    # diffusers' DDPMPipeline on the 2-CPU VM (2026-12-06): its traced window ran 988 ms steps
    # while another process took the cores, the light pass's steady steps 13.4 ms
    analysis = pipeline.diagnose(DATA / "eager").analysis
    ratio, traced = analysis.metrics["profiler_overhead_ratio"], analysis.metrics["traced_step_latency_ms_p50"]
    light = analysis.value("step_latency_ms_p50")
    analysis.metrics["profiler_overhead_ratio"] = dataclasses.replace(ratio, value=988 / 13.4)
    analysis.metrics["traced_step_latency_ms_p50"] = dataclasses.replace(traced, value=988 / 13.4 * light)
    (line,) = trace_window_lines(analysis)
    assert line.startswith("trace window: its steps took 73.7x") and "more than a tracer adds" in line
    assert line in header_lines(analysis)
    analysis.metrics["profiler_overhead_ratio"] = dataclasses.replace(ratio, value=SLOWER_TRACE - 0.01)  # a tracer's worst
    assert trace_window_lines(analysis) == []
