"""What the real-program tests share (tests/record/test_real_programs*.py): a light pass of
``perfdoctor run`` on one of tests/programs/real/, its steps' times, a whole trace read by
``analyze``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from conftest import REAL_PROGRAMS as REAL, program_result, run_cli_fds, trace_program
from perfdoctor.analysis.steps import find_steps
from perfdoctor.pipeline import load_trace

FETCH = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def light_run(tmp_path: Path, program: str, *args: str, step: str | None = None, env: dict | None = None,
         launcher: tuple[str, ...] = ()) -> tuple[dict, dict, dict]:
    """(light_pass of the manifest, the chosen step's series, the program's RESULT); ``step``:
    perfdoctor's --step; ``env``: the program's environment's additions; ``launcher``: the
    command line before the program (``accelerate launch ...``), after ``--``."""
    r = run_cli_fds("run", "--collect", "nvml", "--timeout", "240", *(("--step", step) if step else ()), "--out", tmp_path,
                    *(("--", *launcher) if launcher else ()), REAL / program, *args, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    (bundle,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    light = json.loads((bundle / "manifest.json").read_text())["light_pass"]
    series = json.loads((bundle / "raw" / "light.json").read_text())["series"][light["step_name"]]
    return light, series, program_result(r.stdout)


def step_ms(series: dict) -> np.ndarray:
    # on CPU (host clock) each step's time is its host start to the end of its iteration
    return (np.array(series["gpu_end_ns"]) - np.array(series["host_start_ns"])) / 1e6


def traced_whole(tmp_path: Path, program: str, *args: str):
    """(the steps analyze finds in a plain torch.profiler trace of the program run whole, each
    one's host time in ms, the program's RESULT in that run)."""
    traced = trace_program(tmp_path / "trace.json", program, *args)
    steps = find_steps(load_trace(tmp_path / "trace.json"))
    return steps, (steps.table["host_end_ns"] - steps.table["host_start_ns"]).to_numpy() / 1e6, traced


def steps_per_s(tmp_path: Path):
    """The analysis's steps_per_s of the one bundle under ``tmp_path`` (its light pass)."""
    from perfdoctor.analysis.metrics import analyze

    (bundle,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    return analyze(load_trace(bundle)).metrics["steps_per_s"]


def held_in(starts: np.ndarray, ends: np.ndarray, at) -> list[int]:
    """Per step (host start, end: inclusive), the starts ``at`` inside it."""
    at = np.sort(np.asarray(at, dtype=np.int64))
    return (np.searchsorted(at, ends, side="right") - np.searchsorted(at, starts)).tolist()
