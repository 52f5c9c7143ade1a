"""The tools ``perfdoctor run`` may use on this machine: the GPU, and nsys and ncu (found by
:func:`perfdoctor.collectors.tools.find_tool`)."""

from __future__ import annotations

import importlib.util
import os
import sys

from perfdoctor.collectors import nvml
from perfdoctor.collectors.tools import find_tool, where_looked


def gpu_present() -> bool:
    """An NVIDIA GPU is visible (driver /proc entries or device nodes), without importing torch."""
    try:
        if os.listdir("/proc/driver/nvidia/gpus"):
            return True
    except OSError:
        pass
    return any(name[6:].isdigit() for name in os.listdir("/dev") if name.startswith("nvidia"))


def availability() -> dict[str, str | None]:
    """Per collector: None when it can run here, else why not."""
    gpu = gpu_present()
    no_gpu = "no NVIDIA GPU on this machine (no /proc/driver/nvidia/gpus, no /dev/nvidiaN)"
    torch_missing = None if importlib.util.find_spec("torch") else f"torch is not installed for {sys.executable}"
    nsys_missing = None if find_tool("nsys") else f"nsys not found (looked in {where_looked('nsys')})"
    ncu_missing = None if find_tool("ncu") else "ncu not found ($NCU, PATH, /opt/nvidia/nsight-compute, /usr/local/cuda*/bin)"
    return {
        "torch": torch_missing,
        "nvml": nvml.probe(),
        "nsys": nsys_missing or (None if gpu else no_gpu),
        "ncu": ncu_missing or (None if gpu else no_gpu),
    }

