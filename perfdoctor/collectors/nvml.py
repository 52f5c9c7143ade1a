"""NVML: a background sampler of the GPU's own counters, and the device's peak bandwidth.

``perfdoctor run`` runs :class:`Sampler` in its own process (not the target's, so the
target's GIL is untouched) while a pass runs. Every ``interval`` it reads, through
``pynvml`` (the ``nvidia-ml-py`` package):

* utilization (``gpu_util``, ``mem_util``), memory used, SM and memory clocks, power,
  temperature, the clock-event (throttle) reasons and PCIe TX/RX bytes/s — source ``nvml``;
* on GPUs with GPM (Hopper and later) the hardware counters ``dram_bw_util``,
  ``sm_occupancy`` and ``sm_util`` over the interval since the previous sample — source
  ``nvml-gpm``. They cost no kernel replay: this is the cheap counter source.

Samples are written as JSON lines ``{"t": ns, "m": metric, "v": value, "s": source}`` with
``t`` on CLOCK_MONOTONIC; the bundle loader moves them onto the trace's clock. Ratios are
0..1 (NVML reports percent).
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any, TextIO

import pandas as pd

from perfdoctor.io import read_capped
from perfdoctor.profile import SAMPLE_COLUMNS, frame
from perfdoctor.text import value

# GPM metric ids (nvmlGpmMetricId_t), named as perfdoctor samples.
GPM_METRICS = {10: "dram_bw_util", 3: "sm_occupancy", 2: "sm_util"}
# Clock-event reasons that mean the card slowed itself for heat or power:
# SW power cap, HW slowdown, SW thermal, HW thermal, HW power brake.
THROTTLE_MASK = 0x4 | 0x8 | 0x20 | 0x40 | 0x80


def _nvml() -> Any:
    """pynvml, initialised; raises RuntimeError with a one-line reason when it cannot be."""
    try:
        import pynvml
    except ImportError:
        raise RuntimeError("pynvml is not installed (pip install nvidia-ml-py)") from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise RuntimeError(f"NVML cannot start: {exc}") from None
    return pynvml


def device_index(env: dict[str, str] | None = None) -> int | str:
    """The NVML device the program's first CUDA device is: CUDA_VISIBLE_DEVICES' first entry
    (an index, or a GPU-/MIG- UUID), else 0."""
    visible = (env if env is not None else os.environ).get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    if not visible:
        return 0
    return int(visible) if visible.isdigit() else visible


def _handle(pynvml: Any, index: int | str) -> Any:
    if isinstance(index, int):
        if index >= pynvml.nvmlDeviceGetCount():
            raise RuntimeError(f"NVML sees no GPU {index}")
        return pynvml.nvmlDeviceGetHandleByIndex(index)
    return pynvml.nvmlDeviceGetHandleByUUID(index)


def probe(index: int | str | None = None) -> str | None:
    """None when NVML can sample the target's GPU, else why not."""
    try:
        pynvml = _nvml()
        _handle(pynvml, device_index() if index is None else index)
    except RuntimeError as exc:
        return str(exc)
    except Exception as exc:  # noqa: BLE001 - any NVML error is a reason, not a crash
        return f"NVML: {exc}"
    return None


def peak_dram_bw_gbps(bus_width_bits: int, max_mem_clock_mhz: int) -> float:
    """Theoretical DRAM bandwidth: two transfers per memory clock over the whole bus.

    H200: 2 × 3201 MHz × 6016 bit / 8 = 4814 GB/s.
    """
    return 2 * max_mem_clock_mhz * 1e6 * bus_width_bits / 8 / 1e9


def device_info(index: int | str | None = None) -> dict[str, Any]:
    """Name, UUID, driver, memory, peak DRAM bandwidth and GPM support of the GPU.

    Each field NVML cannot give is left out rather than guessed.
    """
    pynvml = _nvml()
    handle = _handle(pynvml, device_index() if index is None else index)
    info: dict[str, Any] = {}

    def put(key: str, read: Any) -> None:
        try:
            value = read()
        except Exception:  # noqa: BLE001 - an unsupported query just leaves the key out
            return
        info[key] = value.decode() if isinstance(value, bytes) else value

    put("name", lambda: pynvml.nvmlDeviceGetName(handle))
    put("uuid", lambda: pynvml.nvmlDeviceGetUUID(handle))
    put("driver_version", pynvml.nvmlSystemGetDriverVersion)
    put("cuda_driver_version", pynvml.nvmlSystemGetCudaDriverVersion)
    put("memory_bytes", lambda: int(pynvml.nvmlDeviceGetMemoryInfo(handle).total))
    put("sm_count", lambda: int(pynvml.nvmlDeviceGetAttributes(handle).multiprocessorCount))
    put("bus_width_bits", lambda: int(pynvml.nvmlDeviceGetMemoryBusWidth(handle)))
    put("max_mem_clock_mhz", lambda: int(pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_MEM)))
    put("max_sm_clock_mhz", lambda: int(pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM)))
    put("gpm_supported", lambda: bool(pynvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice))
    if "bus_width_bits" in info and "max_mem_clock_mhz" in info:
        info["peak_dram_bw_gbps"] = peak_dram_bw_gbps(info["bus_width_bits"], info["max_mem_clock_mhz"])
        info["peak_source"] = "nvml"
    return info


def local_cpus(index: int | str | None = None) -> set[int]:
    """The CPUs NVML calls ideal for the GPU (its NUMA node's). Timing comparisons pin every
    process to these, so that on a two-socket host none launches kernels from the far socket."""
    pynvml = _nvml()
    handle = _handle(pynvml, device_index() if index is None else index)
    words = pynvml.nvmlDeviceGetCpuAffinity(handle, (os.cpu_count() or 1) // 64 + 1)
    return {64 * w + bit for w, mask in enumerate(words) for bit in range(64) if mask >> bit & 1}


# NVML documents that two nvmlGpmSampleGet() calls should be more than 100 ms apart: the
# GPM counters refresh internally at about that rate, so a shorter interval has no new data
# (it reads NaN or 0). GPM is therefore sampled on its own cadence, never faster than this.
GPM_MIN_INTERVAL_S = 0.1


class Sampler:
    """Samples NVML every ``interval_s`` on a daemon thread until :meth:`stop`; GPM every
    ``gpm_interval_s`` (at least :data:`GPM_MIN_INTERVAL_S`).

    A GPM line carries the interval it describes: ``t0``/``t1`` (CLOCK_MONOTONIC ns, each the
    midpoint of its nvmlGpmSampleGet call) and ``t`` their middle, so a reader can weight
    each value by how much of the interval falls inside the steps it wants.
    """

    def __init__(
        self,
        path: Path,
        interval_s: float = 0.05,
        index: int | str | None = None,
        gpm: bool = True,
        pcie_every: int = 20,
        gpm_interval_s: float = GPM_MIN_INTERVAL_S,
    ) -> None:
        self.pynvml = _nvml()
        self.handle = _handle(self.pynvml, device_index() if index is None else index)
        self.path = path
        self.interval_s = interval_s
        self.gpm_interval_s = max(gpm_interval_s, GPM_MIN_INTERVAL_S)
        self.gpm = gpm and self._gpm_supported()
        # nvmlDeviceGetPcieThroughput blocks ~20 ms in the driver (serialized on its lock):
        # read it only every `pcie_every` ticks.
        self.pcie_every = pcie_every
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="perfdoctor-nvml", daemon=True)

    def _gpm_supported(self) -> bool:
        try:
            return bool(self.pynvml.nvmlGpmQueryDeviceSupport(self.handle).isSupportedDevice)
        except Exception:  # noqa: BLE001 - older driver or GPU: no GPM
            return False

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _timed_gpm_sample(self) -> tuple[Any, int]:
        before = time.monotonic_ns()
        sample = self._gpm_sample()
        return sample, (before + time.monotonic_ns()) // 2

    def _run(self) -> None:
        with open(self.path, "w") as out:
            previous, previous_t = self._timed_gpm_sample() if self.gpm else (None, 0)
            tick = 0
            wait = min(self.interval_s, self.gpm_interval_s)
            next_basic = time.monotonic_ns()
            while not self._stop.wait(wait):
                try:
                    now = time.monotonic_ns()
                    if previous is not None and now - previous_t >= self.gpm_interval_s * 1e9 * 0.98:
                        current, current_t = self._timed_gpm_sample()
                        self._gpm(out, previous_t, current_t, previous, current)
                        self.pynvml.nvmlGpmSampleFree(previous)
                        previous, previous_t = current, current_t
                    if now >= next_basic:
                        self._basic(out, time.monotonic_ns(), pcie=tick % self.pcie_every == 0)
                        tick += 1
                        next_basic = now + int(self.interval_s * 1e9 * 0.98)
                    out.flush()
                except Exception as exc:  # noqa: BLE001 - keep what we have, say why it stopped
                    self.error = f"{type(exc).__name__}: {exc}"
                    return

    def _gpm_sample(self) -> Any:
        sample = self.pynvml.nvmlGpmSampleAlloc()
        self.pynvml.nvmlGpmSampleGet(self.handle, sample)
        return sample

    def _gpm(self, out: TextIO, t0: int, t1: int, first: Any, second: Any) -> None:
        p = self.pynvml
        request = p.c_nvmlGpmMetricsGet_t()
        request.version = p.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(GPM_METRICS)
        request.sample1, request.sample2 = first, second
        for i, metric_id in enumerate(GPM_METRICS):
            request.metrics[i].metricId = metric_id
        p.nvmlGpmMetricsGet(request)
        for i in range(len(GPM_METRICS)):
            m = request.metrics[i]
            if m.nvmlReturn == p.NVML_SUCCESS:
                _write(out, (t0 + t1) // 2, GPM_METRICS[m.metricId], m.value / 100.0, "nvml-gpm", t0, t1)

    def _basic(self, out: TextIO, t: int, pcie: bool) -> None:
        p, h = self.pynvml, self.handle
        util = p.nvmlDeviceGetUtilizationRates(h)
        reasons = int(p.nvmlDeviceGetCurrentClocksThrottleReasons(h))
        values = {
            "gpu_util": util.gpu / 100.0,
            "mem_util": util.memory / 100.0,
            "mem_used_bytes": float(p.nvmlDeviceGetMemoryInfo(h).used),
            "sm_clock_mhz": float(p.nvmlDeviceGetClockInfo(h, p.NVML_CLOCK_SM)),
            "mem_clock_mhz": float(p.nvmlDeviceGetClockInfo(h, p.NVML_CLOCK_MEM)),
            "power_w": p.nvmlDeviceGetPowerUsage(h) / 1000.0,
            "temperature_c": float(p.nvmlDeviceGetTemperature(h, p.NVML_TEMPERATURE_GPU)),
            "throttle": 1.0 if reasons & THROTTLE_MASK else 0.0,
            "throttle_reasons": float(reasons),
        }
        if pcie:
            # NVML reports KB/s averaged over its own 20 ms window.
            values["pcie_tx_bytes_per_s"] = p.nvmlDeviceGetPcieThroughput(h, p.NVML_PCIE_UTIL_TX_BYTES) * 1024.0
            values["pcie_rx_bytes_per_s"] = p.nvmlDeviceGetPcieThroughput(h, p.NVML_PCIE_UTIL_RX_BYTES) * 1024.0
        for metric, value in values.items():
            _write(out, t, metric, value, "nvml")


def _write(out: TextIO, t: int, metric: str, value: float, source: str, t0: int | None = None, t1: int | None = None) -> None:
    row: dict[str, Any] = {"t": t, "m": metric, "v": value, "s": source}
    if t0 is not None:
        row["t0"], row["t1"] = t0, t1
    out.write(json.dumps(row) + "\n")


def read_intervals(path: Path, source: str = "nvml-gpm") -> dict[str, list[tuple[int, int, float]]]:
    """Per metric, the ``(t0, t1, value)`` intervals of a sampler file's ``source`` lines
    that carry their interval (NaN values kept: the caller counts them)."""
    out: dict[str, list[tuple[int, int, float]]] = {}
    with open(path) as f:
        for line in f:
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if r.get("s") == source and "t0" in r:
                out.setdefault(r["m"], []).append((int(r["t0"]), int(r["t1"]), float(r["v"])))
    return out


def read_samples(path: Path, offset_ns: int = 0) -> pd.DataFrame:
    """A sampler's file as a ``samples`` table, times shifted by ``offset_ns``.

    A line cut short by a killed run, or one without the four keys, is skipped.
    """
    rows: list[dict[str, Any]] = []
    for line in read_capped(path).decode("utf-8", "replace").splitlines():
        try:
            row = json.loads(line)
            int(row["t"]), float(row["v"]), row["m"], row["s"]
        except (ValueError, TypeError, KeyError, OverflowError, RecursionError):
            continue
        rows.append(row)
    return frame(
        SAMPLE_COLUMNS,
        {
            "time_ns": [int(r["t"]) + offset_ns for r in rows],
            "metric": [r["m"] for r in rows],
            "value": [float(r["v"]) for r in rows],
            "source": [r["s"] for r in rows],
        },
    )


def union(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, merged, non-empty intervals."""
    out: list[list[int]] = []
    for s, e in sorted((s, e) for s, e in spans if e > s):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def _overlap(t0: int, t1: int, spans: list[tuple[int, int]]) -> int:
    return sum(max(0, min(t1, e) - max(t0, s)) for s, e in spans)


def steps_mean(intervals: list[tuple[int, int, float]], steps: list[tuple[int, int]]) -> dict[str, Any]:
    """A GPM metric averaged over exactly the time of ``steps`` (their union).

    Each GPM value is the metric's average over its interval ``[t0, t1]``; the result is the
    mean of the values weighted by how much of each interval the steps cover, so an interval
    half inside counts half and time outside the steps (start-up, pauses between steps, other
    passes) counts nothing. NaN values (GPM has no new data) are dropped and counted. At
    least one interval must lie wholly inside the steps' span, else there is no value: the
    span is shorter than one GPM interval and every value would mostly describe other time.
    """
    covered = union(steps)
    if not covered:
        return {"value": None, "reason": "no steady steps to average over"}
    start, end = covered[0][0], covered[-1][1]
    used = dropped = inside = 0
    weight = total = 0.0
    for t0, t1, v in intervals:
        w = _overlap(t0, t1, covered)
        if w <= 0:
            continue
        if v != v:  # NaN
            dropped += 1
            continue
        used += 1
        inside += start <= t0 and t1 <= end
        weight += w
        total += w * v
    entry: dict[str, Any] = {"samples": used, "dropped_nan": dropped, "start_ns": start, "end_ns": end,
                             "covered_ns": sum(e - s for s, e in covered)}
    if used == 0:
        entry["value"] = None
        entry["reason"] = (f"all {dropped} GPM samples over the steady steps returned NaN" if dropped
                           else "no GPM sample overlaps the steady steps")
    elif inside == 0:
        entry["value"] = None
        entry["reason"] = (f"the steady steps span {value((end - start) / 1e6, 'ms')}, shorter than one GPM interval: "
                           "no sample lies inside them")
    else:
        entry["value"] = total / weight
    return entry
