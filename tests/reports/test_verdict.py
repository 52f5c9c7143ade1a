"""Issue 32: an honest verdict. A program that crashed, or a run with too little evidence,
is never PASS, and it is the first line a reader sees. Real ``perfdoctor run`` bundles of a
small CPU program (about 15 s each on a loaded 2-core machine)."""

from __future__ import annotations

import re

import json
import os
import textwrap
from pathlib import Path

import pytest

from conftest import run_cli, run_cli_inprocess

PROGRAM = textwrap.dedent(
    """
    import os
    import torch
    import perfdoctor

    model = torch.nn.Linear(64, 64)
    x = torch.randn(8, 64)
    for i in range(30):
        with perfdoctor.region("step"):
            model(x).relu().sum()
        if i == 12 and os.environ.get("CRASH"):
            raise RuntimeError("boom at step 12")
    """
)


def record(tmp_path: Path, crash: bool) -> Path:
    (tmp_path / "app.py").write_text(PROGRAM)
    env = {"CRASH": "1"} if crash else {"CRASH": ""}
    r = run_cli("run", "--out", tmp_path / "runs", "--collect", "torch", "app.py", cwd=tmp_path, env=env, timeout=600)
    assert r.returncode == (1 if crash else 0), r.stderr[-2000:]
    (bundle,) = (tmp_path / "runs").iterdir()
    return bundle


@pytest.fixture(scope="module")
def crashed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return record(tmp_path_factory.mktemp("crashed"), crash=True)


def test_a_crashed_program_is_the_first_line_with_its_exit_code(crashed: Path) -> None:
    r = run_cli_inprocess("analyze", crashed)
    assert r.returncode == 0, r.stderr
    first = r.stdout.splitlines()[0]
    assert first.startswith("CRASHED: the program exited with code 1 (RuntimeError: boom at step 12)"), first
    assert "PASS" not in first


def test_a_crashed_program_is_crashed_in_every_format(crashed: Path, tmp_path: Path) -> None:
    doc = json.loads(run_cli_inprocess("report", crashed, "-f", "json").stdout)
    assert doc["verdict"]["outcome"] == "crashed"
    assert doc["verdict"]["line"].startswith("CRASHED: the program exited with code 1")
    page = run_cli_inprocess("report", crashed, "-f", "html").stdout
    assert 'class="verdict crashed"' in page and "CRASHED: the program exited with code 1" in page
    md = run_cli_inprocess("report", crashed, "-f", "md").stdout
    assert "**CRASHED: the program exited with code 1" in md


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return record(tmp_path_factory.mktemp("clean"), crash=False)


def test_a_clean_run_with_most_checks_not_evaluated_is_inconclusive_not_pass(clean: Path) -> None:
    bundle = clean
    # A CPU run: only the light pass's checks can be evaluated (the latency, the steps'
    # evenness and the time between them, each with a threshold it meets: 57 us CPU steps on
    # a loaded machine can be uneven or slow, or preempted between), and their waits for a CPU
    # where any step waited (cpu-contention, else not evaluated): three or four passes among
    # 36 checks, the rest not evaluated.
    met = ("--threshold", "p99-latency=100000", "--threshold", "uneven-steps=1.01", "--threshold", "time-between-steps=1.01",
           "--threshold", "cpu-contention=1.01")
    r = run_cli_inprocess("analyze", bundle, *met)
    assert r.returncode == 0, r.stderr
    first = r.stdout.splitlines()[0]
    assert re.match(r"INCONCLUSIVE: too little evidence, 0 of (\d+) checks fail, [34] pass, (\d+) not evaluated", first), first
    page = run_cli_inprocess("report", bundle, *met, "-f", "html").stdout
    assert 'class="verdict inconclusive"' in page and 'class="verdict pass"' not in page
    assert "not a CPU-only run" not in r.stderr  # said only where the run had a GPU


def test_a_failure_at_info_is_a_note_not_a_failing_run(clean: Path) -> None:
    """p99-latency is info on inference of no known task (an offline pipeline has no
    latency target): failing it alone read FAIL before, over checks that all passed."""
    met = ("--threshold", "uneven-steps=1.01", "--threshold", "time-between-steps=1.01", "--threshold", "cpu-contention=1.01")
    doc = json.loads(run_cli_inprocess("report", clean, *met, "--threshold", "p99-latency=0.001", "-f", "json").stdout)
    p99 = next(f for f in doc["findings"] if f["id"] == "p99-latency")
    assert (p99["status"], p99["severity"]) == ("fail", "info")
    v = doc["verdict"]
    assert (v["status"], v["top"], v["notes"], v["counts"]["note"]) == ("pass", None, ["p99-latency"], 1)
    assert v["outcome"] == "inconclusive" and re.match(r"INCONCLUSIVE: too little evidence, 0 of \d+ checks fail, [234] pass, \d+ not evaluated, 1 note \(info\)", v["line"]), v["line"]
    assert " — note: p99-latency" in v["line"] and "top:" not in v["line"]
    # A rule at a warning fails the run: time-between-steps with a threshold no run meets.
    warned = ("--threshold", "uneven-steps=1.01", "--threshold", "time-between-steps=0", "--threshold", "cpu-contention=1.01")
    doc = json.loads(run_cli_inprocess("report", clean, *warned, "-f", "json").stdout)
    v = doc["verdict"]
    assert (v["status"], v["outcome"], v["top"]) == ("fail", "fail", "time-between-steps") and v["line"].startswith("FAIL: 1 of "), v
