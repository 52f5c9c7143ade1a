"""The tools ``perfdoctor run`` may use on this machine: the GPU, and one :func:`find_tool`
for NVIDIA's command line tools (nsys, ncu), which are often installed but not on PATH."""

from __future__ import annotations

import glob
import importlib.util
import os
import shutil
import sys

from perfdoctor.collectors import nvml

# Where each tool lives when it is not on PATH, newest first within each pattern.
SEARCH_GLOBS = {
    "nsys": (
        "/opt/nvidia/nsight-systems*/*/bin/nsys",
        "/opt/nvidia/nsight-systems*/bin/nsys",
        "/usr/local/cuda*/bin/nsys",
        "/usr/local/cuda*/nsight-systems*/bin/nsys",
        # Nsight Compute ships an nsys of its own.
        "/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys",
        "/usr/local/cuda*/nsight-compute*/host/target-linux-x64/nsys",
    ),
    "ncu": ("/opt/nvidia/nsight-compute/*/ncu", "/usr/local/cuda*/bin/ncu"),
}


def find_tool(name: str) -> str | None:
    """Path of the executable ``name`` (a key of :data:`SEARCH_GLOBS`): ``$NAME`` (``$NSYS``,
    ``$NCU``), PATH, then the usual install folders."""
    candidates = [os.environ.get(name.upper(), ""), shutil.which(name) or ""]
    for pattern in SEARCH_GLOBS[name]:
        candidates += sorted(glob.glob(pattern), reverse=True)
    for path in candidates:
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def where_looked(name: str) -> str:
    return f"${name.upper()}, PATH, " + ", ".join(SEARCH_GLOBS[name])


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

