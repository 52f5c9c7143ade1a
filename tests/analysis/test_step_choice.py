"""One step choice (analysis.steps.choose_step) on real traces from public repositories
(/work/shared/traces, README "What a right reading is"), each number checked against a
hand computation from the raw events: a step's GPU window is the first start and last end
of the GPU activities whose launching call (same correlation id) starts inside the step's
host range.

Traces written with epoch-microsecond timestamps are read after shifting every ``ts`` by the
trace's minimum (until epoch-µs traces read as they are): durations and order are unchanged.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from perfdoctor.analysis import serving
from perfdoctor.analysis.metrics import analyze
from perfdoctor.analysis.steps import choose_step, enclosed_tail_end, find_steps, helper_encloser, iteration_begins, iteration_call
from perfdoctor.pipeline import load_trace
from perfdoctor.profile import BundleFacts

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT.parent / "shared" / "traces"
pytestmark = pytest.mark.skipif(not TRACES.is_dir(), reason=f"the shared real traces are not here ({TRACES})")
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset")
RUNTIME_CATS = ("cuda_runtime", "cuda_driver", "Runtime")


def _events(path: Path) -> list[dict]:
    doc = json.loads(gzip.decompress(path.read_bytes()))
    return [e for e in (doc["traceEvents"] if isinstance(doc, dict) else doc) if isinstance(e, dict)]


def _shifted(name: str, tmp_path: Path) -> tuple[Path, list[dict]]:
    """The trace with every ts moved by the minimum ts (epoch-µs traces), and its events."""
    doc = json.loads(gzip.decompress((TRACES / name).read_bytes()))
    events = doc["traceEvents"]
    low = min(e["ts"] for e in events if isinstance(e.get("ts"), (int, float)))
    for e in events:
        if isinstance(e.get("ts"), (int, float)):
            e["ts"] -= low
    out = tmp_path / Path(name).name
    out.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return out, [e for e in events if isinstance(e, dict)]


def _windows(events: list[dict], steps: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Per step (host start, end in µs): (first start, last end) of its GPU activities, µs."""
    owner: dict[int, int] = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in RUNTIME_CATS and "correlation" in (e.get("args") or {}):
            for i, (s, t) in enumerate(steps):
                if s <= e["ts"] <= t:
                    owner[e["args"]["correlation"]] = i
    first = [np.inf] * len(steps)
    last = [-np.inf] * len(steps)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in GPU_CATS and (e.get("args") or {}).get("correlation") in owner:
            i = owner[e["args"]["correlation"]]
            first[i] = min(first[i], e["ts"])
            last[i] = max(last[i], e["ts"] + e["dur"])
    return list(zip(first, last))


def _ranges(events: list[dict], name: str) -> list[tuple[float, float]]:
    """Host ranges of that name (Kineto mirrors a range onto the GPU's track too: not those)."""
    return sorted(
        (e["ts"], e["ts"] + e["dur"])
        for e in events
        if e.get("ph") == "X" and e.get("name") == name and e.get("cat") != "gpu_user_annotation"
    )


def _gpu_ms(steps) -> list[float]:
    t = steps.table
    return ((t["gpu_end_ns"] - t["gpu_start_ns"]).astype("int64") / 1e6).tolist()


# --- the order of evidence, on names alone ------------------------------------------------


def test_order_of_evidence() -> None:
    counts = {
        "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__": 15,
        "Optimizer.step#SGD.step": 14,
        "Optimizer.zero_grad#SGD.zero_grad": 14,
        "nccl:all_reduce": 56,
        "[param|m|0|0|0|warmup|forward]": 9,
    }
    # torch's loop ranges mark the iteration (the data loader's fetch opens it); never
    # a library range, never a warm-up range
    c = choose_step(counts)
    assert (c.kind, c.name, c.iteration) == ("loop", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", True)
    # the data loader marks an evaluation loop's iteration too: the report does not call it training
    assert c.how.startswith("the loop iteration over a DataLoader: ")
    c = choose_step({"Optimizer.zero_grad#SGD.zero_grad": 14, "Optimizer.step#SGD.step": 14})
    assert (c.name, c.how.split(":")[0]) == ("Optimizer.zero_grad#SGD.zero_grad", "the training iteration")
    # zero_grad twice per step (at the top and after the step; SAM's two, under its own class's
    # name, the base SGD stepping): the step marks the iteration; once per step, or one more
    # (a zero_grad before the loop), zero_grad still does
    assert choose_step({"Optimizer.zero_grad#SGD.zero_grad": 28, "Optimizer.step#SGD.step": 14}).name == "Optimizer.step#SGD.step"
    assert choose_step({"Optimizer.zero_grad#SAM.zero_grad": 60, "Optimizer.step#SGD.step": 30}).name == "Optimizer.step#SGD.step"
    assert choose_step({"Optimizer.zero_grad#SGD.zero_grad": 15, "Optimizer.step#SGD.step": 14}).name == "Optimizer.zero_grad#SGD.zero_grad"
    # gradient accumulation: one optimizer step per 4 fetches (the last fetch raises
    # StopIteration) is the iteration; one per fetch, or a GAN's two optimizers, is not
    loader = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    c = choose_step({loader: 41, "Optimizer.step#AdamW.step": 10, "Optimizer.zero_grad#AdamW.zero_grad": 10})
    assert (c.kind, c.name, c.iteration) == ("loop", "Optimizer.step#AdamW.step", True)
    assert "one per 4.1 DataLoader batches (gradient accumulation, or several loaders read per step)" in c.how
    assert choose_step({loader: 21, "Optimizer.step#AdamW.step": 20}).name == loader
    assert choose_step({loader: 21, "Optimizer.step#Adam.step": 20, "Optimizer.step#SGD.step": 20}).name == loader
    # a module seen 14 times comes after them; a range the user wrote comes before
    assert choose_step(counts, modules={"ResNet.forward": 14}).kind == "loop"
    assert choose_step({**counts, "train_step": 14}).name == "train_step"
    # ProfilerStep before a range (DDP's forward range inside it), after compiled calls
    assert choose_step({"ProfilerStep#1": 1, "ProfilerStep#2": 1, "DistributedDataParallel.forward": 2}).kind == "profiler_step"
    compiled = {"ProfilerStep#1": 1, "## Call CompiledFxGraph abc ##": 30, "Transformer.forward": 3}
    assert choose_step(compiled).name == "## Call CompiledFxGraph abc ##"
    # a compiled function's calls beat the module that ran once per generation (gpt-fast)
    c = choose_step({"torch.compile: decode_one_token": 21}, modules={"Transformer.forward": 3})
    assert (c.kind, c.iteration) == ("compiled", True)
    # one serving range is enough, whatever else repeats; the user's markers beat all
    assert choose_step({"step[DECODE bs=32]": 1, "decode": 40}).kind == "serving"
    assert choose_step({"step[DECODE bs=32]": 1, "decode": 40}, user=["decode"]).name == "decode"
    # a graph replayed once per loop period: after the user's ranges, before the loop ranges
    assert choose_step({"decode_step": 10}, replays=10).name == "decode_step"
    assert choose_step({"Optimizer.step#SGD.step": 10}, replays=10).kind == "compiled"
    assert choose_step({"once": 1}) is None


# --- serving traces: one range is a step ------------------------------------------------


@pytest.mark.parametrize(
    "name, outer, kind, gpu_ms",
    [
        # vLLM v0 on a B200: one prefill of 888 tokens, 87 ms on the host
        ("tracelens/b200__eager_trace.json.gz", "execute_context_1(888_788544)_generation_0(0)", "prefill", None),
        # SGLang writes a vLLM-style range around its own step[DECODE bs=32]: one step
        ("tracelens/inference__sglang_decode__sglang_Qwen3-8B_decode.json.gz",
         "execute_32_context_0(sq0sk0sqsq0sqsk0)_generation_32(sq32sk32785sqsq32sqsk32785)", "decode", None),
        ("tracelens/inference__vllm_decode_full__graph_execution.json.gz",
         "execute_32_context_0(sq0sk0sqsq0sqsk0)_generation_32(sq32sk55086sqsq32sqsk55086)", "decode", None),
        # one serving step of 156.5 ms GPU window; its 23 graph pieces are not steps
        ("tracelens/inference__vllm_prefilldecode_piecewise__graph_execution.json.gz",
         "execute_8192_context_9(sq8155sk8430sqsq7475785sqsk7671310)_generation_37(sq37sk34489sqsq37sqsk34489)", "mixed", 156.5),
    ],
)
def test_one_serving_range_is_the_step(name: str, outer: str, kind: str, gpu_ms: float | None) -> None:
    events = _events(TRACES / name)
    host = _ranges(events, outer)
    assert len(host) == 1
    (first, last), = _windows(events, host)
    s = find_steps(load_trace(TRACES / name))
    assert (s.name, s.count) == (serving.STEP_NAME, 1)
    assert serving.parse(s.table["name"])["kind"].tolist() == [kind]
    t = s.table.iloc[0]
    assert t["host_start_ns"] / 1e3 == pytest.approx(host[0][0], abs=1e-3)
    assert (t["host_end_ns"] - t["host_start_ns"]) / 1e6 == pytest.approx((host[0][1] - host[0][0]) / 1e3, abs=1e-3)
    assert _gpu_ms(s)[0] == pytest.approx((last - first) / 1e3, abs=1e-3)
    if gpu_ms is not None:
        assert _gpu_ms(s)[0] == pytest.approx(gpu_ms, abs=0.05)


def test_b200_vllm_step_is_87_ms_not_a_layer() -> None:
    s = find_steps(load_trace(TRACES / "tracelens/b200__eager_trace.json.gz"))
    t = s.table.iloc[0]
    assert (t["host_end_ns"] - t["host_start_ns"]) / 1e6 == pytest.approx(87.413, abs=0.001)
    assert serving.parse(s.table["name"])["tokens"].tolist() == [888]


def test_tracemap_vllm_h100_has_nine_decode_steps_not_729_graph_pieces() -> None:
    name = "wild/tracemap__vllm_h100_1000isl_10osl_32con.pt.trace.json.gz"
    events = _events(TRACES / name)
    graph_launches = sum(1 for e in events if e.get("ph") == "X" and e.get("name") == "cudaGraphLaunch")
    assert graph_launches == 729  # 81 per step: piecewise graphs, none of them the step
    s = find_steps(load_trace(TRACES / name))
    assert s.count == 9
    assert s.table["launches"].median() > 81


# --- training: the iteration, never an optimizer or data-loader range ---------------------


@pytest.mark.parametrize(
    "name, marker, apart_ms",
    [
        ("wild/param__linear_kineto.json.gz", "Optimizer.zero_grad#SGD.zero_grad", 25.0),
        ("wild/param__resnet_kineto.json.gz", "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", None),
    ],
)
def test_training_iteration_from_torch_loop_ranges(name: str, marker: str, apart_ms: float | None, tmp_path: Path) -> None:
    path, events = _shifted(name, tmp_path)
    marks = _ranges(events, marker)
    starts = np.array([s for s, _ in marks])
    iterations = [(a, b) for a, b in zip(starts[:-1], starts[1:])]  # start to next start, µs
    s = find_steps(load_trace(path))
    assert s.name == marker
    first = 0
    if marker.startswith("Optimizer."):
        # no data loader: one step per optimizer step. PARAM's linear loop runs forward,
        # zero_grad, backward, step: the forward lies between a step's end and the next
        # zero_grad, so each iteration runs from the step before's end to its own step's end
        # (steady.closed_by_steps, the light pass's rule); the first from its forward, before
        # the first zero_grad, checked apart. Before: from one zero_grad to the next, each
        # holding the next iteration's forward, the first forward in none
        steps = _ranges(events, "Optimizer.step#SGD.step")
        assert len(steps) == len(marks)
        iterations = [(a[1], b[1]) for a, b in zip(steps[:-1], steps[1:])]
        first = 1
    else:
        # the trace ends after the last fetch's training (a 577 ms wait for the loader's
        # workers, then the training and its step): that iteration ends where its optimizer
        # step ended, as the light pass's does (steady.last_fetch_trained). Before: 29 of 30
        iterations.append((starts[-1], _ranges(events, "Optimizer.step#SGD.step")[-1][1]))
    assert s.count == len(iterations) + first == len(marks)
    table = s.table.iloc[first:]
    np.testing.assert_allclose(table["host_start_ns"].to_numpy() / 1e3, [a for a, _ in iterations], atol=1e-3)
    np.testing.assert_allclose((table["host_end_ns"].to_numpy()[:-1] + 1) / 1e3, [a for a, _ in iterations[1:]], atol=1e-3)
    assert table["host_end_ns"].iloc[-1] / 1e3 == pytest.approx(iterations[-1][1], abs=1e-3)
    if first:
        # the first: its forward, the first zero_grad, up to the next one's start
        assert s.table["host_start_ns"].iloc[0] / 1e3 < starts[0] and (s.table["host_end_ns"].iloc[0] + 1) / 1e3 == pytest.approx(iterations[0][0], abs=1e-3)
    hand = _windows(events, iterations)
    np.testing.assert_allclose(_gpu_ms(s)[first:], [(b - a) / 1e3 for a, b in hand], atol=1e-3)
    if apart_ms is not None:
        # the PARAM linear benchmark: iterations 25 ms apart, optimizer ranges of 1-2 ms
        assert float(np.median(np.diff(starts))) / 1e3 == pytest.approx(apart_ms, abs=1.0)
        assert np.median(s.table["host_end_ns"] - s.table["host_start_ns"]) / 1e6 == pytest.approx(apart_ms, abs=1.0)


def test_param_alexnet_warmup_is_not_the_step(tmp_path: Path) -> None:
    path, events = _shifted("hta/critical_path__alexnet__benchmark_result_2869224_1695835535_trace.json.gz", tmp_path)
    measure = "[param|pytorch.model.alex_net|0|0|0|measure|forward]"
    outer = _ranges(events, measure)[0]  # PARAM names the measure block and its forward alike
    s = find_steps(load_trace(path))
    assert s.name == measure and s.count == 1
    assert s.table["host_start_ns"].iloc[0] / 1e3 == pytest.approx(outer[0], abs=1e-3)
    (first, last), = _windows(events, [outer])
    assert _gpu_ms(s)[0] == pytest.approx((last - first) / 1e3, abs=1e-3)


def test_data_loading_before_the_gpu_work_belongs_to_the_step(tmp_path: Path) -> None:
    """kineto__tb_resnet50_num_workers_0: each ProfilerStep fetches its batch (the
    ``enumerate(DataLoader)#...__next__`` op, ~70 ms) before it launches anything."""
    path, events = _shifted("wild/kineto__tb_resnet50_num_workers_0.pt.trace.json.gz", tmp_path)
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("ph") == "X" and str(e.get("name")).startswith("ProfilerStep#"))
    windows = _windows(events, steps)
    before, cp = [], []
    for k, ((h, _), (first, last)) in enumerate(zip(steps, windows)):
        start = max(h, windows[k - 1][1]) if k else h
        before.append(max(0.0, first - start) / 1e3)
        cp.append((last - start) / 1e3)
    loader = [e["dur"] / 1e3 for e in events if e.get("ph") == "X" and str(e.get("name")).startswith("enumerate(DataLoader)#")]
    assert float(np.median(loader)) == pytest.approx(69.8, abs=0.5)
    a = analyze(load_trace(path))
    m = a.metrics
    assert m["host_before_gpu_ms_p50"].value == pytest.approx(float(np.median(before)), abs=1e-3)
    assert m["host_before_gpu_ratio"].value == pytest.approx(sum(before) / sum(cp), rel=1e-6)
    assert m["step_latency_ms_p50"].value == pytest.approx(float(np.median(cp)), abs=1e-3)
    # the fetch is most of it: the step's GPU work cannot start before its batch is there
    assert float(np.median(before)) > 0.8 * float(np.median(loader))


def test_the_profilerstep_the_profilers_exit_closed_is_not_a_step() -> None:
    """hta/amd_trace (a toy training loop on an MI250): torch.profiler opens ProfilerStep#k+1
    in every ``prof.step()`` and the profiler's exit closes the last one. Its #1 holds the
    iteration; #2 is the range the last ``prof.step()`` opened and the exit closed: no host
    event starts inside it. One step (two before: #2 was counted)."""
    path = TRACES / "hta" / "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    events = _events(path)
    host = [e for e in events if e.get("ph") == "X" and e.get("cat") not in GPU_CATS + ("gpu_user_annotation",)]
    one, two = _ranges(events, "ProfilerStep#1"), _ranges(events, "ProfilerStep#2")
    assert len(one) == len(two) == 1 and one[0][1] < two[0][0]
    assert sum(1 for e in host if one[0][0] <= e["ts"] <= one[0][1]) > 1  # the iteration's ops and calls
    assert [e["name"] for e in host if two[0][0] <= e["ts"] <= two[0][1]] == ["ProfilerStep#2"]
    s = find_steps(load_trace(path))
    assert s.name == "ProfilerStep#*" and s.count == 1
    assert s.table["host_start_ns"].iloc[0] / 1e3 == pytest.approx(one[0][0], abs=1e-3)
    # asked for by name (--step, or the step a run recorded): the same rule
    assert find_steps(load_trace(path), "ProfilerStep#*").count == 1


@pytest.mark.filterwarnings("ignore:Profiler won't be using warmup")  # every step active, on purpose
@pytest.mark.parametrize("top", [False, True], ids=["step-at-the-end", "step-at-the-top"])
def test_a_profiler_loop_reads_one_step_per_iteration_wherever_it_calls_prof_step(tmp_path: Path, top: bool) -> None:
    """A real CPU trace of ``with torch.profiler.profile(schedule=...) as prof:`` (every step
    active, the trace saved at the exit) around 6 iterations:
    ``prof.step()`` after each (the recipe; #6 the exit closed, empty) or before each (#0,
    from the start to the first ``prof.step()``, empty; #6 holds the last iteration)."""
    torch = pytest.importorskip("torch")
    model = torch.nn.Linear(32, 32)
    x = torch.randn(4, 32)
    every = torch.profiler.schedule(wait=0, warmup=0, active=100)  # ProfilerStep ranges need a schedule
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=every) as prof:
        for _ in range(6):
            if top:
                prof.step()
            model(x).sum().backward()
            if not top:
                prof.step()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    names = [e["name"] for e in json.loads(path.read_text())["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")]
    assert sorted(set(names)) == [f"ProfilerStep#{k}" for k in range(7)]  # 7 ranges, 6 iterations
    s = find_steps(load_trace(path))
    assert s.name == "ProfilerStep#*" and s.count == 6, s.count


def test_a_runs_module_step_is_timed_as_the_loop_iteration_in_the_trace() -> None:
    """A bundle whose run chose a module call (HF generate's model forward) times it as the
    loop iteration in the light pass; the trace must too: the step runs from one call to the
    next, so the host work between forwards (logits processors, stopping criteria: 1.6 ms of
    a 20 ms token on the H200) and the kernels it launches belong to the token. Here on the
    H200 decode fixture, its ``decode_step`` ranges standing in for the module calls."""
    path = ROOT / "tests" / "fixtures" / "h200-decode-eager-5steps.kineto.json.gz"
    events = _events(path)
    calls = _ranges(events, "decode_step")
    # by hand: iteration k runs from call k's start to 1 ns before call k+1's (the last has no end)
    iterations = [(s, calls[k + 1][0] - 1e-3) for k, (s, _) in enumerate(calls[:-1])]
    windows = _windows(events, iterations)
    cp = [(last - (max(h, windows[k - 1][1]) if k else h)) / 1e3 for k, ((h, _), (_, last)) in enumerate(zip(iterations, windows))]
    profile = load_trace(path)
    profile.origin = replace(profile.origin, bundle=BundleFacts(step="decode_step", light_pass={
        "how": "module: Llama", "module": {"span": "the loop iteration: each call and the host work until the next call"}}))
    s = find_steps(profile)
    assert s.count == len(calls) - 1 == 4
    assert "timed as the loop iteration" in s.how
    ends = (s.table["host_end_ns"].to_numpy() + 1) / 1e3
    assert ends.tolist() == pytest.approx([c[0] for c in calls[1:]], abs=1e-3)
    a = analyze(profile)
    assert a.timeline.critical_path_ms().tolist() == pytest.approx(cp, abs=1e-3)
    # without the run's module step the same ranges are user ranges: each call alone
    plain = find_steps(load_trace(path))
    assert plain.count == 5


def test_the_compiled_function_whose_calls_enclose_the_others_marks_the_iteration() -> None:
    # gpt-fast's speculative decode: 4 draft tokens (decode_one_token), then one verify
    # (model_forward), 10 iterations; the verify is the step, not the 40 draft tokens
    draft = [10 * i + k for i in range(10) for k in range(4)]
    verify = [10 * i + 5 for i in range(10)]
    starts = {"torch.compile: decode_one_token": draft, "torch.compile: model_forward": verify}
    assert iteration_call(starts) == "torch.compile: model_forward"
    counts = {n: len(h) for n, h in starts.items()}
    assert choose_step(counts, compiled_starts=starts).name == "torch.compile: model_forward"
    assert choose_step(counts).name == "torch.compile: decode_one_token"  # without the starts: the most frequent
    # a compiled prefill before each generation's 30 decode calls encloses them too, but it
    # runs no more often than they run per generation: an outer loop, the decode call is the step
    prefill = [100 * g for g in range(3)]
    decode = [100 * g + 1 + k for g in range(3) for k in range(30)]
    assert iteration_call({"torch.compile: prefill": prefill, "torch.compile: decode_one_token": decode}) is None
    # every draft accepted: model_forward runs again at once (the draft's cache fill), the same iteration
    assert iteration_begins([5, 6, 15, 25, 26], [1, 2, 11, 12, 21, 22]).tolist() == [True, False, True, True, False]


def test_the_last_iteration_of_enclosing_calls_holds_the_enclosed_calls_after_it() -> None:
    # a T5's generate per batch: its encoder (the enclosing calls, at 0, 100, 200) then 3
    # decoder forwards, each 10 long; the last batch's end at 235
    decoder = [(t + 5 + 10 * k, t + 15 + 10 * k) for t in (0, 100, 200) for k in range(3)]
    assert enclosed_tail_end([0, 100, 200], decoder) == 235
    # none after the last call: it keeps its own end; more after it than any iteration holds
    # (a phase of the other model's after the loop): not the iteration's
    assert enclosed_tail_end([0, 100, 200], decoder[:6]) is None
    assert enclosed_tail_end([0, 100, 200], decoder + [(300, 310)]) is None
    # iterations that vary (BoTorch's loop: its input transform called 244-708 times an
    # iteration as scipy's optimizer takes more or fewer steps) may hold more in the last, up
    # to their spread beyond the most: 3 and 5 calls, then 7 (5 + 2) at most
    varied = [(t + 1 + k, t + 2 + k) for t, n in ((0, 3), (100, 5), (200, 7)) for k in range(n)]
    assert enclosed_tail_end([0, 100, 200], varied) == 208
    assert enclosed_tail_end([0, 100, 200], varied + [(250, 251)]) is None


def test_a_helper_called_all_through_the_loop_gives_way_to_the_call_that_encloses_it() -> None:
    # A BO loop: the outcome transform once per iteration (at its start), the objective once
    # per iteration (at its end, and once before the loop), the input transform 50 times per
    # iteration in between, each call 0.1 of the 10 per call it waits for scipy: a helper
    # (its calls 1 % of its span): the least called encloser, the outcome transform
    fit = [1000 * i for i in range(6)]
    transform = [1000 * i + 10 + 10 * k for i in range(6) for k in range(50)]
    objective = [-5] + [1000 * i + 900 for i in range(6)]
    calls = {"Normalize.forward": (transform, [h + 1 for h in transform]), "Standardize.forward": (fit, [h + 1 for h in fit]),
             "Hartmann6.forward": (objective, [h + 1 for h in objective])}
    assert helper_encloser(calls) == "Standardize.forward"
    # the same rhythm where the frequent calls are the loop's work (a decode's forwards, one
    # after another, after each generation's prefill): no helper, the caller's choice stands
    decode = (transform, [h + 9 for h in transform])
    assert helper_encloser({**calls, "Normalize.forward": decode}) is None
    # a helper that nothing encloses (an RL policy's small forwards between environment steps)
    assert helper_encloser({"Policy.forward": calls["Normalize.forward"]}) is None


def test_the_fetches_per_optimizer_step_count_iterations_that_step_any_optimizer() -> None:
    # an Optuna-shaped search: 12 batches, trials drew SGD (batches 0-5) and Adam (6-11): 6
    # steps of the most frequent optimizer read as 2 batches per step, "gradient accumulation"
    fetch = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    sgd, adam = "Optimizer.step#SGD.step", "Optimizer.step#Adam.step"
    f = np.arange(12) * 10
    starts = {fetch: f, sgd: f[:6] + 5, adam: f[6:] + 5}
    counts = {fetch: 12, sgd: 6, adam: 6}
    assert choose_step(counts).name == sgd  # by counts alone
    assert choose_step(counts, loop_starts=starts).name == fetch
    # a GAN's two optimizers step in each iteration: one iteration each, not two
    gan = {fetch: f, sgd: f + 3, adam: f + 6}
    assert choose_step({fetch: 12, sgd: 12, adam: 12}, loop_starts=gan).name == fetch
    # accumulation over 3 batches, both optimizers in the iteration that steps
    acc = {fetch: f, sgd: f[2::3] + 3, adam: f[2::3] + 6}
    choice = choose_step({fetch: 12, sgd: 4, adam: 4}, loop_starts=acc)
    assert choice.name in (sgd, adam) and "one per 3 DataLoader batches" in choice.how, choice.how


def test_an_inference_loop_whose_generator_runs_per_token_steps_on_its_tokens() -> None:
    # transformers' generation pipelines run generate() per batch of their own DataLoader
    fetch = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    lm = "GPT2LMHeadModel.forward"
    assert choose_step({fetch: 10}, modules={lm: 80}).name == lm
    assert choose_step({fetch: 10}, modules={lm: 20}).name == fetch  # 2 calls a batch: no token loop
    assert choose_step({fetch: 10}, modules={"BertForSequenceClassification.forward": 80}).name == fetch  # no generator
    trains = {fetch: 10, "Optimizer.step#AdamW.step": 10}
    assert choose_step(trains, modules={lm: 80}).name == fetch  # a training loop steps on its batches
