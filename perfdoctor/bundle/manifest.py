"""Shape checks for a run bundle's JSON files, before anything reads a field of them.

A bundle is input like any other: its ``manifest.json`` and ``raw/<pass>.json`` may be
valid JSON of the wrong shape (a list, a string where a table belongs, an unknown schema).
:func:`validate_manifest` and :func:`validate_pass_results` turn that into one
:class:`~perfdoctor.errors.UsageError` naming the field, and return the document with its
strings cleaned (:func:`perfdoctor.text.clean_deep`). :func:`check_bundle` runs both on a
bundle directory, and refuses raw files that are not regular files (a FIFO would hang).
"""

from __future__ import annotations

import math
import os
import stat
from pathlib import Path
from typing import Any

from perfdoctor.errors import UsageError
from perfdoctor.text import clean_deep

SCHEMA = "perfdoctor.run/1"  # perfdoctor.bundle.layout.SCHEMA (not imported: keep this light)
PASSES = ("torch", "nsys", "light", "ncu")

_Number = (int, float)


def _is_number(v: Any) -> bool:
    return isinstance(v, _Number) and not isinstance(v, bool) and math.isfinite(v)


def _expect(cond: bool, where: str, field: str, what: str) -> None:
    if not cond:
        raise UsageError(f"{where}: field {field!r}: expected {what}")


def _optional(doc: dict[str, Any], key: str, types: tuple[type, ...], where: str, what: str) -> None:
    v = doc.get(key)
    _expect(v is None or (isinstance(v, types) and not (isinstance(v, bool) and bool not in types)), where, key, what)


def validate_manifest(manifest: Any, where: str | Path = "manifest.json") -> dict[str, Any]:
    """``manifest`` when it has the shape the bundle reader relies on, strings cleaned."""
    where = str(where)
    if not isinstance(manifest, dict):
        raise UsageError(f"{where}: expected a JSON object (the run manifest), got {type(manifest).__name__}")
    schema = manifest.get("schema")
    if schema is not None and schema != SCHEMA:
        raise UsageError(f"{where}: field 'schema': {schema!r} is not {SCHEMA!r} (a bundle from another perfdoctor version?)")
    for key in ("step", "status"):
        _optional(manifest, key, (str,), where, "a string")
    _optional(manifest, "exit_code", (int,), where, "an integer")
    _optional(manifest, "world_size", (int,), where, "an integer")
    for key in ("gpu", "calibration", "collectors", "light_pass", "environment", "ranks"):
        _optional(manifest, key, (dict,), where, "a JSON object")
    # A device fact NVML could not give as a number (NaN, inf) is absent, not an error:
    # the bundle stays readable and nothing downstream sees a non-finite value.
    gpu = {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in (manifest.get("gpu") or {}).items()}
    if manifest.get("gpu"):
        manifest = {**manifest, "gpu": gpu}
    for key, value in gpu.items():
        _expect(value is None or isinstance(value, (str, bool)) or _is_number(value), where, f"gpu.{key}", "a string or a finite number")
    for key in ("peak_dram_bw_gbps", "sm_count"):
        _expect(gpu.get(key) is None or (_is_number(gpu[key]) and gpu[key] > 0), where, f"gpu.{key}", "a positive number")
    calibration = manifest.get("calibration") or {}
    for key in ("dram_read_gbps", "bf16_matmul_tflops"):
        _expect(calibration.get(key) is None or _is_number(calibration[key]), where, f"calibration.{key}", "a finite number")
    for name, c in (manifest.get("collectors") or {}).items():
        _expect(isinstance(c, dict), where, f"collectors.{name}", "a JSON object")
    light = manifest.get("light_pass") or {}
    lat = light.get("step_latency_ms")
    _expect(lat is None or (isinstance(lat, list) and all(_is_number(x) and x >= 0 for x in lat)), where,
            "light_pass.step_latency_ms", "a list of finite non-negative numbers")
    for key, entry in (manifest.get("ranks") or {}).items():
        _expect(key.isascii() and key.isdigit() and isinstance(entry, dict), where, f"ranks.{key}", "a JSON object under a rank number")
        _expect(entry.get("light_pass") is None or isinstance(entry["light_pass"], dict), where, f"ranks.{key}.light_pass", "a JSON object")
    _expect(light.get("step_name") is None or isinstance(light.get("step_name"), str), where, "light_pass.step_name", "a string")
    return clean_deep(manifest)


def validate_pass_results(doc: Any, where: str | Path) -> dict[str, Any]:
    """A ``raw/<pass>.json`` (what the bootstrap saw) when its shape is usable."""
    where = str(where)
    if not isinstance(doc, dict):
        raise UsageError(f"{where}: expected a JSON object (a pass's results), got {type(doc).__name__}")
    sync = doc.get("clock_sync")
    _expect(sync is None or isinstance(sync, dict), where, "clock_sync", "a JSON object")
    mono = (sync or {}).get("monotonic_ns")
    _expect(mono is None or (isinstance(mono, int) and not isinstance(mono, bool) and abs(mono) < 2**62), where,
            "clock_sync.monotonic_ns", "an integer")
    _expect(doc.get("environment") is None or isinstance(doc.get("environment"), dict), where, "environment", "a JSON object")
    return doc


def read_valid_manifest(bundle: str | Path) -> dict[str, Any]:
    """A bundle's manifest: read safely (regular file, capped, BOM accepted), parsed and
    shape-checked; a missing or malformed one is a UsageError."""
    from perfdoctor.io import read_json

    bundle = Path(bundle)
    path = bundle / "manifest.json"
    if not os.path.lexists(path):
        raise UsageError(f"{bundle}: not a perfdoctor run bundle (no manifest.json)")
    return validate_manifest(read_json(path), path)


def check_bundle(bundle: Path) -> dict[str, Any]:
    """Check a bundle directory before it is read: its manifest (present, regular, valid,
    well shaped), every raw file a regular file, the pass results well shaped."""
    from perfdoctor.io import read_json, regular_file

    manifest = read_valid_manifest(bundle)
    raw = bundle / "raw"
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
                validate_pass_results(read_json(path), path)
    return manifest
