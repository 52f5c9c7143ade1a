"""Issue 32, item 4: a CPU program's steps, operator by operator. Every number is checked
against the raw trace JSON, read here with the standard library alone: the parent of an
operator is the shortest event of its thread that encloses it (a quadratic search, not the
module's one sweep), self time is duration less the direct children's."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import FIXTURES
from perfdoctor.analysis import cpu
from perfdoctor.pipeline import diagnose

CPU_MLP = FIXTURES / "cpu-mlp-5steps.kineto.json.gz"  # tests/programs/cpu_steps.py under perfdoctor run --collect torch
# A CPU-only DLRM training step (HTA), in the shared corpus beside the checkout (tests/e2e/test_real_traces.py).
RANK_NON_GPU = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "hta" / "rank_non_gpu__rank_non_gpu.json.gz"


def _raw(path: Path, step: str) -> tuple[list[tuple[float, float]], list[dict], list[tuple[float, float]]]:
    """The step ranges (start, end µs), the events of the host's tree (name, ts, end,
    tid, op: a CPU op, else a record_function range or a Python frame) and the DataLoader's
    fetches (start, end µs) of the trace."""
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    x = [e for e in events if e.get("ph") == "X" and isinstance(e.get("dur"), (int, float))]
    is_step = (lambda e: e["name"].startswith("ProfilerStep#")) if step == "ProfilerStep" else (lambda e: e["name"] == step)
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in x if is_step(e))
    ops = [{"name": e["name"], "ts": e["ts"], "end": e["ts"] + e["dur"], "tid": (e["pid"], e["tid"]), "op": e.get("cat") == "cpu_op"}
           for e in x if e.get("cat") in ("cpu_op", "user_annotation", "python_function") and not is_step(e) and "DataLoader" not in e["name"]]
    fetches = [(e["ts"], e["ts"] + e["dur"]) for e in x if e["name"].startswith("enumerate(DataLoader)#")]
    return steps, ops, fetches


def _expected(path: Path, step: str) -> tuple[dict[str, dict[str, float]], list[float], list[float]]:
    """Per operator name, calls, self and total ms per step; each step's ms; each step's ms
    in no operator on any thread and no DataLoader fetch (its wait is data loading). A range inside an operator is a child of it, as in the
    profiler's own event tree (key_averages' self time)."""
    steps, ops, fetches = _raw(path, step)
    by_tid = defaultdict(list)
    for o in ops:
        by_tid[o["tid"]].append(o)
    child = defaultdict(float)
    for same in by_tid.values():
        same.sort(key=lambda o: (o["ts"], -(o["end"] - o["ts"])))
        for i, o in enumerate(same):
            # Back from o in start order: the first op that encloses it is its parent.
            parent = next((p for p in reversed(same[:i]) if p["ts"] <= o["ts"] and o["end"] <= p["end"]), None)
            if parent is not None:
                child[id(parent)] += o["end"] - o["ts"]
    n = len(steps)
    table: dict[str, dict[str, float]] = defaultdict(lambda: {"calls": 0.0, "self_ms": 0.0, "total_ms": 0.0})
    outside = []
    for s0, s1 in steps:
        inside = [o for o in ops if s0 <= o["ts"] < s1 and o["op"]]
        for o in inside:
            row = table[o["name"]]
            row["calls"] += 1 / n
            row["total_ms"] += (o["end"] - o["ts"]) / 1e3 / n
            row["self_ms"] += max(o["end"] - o["ts"] - child[id(o)], 0) / 1e3 / n
        covered, reach = 0.0, s0
        busy = [(o["ts"], o["end"]) for o in inside] + [f for f in fetches if s0 <= f[0] < s1]
        for a, b in sorted((max(a, s0), min(b, s1)) for a, b in busy):
            if b > reach:
                covered += b - max(a, reach)
                reach = b
        outside.append((s1 - s0 - covered) / 1e3)
    return dict(table), [(b - a) / 1e3 for a, b in steps], outside


@pytest.mark.parametrize("path, step", [(CPU_MLP, "train_step"), (RANK_NON_GPU, "ProfilerStep")])
def test_the_operator_table_is_the_raw_traces_self_and_total_time_per_step(path: Path, step: str) -> None:
    if not path.exists():
        pytest.skip(f"{path} not here")
    d = diagnose(path)
    view = cpu.breakdown(d.profile, d.analysis.timeline.steps, top=1000)  # every operator a row: nothing summed
    want, step_ms, outside = _expected(path, step)
    got = view.ops.set_index("name")
    assert set(got.index) == set(want)
    for name, row in want.items():
        # The Profile holds integer ns: each start and end is rounded, so a duration is off by
        # up to 1 ns, and a self time (less its children's) by a few: 4 ns per call at most.
        ns = 4e-6 * row["calls"]
        assert got.loc[name, "calls"] == pytest.approx(row["calls"], rel=1e-9), name
        assert got.loc[name, "self_ms"] == pytest.approx(row["self_ms"], rel=1e-9, abs=ns), name
        assert got.loc[name, "total_ms"] == pytest.approx(row["total_ms"], rel=1e-9, abs=ns), name
        # a mean per step, so a share of the mean step (Σ self / Σ step time)
        assert got.loc[name, "self_share"] == pytest.approx(row["self_ms"] / (sum(step_ms) / len(step_ms)), rel=1e-6, abs=ns), name
    assert view.step_ms.tolist() == pytest.approx(step_ms, rel=1e-6)
    calls = sum(r["calls"] for r in want.values())
    assert view.op_self_ms == pytest.approx(sum(r["self_ms"] for r in want.values()), rel=1e-9, abs=4e-6 * calls)
    assert view.outside_ops_ms == pytest.approx(sum(outside) / len(outside), rel=1e-9, abs=4e-6 * calls)


def test_the_table_keeps_the_top_operators_and_sums_the_rest_in_one_row() -> None:
    if not RANK_NON_GPU.exists():
        pytest.skip("the HTA trace is not here")
    d = diagnose(RANK_NON_GPU)
    every = cpu.breakdown(d.profile, d.analysis.timeline.steps, top=1000).ops
    top = d.analysis.cpu.ops  # the default, 10
    assert len(every) == 100 and len(top) == 11 and top["rest"].tolist() == [False] * 10 + [True]
    assert top["name"].iloc[-1] == "(90 others)"
    assert top["name"].iloc[:10].tolist() == every["name"].iloc[:10].tolist()
    assert top["name"].iloc[0] == "aten::copy_"  # 69 copies, 6.0 ms of the 75.5 ms step
    assert top["self_ms"].sum() == pytest.approx(every["self_ms"].sum(), rel=1e-9)  # nothing lost
    assert top["calls"].iloc[-1] == every["calls"].iloc[10:].sum()


def test_a_cpu_trace_finds_its_repeating_range_as_the_step_and_says_what_holds() -> None:
    d = diagnose(CPU_MLP)  # no bundle, no --step: no GPU ran, so no range can have GPU work
    assert d.analysis.steps.name == "train_step" and d.analysis.steps.count == 5
    assert "no GPU ran" in d.analysis.steps.how
    view = d.analysis.cpu
    mean = float(view.step_ms.mean())  # the figures are means per step: their shares are of the mean step
    mm = view.ops.set_index("name").loc["aten::mm"]
    kinds = {o.kind for o in view.observations}
    # Each observation exactly where its threshold holds, on the numbers checked above.
    assert ("dominant-op" in kinds) == (mm["self_ms"] >= cpu.DOMINANT_SHARE * mean)
    assert ("outside-ops" in kinds) == (view.outside_ops_ms >= cpu.OUTSIDE_OPS_SHARE * mean)
    assert "data-loading" not in kinds and view.data_loading_ms == 0


def test_a_gpu_trace_has_no_cpu_view() -> None:
    d = diagnose(FIXTURES / "h200-decode-eager-5steps.kineto.json.gz")
    assert d.analysis.cpu is None and "cpu" not in d.analysis.to_json()
    assert len(d.profile.ops) > 0  # its operators are read, and kept apart from the ranges
    assert not d.profile.ranges["source"].eq("cpu_op").any()


def test_a_trace_of_device_work_perfdoctor_does_not_read_is_not_a_cpu_run() -> None:
    mtia = RANK_NON_GPU.parent / "mtia_inference_trace__mtia_inference_rank_0.json.gz"
    if not mtia.exists():
        pytest.skip(f"{mtia} not here")
    d = diagnose(mtia)  # MTIA device events, unread: its repeating host ranges are no CPU step
    assert d.analysis.cpu is None and d.analysis.steps.name is None


def test_an_event_is_charged_to_the_innermost_event_that_encloses_it() -> None:
    """with_stack=True: a record_function range opens inside the ``__enter__`` frame and
    closes inside ``__exit__``: it is the wrapper's child, not ``__enter__``'s, and the op
    inside it the range's; the wrapper loses the time its children cover, once. Another
    thread's events are never children."""
    #                 wrapper __enter__ range  op  __exit__  other thread
    start = np.array([0, 10, 25, 40, 80, 5], dtype=np.int64)
    end = np.array([100, 30, 85, 50, 90, 95], dtype=np.int64)
    tid = np.array([0, 0, 0, 0, 0, 1], dtype=np.int64)
    # the wrapper's children cover [10, 30) ∪ [25, 85) ∪ [80, 90) = [10, 90): 80, not their sum 90
    assert cpu.child_ns(start, end, tid).tolist() == [80, 0, 10, 0, 0, 0]
    assert cpu.child_ns(start - 10**6, end - 10**6, tid).tolist() == [80, 0, 10, 0, 0, 0]  # before the trace's origin alike
    # strictly nested, and one after another: the sweep's usual case
    start, end = np.array([0, 0, 2, 6, 10], dtype=np.int64), np.array([10, 5, 4, 9, 12], dtype=np.int64)
    assert cpu.child_ns(start, end, np.zeros(5, dtype=np.int64)).tolist() == [5 + 3, 2, 0, 0, 0]


def _one_step(fetch: str) -> cpu.CpuView:
    """One 100 ns step: an op at [10, 30), the DataLoader's fetch at [20, 60) (a collate op
    inside it would be both), a record_function range at [70, 90) holding no op."""
    from perfdoctor.profile import OP_COLUMNS, RANGE_COLUMNS, Profile, frame

    profile = Profile(
        ops=frame(OP_COLUMNS, {"name": ["aten::mm"], "start_ns": [10], "end_ns": [30], "tid": [0]}),
        ranges=frame(RANGE_COLUMNS, {"name": ["step", fetch, "log"], "start_ns": [0, 20, 70], "end_ns": [100, 60, 90],
                                     "tid": [0, 0, 0], "source": ["record_function", "data_loader", "record_function"]}))
    steps = pd.DataFrame({"name": ["step"], "tid": [0], "host_start_ns": [0], "host_end_ns": [100]})
    return cpu.breakdown(profile, steps)


def test_the_fetch_is_data_loading_not_time_in_no_operator() -> None:
    view = _one_step("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__")
    # in no op and no fetch: [0, 10) and [60, 100) (the range holds no op): 50 ns
    assert view.outside_ops_ms == pytest.approx(50e-6) and view.data_loading_ms == pytest.approx(40e-6)
    assert not view.loader_workers and not view.has_stacks
    (data,) = [o for o in view.observations if o.kind == "data-loading"]
    assert data.advice == cpu.NO_WORKERS_ADVICE


def test_a_loader_with_workers_is_not_told_to_use_workers() -> None:
    view = _one_step("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__")
    assert view.loader_workers
    (data,) = [o for o in view.observations if o.kind == "data-loading"]
    assert data.advice == cpu.WORKERS_ADVICE and cpu.MULTIPROCESS_ITER in data.evidence


def test_the_step_threads_wait_is_its_own_part_not_time_in_no_operator() -> None:
    """One 100 ns step on thread 0: an op at [10, 30) on thread 0, another at [60, 70) on
    thread 1 (a worker thread's op is work), the step's thread waiting at [25, 80) (the
    part under the ops is theirs: the wait adds [30, 60) and [70, 80), 40 ns), a DataLoader
    fetch at [85, 95) (data loading, never the wait's), and a wait on thread 1 at [0, 100)
    (another thread's: not the step's)."""
    from perfdoctor.profile import OP_COLUMNS, RANGE_COLUMNS, Profile, frame

    wait, fetch = "perfdoctor.wait", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    profile = Profile(
        ops=frame(OP_COLUMNS, {"name": ["aten::mm", "aten::add"], "start_ns": [10, 60], "end_ns": [30, 70], "tid": [0, 1]}),
        ranges=frame(RANGE_COLUMNS, {"name": ["step", wait, fetch, wait], "start_ns": [0, 25, 85, 0], "end_ns": [100, 80, 95, 100],
                                     "tid": [0, 0, 0, 1], "source": ["record_function", "record_function", "data_loader", "record_function"]}))
    steps = pd.DataFrame({"name": ["step"], "tid": [0], "host_start_ns": [0], "host_end_ns": [100]})
    view = cpu.breakdown(profile, steps)
    assert view.waits_ms == pytest.approx(40e-6) and view.data_loading_ms == pytest.approx(10e-6)
    # in no op, no fetch, no wait: [0, 10), [80, 85), [95, 100)
    assert view.outside_ops_ms == pytest.approx(20e-6)
    (waits,) = [o for o in view.observations if o.kind == "waits"]
    assert waits.advice == cpu.WAITS_ADVICE and waits.ms_per_step == view.waits_ms
    assert view.to_json()["waits_ms_per_step"] == view.waits_ms
    # without the waits (a trace not recorded by perfdoctor run) that time is in no operator
    plain = Profile(ops=profile.ops, ranges=profile.ranges[profile.ranges["name"] != wait].reset_index(drop=True))
    bare = cpu.breakdown(plain, steps)
    assert bare.waits_ms == 0 and bare.outside_ops_ms == pytest.approx(60e-6)
    assert "waits" not in [o.kind for o in bare.observations]


def test_operators_on_threads_at_once_are_said_to_overlap() -> None:
    """One 100 ns step: an op at [10, 60) on thread 0 and one at [20, 70) on thread 1 (an
    ensemble's models on a thread pool): 100 ns of self time, some op running [10, 70) =
    60 ns. The self times add up past the time any ran, and the headline says why; ops on
    two threads one after the other do not."""
    from perfdoctor.profile import OP_COLUMNS, RANGE_COLUMNS, Profile, frame
    from perfdoctor.reports.cpu import headline

    steps = pd.DataFrame({"name": ["step"], "tid": [0], "host_start_ns": [0], "host_end_ns": [100]})
    ranges = frame(RANGE_COLUMNS, {"name": ["step"], "start_ns": [0], "end_ns": [100], "tid": [0], "source": ["record_function"]})

    def view(starts: list[int], ends: list[int]) -> cpu.CpuView:
        ops = frame(OP_COLUMNS, {"name": ["aten::lstm", "aten::lstm"], "start_ns": starts, "end_ns": ends, "tid": [0, 1]})
        return cpu.breakdown(Profile(ops=ops, ranges=ranges), steps)

    at_once = view([10, 20], [60, 70])
    assert at_once.op_self_ms == pytest.approx(100e-6) and at_once.op_busy_ms == pytest.approx(60e-6)
    assert at_once.op_threads == 2 and at_once.overlapping
    assert "on 2 threads at once, at least one running" in headline(at_once)
    in_turn = view([10, 60], [50, 90])
    assert in_turn.op_busy_ms == pytest.approx(70e-6) and not in_turn.overlapping
    assert "threads" not in headline(in_turn)


def test_a_compiled_step_is_not_told_to_torch_compile(tmp_path: Path) -> None:
    """A torch.compile-d model's steps, profiled on the CPU: its operators are torch.compile's
    (TorchDynamo's guard check, the compiled region), so no observation says "torch.compile";
    the same wording is kept for the eager model. (AOTInductor's and TorchScript's calls:
    tests/record/test_real_programs_named_nowhere.py; the deployment probe, 2026-12-07, was told
    "or torch.compile to fuse what surrounds it" on all three.)"""
    import torch

    said = {}
    for compiled in (False, True):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 256))
        run = torch.compile(model, backend="eager") if compiled else model
        x = torch.randn(64, 256)
        with torch.no_grad():
            run(x)  # compiled here, before the trace
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                for _ in range(5):
                    with torch.profiler.record_function("step"):
                        run(x)
        path = tmp_path / f"compiled-{compiled}.json"
        prof.export_chrome_trace(str(path))
        view = diagnose(path, warnings=False).analysis.cpu
        assert view.compiled == ("torch.compile" if compiled else None)
        said[compiled] = " ".join(o.advice for o in view.observations)
    assert "torch.compile" in said[False] and "torch.compile" not in said[True], said


@pytest.mark.parametrize(("ranges", "ops", "how"), [
    (["AOTInductor: model #1"], ["aten::mm"], "AOTInductor"),
    (["torch.compile: decode_one_token"], [], "torch.compile"),
    (["ResNet.forward", "## Call CompiledFxGraph f3x ##"], ["aten::addmm"], "torch.compile"),
    (["DLRM.forward"], ["forward", "aten::embedding_bag"], "TorchScript"),
    (["ResNet.forward"], ["aten::conv2d", "aten::addmm"], None),
])
def test_how_a_step_is_compiled_is_read_from_its_names(ranges: list[str], ops: list[str], how: str | None) -> None:
    assert cpu.compiled_as(pd.Series(ranges), np.array(ops, dtype=object)) == how


@pytest.mark.parametrize("reentrant", [False, True])
def test_a_checkpointed_backward_runs_the_forward_again_and_says_so(tmp_path: Path, reentrant: bool) -> None:
    """Activation checkpointing (session 34's probe: a block stack with torch.utils.checkpoint,
    HF's gradient_checkpointing_enable()): each block's forward runs again in the backward,
    ~20 % of the step, and nothing said so. The recompute is checked against the raw trace:
    the forward operators inside the autograd engine's nodes, per step; the same model
    without checkpointing has none."""
    import torch
    from torch.utils.checkpoint import checkpoint

    said = {}
    for ckpt in (True, False):
        torch.manual_seed(0)
        blocks = torch.nn.ModuleList(torch.nn.Sequential(torch.nn.LayerNorm(256), torch.nn.Linear(256, 512), torch.nn.GELU(),
                                                         torch.nn.Linear(512, 256)) for _ in range(4))
        opt = torch.optim.SGD(blocks.parameters(), lr=0.01)
        x = torch.randn(64, 256)

        def forward(h):
            for b in blocks:
                h = h + (checkpoint(b, h, use_reentrant=reentrant) if ckpt else b(h))
            return h

        # 12 steps on one intra-op thread: with 4 steps on two, beside the other CI worker, the
        # recompute's share of the mean step read 0.06-0.23 (two threads spinning for a CPU
        # stretched some steps 30x), under its 10 % line in a clean-clone run
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                for _ in range(12):
                    with torch.profiler.record_function("step"):
                        opt.zero_grad()
                        forward(x.requires_grad_(reentrant)).square().mean().backward()
                        opt.step()
        finally:
            torch.set_num_threads(threads)
        path = tmp_path / f"ckpt-{ckpt}.json.gz"
        prof.export_chrome_trace(str(path))
        view = diagnose(path, warnings=False).analysis.cpu
        said[ckpt] = view
        steps, events, _ = _raw(path, "step")
        nodes = [e for e in events if e["name"].startswith(cpu.BACKWARD_NODE)]
        # by hand: each step's forward ops inside a node of their thread, nested ones once
        total = 0.0
        for s0, s1 in steps:
            spans = sorted((e["ts"], e["end"]) for e in events if e["name"] in cpu.FORWARD_OPS and s0 <= e["ts"] < s1
                           and any(n["tid"] == e["tid"] and n["ts"] <= e["ts"] and e["end"] <= n["end"] for n in nodes))
            covered, reach = 0.0, -1.0
            for a, b in spans:
                covered += max(0.0, b - max(a, reach))
                reach = max(reach, b)
            total += covered
        assert view.recompute_ms == pytest.approx(total / 1e3 / len(steps), rel=1e-6, abs=1e-9)
    assert said[True].recompute_ms > 0 and said[False].recompute_ms == 0
    assert "recompute" in [o.kind for o in said[True].observations]
    assert "recompute" not in [o.kind for o in said[False].observations]


def test_per_sample_gradients_by_vmap_are_no_recompute(tmp_path: Path) -> None:
    """torch.func's per-sample gradients (the tutorial's ``vmap(grad(compute_loss))`` over
    ``functional_call``, a DP-SGD by hand; session 36's probe): inside AddmmBackward0 the
    batching rule of ``aten::mm`` calls ``aten::matmul``, and that was read as the forward run
    again, "activation checkpointing", 13 % of the step, in a program that checkpoints nothing."""
    import torch
    from torch.func import functional_call, grad, vmap

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    params = {k: v.detach() for k, v in model.named_parameters()}

    def loss(p, x, y):
        return torch.nn.functional.cross_entropy(functional_call(model, p, (x[None],)), y[None])

    per_sample = vmap(grad(loss), in_dims=(None, 0, 0))
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(4):
            with torch.profiler.record_function("step"):
                grads = per_sample(params, x, y)
                params = {k: v - 0.01 * grads[k].mean(0) for k, v in params.items()}
    path = tmp_path / "vmap.json.gz"
    prof.export_chrome_trace(str(path))
    steps, events, _ = _raw(path, "step")
    nodes = [e for e in events if e["name"].startswith(cpu.BACKWARD_NODE)]
    called = [e for e in events if e["name"] == "aten::matmul"
              and any(n["tid"] == e["tid"] and n["ts"] <= e["ts"] and e["end"] <= n["end"] for n in nodes)]
    assert called  # the case: forward-named operators inside the backward's nodes
    view = diagnose(path, warnings=False).analysis.cpu
    assert view.recompute_ms == 0 and "recompute" not in [o.kind for o in view.observations]
