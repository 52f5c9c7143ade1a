"""What ``perfdoctor analyze`` does before, or instead of, typer: its command line read as
click would read it, numpy's import and the trace's load, whose decoders fork then
(:func:`perfdoctor.pipeline.start_early`). Imports no typer.

A plain command line (the trace, and options each with a value click and typer take as
they are) runs the analysis without typer (:func:`perfdoctor.cli.program`): typer 0.29
builds every command and coerces each parameter through a pydantic ``TypeAdapter``, ~0.1 s
of CPU (typer's import ~0.03-0.04, pydantic's and the adapters ~0.05-0.07) beside the
decoders, for values that need no coercion. Anything else (``--help``, a value to check
or convert, a mistake) goes to typer, whose help and errors are the CLI's.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

# analyze's options as click builds them: option -> (keyword, type; a list: repeatable).
# tests/cli/test_analyze.py checks them against the command and the values against typer's.
OPTIONS: Dict[str, tuple[str, Any]] = {
    "--step": ("step", str),
    "--json": ("json_out", Path),
    "--tokens-per-step": ("tokens_per_step", float),
    "--rules": ("rules", [Path]),
    "--threshold": ("threshold", [str]),
    "--workload": ("workload", str),
    "--top": ("top", int),
    "--brief": ("brief", bool),
}
# Numbers whose value pydantic and Python read alike, within the options' bounds (>= 0, finite).
_NUMBER = {int: re.compile(r"0|[1-9][0-9]{0,17}"), float: re.compile(r"[0-9]{1,18}(\.[0-9]{1,18})?")}


def plain_arguments(args: List[str]) -> Optional[Dict[str, Any]]:
    """The keyword arguments typer would call analyze with for ``perfdoctor analyze ARGS``
    (the options given; the others keep their defaults), or None where typer has something
    to say or to convert: ``--help``, an unknown option, a flag given a value, a missing
    value or trace, a second trace, a number not plain decimal digits, a path that exists
    but cannot be read (typer refuses it), a string that is not UTF-8 (pydantic's own
    reading), shell completion asked for."""
    if "_PERFDOCTOR_COMPLETE" in os.environ:
        return None
    values: Dict[str, Any] = {}
    positional: List[str] = []
    rest = iter(args)
    for arg in rest:
        if not _utf8(arg):
            return None
        if arg == "--":
            positional.extend(rest)
            break
        if not arg.startswith("-") or arg == "-":
            positional.append(arg)
            continue
        name, has_value, value = arg.partition("=")
        if name not in OPTIONS:
            return None
        keyword, kind = OPTIONS[name]
        if kind is bool:
            if has_value:
                return None
            values[keyword] = True
            continue
        if not has_value:
            value = next(rest, None)
            if value is None:
                return None
        item = _value(value, kind[0] if isinstance(kind, list) else kind)
        if item is None:
            return None
        if isinstance(kind, list):
            values.setdefault(keyword, []).append(item)
        else:
            values[keyword] = item  # repeated: the last one, as click keeps
    if len(positional) != 1 or not all(_utf8(p) for p in positional):
        return None
    path = _value(positional[0], Path)
    if path is None:
        return None
    return {"path": path, **values}


def _utf8(arg: str) -> bool:
    try:
        arg.encode("utf-8")
    except UnicodeEncodeError:  # a byte of a non-UTF-8 argument (surrogate-escaped)
        return False
    return True


def _value(text: str, kind: Any) -> Any:
    """``text`` as typer gives it for ``kind``, or None where typer may differ or refuse."""
    if kind is str:
        return text
    if kind is Path:
        if os.path.exists(text) and not os.access(text, os.R_OK):
            return None  # typer: "... is not readable"
        return Path(text)
    return kind(text) if _NUMBER[kind].fullmatch(text) else None


def start_early(args: List[str]) -> Optional[Dict[str, Any]]:
    """What ``perfdoctor analyze ARGS`` can begin before typer is imported and its command
    line parsed: numpy's import, with one BLAS thread (no analysis multiplies matrices, and
    OpenBLAS's pool spins a second CPU for ~0.1 s while numpy loads, the CPU a forked decoder
    needs), and the trace's load (:func:`perfdoctor.pipeline.start_early`). Returns
    :func:`plain_arguments`: the command's arguments where typer is not needed, else None
    (and nothing is loaded early).

    The cyclic garbage collector is switched off for the rest of the process: one analysis
    leaves ~1-2 thousand objects in cycles (the 80 MB traces, eager 200 MB, the 8-rank DLRM
    folder), while its collections, walking the objects the imports (pandas, pydantic) and
    the tables make, took 0.07-0.09 s of the process's ~1.0 s of CPU on HF 80 MB; peak RSS
    is the same without them."""
    import gc

    gc.disable()
    if "numpy" not in sys.modules and "OPENBLAS_NUM_THREADS" not in os.environ:
        os.environ["OPENBLAS_NUM_THREADS"] = "1"  # read once, as OpenBLAS loads
        try:
            import numpy  # noqa: F401
        finally:
            del os.environ["OPENBLAS_NUM_THREADS"]  # not passed on to any program this process starts
    arguments = plain_arguments(args)
    if arguments is not None:
        from perfdoctor.pipeline import start_early as begin

        begin(arguments["path"])
    return arguments
