"""perfdoctor demo: the README's main job, end to end on this machine (the tiny engine on CPU)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_cli


def test_demo_profiles_the_engine_reports_and_diffs(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    r = run_cli("demo", "--out", tmp_path / "runs", "--steps", "6", cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    bundles = sorted((tmp_path / "runs").iterdir())
    assert len(bundles) == 2
    for bundle in bundles:
        manifest = json.loads((bundle / "manifest.json").read_text())
        assert manifest["exit_code"] == 0
        assert manifest["collectors"]["torch"]["status"] == "ok"
        metrics = json.loads((bundle / "metrics.json").read_text())
        assert metrics["step_name"] == "decode_step"
        assert metrics["metrics"]["steps"]["value"] == 6
    out = r.stdout
    assert "perfdoctor run -m perfdoctor.engine" in out
    assert "not evaluated" in out  # a CPU run says which GPU checks it could not make, and why
    assert "perfdoctor diff" in out and "kernels:" in out
