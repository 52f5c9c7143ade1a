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

Beyond the window, :func:`run_facts` reads what else must match from the trace and the
bundle — GPU model, driver, CUDA driver and runtime, torch, step name and tokens per step —
and :func:`check_comparable` compares both: any mismatch is a loud warning, because a diff
across different GPUs measures the GPUs, not the change; the GPU model blocks a verdict.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from perfdoctor.names import api as apinames
from perfdoctor.analysis.serving import STEP_NAME as SERVING_STEP
from perfdoctor.analysis.steps import AUTO_STEP, PROFILER_STEP_GLOB, union_ns
from perfdoctor.bundle.protocol import Manifest

if TYPE_CHECKING:
    from perfdoctor.pipeline import Diagnosis

WHOLE_TRACE = "whole trace"

# Two coverages further apart than this are different windows. Back-to-back steps of the
# 20 traces in tests/fixtures cover 95.5–100 % of S, so two ordinary runs differ by at most
# 4.5 points; a window that skipped steps covers tens of points less.
COVERAGE_TOLERANCE = 0.10

# Metrics computed over the profiled span S (or its completion intervals), unless their
# source is the light timing pass: a different step coverage changes what they measure.
SPAN_METRICS = ("gpu_idle_ratio", "kernel_time_ratio", "memcpy_time_ratio", "memory_bubble_ratio", "steps_per_s", "tokens_per_s")

# The facts of the window; why each mismatch matters is worded by perfdoctor.reports.diff_report.
WINDOW_FIELDS = ("vendor", "world_size", "workload", "step_kind", "step_coverage")


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
    dist = profile.origin.distributed
    if isinstance(dist.get("world_size"), int):
        return dist["world_size"]
    return 1 if profile.origin.source == "kineto" else None


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


@dataclass(frozen=True)
class Coverage:
    """A side of a step-coverage mismatch: the fraction of the profiled span inside its steps."""

    fraction: float
    steps: int


def window_mismatches(before: dict[str, Any], after: dict[str, Any]) -> list[tuple[str, Any, Any, tuple[str, ...]]]:
    """Differences between two :func:`window_facts` that make numbers meaningless:
    (field, before, after, metrics) — ``metrics`` empty when the whole diff is
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
            out.append((key, b, a, ()))
    kb, ka = before.get("step_kind"), after.get("step_kind")
    if kb != ka and WHOLE_TRACE in (kb, ka):
        out.append(("step_kind", kb, ka, ()))
    cb, ca = before.get("step_coverage"), after.get("step_coverage")
    if cb is not None and ca is not None and abs(cb - ca) > COVERAGE_TOLERANCE:
        out.append(("step_coverage", Coverage(cb, before.get("steps", 0)), Coverage(ca, after.get("steps", 0)), SPAN_METRICS))
    return out


# --------------------------------------------------------------------------- like for like


def run_facts(run: Diagnosis) -> dict[str, Any]:
    """What must match for two runs to be comparable, from the trace and the bundle.

    Sources: the trace header (Kineto ``deviceProperties``, ``cuda_driver_version``,
    ``cuda_runtime_version``; nsys ``TARGET_INFO_GPU``) via ``profile.device`` and
    ``profile.origin.versions``; for a run bundle also the manifest's ``gpu`` (NVML:
    driver build) and the torch version the bootstrap saw (``raw/<pass>.json``).
    ``driver`` is the NVML driver build ("580.95.05"); ``cuda_driver`` the CUDA API version
    the driver supports (13000): different facts, compared separately.
    """
    profile, steps = run.profile, run.analysis.steps
    versions = profile.origin.versions or {}
    device = profile.device
    man = run.manifest or Manifest()
    declared = (profile.origin.declared or {}).get(steps.name or "", {})
    window = window_facts(run.analysis)  # vendor, world size, workload, the steps' window
    if man.world_size:  # a multi-rank bundle's manifest knows its ranks even where its traces do not say
        window["world_size"] = man.world_size
    return window | {
        "gpu": device.get("name"),
        "driver": device.get("driver_version"),
        "cuda_driver": versions.get("cuda_driver_version") or device.get("cuda_driver_version"),
        "cuda_runtime": versions.get("cuda_runtime_version") or run.pass_env.get("cuda"),
        "torch": versions.get("torch") or run.pass_env.get("torch"),
        "step_name": steps.name,
        "tokens_per_step": _tokens_per_step(run, declared),
    }


def _tokens_per_step(run: Diagnosis, declared: dict[str, Any]) -> float | None:
    tps = run.analysis.metrics.get("tokens_per_s")
    sps = run.analysis.metrics.get("steps_per_s")
    if tps is not None and tps.value is not None and sps is not None and sps.value:
        return tps.value / sps.value  # honours --tokens-per-step overrides as well
    return declared.get("tokens")


@dataclass
class Mismatch:
    """A fact that differs between the runs (its field says why it matters:
    :func:`perfdoctor.reports.diff_report.mismatch_why` words it)."""

    field: str
    before: Any  # the fact's value; a Coverage for step_coverage
    after: Any
    blocking: bool = False  # the runs are not comparable: no verdict (perfdoctor.compare.comparability)
    metrics: tuple[str, ...] = ()  # not blocking, but these metrics are not comparable (different step coverage)


@dataclass(frozen=True)
class UnknownFact:
    """A fact known on one side only (None: unknown), said rather than assumed equal."""

    field: str
    before: Any
    after: Any


COMPARABILITY_FIELDS = ("gpu", "driver", "cuda_driver", "cuda_runtime", "torch", "step_name", "tokens_per_step")


# Mismatches of these fields make the runs not comparable (blocking), the others warn.
BLOCKING_FIELDS = frozenset({"gpu"}) | frozenset(WINDOW_FIELDS) - {"step_coverage"}


def check_comparable(fb: dict[str, Any], fa: dict[str, Any]) -> tuple[list[Mismatch], list[UnknownFact]]:
    """Mismatched facts of two runs (their :func:`run_facts`), and facts unknown on one or
    both sides (said, not assumed equal).

    Blocking mismatches (:data:`BLOCKING_FIELDS`) come first: the window facts of
    :func:`window_mismatches`, then the GPU model.
    """
    mismatches = [Mismatch(k, b, a, blocking=not keys, metrics=keys) for k, b, a, keys in window_mismatches(fb, fa)]
    unknown = []
    for key in ("vendor", "world_size", *COMPARABILITY_FIELDS):
        b, a = fb.get(key), fa.get(key)
        if (b is None) != (a is None):
            unknown.append(UnknownFact(key, b, a))
    for key in COMPARABILITY_FIELDS:
        b, a = fb.get(key), fa.get(key)
        if b is None or a is None:
            continue
        if isinstance(b, float) or isinstance(a, float):
            same = np.isclose(float(b), float(a), rtol=1e-6)
        else:
            same = str(b) == str(a)
        if not same:
            mismatches.append(Mismatch(key, b, a, blocking=key in BLOCKING_FIELDS))
    mismatches.sort(key=lambda m: (not m.blocking, not m.metrics))
    return mismatches, unknown
