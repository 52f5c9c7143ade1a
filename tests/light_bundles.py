"""A run bundle holding only a light pass's series, written by hand: the rule tests' way
to give the analysis a step series of a known shape (no trace, no program run)."""

from __future__ import annotations

import json
from pathlib import Path


def light_only_bundle(dst: Path, step: str, host_start_ns: list[int], gpu_end_ns: list[int], steady_start: int,
                      cpu_wait_ns: list[int] | None = None) -> Path:
    """``dst`` as a finished run's bundle whose light pass timed ``step``'s steps (host start,
    end), the steady state from ``steady_start``; ``cpu_wait_ns``: each step's wait for a CPU."""
    raw = dst / "raw"
    raw.mkdir(parents=True)
    series = {step: {"host_start_ns": host_start_ns, "gpu_start_ns": None, "gpu_end_ns": gpu_end_ns}}
    if cpu_wait_ns is not None:
        series[step]["cpu_wait_ns"] = cpu_wait_ns
    (raw / "light.json").write_text(json.dumps({"series": series}))
    (dst / "manifest.json").write_text(json.dumps({
        "schema": "perfdoctor.run/1", "status": "finished", "exit_code": 0, "step": step, "collectors": {},
        "light_pass": {"step_name": step, "steady_start": steady_start, "steady_reason": "test"}}))
    return dst
