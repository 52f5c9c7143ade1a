"""Running Nsight Systems (the reading side is :mod:`perfdoctor.collectors.nsys`).

:func:`profile_command` builds a low-overhead capture (CUDA + NVTX + OS runtime calls, no
CPU sampling or context-switch tracing — with sampling on, a 20-matmul script wrote a 2 GB
``.qdstrm``) and :func:`export_command` the SQLite export the loader reads.
"""

from __future__ import annotations

from pathlib import Path


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
