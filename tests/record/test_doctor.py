"""perfdoctor doctor and perfdoctor --version: what this machine offers, and why not."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import run_cli
from perfdoctor import __version__
from perfdoctor.record.doctor import render
from perfdoctor.record.tools import gpu_present

no_gpu_here = pytest.mark.skipif(gpu_present(), reason="checks the CPU-only output; this machine has a GPU")


def test_version() -> None:
    r = run_cli("--version")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"perfdoctor {__version__}"


@no_gpu_here
def test_doctor_on_cpu_says_why_each_collector_is_unavailable() -> None:
    r = run_cli("doctor")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert all(len(line) <= 80 for line in out.splitlines()), max(out.splitlines(), key=len)
    assert "─" not in out and "│" not in out  # plain text, no box drawing
    flat = " ".join(out.split())
    assert f"perfdoctor {__version__} (" in flat
    assert "python " in flat and "torch " in flat
    assert "GPU none: no NVIDIA GPU on this machine" in flat
    for name in ("nvml", "nsys", "ncu"):
        assert f"{name} unavailable: " in flat, name
    assert "nsys not found; looked in $NSYS, PATH" in flat
    assert "ncu not found; looked in $NCU, PATH" in flat
    assert "calibration no GPU to calibrate" in flat


@no_gpu_here
def test_doctor_json_on_cpu() -> None:
    r = run_cli("doctor", "--json")
    assert r.returncode == 0, r.stderr
    facts = json.loads(r.stdout)
    assert facts["schema"] == "perfdoctor.doctor/1"
    assert facts["perfdoctor"]["version"] == __version__
    assert facts["gpus"]["present"] is False and facts["gpus"]["devices"] == []
    assert facts["gpus"]["nvml"].startswith("unavailable: ")
    collectors = facts["collectors"]
    assert set(collectors) == {"torch", "nvml", "nsys", "ncu"}
    for name in ("nvml", "nsys", "ncu"):
        assert collectors[name]["available"] is False and collectors[name]["reason"], name
    assert facts["tools"]["nsys"]["path"] is None and "$NSYS" in facts["tools"]["nsys"]["looked_in"]
    assert facts["torch"]["installed"] is (collectors["torch"]["available"])


def test_render_with_a_gpu_lists_it_gpm_and_the_tool_paths() -> None:
    facts = {
        "perfdoctor": {"version": __version__, "path": "/x/perfdoctor"},
        "python": {"version": "3.11.7", "executable": "/usr/bin/python3"},
        "torch": {"installed": True, "version": "2.13.0+cu130", "cuda": "13.0", "cuda_available": True, "cuda_devices": 1},
        "gpus": {
            "present": True,
            "nvml": "ok",
            "devices": [
                {
                    "index": 0,
                    "name": "NVIDIA H200",
                    "uuid": "GPU-1",
                    "driver_version": "580.159.04",
                    "memory_bytes": 150 * 2**30,
                    "peak_dram_bw_gbps": 4814.4,
                    "gpm_supported": True,
                    "gpm": "supported",
                }
            ],
        },
        "tools": {
            "nsys": {"path": "/opt/nvidia/nsight-systems/2025.5/bin/nsys", "looked_in": "..."},
            "ncu": {"path": "/usr/local/cuda/bin/ncu", "looked_in": "..."},
        },
        "calibration": {"cache": "/root/.cache/perfdoctor/calibration.json", "devices": {"GPU-1": None}},
        "collectors": {n: {"available": True, "reason": None} for n in ("torch", "nvml", "nsys", "ncu")},
    }
    out = render(facts)
    flat = " ".join(out.split())
    assert "GPU 0 NVIDIA H200, driver 580.159.04, 150 GiB" in flat
    assert "GPM supported" in flat
    assert "nsys /opt/nvidia/nsight-systems/2025.5/bin/nsys" in flat
    assert "ncu /usr/local/cuda/bin/ncu" in flat
    assert "torch 2.13.0+cu130, CUDA 13.0 build, 1 CUDA device(s) usable" in flat
    assert "GPU-1: not cached (perfdoctor calibrate" in flat
    assert "unavailable" not in flat


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_present(), reason="needs an NVIDIA GPU")
def test_doctor_on_the_gpu_lists_gpm_and_the_nsight_paths() -> None:
    """On the H200 (scripts/gpu-check): GPM supported, nsys and ncu found, every collector available."""
    r = run_cli("doctor", "--json")
    assert r.returncode == 0, r.stderr
    facts = json.loads(r.stdout)
    devices = facts["gpus"]["devices"]
    assert devices, facts["gpus"]
    assert facts["gpus"]["nvml"] == "ok"
    if any("H100" in d.get("name", "") or "H200" in d.get("name", "") for d in devices):
        assert all(d["gpm_supported"] for d in devices), devices
    for tool in ("nsys", "ncu"):
        path = facts["tools"][tool]["path"]
        assert path and os.access(path, os.X_OK), (tool, facts["tools"][tool])
    assert all(c["available"] for c in facts["collectors"].values()), facts["collectors"]
    text = run_cli("doctor")
    assert text.returncode == 0
    flat = " ".join(text.stdout.split())
    assert "GPM supported" in flat
    assert facts["tools"]["nsys"]["path"] in flat and facts["tools"]["ncu"]["path"] in flat
    Path(os.environ.get("PERFDOCTOR_DOCTOR_OUT", os.devnull)).write_text(text.stdout)
