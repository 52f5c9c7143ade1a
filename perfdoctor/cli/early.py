"""What ``perfdoctor analyze`` begins before its command line is parsed: numpy's import and
the trace's load, whose decoders fork then (:func:`perfdoctor.pipeline.start_early`).
Imports no typer (:func:`perfdoctor.cli.program` imports the app after this).
"""

from __future__ import annotations

import sys
from typing import List, Optional

# analyze's options that take no value (every other one takes one): what trace_argument
# steps over. tests/cli/test_analyze.py checks them against the command click builds.
FLAGS = frozenset({"--brief", "--help"})


def trace_argument(args: List[str]) -> Optional[str]:
    """The PATH of ``perfdoctor analyze ARGS``, read without click: the first argument that
    is neither an option nor an option's value (``--opt=value`` is one argument, ``--``
    ends the options). Only a guess, to begin work early (:func:`start_early`): the command
    gets its PATH from click, and a load begun on another path is never used."""
    rest = iter(args)
    for arg in rest:
        if arg == "--":
            return next(rest, None)
        if arg.startswith("-") and arg != "-":
            if "=" not in arg and arg not in FLAGS:
                next(rest, None)  # the option's value
            continue
        return arg
    return None


def start_early(args: List[str]) -> None:
    """What ``perfdoctor analyze ARGS`` can begin before the app is imported and its command
    line parsed (typer and the command modules ~0.04 s of CPU, the parse with the pydantic
    it imports ~0.07 s): numpy's import, with one BLAS thread (no analysis
    multiplies matrices, and OpenBLAS's pool spins a second CPU for ~0.1 s while numpy
    loads, the CPU a forked decoder needs), and the trace's load
    (:func:`perfdoctor.pipeline.start_early`).

    The cyclic garbage collector is switched off for the rest of the process: one analysis
    leaves ~1-2 thousand objects in cycles (the 80 MB traces, eager 200 MB, the 8-rank DLRM
    folder), while its collections, walking the objects the imports (pandas, pydantic) and
    the tables make, took 0.07-0.09 s of the process's ~1.0 s of CPU on HF 80 MB; peak RSS
    is the same without them."""
    import gc
    import os

    gc.disable()
    if "numpy" not in sys.modules and "OPENBLAS_NUM_THREADS" not in os.environ:
        os.environ["OPENBLAS_NUM_THREADS"] = "1"  # read once, as OpenBLAS loads
        try:
            import numpy  # noqa: F401
        finally:
            del os.environ["OPENBLAS_NUM_THREADS"]  # not passed on to any program this process starts
    path = trace_argument(args)
    if path is not None:
        from perfdoctor.pipeline import start_early as begin

        begin(path)
