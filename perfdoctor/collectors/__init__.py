"""Collectors: each module knows how to run one tool and how to read its output.

:func:`load_trace` is the single entry point for reading something that already exists: a
Kineto trace, an Nsight Systems export or a perfdoctor run bundle.
"""

from __future__ import annotations

import os
from pathlib import Path

from perfdoctor.errors import UsageError
from perfdoctor.io import regular_file
from perfdoctor.profile import Profile

KINETO_SUFFIXES = (".json", ".json.gz")
NSYS_SUFFIXES = (".sqlite", ".sqlite.gz", ".nsys-rep")


def load_trace(path: str | Path) -> Profile:
    """Read a trace or a run bundle into a :class:`Profile`, choosing the loader by name.

    Only regular files (after resolving symlinks) and bundle directories are read: a FIFO
    or a device is refused before it is opened (see ``docs/safety.md``).
    """
    path = Path(path)
    if not os.path.lexists(path):
        raise UsageError(f"{path}: no such file or directory")
    if path.is_dir():
        from perfdoctor.bundle import load_bundle
        from perfdoctor.manifest import check_bundle

        check_bundle(path)
        return load_bundle(path)
    regular_file(path)
    name = path.name.lower()
    if name.endswith(KINETO_SUFFIXES):
        from perfdoctor.collectors import torch_profiler

        return torch_profiler.load(path)
    if name.endswith(NSYS_SUFFIXES):
        from perfdoctor.collectors import nsys

        return nsys.load(path)
    raise UsageError(
        f"{path}: unknown trace type; expected a Kineto trace ({', '.join(KINETO_SUFFIXES)}), "
        f"an Nsight Systems export ({', '.join(NSYS_SUFFIXES)}) or a run bundle directory"
    )

