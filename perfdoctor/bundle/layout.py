"""Where everything lives in a run bundle: file and folder names, the schema, the clock-sync
range; making a bundle folder and writing its JSON files so no reader sees half a file.

Standard library only: perfdoctor run writes bundles with it, and readers
(:mod:`perfdoctor.collectors.bundle`) find files by these names. The bundle's layout is
drawn in :mod:`perfdoctor.collectors.bundle`'s docstring.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

from perfdoctor.io import dumps_json

MANIFEST = "manifest.json"
RAW = "raw"
TORCH_TRACE = "torch-trace.json.gz"
NSYS_SQLITE = "nsys.sqlite"
NSYS_REP = "nsys.nsys-rep"  # the report nsys writes (record/passes.nsys_pass names it by its stem, raw/nsys)
NCU_CSV = "ncu.csv"
SCHEMA = "perfdoctor.run/1"
PASSES = ("light", "torch", "nsys", "ncu")  # in the order perfdoctor run runs them
# NVTX ranges the bootstrap pushes: the clock-sync point (NVML samples onto the trace's
# clock) and the steps ncu profiles (``ncu --nvtx-include perfdoctor_ncu/``).
CLOCK_SYNC_RANGE = "perfdoctor.clock_sync"
NCU_RANGE = "perfdoctor_ncu"


def new_bundle_dir(parent: Path, name: str) -> Path:
    """Create ``parent/<UTC time>-<name>/raw`` and return the bundle directory."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") or "run"
    base = parent / f"{stamp}-{slug}"
    path, n = base, 1
    while True:
        try:
            (path / RAW).mkdir(parents=True, exist_ok=False)
            return path
        except FileExistsError:
            n += 1
            path = base.with_name(f"{base.name}-{n}")


def write_json_atomic(path: Path, payload: Any) -> None:
    """Write a bundle's JSON so that a reader (or a crash) never sees half a file, as every
    JSON file is written (:func:`perfdoctor.io.dumps_json`: NaN and infinities are null).
    Not :func:`perfdoctor.io.write_json`: that turns an OSError into a UsageError naming the
    file, and ``perfdoctor run`` needs the OSError to say which bundle could not be written
    (a full disk) or that the program removed its bundle folder (cli/run.py)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(dumps_json(payload), encoding="utf-8")
    os.replace(tmp, path)
