"""Checking a run bundle on disk before anything reads a field of it.

A bundle is input like any other: :func:`check_bundle` refuses raw files that are not
regular files (a FIFO would hang) and checks the manifest's and the pass results' shapes
through :mod:`perfdoctor.bundle.protocol` (one :class:`~perfdoctor.errors.UsageError` naming
the field).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from perfdoctor.bundle.layout import MANIFEST, PASSES, RAW
from perfdoctor.bundle.protocol import Manifest, PassResults
from perfdoctor.errors import UsageError


def read_valid_manifest(bundle: str | Path) -> Manifest:
    """A bundle's manifest: read safely (regular file, capped, BOM accepted), parsed and
    shape-checked (strings cleaned); a missing or malformed one is a UsageError."""
    from perfdoctor.io import read_json

    bundle = Path(bundle)
    path = bundle / MANIFEST
    if not os.path.lexists(path):
        raise UsageError(f"{bundle}: not a perfdoctor run bundle (no {MANIFEST})")
    return Manifest.from_json(read_json(path), str(path))


def check_bundle(bundle: Path) -> Manifest:
    """Check a bundle directory before it is read: its manifest (present, regular, valid,
    well shaped), every raw file a regular file, the pass results well shaped."""
    return read_bundle(bundle)[0]


def read_bundle(bundle: Path) -> tuple[Manifest, dict[str, PassResults]]:
    """:func:`check_bundle`'s manifest, and the pass results it checked (``raw/<pass>.json``,
    per pass that wrote one), so that the reading does not read them again."""
    from perfdoctor.io import read_json, regular_file

    manifest = read_valid_manifest(bundle)
    results: dict[str, PassResults] = {}
    raw = bundle / RAW
    if raw.is_dir():
        for entry in sorted(raw.iterdir()):
            try:
                mode = os.stat(entry).st_mode
            except OSError:
                raise UsageError(f"{entry}: cannot read (a dangling link?)") from None
            if stat.S_ISDIR(mode):
                continue
            regular_file(entry)
        for name in PASSES:
            path = raw / f"{name}.json"
            if path.exists():
                results[name] = PassResults.from_json(read_json(path), str(path))
    return manifest, results
