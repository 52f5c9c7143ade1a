"""Where a command's outputs go: where the user points, and ``-`` is standard output.

``--json -`` puts valid JSON, and only it, on stdout: the human report then goes to stderr
(:func:`report_console`). ``-`` is never a file name, so it is not checked against the
inputs (:func:`files`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Iterable, Optional

from perfdoctor.console import note, stdout_console
from perfdoctor.io import dumps_json, write_json, write_text

STDOUT = "-"


def is_stdout(path: Optional[Path | str]) -> bool:
    return path is not None and str(path) == STDOUT


def files(paths: Iterable[Optional[Path]]) -> list[Optional[Path]]:
    """The outputs that are files (for :func:`perfdoctor.io.check_outputs`)."""
    return [p for p in paths if not is_stdout(p)]


def report_console(*machine_outputs: Optional[Path]) -> Any:
    """The console for the human report: stderr when a machine output takes stdout."""
    return stdout_console(stderr=any(is_stdout(p) for p in machine_outputs))


def emit_text(path: Path, text: str) -> None:
    if is_stdout(path):
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        write_text(path, text)


def emit_json(path: Path, payload: Any) -> None:
    """Strict JSON to ``path``, or to stdout for ``-``."""
    if is_stdout(path):
        emit_text(path, dumps_json(payload))
    else:
        write_json(path, payload)


def wrote(path: Path) -> None:
    """``wrote PATH`` on stderr, for a file (stdout speaks for itself)."""
    if not is_stdout(path):
        note(f"wrote {path}")
