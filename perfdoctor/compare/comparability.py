"""Are two traces windows onto the same kind of work? The facts a diff must check first.

``perfdoctor diff`` compares two analyses number by number. That is only meaningful when
both measured the same kind of window: a trace whose "step" is the whole file (no step was
found) against one with tight steps gave "GPU idle 0.998 → 0.023, kernel time +53,103 %,
improved" where the real change was one 4 µs kernel removed. These facts, read from each
analysis, decide whether a verdict may be given at all:

``step_kind``      how the step was found: ``ProfilerStep#N``, ``named ranges``, ``serving
                   steps``, ``automatic`` or ``whole trace`` (no step: every ratio is over
                   the whole file)
``steps``          how many steps (reported, not compared: 5 eager steps against 10 graph
                   steps is an ordinary diff)
``step_coverage``  the fraction of the profiled span S — the span the ratio metrics
                   (``gpu_idle_ratio``, ``kernel_time_ratio``, ...) are computed over —
                   that lies inside a step's window (host start to the later of host end and
                   GPU end). Steps recorded back to back cover 95.5–100 % of S on every
                   fixture; a trace whose profiler window skipped steps (a schedule with
                   ``repeat``, a cropped file, ``perfdoctor run``'s traced windows) covers
                   less, and its idle ratio then counts the untraced time between the steps
                   as idle. The whole file is not the denominator: nsys records the whole
                   process (model load and warm-up), so only 3–18 % of an nsys file is
                   inside steps where the Kineto trace of the same program is 99 %.
``vendor``         NVIDIA / AMD / ... from the device name, else from the host API names
                   (``hip*`` calls are ROCm, ``cuda*`` / ``cu*`` are CUDA)
``world_size``     processes in the job (Kineto ``distributedInfo.world_size``; a trace
                   without it was not distributed: 1); unknown for nsys
``workload``       training or inference (:mod:`perfdoctor.analysis.workload`, or ``--workload``)

:func:`window_mismatches` says which of them differ in a way that makes numbers
meaningless. Vendor, world size, workload kind and a whole-trace window against steps make
the whole diff meaningless: *blocking* — the diff says "not comparable: ..." before any
verdict and gives none; ``perfdoctor gate`` refuses to judge (exit 2). Different step
coverage makes only the numbers computed over S meaningless (:data:`SPAN_METRICS`, unless
they came from the light timing pass, which has no span): those are "not comparable", the
per-step samples (step latency, kernels and launches per step) still are.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from perfdoctor.names import api as apinames
from perfdoctor.analysis.serving import STEP_NAME as SERVING_STEP
from perfdoctor.analysis.steps import AUTO_STEP, PROFILER_STEP_GLOB, union_ns

WHOLE_TRACE = "whole trace"

# Two coverages further apart than this are different windows. Back-to-back steps of the
# 20 traces in tests/fixtures cover 95.5–100 % of S, so two ordinary runs differ by at most
# 4.5 points; a window that skipped steps covers tens of points less.
COVERAGE_TOLERANCE = 0.10

# Metrics computed over the profiled span S (or its completion intervals), unless their
# source is the light timing pass: a different step coverage changes what they measure.
SPAN_METRICS = ("gpu_idle_ratio", "kernel_time_ratio", "memcpy_time_ratio", "memory_bubble_ratio", "steps_per_s", "tokens_per_s")

WINDOW_FIELDS = {
    "vendor": "different GPU vendors: the diff measures the hardware and its software stack, not your change",
    "world_size": "different world sizes: each rank does a different share of the job, not comparable",
    "workload": "different workload kinds: a training step and an inference step are different work (--workload sets one)",
    "step_kind": "the steps were found differently: the runs do not measure the same window",
    "step_coverage": "the steps cover different fractions of the profiled span: ratios such as gpu_idle_ratio "
    "count different windows",
}


def step_kind(analysis: Any) -> str:
    """How the analysis's steps were found, in one of five words (see the module docstring)."""
    steps = analysis.steps
    if steps.count == 0 or steps.name is None:
        return WHOLE_TRACE
    if steps.name == PROFILER_STEP_GLOB:
        return "ProfilerStep#N"
    if steps.name == SERVING_STEP:
        return "serving steps"
    if steps.name == AUTO_STEP:
        return "automatic"
    return "named ranges"


def step_coverage(analysis: Any) -> float | None:
    """Fraction of the profiled span S inside the steps' windows; None without steps."""
    steps = analysis.steps
    if steps.count == 0 or steps.span is None:
        return None
    lo, hi = steps.span
    if hi <= lo:
        return None
    t = steps.table
    host_end = t["host_end_ns"].to_numpy(np.int64)
    gpu_end = t["gpu_end_ns"].astype("float64").fillna(-1).to_numpy().astype(np.int64)
    ends = np.maximum(host_end, gpu_end)
    return union_ns(t["host_start_ns"].to_numpy(np.int64), ends, lo, hi) / (hi - lo)


_VENDORS = (("NVIDIA", ("nvidia", "tesla", "geforce", "quadro")), ("AMD", ("amd", "instinct", "radeon", "mi300", "mi250")),
            ("Intel", ("intel",)))


def vendor(profile: Any) -> str | None:
    """GPU vendor from the device name, else from the host API names; None when neither says."""
    name = (profile.device or {}).get("name")
    if isinstance(name, str):
        low = name.lower()
        for who, words in _VENDORS:
            if any(w in low for w in words):
                return who
    calls = profile.calls["name"] if not profile.calls.empty else None
    if calls is None:
        return None
    launches = calls[apinames.is_launch(calls)]
    if launches.empty:
        return None
    hip = launches.str.startswith("hip").mean()
    return "AMD" if hip > 0.5 else "NVIDIA"


def world_size(profile: Any) -> int | None:
    """Processes in the job: Kineto's ``distributedInfo.world_size``; 1 for a Kineto trace
    without it (torch.distributed not initialised); None when the tracer does not say (nsys)."""
    dist = profile.meta.get("distributed")
    if isinstance(dist, dict) and isinstance(dist.get("world_size"), int):
        return dist["world_size"]
    return 1 if profile.meta.get("source") == "kineto" else None


def window_facts(analysis: Any) -> dict[str, Any]:
    """The facts of :data:`WINDOW_FIELDS` (and the step count) of one analysis."""
    kind = analysis.workload.kind if analysis.workload is not None else None
    cov = step_coverage(analysis)
    return {
        "vendor": vendor(analysis.profile),
        "world_size": world_size(analysis.profile),
        "workload": kind if kind in ("training", "inference") else None,
        "step_kind": step_kind(analysis),
        "steps": analysis.steps.count,
        "step_coverage": None if cov is None else round(float(cov), 4),
    }


def _coverage_text(facts: dict[str, Any]) -> str:
    cov = facts.get("step_coverage")
    n = facts.get("steps", 0)
    if cov is None:
        return f"no steps ({facts.get('step_kind')})"
    return f"{cov:.1%} of the profiled span inside {n} step{'s' if n != 1 else ''}"


def window_mismatches(before: dict[str, Any], after: dict[str, Any]) -> list[tuple[str, Any, Any, str, tuple[str, ...]]]:
    """Differences between two :func:`window_facts` that make numbers meaningless:
    (field, before, after, message, metrics) — ``metrics`` empty when the whole diff is
    (blocking), else the metrics it makes not comparable (:data:`SPAN_METRICS`).

    A fact unknown on a side is not a mismatch (the caller lists it as unknown). The step
    kind blocks only when one side has no steps at all (a whole-trace window against
    steps); ProfilerStep#N against named ranges can be the same iteration, and a step name
    that differs is already said. Coverage is compared only when both sides have steps.
    """
    out = []
    for key in ("vendor", "world_size", "workload"):
        b, a = before.get(key), after.get(key)
        if b is not None and a is not None and b != a:
            out.append((key, b, a, WINDOW_FIELDS[key], ()))
    kb, ka = before.get("step_kind"), after.get("step_kind")
    if kb != ka and WHOLE_TRACE in (kb, ka):
        out.append(("step_kind", kb, ka, WINDOW_FIELDS["step_kind"] + " (one side has no steps: use --step NAME)", ()))
    cb, ca = before.get("step_coverage"), after.get("step_coverage")
    if cb is not None and ca is not None and abs(cb - ca) > COVERAGE_TOLERANCE:
        out.append(("step_coverage", _coverage_text(before), _coverage_text(after), WINDOW_FIELDS["step_coverage"], SPAN_METRICS))
    return out
