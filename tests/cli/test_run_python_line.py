"""Issue 32: ``perfdoctor run -- python app.py ARGS`` is the program app.py, as a user writes
it (it failed with "python: no such script"); ``-- python -m MODULE`` too."""

from __future__ import annotations

import textwrap
from pathlib import Path

from conftest import run_cli

PROGRAM = textwrap.dedent(
    """
    import sys
    import torch
    import perfdoctor

    model = torch.nn.Linear(16, 16)
    for i in range(15):
        with perfdoctor.region("step"):
            model(torch.randn(2, 16)).sum()
    print("ARGS", sys.argv[1:], __name__)
    """
)


def test_run_dash_dash_python_runs_the_script_with_its_arguments(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text(PROGRAM)
    r = run_cli("run", "--collect", "torch", "--no-light", "--out", tmp_path / "runs", "-q", "--", "python", "app.py", "--flag", "3",
                cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "ARGS ['--flag', '3'] __main__" in r.stdout
    (bundle,) = (tmp_path / "runs").iterdir()
    assert (bundle / "raw" / "torch-trace.json.gz").exists()


def test_interpreter_options_are_one_line_and_exit_2(tmp_path: Path) -> None:
    r = run_cli("run", "--out", tmp_path / "runs", "--", "python", "-X", "dev", "app.py", cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("error: perfdoctor run -- python -X: interpreter options are not passed on")
