"""``perfdoctor calibrate``: what this GPU actually achieves, measured once and cached.

The theoretical DRAM bandwidth (NVML: 2 × max memory clock × bus width) is a ceiling no
kernel reaches; reports that grade a kernel against it alone overstate the headroom.
Calibration measures two practical ceilings:

* DRAM read bandwidth: a read-only reduction (``x.sum()``) over buffers several times
  larger than L2, so every byte comes from DRAM; bytes / time, best of several sizes;
* dense bf16 matmul rate: ``2 n³`` FLOP / time for square matmuls.

Times are CUDA-event times of the median of several repetitions after a warm-up. The
results are cached per GPU (by UUID) in ``$XDG_CACHE_HOME/perfdoctor/calibration.json``
(default ``~/.cache/...``); ``perfdoctor run`` copies the entry into the bundle so reports
can show utilization against both the theoretical peak and the measured ceiling.
"""

from __future__ import annotations

import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

from perfdoctor.errors import UsageError
from perfdoctor.io import cache_dir, read_json, write_json
from perfdoctor.text import clean

READ_SIZES_MB = (256, 1024, 4096)
MATMUL_N = 8192


def cache_path() -> Path:
    return cache_dir() / "calibration.json"


def load_all() -> dict[str, Any]:
    """The cache's entries that are valid (:func:`valid_entry`); a cache that is not a
    regular JSON file (a FIFO would hang, /dev/zero never ends, deep nesting) counts as
    empty: it is rebuilt by the next ``calibrate``, never propagated into a bundle."""
    return _read_cache()[0]


def _read_cache() -> tuple[dict[str, Any], str | None]:
    """:func:`load_all`'s entries, and what of an existing cache was dropped (None: nothing,
    or no cache yet): what ``calibrate`` warns about before it rewrites the file."""
    path = cache_path()
    try:
        data = read_json(path)
    except UsageError as exc:
        return {}, (clean(exc) if os.path.lexists(path) else None)
    if not isinstance(data, dict):
        return {}, f"{path}: not a JSON object"
    entries = {k: v for k, v in data.items() if isinstance(k, str) and valid_entry(v)}
    dropped = len(data) - len(entries)
    return entries, (f"{path}: {dropped} invalid entr{'y' if dropped == 1 else 'ies'} dropped (the two "
                     "ceilings must be positive, finite numbers)" if dropped else None)


def valid_entry(entry: Any) -> bool:
    """An entry a bundle can carry: the manifest check (bundle.manifest) wants the two
    ceilings finite, positive numbers; an unchecked entry made every bundle unreadable."""
    def positive(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0

    return (isinstance(entry, dict) and positive(entry.get("dram_read_gbps")) and positive(entry.get("bf16_matmul_tflops"))
            and isinstance(entry.get("measured_at", ""), str))


def load_calibration(gpu_uuid: str) -> dict[str, Any] | None:
    """The cached calibration of the GPU with this UUID, if it was calibrated."""
    return load_all().get(gpu_uuid)


def save_calibration(gpu_uuid: str, entry: dict[str, Any]) -> Path | None:
    """Cache ``entry``; None, with a warning on stderr, when the cache cannot be written
    (the measurement is still printed: an unwritable cache is "not cached", not a failure).
    An existing cache that is unreadable, or has invalid entries, is a one-line warning: the
    rewritten file keeps only the valid entries."""
    data, dropped = _read_cache()
    if dropped:
        print(f"warning: calibration cache rewritten: {clean(dropped)}", file=sys.stderr)
    data[gpu_uuid] = entry
    path = cache_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, data, follow_links=False)
    except (OSError, UsageError) as exc:
        print(f"warning: calibration not cached ({clean(exc)})", file=sys.stderr)
        return None
    return path


def timed_ms(fn: Callable[[], Any], device: Any, repeats: int = 10, warmup: int = 2) -> float:
    """Median milliseconds of ``fn()`` on ``device`` (CUDA events on a GPU, perf_counter on CPU)."""
    import torch

    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def read_bandwidth_gbps(device: Any, sizes_mb: tuple[int, ...] = READ_SIZES_MB) -> dict[int, float]:
    """GB/s of a read-only ``sum`` over a float32 buffer of each size (MB = 1e6 bytes)."""
    import torch

    def one(mb: int) -> float:
        x = torch.ones(mb * 1_000_000 // 4, dtype=torch.float32, device=device)
        return x.numel() * 4 / (timed_ms(x.sum, device) / 1e3) / 1e9

    return {mb: one(mb) for mb in sizes_mb}


def matmul_tflops(device: Any, n: int = MATMUL_N, dtype: Any = None) -> float:
    """TFLOP/s of an n×n by n×n matmul (bf16 by default)."""
    import torch

    a = torch.randn(n, n, device=device, dtype=dtype or torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=dtype or torch.bfloat16)
    ms = timed_ms(lambda: a @ b, device)
    return 2 * n**3 / (ms / 1e3) / 1e12


def calibrate(device: Any, sizes_mb: tuple[int, ...] = READ_SIZES_MB, n: int = MATMUL_N) -> dict[str, Any]:
    """Measure both ceilings on ``device``; the entry that is cached."""
    import torch

    reads = read_bandwidth_gbps(device, sizes_mb)
    entry: dict[str, Any] = {
        "dram_read_gbps": max(reads.values()),
        "dram_read_gbps_by_size_mb": {str(k): v for k, v in reads.items()},
        "bf16_matmul_tflops": matmul_tflops(device, n),
        "matmul_n": n,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "torch": torch.__version__,
    }
    if device.type == "cuda":
        entry["name"] = torch.cuda.get_device_name(device)
    return entry
