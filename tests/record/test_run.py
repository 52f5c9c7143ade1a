"""``perfdoctor run`` on small real CPU torch programs (tests/programs/), and its parts.

Every run here starts real Python processes with the real torch profiler; on a CPU-only
machine NVML, nsys and ncu must come out "unavailable: <reason>". Runs are shared between
tests through module fixtures to keep the file fast.
"""

from __future__ import annotations

import json
import re
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import program_results, run_cli_fds, run_cli_inprocess
from perfdoctor import api
from perfdoctor.collectors.bundle import load_bundle
from perfdoctor.declare import DECLARE_PREFIX, declaration_name, parse_declaration
from perfdoctor.record.tools import gpu_present
from perfdoctor.text import value

PROGRAMS = Path(__file__).parents[1] / "programs"
ROOT = Path(__file__).parents[2]
no_gpu = pytest.mark.skipif(gpu_present(), reason="checks the CPU-only statuses")


def perfdoctor_run(*args: str, cwd: Path, timeout: int = 120) -> subprocess.CompletedProcess:
    """``perfdoctor run --out CWD/runs ARGS`` in ``cwd``, in this process (:func:`run_cli_fds`)."""
    return run_cli_fds("run", "--timeout", timeout, "--out", cwd / "runs", *args, cwd=cwd)


def only_bundle(cwd: Path) -> Path:
    (bundle,) = (cwd / "runs").iterdir()
    return bundle


def manifest(bundle: Path) -> dict:
    return json.loads((bundle / "manifest.json").read_text())


def metrics(bundle: Path) -> dict:
    return json.loads((bundle / "metrics.json").read_text())


@pytest.fixture(scope="module")
def rf_run(tmp_path_factory):
    """rf_steps.py with the light pass and the torch profiler (the CPU defaults)."""
    cwd = tmp_path_factory.mktemp("rf")
    done = perfdoctor_run(str(PROGRAMS / "rf_steps.py"), "8", "facts.json", cwd=cwd)
    return done, cwd, only_bundle(cwd)


def test_program_runs_as_python_would(rf_run):
    done, cwd, _ = rf_run
    assert done.returncode == 0, done.stderr
    facts = json.loads((cwd / "facts.json").read_text())
    assert facts == {
        "argv": [str(PROGRAMS / "rf_steps.py"), "8", "facts.json"],
        "cwd": str(cwd),
        "name": "__main__",
        "path0": str(PROGRAMS),
    }
    # The first pass owns the terminal; the torch pass's output goes to its log.
    assert done.stdout.count("done 8 steps") == 1
    assert "done 8 steps" in (only_bundle(cwd) / "raw" / "torch.log").read_text()


def test_the_traced_pass_leaves_torchs_compiler_unloaded(rf_run):
    # torch.profiler's start asks hasattr(torch, "_inductor"), and torch answered by importing
    # its compiler (torch._dynamo, sympy: 1.7 s of every traced process on the 2-CPU box, where
    # the start takes 0.7 ms): a program that never compiles has it unloaded in every pass
    done, _, bundle = rf_run
    assert "compiler loaded: False" in done.stdout
    assert "compiler loaded: False" in (bundle / "raw" / "torch.log").read_text()


@no_gpu
def test_manifest_statuses_on_cpu(rf_run):
    _, _, bundle = rf_run
    m = manifest(bundle)
    assert m["status"] == "done" and m["exit_code"] == 0
    collectors = m["collectors"]
    assert collectors["torch"]["status"] == "ok"
    assert collectors["torch"]["command"][1:3] == ["-m", "perfdoctor.record.bootstrap.main"]
    for name in ("nvml", "nsys", "ncu"):
        assert collectors[name]["status"].startswith("unavailable: "), collectors[name]
        assert len(collectors[name]["status"]) > len("unavailable: ")
    assert [p["name"] for p in m["passes"]] == ["light", "torch"]
    assert m["passes"][1]["steps"] == 8  # step ticks are batched; the last batch is flushed at exit
    assert m["environment"]["python"] == sys.version.split()[0]
    assert m["environment"]["torch"] == __import__("torch").__version__


def test_light_pass_and_step_metrics(rf_run):
    _, _, bundle = rf_run
    light = manifest(bundle)["light_pass"]
    assert light["step_name"] == "train_step"
    assert light["steps_seen"] == 8
    assert len(light["step_latency_ms"]) == 7  # --warmup 1
    assert all(v > 0 for v in light["step_latency_ms"])
    m = metrics(bundle)
    assert m["step_name"] == "train_step"
    assert m["metrics"]["steps"]["value"] == 7  # the traced window: steps 1..7
    profile = load_bundle(bundle)
    assert profile.origin.bundle.light_pass["step_name"] == "train_step"
    assert "perfdoctor.clock_sync" not in set(profile.ranges["name"])
    assert (profile.ranges["name"] == "inner").sum() == 7


def test_analyze_reads_the_bundle(rf_run):
    _, cwd, bundle = rf_run
    assert load_bundle(bundle).origin.bundle.step == "train_step"
    done = subprocess.run([sys.executable, "-m", "perfdoctor", "analyze", str(bundle), "--step", "train_step", "--json", "m.json"],
                          capture_output=True, text=True, cwd=cwd, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads((cwd / "m.json").read_text())["metrics"]["steps"]["value"] == 7


def test_light_pass_latency_is_the_programs_own(tmp_path):
    # On a CPU-only machine --collect nvml leaves just the light pass (no tracer at all).
    done = perfdoctor_run("--collect", "nvml", "--warmup", "2", "--steps", "0", str(PROGRAMS / "timed_steps.py"), "own.json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    light = manifest(only_bundle(tmp_path))["light_pass"]
    own = json.loads((tmp_path / "own.json").read_text())[2:]
    assert light["step_name"] == "decode_step" and len(light["step_latency_ms"]) == len(own) == 10
    light_p50, own_p50 = np.median(light["step_latency_ms"]), np.median(own)
    assert light_p50 >= 20 and abs(light_p50 / own_p50 - 1) < 0.05
    said = done.stdout + done.stderr
    # analyzed, the bundle has no trace to find steps in: its traced step count is absent,
    # not 0 beside the light pass's 10, and no --step is asked for (before: "steps 0", "no
    # step ranges found ... (use --step NAME)")
    done = subprocess.run([sys.executable, "-m", "perfdoctor", "analyze", str(only_bundle(tmp_path)), "--json", "m.json"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    metrics = json.loads((tmp_path / "m.json").read_text())["metrics"]
    steps = metrics["steps"]
    assert steps["value"] is None and steps["reason"].startswith("no trace: "), steps
    # the run's line says analyze's p50 (before: the upper median, 45.3 ms beside analyze's 45.1)
    assert f"p50 {value(metrics['step_latency_ms_p50']['value'], 'ms')}" in said, said
    assert "Where the step went: not available — no trace: " in done.stdout and "--step" not in done.stdout
    assert " — run bundle, " in done.stdout and "bundle trace" not in done.stdout


def test_the_light_pass_leaves_torchs_import_to_the_program(tmp_path):
    # The light pass imported torch before the program (to hook its ranges first), which
    # moved Python's full collections: Lightning's last import-time one (0.2 s) landed in a
    # training step. Now the program imports torch, and the hooks follow right after it:
    # `from torch.profiler import record_function` binds the hooked one, whose ranges are steps
    program = tmp_path / "late.py"
    program.write_text(textwrap.dedent("""
        import sys
        print("torch before the program:", "torch" in sys.modules)
        from torch.profiler import record_function
        import torch
        x = torch.randn(64, 64)
        for _ in range(8):
            with record_function("late_step"):
                x = torch.tanh(x @ x)
    """))
    done = perfdoctor_run("--collect", "nvml", str(program), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "torch before the program: False" in done.stdout
    light = manifest(only_bundle(tmp_path))["light_pass"]
    assert light["step_name"] == "late_step" and light["steps_seen"] == 8


def test_the_light_pass_leaves_none_of_its_own_objects_in_the_programs_collections(tmp_path):
    # A full collection waits until a quarter as many objects as lived after the last one
    # are new: perfdoctor's own (~19k, collected but alive) counted there, so each of the
    # program's set-up collections came later than alone. Keras 3's fit on a DataLoader,
    # whose last one ends its set-up alone, had it (178 ms) in a training step, 5 runs of 5.
    # The light pass now freezes them: the program starts with fewer objects in its
    # collector's count than alone (the interpreter's own start-up objects are frozen too)
    program = tmp_path / "count.py"
    program.write_text(textwrap.dedent("""
        import gc
        print("tracked by the collector:", len(gc.get_objects()), flush=True)
        def step():
            return sum(range(2000))
        for _ in range(20):
            step()
    """))
    counted = re.compile(r"tracked by the collector: (\d+)")
    alone = subprocess.run([sys.executable, str(program)], capture_output=True, text=True, check=True)
    done = perfdoctor_run("--collect", "nvml", "--step-fn", "__main__:step", str(program), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (light,) = counted.findall(done.stdout)
    assert int(light) < int(counted.search(alone.stdout).group(1)) / 4, (light, alone.stdout)


def test_the_light_pass_of_a_program_without_torch_never_imports_it(tmp_path):
    # before, the light pass imported torch whatever the program (1-2 s and ~170k objects)
    program = tmp_path / "plain.py"
    program.write_text(textwrap.dedent("""
        import atexit, sys
        def step():
            return sum(range(20000))
        for _ in range(20):
            step()
        atexit.register(lambda: print("torch at exit:", "torch" in sys.modules))
    """))
    done = perfdoctor_run("--collect", "nvml", "--step-fn", "__main__:step", str(program), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "torch at exit: False" in done.stdout
    assert manifest(only_bundle(tmp_path))["light_pass"]["steps_seen"] == 20


@pytest.fixture(scope="module")
def region_run(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("region")
    done = perfdoctor_run("--no-light", str(PROGRAMS / "region_steps.py"), "6", cwd=cwd)
    return done, only_bundle(cwd)


def test_region_program_steps_and_declaration(region_run):
    done, bundle = region_run
    assert done.returncode == 0, done.stderr
    assert [p["name"] for p in manifest(bundle)["passes"]] == ["torch"]
    m = metrics(bundle)
    assert m["step_name"] == "decode_step"
    assert m["metrics"]["steps"]["value"] == 5
    ranges = load_bundle(bundle).ranges
    # Nested regions are ranges, not steps; the declaration is re-emitted into the window.
    assert (ranges["name"] == "matmul").sum() == 5
    declared = [n for n in ranges["name"] if n.startswith(DECLARE_PREFIX)]
    assert len(declared) == 1
    assert parse_declaration(declared[0]) == ("decode_step", {"tokens": 1, "bytes": 32768})


def test_nvtx_package_ranges_reach_the_torch_trace(tmp_path):
    pytest.importorskip("nvtx")
    done = perfdoctor_run("--no-light", "--step", "nvtx_step", str(PROGRAMS / "nvtx_steps.py"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    bundle = only_bundle(tmp_path)
    assert metrics(bundle)["metrics"]["steps"]["value"] == 5
    ranges = load_bundle(bundle).ranges
    assert (ranges["name"] == "pushed").sum() == 5  # push_range/pop_range mirrored too
    assert (ranges["name"] == "both").sum() == 5  # record_function + NVTX of one name: one range


@pytest.mark.parametrize(("spec", "name"), [("__main__:decode", "decode"), pytest.param("plainlib:step_once", "step_once", marks=pytest.mark.extended),
                                           ("plainpkg.ops:rescale", "rescale")])
def test_step_fn(tmp_path, spec, name):
    done = perfdoctor_run("--no-light", "--step-fn", spec, str(PROGRAMS / "plain_fn.py"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    bundle = only_bundle(tmp_path)
    m = metrics(bundle)
    assert (m["step_name"], m["metrics"]["steps"]["value"]) == (name, 4)


@pytest.mark.parametrize(
    ("args", "program", "says"),
    [
        # plain functions, no module, range or compiled call: the user is told how to name the step
        ((), "plain_fn.py", "no step seen: no record_function/NVTX range, torch.compile-d function, CUDA graph replay, AOTInductor model"),
        (("--step", "nothing"), "cpu_steps.py", "no range named 'nothing' completed (a record_function, NVTX or"),
        (("--step-fn", "__main__:nothing"), "plain_fn.py", "no step seen: __main__:nothing was never called"),
    ],
)
def test_a_light_pass_without_a_step_says_why_on_the_console(tmp_path, args, program, says):
    done = perfdoctor_run("--collect", "nvml", *args, str(PROGRAMS / program), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (line,) = [x for x in done.stderr.splitlines() if x.startswith("light pass: no step seen")]
    assert says in line
    assert manifest(only_bundle(tmp_path))["light_pass"]["reason"] == line.removeprefix("light pass: ")


@pytest.mark.parametrize("thread", [False, pytest.param(True, marks=pytest.mark.extended)], ids=["main", "thread"])
def test_a_program_that_leaves_by_os_exit_keeps_both_passes(tmp_path, thread):
    # os._exit skips finally blocks and atexit: the light pass said "no step seen" and the
    # torch pass "no trace written"; its forked child (a DataLoader worker's way out) must
    # not write the parent's results. From a thread the profiler cannot be stopped (Kineto
    # crashed there): no trace, and the collector says why
    done = perfdoctor_run("--collect", "torch", str(PROGRAMS / "os_exit.py"), "12", *(["--thread"] if thread else []), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    m = manifest(only_bundle(tmp_path))
    torch_status = m["collectors"]["torch"]["status"]
    assert ("os._exit from a thread" in torch_status) if thread else torch_status == "ok", torch_status
    assert m["light_pass"]["step_name"] == "Linear.forward"
    assert m["light_pass"]["steps_seen"] == 12


def test_a_killed_program_s_light_pass_says_it_was_killed_not_that_nothing_repeated(tmp_path):
    done = perfdoctor_run("--collect", "nvml", str(PROGRAMS / "os_exit.py"), "12", "--kill", cwd=tmp_path)
    assert done.returncode == 128 + 9, done.stderr[-3000:]
    (line,) = [x for x in done.stderr.splitlines() if x.startswith("light pass: no step seen")]
    assert "killed by signal 9" in line and "out-of-memory" in line, line
    assert manifest(only_bundle(tmp_path))["light_pass"]["reason"] == line.removeprefix("light pass: ")


@pytest.mark.parametrize("mode", ["schedule", pytest.param("exit", marks=pytest.mark.extended), pytest.param("top", marks=pytest.mark.extended), "plain", pytest.param("legacy", marks=pytest.mark.extended)])
def test_a_program_that_runs_its_own_torch_profiler_keeps_it_and_its_trace_is_the_passs(tmp_path, mode):
    # Kineto traces once per process: with perfdoctor's profiler running, the program's own
    # (the profiler recipe's schedule + tensorboard_trace_handler) died of SIGSEGV. Now
    # perfdoctor's steps aside, and the program's trace is the torch pass's.
    done = perfdoctor_run(str(PROGRAMS / "own_profiler.py"), "--mode", mode, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (result,) = program_results(done.stdout)
    scheduled = mode in ("schedule", "exit", "top")
    assert result["own_traces"] if scheduled else result["own_table_has_mm"]
    if scheduled:  # its on_trace_ready wrote its trace in both passes
        assert len(list((tmp_path / "own-traces").iterdir())) == 2
    bundle = only_bundle(tmp_path)
    m = manifest(bundle)
    assert m["collectors"]["torch"]["status"] == "ok"
    (torch_pass,) = [p for p in m["passes"] if p["name"] == "torch"]
    assert torch_pass["trace_scope"].startswith("the program's own torch profiler trace")
    if scheduled:
        # torch.profiler's steps are the step: ProfilerStep#0..#20, the last one opened by the
        # 20th prof.step() and closed by the with block, with no iteration in it: 20 steps,
        # the program's 20 iterations (21 before: the exit's range counted as a step)
        assert m["light_pass"]["step_name"] == "ProfilerStep#*" and m["light_pass"]["steps_seen"] == result["steps"] == 20
        light = json.loads((bundle / "raw" / "light.json").read_text())
        exited = light["profiler_exit"]["ProfilerStep#20"]["host_start_ns"][0]
        # prof.step() at the top of the loop: #0 holds no iteration and #20 the last one
        assert (light["series"]["ProfilerStep#*"]["host_start_ns"][-1] == exited) is (mode == "top")
        # the trace: the schedule's 3 active steps; or, its exit saving it, #1..#20 of which
        # #20 holds nothing (#0 was warm-up): 19 iterations, in the bundle and alone; at the
        # top of the loop #1..#20 hold the 20 iterations (#0, empty, was warm-up)
        traced = {"schedule": 3, "exit": 19, "top": 20}[mode]
        assert metrics(bundle)["metrics"]["steps"]["value"] == traced
        own = sorted((tmp_path / "own-traces").iterdir())[-1]
        alone = run_cli_inprocess("analyze", own, "--json", "-")
        assert json.loads(alone.stdout)["metrics"]["steps"]["value"] == traced
    else:
        # no prof.step(): the iteration is the optimizer's; the trace holds the 3 profiled ones
        assert m["light_pass"]["step_name"] == "Optimizer.zero_grad#SGD.zero_grad"
        ops = load_bundle(bundle).ops
        assert (ops["name"] == "aten::addmm").sum() == 3 * 2  # two Linear forwards a step


def test_module_target_and_exit_code_are_the_programs(tmp_path):
    # -m: everything after the module name is the module's, options included.
    done = subprocess.run(
        [sys.executable, "-m", "perfdoctor.record.run", "--out", str(tmp_path / "runs"), "--no-light", "-m", "exit3", "-q", "--steps", "2"],
        capture_output=True, text=True, cwd=PROGRAMS, timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])},
    )
    assert done.returncode == 3, done.stderr
    assert "argv ['-q', '--steps', '2']" in done.stdout
    assert "torch pass" in done.stderr  # perfdoctor itself was not made quiet
    bundle = only_bundle(tmp_path)
    m = manifest(bundle)
    assert (m["exit_code"], m["target_exit_code"], m["status"]) == (3, 3, "done")
    # Issue 12: a pass whose program exited non-zero is not "ok" (it was "ok" before), though
    # its trace is kept and the run's exit code stays the program's.
    assert m["collectors"]["torch"]["status"].startswith("failed: the program exited 3")
    assert len(load_bundle(bundle).ranges) > 0


CHILD_TERMINATED = """
import json, multiprocessing as mp, os, signal, sys, time

def child(ready):
    ready.set()
    try:
        time.sleep(30)
    finally:  # runs only where SIGTERM became an exception
        print("child unwound", flush=True)

if __name__ == "__main__":
    ctx = mp.get_context("fork")
    ready = ctx.Event()
    p = ctx.Process(target=child, args=(ready,))
    p.start()
    ready.wait(30)
    p.terminate()  # what Pool.terminate() does to its workers: SIGTERM
    p.join(30)
    print("RESULT " + json.dumps({"exitcode": p.exitcode}))
"""


def test_a_forked_child_dies_of_sigterm_as_without_perfdoctor(tmp_path):
    # multiprocessing's Pool.terminate() (a `with Pool() as pool:` block's exit) ends its
    # workers by SIGTERM. The forked workers inherited the bootstrap's handler, which raised
    # an exception wherever they were: once inside the task queue's lock, which hung the
    # pool's shutdown and the program (pool_classify.py --workers 3 on the CPU); else a
    # "Process ForkPoolWorker-1: Traceback ... Terminated" in the program's output
    (tmp_path / "prog.py").write_text(CHILD_TERMINATED)
    done = perfdoctor_run("-q", "--collect", "nvml", "prog.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    results = program_results(done.stdout)
    assert results and all(r["exitcode"] == -signal.SIGTERM for r in results), done.stdout
    assert "child unwound" not in done.stdout and "Terminated" not in done.stderr


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_killed_run_leaves_a_readable_bundle(tmp_path, sig):
    ready = tmp_path / "ready"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "perfdoctor.record.run", "-q", "--no-light", "--steps", "0", "--out", str(tmp_path / "runs"),
           str(PROGRAMS / "sleeper.py"), str(ready)]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ready.exists(), proc.communicate()[1]
    os.killpg(proc.pid, sig)
    proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig
    bundle = only_bundle(tmp_path)
    m = manifest(bundle)
    assert m["status"] == "interrupted" and m["exit_code"] == 128 + sig
    assert m["collectors"]["torch"]["status"] == "ok"
    assert metrics(bundle)["metrics"]["steps"]["value"] >= 4  # the steps before the signal


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--collect", "torch,gpuz", "x.py"], "unknown collector gpuz"),
        (["missing.py"], "missing.py: no such script"),
        # a launcher on PATH that is neither torchrun nor accelerate (deepspeed, mpirun): named as one
        (["--", "ls", "x.py"], "ls: a command, not a Python script"),
        (["--step-fn", "nocolon", "x.py"], "expected module:function"),
        ([], "nothing to run"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
    (tmp_path / "x.py").write_text("print('hi')\n")
    done = perfdoctor_run(*args, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [f"error: {done.stderr.strip()[7:]}"]
    assert message in done.stderr
    assert not (tmp_path / "runs").exists()


NOTEBOOK = {  # what Jupyter writes: Python would run it as code and stop at "null" with a traceback
    "cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
               "source": ["import torch\n", "for _ in range(3):\n", "    torch.ones(4).sum()\n"]}],
    "metadata": {"kernelspec": {"name": "python3"}}, "nbformat": 4, "nbformat_minor": 5,
}


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("explore.ipynb", json.dumps(NOTEBOOK), "a Jupyter notebook, not a Python script: export it first (jupyter nbconvert --to script explore.ipynb)"),
        ("cpu.kineto.json.gz", (ROOT / "tests/fixtures/cpu-mlp-5steps.kineto.json.gz").read_bytes(), "a trace, not a program: perfdoctor analyze cpu.kineto.json.gz"),
        ("train.sh", "#!/bin/bash\npython x.py --epochs 1\n", "train.sh: a shell script"),
        ("launch", "#!/usr/bin/env bash\nexec python x.py\n", "launch: a shell script"),
    ],
)
def test_a_file_that_is_no_python_program_is_named_before_anything_runs(tmp_path, name, content, message):
    (tmp_path / "x.py").write_text("print('hi')\n")
    (tmp_path / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    done = perfdoctor_run(name, cwd=tmp_path)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert message in done.stderr
    assert not (tmp_path / "runs").exists()


def test_what_python_runs_still_runs_a_script_without_suffix_and_a_zipapp(tmp_path):
    """The check goes by name and first line only: a python shebang without a suffix, and a
    zipapp (a zip file: no Python source to read), run as python runs them."""
    (tmp_path / "tool").write_text("#!/usr/bin/env python3\nprint('ran tool')\n")
    app = tmp_path / "app"
    app.mkdir()
    (app / "__main__.py").write_text("print('ran zipapp')\n")
    subprocess.run([sys.executable, "-m", "zipapp", str(app), "-o", str(tmp_path / "app.pyz")], check=True)
    for script, said in (("tool", "ran tool"), ("app.pyz", "ran zipapp")):
        done = perfdoctor_run("--no-light", "--collect", "torch", script, cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-2000:]
        assert said in done.stdout


# --- parts ---------------------------------------------------------------------------


def test_declaration_round_trips_without_quotes():
    name = declaration_name("decode_step", 1, 2.0)
    assert '"' not in name and "'" not in name  # Kineto writes range names unescaped
    assert parse_declaration(name) == ("decode_step", {"tokens": 1, "bytes": 2.0})
    # the quoted form recorded by torch 2.11 (which turns " into ') still reads
    assert parse_declaration(DECLARE_PREFIX + "{'step':'decode_step','tokens':1}") == ("decode_step", {"tokens": 1})


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def step_start(self, name: str) -> None:
        self.events.append(("start", name))

    def step_end(self, name: str) -> None:
        self.events.append(("end", name))

    def declared(self, name: str) -> None:
        self.events.append(("declared", name))


def test_api_reports_outermost_regions_and_steps():
    recorder = Recorder()
    api.subscribe(recorder)
    try:
        with api.region("outer", tokens=2):
            with api.region("inner"):
                pass
        api.step()
        api.step()
        api.end_step()
        api.step_function(lambda: None, "fn")()
    finally:
        api._listeners.remove(recorder)
    assert recorder.events == [
        ("declared", "outer"), ("start", "outer"), ("end", "outer"),
        ("start", "perfdoctor.step"), ("end", "perfdoctor.step"),
        ("start", "perfdoctor.step"), ("end", "perfdoctor.step"),
        ("start", "fn"), ("end", "fn"),
    ]
    with pytest.raises(ValueError):
        with api.region(""):
            pass


def test_choose_step_prefers_pattern_then_api_then_most_frequent():
    # run's scout makes the choice analyze makes (analysis.steps.choose_step), through find_step
    from perfdoctor.bundle.protocol import PassResults
    from perfdoctor.record.light import find_step
    from perfdoctor.record.options import RunOptions

    def results(latency, api_counts):
        series = {n: {"host_start_ns": list(range(len(v))), "gpu_start_ns": None, "gpu_end_ns": list(range(len(v)))} for n, v in latency.items()}
        return PassResults(series=series, step_counts=api_counts)

    latency = {"prefill": [1.0], "layer": [0.1] * 6, "decode_step": [1.0] * 3}
    assert find_step(results(latency, {}), RunOptions(target=["x.py"], step="decode*"))[0] == "decode_step"
    assert find_step(results(latency, {"decode_step": 3, "prefill": 1}), RunOptions(target=["x.py"]))[0] == "decode_step"
    assert find_step(results(latency, {}), RunOptions(target=["x.py"]))[0] == "layer"
    assert find_step(results({"once": [1.0]}, {}), RunOptions(target=["x.py"]))[0] is None


def test_ncu_csv_becomes_counters():
    from perfdoctor.collectors.ncu import parse_csv

    # Crafted in the layout of `ncu --csv --print-units base` (see shared DEVICE.md), two kernels.
    text = "\n".join([
        "==PROF== Connected to process 1",
        '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"',
        '"0","1","python","h","gemv","1","7","(128, 1, 1)","(64, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","nsecond","4,096"',
        '"0","1","python","h","gemv","1","7","(128, 1, 1)","(64, 1, 1)","0","9.0","Command line profiler metrics","dram__bytes_read.sum","byte","1000000"',
        '"1","1","python","h","add","1","7","(128, 1, 1)","(64, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","usecond","2"',
        '"1","1","python","h","add","1","7","(128, 1, 1)","(64, 1, 1)","0","9.0","Command line profiler metrics","lts__t_sector_hit_rate.pct","%","50.5"',
    ])
    counters = parse_csv(text)
    assert list(counters["correlation"]) == [0, 0, 1, 1]
    assert list(counters["duration_ns"]) == [4096, 4096, 2000, 2000]
    assert counters.loc[1, "value"] == 1e6
    assert counters.loc[3, ["name", "metric", "value"]].tolist() == ["add", "lts__t_sector_hit_rate.pct", 50.5]
    assert parse_csv("==PROF== nothing profiled").empty


def test_nvml_peak_and_samples(tmp_path):
    from perfdoctor.collectors import nvml

    assert nvml.peak_dram_bw_gbps(6016, 3201) == pytest.approx(4814.3, abs=0.1)  # H200: 4814 GB/s, DEVICE.md
    assert nvml.device_index({"CUDA_VISIBLE_DEVICES": "3,1"}) == 3
    assert nvml.device_index({"CUDA_VISIBLE_DEVICES": "GPU-abc"}) == "GPU-abc"
    assert nvml.device_index({}) == 0
    path = tmp_path / "s.jsonl"
    path.write_text('{"t": 10, "m": "dram_bw_util", "v": 0.5, "s": "nvml-gpm"}\n{"t": 20, "m": "po')  # cut short
    samples = nvml.read_samples(path, offset_ns=100)
    assert samples[["time_ns", "metric", "value", "source"]].values.tolist() == [[110, "dram_bw_util", 0.5, "nvml-gpm"]]


def test_find_nsys_honours_env(tmp_path, monkeypatch):
    from perfdoctor.collectors import nsys_run
    from perfdoctor.collectors.tools import find_tool

    fake = tmp_path / "nsys"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("NSYS", str(fake))
    assert find_tool("nsys") == str(fake)
    cmd = nsys_run.profile_command(str(fake), tmp_path / "r", capture_range=True, gpu_metrics_device="0")
    assert "--sample=none" in cmd and "--capture-range=cudaProfilerApi" in cmd and "--gpu-metrics-devices=0" in cmd


def test_calibration_cache_and_cpu_measurement(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    from perfdoctor.record import calibrate

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert calibrate.cache_path() == tmp_path / "perfdoctor" / "calibration.json"
    assert calibrate.load_calibration("GPU-x") is None
    # The measurement code is device-agnostic: on the CPU it measures this machine's memory.
    entry = calibrate.calibrate(torch.device("cpu"), sizes_mb=(8,), n=128)
    assert entry["dram_read_gbps"] > 0 and entry["bf16_matmul_tflops"] > 0
    calibrate.save_calibration("GPU-x", entry)
    assert calibrate.load_calibration("GPU-x")["dram_read_gbps"] == entry["dram_read_gbps"]


@no_gpu
def test_calibrate_without_gpu_is_a_usage_error(tmp_path):
    pytest.importorskip("torch")
    import typer
    from typer.testing import CliRunner

    from perfdoctor.cli.calibrate import calibrate_command
    from perfdoctor.errors import UsageError

    app = typer.Typer()
    app.command()(calibrate_command)
    result = CliRunner().invoke(app, [])
    assert isinstance(result.exception, UsageError)
    assert "no CUDA device" in str(result.exception)


# --- issue 19: the light pass is the scout ----------------------------------------------


def test_light_json_series_and_scout_keys(tmp_path):
    # --collect nvml on a CPU-only machine: the light pass alone (NVML unavailable here).
    done = perfdoctor_run("--collect", "nvml", str(PROGRAMS / "timed_steps.py"), "own.json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    bundle = only_bundle(tmp_path)
    light = json.loads((bundle / "raw" / "light.json").read_text())
    assert light["step_end_clock"] == "host"  # no CUDA: host times
    s = light["series"]["decode_step"]
    assert s["gpu_start_ns"] is None
    assert len(s["host_start_ns"]) == len(s["gpu_end_ns"]) == 12
    assert all(h < e for h, e in zip(s["host_start_ns"], s["gpu_end_ns"]))
    assert "spans_ns" not in light
    lp = manifest(bundle)["light_pass"]
    assert (lp["step_name"], lp["how"], lp["steps_seen"], lp["warmup_explicit"], lp["step_thread"]) == (
        "decode_step", "perfdoctor.region", 12, False, "main")
    # The traced passes' warm-up is the steady state's start when not given.
    assert lp["warmup"] == lp["steady_start"] and lp["steady_reason"]
    assert len(lp["step_latency_ms"]) == 12 - lp["warmup"]
    assert lp["counters"] == {} and lp["counters_reason"]


def test_explicit_warmup_wins_over_the_scout(tmp_path):
    done = perfdoctor_run("--collect", "nvml", "--warmup", "5", str(PROGRAMS / "timed_steps.py"), "own.json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lp = manifest(only_bundle(tmp_path))["light_pass"]
    assert (lp["warmup"], lp["warmup_explicit"], len(lp["step_latency_ms"])) == (5, True, 7)


def test_gpm_mean_over_exactly_the_steady_steps():
    from perfdoctor.collectors.nvml import steps_mean

    ms = 1_000_000
    # GPM intervals of 100 ms: 0.1 during start-up, 0.8 while the steps run, NaN once.
    intervals = [(0, 100 * ms, 0.1), (100 * ms, 200 * ms, 0.8), (200 * ms, 300 * ms, float("nan")),
                 (300 * ms, 400 * ms, 0.8), (400 * ms, 500 * ms, 0.5)]
    # Steps from 150 ms to 450 ms, with a pause (not a step) from 250 to 260 ms.
    steps = [(150 * ms, 250 * ms), (260 * ms, 450 * ms)]
    got = steps_mean(intervals, steps)
    # 50 ms of 0.8, (NaN dropped), 100 ms of 0.8, 50 ms of 0.5
    assert got["value"] == pytest.approx((50 * 0.8 + 100 * 0.8 + 50 * 0.5) / 200)
    assert (got["samples"], got["dropped_nan"], got["start_ns"], got["end_ns"]) == (3, 1, 150 * ms, 450 * ms)
    short = steps_mean(intervals, [(120 * ms, 180 * ms)])
    assert short["value"] is None and "shorter than one GPM interval" in short["reason"]
    nan = steps_mean([(0, 100 * ms, float("nan"))] * 2, [(0, 100 * ms)])
    assert nan["value"] is None and nan["reason"] == "all 2 GPM samples over the steady steps returned NaN"


@pytest.fixture(scope="module")
def hf_run(tmp_path_factory):
    """Hugging Face generate with no annotation at all: a tiny random Llama, on the CPU."""
    pytest.importorskip("transformers")
    cwd = tmp_path_factory.mktemp("hf")
    done = perfdoctor_run("--tokens-per-step", "1", str(PROGRAMS / "hf_generate.py"), "--tokens", "12", "--runs", "2", cwd=cwd)
    return done, only_bundle(cwd)


def test_hf_generate_step_is_the_model_forward(hf_run):
    done, bundle = hf_run
    assert done.returncode == 0, done.stderr
    tokens = int(done.stdout.split("tokens generated:")[1].split()[0])
    assert tokens == 4 + 2 * 12
    lp = manifest(bundle)["light_pass"]
    assert (lp["step_name"], lp["how"]) == ("LlamaForCausalLM.forward", "module: LlamaForCausalLM")
    assert lp["module"]["depth"] == 0 and lp["module"]["class"].endswith("modeling_llama.LlamaForCausalLM")
    assert lp["steps_seen"] == tokens  # one step per generated token
    assert lp["declared"] == {"tokens": 1.0, "source": "--tokens-per-step"}
    light = json.loads((bundle / "raw" / "light.json").read_text())
    assert len(light["series"]["LlamaForCausalLM.forward"]["gpu_end_ns"]) == tokens
    # The torch pass marked those calls: the trace's step is the model forward, one range per
    # call in the window: 10 iterations (--steps' default) from the light pass's steady start
    # and the next one's call that ends the 10th (11), fewer when a loaded machine placed that
    # start late in the 28 forwards.
    m = manifest(bundle)
    assert m["step"] == "LlamaForCausalLM.forward" and m["collectors"]["torch"]["status"] == "ok"
    assert 0 <= lp["warmup"] < tokens
    profile = load_bundle(bundle)
    assert (profile.ranges["name"] == "LlamaForCausalLM.forward").sum() == min(11, tokens - lp["warmup"])
    assert profile.origin.declared == {"LlamaForCausalLM.forward": {"tokens": 1.0}}


SGLANG = [ROOT.parent / "shared" / "traces" / "tracelens" / f"inference__sglang_{kind}__sglang_Qwen3-8B_{kind}.json.gz"
          for kind in ("prefilldecode", "decode")]


@pytest.mark.skipif(not all(p.exists() for p in SGLANG), reason="the shared real traces are not here")
def test_nested_serving_ranges_are_one_step_in_the_traced_passes():
    """The traced passes window the serving family ('serving step') by counting its ranges.
    SGLang's real traces: each iteration is a vLLM-style ``execute_...`` range around its own
    ``step[...]`` (one step, two ranges), and the names change every iteration. Replayed
    through the bootstrap in the order the traces hold them (the prefill iteration, then the
    decode one): 2 steps, not 4, and with --warmup 1 --steps 1 the window is the decode one."""
    import gzip

    from perfdoctor.bundle.protocol import PassConfig
    from perfdoctor.record.bootstrap.session import Session

    marks = []
    for path in SGLANG:
        for e in json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]:
            if e.get("cat") == "user_annotation":
                marks += [(e["ts"], 1, e["name"]), (e["ts"] + e["dur"], 0, e["name"])]
    marks.sort()  # by time; at one instant an end (0) before a start (1)
    assert [m[2][:5] for m in marks if m[1]] == ["execu", "step[", "execu", "step["]
    session = Session(PassConfig(pass_="nsys", step="serving step", warmup=1, steps=1))
    window = []
    for ts, opening, name in marks:
        (session.range_start if opening else session.range_end)(name)
        if not window or window[-1][1] != session.window_state:
            window.append((name, session.window_state))
    assert session.counts == {"serving step": 2}
    decode_outer = next(m[2] for m in marks if m[1] and m[2].startswith("execute_32"))
    # opened by the decode iteration's outer range, closed when that range ended
    assert window == [(marks[0][2], "before"), (decode_outer, "open"), (decode_outer, "closed")]
    assert session.window_name == "serving step"


def test_module_steps_choose_the_outermost_repeating_call():
    from perfdoctor.record.light import choose_module

    def series(n):
        return {"host_start_ns": list(range(n)), "gpu_start_ns": None, "gpu_end_ns": list(range(1, n + 1))}

    # A wrapper module whose one call runs the whole loop: its depth-1 call repeats.
    assert choose_module({"0": {"Runner.forward": series(1)}, "1": {"Llama.forward": series(9), "Linear.forward": series(3)}}) == (1, "Llama.forward", False)
    assert choose_module({"0": {"Llama.forward": series(9)}, "1": {"Linear.forward": series(18)}}) == (0, "Llama.forward", False)
    assert choose_module({"0": {"Once.forward": series(1)}, "1": {}}) is None
    # two classes at depth 0: the one called once per iteration, whose calls enclose the
    # other's (a detector, then its classifier once per object: 2, 3, 1 objects), marks it
    det = {"host_start_ns": [0, 10, 20], "gpu_start_ns": None, "gpu_end_ns": [1, 11, 21]}
    cls = {"host_start_ns": [2, 4, 12, 14, 16, 22], "gpu_start_ns": None, "gpu_end_ns": [3, 5, 13, 15, 17, 23]}
    assert choose_module({"0": {"Classifier.forward": cls, "Detector.forward": det}}) == (0, "Detector.forward", True)
    # a model called once per run of the loop (an encoder per utterance, 2 of them, before
    # 9 decoder calls each) marks an outer loop, not the iteration: the decoder, most frequent
    enc = {"host_start_ns": [0, 100], "gpu_start_ns": None, "gpu_end_ns": [1, 101]}
    dec = {"host_start_ns": [*range(2, 11), *range(102, 111)], "gpu_start_ns": None, "gpu_end_ns": [*range(3, 12), *range(103, 112)]}
    assert choose_module({"0": {"Encoder.forward": enc, "Decoder.forward": dec}}) == (0, "Decoder.forward", False)


def test_of_two_instances_of_one_model_class_the_one_that_encloses_the_others_is_the_step():
    from perfdoctor.bundle.protocol import PassResults
    from perfdoctor.record.light import find_step
    from perfdoctor.record.options import RunOptions

    # assisted generation: per iteration 3 draft forwards (1 ms each), then 1 target forward
    # (2 ms), all LlamaForCausalLM at depth 0, each 0.5 ms of the loop's own work after the last
    order = ([1] * 3 + [2]) * 6
    starts, ends, now = [], [], 0
    for k in order:
        starts.append(now)
        ends.append(now + k * 1_000_000)
        now = ends[-1] + 500_000
    calls = {"host_start_ns": starts, "gpu_start_ns": None, "gpu_end_ns": ends}
    classes = {"LlamaForCausalLM.forward": "transformers.LlamaForCausalLM"}
    results = PassResults(series={}, modules={"0": {"LlamaForCausalLM.forward": {**calls, "instance": order}}}, module_classes=classes)
    name, how, module, rewritten = find_step(results, RunOptions(target=["x.py"]))
    assert name == "LlamaForCausalLM#2.forward" and rewritten
    assert module == {"name": name, "depth": 0, "class": "transformers.LlamaForCausalLM", "instance": 2,
                      "span": "the loop iteration: each call and the host work until the next call"}
    assert how.startswith("module: LlamaForCausalLM#2: ") and "whose 6 calls enclose the 18 calls of its other instances" in how
    # each step from one target forward to the next (the last: its own end)
    step = results.series[name]
    assert step["host_start_ns"] == starts[3::4]
    assert [e - h for h, e in zip(step["host_start_ns"], step["gpu_end_ns"])] == [7_000_000] * 5 + [2_000_000]
    # one instance that repeats: the class, as before, with no instance to mark
    results = PassResults(series={}, modules={"0": {"LlamaForCausalLM.forward": dict(calls)}}, module_classes=classes)
    name, how, module, _ = find_step(results, RunOptions(target=["x.py"]))
    assert (name, how, "instance" in module) == ("LlamaForCausalLM.forward", "module: LlamaForCausalLM", False)
    assert len(results.series[name]["gpu_end_ns"]) == len(order)
