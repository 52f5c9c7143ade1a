"""Issue 32: outputs go where the user points. ``-`` is stdout (``--json -`` is valid JSON
there, and only JSON), ``report BUNDLE -o FILE`` leaves the bundle alone, and the command
the demo suggests writes nothing into the package (a clean ``git status``)."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import FIXTURES, run_cli

ROOT = Path(__file__).resolve().parents[2]
EAGER = FIXTURES / "h200-decode-eager-5steps.kineto.json.gz"
GRAPH = FIXTURES / "h200-decode-graph-10steps.kineto.json.gz"


def test_json_dash_is_valid_json_on_stdout_and_no_file(tmp_path: Path) -> None:
    r = run_cli("analyze", EAGER, "--json", "-", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)  # the whole of stdout: the report went to stderr
    assert doc["schema"] == "perfdoctor.metrics/2" and doc["metrics"]["steps"]["value"] == 5
    assert "Findings" in r.stderr
    r = run_cli("diff", EAGER, GRAPH, "--step", "decode_step", "--json", "-", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["schema"].startswith("perfdoctor.diff/")
    r = run_cli("report", EAGER, "-f", "json", "-o", "-", cwd=tmp_path)
    assert r.returncode == 0 and json.loads(r.stdout)["schema"] == "perfdoctor.findings/1"
    assert list(tmp_path.iterdir()) == []  # no file named "-"


def test_report_of_a_bundle_with_o_writes_only_there(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    shutil.copytree(ROOT / "perfdoctor" / "demo" / "data" / "eager", bundle)
    before = sorted(p.relative_to(bundle) for p in bundle.rglob("*"))
    r = run_cli("report", bundle, "-f", "html", "-o", tmp_path / "x.html")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "x.html").stat().st_size > 1000
    assert sorted(p.relative_to(bundle) for p in bundle.rglob("*")) == before


def git_status() -> str:
    return subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=ROOT, capture_output=True, text=True, check=True).stdout


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs a git checkout")
def test_the_command_the_demo_suggests_leaves_git_status_clean(tmp_path: Path) -> None:
    shown = run_cli("demo", "--recorded", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    text = " ".join(shown.stdout.split("The bundles are in", 1)[1].split())
    command = shlex.split(text.split(": ", 1)[1])
    assert command[:2] == ["perfdoctor", "report"] and "-o" in command
    before = git_status()
    r = run_cli(*command[1:], cwd=ROOT)  # from the repository root, the worst place to write
    assert r.returncode == 0, r.stderr
    assert git_status() == before
    Path(command[command.index("-o") + 1]).unlink()


def test_help_metavars_come_from_click_types_too() -> None:
    """Typers that use click itself (the H200's) give parameters a click type and no
    display_type: the plain metavars come from the type's name there."""
    import click

    from perfdoctor.cli.commands import _metavar

    class ClickParam:
        def __init__(self, kind: click.ParamType) -> None:
            self.type = kind

    got = {type(k).__name__: _metavar(ClickParam(k)) for k in (click.INT, click.FloatRange(min=0), click.Path(), click.STRING, click.Choice(["a"]))}
    assert got == {"IntParamType": "N", "FloatRange": "NUM", "Path": "PATH", "StringParamType": "TEXT", "Choice": None}
