"""A program that captures a CUDA graph itself and replays it (PyTorch's CUDA Graphs docs,
"whole network capture") calls no module in its loop: the light pass's step is the replays
of that graph (perfdoctor.record.bootstrap.steps.GraphReplays), chosen by the one order of
evidence (analysis.steps.choose_step's ``replays``), timed as the loop iteration, and found
again in the traced pass's trace. The real thing runs on the H200:
tests/record/test_run_gpu.py::test_hand_captured_graph_replays_are_the_step."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from conftest import FIXTURES
from perfdoctor import api
from perfdoctor.analysis.steps import GRAPH_REPLAY, ITERATION, choose_step, find_steps, graph_replays, one_graph
from perfdoctor.bundle.protocol import PassConfig, PassResults
from perfdoctor.names import ranges as rangenames
from perfdoctor.pipeline import load_trace
from perfdoctor.profile import BundleFacts
from perfdoctor.record.bootstrap.session import Session
from perfdoctor.record.bootstrap.steps import ModuleSteps, install_graph_replays, module_step_name
from perfdoctor.record.light import find_step
from perfdoctor.record.options import RunOptions

torch = pytest.importorskip("torch")

FIRST, SECOND = rangenames.replay_name(1), rangenames.replay_name(2)


# --- the choice -------------------------------------------------------------------------------


def test_replay_names_are_their_own_kind() -> None:
    assert (FIRST, SECOND) == ("CUDAGraph.replay #1", "CUDAGraph.replay #2")
    assert rangenames.kind(FIRST) == rangenames.REPLAY


def test_one_graph_is_the_step_only_when_it_is_nearly_every_replay() -> None:
    # one dominant graph (a stray graph replayed once in a warm-up): it
    assert one_graph({FIRST: 120, SECOND: 1}) == FIRST
    # vLLM's piecewise graphs: 23 pieces, each replayed once per iteration: none
    pieces = {rangenames.replay_name(i): 40 for i in range(1, 24)}
    assert one_graph(pieces) is None
    assert choose_step(pieces, replays=0) is None
    # replayed once is not a loop; no replays at all
    assert one_graph({FIRST: 1}) is None
    assert one_graph({}) is None
    # a trace counts launches whose graph is unknown in the total
    assert one_graph({"g": 9}, total=11) is None


def test_graph_replays_in_the_order_of_evidence() -> None:
    c = choose_step({FIRST: 120}, modules={"ResNet.forward": 3}, replays=120)
    assert (c.kind, c.name, c.iteration) == ("compiled", GRAPH_REPLAY, True)
    assert c.how == f"one CUDA/HIP graph replayed 120x, timed as {ITERATION}"
    # a replay series is never a range of its own (evidence 5): without ``replays``, the modules
    assert choose_step({FIRST: 120}, modules={"ResNet.forward": 3}).kind == "module"
    # a compiled call (reduce-overhead replays a graph inside each) beats its inner replay:
    # the call also holds the host's copies of its inputs
    c = choose_step({"torch.compile: decode_one_token": 30, FIRST: 30}, replays=30)
    assert c.name == "torch.compile: decode_one_token"
    # the user's ranges and ProfilerStep beat the replays; the replays beat the loop ranges
    assert choose_step({"decode_step": 30, FIRST: 30}, replays=30).name == "decode_step"
    assert choose_step({"ProfilerStep#1": 1, FIRST: 30}, replays=30).kind == "profiler_step"
    assert choose_step({"Optimizer.step#SGD.step": 30, FIRST: 30}, replays=30).name == GRAPH_REPLAY


def _series(starts: list[int], ends: list[int], gpu_starts: list[int]) -> dict:
    return {"host_start_ns": starts, "gpu_start_ns": gpu_starts, "gpu_end_ns": ends}


def test_find_step_chooses_the_replays_and_times_them_as_the_iteration() -> None:
    # the warm-up's forwards (modules), the capture's forward (dropped by the bootstrap), a
    # stray graph replayed once, then one graph replayed in the loop: replay k's host start
    # at 100k, its GPU work ends at 100k + 60, the next replay's GPU start (the input's copy
    # before it done) at 100(k+1) + 5
    n = 12
    starts = [100 * k for k in range(1, n + 1)]
    results = PassResults(
        series={
            FIRST: _series([50], [55], [50]),
            SECOND: _series(starts, [s + 60 for s in starts], [s + 5 for s in starts]),
        },
        modules={"0": {"ResNet.forward": _series([1, 10, 20], [9, 19, 29], [1, 10, 20])}},
    )
    name, how, module, rewritten = find_step(results, RunOptions(target=["x.py"]))
    assert (name, module, rewritten) == (SECOND, None, True)
    assert how == f"one CUDA/HIP graph replayed {n}x, timed as {ITERATION}"
    # each replay's iteration ends when the next one's GPU work starts; the last keeps its end
    assert results.series[SECOND]["gpu_end_ns"] == [s + 105 for s in starts[:-1]] + [starts[-1] + 60]
    assert results.call_series[SECOND]["gpu_end_ns"] == [s + 60 for s in starts]  # as measured, kept
    # piecewise: two graphs replayed alike: no replay step, the module is the step
    results = PassResults(
        series={FIRST: _series(starts, starts, starts), SECOND: _series(starts, starts, starts)},
        modules={"0": {"ResNet.forward": _series([1, 10], [9, 19], [1, 10])}},
    )
    assert find_step(results, RunOptions(target=["x.py"]))[0] == "ResNet.forward"


# --- the bootstrap's wrapper -----------------------------------------------------------------


class FakeGraph:
    """A stand-in for ``torch.cuda.CUDAGraph``, labelled as such (this CPU build has no CUDA
    graphs): its replay only counts and says which graph ran. The real one runs in
    tests/record/test_run_gpu.py on the H200."""

    replayed: list[str] = []

    def __init__(self, label: str) -> None:
        self.label = label

    def replay(self) -> None:
        FakeGraph.replayed.append(self.label)


@pytest.fixture
def fake_graph(monkeypatch):
    FakeGraph.replayed = []
    monkeypatch.setattr(torch.cuda, "CUDAGraph", FakeGraph)
    original = FakeGraph.__dict__["replay"]
    yield original
    assert FakeGraph.__dict__["replay"] is original  # every test uninstalls


def test_light_pass_times_each_graphs_replays_as_its_own_series(fake_graph) -> None:
    session = Session(PassConfig(pass_="light"))
    session.replays = install_graph_replays(session)  # as the bootstrap main does
    assert FakeGraph.replay is not fake_graph
    try:
        a, b = FakeGraph("a"), FakeGraph("b")
        b.replay()  # b is replayed first: it is graph #1
        for _ in range(5):
            a.replay()
        c = FakeGraph("c")
        c.replay()
        del c  # a freed graph's ordinal is not reused
        FakeGraph("d").replay()
    finally:
        session.uninstall_hooks()
    assert FakeGraph.replayed == ["b", "a", "a", "a", "a", "a", "c", "d"]  # every replay ran, in order
    series, error = session.times.series()
    assert error is None
    assert {n: len(s["gpu_end_ns"]) for n, s in series.items()} == {FIRST: 1, SECOND: 5, "CUDAGraph.replay #3": 1, "CUDAGraph.replay #4": 1}
    # uninstalled: torch's own replay again, and a replay now records nothing
    assert FakeGraph.__dict__["replay"] is fake_graph
    a.replay()
    assert len(session.times.series()[0][SECOND]["gpu_end_ns"]) == 5


def test_a_replay_inside_a_module_call_is_not_a_series(fake_graph) -> None:
    """A module compiled with mode="reduce-overhead" replays its graph inside each of its
    calls: the module call stays the step (as before replays were timed), and its steps
    take no second pair of marks."""
    session = Session(PassConfig(pass_="light"))
    session.modules = ModuleSteps(session)
    session.replays = install_graph_replays(session)
    graph = FakeGraph("g")

    class Graphed(torch.nn.Module):
        def forward(self, x):
            graph.replay()
            return x

    model = Graphed()
    try:
        for _ in range(ModuleSteps.SCOUT_CALLS + 3):  # scouting, then narrowed
            model(torch.zeros(1))
        graph.replay()  # outside any module call: timed
    finally:
        session.uninstall_hooks()
    series, _ = session.times.series()
    assert {n: len(s["gpu_end_ns"]) for n, s in series.items()} == {FIRST: 1}
    calls = session.modules.series()[0]["0"][module_step_name(Graphed)]
    assert len(calls["gpu_end_ns"]) == ModuleSteps.SCOUT_CALLS + 3


def test_a_forked_child_sees_no_replay(fake_graph) -> None:
    session = Session(PassConfig(pass_="light"))
    session.replays = install_graph_replays(session)
    a = FakeGraph("a")
    bound = a.replay  # taken before the fork: still our wrapper, which must stay out of the way
    try:
        session.forked()  # what os.fork's after-child hook does
        assert FakeGraph.__dict__["replay"] is fake_graph
        a.replay()
        bound()
    finally:
        session.uninstall_hooks()
    assert FakeGraph.replayed == ["a", "a"]
    assert session.times.series()[0] == {}


def test_traced_pass_marks_the_chosen_graphs_replays_as_regions(fake_graph) -> None:
    # nsys without a capture range: the window is only counted, no tracer starts here
    session = Session(PassConfig(pass_="nsys", step=SECOND, warmup=1, steps=2))
    session.replays = install_graph_replays(session)
    api.subscribe(session)
    try:
        stray, loop = FakeGraph("stray"), FakeGraph("loop")
        stray.replay()
        for _ in range(4):
            loop.replay()
    finally:
        api._listeners.remove(session)
        session.uninstall_hooks()
    assert FakeGraph.replayed == ["stray"] + ["loop"] * 4
    # a perfdoctor region (a step) per replay of the step's graph, none for the other
    assert session.counts == {SECOND: 4}
    assert session.window_state == "closed"  # warm-up 1, then 2 steps: the window opened and closed


def test_other_traced_passes_leave_replay_alone(fake_graph) -> None:
    assert install_graph_replays(Session(PassConfig(pass_="torch", step="decode_step"))) is None
    assert install_graph_replays(Session(PassConfig(pass_="torch"))) is None
    assert FakeGraph.__dict__["replay"] is fake_graph


# --- the trace: the same steps ----------------------------------------------------------------


def test_the_trace_finds_the_runs_replay_steps_as_iterations() -> None:
    """The traced pass wraps each replay of the chosen graph in a perfdoctor region; with the
    bundle's recorded step the trace's steps are those replays, each from its start to the
    next one's. Here on the H200 graph decode fixture, its ``decode_step`` ranges replaced by
    a region around each ``cudaGraphLaunch``, as the traced pass writes them."""
    profile = load_trace(FIXTURES / "h200-decode-graph-10steps.kineto.json.gz")
    launches = graph_replays(profile)
    assert len(launches) == 10
    r = profile.ranges
    regions = pd.DataFrame({c: launches[c].to_numpy() for c in ("start_ns", "end_ns", "tid")})
    regions["name"], regions["source"] = SECOND, r.loc[r["name"] == "decode_step", "source"].iloc[0]
    profile.ranges = pd.concat([r[r["name"] != "decode_step"], regions], ignore_index=True)
    light = {"how": f"one CUDA/HIP graph replayed 40x, timed as {ITERATION}"}
    profile.origin = replace(profile.origin, bundle=BundleFacts(step=SECOND, light_pass=light))
    s = find_steps(profile)
    assert (s.name, s.count) == (SECOND, 9)  # the last replay's iteration has no known end
    assert s.how == f"recorded by the run: ranges named {SECOND!r} ({light['how']})"
    starts = launches["start_ns"].to_numpy(np.int64)
    assert s.table["host_start_ns"].tolist() == starts[:-1].tolist()
    assert s.table["host_end_ns"].tolist() == (starts[1:] - 1).tolist()
    assert (s.table["launches"] >= 1).all()
    # each step owns its replay's kernels: the graph's kernels per replay, as the trace's own
    # graph-replay steps count them
    per_replay = find_steps(load_trace(FIXTURES / "h200-decode-graph-10steps.kineto.json.gz")).table["kernels"]
    assert s.table["kernels"].tolist() == per_replay.tolist()[:-1]
