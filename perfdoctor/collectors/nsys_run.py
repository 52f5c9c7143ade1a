"""Running Nsight Systems (the reading side is :mod:`perfdoctor.collectors.nsys`).

``nsys`` is often installed but not on PATH: :func:`find_nsys` looks where NVIDIA puts it.
:func:`profile_command` builds a low-overhead capture (CUDA + NVTX + OS runtime calls, no
CPU sampling or context-switch tracing — with sampling on, a 20-matmul script wrote a 2 GB
``.qdstrm``) and :func:`export_command` the SQLite export the loader reads.
"""

from __future__ import annotations

import glob
import os
import shutil
from pathlib import Path

# Where nsys lives when it is not on PATH, newest first within each pattern.
SEARCH_GLOBS = (
    "/opt/nvidia/nsight-systems*/*/bin/nsys",
    "/opt/nvidia/nsight-systems*/bin/nsys",
    "/usr/local/cuda*/bin/nsys",
    "/usr/local/cuda*/nsight-systems*/bin/nsys",
    # Nsight Compute ships an nsys of its own.
    "/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys",
    "/usr/local/cuda*/nsight-compute*/host/target-linux-x64/nsys",
)


def find_nsys() -> str | None:
    """Path of an nsys executable: ``$NSYS``, PATH, then the usual install folders."""
    candidates = [os.environ.get("NSYS", ""), shutil.which("nsys") or ""]
    for pattern in SEARCH_GLOBS:
        candidates += sorted(glob.glob(pattern), reverse=True)
    for path in candidates:
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def where_looked() -> str:
    return "$NSYS, PATH, " + ", ".join(SEARCH_GLOBS)


def profile_command(nsys: str, output: Path, capture_range: bool, gpu_metrics_device: str | None) -> list[str]:
    """``nsys profile`` options; the program's command line is appended by the caller.

    ``capture_range``: record only between cudaProfilerStart and Stop, which the bootstrap
    calls around the ``--warmup``/``--steps`` window. ``gpu_metrics_device``: also sample the
    GPU's hardware counters (DRAM throughput, SM activity) on that device.
    """
    cmd = [
        nsys, "profile",
        "--trace=cuda,nvtx,osrt",
        "--sample=none",
        "--cpuctxsw=none",
        "--cuda-graph-trace=node",
        "--force-overwrite=true",
        f"--output={output}",
    ]
    if capture_range:
        cmd += ["--capture-range=cudaProfilerApi", "--capture-range-end=stop"]
    if gpu_metrics_device is not None:
        cmd.append(f"--gpu-metrics-devices={gpu_metrics_device}")
    return cmd


def export_command(nsys: str, report: Path, sqlite: Path) -> list[str]:
    return [nsys, "export", "--type=sqlite", "--force-overwrite=true", f"--output={sqlite}", str(report)]
