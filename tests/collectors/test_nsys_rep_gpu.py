"""On the H200: record a .nsys-rep with the real nsys and analyze it directly (nsys export runs inside)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import run_cli
from perfdoctor.collectors.tools import find_tool

pytestmark = pytest.mark.gpu

PROGRAM = textwrap.dedent(
    """
    import torch
    x = torch.randn(1024, 1024, device="cuda")
    torch.cuda.synchronize()
    for _ in range(6):
        torch.cuda.nvtx.range_push("step")
        y = (x @ x).relu().sum()
        torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    """
)


def test_analyze_reads_nsys_rep(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    nsys = find_tool("nsys")
    if nsys is None:
        pytest.skip("nsys not found (PATH, $NSYS, /opt/nvidia)")
    prog = tmp_path / "prog.py"
    prog.write_text(PROGRAM)
    rec = subprocess.run(
        [nsys, "profile", "-t", "cuda,nvtx", "--sample=none", "--cpuctxsw=none", "-o", str(tmp_path / "out"), sys.executable, str(prog)],
        capture_output=True, text=True, timeout=300,
    )
    assert rec.returncode == 0, rec.stderr[-2000:]
    r = run_cli("analyze", tmp_path / "out.nsys-rep", "--json", tmp_path / "m.json")
    assert r.returncode == 0, r.stderr
    import json

    m = json.loads((tmp_path / "m.json").read_text())["metrics"]
    assert m["steps"]["value"] == 6
    assert m["kernels_per_step"]["value"] >= 2
    assert m["peak_dram_bw_gbps"]["value"] > 1000
