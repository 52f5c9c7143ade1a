import contextlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

# Two test workers share the two cores (CI and the dev VM): torch's intra-op pool (two threads
# in each worker and in each program a test runs) oversubscribed them, and a CPU program's
# preempted gaps of 5-14 ms between ~1 ms steps read as pauses (CI 12-03: rec_jit 0.68 ms per
# step for the program's 1.07). One thread each; the programs inherit it.
os.environ.setdefault("OMP_NUM_THREADS", "1")

FIXTURES = Path(__file__).parent / "fixtures"
# The shared trace corpus lives beside the repository (../shared/traces); a worktree one level
# further down (/work/wt/NAME) finds the same corpus two levels up. Tests on it skip without it.
_ROOT = Path(__file__).resolve().parents[1]
SHARED_TRACES = next((p for p in (_ROOT.parent / "shared" / "traces", _ROOT.parent.parent / "shared" / "traces") if p.is_dir()),
                     _ROOT.parent / "shared" / "traces")


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 300, env: dict | None = None,
            stdin: str | Path | None = None) -> subprocess.CompletedProcess:
    """Run the real `perfdoctor` command in a subprocess (python -m, so the venv's package is used).
    ``stdin``: text written to its stdin through a pipe, or a file (a Path) it reads as stdin."""
    with contextlib.ExitStack() as stack:
        given = {"input": stdin} if isinstance(stdin, str) else {"stdin": stack.enter_context(open(stdin))} if stdin else {}
        return subprocess.run(
            [sys.executable, "-m", "perfdoctor", *map(str, args)],
            capture_output=True,
            text=True,
            cwd=cwd,
            timeout=timeout,
            env={**os.environ, "COLUMNS": "200", **(env or {})},
            **given,
        )


REAL_PROGRAMS = Path(__file__).parent / "programs" / "real"
# A user's way to trace a whole script: the torch profiler (CPU activities) around it
_TRACED = """import os, runpy, sys
import torch
out, program = sys.argv[1], sys.argv[2]
sys.argv, sys.path[0] = sys.argv[2:], os.path.dirname(program)
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
    runpy.run_path(program, run_name="__main__")
prof.export_chrome_trace(out)
"""


def program_result(stdout: str) -> dict:
    """The ``RESULT {json}`` line a real program (tests/programs/real) prints: its own facts
    (the first, where it printed several: :func:`program_results`)."""
    return program_results(stdout)[0]


def program_results(stdout: str) -> list[dict]:
    """Every ``RESULT {json}`` of several processes writing to one stdout (a job's ranks), in
    order. Read from each ``RESULT `` on, not line by line: one process's line ran into the
    next's where their writes interleaved (a rank's RESULT, then another's log line, on one
    line of the output, once in a loaded run)."""
    decoder = json.JSONDecoder()
    return [decoder.raw_decode(stdout, m.end())[0] for m in re.finditer(r"RESULT (?=\{)", stdout)]


def trace_program(out: Path, program: str, *args: str, timeout: float = 240) -> dict:
    """The real program ``tests/programs/real/PROGRAM`` run whole under the torch profiler
    (CPU activities), its trace written to ``out``; returns its RESULT."""
    r = subprocess.run([sys.executable, "-c", _TRACED, str(out), str(REAL_PROGRAMS / program), *args],
                       capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stderr[-2000:]
    return program_result(r.stdout)


@contextlib.contextmanager
def _cli_environ(env: dict | None):
    """COLUMNS=200 and ``env`` in this process's environment while a command runs in it."""
    env = {"COLUMNS": "200", **(env or {})}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _main(argv: list[str]) -> int:
    """The real ``perfdoctor.cli.commands.main`` on ``argv``: its exit code."""
    from perfdoctor.cli.commands import main

    try:
        main(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    return 0


def run_cli_inprocess(*args: object, env: dict | None = None, **_: object) -> subprocess.CompletedProcess:
    """``perfdoctor ARGS`` in this process, through the real ``perfdoctor.cli.commands.main`` (its exit
    code mapping and one-line errors included): the same result shape as :func:`run_cli`,
    without a new interpreter (about a second of imports per call). Tests about the process
    itself (a closed pipe, signals, the torch-free import path) keep :func:`run_cli`."""
    import io

    argv = [str(a) for a in args]
    out, err = io.StringIO(), io.StringIO()
    saved = sys.stdout
    try:
        with _cli_environ(env), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = _main(argv)
    finally:
        sys.stdout = saved
    return subprocess.CompletedProcess(["perfdoctor", *argv], code, out.getvalue(), err.getvalue())


def run_cli_fds(*args: object, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """:func:`run_cli_inprocess` for ``perfdoctor run``: its passes' programs write to the
    file descriptors they inherit (the first pass's, the terminal's), so descriptors 1 and 2
    are redirected to files here, which this process's own output goes to as well; ``cwd``:
    the directory it runs in. About 0.6 s less a run than a new interpreter's imports (every
    real-program test's light pass, 2026-12-06). ``perfdoctor run --timeout`` stands in for
    the subprocess's timeout. Tests of the process itself (signals, stdin, a pass's memory
    against the parent's) keep a subprocess."""
    import io
    import tempfile

    argv = [str(a) for a in args]
    sys.stdout.flush()
    sys.stderr.flush()
    here = os.getcwd()
    with _cli_environ(env), tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        saved = os.dup(1), os.dup(2)
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        texts = [io.TextIOWrapper(io.FileIO(os.dup(fd), "w"), write_through=True) for fd in (1, 2)]
        try:
            if cwd is not None:
                os.chdir(cwd)
            with contextlib.redirect_stdout(texts[0]), contextlib.redirect_stderr(texts[1]):
                code = _main(argv)
        finally:
            for t in texts:
                t.close()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            os.chdir(here)
        outputs = []
        for f in (out, err):
            f.seek(0)
            outputs.append(f.read().decode(errors="replace"))
    return subprocess.CompletedProcess(["perfdoctor", *argv], code, *outputs)


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


# Under pytest-xdist (`-n 2 --dist loadfile`, the README's test command) these files run on
# one worker, one after the other, never beside each other: test_repeat pins lockstep pairs
# to one CPU at full load, and test_ranks compares each rank's collective time with the
# program's own timer within 15 % / 3 ms, which a fully loaded CPU shared by its ranks
# breaks (seen once: 9.3 ms against 12.5 ms while both ran).
SERIAL_TOGETHER = ("tests/record/test_repeats.py", "tests/analysis/test_ranks.py")


# The longest files first: loadfile hands the files out in collection order, and a long one
# handed out last runs alone at the end while the other worker idles (the clean-clone .ci/run
# read 928 s, 886 s of pytest, with test_run.py, 71 real runs, late in the order). Roughly by
# their time, longest first; the rest keep their order after them.
HEAVY_FIRST = (
    "tests/record/test_real_programs_more.py", "tests/record/test_real_programs_named_nowhere.py", *SERIAL_TOGETHER,
    "tests/record/test_run.py", "tests/record/test_real_programs.py", "tests/record/test_run_hard.py",
    "tests/demo/test_show.py", "tests/record/test_duration.py", "tests/record/test_traces_from_start.py",
)


# Tests marked `extended` repeat what a test of the default run already covers: another
# parametrisation of the same program and code path, or the same path on another program.
# The default run (the README's and CI's) leaves them out: CI's 15 minutes on 2 CPUs are spent
# on new programs' runs, not on variants (a clean clone read 982 s on 2026-12-07, ~600 program
# processes at ~3 s each, most of it importing torch). PERFDOCTOR_EXTENDED_TESTS=1 (or
# `-m extended`) runs them too; run it before landing a change to the code they cover.
EXTENDED_ENV = "PERFDOCTOR_EXTENDED_TESTS"


def pytest_collection_modifyitems(session, config, items) -> None:
    if not os.environ.get(EXTENDED_ENV) and "extended" not in (config.getoption("-m") or ""):  # as PERFDOCTOR_SLOW_TESTS
        left = [item for item in items if item.get_closest_marker("extended")]
        if left:
            config.hook.pytest_deselected(items=left)
            items[:] = [item for item in items if not item.get_closest_marker("extended")]
    rank = {path: i for i, path in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(HEAVY_FIRST)))  # stable


def pytest_xdist_make_scheduler(config, log):
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class Scheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            return "timing-sensitive files" if scope in SERIAL_TOGETHER else scope

    return Scheduling(config, log)
