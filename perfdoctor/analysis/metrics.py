"""Metrics: pure functions from a Profile to the numbers in the metric contract.

Every key of ``shared/design/metrics.md`` is computed here, one small function per
question, each returning a :class:`Metric` with its value, unit and source — or ``None``
with the reason it could not be computed. A missing number is said, never guessed and
never 0. No I/O and no torch import: analysing a trace on a laptop stays fast.

Contract v2 (``perfdoctor.metrics/2``): step latency is the critical-path time; when the
Profile carries the light (untraced) pass of ``perfdoctor run`` (``profile.light``), that
pass is the source of truth for time — step latency, host lead, steps/s, tokens/s — over
its steady state, and the trace supplies what tracing does not distort (GPU busy time per
step, counts, kernels). No metric is ever NaN or infinite: such a value is absent with a
reason. Every per-step number comes from the one derived-table layer,
:mod:`perfdoctor.analysis.timeline`, built once here and kept on the Analysis.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Any, Callable

import numpy as np
import pandas as pd

from perfdoctor.analysis import attribution as attributions
from perfdoctor.analysis import bounds as kernel_bounds
from perfdoctor.analysis import capture
from perfdoctor.analysis import cpu as cpus

from perfdoctor.analysis import comms

from perfdoctor.analysis import serving

from perfdoctor.analysis import steady
from perfdoctor.analysis import workload as workloads
from perfdoctor.names.codes import equals
from perfdoctor.profile import LightSteps, Profile
from perfdoctor.analysis.steps import Steps, find_steps, is_launch, is_sync, no_trace, union_ns
from perfdoctor.analysis.timeline import Timeline, build
from perfdoctor.analysis.timeline import union_per_group as timeline_union
from perfdoctor.text import count, num, percent, times, value

SCHEMA = "perfdoctor.metrics/2"
# Above this traced/untraced step-time ratio the tracer visibly stretched host gaps: the
# metrics made of them are corrected with the light pass or carry a note.
OVERHEAD_NOTE_RATIO = 1.2
# The traced steps shorter than this share of the untraced ones: the trace window is not the
# steady state. A tracer adds time (profiler_overhead_ratio 1.03-2.32 for ten of twelve real
# programs on the H200, 2026-12-05); the other two traced another regime: prefetch_train.py's
# window took the batches its producer made during the first, slow iteration (9 ms steps
# among 85-90 ms ones: 0.38), and paced_infer.py's frames, late after the profiler's 3.7 s
# start, ran back to back without their sleeps (0.59).
FASTER_TRACE = 0.7
# The traced steps longer than this many times the untraced ones: more than a tracer adds (a
# loop of ~2 us CPU ops, the tracer's worst case, reads ~4-5x), so the window ran in another
# regime. diffusers' DDPMPipeline on the 2-CPU VM, its torch threads fighting another
# process for the cores: the window's steps 988 ms, the light pass's steady ones 13.4 ms
# (74x), and the CPU breakdown described the stall with no word of it.
SLOWER_TRACE = 10.0

# A counter source and the model differing by more than this (absolute, in utilisation)
# are both shown: neither is dropped silently.
BW_DISAGREE = 0.05
# A first traced step this much slower than the median is pointed out (never dropped).
SLOW_FIRST_STEP = steady.WARMUP_FACTOR
SHORT_KERNEL_NS = 10_000

# unit and direction of each key: True = higher is better, False = lower is better,
# None = neither (a count that describes the workload).
METRICS: dict[str, tuple[str, bool | None]] = {
    "steps": ("count", None),
    "gpu_idle_ratio": ("ratio", False),
    "kernel_time_ratio": ("ratio", True),
    "memcpy_time_ratio": ("ratio", False),
    "kernels_per_step": ("count", False),
    "launches_per_step": ("count", False),
    "launch_rate_per_s": ("1/s", False),
    "short_kernel_ratio": ("ratio", False),
    "step_latency_ms_p50": ("ms", False),
    "step_latency_ms_p90": ("ms", False),
    "step_latency_ms_p99": ("ms", False),
    "step_gpu_ms_p50": ("ms", False),
    "host_lead_ms_p50": ("ms", None),
    "host_before_gpu_ms_p50": ("ms", False),
    "host_before_gpu_ratio": ("ratio", False),
    "slow_step_time_ratio": ("ratio", False),
    "traced_step_latency_ms_p50": ("ms", False),
    "steps_per_s": ("1/s", True),
    "tokens_per_s": ("1/s", True),
    "sync_calls_per_step": ("count", False),
    "pageable_memcpy_bytes": ("bytes", False),
    "achieved_occupancy_est": ("ratio", True),
    "dram_bw_util": ("ratio", True),
    "sm_occupancy": ("ratio", True),
    "memory_bubble_ratio": ("ratio", False),
    "l2_hit_rate": ("ratio", True),
    "warp_exec_efficiency": ("ratio", True),
    "peak_dram_bw_gbps": ("GB/s", None),
    "profiler_overhead_ratio": ("x", False),  # traced / untraced step time: a multiple (1.10x), not a share
    "throttle_time_ratio": ("ratio", False),
    "comm_time_ratio": ("ratio", False),
    "comm_overlap_ratio": ("ratio", True),
    "exposed_comm_ms_per_step": ("ms", False),
    "collectives_per_step": ("count", None),
    "mean_collective_us": ("us", True),
    "queue_delay_ms_p50": ("ms", False),
    "capture_trace": ("flag", None),
    "steps_graphed": ("flag", None),
}
METRIC_UNITS = {k: unit for k, (unit, _) in METRICS.items()}
HIGHER_IS_BETTER = {k: better for k, (_, better) in METRICS.items()}

NCU_DRAM_READ = "dram__bytes_read.sum"
NCU_DRAM_WRITE = "dram__bytes_write.sum"
NCU_OCCUPANCY = "sm__warps_active.avg.pct_of_peak_sustained_active"
NCU_L2_HIT = "lts__t_sector_hit_rate.pct"
NCU_WARP_EFF = "smsp__thread_inst_executed_per_inst_executed.ratio"


@dataclass
class Metric:
    """One number with its unit and where it came from; ``value`` None means absent (see ``reason``)."""

    value: float | None
    unit: str
    source: str
    reason: str | None = None
    note: str | None = None
    # other sources of the same quantity that disagree with ``value`` (dram_bw_util):
    # [{"value": 0.61, "source": "nvml-gpm"}]
    alternatives: list[dict[str, Any]] | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None or k == "value"}


def finite_or_absent(m: Metric, what: str = "the value") -> Metric:
    """``m`` unchanged when its value is finite; else absent with a reason (NaN and
    infinity are never written, shown or compared with a threshold)."""
    if m.value is None or np.isfinite(m.value):
        return m
    return Metric(None, m.unit, m.source, reason=m.reason or f"{what} is not a finite number ({m.value!r})", note=m.note)


@dataclass
class Analysis:
    """The metrics of one Profile, with the steps they were computed over."""

    metrics: dict[str, Metric]
    steps: Steps
    profile: Profile = field(repr=False)
    timeline: Timeline = field(repr=False, default=None)  # type: ignore[assignment]
    light: LightSteps | None = field(repr=False, default=None)  # the light pass, when it timed these steps
    # its steady state, the series the latency metrics were computed from (diff tests their change on it)
    light_series: steady.SteadySeries | None = field(repr=False, default=None)
    # training / inference / unknown with its evidence (perfdoctor.analysis.workload), a fact of the trace
    workload: workloads.Workload | None = field(default=None)
    # capture / replay / eager (perfdoctor.analysis.capture): a capture trace is not judged on timing
    graph_state: capture.GraphState | None = field(repr=False, default=None)

    def __post_init__(self) -> None:
        # Built once by analyze(); rebuilt only for an Analysis made with other steps
        # (dataclasses.replace(analysis, steps=...)), so the tables always match the steps.
        if self.timeline is None or self.timeline.built_from is not self.steps:
            self.timeline = build(self.profile, self.steps)
        if self.workload is None:
            self.workload = workloads.classify(self.profile)
        if self.graph_state is None:
            self.graph_state = capture.trace_state(self.profile)

    @cached_property
    def attribution(self) -> attributions.Attribution:
        """Where each step's time went (:mod:`perfdoctor.analysis.attribution`), computed once on first use."""
        return attributions.attribute(self)

    @cached_property
    def bounds(self) -> kernel_bounds.Bounds:
        """What bounds each kernel class (:mod:`perfdoctor.analysis.bounds`), computed once on first use."""
        return kernel_bounds.class_bounds(self)

    @cached_property
    def cpu(self) -> cpus.CpuView | None:
        """The operator breakdown of a CPU-only trace (:mod:`perfdoctor.analysis.cpu`); None
        where a GPU ran (the GPU tables say where its steps went) or no operator was traced."""
        return cpus.breakdown(self.profile, self.timeline.steps) if cpus.is_cpu_only(self.profile) else None

    @property
    def time_source(self) -> str:
        """Where step time comes from, in words, for the report header."""
        if self.light is not None:
            lp = self.light
            steady_n = lp.count - lp.steady_start
            return (
                f"light pass, no tracer, steady state: {steady_n} steps after {lp.steady_start} warm-up"
                + (f" ({lp.steady_reason})" if lp.steady_reason else "")
            )
        return f"trace ({self.steps.count} steps, every step used: a trace alone cannot tell warm-up)"

    def first_step_note(self) -> str | None:
        """Point out a first traced step far slower than the rest (it is kept, not dropped)."""
        cp = self.timeline.critical_path_ms()
        if self.light is not None or cp.size < 2:
            return None
        med = float(np.median(cp))
        if med > 0 and cp[0] > SLOW_FIRST_STEP * med:
            return (
                f"the first step took {value(cp[0], 'ms')}, {times(cp[0] / med)} the median {value(med, 'ms')}: likely warm-up "
                "(first calls, compilation, allocation); it is included in these metrics — profile after warm-up "
                "or use perfdoctor run, whose light pass finds the steady state"
            )
        return None
    @property
    def device(self) -> dict[str, Any]:
        return self.profile.device

    def value(self, key: str) -> float | None:
        m = self.metrics.get(key)
        return None if m is None else m.value

    def to_json(self) -> dict[str, Any]:
        t = self.timeline.steps
        steps = [
            {
                "host_start_ns": int(r.host_start_ns),
                "host_end_ns": int(r.host_end_ns),
                "gpu_start_ns": None if pd.isna(r.gpu_start_ns) else int(r.gpu_start_ns),
                "gpu_end_ns": None if pd.isna(r.gpu_end_ns) else int(r.gpu_end_ns),
                "kernels": int(r.kernels),
                "launches": int(r.launches),
                "critical_path_ns": None if pd.isna(r.critical_path_ns) else int(r.critical_path_ns),
                "busy_ns": int(r.busy_ns),
            }
            for r in t.itertuples()
        ]
        o = self.profile.origin  # metrics.json's "meta": these four, each only where the source states it
        meta = {k: v for k, v in {"source": o.source, "path": o.path, "declared": o.declared, "versions": o.versions}.items()
                if v is not None}
        return {
            "schema": SCHEMA,
            "step_name": self.steps.name,
            "steps_how": self.steps.how,
            "time_source": self.time_source,
            "workload": self.workload.to_dict() if self.workload is not None else None,
            "graph_state": jsonable(self.graph_state.to_dict()) if self.graph_state is not None else None,
            "light": None
            if self.light is None
            else {
                "step_name": self.light.name,
                "steps": self.light.count,
                "steady_start": self.light.steady_start,
                "steady_reason": self.light.steady_reason,
                "clock": self.light.clock,
            },
            "metrics": {k: m.to_json() for k, m in self.metrics.items()},
            "attribution": jsonable(self.attribution.to_json()),
            "bounds": jsonable(self.bounds.to_json()),
            "device": jsonable(self.profile.device),
            "steps": steps,
            "meta": jsonable(meta),
            **({"cpu": jsonable(self.cpu.to_json())} if self.cpu is not None else {}),
        }


def jsonable(obj: Any) -> Any:
    """``obj`` with numpy scalars made Python, keys made strings and inf/nan made null."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not np.isfinite(obj):
        return None  # JSON has no inf/nan
    return obj


class _Context:
    """What every metric function needs: the profile, its steps, the derived tables and,
    when it timed these steps, the light pass over its steady state."""

    def __init__(self, profile: Profile, steps: Steps, tokens_per_step: float | None) -> None:
        self.profile = profile
        self.steps = steps
        self.timeline = build(profile, steps)
        self.source = profile.origin.source or "trace"
        self.span = steps.span
        self.in_span = self.timeline.in_span
        self.windows = self.timeline.with_gpu
        calls = profile.calls
        in_step = steps.call_step.to_numpy() >= 0
        self.step_calls = calls[in_step]
        by_step = profile.origin.declared or {}
        declared = by_step.get(steps.name or "", {})
        if not declared and profile.light is not None:
            declared = by_step.get(profile.light.name, {})
        self.tokens_per_step = tokens_per_step if tokens_per_step is not None else declared.get("tokens")
        self.bytes_per_step = declared.get("bytes")
        self.light, self.light_reason = _usable_light(profile.light, steps)
        self.overhead: float | None = None  # traced / light p50, once computed
        self.dram_counter: Metric | None = None  # the sampled/averaged DRAM counter, once read

    def absent(self, key: str, reason: str) -> Metric:
        return Metric(None, METRIC_UNITS[key], self.source, reason=reason)

    def have(self, key: str, value: float, source: str | None = None, note: str | None = None) -> Metric:
        return finite_or_absent(Metric(float(value), METRIC_UNITS[key], source or self.source, note=note), key)

    @property
    def no_steps(self) -> str | None:
        if self.steps.count == 0:
            return self.steps.reason or "no steps found"
        if self.windows.empty:
            return self.steps.reason or "no step launched GPU work"
        return None

    @property
    def no_gpu(self) -> str | None:
        if self.profile.activities.empty:
            bundle = self.profile.origin.bundle
            if bundle is not None and bundle.reason:  # a bundle without a trace
                return f"no trace: {bundle.reason}"
            unread = self.profile.origin.unread_categories
            if unread:
                # Device work perfdoctor cannot read (another accelerator, a tracer's own
                # categories) is said as such: a run with device work is not "CPU-only".
                listed = ", ".join(f"{cat!r} ×{n}" for cat, n in sorted(unread.items(), key=lambda kv: -kv[1])[:5])
                return (f"no GPU activity perfdoctor reads (Kineto kernel / gpu_memcpy / gpu_memset); the trace has "
                        f"events in categories perfdoctor does not read: {listed}")
            return "the trace has no GPU activity (CPU-only run)"
        if self.span is None:
            return self.steps.reason or "no GPU activity inside the steps"
        return None

    @property
    def no_calls(self) -> str | None:
        """Why host-call metrics can't be computed, or None."""
        if self.steps.count == 0:
            return self.steps.reason or "no steps found"
        if self.profile.calls.empty:
            return "the trace has no CUDA API calls"
        return None

    def tracer_note(self) -> str | None:
        """For metrics made of host gaps in the trace that the light pass cannot correct."""
        if self.overhead is not None and self.overhead > OVERHEAD_NOTE_RATIO:
            return (
                f"measured under the tracer, which stretched step time {times(self.overhead)} "
                "(profiler_overhead_ratio): host gaps are inflated, so this is not the untraced value"
            )
        return None


def _usable_light(light: LightSteps | None, steps: Steps) -> tuple[LightSteps | None, str | None]:
    """The light pass when it timed the traced steps (or the trace found none); else why not."""
    if light is None:
        return None, "needs the light timing pass of perfdoctor run"
    if light.count == 0:
        return None, "the light pass saw no step"
    if steps.name and not (fnmatch.fnmatchcase(light.name, steps.name) or light.name == steps.name):
        return None, f"the light pass timed {light.name!r}, not the traced steps {steps.name!r}"
    if light.steady_start is None:
        # a perfdoctor 0.1 bundle did not store where its steady state starts: the same rule
        # the run applies today, once, here
        found = steady.series_steady_start(light.host_start_ns, light.gpu_end_ns, light.gpu_start_ns, light.waited_ns, light.pass_ended,
                                           light.cpu_wait_ns, light.threads)
        light = dataclasses.replace(light, steady_start=min(found.start, light.count - 1), steady_reason=found.reason)
    return light, None


def _light_series(light: LightSteps) -> steady.SteadySeries:
    return steady.steady_series(light.host_start_ns, light.gpu_end_ns, light.steady_start, light.gpu_start_ns, light.waited_ns,
                                light.pass_ended, light.compiled_ns, light.threads, light.cpu_wait_ns)


def _steps(c: _Context) -> Metric:
    if (untraced := no_trace(c.profile)) is not None:
        return c.absent("steps", untraced)  # not 0: the light pass saw the program's steps
    return c.have("steps", c.steps.count)


def _union_ratio(c: _Context, key: str, kinds: tuple[str, ...] | None) -> Metric:
    if c.no_gpu:
        return c.absent(key, c.no_gpu)
    lo, hi = c.span
    if hi <= lo:
        return c.absent(key, "the profiled span has zero length")
    acts = c.profile.activities
    start, end = acts["start_ns"].to_numpy(), acts["end_ns"].to_numpy()
    if kinds is not None:  # the two columns it needs, not a copy of the table
        keep = acts["kind"].isin(kinds).to_numpy()
        start, end = start[keep], end[keep]
    busy = union_ns(start, end, lo, hi)
    return c.have(key, busy / (hi - lo))


def _gpu_idle_ratio(c: _Context, light_p50: Metric) -> Metric:
    """Timeline bubbles. With a light pass, corrected for the tracer: GPU-side durations are
    not inflated by tracing but host gaps are, so the busy time per step comes from the
    trace and the step time from the untraced pass: 1 − median(busy) / light p50."""
    if c.light is not None and light_p50.value and not c.no_steps:
        busy_ms = float(np.median(c.windows["busy_ns"].to_numpy(np.float64))) / 1e6
        idle = float(np.clip(1.0 - busy_ms / light_p50.value, 0.0, 1.0))
        note = None
        if c.overhead is not None and c.overhead > OVERHEAD_NOTE_RATIO:
            traced = _union_ratio(c, "gpu_idle_ratio", None).value
            note = (
                f"corrected for the tracer (it stretched step time {times(c.overhead)}): GPU busy {value(busy_ms, 'ms')} per step "
                f"from the trace / untraced step {value(light_p50.value, 'ms')}"
                + (f"; the traced timeline alone says {percent(1 - traced)}" if traced is not None else "")
            )
        return c.have("gpu_idle_ratio", idle, source=f"{c.source}+light", note=note)
    busy = _union_ratio(c, "gpu_idle_ratio", None)
    if busy.value is None:
        return busy
    return c.have("gpu_idle_ratio", 1.0 - busy.value)


def _with_tracer_note(c: _Context, m: Metric) -> Metric:
    note = c.tracer_note() if m.value is not None else None
    if note:
        m.note = f"{m.note}; {note}" if m.note else note
    return m


def _kernel_time_ratio(c: _Context, light_p50: Metric) -> Metric:
    """Kernel time over the span; with a light pass, corrected for the tracer as
    gpu_idle_ratio is: median kernel busy time per step (the trace) / the untraced step."""
    if c.light is not None and light_p50.value and not c.no_steps:
        k = c.timeline.step_kernels
        n = len(c.steps.table)
        busy = timeline_union(k["start_ns"].to_numpy(np.int64), k["end_ns"].to_numpy(np.int64), k["step"].to_numpy(np.int64), n)
        busy_ms = float(np.median(busy[c.windows.index.to_numpy()])) / 1e6
        return c.have("kernel_time_ratio", float(np.clip(busy_ms / light_p50.value, 0.0, 1.0)), source=f"{c.source}+light",
                      note=f"kernel busy {value(busy_ms, 'ms')} per step from the trace / untraced step {value(light_p50.value, 'ms')}")
    return _with_tracer_note(c, _union_ratio(c, "kernel_time_ratio", ("kernel",)))


def _memcpy_time_ratio(c: _Context) -> Metric:
    return _with_tracer_note(c, _union_ratio(c, "memcpy_time_ratio", ("memcpy", "memset")))


def _kernels_per_step(c: _Context) -> Metric:
    if c.no_steps or c.no_gpu:
        return c.absent("kernels_per_step", c.no_steps or c.no_gpu)
    return c.have("kernels_per_step", c.timeline.span_is_kernel.sum() / c.steps.count)


def _calls_per_step(c: _Context, key: str, which: Callable[[pd.Series], pd.Series]) -> Metric:
    if c.no_calls:
        return c.absent(key, c.no_calls)
    return c.have(key, which(c.step_calls["name"]).sum() / c.steps.count)


def _launches_per_step(c: _Context) -> Metric:
    return _calls_per_step(c, "launches_per_step", is_launch)


def _launch_rate_per_s(c: _Context, per_step: Metric, steps_per_s: Metric) -> Metric:
    """Launches per second of the run: with the light pass, launches per step × its
    untraced steps per second (the wall clock the program runs at); from a trace alone,
    launches over the step ranges' host time."""
    if c.no_calls:
        return c.absent("launch_rate_per_s", c.no_calls)
    if steps_per_s.source == "light" and steps_per_s.value and per_step.value is not None:
        return c.have("launch_rate_per_s", per_step.value * steps_per_s.value, source=f"{c.source}+light",
                      note=f"{count(per_step.value)} launches per step × {num(steps_per_s.value)} untraced steps/s")
    t = c.steps.table
    host_s = (t["host_end_ns"] - t["host_start_ns"]).sum() / 1e9
    if host_s <= 0:
        return c.absent("launch_rate_per_s", "the step ranges have zero length")
    return _with_tracer_note(c, c.have("launch_rate_per_s", is_launch(c.step_calls["name"]).sum() / host_s))


def _short_kernel_ratio(c: _Context) -> Metric:
    if c.no_gpu:
        return c.absent("short_kernel_ratio", c.no_gpu)
    # The span's kernels' durations, not the kernels' table (Timeline.span_kernels: every
    # column of ~47k rows copied on HF 80 MB, for two columns)
    dur = _span_kernel_durations(c)
    if not dur.size:
        return c.absent("short_kernel_ratio", "no kernels in the profiled span")
    return c.have("short_kernel_ratio", (dur < SHORT_KERNEL_NS).mean())


def _span_kernel_durations(c: _Context) -> np.ndarray:
    """end_ns - start_ns of each kernel in the profiled span (the rows of ``Timeline.span_kernels``)."""
    span, kernel = c.in_span, c.timeline.span_is_kernel
    return span["end_ns"].to_numpy(np.int64)[kernel] - span["start_ns"].to_numpy(np.int64)[kernel]


def _latency(c: _Context, q: int, light: steady.SteadySeries | None) -> Metric:
    """Critical-path step time percentile: the light pass's steady state, else the trace."""
    key = f"step_latency_ms_p{q}"
    if light is not None and light.critical_path_ms.size:
        compiled = light.cadence.compiles
        note = f"{compiled} step(s) that compiled (torch.compile inside the loop) left out" if compiled else None
        return c.have(key, np.percentile(light.critical_path_ms, q), source="light", note=note)
    if c.no_steps:
        return c.absent(key, c.no_steps)
    return c.have(key, np.percentile(c.timeline.critical_path_ms(), q))


# Why a light-pass input is absent from a trace (slow_step_time_ratio here, the rules'
# paused_time_ratio, cpu_wait_ratio, loop_step_latency_ms_p99): one reason, so a report's
# not-evaluated table says it once for their rules
NEEDS_LIGHT = ("needs the light pass's steady steps (perfdoctor run): a trace's few steps include its warm-up and are stretched by "
               "the tracer, and it holds neither the pauses between them nor their waits for a CPU")


def _slow_step_time_ratio(c: _Context, light: steady.SteadySeries | None) -> Metric:
    """The share of the untraced steps' time spent beyond the median step by more than the
    light pass's resolution (:func:`perfdoctor.analysis.steady.slow_steps`): what uneven steps
    cost the run. The light pass's steady state only: a trace's few steps include its
    warm-up and are stretched by its tracer."""
    key = "slow_step_time_ratio"
    if light is None or not light.critical_path_ms.size:
        return c.absent(key, NEEDS_LIGHT)
    s = steady.slow_steps(light.critical_path_ms, light.cpu_wait_ms)
    if s.total_ms <= 0:
        return c.absent(key, "the steps' critical-path time is 0")
    return c.have(key, s.beyond_ms / s.total_ms, source="light", note=s.summary)


def _traced_step_latency_ms_p50(c: _Context) -> Metric:
    key = "traced_step_latency_ms_p50"
    if c.steps.count and c.profile.activities.empty:
        # No device work at all (a CPU-only run): a step's critical path is its host range.
        # Without this the tracer's cost on a CPU loop (1.1-3.7x on real libraries' loops,
        # 2026-12-06) and a window in another regime (diffusers on a loaded CPU: 74x) went unsaid.
        t = c.steps.table
        host_ms = (t["host_end_ns"].to_numpy(np.float64) - t["host_start_ns"].to_numpy(np.float64)) / 1e6
        return c.have(key, np.median(host_ms), note="no device work: the traced steps' host ranges")
    if c.no_steps:
        return c.absent(key, c.no_steps)
    return c.have(key, np.median(c.timeline.critical_path_ms()))


def _host_lead_ms_p50(c: _Context, light: steady.SteadySeries | None) -> Metric:
    if light is not None and light.host_lead_ms.size:
        return c.have("host_lead_ms_p50", np.median(light.host_lead_ms), source="light")
    if c.no_steps:
        return c.absent("host_lead_ms_p50", c.no_steps)
    lead = c.timeline.host_lead_ms()
    if lead.size == 0:
        return c.absent("host_lead_ms_p50", "needs at least two steps with GPU work")
    return c.have("host_lead_ms_p50", np.median(lead))


def _host_before_gpu(c: _Context) -> tuple[Metric, Metric]:
    """The steps' host time before their GPU work (critical path − GPU window,
    :func:`perfdoctor.analysis.steady.host_before_gpu_ns`): the median per step, and its share
    of the steps' critical-path time. From the trace: the light pass times a step's ends,
    not when its first kernel started."""
    keys = ("host_before_gpu_ms_p50", "host_before_gpu_ratio")
    if c.no_steps:
        return c.absent(keys[0], c.no_steps), c.absent(keys[1], c.no_steps)
    before = c.windows["host_before_gpu_ns"].to_numpy(np.float64)
    cp = c.windows["critical_path_ns"].to_numpy(np.float64)
    if cp.sum() <= 0:
        why = "the steps' critical-path time is 0"
        return c.have(keys[0], np.median(before) / 1e6), c.absent(keys[1], why)
    return c.have(keys[0], np.median(before) / 1e6), c.have(keys[1], before.sum() / cp.sum())


def _step_gpu_ms_p50(c: _Context) -> Metric:
    if c.no_steps:
        return c.absent("step_gpu_ms_p50", c.no_steps)
    w = c.windows
    return c.have("step_gpu_ms_p50", np.median((w["gpu_end_ns"] - w["gpu_start_ns"]).astype("int64")) / 1e6)


def _steps_per_s(c: _Context, light: steady.SteadySeries | None) -> Metric:
    """Completion rate. Light pass: :func:`perfdoctor.analysis.steady.cadence` over the steady state,
    pauses (the program doing something else between steps: a prefill between two
    ``generate()`` calls) left out. Trace: the contract's (n − 1) / (last end − first end)
    over every step — a trace alone cannot tell a pause from a slow warm-up step."""
    if light is not None:
        cad = light.cadence
        if cad.steps_per_s is None:
            return c.absent("steps_per_s", f"light pass: {cad.reason}")
        note = None
        if cad.pauses:
            said = []
            if cad.compiles:
                said.append(f"{cad.compiles} step(s) compiled: {value(cad.compiled_ms, 'ms')} left out — torch.compile compiling "
                            "again inside the loop (a new input shape), no steady work of the program's")
            own = cad.own_ms[~cad.own_pass_end]  # the program's own pauses (the pass ends, waits and compiles are said below)
            if own.size:
                said.append(f"{own.size} pause(s) between steps left out: {value(float(own.sum()), 'ms')} "
                            "of intervals, the program's work between its steps (an evaluation, a checkpoint, a prefill or an encoder per "
                            "generate, I/O)")
            if cad.pass_ends:
                said.append(f"{cad.pass_ends} pass end(s) between steps left out: {value(cad.pass_end_ms, 'ms')} from the step "
                            "before to the step after — an evaluation pass or the epoch's end (a data loader's pass ended)")
            if cad.waits:
                said.append(f"{cad.waits} wait(s) for another thread, for I/O or in time.sleep left out: {value(cad.waited_ms, 'ms')} in "
                            "which the step's thread was idle (a server's worker waiting for requests, a loop paced to a rate)")
            note = f"{'; '.join(said)}; with them {value(cad.with_pauses_per_s, '1/s')}"
        elif cad.compiles_kept:
            note = (f"{cad.compiles_kept} steady step(s) compiled, kept: half the steady steps or more compile, "
                    "recompiling is the program's steady work")
        return c.have("steps_per_s", cad.steps_per_s, source="light", note=note)
    if c.no_steps:
        return c.absent("steps_per_s", c.no_steps)
    ends = c.windows["gpu_end_ns"].astype("int64").to_numpy()
    if len(ends) < 2 or ends[-1] <= ends[0]:
        return c.absent("steps_per_s", "needs at least two steps with GPU work")
    return c.have("steps_per_s", (len(ends) - 1) / ((ends[-1] - ends[0]) / 1e9))


def _tokens_per_s(c: _Context, steps_per_s: Metric) -> Metric:
    if c.tokens_per_step is None:
        return c.absent("tokens_per_s", "the workload declares no tokens per step (use --tokens-per-step N)")
    if steps_per_s.value is None:
        return c.absent("tokens_per_s", steps_per_s.reason or "steps_per_s is absent")
    return c.have("tokens_per_s", steps_per_s.value * c.tokens_per_step, source=steps_per_s.source)


def _sync_calls_per_step(c: _Context) -> Metric:
    return _calls_per_step(c, "sync_calls_per_step", is_sync)


# Host-side copies, and the host memory kinds a tracer can name for them (CUPTI: "Pageable",
# "Pinned", "Managed"; nsys the same from its memory-kind table).
HOST_COPY_KINDS = ("HtoD", "DtoH", "HtoH")
KNOWN_HOST_MEMORY = ("pageable", "pinned", "managed")


def _pageable_memcpy_bytes(c: _Context) -> Metric:
    if c.no_gpu:
        return c.absent("pageable_memcpy_bytes", c.no_gpu)
    copies = c.in_span[equals(c.in_span["kind"], "memcpy")]
    host = copies[copies["copy_kind"].isin(HOST_COPY_KINDS)]
    unknown = host[~host["host_mem"].isin(KNOWN_HOST_MEMORY)]
    if not unknown.empty:
        # ROCm's tracer names a copy "Memcpy HtoD (Host -> Device)": pageable or pinned is not
        # recorded, so the bytes are unknown — never 0 (a 0 would read as "fixed" in a diff).
        spelled = sorted(set(unknown["host_mem"].replace("", "unnamed")))
        return c.absent(
            "pageable_memcpy_bytes",
            f"the trace does not say whether host memory is pageable or pinned for {len(unknown)} host copies "
            f"(host side recorded as {', '.join(map(repr, spelled))}; ROCm traces do not record it)",
        )
    return c.have("pageable_memcpy_bytes", host[host["host_mem"] == "pageable"]["bytes"].fillna(0).sum())


def _achieved_occupancy_est(c: _Context) -> Metric:
    if c.no_gpu:
        return c.absent("achieved_occupancy_est", c.no_gpu)
    occupancy = c.in_span["occupancy_pct"].to_numpy(np.float64)[c.timeline.span_is_kernel]
    known = ~np.isnan(occupancy)
    dur = _span_kernel_durations(c)[known].astype(np.float64)
    if not known.any() or dur.sum() <= 0:
        return c.absent("achieved_occupancy_est", "the trace has no per-kernel occupancy estimate (Kineto records it)")
    return c.have("achieved_occupancy_est", np.average(occupancy[known] / 100.0, weights=dur))


def _peak_dram_bw_gbps(c: _Context) -> Metric:
    dev = c.profile.device
    if dev.get("peak_dram_bw_gbps"):
        return c.have("peak_dram_bw_gbps", dev["peak_dram_bw_gbps"], source=dev.get("peak_source", c.source))
    return c.absent(
        "peak_dram_bw_gbps",
        "the trace does not record the memory clock and bus width (an nsys export or `perfdoctor run` with NVML does)",
    )


def _ncu_weighted(c: _Context, metric: str) -> tuple[float, float] | None:
    """Duration-weighted mean of one ncu metric, and the total kernel time it covers."""
    rows = c.profile.counters[c.profile.counters["metric"] == metric]
    rows = rows[(rows["duration_ns"] > 0) & np.isfinite(rows["value"].to_numpy(dtype=np.float64))]
    if rows.empty:
        return None
    w = rows["duration_ns"].to_numpy(dtype=np.float64)
    return float(np.average(rows["value"].to_numpy(dtype=np.float64), weights=w)), float(w.sum())


def _samples_mean(c: _Context, metric: str) -> tuple[float | None, str, str | None]:
    """Mean of a sampled series over S (or over all samples when the trace has no span),
    NaN samples dropped: (value or None, source, reason when None)."""
    s = c.profile.samples
    s = s[s["metric"] == metric]
    if c.light is not None:
        # A run bundle: the light pass's average over exactly its steady steps is the NVML
        # counter. The traced pass's NVML samples are not: a GPM value covers the 100 ms
        # before it, more than a traced window of a few steps (on the H200 the CUDA-graph
        # engine's window read 0.0004 % DRAM that way against 22-27 % over its steps).
        nvml = s["source"].isin(("nvml", "nvml-gpm"))
        if nvml.any() and not (~nvml).any():
            return None, "nvml-gpm", None
        s = s[~nvml]
    if c.span is not None and not s.empty:
        lo, hi = c.span
        s = s[(s["time_ns"] >= lo) & (s["time_ns"] <= hi)]
        if s.empty:
            return None, "", f"no {metric} sample inside the profiled steps"  # samples elsewhere never count
    if s.empty:
        return None, "", None
    # Trust order among samplers: GPM counters over nsys's sampled throughput.
    part, source = s, str(s["source"].iloc[0])
    for candidate in ("nvml-gpm", "nsys-gpu-metrics", "nvml"):
        if (s["source"] == candidate).any():
            part, source = s[s["source"] == candidate], candidate
            break
    values = part["value"].to_numpy(dtype=np.float64)
    ok = np.isfinite(values)
    if not ok.any():
        return None, source, f"all {values.size} {source} {metric} samples returned NaN"
    return float(values[ok].mean()), source, None


def _light_counter(c: _Context, metric: str) -> tuple[float | None, str, str | None]:
    """A counter the light pass averaged over exactly its steady steps (value, source, reason)."""
    if c.light is None:
        return None, "", None
    entry = c.light.counters.get(metric)
    if not isinstance(entry, dict):
        return None, "", None
    source = str(entry.get("source") or "nvml-gpm")
    value = entry.get("value")
    try:
        value = None if value is None else float(value)
    except (TypeError, ValueError):
        value = None
    if value is None or not np.isfinite(value):
        if entry.get("reason"):  # the runner says why (all NaN, no sample inside the steps)
            return None, source, f"{source}: {entry['reason']}"
        n = entry.get("samples")
        dropped = entry.get("dropped_nan")
        if dropped and (not n or dropped >= n):
            return None, source, f"all {dropped} {source} samples returned NaN"
        return None, source, f"the light pass's {metric} counter has no finite value"
    return value, source, None


def _counter(c: _Context, metric: str) -> tuple[float | None, str, str | None]:
    """The light pass's steady-state counter, else the samples inside the traced span."""
    value, source, reason = _light_counter(c, metric)
    if value is not None:
        return value, source, None
    sampled = _samples_mean(c, metric)
    if sampled[0] is not None:
        return sampled
    return None, source or sampled[1], reason or sampled[2]


def _dram_bw_util(c: _Context, peak: Metric, p50: Metric) -> Metric:
    """DRAM bandwidth / peak. Headline: ``model`` when the step declares its bytes (the
    number a user checks by hand: bytes / step time / peak, step time from the light pass
    when there is one), else a counter (ncu, the light pass's GPM average, sampled GPM or
    nsys GPU metrics). Sources that disagree with the headline by more than 5 points are
    kept as ``alternatives``."""
    found: list[Metric] = []
    reasons: list[str] = []
    if c.bytes_per_step and peak.value and p50.value:
        found.append(
            Metric(
                c.bytes_per_step / (p50.value / 1e3) / (peak.value * 1e9),
                "ratio",
                "model",
                note=f"declared bytes per step / {'untraced' if p50.source == 'light' else 'traced'} step time "
                f"({value(p50.value, 'ms')}) / peak",
            )
        )
    counters = c.profile.counters
    reads = counters[counters["metric"].isin((NCU_DRAM_READ, NCU_DRAM_WRITE))]
    if not reads.empty and peak.value:
        dur = counters.loc[counters["metric"] == NCU_DRAM_READ, "duration_ns"].sum()
        if dur > 0:
            found.append(
                Metric(
                    reads["value"].sum() / (dur / 1e9) / (peak.value * 1e9),
                    "ratio",
                    "ncu",
                    note="per-kernel efficiency: DRAM bytes / kernel time, gaps between kernels excluded",
                )
            )
    util, source, reason = _counter(c, "dram_bw_util")
    if util is not None and np.isfinite(util):
        found.append(Metric(util, "ratio", source))
        c.dram_counter = Metric(util, "ratio", source)  # the bubbles read the counter, never the model
    elif reason:
        reasons.append(reason)
    found = [m for m in found if m.value is not None and np.isfinite(m.value)]
    if not found:
        needs = []
        if not c.bytes_per_step:
            needs.append("a DRAM counter (perfdoctor run with NVML GPM, ncu or nsys --gpu-metrics-devices) or a step that declares its bytes")
        if not peak.value:
            needs.append("the device peak bandwidth")
        if c.bytes_per_step and peak.value and not p50.value:
            needs.append("the step time")
        why = "needs " + " and ".join(needs or ["a DRAM counter"])
        return c.absent("dram_bw_util", "; ".join([*reasons, why]))
    head = found[0]
    others = [{"value": float(m.value), "source": m.source} for m in found[1:] if abs(m.value - head.value) > BW_DISAGREE]
    return Metric(float(head.value), "ratio", head.source, note=head.note, alternatives=others or None)


def _sm_occupancy(c: _Context) -> Metric:
    ncu = _ncu_weighted(c, NCU_OCCUPANCY)
    if ncu is not None:
        return c.have("sm_occupancy", ncu[0] / 100.0, source="ncu")
    value, source, reason = _counter(c, "sm_occupancy")
    if value is not None:
        return c.have("sm_occupancy", value, source=source)
    return c.absent("sm_occupancy", (reason + "; " if reason else "") + "needs hardware counters: perfdoctor run with NVML GPM or ncu")


def _memory_bubble_ratio(c: _Context, dram: Metric, idle: Metric) -> Metric:
    counter = c.dram_counter or (dram if dram.value is not None and dram.source == "ncu" else None)
    if counter is not None:
        return c.have("memory_bubble_ratio", 1.0 - counter.value, source=counter.source)
    if idle.value is not None:
        return c.have(
            "memory_bubble_ratio",
            idle.value,
            source=idle.source,
            note="lower bound: gpu_idle_ratio, since no DRAM counter was collected",
        )
    return c.absent("memory_bubble_ratio", idle.reason or "needs GPU activity or a DRAM counter")


def _ncu_ratio(c: _Context, key: str, metric: str, scale: float) -> Metric:
    ncu = _ncu_weighted(c, metric)
    if ncu is None:
        return c.absent(key, f"needs Nsight Compute ({metric}): perfdoctor run --collect ncu")
    return c.have(key, ncu[0] / scale, source="ncu")


def another_regime(overhead: float) -> bool:
    """A traced/untraced step-time ratio (``profiler_overhead_ratio``) no tracer explains: the
    trace window ran another regime than the light pass's steady state."""
    return 0 < overhead < FASTER_TRACE or overhead > SLOWER_TRACE


def _profiler_overhead_ratio(c: _Context, traced: Metric, light_p50: Metric) -> Metric:
    if c.light is None:
        return c.absent("profiler_overhead_ratio", c.light_reason or "needs the light timing pass of perfdoctor run")
    if traced.value is None:
        return c.absent("profiler_overhead_ratio", traced.reason or "no traced step latency")
    if not light_p50.value:
        return c.absent("profiler_overhead_ratio", light_p50.reason or "the light pass has no step time")
    return c.have("profiler_overhead_ratio", traced.value / light_p50.value, source=f"{c.source}+light")


def _throttle_time_ratio(c: _Context) -> Metric:
    s = c.profile.samples
    s = s[s["metric"] == "throttle"]
    if s.empty:
        return c.absent("throttle_time_ratio", "needs NVML clock-event reasons: perfdoctor run --collect nvml")
    if c.span is not None:
        lo, hi = c.span
        inside = s[(s["time_ns"] >= lo) & (s["time_ns"] <= hi)]
        s = inside if not inside.empty else s
    return c.have("throttle_time_ratio", (s["value"] > 0).mean(), source="nvml")


def _comm_metrics(c: _Context) -> dict[str, Metric]:
    """Communication per step (:mod:`perfdoctor.analysis.comms`): share of GPU busy time, overlap
    with compute, exposed time, collectives and their mean duration (medians over steps)."""
    keys = ("comm_time_ratio", "comm_overlap_ratio", "exposed_comm_ms_per_step", "collectives_per_step", "mean_collective_us")
    why = c.no_steps or c.no_gpu
    if why:
        return {k: c.absent(k, why) for k in keys}
    summ = comms.summary(comms.step_metrics(c.profile, c.steps.table, c.steps.activity_step))
    if not summ["collectives_per_step"] or not np.isfinite(summ["collectives_per_step"]):
        none = "no communication kernels in the steps (NCCL/RCCL/custom all-reduce)"
        return {
            "comm_time_ratio": c.have("comm_time_ratio", 0.0) if np.isfinite(summ["comm_share"]) else c.absent("comm_time_ratio", none),
            "comm_overlap_ratio": c.absent("comm_overlap_ratio", none),
            "exposed_comm_ms_per_step": c.absent("exposed_comm_ms_per_step", none),
            "collectives_per_step": c.have("collectives_per_step", 0.0),
            "mean_collective_us": c.absent("mean_collective_us", none),
        }
    values = {
        "comm_time_ratio": summ["comm_share"],
        "comm_overlap_ratio": summ["comm_overlap"],
        "exposed_comm_ms_per_step": summ["exposed_comm_ms"],
        "collectives_per_step": summ["collectives_per_step"],
        "mean_collective_us": summ["mean_collective_us"],
    }
    return {
        k: c.have(k, v) if v is not None and np.isfinite(v) else c.absent(k, "no step with communication kernels")
        for k, v in values.items()
    }


def _queue_delay_ms_p50(c: _Context) -> Metric:
    """Median over steps of (GPU start of the step's first activity − host start of the call
    that launched it) (:func:`perfdoctor.analysis.serving.queue_delay`)."""
    if c.no_steps or c.no_gpu:
        return c.absent("queue_delay_ms_p50", c.no_steps or c.no_gpu)
    if c.profile.calls.empty:
        return c.absent("queue_delay_ms_p50", "the trace has no CUDA API calls")
    q = serving.queue_delay(c.profile, c.steps.table, c.steps.activity_step)["queue_delay_ns"]
    v = pd.to_numeric(q, errors="coerce").astype("float64").to_numpy()
    v = v[np.isfinite(v)]
    if v.size == 0:
        return c.absent("queue_delay_ms_p50", "no step's first GPU activity has a launching call in the trace")
    return _with_tracer_note(c, c.have("queue_delay_ms_p50", float(np.median(v)) / 1e6))


def _capture_trace(c: _Context, state: capture.GraphState) -> Metric:
    if c.profile.calls.empty:
        return c.absent("capture_trace", "the trace has no CUDA API calls: a graph capture cannot be recognised")
    return c.have("capture_trace", 1.0 if state.kind == "capture" else 0.0, note=state.message or None)


def _steps_graphed(c: _Context) -> Metric:
    if c.no_steps:
        return c.absent("steps_graphed", c.no_steps)
    states = capture.step_states(c.profile, c.steps.table, c.steps.activity_step, c.steps.call_step)
    g = capture.graphed(states)
    if g is None:
        return c.absent("steps_graphed", "no recognised launch calls in most steps: graph replay cannot be judged")
    return c.have("steps_graphed", float(g))


def _serving_tokens_per_s(c: _Context, steps_per_s: Metric, light: steady.SteadySeries | None) -> Metric | None:
    """Serving steps carry their tokens in their names (``step[PREFILL bs=4 tokens=512]``,
    ``execute_context_0(0)_generation_32(32)``): tokens over step time, no declaration
    needed (:func:`perfdoctor.analysis.serving.throughput`). None when the steps are not serving steps."""
    if c.steps.name != serving.STEP_NAME or c.tokens_per_step is not None:
        return None
    t = c.timeline.steps
    cp = pd.to_numeric(t["critical_path_ns"], errors="coerce").astype("float64")
    ok = cp.notna().to_numpy() & (cp.to_numpy() > 0)
    if not ok.any():
        return c.absent("tokens_per_s", "no serving step has a measurable step time")
    tot = serving.totals(serving.throughput(c.steps.table[ok], cp[ok].to_numpy()))["all"]
    if not tot["tokens"] or not np.isfinite(tot["tokens_per_s"]):
        return c.absent("tokens_per_s", "the serving step names carry no token counts")
    return c.have(
        "tokens_per_s", tot["tokens_per_s"],
        note=f"{count(tot['tokens'])} tokens over {tot['steps']} serving steps (token counts from the step names), traced step time",
    )


def analyze(
    profile: Profile, step: str | None = None, tokens_per_step: float | None = None, workload: str | None = None
) -> Analysis:
    """Compute every metric of the contract that ``profile`` allows.

    ``step`` is an exact range name or glob (``"step*"``); by default steps are the
    ``ProfilerStep#N`` ranges, else the most frequent repeated range with GPU work, else
    found automatically (:func:`perfdoctor.analysis.steps.find_steps`).
    ``tokens_per_step`` overrides what the workload declared. ``workload`` ("training" /
    "inference") overrides the classification of the trace (:mod:`perfdoctor.analysis.workload`):
    it decides which rules apply.
    """
    steps = find_steps(profile, step)
    c = _Context(profile, steps, tokens_per_step)
    light = _light_series(c.light) if c.light is not None else None
    m: dict[str, Metric] = {}
    m["steps"] = _steps(c)
    for q in (50, 90, 99):
        m[f"step_latency_ms_p{q}"] = _latency(c, q, light)
    m["traced_step_latency_ms_p50"] = _traced_step_latency_ms_p50(c)
    m["slow_step_time_ratio"] = _slow_step_time_ratio(c, light)
    m["profiler_overhead_ratio"] = _profiler_overhead_ratio(c, m["traced_step_latency_ms_p50"], m["step_latency_ms_p50"])
    c.overhead = m["profiler_overhead_ratio"].value
    m["host_lead_ms_p50"] = _host_lead_ms_p50(c, light)
    m["gpu_idle_ratio"] = _gpu_idle_ratio(c, m["step_latency_ms_p50"])
    m["kernel_time_ratio"] = _kernel_time_ratio(c, m["step_latency_ms_p50"])
    m["memcpy_time_ratio"] = _memcpy_time_ratio(c)
    m["kernels_per_step"] = _kernels_per_step(c)
    m["launches_per_step"] = _launches_per_step(c)
    m["short_kernel_ratio"] = _short_kernel_ratio(c)
    m["step_gpu_ms_p50"] = _step_gpu_ms_p50(c)
    m["host_before_gpu_ms_p50"], m["host_before_gpu_ratio"] = _host_before_gpu(c)
    m["steps_per_s"] = _steps_per_s(c, light)
    m["launch_rate_per_s"] = _launch_rate_per_s(c, m["launches_per_step"], m["steps_per_s"])
    m["tokens_per_s"] = _serving_tokens_per_s(c, m["steps_per_s"], light) or _tokens_per_s(c, m["steps_per_s"])
    m["sync_calls_per_step"] = _sync_calls_per_step(c)
    m["pageable_memcpy_bytes"] = _pageable_memcpy_bytes(c)
    m["achieved_occupancy_est"] = _achieved_occupancy_est(c)
    m["peak_dram_bw_gbps"] = _peak_dram_bw_gbps(c)
    m["dram_bw_util"] = _dram_bw_util(c, m["peak_dram_bw_gbps"], m["step_latency_ms_p50"])
    m["sm_occupancy"] = _sm_occupancy(c)
    m["memory_bubble_ratio"] = _memory_bubble_ratio(c, m["dram_bw_util"], m["gpu_idle_ratio"])
    m["l2_hit_rate"] = _ncu_ratio(c, "l2_hit_rate", NCU_L2_HIT, 100.0)
    m["warp_exec_efficiency"] = _ncu_ratio(c, "warp_exec_efficiency", NCU_WARP_EFF, 32.0)
    m["throttle_time_ratio"] = _throttle_time_ratio(c)
    m.update(_comm_metrics(c))
    m["queue_delay_ms_p50"] = _queue_delay_ms_p50(c)
    graph_state = capture.trace_state(profile)
    m["capture_trace"] = _capture_trace(c, graph_state)
    m["steps_graphed"] = _steps_graphed(c)
    kind = _workload(profile, workload)
    # Contract order (METRICS), and the last guard: nothing non-finite leaves this function.
    ordered = {k: finite_or_absent(m[k], k) for k in METRICS if k in m}
    return Analysis(
        metrics=ordered, steps=steps, profile=profile, timeline=c.timeline, light=c.light, light_series=light, workload=kind,
        graph_state=graph_state,
    )


def _workload(profile: Profile, override: str | None) -> workloads.Workload:
    """The trace's workload (:func:`perfdoctor.analysis.workload.classify`), or the user's override
    (``--workload training|inference``), which keeps the classifier's evidence for the record."""
    found = workloads.classify(profile)
    if override is None:
        return found
    if override not in ("training", "inference"):
        from perfdoctor.errors import UsageError

        raise UsageError(f"--workload {override!r}: expected 'training' or 'inference'")
    if override == found.kind:
        return found
    task = "training" if override == "training" else (found.task if found.kind == "inference" else "inference")
    return dataclasses.replace(
        found, kind=override, task=task, confidence="user", evidence=[f"set by --workload (the trace reads as {found.text})"]
    )
