"""``perfdoctor run`` prints paths, program arguments and step names as text: a folder
named with rich markup (``o[/]x``) once crashed it with a MarkupError traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]
PROGRAM = ROOT / "tests" / "programs" / "rf_steps.py"


def test_run_out_with_markup_in_the_path(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = tmp_path / "o[/]x [bold]"
    done = subprocess.run(
        [sys.executable, "-m", "perfdoctor.record.run", "--out", str(out), "--collect", "torch", str(PROGRAM), "4", str(tmp_path / "f.json")],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=180,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and "MarkupError" not in done.stderr
    (bundle,) = out.iterdir()
    unwrapped = done.stderr.replace("\n", "")  # the console wraps long lines at a space
    assert f"bundle written: {bundle}" in unwrapped  # the path printed as it is, brackets included
