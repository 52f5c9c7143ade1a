"""Where NVIDIA's command line tools are: one :func:`find_tool` for nsys and ncu, which are
often installed but not on PATH. Here, below record/, because reading a ``.nsys-rep``
given to ``analyze`` needs nsys as much as ``perfdoctor run`` does."""

from __future__ import annotations

import glob
import os
import shutil

# Where each tool lives when it is not on PATH, newest first within each pattern.
SEARCH_GLOBS = {
    "nsys": (
        "/opt/nvidia/nsight-systems*/*/bin/nsys",
        "/opt/nvidia/nsight-systems*/bin/nsys",
        "/opt/nvidia/nsight-systems*/*/target-linux-x64/nsys",
        "/usr/local/cuda*/bin/nsys",
        "/usr/local/cuda*/nsight-systems*/bin/nsys",
        # Nsight Compute ships an nsys of its own.
        "/opt/nvidia/nsight-compute*/*/host/target-linux-x64/nsys",
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
