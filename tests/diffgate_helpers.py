"""Helpers for test_diff.py and test_gate.py: the CLI runner and CRAFTED trace variants.

``cli()`` runs ``python -m perfdoctor`` in a subprocess, so the exit-code mapping under
test is the real one; ``cli_inprocess()`` runs the same ``main`` in this process, for the
many usage-error and option checks that need no process of their own.

CRAFTED variants of a real H200 Kineto trace, for tests that need a known change:

Each function reads a real fixture, edits its events in one stated way and writes a new
``.json.gz`` — so the loader, step finder and metrics run unchanged on it. These are
labelled crafted: they test the arithmetic of diff and gate, not what a GPU does. The
claims about real eager-vs-graph runs are tested on recorded traces in test_diff.py.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Callable

from conftest import run_cli, run_cli_inprocess

def cli(*args, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``perfdoctor ARGS`` in a subprocess (``python -m perfdoctor``): exit codes and
    stderr as a CI job sees them."""
    return run_cli(*map(str, args), env=env)


def cli_inprocess(*args, env: dict | None = None) -> subprocess.CompletedProcess:
    """``perfdoctor ARGS`` through the real ``perfdoctor.cli.commands.main`` in this process (same
    result shape as :func:`cli`, no interpreter start-up)."""
    return run_cli_inprocess(*args, env=env)


GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")


def _rewrite(src: Path, dst: Path, edit: Callable[[dict], None]) -> Path:
    doc = json.loads(gzip.decompress(src.read_bytes()))
    edit(doc)
    dst.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return dst


def stretched(src: Path, dst: Path, factor: float) -> Path:
    """GPU timeline stretched by ``factor`` from the first GPU event on (host side untouched):
    every step's GPU window ends later, so step latency rises and kernels take longer."""

    def edit(doc: dict) -> None:
        gpu = [e for e in doc["traceEvents"] if e.get("cat") in GPU_CATEGORIES and e.get("ph") == "X"]
        t0 = min(e["ts"] for e in gpu)
        for e in gpu:
            e["ts"] = t0 + (e["ts"] - t0) * factor
            e["dur"] = e.get("dur", 0) * factor

    return _rewrite(src, dst, edit)


def renamed_kernels(src: Path, dst: Path, old_substring: str, new_name: str) -> Path:
    """Kernels whose name contains ``old_substring`` renamed to ``new_name`` (as if a
    compiler had replaced them): the old family vanishes, the new one appears."""

    def edit(doc: dict) -> None:
        for e in doc["traceEvents"]:
            if e.get("cat") == "kernel" and old_substring in e.get("name", ""):
                e["name"] = new_name

    return _rewrite(src, dst, edit)


def other_gpu(src: Path, dst: Path, gpu_name: str, driver: int) -> Path:
    """Same events, a different GPU name and driver in the trace header."""

    def edit(doc: dict) -> None:
        for props in doc.get("deviceProperties", []):
            props["name"] = gpu_name
        doc["cuda_driver_version"] = driver

    return _rewrite(src, dst, edit)


def crafted_bundle(trace: Path, dst: Path, *, light_ms: list[float], torch: str, driver: str = "580.95.05") -> Path:
    """A CRAFTED run bundle around a real trace: manifest with NVML GPU facts, the light
    pass's step latencies and the torch version the bootstrap would have recorded."""
    raw = dst / "raw"
    raw.mkdir(parents=True)
    (raw / "torch-trace.json.gz").write_bytes(trace.read_bytes())
    (raw / "torch.json").write_text(json.dumps({"pass": "torch", "environment": {"torch": torch, "cuda": "13.0"}}))
    # The light pass's raw series in perfdoctor 0.1's format ([host start, GPU end] per step):
    # a synchronous loop, each step starting 50 µs after the previous one ended, so every
    # step's critical path is exactly its light_ms.
    spans, t = [], 1_000_000_000
    for ms in light_ms:
        spans.append([t, t + round(ms * 1e6)])
        t = spans[-1][1] + 50_000
    (raw / "light.json").write_text(json.dumps({"pass": "light", "spans_ns": {"decode_step": spans}, "step_end_clock": "cuda-event"}))
    manifest = {
        "schema": "perfdoctor.run/1",
        "status": "finished",
        "exit_code": 0,
        "gpu": {"name": "NVIDIA H200", "driver_version": driver, "cuda_driver_version": 13000},
        "light_pass": {"step_name": "decode_step", "step_latency_ms": light_ms},
        "collectors": {"torch": {"status": "ok"}},
    }
    (dst / "manifest.json").write_text(json.dumps(manifest))
    return dst
