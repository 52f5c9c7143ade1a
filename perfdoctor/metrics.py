"""Metrics: pure functions from a Profile to the numbers in the metric contract.

Every key of ``shared/design/metrics.md`` is computed here, one small function per
question, each returning a :class:`Metric` with its value, unit and source — or ``None``
with the reason it could not be computed. A missing number is said, never guessed and
never 0. No I/O and no torch import: analysing a trace on a laptop stays fast.
"""

from __future__ import annotations

import fnmatch
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import numpy as np
import pandas as pd

from perfdoctor.profile import Profile
from perfdoctor.steps import Steps, find_steps, is_launch, is_sync, union_ns

SCHEMA = "perfdoctor.metrics/1"
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
    "profiler_overhead_ratio": ("ratio", False),
    "throttle_time_ratio": ("ratio", False),
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

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None or k == "value"}


@dataclass
class Analysis:
    """The metrics of one Profile, with the steps they were computed over."""

    metrics: dict[str, Metric]
    steps: Steps
    profile: Profile = field(repr=False)

    @property
    def device(self) -> dict[str, Any]:
        return self.profile.device

    def value(self, key: str) -> float | None:
        m = self.metrics.get(key)
        return None if m is None else m.value

    def to_json(self) -> dict[str, Any]:
        t = self.steps.table
        steps = [
            {
                "host_start_ns": int(r.host_start_ns),
                "host_end_ns": int(r.host_end_ns),
                "gpu_start_ns": None if pd.isna(r.gpu_start_ns) else int(r.gpu_start_ns),
                "gpu_end_ns": None if pd.isna(r.gpu_end_ns) else int(r.gpu_end_ns),
                "kernels": int(r.kernels),
                "launches": int(r.launches),
            }
            for r in t.itertuples()
        ]
        meta = {k: v for k, v in self.profile.meta.items() if k in ("source", "path", "declared", "versions")}
        return {
            "schema": SCHEMA,
            "step_name": self.steps.name,
            "metrics": {k: m.to_json() for k, m in self.metrics.items()},
            "device": jsonable(self.profile.device),
            "steps": steps,
            "meta": jsonable(meta),
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
    """What every metric function needs: the profile, its steps and a few derived tables."""

    def __init__(self, profile: Profile, steps: Steps, tokens_per_step: float | None) -> None:
        self.profile = profile
        self.steps = steps
        self.source = str(profile.meta.get("source", "trace"))
        acts = profile.activities
        self.span = steps.span
        if self.span is not None:
            lo, hi = self.span
            self.in_span = acts[(acts["start_ns"] >= lo) & (acts["start_ns"] <= hi)]
        else:
            self.in_span = acts.iloc[0:0]
        t = steps.table
        self.windows = t[t["gpu_start_ns"].notna()]
        calls = profile.calls
        in_step = steps.call_step.to_numpy() >= 0
        self.step_calls = calls[in_step]
        declared = profile.meta.get("declared", {}).get(steps.name or "", {})
        self.tokens_per_step = tokens_per_step if tokens_per_step is not None else declared.get("tokens")
        self.bytes_per_step = declared.get("bytes")

    def absent(self, key: str, reason: str) -> Metric:
        return Metric(None, METRIC_UNITS[key], self.source, reason=reason)

    def have(self, key: str, value: float, source: str | None = None, note: str | None = None) -> Metric:
        return Metric(float(value), METRIC_UNITS[key], source or self.source, note=note)

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
            missing = (self.profile.meta.get("bundle") or {}).get("reason")  # a bundle without a trace
            return f"no trace: {missing}" if missing else "the trace has no GPU activity (CPU-only run)"
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


def _steps(c: _Context) -> Metric:
    return c.have("steps", c.steps.count)


def _union_ratio(c: _Context, key: str, kinds: tuple[str, ...] | None) -> Metric:
    if c.no_gpu:
        return c.absent(key, c.no_gpu)
    lo, hi = c.span
    if hi <= lo:
        return c.absent(key, "the profiled span has zero length")
    acts = c.profile.activities
    if kinds is not None:
        acts = acts[acts["kind"].isin(kinds)]
    busy = union_ns(acts["start_ns"].to_numpy(), acts["end_ns"].to_numpy(), lo, hi)
    return c.have(key, busy / (hi - lo))


def _gpu_idle_ratio(c: _Context) -> Metric:
    busy = _union_ratio(c, "gpu_idle_ratio", None)
    if busy.value is None:
        return busy
    return c.have("gpu_idle_ratio", 1.0 - busy.value)


def _kernel_time_ratio(c: _Context) -> Metric:
    return _union_ratio(c, "kernel_time_ratio", ("kernel",))


def _memcpy_time_ratio(c: _Context) -> Metric:
    return _union_ratio(c, "memcpy_time_ratio", ("memcpy", "memset"))


def _kernels_per_step(c: _Context) -> Metric:
    if c.no_steps or c.no_gpu:
        return c.absent("kernels_per_step", c.no_steps or c.no_gpu)
    return c.have("kernels_per_step", (c.in_span["kind"] == "kernel").sum() / c.steps.count)


def _calls_per_step(c: _Context, key: str, which: Callable[[pd.Series], pd.Series]) -> Metric:
    if c.no_calls:
        return c.absent(key, c.no_calls)
    return c.have(key, which(c.step_calls["name"]).sum() / c.steps.count)


def _launches_per_step(c: _Context) -> Metric:
    return _calls_per_step(c, "launches_per_step", is_launch)


def _launch_rate_per_s(c: _Context) -> Metric:
    if c.no_calls:
        return c.absent("launch_rate_per_s", c.no_calls)
    t = c.steps.table
    host_s = (t["host_end_ns"] - t["host_start_ns"]).sum() / 1e9
    if host_s <= 0:
        return c.absent("launch_rate_per_s", "the step ranges have zero length")
    return c.have("launch_rate_per_s", is_launch(c.step_calls["name"]).sum() / host_s)


def _short_kernel_ratio(c: _Context) -> Metric:
    if c.no_gpu:
        return c.absent("short_kernel_ratio", c.no_gpu)
    k = c.in_span[c.in_span["kind"] == "kernel"]
    if k.empty:
        return c.absent("short_kernel_ratio", "no kernels in the profiled span")
    return c.have("short_kernel_ratio", ((k["end_ns"] - k["start_ns"]) < SHORT_KERNEL_NS).mean())


def _latencies_ms(c: _Context) -> np.ndarray:
    w = c.windows
    return (w["gpu_end_ns"].astype("int64") - w["host_start_ns"]).to_numpy(dtype=np.float64) / 1e6


def _latency(q: float) -> Callable[[_Context], Metric]:
    key = f"step_latency_ms_p{int(q)}"

    def metric(c: _Context) -> Metric:
        if c.no_steps:
            return c.absent(key, c.no_steps)
        return c.have(key, np.percentile(_latencies_ms(c), q))

    metric.__name__ = f"_{key}"
    return metric


def _step_gpu_ms_p50(c: _Context) -> Metric:
    if c.no_steps:
        return c.absent("step_gpu_ms_p50", c.no_steps)
    w = c.windows
    return c.have("step_gpu_ms_p50", np.median((w["gpu_end_ns"] - w["gpu_start_ns"]).astype("int64")) / 1e6)


def _steps_per_s(c: _Context) -> Metric:
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


def _pageable_memcpy_bytes(c: _Context) -> Metric:
    if c.no_gpu:
        return c.absent("pageable_memcpy_bytes", c.no_gpu)
    copies = c.in_span[(c.in_span["kind"] == "memcpy") & (c.in_span["host_mem"] == "pageable")]
    return c.have("pageable_memcpy_bytes", copies["bytes"].fillna(0).sum())


def _achieved_occupancy_est(c: _Context) -> Metric:
    if c.no_gpu:
        return c.absent("achieved_occupancy_est", c.no_gpu)
    k = c.in_span[(c.in_span["kind"] == "kernel") & c.in_span["occupancy_pct"].notna()]
    dur = (k["end_ns"] - k["start_ns"]).to_numpy(dtype=np.float64)
    if k.empty or dur.sum() <= 0:
        return c.absent("achieved_occupancy_est", "the trace has no per-kernel occupancy estimate (Kineto records it)")
    return c.have("achieved_occupancy_est", np.average(k["occupancy_pct"].to_numpy() / 100.0, weights=dur))


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
    rows = rows[rows["duration_ns"] > 0]
    if rows.empty:
        return None
    w = rows["duration_ns"].to_numpy(dtype=np.float64)
    return float(np.average(rows["value"].to_numpy(dtype=np.float64), weights=w)), float(w.sum())


def _samples_mean(c: _Context, metric: str) -> tuple[float, str] | None:
    """Mean of a sampled series over S (or over all samples when the trace has no span)."""
    s = c.profile.samples
    s = s[s["metric"] == metric]
    if c.span is not None and not s.empty:
        lo, hi = c.span
        inside = s[(s["time_ns"] >= lo) & (s["time_ns"] <= hi)]
        s = inside if not inside.empty else s
    if s.empty:
        return None
    # Trust order among samplers: GPM counters over nsys's sampled throughput.
    for source in ("nvml-gpm", "nsys-gpu-metrics", "nvml"):
        part = s[s["source"] == source]
        if not part.empty:
            return float(part["value"].mean()), source
    return float(s["value"].mean()), str(s["source"].iloc[0])


def _dram_bw_util(c: _Context, peak: Metric, steps_per_s: Metric) -> Metric:
    counters = c.profile.counters
    reads = counters[counters["metric"].isin((NCU_DRAM_READ, NCU_DRAM_WRITE))]
    if not reads.empty and peak.value:
        dur = counters.loc[counters["metric"] == NCU_DRAM_READ, "duration_ns"].sum()
        if dur > 0:
            return c.have("dram_bw_util", reads["value"].sum() / (dur / 1e9) / (peak.value * 1e9), source="ncu")
    sampled = _samples_mean(c, "dram_bw_util")
    if sampled is not None:
        return c.have("dram_bw_util", sampled[0], source=sampled[1])
    if c.bytes_per_step and peak.value and steps_per_s.value:
        return c.have(
            "dram_bw_util",
            c.bytes_per_step * steps_per_s.value / (peak.value * 1e9),
            source="model",
            note="declared bytes per step x steps/s / peak",
        )
    needs = []
    if not c.bytes_per_step:
        needs.append("a DRAM counter (perfdoctor run with NVML GPM, ncu or nsys --gpu-metrics-devices) or a step that declares its bytes")
    if not peak.value:
        needs.append("the device peak bandwidth")
    return c.absent("dram_bw_util", "needs " + " and ".join(needs or ["steps/s"]))


def _sm_occupancy(c: _Context) -> Metric:
    ncu = _ncu_weighted(c, NCU_OCCUPANCY)
    if ncu is not None:
        return c.have("sm_occupancy", ncu[0] / 100.0, source="ncu")
    sampled = _samples_mean(c, "sm_occupancy")
    if sampled is not None:
        return c.have("sm_occupancy", sampled[0], source=sampled[1])
    return c.absent("sm_occupancy", "needs hardware counters: perfdoctor run with NVML GPM or ncu")


def _memory_bubble_ratio(c: _Context, dram: Metric, idle: Metric) -> Metric:
    if dram.value is not None and dram.source != "model":
        return c.have("memory_bubble_ratio", 1.0 - dram.value, source=dram.source)
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


def _profiler_overhead_ratio(c: _Context, p50: Metric) -> Metric:
    light_pass = c.profile.meta.get("light_pass") or {}
    light = light_pass.get("step_latency_ms") or []
    if not light:
        return c.absent("profiler_overhead_ratio", "needs the light timing pass of perfdoctor run")
    timed = light_pass.get("step_name")
    if timed and c.steps.name and not fnmatch.fnmatchcase(timed, c.steps.name):
        return c.absent("profiler_overhead_ratio", f"the light pass timed {timed!r}, not the traced steps {c.steps.name!r}")
    if p50.value is None:
        return c.absent("profiler_overhead_ratio", p50.reason or "no traced step latency")
    return c.have("profiler_overhead_ratio", p50.value / float(np.median(light)))


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


def analyze(profile: Profile, step: str | None = None, tokens_per_step: float | None = None) -> Analysis:
    """Compute every metric of the contract that ``profile`` allows.

    ``step`` is an exact range name or glob (``"step*"``); by default steps are the
    ``ProfilerStep#N`` ranges, else the most frequent repeated range with GPU work.
    ``tokens_per_step`` overrides what the workload declared.
    """
    steps = find_steps(profile, step)
    c = _Context(profile, steps, tokens_per_step)
    m: dict[str, Metric] = {}
    m["steps"] = _steps(c)
    m["gpu_idle_ratio"] = _gpu_idle_ratio(c)
    m["kernel_time_ratio"] = _kernel_time_ratio(c)
    m["memcpy_time_ratio"] = _memcpy_time_ratio(c)
    m["kernels_per_step"] = _kernels_per_step(c)
    m["launches_per_step"] = _launches_per_step(c)
    m["launch_rate_per_s"] = _launch_rate_per_s(c)
    m["short_kernel_ratio"] = _short_kernel_ratio(c)
    for q in (50, 90, 99):
        m[f"step_latency_ms_p{q}"] = _latency(q)(c)
    m["step_gpu_ms_p50"] = _step_gpu_ms_p50(c)
    m["steps_per_s"] = _steps_per_s(c)
    m["tokens_per_s"] = _tokens_per_s(c, m["steps_per_s"])
    m["sync_calls_per_step"] = _sync_calls_per_step(c)
    m["pageable_memcpy_bytes"] = _pageable_memcpy_bytes(c)
    m["achieved_occupancy_est"] = _achieved_occupancy_est(c)
    m["peak_dram_bw_gbps"] = _peak_dram_bw_gbps(c)
    m["dram_bw_util"] = _dram_bw_util(c, m["peak_dram_bw_gbps"], m["steps_per_s"])
    m["sm_occupancy"] = _sm_occupancy(c)
    m["memory_bubble_ratio"] = _memory_bubble_ratio(c, m["dram_bw_util"], m["gpu_idle_ratio"])
    m["l2_hit_rate"] = _ncu_ratio(c, "l2_hit_rate", NCU_L2_HIT, 100.0)
    m["warp_exec_efficiency"] = _ncu_ratio(c, "warp_exec_efficiency", NCU_WARP_EFF, 32.0)
    m["profiler_overhead_ratio"] = _profiler_overhead_ratio(c, m["step_latency_ms_p50"])
    m["throttle_time_ratio"] = _throttle_time_ratio(c)
    return Analysis(metrics=m, steps=steps, profile=profile)
