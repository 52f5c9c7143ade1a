"""The run bundle: one directory per ``perfdoctor run``, readable even after a crash.

    perfdoctor-runs/20261129-223000-infer/
      manifest.json     command, exit code, timings, GPU, versions, collector statuses and
                        the exact tool commands; written first, rewritten after each pass
      raw/              the tools' own outputs, per pass:
        <pass>.config.json  what the bootstrap was asked to do (pass, window, step)
        <pass>.json       what it saw: step counts, the window, the clock-sync point;
                          light.json also, per step name, every step's host start, GPU
                          start and GPU end in ns ("series"; "spans_ns" in older bundles)
        <pass>.log        the program's (and the tool's) output, for all but the first pass
        torch-trace.json.gz   Kineto trace of the --warmup/--steps window
        nsys.nsys-rep, nsys.sqlite    Nsight Systems report and its SQLite export
        ncu.csv           Nsight Compute's --csv output
        nvml-<pass>.jsonl NVML samples taken during that pass (CLOCK_MONOTONIC)
      metrics.json      perfdoctor.metrics/1, when the analysis could run

:func:`load_bundle` merges what is there into one :class:`~perfdoctor.profile.Profile`:
activities, calls and ranges from the Kineto trace (else the nsys export), NVML samples
of the same pass moved onto that trace's clock, ncu counters, the device from NVML, and
``meta.light_pass`` from the timing pass.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

import pandas as pd

from perfdoctor.errors import UsageError
from perfdoctor.profile import Profile

MANIFEST = "manifest.json"
RAW = "raw"
TORCH_TRACE = "torch-trace.json.gz"
NSYS_SQLITE = "nsys.sqlite"
NCU_CSV = "ncu.csv"
CLOCK_SYNC_RANGE = "perfdoctor.clock_sync"  # bootstrap.CLOCK_SYNC_RANGE (not imported: no torch here)
SCHEMA = "perfdoctor.run/1"


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
    """Write JSON so that a reader (or a crash) never sees half a file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2, default=str))
    os.replace(tmp, path)


def read_manifest(bundle: Path) -> dict[str, Any]:
    try:
        return json.loads((bundle / MANIFEST).read_text())
    except FileNotFoundError:
        raise UsageError(f"{bundle}: not a perfdoctor run bundle (no {MANIFEST})") from None
    except ValueError as exc:
        raise UsageError(f"{bundle}/{MANIFEST}: not valid JSON ({exc})") from None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _activity_source(raw: Path, warnings: list[str]) -> tuple[Profile, str | None]:
    """The Kineto trace when it loads, else the nsys export; else an empty Profile."""
    from perfdoctor.collectors import nsys, torch_profiler

    for pass_name, path, loader in (("torch", raw / TORCH_TRACE, torch_profiler.load), ("nsys", raw / NSYS_SQLITE, nsys.load)):
        if not path.exists():
            continue
        try:
            return loader(path), pass_name
        except Exception as exc:  # noqa: BLE001 - a damaged trace: say so, try the next one
            warnings.append(f"{path.name} could not be read: {exc}")
    return Profile(), None


def _clock_offset(profile: Profile, results: dict[str, Any]) -> int | None:
    """trace clock − CLOCK_MONOTONIC, from the bootstrap's clock-sync range."""
    mono = (results.get("clock_sync") or {}).get("monotonic_ns")
    marks = profile.ranges[profile.ranges["name"] == CLOCK_SYNC_RANGE]
    if mono is None or marks.empty:
        return None
    return int(marks["start_ns"].iloc[0]) - int(mono)


def load_bundle(bundle: str | Path) -> Profile:
    """Everything a run collected, as one Profile (see the module docstring)."""
    from perfdoctor.collectors import ncu, nvml

    bundle = Path(bundle)
    manifest = read_manifest(bundle)
    raw = bundle / RAW
    warnings: list[str] = []
    profile, pass_name = _activity_source(raw, warnings)

    if pass_name is not None:
        offset = _clock_offset(profile, _read_json(raw / f"{pass_name}.json"))
        samples_file = raw / f"nvml-{pass_name}.jsonl"
        if samples_file.exists():
            if offset is None:
                warnings.append("NVML samples left out: the trace has no clock-sync range to align them")
            else:
                samples = nvml.read_samples(samples_file, offset)
                profile.samples = pd.concat([profile.samples, samples], ignore_index=True) if len(profile.samples) else samples
        profile.ranges = profile.ranges[profile.ranges["name"] != CLOCK_SYNC_RANGE].reset_index(drop=True)

    if (raw / NCU_CSV).exists():
        profile.counters = ncu.parse_csv((raw / NCU_CSV).read_text(errors="replace"))

    gpu = manifest.get("gpu") or {}
    for key, value in gpu.items():
        profile.device.setdefault(key, value)
    if "peak_dram_bw_gbps" in gpu and "peak_source" not in profile.device:
        profile.device["peak_source"] = gpu.get("peak_source", "nvml")
    calibration = manifest.get("calibration")
    if calibration:
        profile.device["measured_dram_bw_gbps"] = calibration.get("dram_read_gbps")
        profile.device["measured_bf16_tflops"] = calibration.get("bf16_matmul_tflops")
        profile.device["measured_source"] = f"perfdoctor calibrate ({calibration.get('measured_at', '?')})"

    meta = profile.meta
    meta.setdefault("source", "bundle")
    meta["path"] = str(bundle)
    meta["bundle"] = {
        "step": manifest.get("step"),  # the step name the run traced (its --step, or found)
        "activities_from": pass_name,
        "exit_code": manifest.get("exit_code"),
        "status": manifest.get("status"),
        "collectors": {k: v.get("status") for k, v in (manifest.get("collectors") or {}).items()},
    }
    if pass_name is None:
        meta["bundle"]["reason"] = "no trace in the bundle (see the collectors' statuses)"
    if manifest.get("light_pass"):
        meta["light_pass"] = manifest["light_pass"]
    if warnings:
        meta["warnings"] = warnings
    return profile
