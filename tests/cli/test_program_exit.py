"""The ``perfdoctor`` executable leaves through perfdoctor.console.leave (no interpreter
teardown): what a normal exit guarantees must still hold — the exit status, every line of
output through a pipe, the atexit functions, and a thread that is still running."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from conftest import FIXTURES

TRACE = FIXTURES / "h200-llama1b-eager-5steps.kineto.json.gz"


def program(body: str, *args: str) -> subprocess.CompletedProcess:
    """Run ``body`` then perfdoctor.cli.program() with ``args`` as the command line."""
    code = textwrap.dedent(body) + textwrap.dedent(
        f"""
        import sys
        from perfdoctor.cli import program
        sys.argv = ["perfdoctor", *{list(args)!r}]
        program()
        print("not reached", flush=True)
        """
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_the_executable_is_program() -> None:
    import tomllib

    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert pyproject["project"]["scripts"]["perfdoctor"] == "perfdoctor.cli:program"
    assert "program()" in (Path(__file__).parents[2] / "perfdoctor/__main__.py").read_text()


def test_output_exit_status_and_atexit_survive_the_fast_exit(tmp_path: Path) -> None:
    out = tmp_path / "metrics.json"
    r = program("import atexit\natexit.register(lambda: print('atexit ran', flush=True))\n", "analyze", str(TRACE), "--json", str(out))
    assert r.returncode == 0, r.stderr
    assert r.stdout.rstrip().endswith("atexit ran")  # after the whole report, which reached the pipe
    assert "Findings" in r.stdout and "not reached" not in r.stdout
    assert json.loads(out.read_text())["metrics"]["steps"]["value"] == 5
    # The same report as main() followed by the interpreter's ordinary exit (nothing lost at
    # the end of a buffered pipe).
    ordinary = f"import sys\nfrom perfdoctor.cli.commands import main\nsys.argv = ['perfdoctor', 'analyze', {str(TRACE)!r}]\nmain()\n"
    r2 = subprocess.run([sys.executable, "-c", ordinary], capture_output=True, text=True, timeout=120)
    assert r2.returncode == 0 and r.stdout.replace("atexit ran\n", "") == r2.stdout


def test_a_usage_error_still_exits_2_with_one_line(tmp_path: Path) -> None:
    r = program("", "analyze", str(tmp_path / "missing.json"))
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and r.stderr.startswith("error: "), r.stderr


def test_a_running_thread_is_waited_for() -> None:
    r = program(
        """
        import threading, time
        import perfdoctor.cli  # imported first: --version prints at once after the thread starts
        def late():
            time.sleep(2)
            print("thread finished", flush=True)
        threading.Thread(target=late).start()
        """,
        "--version",
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["perfdoctor", r.stdout.split()[1], "thread", "finished"], r.stdout
