"""Torch traces begun with the program. On a program whose steps the light pass cannot see,
the torch pass traces from the program's start, and stops tracing once the tracer's events
fill ``--trace-budget``; the program runs on to its end untraced
(record.bootstrap.session.Session.watch_trace). And a step the traced run never reaches
makes the torch pass run again so (record.passes.torch_pass).

Real processes and the real torch profiler, on a real program of that shape
(tests/programs/real/jacobi_solve.py: sweeps at the top of the script, no module, no range).
"""

from __future__ import annotations

import gzip
import json
import textwrap
from pathlib import Path

import pytest

from conftest import run_cli, run_cli_inprocess
from perfdoctor.text import value

JACOBI = Path(__file__).parents[1] / "programs" / "real" / "jacobi_solve.py"
SWEEPS = 3000  # each runs one aten::clone; ~0.15 s traced, 40-90 MB of events on the CPU


def run_jacobi(tmp: Path, *flags: object, program: Path = JACOBI) -> tuple:
    done = run_cli("run", "--out", tmp / "runs", "--collect", "torch", *flags, program, "--device", "cpu", "--n", 64,
                   "--sweeps", SWEEPS, "--solves", 1, cwd=tmp, timeout=180)
    (bundle,) = (tmp / "runs").iterdir()
    manifest = json.loads((bundle / "manifest.json").read_text())
    results = json.loads((bundle / "raw" / "torch.json").read_text())
    with gzip.open(bundle / "raw" / "torch-trace.json.gz", "rt") as f:
        events = json.load(f)["traceEvents"]
    clones = sum(e.get("name") == "aten::clone" and e.get("ph") == "X" for e in events)
    return done, bundle, manifest, results, clones


def test_a_program_with_no_step_is_traced_until_the_budget_then_runs_on(tmp_path):
    budget = 16
    done, bundle, manifest, results, clones = run_jacobi(tmp_path, "--trace-budget", budget)
    assert done.returncode == 0, done.stderr[-2000:]
    assert manifest["light_pass"]["step_name"] is None  # the case: no step seen
    assert manifest["collectors"]["torch"]["status"] == "ok", manifest["collectors"]["torch"]
    # the program ran to its end in the torch pass either way, its own last line printed
    log = (bundle / "raw" / "torch.log").read_text()
    assert f'"sweeps": {SWEEPS}' in log, log[-1000:]
    cut = results["trace_cut"]
    # stopped where the process held the budget over the light pass's peak and the profiler's share
    light_peak = json.loads((bundle / "raw" / "light.json").read_text())["max_rss_mb"]
    assert cut["rss_mb"] >= light_peak + budget
    assert 0 < clones < SWEEPS, clones  # a part of the loop, exported whole (the file reads)
    scope = manifest["passes"][1]["trace_scope"]
    assert scope.startswith(f"the program's first {value(cut['seconds'], 's')}: with no step to window on"), scope
    assert "with no step to window on, the trace began with the program; it was stopped" in done.stderr
    assert "--trace-budget (16 MB over what the program and the profiler hold alone)" in done.stderr
    # the cut trace reads like any other
    analyzed = run_cli_inprocess("analyze", bundle)
    assert analyzed.returncode == 0, analyzed.stderr[-2000:]


def test_a_program_that_takes_the_signal_slot_is_traced_whole(tmp_path):
    """The watch asks the main thread through a signal slot's handler (SIGURG, never sent):
    a program that installs its own handler there keeps it, is never called by perfdoctor,
    and its trace runs to the end (as every trace did before the budget: every sweep's clone)."""
    program = tmp_path / "own_urg.py"
    program.write_text(textwrap.dedent(f"""
        import runpy, signal, sys
        calls = []
        signal.signal(signal.SIGURG, lambda signum, frame: calls.append(signum))
        sys.argv = [{str(JACOBI)!r}, *sys.argv[1:]]
        runpy.run_path(sys.argv[0], run_name="__main__")
        print("handler calls", len(calls))
    """))
    done, bundle, manifest, results, clones = run_jacobi(tmp_path, "--trace-budget", 16, program=program)
    assert done.returncode == 0, done.stderr[-2000:]
    assert results.get("trace_cut") is None and clones == SWEEPS
    assert "it was stopped" not in done.stderr
    assert "handler calls 0" in (bundle / "raw" / "torch.log").read_text()


def test_a_step_that_never_reaches_its_window_in_the_traced_run_falls_back_to_a_trace_from_the_start(tmp_path):
    """The light pass found a step, but the torch pass ran fewer of them than the light
    pass's warm-up (a benchmark bounded by time runs fewer steps under a tracer; a program
    the traced pass sees otherwise, as Ultralytics' was before 7080319): no trace at all was
    the reading. Now the torch pass runs again, traced from the program's start as with no
    step. Here the program runs 3 steps where torch was imported before it (the traced
    passes import it first), 40 in the light pass."""
    program = tmp_path / "fewer.py"
    program.write_text(textwrap.dedent("""
        import sys
        traced = "torch" in sys.modules
        import torch
        model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
        x = torch.randn(32, 64)
        for _ in range(3 if traced else 40):
            with torch.no_grad():
                model(x).sum().item()
    """))
    done = run_cli("run", "--out", tmp_path / "runs", "--collect", "torch", program, cwd=tmp_path, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    (bundle,) = (tmp_path / "runs").iterdir()
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["light_pass"]["step_name"] == "Sequential.forward" and manifest["light_pass"]["steps_seen"] == 40
    assert [p["name"] for p in manifest["passes"]] == ["light", "torch", "torch"]
    assert manifest["collectors"]["torch"]["status"] == "ok", manifest["collectors"]["torch"]
    assert "never reached its window here" in done.stderr and "tracing the program from its start instead" in done.stderr
    raw = bundle / "raw"
    assert json.loads((raw / "torch-window.json").read_text())["window_state"] == "before"  # the windowed run, kept
    assert json.loads((raw / "torch.json").read_text())["whole_program"] is True
    with gzip.open(raw / "torch-trace.json.gz", "rt") as f:
        events = json.load(f)["traceEvents"]
    assert sum(e.get("name") == "aten::linear" and e.get("ph") == "X" for e in events) == 2 * 3  # every forward of the run
    analyzed = run_cli_inprocess("analyze", bundle)
    assert analyzed.returncode == 0, analyzed.stderr[-2000:]


@pytest.mark.parametrize("given", ["-1", "lots"])
def test_a_trace_budget_that_is_no_size_is_one_line_and_exit_2(tmp_path, given):
    done = run_cli("run", "--out", tmp_path / "runs", "--trace-budget", given, JACOBI, cwd=tmp_path, timeout=60)
    assert done.returncode == 2
    assert done.stderr.startswith("error: invalid value for '--trace-budget'") and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "runs").exists()  # nothing ran, no bundle
