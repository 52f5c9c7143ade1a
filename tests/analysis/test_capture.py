"""Graph capture vs replay (perfdoctor.analysis.capture) on real traces.

``h200-capture`` records a CUDA-graph capture and nothing else; ``h200-serve-graph`` and
``h200-decode-graph-10steps`` replay captured decode steps (the nsys trace of the latter
also records the capture before the replays). Counts are checked against a direct scan of
the JSON / the tracer's own graph ids.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import SHARED_TRACES
from perfdoctor.analysis import capture

from perfdoctor.analysis import serving
from perfdoctor.pipeline import load_trace
from perfdoctor.analysis.steps import find_steps

WILD = Path(__file__).parents[1] / "fixtures" / "wild"
FIX = Path(__file__).parents[1] / "fixtures"
LAUNCH = {"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx", "cudaGraphLaunch"}


def _states(p):
    s = find_steps(p)
    return s, capture.step_states(p, s.table, s.activity_step, s.call_step)


def test_capture_trace():
    path = WILD / "h200-capture.kineto.json.gz"
    ev = [e for e in json.loads(gzip.decompress(path.read_bytes()))["traceEvents"] if e.get("ph") == "X"]
    begin = next(e for e in ev if e["name"] == "cudaStreamBeginCapture")
    end = next(e for e in ev if e["name"] == "cudaStreamEndCapture")
    inside = [e for e in ev if e["name"] in LAUNCH and begin["ts"] <= e["ts"] <= end["ts"]]
    kernels = [e for e in ev if e.get("cat") == "kernel"]
    assert json.loads((WILD / "capture.facts.json").read_text())["capture"] is True

    st = capture.trace_state(load_trace(path))
    assert st.kind == "capture"
    assert not st.timing_rules_apply
    assert "timing rules do not apply" in st.message
    assert st.captures == 1
    assert st.launches_in_capture == len(inside) > len(kernels)
    assert st.kernels == len(kernels)
    assert st.replayed_kernels == 0 and st.graph_launches == 0


def test_serve_graph_steps_are_replayed():
    p = load_trace(WILD / "h200-serve-graph.kineto.json.gz")
    st = capture.trace_state(p)
    assert st.kind == "replay" and st.timing_rules_apply
    ev = [e for e in json.loads(gzip.decompress((WILD / "h200-serve-graph.kineto.json.gz").read_bytes()))["traceEvents"] if e.get("ph") == "X"]
    graph_corr = {e["args"]["correlation"] for e in ev if e["name"] == "cudaGraphLaunch"}
    assert st.graph_launches == len(graph_corr)
    assert st.replayed_kernels == sum(1 for e in ev if e.get("cat") == "kernel" and e["args"]["correlation"] in graph_corr)

    # Every serving step: decode steps replay, prefill steps run eagerly.
    table, own = serving.steps_table(p)
    states = capture.step_states(p, table, own.activity_step, own.call_step)
    kinds = table["kind"].to_numpy()
    assert set(states.loc[kinds == "decode", "state"]) == {"replayed"}
    assert set(states.loc[kinds == "prefill", "state"]) == {"eager"}
    assert capture.graphed(states) is True
    # the eager twin is never graphed
    eager = load_trace(WILD / "h200-serve-eager.kineto.json.gz")
    _, es = _states(eager)
    assert set(es["state"]) == {"eager"} and capture.graphed(es) is False


def test_decode_graph_kineto_and_nsys():
    k = load_trace(FIX / "h200-decode-graph-10steps.kineto.json.gz")
    s, states = _states(k)
    assert (states["state"] == "replayed").all() and len(states) == 10
    assert (states["graph_launches"] == 1).all()
    assert capture.trace_state(k).kind == "replay"

    n = load_trace(FIX / "h200-decode-graph-10steps.nsys.sqlite.gz")
    st = capture.trace_state(n)
    assert st.kind == "capture+replay" and st.timing_rules_apply
    # nsys gives replayed work a graph id: the capture recorded one kernel node per replayed
    # kernel (the graph's memcpy nodes are not launches)
    acts = n.activities
    per_replay = int(((acts["graph_id"] >= 0) & (acts["kind"] == "kernel")).sum()) // st.graph_launches
    assert st.launches_in_capture == per_replay
    s, states = _states(n)
    assert (states["state"] == "replayed").all()
    assert (states["capture_launches"] == 0).all()  # the capture happened before the steps


def test_zero_recognised_launches_is_never_graphed():
    """Kernels run but no launch call is recognised (calls dropped, or renamed to an API
    perfdoctor does not know): ``unknown``, and graphed() says it cannot tell."""
    p = load_trace(FIX / "h200-decode-eager-5steps.kineto.json.gz")
    s = find_steps(p)
    renamed = p.calls.copy()
    launch = renamed["name"].isin(LAUNCH)
    renamed.loc[launch, "name"] = "someVendorEnqueue"
    p.calls = renamed
    states = capture.step_states(p, s.table, s.activity_step, s.call_step)
    assert (states["kernels"] > 4 * states["launches"].clip(lower=1)).all()  # what the old heuristic read as "graphed"
    assert set(states["state"]) == {"unknown"}
    assert capture.graphed(states) is None
    assert capture.trace_state(p).kind == "no-launches"


def test_empty():
    from perfdoctor.profile import Profile

    p = Profile()
    assert capture.trace_state(p).kind == "no-gpu-work"
    assert capture.capture_windows(p).empty
    assert capture.graphed(pd.DataFrame({"state": ["no-gpu-work"]})) is None
    assert capture.replayed(p).size == 0 and np.asarray(capture.in_capture(p)).size == 0


SHARED = SHARED_TRACES


def _kineto(path: Path, kernels: list[tuple[int, int, int]], graph_launch: bool) -> Path:
    """A Kineto trace of one launch call per kernel (ts µs, correlation, graph id)."""
    ev = []
    for ts, corr, gid in kernels:
        call = "cudaGraphLaunch" if graph_launch else "cudaLaunchKernel"
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": call, "pid": 1, "tid": 1, "ts": ts, "dur": 2, "args": {"correlation": corr}})
        ev.append({"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": ts + 5, "dur": 3,
                   "args": {"device": 0, "stream": 7, "correlation": corr, "graph id": gid}})
    path.write_text(json.dumps({"traceEvents": ev}))
    return path


def test_graph_id_zero_is_eager(tmp_path):
    # Current Kineto writes "graph id": 0 on every eager kernel; only an id > 0 is a replay.
    eager = capture.trace_state(load_trace(_kineto(tmp_path / "eager.json", [(10, 1, 0), (20, 2, 0)], graph_launch=False)))
    assert eager.replayed_kernels == 0 and eager.kind != "replay"
    graphed = load_trace(_kineto(tmp_path / "graph.json", [(10, 1, 7), (20, 2, 0)], graph_launch=False))
    assert capture.replayed(graphed).tolist() == [True, False]


def test_docs_trace_graph_id_zero_is_not_a_replay():
    for name in ("kineto__docs_before_fix_trace.json.gz", "kineto__docs_after_fix_trace.json.gz"):
        path = SHARED / "wild" / name
        if not path.exists():
            pytest.skip(f"{SHARED} is absent (the shared real traces)")
        ev = [e for e in json.loads(gzip.decompress(path.read_bytes()))["traceEvents"] if e.get("cat") == "kernel"]
        assert ev and all(e["args"].get("graph id") == 0 for e in ev)  # eager kernels, graph id 0 written
        st = capture.trace_state(load_trace(path))
        assert st.replayed_kernels == 0 and st.kind != "replay", st.message


def _captured(path: Path, graph_launches: int) -> Path:
    """A stream capture of two launches (recorded, not run), then ``graph_launches`` replays
    of the graph, each running two kernels (graph id 7)."""
    ev = [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamBeginCapture", "pid": 1, "tid": 1, "ts": 0, "dur": 1, "args": {"correlation": 1}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 2, "dur": 1, "args": {"correlation": 2}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 4, "dur": 1, "args": {"correlation": 3}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamEndCapture", "pid": 1, "tid": 1, "ts": 6, "dur": 1, "args": {"correlation": 4}},
    ]
    for i in range(graph_launches):
        ts, corr = 100 + 100 * i, 10 + i
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 1, "tid": 1, "ts": ts, "dur": 2, "args": {"correlation": corr}})
        for k in range(2):
            ev.append({"ph": "X", "cat": "kernel", "name": f"k{k}", "pid": 0, "tid": 7, "ts": ts + 5 + 10 * k, "dur": 3,
                       "args": {"device": 0, "stream": 7, "correlation": corr, "graph id": 7}})
    path.write_text(json.dumps({"traceEvents": ev}))
    return path


def test_one_launch_per_capture_is_a_capture_not_a_replay(tmp_path):
    # The launch that follows recording (CUDA-graph trees replay each graph once as they
    # record it) is no steady replay: the trace is a capture, its timing not the program's.
    once = capture.trace_state(load_trace(_captured(tmp_path / "once.json", 1)))
    assert (once.captures, once.graph_launches, once.kind, once.timing_rules_apply) == (1, 1, "capture", False)
    twice = capture.trace_state(load_trace(_captured(tmp_path / "twice.json", 2)))
    assert (twice.kind, twice.timing_rules_apply) == ("capture+replay", True)


def test_xdit_flux_capture_trace_is_a_capture():
    # The shared README: "a diffusion model recording a CUDA graph: a capture, not decode";
    # its raw events: one hipStreamBeginCapture ... EndCapture and one hipGraphLaunch.
    paths = sorted((SHARED / "tracelens").glob("inference__xdit_flux.1__capture_traces__*"))
    if not paths:
        pytest.skip(f"{SHARED} is absent (the shared real traces)")
    names = [e.get("name") for e in json.loads(gzip.decompress(paths[0].read_bytes()))["traceEvents"]]
    assert names.count("hipGraphLaunch") == 1 and names.count("hipStreamBeginCapture") == 1
    st = capture.trace_state(load_trace(paths[0]))
    assert st.kind == "capture" and not st.timing_rules_apply, st.message
