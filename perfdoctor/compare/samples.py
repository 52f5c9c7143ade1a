"""Step-level samples of one run, and how far apart two runs' samples must be to be a change.

A metric such as ``step_latency_ms_p50`` is one number per run: no test can say whether its
change exceeds run-to-run noise. The per-step samples it summarises can be tested
(:func:`perfdoctor.compare.stats.compare_samples`: Mann-Whitney U and a bootstrap interval of the
median ratio), with a run-to-run noise floor per sample because the test sees only the
spread within each run. :data:`SAMPLED_METRICS` says which sample stands behind which metric.
"""

from __future__ import annotations

import numpy as np

from perfdoctor.analysis.metrics import Analysis
from perfdoctor.compare.stats import Comparison, compare_samples

# Which step-level sample each metric summarises, and whether the metric moves with the
# samples (+1: higher samples → higher metric) or against them (-1: steps_per_s falls when
# the completion interval grows). Metrics not listed are single numbers per run: their
# change is reported, but no test can say whether it exceeds run-to-run noise.
SAMPLED_METRICS: dict[str, tuple[str, int]] = {
    "step_latency_ms_p50": ("step_latency_ms", +1),
    "step_latency_ms_p90": ("step_latency_ms", +1),
    "step_latency_ms_p99": ("step_latency_ms", +1),
    "step_gpu_ms_p50": ("step_gpu_ms", +1),
    "steps_per_s": ("step_interval_ms", -1),
    "tokens_per_s": ("step_interval_ms", -1),
    "kernels_per_step": ("step_kernels", +1),
    "launches_per_step": ("launches_per_step", +1),
}

# Run-to-run noise floors per sample: a significant median shift within a factor
# 1 + floor either way is "no significant change" (see stats.compare_samples).
# Traced timings: two identical processes of the decode fixtures on the H200 differ by a
# factor 1.20 (graph: tests/fixtures/h200-decode-graph-10steps vs -rerun; cudaGraphLaunch
# took 1.5 vs 0.85 ms under CUPTI) and 1.28 (eager: h200-decode-eager-5steps vs -rerun) in
# median step latency, while each run's steps spread by a few percent: a within-run test
# alone calls tracer noise a change. Two pairs are little data: revisit with more. The
# light pass has no tracer, but it is one process too: on the H200 test machine a
# host-paced loop's median step differed by up to 1.65x between plain processes of one
# program (docs/performance.md, 2026-11-30), so its 5 % is meant for steps the GPU paces
# (a GPU-bound loop's plain processes spread 3.7 %, and its light pass matched them to
# 0.1 % in median); measure two bundles of your program on your runner and pass --noise-floor.
TRACED_NOISE_FLOOR = 0.30
LIGHT_NOISE_FLOOR = 0.05
SAMPLE_NOISE_FLOORS = {
    "step_latency_ms": TRACED_NOISE_FLOOR,
    "step_gpu_ms": TRACED_NOISE_FLOOR,
    "step_interval_ms": TRACED_NOISE_FLOOR,
    "light_step_latency_ms": LIGHT_NOISE_FLOOR,
    "step_kernels": 0.0,  # counts are exact: any significant shift is real
    "launches_per_step": 0.0,
}
LIGHT_SAMPLE = "light_step_latency_ms"
LIGHT_PREFIX = "light_"  # metric rows computed from the light timing pass

SAMPLE_UNITS = {
    "step_latency_ms": "ms",
    "step_gpu_ms": "ms",
    "step_interval_ms": "ms",
    "step_kernels": "count",
    "launches_per_step": "count",
    LIGHT_SAMPLE: "ms",
}


def step_samples(analysis: Analysis) -> dict[str, np.ndarray]:
    """Per-step samples of one run, keyed by the names in SAMPLED_METRICS, read from the
    analysis's timeline (:mod:`perfdoctor.analysis.timeline`).

    ``step_latency_ms``: the critical-path time (the contract's latency) — of the light
    pass's steady steps when the run has one, as the step latency metrics are, else traced;
    ``step_gpu_ms``: length of the step's GPU window; ``step_interval_ms``: time between
    consecutive step completions (what ``steps_per_s`` averages: the light pass's cadence
    intervals, pauses left out, where it gave that metric); ``step_kernels``: the
    kernels each step launched (its own GPU work, by correlation) — not ``kernels_per_step``,
    which also counts the kernels launched between the steps' ranges (every kernel starting in
    the profiled span: 452 against 408 per step on the demo's eager bundle), so a sample of its
    own name; ``launches_per_step``: the launch calls inside each step, as the metric counts them.
    The light timing pass of ``perfdoctor run``, when present, adds
    ``light_step_latency_ms``: its critical-path times over its steady state, the series the
    analysis computed its latency metrics from.
    """
    tl = analysis.timeline
    t, w = tl.steps, tl.with_gpu
    gpu_end = w["gpu_end_ns"].astype("int64").to_numpy()
    gpu_start = w["gpu_start_ns"].astype("int64").to_numpy()
    out = {
        "step_latency_ms": tl.critical_path_ms(),
        "step_gpu_ms": (gpu_end - gpu_start) / 1e6,
        "step_interval_ms": np.diff(np.sort(gpu_end)) / 1e6,
        "step_kernels": t["kernels"].to_numpy(dtype=float),
        "launches_per_step": t["launches"].to_numpy(dtype=float),
    }
    if analysis.light_series is not None:
        out[LIGHT_SAMPLE] = analysis.light_series.critical_path_ms
        # The step latency metrics come from the light pass (contract v2): test their
        # change on the samples they are computed from, not on the traced steps. So is
        # steps_per_s where the light pass gave it: its cadence's intervals (before, a
        # bundle without a trace read "inconclusive — need more steps" for 16 steps a side)
        out["step_latency_ms"] = out[LIGHT_SAMPLE]
        rate = analysis.metrics.get("steps_per_s")
        if rate is not None and rate.source == "light":
            out["step_interval_ms"] = analysis.light_series.cadence.intervals_ms
    return out


def compare_step_samples(before: dict[str, np.ndarray], after: dict[str, np.ndarray],
                         noise_floor: float | None = None) -> dict[str, Comparison]:
    """Significance of the change in each step-level sample both runs have
    (:func:`step_samples` of each).

    ``noise_floor`` overrides the per-sample floors of timing samples (counts keep 0).
    """
    out = {}
    for name in before:
        if name not in after:
            continue
        floor = SAMPLE_NOISE_FLOORS.get(name, 0.0)
        if noise_floor is not None and floor > 0:
            floor = noise_floor
        out[name] = compare_samples(before[name], after[name], noise_floor=floor)
    return out
