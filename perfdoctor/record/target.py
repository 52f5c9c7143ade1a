"""The program ``perfdoctor run`` runs: its command line as ``python`` takes it, checked
before anything runs, and the name its bundle gets."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from perfdoctor.errors import UsageError


def parse_target(args: list[str], module: bool) -> list[str]:
    """``python``'s own argv shape: [SCRIPT, *ARGS] or ["-m", MODULE, *ARGS].

    ``-m`` is a flag, not an option with a value, so that option parsing stops at the
    module name and everything after it reaches the module, as with ``python -m``.
    """
    if not args:
        raise UsageError("nothing to run: give a SCRIPT (or -m MODULE) and its arguments")
    if module:
        return ["-m", *args]
    script = Path(args[0])
    if not script.is_file():
        if os.sep not in args[0] and shutil.which(args[0]) is not None:
            # a launcher (deepspeed, mpirun, a console script): it starts Python, perfdoctor
            # cannot follow it into the program
            raise UsageError(f"{script}: a command, not a Python script: give perfdoctor the script it runs (perfdoctor run "
                             "SCRIPT ARGS, -m MODULE, or a torchrun or accelerate launch line after --)")
        raise UsageError(f"{script}: no such script")
    if (why := not_a_program(script)) is not None:
        raise UsageError(f"{script}: {why}")
    return list(args)


SHELLS = ("sh", "bash", "zsh", "dash", "ksh", "fish")


def not_a_program(script: Path) -> str | None:
    """Why ``script`` is plainly not a Python program, else None. Python would run a
    notebook's or a trace's JSON as code and stop at its first ``null`` with a NameError
    traceback, and a shell script at its first line, after perfdoctor had started its
    passes; these are told apart by the name and the first line only, so anything Python
    itself runs (a script with any suffix or none, a zipapp) still runs."""
    from perfdoctor.pipeline import KINETO_SUFFIXES, NSYS_SUFFIXES  # the suffixes analyze reads

    name = script.name.lower()
    if name.endswith(".ipynb"):
        return (f"a Jupyter notebook, not a Python script: export it first (jupyter nbconvert --to script {script}),"
                " then perfdoctor run the .py it writes")
    if name.endswith(KINETO_SUFFIXES + NSYS_SUFFIXES):
        return f"a trace, not a program: perfdoctor analyze {script}"
    try:
        with open(script, "rb") as fh:
            first = fh.readline(256)
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    words = first[2:].decode(errors="replace").split() if first.startswith(b"#!") else []
    interpreter = Path(words[1] if words[:1] == ["/usr/bin/env"] and len(words) > 1 else words[0]).name if words else ""
    if interpreter in SHELLS or name.endswith(".sh"):
        return ("a shell script: perfdoctor runs Python programs; run the Python command it starts instead "
                "(perfdoctor run train.py ARGS, or perfdoctor run -- torchrun ... train.py)")
    return None


CHECK_IMPORT = """
import importlib, importlib.util, sys
sys.path[0] = sys.argv[1]
kind, name, attr = sys.argv[2:5]
try:
    spec = importlib.util.find_spec(name)
except (ImportError, ValueError) as exc:
    print(f"{type(exc).__name__}: {exc}"); sys.exit(1)
if spec is None:
    print(f"no module named {name}"); sys.exit(1)
if kind == "attr":
    try:
        obj = importlib.import_module(name)
    except BaseException as exc:
        print(f"importing {name} failed: {type(exc).__name__}: {exc}"); sys.exit(1)
    for part in attr.split("."):
        if not hasattr(obj, part):
            print(f"{name} has no attribute {attr}"); sys.exit(1)
        obj = getattr(obj, part)
"""


def check_importable(target: list[str], step_fn: str | None) -> None:
    """Before anything runs: ``-m MODULE`` names a module Python can find, and ``--step-fn
    module:function`` (other than the program itself) names an importable module with that
    attribute. Checked in a separate interpreter with the program's ``sys.path[0]`` (its
    folder, or the working directory for ``-m``), so importing the user's module neither
    slows nor changes perfdoctor's own process."""
    path0 = os.getcwd() if target[0] == "-m" else os.path.dirname(os.path.abspath(target[0]))
    checks: list[tuple[str, str, str, str]] = []
    if target[0] == "-m":
        checks.append(("spec", target[1], "", f"-m {target[1]}"))
    if step_fn is not None:
        mod, _, attr = step_fn.partition(":")
        own = target[1] if target[0] == "-m" else Path(target[0]).stem
        if mod not in ("__main__", own):
            checks.append(("attr", mod, attr, f"--step-fn {step_fn}"))
    for kind, name, attr, what in checks:
        try:
            done = subprocess.run([sys.executable, "-c", CHECK_IMPORT, path0, kind, name, attr],
                                  capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise UsageError(f"{what}: could not be checked ({exc})") from None
        if done.returncode != 0:
            why = (done.stdout.strip().splitlines() or done.stderr.strip().splitlines() or ["not importable"])[-1]
            raise UsageError(f"{what}: {why}")


def target_name(target: list[str]) -> str:
    return target[1] if target[0] == "-m" else Path(target[0]).stem
