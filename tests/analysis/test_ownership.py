"""Step ownership across threads (perfdoctor.analysis.ownership) on real H200 traces.

The truth is computed in the test by scanning the trace JSON directly: the step ranges'
``ts``/``dur``, every launch call whose ``ts`` falls inside a step's window (any thread),
and the kernels that carry those calls' correlation ids.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from perfdoctor.analysis import ownership
from perfdoctor.pipeline import load_trace
from perfdoctor.analysis.steps import find_steps

WILD = Path(__file__).parents[1] / "fixtures" / "wild"
FIX = Path(__file__).parents[1] / "fixtures"
LAUNCH = {"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx", "cudaGraphLaunch"}


def _truth(path: Path, step_re: str) -> dict:
    """Per step (in time order): kernels and launches owned by time, from the raw JSON."""
    ev = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    x = [e for e in ev if e.get("ph") == "X"]
    steps = sorted(
        ((e["ts"], e["ts"] + e["dur"], (e["pid"], e["tid"])) for e in x if e.get("cat") == "user_annotation" and re.fullmatch(step_re, e["name"])),
    )
    launches = [e for e in x if e.get("cat") in ("cuda_runtime", "cuda_driver") and e["name"] in LAUNCH]
    owner: dict[int, int] = {}
    n_launch, n_other = Counter(), Counter()
    for c in launches:
        for i, (s, t, thread) in enumerate(steps):
            if s <= c["ts"] <= t:
                owner[c["args"]["correlation"]] = i
                n_launch[i] += 1
                n_other[i] += (c["pid"], c["tid"]) != thread
                break
    kernels = Counter(owner[e["args"]["correlation"]] for e in x if e.get("cat") == "kernel" and e["args"].get("correlation") in owner)
    n = len(steps)
    return {
        "kernels": [kernels[i] for i in range(n)],
        "launches": [n_launch[i] for i in range(n)],
        "launches_other": [n_other[i] for i in range(n)],
        "windows": steps,
    }


def test_threads_worker_kernels_belong_to_the_step():
    """facts: 8 kernels from the main thread + 3 from a worker thread per step = 11."""
    path = WILD / "h200-threads.kineto.json.gz"
    facts = json.loads((WILD / "threads.facts.json").read_text())
    per_step = facts["kernels_per_step_main_thread"] + facts["kernels_per_step_worker_thread"]
    p = load_trace(path)
    s = find_steps(p)
    # find_steps now uses the cross-thread rule (phase 2): 8 + 3 kernels per step, as the facts say
    assert s.table["kernels"].tolist() == [per_step] * facts["steps"]
    assert s.table["kernels_other_threads"].tolist() == [facts["kernels_per_step_worker_thread"]] * facts["steps"]

    own = ownership.assign(p, s.table)
    counts = ownership.step_counts(p, s.table, own)
    assert counts["kernels"].tolist() == [per_step] * facts["steps"]
    assert counts["launches"].tolist() == [per_step] * facts["steps"]
    assert counts["kernels_other_threads"].tolist() == [facts["kernels_per_step_worker_thread"]] * facts["steps"]
    truth = _truth(path, r"step")
    assert counts["kernels"].tolist() == truth["kernels"]
    assert counts["launches_other_threads"].tolist() == truth["launches_other"]
    # the GPU window includes the worker's side-stream kernels: find_steps and step_counts agree
    assert (counts["gpu_end_ns"] == s.table["gpu_end_ns"]).all()


@pytest.mark.parametrize("fixture", ["h200-train", "h200-train-ddp"])
def test_training_backward_from_autograd_thread(fixture):
    path = WILD / f"{fixture}.kineto.json.gz"
    truth = _truth(path, r"ProfilerStep#\d+")
    p = load_trace(path)
    s = find_steps(p)
    own = ownership.assign(p, s.table)
    counts = ownership.step_counts(p, s.table, own)
    assert counts["kernels"].tolist() == truth["kernels"]
    assert counts["launches"].tolist() == truth["launches"]
    assert counts["launches_other_threads"].tolist() == truth["launches_other"]
    # The autograd thread launches kernels in every step, which the same-thread rule missed.
    assert all(n > 0 for n in truth["launches_other"])
    assert (counts["kernels"] == s.table["kernels"]).all()  # find_steps uses this rule now
    assert (s.table["launches_other_threads"] > 0).all()
    # Every kernel of the trace that a step's window launched is owned; the rest is not.
    assert int((own.activity_step >= 0).sum()) >= sum(truth["kernels"])
    assert own.cross_thread_calls >= sum(truth["launches_other"])


@pytest.mark.parametrize(
    "trace", [WILD / "h200-serve-eager.kineto.json.gz", WILD / "h200-serve-graph.kineto.json.gz", FIX / "h200-decode-graph-10steps.kineto.json.gz", FIX / "h200-decode-graph-10steps.nsys.sqlite.gz"],
    ids=lambda p: p.name,
)
def test_single_thread_traces_unchanged(trace):
    """One launching thread: the new rule gives exactly what find_steps gives today."""
    p = load_trace(trace)
    s = find_steps(p)
    own = ownership.assign(p, s.table)
    assert np.array_equal(own.activity_step.to_numpy(), s.activity_step.to_numpy())
    counts = ownership.step_counts(p, s.table, own)
    assert counts["kernels"].tolist() == s.table["kernels"].tolist()
    assert counts["launches"].tolist() == s.table["launches"].tolist()


def test_overlapping_windows_and_empty():
    import pandas as pd

    table = pd.DataFrame({"host_start_ns": [0, 10, 100], "host_end_ns": [50, 20, 200], "tid": [1, 2, 1]})
    calls = pd.DataFrame(
        {"name": ["cudaLaunchKernel"] * 6, "start_ns": [5, 15, 15, 30, 150, 300], "tid": [1, 2, 3, 3, 9, 1], "correlation": [1, 2, 3, 4, 5, 6]}
    )
    step, same = ownership.call_steps(table, calls)
    # own thread first; a third thread at 15 is inside both 0 and 1 → the inner (latest start);
    # at 30 only window 0 contains it (window 1 ended) → the outer one.
    assert step.tolist() == [0, 1, 1, 0, 2, -1]
    assert same.tolist() == [True, True, False, False, False, False]
    empty_step, _ = ownership.call_steps(table.iloc[0:0], calls)
    assert (empty_step == -1).all()


def test_assign_accepts_step_ranges_directly():
    """The wiring path: find_steps can hand its sorted step ranges (start_ns/end_ns/tid)
    straight to ownership.assign instead of _containing_range."""
    from perfdoctor.analysis.steps import choose_step_ranges

    p = load_trace(WILD / "h200-train.kineto.json.gz")
    _, ranges, _, _ = choose_step_ranges(p, None)
    ranges = ranges.sort_values("start_ns", kind="stable", ignore_index=True)
    s = find_steps(p)
    a = ownership.assign(p, ranges)
    b = ownership.assign(p, s.table)
    assert a.call_step.equals(b.call_step) and a.activity_step.equals(b.activity_step)
    assert a.call_step.index.equals(p.calls.index) and a.activity_step.index.equals(p.activities.index)
