"""``perfdoctor run`` with default step options on real programs (tests/programs/real/,
written the way their authors write them), CPU, tiny sizes: the light pass must find one
step per token / per training iteration, and its steps over the stretch the program timed
must add up to the program's own number, printed in the same process (its RESULT line).

Only the light pass runs (``--collect nvml``: no tracer on a CPU box), which is where the
step is chosen. On this 2-core shared box single steps jitter by 10x (a 0.8 ms token took
9 ms now and then), so the comparison is over the very steps the program timed, not a
median against the program's mean.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import numpy as np
import pytest

from conftest import REAL_PROGRAMS as REAL, program_result, program_results, run_cli, trace_program
from perfdoctor.analysis.steps import find_steps
from perfdoctor.pipeline import Diagnosis, diagnose, load_trace
from perfdoctor.text import count

torch = pytest.importorskip("torch")
# Each test compares a reading with the program's own timer, both from one run. With two test
# workers on two cores, the other worker's load now and then stretches a run's steps or the
# gaps between them (preempted 5-14 ms gaps between ~1 ms steps read as pauses): one of 68
# failed in each of three full suites, a different one each time, every one passing alone.
# A failed assertion runs the test once more, a new run of the program; a wrong reading
# fails both (pytest reports the rerun as R).
pytestmark = pytest.mark.flaky(reruns=1, only_rerun=["AssertionError"])
FETCH = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def _run(tmp_path: Path, program: str, *args: str, step: str | None = None, env: dict | None = None,
         launcher: tuple[str, ...] = ()) -> tuple[dict, dict, dict]:
    """(light_pass of the manifest, the chosen step's series, the program's RESULT); ``step``:
    perfdoctor's --step; ``env``: the program's environment's additions; ``launcher``: the
    command line before the program (``accelerate launch ...``), after ``--``."""
    r = run_cli("run", "--collect", "nvml", *(("--step", step) if step else ()), "--out", tmp_path, *(("--", *launcher) if launcher else ()),
                REAL / program, *args, timeout=240, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    (bundle,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    light = json.loads((bundle / "manifest.json").read_text())["light_pass"]
    series = json.loads((bundle / "raw" / "light.json").read_text())["series"][light["step_name"]]
    return light, series, program_result(r.stdout)


def _step_ms(series: dict) -> np.ndarray:
    # on CPU (host clock) each step's time is its host start to the end of its iteration
    return (np.array(series["gpu_end_ns"]) - np.array(series["host_start_ns"])) / 1e6


def _traced(tmp_path: Path, program: str, *args: str):
    """(the steps analyze finds in a plain torch.profiler trace of the program run whole, each
    one's host time in ms, the program's RESULT in that run)."""
    traced = trace_program(tmp_path / "trace.json", program, *args)
    steps = find_steps(load_trace(tmp_path / "trace.json"))
    return steps, (steps.table["host_end_ns"] - steps.table["host_start_ns"]).to_numpy() / 1e6, traced


def test_compiled_decode_steps_per_token_not_per_prefill(tmp_path: Path) -> None:
    tokens = 12
    light, series, result = _run(
        tmp_path, "compiled_decode.py", "--layers", "2", "--dim", "64", "--heads", "4", "--kv-heads", "2",
        "--vocab", "256", "--tokens", str(tokens), "--generations", "1", "--device", "cpu",
    )
    # a compile warm-up generation and one timed one, tokens - 1 decode calls each (the
    # first token comes from the eager prefill, whose Transformer.forward ran twice)
    assert light["step_name"] == "torch.compile: decode_one_token"
    assert light["steps_seen"] == 2 * (tokens - 1)
    # the timed generation's decode calls, each up to the next call (the last: its own end),
    # are the program's timed decode loop
    ms = _step_ms(series)[-(tokens - 1):]
    assert result["tokens"] == tokens - 1
    assert ms.mean() == pytest.approx(result["ms_per_token"], rel=0.05)


def test_hf_generate_with_the_docs_compile_recipe_steps_per_compiled_forward(tmp_path: Path) -> None:
    tokens, generations = 32, 2
    light, series, result = _run(
        tmp_path, "hf_generate.py", "--device", "cpu", "--layers", "2", "--dim", "64", "--heads", "4", "--kv-heads", "2",
        "--ffn-dim", "128", "--vocab", "256", "--tokens", str(tokens), "--generations", str(generations), "--compile",
    )
    # model.forward = torch.compile(model.forward, mode="reduce-overhead"): a compiled bound
    # method, called once per token (the prefill too) in the warm-up and each timed generate
    assert light["step_name"] == "torch.compile: LlamaForCausalLM.forward"
    assert light["steps_seen"] == (generations + 1) * tokens
    # the last generate's forwards, each up to the next (the last: its own end), against its
    # own time: inside it, all of it quiet but generate's setup before the first forward
    # (0.95 here alone); on this box under the suite's load a preempted gap between two
    # forwards reads as a pause and ends that iteration at its call (0.65 seen), so the
    # bound below is loose — the step's name and count above are what this test is for
    ms = _step_ms(series)[-tokens:]
    own = result["ms_per_token_each"][-1] * tokens
    assert 0.5 * own < ms.sum() <= own


def test_hf_generate_compiling_its_own_decode_steps_per_forward_prefill_included(tmp_path: Path) -> None:
    tokens, generations = 16, 2
    light, series, result = _run(
        tmp_path, "hf_generate.py", "--device", "cpu", "--layers", "2", "--dim", "64", "--heads", "4", "--kv-heads", "2",
        "--ffn-dim", "128", "--vocab", "256", "--tokens", str(tokens), "--generations", str(generations),
        "--auto-compile", "--compile-backend", "eager",
    )
    # transformers 5's generate compiles the model's __call__ (at that moment perfdoctor's
    # wrapper) for its decode steps and runs each prefill eager: one step per forward,
    # named after the model as its module calls are, tokens - 1 compiled and 1 eager per
    # generate (before: the wrapper's name, and the prefills fell between steps as pauses)
    assert light["step_name"] == "torch.compile: LlamaForCausalLM.forward"
    assert light["steps_seen"] == (generations + 1) * tokens
    assert f"with its {generations + 1} eager calls (a prefill" in light["how"]
    assert result["tokens"] == generations * tokens
    # the eager calls, as the light pass timed them, are each generate's first step
    (bundle,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    eager = json.loads((bundle / "raw" / "light.json").read_text())["modules"]["0"]["LlamaForCausalLM.forward"]
    at = [series["host_start_ns"].index(h) for h in eager["host_start_ns"]]
    assert at == [k * tokens for k in range(generations + 1)]


def test_hf_assisted_generation_steps_per_target_forward_not_per_forward_of_either_model(tmp_path: Path) -> None:
    tokens, generations = 32, 2
    light, series, result = _run(
        tmp_path, "hf_assisted.py", "--device", "cpu", "--layers", "4", "--draft-layers", "1", "--dim", "64", "--heads", "4",
        "--kv-heads", "2", "--ffn-dim", "128", "--vocab", "256", "--tokens", str(tokens), "--generations", str(generations),
        "--draft-tokens", "4", "--confidence", "0",
    )
    # target and draft are both LlamaForCausalLM at depth 0: the step is the target's
    # forward (the second instance called: the draft drafts first), one per iteration of
    # generate's assisted loop, in the warm-up generate and the timed ones (before: one
    # step per forward of either model, 96 for 21 iterations, p50 a draft's forward)
    assert light["step_name"] == "LlamaForCausalLM#2.forward" and light["module"]["instance"] == 2
    assert light["steps_seen"] == result["warmup_forwards"]["target"] + result["target_forwards"]
    assert result["draft_forwards"] > result["target_forwards"]
    # the timed generates' iterations, each from one target forward to the next (the last:
    # its own end), against their own time: all of it but each generate's setup and the
    # draft's first drafts before its first target forward (0.93 here alone); as for
    # hf_generate.py above, a preempted gap on this box reads as a pause and ends that
    # iteration at its call, so the lower bound is loose
    ms = _step_ms(series)[-result["target_forwards"]:]
    own = sum(result["ms_each"])
    assert 0.5 * own < ms.sum() <= own


def test_train_loop_steps_per_iteration_not_per_batch_fetch(tmp_path: Path) -> None:
    iters, warmup = 6, 2
    light, series, result = _run(
        tmp_path, "train_loop.py", "--device", "cpu", "--model", "resnet18", "--batch", "4", "--img-size", "64",
        "--iters", str(iters), "--warmup", str(warmup),
    )
    # the data loader's __next__ marks the iteration: 9 fetches (the last raises
    # StopIteration) for 8 iterations, each from one fetch's start to the next
    assert light["step_name"] == FETCH
    assert light["steps_seen"] == iters + warmup
    ms = _step_ms(series)
    assert ms[-iters:].mean() == pytest.approx(result["ms_per_iter"], rel=0.05)
    # far longer than the fetch the old choice timed (1.4 ms of ~90 ms on this box)
    assert np.median(ms) > 10 * 1.4


def test_work_in_spawned_processes_is_named_not_missed_in_silence(tmp_path: Path) -> None:
    # the DDP tutorial's mp.spawn(demo_basic, nprocs=2): the process perfdoctor starts trains
    # nothing. Before: "no step seen: no record_function/NVTX range, ... repeated" and, from
    # analyze, 33 rules not evaluated with no word of where the work went
    r = run_cli("run", "--collect", "nvml", "--out", tmp_path, REAL / "spawn_ddp.py", "--device", "cpu", "--world-size", "2",
                "--steps", "12", "--warmup", "2", timeout=240, env={"OMP_NUM_THREADS": "1"})  # the light pass alone: it says it
    assert r.returncode == 0, r.stderr[-2000:]
    assert program_result(r.stdout)["world_size"] == 2  # the ranks trained
    (bundle,) = tmp_path.iterdir()
    light = json.loads((bundle / "manifest.json").read_text())["light_pass"]
    assert light["step_name"] is None
    assert light["reason"].startswith("no step seen: the program ran work in child processes (__main__.demo_basic (spawn) x2)")
    assert "torchrun" in light["reason"]
    a = run_cli("analyze", bundle, timeout=120)
    assert a.returncode == 0, a.stderr[-2000:]
    assert "__main__.demo_basic (spawn) x2" in a.stderr and "their work is in no pass of this bundle" in a.stderr


def test_compiled_train_loop_steps_per_iteration_not_per_compiled_call(tmp_path: Path) -> None:
    iters, warmup = 6, 2
    light, series, result = _run(
        tmp_path, "train_loop.py", "--device", "cpu", "--model", "resnet18", "--batch", "4", "--img-size", "64",
        "--iters", str(iters), "--warmup", str(warmup), "--compile", "default", "--compile-backend", "eager",
    )
    # model = torch.compile(model): its calls are a compiled function's, one per batch, and the
    # loader's fetch still marks the iteration, which also holds the backward and the optimizer
    assert light["step_name"] == FETCH, (light["step_name"], light["how"])
    assert light["steps_seen"] == iters + warmup
    ms = _step_ms(series)
    assert ms[-iters:].mean() == pytest.approx(result["ms_per_iter"], rel=0.05)


def test_train_loop_with_gradient_accumulation_steps_per_optimizer_step(tmp_path: Path) -> None:
    iters, warmup, accum = 4, 1, 3
    light, series, result = _run(
        tmp_path, "train_loop.py", "--device", "cpu", "--model", "resnet18", "--batch", "2", "--img-size", "64",
        "--iters", str(iters), "--warmup", str(warmup), "--accum-steps", str(accum),
    )
    # one optimizer step per 3 fetches: the iteration is the optimizer's step over its group,
    # not the batch, whose every third one carries the optimizer and would read as uneven
    # steps; the last runs to the fetch that ended the loader's pass (StopIteration): the
    # program's 5 optimizer steps
    assert light["step_name"] == "Optimizer.step#SGD.step"
    assert "(gradient accumulation, or several loaders read per step)" in light["how"]
    assert light["steps_seen"] == iters + warmup
    # the program times from the batch after the warm-up's optimizer step to its last one:
    # the light pass's 4 groups after the warm-up's
    ms = _step_ms(series)
    assert ms[warmup : warmup + iters].mean() == pytest.approx(result["ms_per_iter"], rel=0.05)


def test_graph_infer_cpu_smoke_mode_runs_the_same_loop_without_the_graph(tmp_path: Path) -> None:
    # CUDA graphs need CUDA: on the CPU the program runs its loop with an eager forward
    # where the replay would be, so its arguments and output are tested here (the replay
    # step itself: tests/record/test_run_gpu.py on the H200). Its step is then the forward.
    iters, warmup = 4, 2
    light, series, result = _run(
        tmp_path, "graph_infer.py", "--device", "cpu", "--model", "resnet18", "--batch", "2", "--img-size", "64",
        "--iters", str(iters), "--warmup", str(warmup),
    )
    assert (result["program"], result["graph"], result["iters"]) == ("graph_infer", False, iters)
    assert light["step_name"] == "ResNet.forward"
    assert light["steps_seen"] == iters + warmup


@pytest.mark.parametrize(("max_iters", "sanity"), [(None, 0), (5, 0), (None, 2)])
def test_train_and_validate_each_epoch_steps_per_training_iteration_only(tmp_path: Path, max_iters: int | None, sanity: int) -> None:
    # PyTorch's ImageNet example: for epoch: train(); validate(). Both loaders' fetches carry
    # one range name; the evaluation batches and the time between epochs are not training
    # steps. With --max-iters the epoch ends by `break` (the loader never raises StopIteration).
    # With --sanity-val, Lightning's sanity check: 2 validation batches before training, the
    # loop stopped without exhausting its loader, so they share a pass with the first epoch's
    # training batches: the how said "(18x)" over 16 steps (Lightning's fit: 71x over 64).
    epochs, batches, val = 2, 8, 6
    extra = (("--max-iters", str(max_iters)) if max_iters else ()) + (("--sanity-val", str(sanity)) if sanity else ())
    light, series, result = _run(
        tmp_path, "train_eval.py", "--epochs", str(epochs), "--batches", str(batches), "--val-batches", str(val),
        "--width", "256", *extra,
    )
    per_epoch = max_iters or batches
    assert result["iters"] == epochs * per_epoch
    assert light["step_name"] == FETCH
    assert light["steps_seen"] == epochs * per_epoch
    assert f"({epochs * per_epoch}x)" in light["how"] and "gradient accumulation" not in light["how"]
    # every training iteration, each from its fetch to the next (the last of an epoch: to
    # its loader's end, or to the fetch `break` left), is the program's batch time
    assert _step_ms(series).mean() == pytest.approx(result["ms_per_iter"], rel=0.05)


@pytest.mark.parametrize(("max_iters", "step"), [(9, None), (None, None), (9, "Optimizer.step#SGD.step")])
def test_gradient_accumulation_with_validation_each_epoch_steps_per_optimizer_step(
    tmp_path: Path, max_iters: int | None, step: str | None
) -> None:
    # train(); validate() each epoch, the optimizer every 3rd batch: the iteration is the
    # optimizer's step over its group, chosen or named by --step. Each epoch's last runs to
    # the fetch that ended its training pass (`break`'s, or the one that raised StopIteration)
    # and never through the validation, and its first begins at the epoch's first batch
    # (before this branch: from one step to the next, the epoch's last cut at its pass's end,
    # holding no batch, and the epoch's first group in no step)
    epochs, batches, val, accum = 2, 12, 4, 3
    extra = ("--max-iters", str(max_iters)) if max_iters else ()
    light, series, result = _run(
        tmp_path, "train_eval.py", "--epochs", str(epochs), "--batches", str(batches), "--val-batches", str(val),
        "--width", "256", "--accum-steps", str(accum), *extra, step=step,
    )
    per_epoch = (max_iters or batches) // accum
    assert result["optimizer_steps"] == epochs * per_epoch
    assert light["step_name"] == "Optimizer.step#SGD.step"
    assert light["steps_seen"] == result["optimizer_steps"]
    # each step holds its group's fetches, no validation batch (before: the epoch's last none)
    (bundle,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    raw = json.loads((bundle / "raw" / "light.json").read_text())
    fetches = np.sort(raw["series"][FETCH]["host_start_ns"] + raw["exhausted"][FETCH]["host_start_ns"])
    held = np.searchsorted(fetches, series["gpu_end_ns"]) - np.searchsorted(fetches, series["host_start_ns"])
    assert held.tolist() == [accum] * (per_epoch * epochs)
    # each one's batches are the program's own: their batch times summed, and its step times
    # (from one step's end to the next, each epoch's first left out) on average
    ms = _step_ms(series)
    own = np.array(result["ms_each_iter"]).reshape(-1, accum).sum(axis=1)
    assert ms.sum() == pytest.approx(own.sum(), rel=0.05)
    later = np.delete(ms, np.arange(0, ms.size, per_epoch))
    assert later.mean() == pytest.approx(result["ms_per_optimizer_step"], rel=0.05)


def test_a_data_loader_fetch_named_by_step_is_timed_as_its_iteration_in_run_and_analyze(tmp_path: Path) -> None:
    # --step names the fetch: run's light pass timed the fetch's own range (a mean 0.56 ms
    # against the program's 108.6 ms batches on a loaded box), 32 steps: every fetch of both
    # loaders, the 4 that raised StopIteration too; analyze timed the loop iteration. Both
    # now read the iteration, the training batches only, as when the step is chosen.
    epochs, batches, val = 2, 8, 6
    args = ("--epochs", str(epochs), "--batches", str(batches), "--val-batches", str(val), "--width", "256")
    light, series, result = _run(tmp_path / "run", "train_eval.py", *args, step=FETCH)
    assert light["step_name"] == FETCH and light["how"].startswith("--step, timed as the loop iteration")
    assert light["steps_seen"] == result["iters"] == epochs * batches
    assert _step_ms(series).mean() == pytest.approx(result["ms_per_iter"], rel=0.05)
    # the same program traced whole, read by analyze with the same --step
    traced = trace_program(tmp_path / "trace.json", "train_eval.py", *args)
    steps = find_steps(load_trace(tmp_path / "trace.json"), FETCH)
    assert steps.count == traced["iters"] == light["steps_seen"]
    ms = (steps.table["host_end_ns"] - steps.table["host_start_ns"]).to_numpy() / 1e6
    assert ms.mean() == pytest.approx(traced["ms_per_iter"], rel=0.05)


@pytest.mark.parametrize("pool", [False, True])
def test_threaded_server_steps_are_the_requests_service_not_the_workers_waits(tmp_path: Path, pool: bool) -> None:
    # a request queue, a worker thread (or a one-worker ThreadPoolExecutor) running the
    # model's forward per request, requests arriving at random from the main thread. The
    # step is the forward, timed as the loop iteration: before, each iteration ran to the
    # next request's forward, through the time the worker sat blocked on its queue (a p50
    # of 3.7 ms for requests the program served in 0.93 ms); a wait for another thread ends it
    args = ("--device", "cpu", "--threads", "1", "--requests", "40", "--width", "512", "--rate", "200", *(("--pool",) if pool else ()))
    r = run_cli("run", "--collect", "torch", "--out", tmp_path, REAL / "threaded_server.py", *args, timeout=240)
    assert r.returncode == 0, r.stderr[-2000:]
    (bundle,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    light = json.loads((bundle / "manifest.json").read_text())["light_pass"]
    raw = json.loads((bundle / "raw" / "light.json").read_text())
    series, result = raw["series"][light["step_name"]], program_result(r.stdout)
    assert light["step_name"] == "Sequential.forward" and light["step_thread"] == "worker"
    assert light["steps_seen"] == result["requests"]
    # the requests the program timed, each from where the worker resumed (it took the
    # request) to where it waited again (or the next request, already queued, began),
    # against its own timer
    ms = _step_ms(series)[result["warmup"]:]
    own = np.array(result["ms_each"][result["warmup"]:])
    assert ms.mean() == pytest.approx(own.mean(), rel=0.05)
    # and the waits, which the program's own timer leaves out, are pauses of steps_per_s
    waited = np.array(series["waited_ns"])
    assert (waited > 0).sum() > result["requests"] // 2
    # the traced pass ran the worker's steps too (all threads traced), its steps cut at the
    # same waits: no step holds one, so none holds the time between requests
    profile = load_trace(bundle)
    steps = find_steps(profile)
    assert steps.name == "Sequential.forward" and steps.count == result["requests"] - 1  # the last: no next start
    t = steps.table
    waits = profile.ranges[(profile.ranges["name"] == "perfdoctor.wait") & profile.ranges["tid"].isin(t["tid"])]  # the worker's
    assert len(waits) >= (waited > 0).sum() // 2
    inside = [((waits["start_ns"] >= a) & (waits["start_ns"] <= b)).sum() for a, b in zip(t["host_start_ns"], t["host_end_ns"])]
    assert sum(inside) == 0
    traced = (t["host_end_ns"] - t["host_start_ns"]).to_numpy() / 1e6
    assert np.median(traced) < 3 * np.median(own)  # the tracer slows a step, a wait would be ~5 ms


@pytest.mark.parametrize("executor", [False, True])
def test_async_server_steps_are_the_requests_service_not_the_event_loops_idle(tmp_path: Path, executor: bool) -> None:
    # an asyncio.Queue of requests, one worker coroutine awaiting queue.get() and running
    # the model's forward on the loop's thread (or in the loop's default executor), requests
    # arriving as tasks at random. Before, nothing saw the loop sleep in its selector: each
    # step ran to the next request's forward (a p50 of 5.1 ms for requests the program served
    # in 1.1 ms); now the loop's select ends it, and each return to the loop after the call
    # (the other coroutines' work: the arrival, the reply) is out of the step
    args = ("--device", "cpu", "--threads", "1", "--requests", "40", "--width", "512", "--rate", "200",
            *(("--executor",) if executor else ()))
    r = run_cli("run", "--collect", "torch", "--out", tmp_path, REAL / "async_server.py", *args, timeout=240)
    assert r.returncode == 0, r.stderr[-2000:]
    (bundle,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    light = json.loads((bundle / "manifest.json").read_text())["light_pass"]
    series, result = json.loads((bundle / "raw" / "light.json").read_text())["series"][light["step_name"]], program_result(r.stdout)
    assert light["step_name"] == "Sequential.forward" and light["steps_seen"] == result["requests"]
    assert light["step_thread"] == ("worker" if executor else "main")
    # the requests the program timed, against its own timer (the median: on this shared box
    # a request now and then takes 10x, in both timers). A step also holds the worker's
    # resumption (the loop's last callbacks before it) or, in the executor, its hand-back
    # (the future's result set, the loop woken: the GIL taken back from the loop's thread):
    # 0.03-0.04 ms of 0.9-1.1 ms alone, 0.07-0.10 ms of 0.5-0.8 ms with another test beside
    # it on the 2 cores (15 % once): up to 0.1 ms a request beyond 15 % is that
    ms = _step_ms(series)[result["warmup"]:]
    own = np.array(result["ms_each"][result["warmup"]:])
    assert np.median(ms) == pytest.approx(np.median(own), rel=0.15, abs=0.1)
    # The mean holds every request's hand-back too. With the executor it waits for the GIL from
    # the loop's thread, and on the loaded 2-core CI box (2026-12-04, two of four runs) that came to
    # 0.28-0.30 ms a request in perfdoctor's step alone (means 1.70 / 1.61 against the program's
    # 1.42 / 1.33 ms, the medians within 15 %): up to 0.35 ms a request beyond 15 % is that.
    # An event loop's idle in the step (the bug this test was written for) is ~4 ms a request.
    assert ms.mean() == pytest.approx(own.mean(), rel=0.15, abs=0.35 if executor else 0.1)
    assert (np.array(series["waited_ns"]) > 0).sum() > result["requests"] // 2
    # the rate leaves the waits out and says so
    from perfdoctor.pipeline import diagnose

    rate = diagnose(bundle).analysis.metrics["steps_per_s"]
    assert rate.source == "light" and "wait(s) for another thread, for I/O or in time.sleep left out" in rate.note
    # the traced pass's steps (its window's: every request when they ran off the main
    # thread) are cut at the same waits, per thread (the default executor may start a second
    # thread when the tracer slows the first: the last call of each has no next start)
    profile = load_trace(bundle)
    steps = find_steps(profile)
    forwards = profile.ranges.loc[profile.ranges["name"] == "Sequential.forward", "tid"]
    assert steps.name == "Sequential.forward" and steps.count == len(forwards) - forwards.nunique()
    assert len(forwards) == (result["requests"] if executor else 10)
    traced = (steps.table["host_end_ns"] - steps.table["host_start_ns"]).to_numpy() / 1e6
    assert np.median(traced) < 3 * np.median(own)  # the tracer slows a step, a wait would be ~5 ms


@pytest.mark.parametrize("max_iters", [None, 4])
def test_one_optimizer_step_per_epoch_is_the_epochs_batches(tmp_path: Path, max_iters: int | None) -> None:
    # train(); validate() each epoch with the accumulation as long as the epoch: one optimizer
    # step per epoch. Each step's iteration is its epoch's batches; before, it ran from one
    # epoch's step to the next, through the validation and the next epoch's batches, and the
    # last was its optimizer step alone (a trace of 4: 17.9, 21.2, 16.0 and 0.26 ms for
    # epochs the program ran in ~14 ms); a trace also said "one per 7 DataLoader batches"
    epochs, batches, val = 4, 4, 2
    per_epoch = max_iters or batches
    args = ("--epochs", str(epochs), "--batches", str(batches), "--val-batches", str(val), "--width", "512",
            "--accum-steps", str(per_epoch), *(("--max-iters", str(max_iters)) if max_iters else ()))
    light, series, result = _run(tmp_path / "run", "train_eval.py", *args)
    assert result["optimizer_steps"] == epochs
    assert light["step_name"] == "Optimizer.step#SGD.step" and f"one per {per_epoch} DataLoader batches" in light["how"]
    assert light["steps_seen"] == epochs
    own = np.array(result["ms_each_iter"]).reshape(epochs, per_epoch).sum(axis=1)
    # each epoch after the first (the first also holds the start-up) against its own batches
    assert _step_ms(series)[1:] == pytest.approx(own[1:], rel=0.1)
    assert _step_ms(series)[1:].sum() == pytest.approx(own[1:].sum(), rel=0.05)
    # the same program traced whole, read by analyze
    traced = trace_program(tmp_path / "trace.json", "train_eval.py", *args)
    steps = find_steps(load_trace(tmp_path / "trace.json"))
    assert steps.name == "Optimizer.step#SGD.step" and steps.count == traced["optimizer_steps"]
    assert f"one per {per_epoch} DataLoader batches" in steps.how
    ms = (steps.table["host_end_ns"] - steps.table["host_start_ns"] + 1).to_numpy() / 1e6
    own = np.array(traced["ms_each_iter"]).reshape(epochs, per_epoch).sum(axis=1)
    assert ms[1:].sum() == pytest.approx(own[1:].sum(), rel=0.05)


@pytest.mark.parametrize("max_batches", [None, 4])
def test_an_evaluation_loop_ended_by_break_steps_on_its_batches_in_run_and_analyze(tmp_path: Path, max_batches: int | None) -> None:
    # eval_loop.py's passes, each to its loader's end or ended by `if i == n: break` at the
    # top of the loop: that fetch returned a batch the loop never used. Before, run's light
    # pass counted it as a step (17 for 15 batches, the fetch's iteration running into the
    # next pass) while analyze did not: the light pass now sees the loop's work (its model's
    # calls) as a trace sees its ops, and both keep the iterations holding work only
    passes, batches = 3, 6
    args = ("--passes", str(passes), "--batches", str(batches), "--width", "256", *(("--max-batches", str(max_batches)) if max_batches else ()))
    light, series, result = _run(tmp_path / "run", "eval_loop.py", *args)
    assert result["batches"] == passes * (max_batches or batches)
    assert light["step_name"] == FETCH and f"({result['batches']}x)" in light["how"]
    assert light["steps_seen"] == result["batches"]
    assert _step_ms(series).mean() == pytest.approx(result["ms_per_batch"], rel=0.05)
    traced = trace_program(tmp_path / "trace.json", "eval_loop.py", *args)
    steps = find_steps(load_trace(tmp_path / "trace.json"))
    assert steps.name == FETCH and steps.count == traced["batches"] == light["steps_seen"]


def test_the_light_pass_leaves_no_full_collection_in_a_loop_that_runs_none_alone(tmp_path: Path) -> None:
    # eval_loop.py alone collects nothing in its 192 batches: its loop allocates no lasting
    # objects, so torch's import leaves its pending full collection unpaid to the end. Under
    # the light pass that debt fell due in a batch (a 60-100 ms full collection: the
    # program's own mean 0.77 ms against 0.42 alone, here and on the H200); the bootstrap
    # now collects before the program starts
    light, series, result = _run(tmp_path, "eval_loop.py", "--passes", "3", "--batches", "64", "--width", "256")
    assert light["steps_seen"] == result["batches"] == 192
    (bundle,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    collected = json.loads((bundle / "raw" / "light.json").read_text()).get("full_gcs") or {"start_ns": []}
    first, last = series["host_start_ns"][0], series["gpu_end_ns"][-1]
    assert not [t for t in collected["start_ns"] if first <= t <= last]


def test_an_evaluation_loop_ended_by_break_steps_on_its_batches_with_the_fetch_named_by_step(tmp_path: Path) -> None:
    # the same loop, its fetch named by --step: the light pass timed no module call then, so
    # nothing told the fetch `break` left from the others, and it counted as a step (14 for
    # 12 batches: each pass's break fetch but the last, which has no next fetch)
    passes, batches, max_batches = 3, 6, 4
    args = ("--passes", str(passes), "--batches", str(batches), "--width", "256", "--max-batches", str(max_batches))
    light, series, result = _run(tmp_path, "eval_loop.py", *args, step=FETCH)
    assert result["batches"] == passes * max_batches
    assert light["step_name"] == FETCH and light["how"].startswith("--step, timed as the loop iteration")
    assert light["steps_seen"] == result["batches"]
    assert _step_ms(series).mean() == pytest.approx(result["ms_per_batch"], rel=0.05)


@pytest.mark.parametrize("sanity", [0, 2])
def test_the_progress_count_of_a_fetch_named_by_step_is_the_training_iterations(tmp_path: Path, sanity: int) -> None:
    # --step names the fetch of a loop that validates each epoch (and, with --sanity-val, 2
    # validation batches before training): the passes' live count ("torch pass: 12 of 16
    # steps") counted every fetch's end, the validation's too: "28 of 16 steps". A fetch now
    # ticks when its iteration's optimizer mark comes, as the report counts training
    # iterations; the traced pass knows from the start that the run trains, the light pass
    # from its first mark (so it still counts a sanity check's batches before it)
    epochs, batches, val = 2, 8, 6
    args = ("--epochs", str(epochs), "--batches", str(batches), "--val-batches", str(val), "--width", "256",
            *(("--sanity-val", str(sanity)) if sanity else ()))
    r = run_cli("run", "--collect", "torch", "--step", FETCH, "--out", tmp_path, REAL / "train_eval.py", *args, timeout=240)
    assert r.returncode == 0, r.stderr[-2000:]
    (bundle,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    manifest = json.loads((bundle / "manifest.json").read_text())
    ticked = {p["name"]: p["steps"] for p in manifest["passes"]}
    result = program_result(r.stdout)
    assert manifest["light_pass"]["steps_seen"] == result["iters"] == epochs * batches
    assert ticked["torch"] == result["iters"]
    assert ticked["light"] == result["iters"] + sanity
    assert f"torch pass: {result['iters']} steps" in r.stderr


def test_a_window_of_a_training_loops_fetches_holds_training_iterations_not_the_validation(tmp_path: Path) -> None:
    # mmengine's Runner (0.10.7, CPU probe 2026-12-06): the light pass put the window at the
    # epoch's last training batch, and the torch pass closed it after 10 fetches of any kind:
    # 1 training iteration and 9 validation batches, described as the step. The window now
    # counts the fetches whose iteration held an optimizer mark. Here: the window opens at
    # the first epoch's last batch (fetch 7), then its loader's end and 6 validation batches.
    epochs, batches, val, steps = 2, 8, 6, 5
    args = ("--epochs", str(epochs), "--batches", str(batches), "--val-batches", str(val), "--width", "256")
    r = run_cli("run", "--collect", "torch", "--no-light", "--step", FETCH, "--warmup", str(batches - 1), "--steps", str(steps),
                "--out", tmp_path, REAL / "train_eval.py", *args, timeout=240)
    assert r.returncode == 0, r.stderr[-2000:]
    (bundle,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    doc = json.loads(gzip.decompress((bundle / "raw" / "torch-trace.json.gz").read_bytes()))
    names = [e.get("name", "") for e in doc["traceEvents"] if e.get("ph") == "X"]
    fetches = sum(n == FETCH for n in names)
    optimizer_steps = sum(n.startswith("Optimizer.step#") for n in names)
    # the window's 5 fetches end 4 training iterations: 7, then the second epoch's first three
    assert optimizer_steps == steps - 1, (optimizer_steps, fetches)
    assert fetches == steps + 1 + val + 1  # the first loader's end and the validation's fetches in between
    d = diagnose(bundle, warnings=False)
    assert d.analysis.steps.count == steps - 1


# Issue 29, "programs named nowhere": shapes perfdoctor was not written against. Each test
# checks the count exactly and the time over the very steps the program timed.


def test_spec_decode_compiled_steps_per_verifying_call_not_per_draft_token(tmp_path: Path) -> None:
    # gpt-fast's speculative decode with --compile: decode_one_token (the draft's k tokens)
    # and model_forward (the target verifying them in one call) are both compiled. Before:
    # the most frequent compiled function, the draft's token, was the step (104 steps of
    # 0.27 ms for 26 iterations of 2.2 ms). model_forward also runs once more on the draft
    # when every draft token was accepted (its cache fill): that call is the same iteration's.
    light, series, result = _run(
        tmp_path, "spec_decode.py", "--layers", "4", "--draft-layers", "1", "--dim", "64", "--heads", "4", "--kv-heads", "2",
        "--vocab", "256", "--tokens", "32", "--generations", "2", "--speculate-k", "4", "--device", "cpu",
        "--compile", "--compile-backend", "eager",
    )
    assert light["step_name"] == "torch.compile: model_forward"
    assert result["all_accepted"] > 0  # the fill calls are there to be told apart
    assert light["steps_seen"] == result["warmup_iters"] + result["iters"]
    # each iteration from one verify to the next holds the next one's drafts: the same time
    # per iteration as the program's (drafts, then verify); the last of a generation ends at
    # its own end (the next generation's prefills are a pause). 10 %: the iteration also
    # holds the loop's host work between the program's timed calls, which a loaded 2-core
    # box stretches (9 % at load 6, 2026-12-03; within 5 % alone); the draft's token as the
    # step would read a quarter of it
    ms = _step_ms(series)[-result["iters"]:]
    assert ms.mean() == pytest.approx(result["ms_per_step"], rel=0.10)


def test_spec_decode_eager_steps_per_target_forward(tmp_path: Path) -> None:
    # eager: two Transformer instances at depth 0, the target's forward (prefill, then one
    # verify per iteration) encloses the draft's; the prefill is a step too (it makes the
    # generation's first token), so one step per generation more than the program's iterations
    light, series, result = _run(
        tmp_path, "spec_decode.py", "--layers", "4", "--draft-layers", "1", "--dim", "64", "--heads", "4", "--kv-heads", "2",
        "--vocab", "256", "--tokens", "32", "--generations", "2", "--speculate-k", "4", "--device", "cpu",
    )
    assert light["step_name"] == "Transformer#1.forward"
    assert light["steps_seen"] == result["warmup_iters"] + result["iters"] + 1 + 2


def test_diffusion_sampling_steps_per_denoising_step(tmp_path: Path) -> None:
    # a diffusers-style loop: one UNet call per timestep (classifier-free guidance as one
    # doubled batch), the scheduler's math between calls, a text encoder before and a VAE
    # decode after each pipeline call (other modules at depth 0, called less often)
    steps = 8
    light, series, result = _run(tmp_path, "diffusion_sample.py", "--device", "cpu", "--latent", "16", "--channels", "32",
                                  "--steps", str(steps), "--images", "2")
    assert light["step_name"] == "UNet2DConditionModel.forward" and "calls_per_step" not in light["module"]
    assert light["steps_seen"] == result["warmup_steps"] + result["steps"]
    # each step from one UNet call to the next, against the program's own: all but each
    # pipeline call's last, which runs to the next call's first step unless the VAE decode
    # and text encoding between them read as a pause; on this CPU config they take about
    # one step, so that is a coin toss (55.0 against 51.4 ms once): left out here. Step by
    # step, not summed: on this loaded box one preemption in the untimed sliver between two
    # steps moves a sum (steps of 2 ms to 1.2 s in one run). Before the program's timer held
    # the progress bar's update (tqdm's it/s does), most steps read 5-20 ms longer than its own
    ms, own = _step_ms(series)[-result["steps"]:], np.array(result["ms_each"])
    inner = np.arange(result["steps"]) % steps != steps - 1
    assert np.isclose(ms[inner], own[inner], rtol=0.05, atol=0.5).mean() >= 0.75


def test_diffusion_sampling_with_two_unet_calls_per_step_steps_per_denoising_step_in_run_and_analyze(tmp_path: Path) -> None:
    # --cfg separate: classifier-free guidance as two UNet calls per denoising step,
    # unconditional then conditional, back to back, then the guidance mix and the scheduler's
    # step. Before: one step per UNet call, 2 per denoising step at half its time (p50 2.23
    # ms against the program's 4.37 ms per step once)
    steps = 8
    args = ("--device", "cpu", "--latent", "16", "--channels", "32", "--steps", str(steps), "--images", "2", "--cfg", "separate")
    r = run_cli("run", "--collect", "torch", "--out", tmp_path, REAL / "diffusion_sample.py", *args, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    (bundle,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    light = json.loads((bundle / "manifest.json").read_text())["light_pass"]
    series, result = json.loads((bundle / "raw" / "light.json").read_text())["series"][light["step_name"]], program_result(r.stdout)
    assert result["unet_calls_per_step"] == 2
    assert light["step_name"] == "UNet2DConditionModel.forward" and light["module"]["calls_per_step"] == 2
    assert light["steps_seen"] == result["warmup_steps"] + result["steps"]
    assert light["how"].startswith("module: UNet2DConditionModel, 2 calls per step")
    # step by step against the program's own, as for the batched loop above
    ms, own = _step_ms(series)[-result["steps"]:], np.array(result["ms_each"])
    inner = np.arange(result["steps"]) % steps != steps - 1
    assert np.isclose(ms[inner], own[inner], rtol=0.05, atol=0.5).mean() >= 0.75
    # analyze on the bundle's trace: the same step, each holding both UNet calls (13
    # convolutions each; a pipeline's last step also the image decoder's)
    profile = load_trace(bundle)
    found = find_steps(profile)
    assert found.name == light["step_name"] and "2 calls per step" in found.how and found.count >= 5
    conv = np.sort(profile.ops.loc[profile.ops["name"] == "aten::conv2d", "start_ns"].to_numpy(np.int64))
    t = found.table
    held = np.searchsorted(conv, t["host_end_ns"].to_numpy(np.int64), side="right") - np.searchsorted(conv, t["host_start_ns"].to_numpy(np.int64))
    assert np.median(held) == 2 * 13


@pytest.mark.parametrize("timer", ["benchmark", "timeit"])
def test_benchmark_timer_steps_per_run_of_the_statement(tmp_path: Path, timer: str) -> None:
    # torch.utils.benchmark.Timer(stmt="model(x)").blocked_autorange() and timeit.repeat: the
    # statement runs in the timer's own compiled loop; every forward is a step (the
    # autorange's calibration runs too, which the program counts with a pre-hook)
    light, series, result = _run(tmp_path, "bench_timer.py", "--device", "cpu", "--width", "256", "--timer", timer,
                                  "--min-run-time", "0.5", "--number", "20", "--repeat", "3")
    assert light["step_name"] == "Sequential.forward"
    assert light["steps_seen"] == result["forwards"]
    assert _step_ms(series)[-result["runs"]:].mean() == pytest.approx(result["ms_per_step"], rel=0.05)


def test_encoder_decoder_greedy_decode_steps_per_decoder_token(tmp_path: Path) -> None:
    # Whisper-style: the encoder once per utterance, then one decoder call per token (the
    # first with the prompt); the encoder between utterances is a pause, in no token's step
    light, series, result = _run(tmp_path, "encdec_greedy.py", "--device", "cpu", "--dim", "64", "--heads", "4",
                                  "--enc-layers", "2", "--dec-layers", "2", "--frames", "200", "--vocab", "512",
                                  "--tokens", "16", "--utterances", "2", env={"OMP_NUM_THREADS": "1"})
    assert light["step_name"] == "TextDecoder.forward"
    assert light["steps_seen"] == result["warmup_tokens"] + result["tokens"]
    assert _step_ms(series)[-result["tokens"]:].mean() == pytest.approx(result["ms_per_step"], rel=0.05)


def test_a_traced_token_step_before_the_next_utterances_encoder_ends_at_its_own_call(tmp_path: Path) -> None:
    # openai-whisper's beam search (CPU probe, 2026-12-06): analyze timed each decoder call to
    # the next, so the window's step before a new clip held that clip's encoder (659 ms among
    # 33 ms steps); the light pass ends a call followed by a pause at its own end, and so does
    # the trace now. The window (calls 12-21) crosses the second utterance's encoder (after 16).
    r = run_cli("run", "--collect", "torch", "--warmup", "12", "--steps", "10", "--out", tmp_path,
                REAL / "encdec_greedy.py", "--device", "cpu", "--dim", "64", "--heads", "4", "--enc-layers", "2", "--dec-layers", "2",
                "--frames", "200", "--vocab", "512", "--tokens", "16", "--utterances", "2", env={"OMP_NUM_THREADS": "1"}, timeout=240)
    assert r.returncode == 0, r.stderr[-2000:]
    (bundle,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    doc = json.loads(gzip.decompress((bundle / "raw" / "torch-trace.json.gz").read_bytes()))
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    calls = sorted((e["ts"], e["dur"]) for e in events if e["name"] == "TextDecoder.forward")
    convs = [e["ts"] for e in events if e["name"] == "aten::conv1d"]  # the encoder's front end: no decoder op is one
    encoder_after = [any(ts + dur <= c < nxt for c in convs) for (ts, dur), (nxt, _) in zip(calls, calls[1:])]
    assert len(calls) == 10 and sum(encoder_after) == 1
    want = [dur / 1e3 if enc else (nxt - ts) / 1e3 for (ts, dur), (nxt, _), enc in zip(calls, calls[1:], encoder_after)]
    t = diagnose(bundle, warnings=False).analysis.steps.table
    got = ((t["host_end_ns"] - t["host_start_ns"]).to_numpy() / 1e6).tolist()
    assert got == pytest.approx(want, abs=0.002)  # the trace's microseconds, to the nanosecond step that ends before the next


@pytest.mark.parametrize("extra", [(), ("--amp", "--checkpoint")])
def test_lightning_style_training_steps_per_training_batch(tmp_path: Path, extra: tuple[str, ...]) -> None:
    # training_step/validation_step methods called by a hand-written fit; validation every 4
    # batches over its own loader (not steps); autocast and gradient checkpointing (each
    # block's forward again in the backward) change nothing of the step
    light, series, result = _run(tmp_path, "lit_train.py", "--device", "cpu", "--width", "256", "--batch-size", "64",
                                  "--batches", "12", "--val-every", "4", "--val-batches", "3", "--log-every", "4", *extra)
    assert light["step_name"] == FETCH
    assert light["steps_seen"] == result["iters"]
    # the program leaves its first batch out; each iteration from its fetch to the next
    # (the last before a validation: to the validation loader's first fetch)
    assert _step_ms(series)[1:].mean() == pytest.approx(result["ms_per_step"], rel=0.05)


def test_bert_classification_with_host_tokenisation_steps_per_batch(tmp_path: Path) -> None:
    # a Python WordPiece tokenizer on each batch's strings, then the model: the iteration
    # from one forward to the next holds the next batch's tokenisation. The first timed
    # batch's tokenisation falls in the warm-up's last iteration, and on this loaded box a
    # tokenisation slowed past a median step reads as a pause (seen once: one step of 12
    # 1 ms short), so the time is held to 15 %; the count is exact
    light, series, result = _run(tmp_path, "bert_classify.py", "--device", "cpu", "--layers", "2", "--dim", "64",
                                  "--heads", "4", "--batch", "8", "--seq", "64", "--batches", "12")
    assert light["step_name"] == "BertForSequenceClassification.forward"
    assert light["steps_seen"] == result["warmup_batches"] + result["batches"]
    assert _step_ms(series)[-result["batches"]:].mean() == pytest.approx(result["ms_per_step"], rel=0.15)


def _steps_per_s(tmp_path: Path):
    """The analysis's steps_per_s of the one bundle under ``tmp_path`` (its light pass)."""
    from perfdoctor.analysis.metrics import analyze

    (bundle,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    return analyze(load_trace(bundle)).metrics["steps_per_s"]


@pytest.mark.parametrize("program", ["train_eval_epoch_step", "lit_train"])
def test_a_pass_between_two_steps_is_left_out_of_the_rate_however_short(tmp_path: Path, program: str) -> None:
    # A validation pass (or the epoch's end) between two steps, shorter than a median step,
    # was kept inside the interval by the pause rule: train_eval.py with one optimizer step
    # per epoch read 86.1 ms per step on the H200 for the program's 71.4; on this CPU, same
    # bundles: 188.6 ms for 158.9 (one step per epoch), 16.36 ms for 13.83 (lit_train.py,
    # validating every 4 batches). Each step now says whether a pass ended before it, and the
    # rate leaves out that time, whatever its length, and keeps the step after it.
    # --warmup 0: the rate covers the steps after the first, the very steps each program's
    # own mean covers (the steady state's start on this loaded box moves at random)
    if program == "lit_train":
        args = ("lit_train.py", "--device", "cpu", "--width", "256", "--batch-size", "64", "--batches", "12", "--val-every", "4",
                "--val-batches", "3", "--log-every", "4")
    else:
        epochs = 4
        args = ("train_eval.py", "--epochs", str(epochs), "--batches", "4", "--val-batches", "2", "--width", "512", "--accum-steps", "4")
    r = run_cli("run", "--collect", "nvml", "--warmup", "0", "--out", tmp_path, REAL / args[0], *args[1:], timeout=240)
    assert r.returncode == 0, r.stderr[-2000:]
    (bundle,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    light = json.loads((bundle / "manifest.json").read_text())["light_pass"]
    series = json.loads((bundle / "raw" / "light.json").read_text())["series"][light["step_name"]]
    result = program_result(r.stdout)
    if program == "lit_train":
        # 2 epochs of 12 batches, a validation after every 4th (after the 24th: no step follows)
        assert series["pass_ended"] == [k > 0 and k % 4 == 0 for k in range(result["iters"])]
    else:
        # one step per epoch: the epoch's end and the validation before each but the first
        assert series["pass_ended"] == [False] + [True] * (epochs - 1)
    rate = _steps_per_s(tmp_path)
    ends = sum(series["pass_ended"])
    assert f"{ends} pass end(s) between steps left out" in rate.note and "an evaluation pass or the epoch's end" in rate.note
    # the program's ms_per_step: its mean after the first batch (train_eval.py: after the
    # first group, each group its batch times summed)
    assert 1e3 / rate.value == pytest.approx(result["ms_per_step"], rel=0.1)


# Issue 29, second probe: more shapes named nowhere (torch.compile's default mode with a
# recompilation, AMP training with no DataLoader, host-side top-p sampling stopping at EOS,
# length-sorted embedding batches, TorchScript recommendation inference).


def test_compile_default_mode_image_inference_steps_per_batch(tmp_path: Path) -> None:
    # model = torch.compile(model) (no CUDA graphs), a DataLoader whose last batch is
    # smaller: dynamo compiles again for it in the first pass. The loop's fetch is the step,
    # one per batch of both passes; each from its fetch to the next holds the program's batch
    batches, passes = 6, 2
    light, series, result = _run(tmp_path, "compile_infer.py", "--device", "cpu", "--backend", "eager", "--batch", "4",
                                  "--images", "22", "--img-size", "32", "--width", "16", "--warmup", "2", "--passes", str(passes),
                                  env={"OMP_NUM_THREADS": "1"})  # torch's 2 intra-op threads on this shared 2-core box: 1 ms batches took 370
    assert result["batches"] == batches * passes
    assert light["step_name"] == FETCH
    assert light["steps_seen"] == result["batches"]
    # the last pass's batches, each with its fetch (the program's timer starts after it)
    ms = _step_ms(series)[-batches:]
    own = np.array(result["ms_each"][-batches:])
    assert ms.sum() == pytest.approx(own.sum(), rel=0.15)
    # the first pass's last batch compiled again (dynamo's compile callbacks say so): left
    # out of the rate and the p50, as warm-up is. Before: that step (~0.5 s among ~1 ms
    # ones) stayed in the steady state, the rate 44x slower than the program's steady pass
    assert [i for i, c in enumerate(series["compiled_ns"]) if c] == [batches - 1]
    rate = _steps_per_s(tmp_path)
    # left out with a note; or, where a stalled first pass moved the steady start past it, as warm-up
    assert "1 step(s) compiled" in (rate.note or "") or light["steady_start"] > batches - 1, (rate.note, light["steady_start"])
    # the rate is over the steady steps, from steady_start (the first pass's batches ran
    # slower, up to 2x, where it began there), the compiled one left out: the program's own
    # times of the same batches, and each batch's fetch, which its timer leaves out (7-15 %
    # more in 8 runs, two at a time on this 2-core box). Before, against the last pass's mean
    # alone and within 15 %: 1.82 against 1.46 ms once
    k = np.arange(len(result["ms_each"]))
    steady = np.array(result["ms_each"])[(k >= light["steady_start"]) & (k != batches - 1)]
    assert 1.0 < 1e3 / rate.value / steady.mean() < 1.3


def _held(starts: np.ndarray, ends: np.ndarray, at) -> list[int]:
    """Per step (host start, end: inclusive), the starts ``at`` inside it."""
    at = np.sort(np.asarray(at, dtype=np.int64))
    return (np.searchsorted(at, ends, side="right") - np.searchsorted(at, starts)).tolist()


@pytest.mark.parametrize("zero_grad", ["end", "start", "both", "model"])
def test_amp_training_without_a_data_loader_steps_per_iteration_in_run_and_analyze(tmp_path: Path, zero_grad: str) -> None:
    # for step in range(n): random batch, autocast, GradScaler, clip_grad_norm_, scheduler,
    # .item() every 5 steps; zero_grad(set_to_none=True) at the iteration's end (as the
    # program is written), zero_grad() at its start, or model.zero_grad() (no optimizer
    # range: the optimizer's step marks the iteration), or zero_grad() at the start and
    # again at the end (both: the step marks it; before, one step per zero_grad, 47 for 24).
    # One step per optimizer step: before,
    # zero_grad's iterations ran from one to the next and the first (the last, zero_grad
    # first) was in no step: 23 steps for 24 iterations. One intra-op thread, as the other
    # CPU programs here: in the full suite, beside the other worker, two threads stretched
    # the 2 ms iteration to 20 ms and the rate's gaps into pauses
    zero, step = "Optimizer.zero_grad#AdamW.zero_grad", "Optimizer.step#AdamW.step"
    steps, warmup = 24, 4
    r = run_cli("run", "--collect", "torch", "--steps", "0", "--out", tmp_path, REAL / "amp_train.py", "--device", "cpu",
                "--dtype", "bfloat16", "--batch", "32", "--dim", "64", "--width", "128", "--depth", "2", "--steps", str(steps),
                "--warmup", str(warmup), "--log-every", "5", "--zero-grad", zero_grad, timeout=300, env={"OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    (bundle,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    light = json.loads((bundle / "manifest.json").read_text())["light_pass"]
    raw = json.loads((bundle / "raw" / "light.json").read_text())
    name = light["step_name"]
    series = raw["series"][name]
    # the light pass (its program printed the RESULT on the terminal; the torch pass's is in its log)
    result = program_result(r.stdout)
    assert name == (step if zero_grad in ("model", "both") else zero)
    assert light["steps_seen"] == result["steps"] == steps
    # medians: the light steps begin at a mark, the program's at its loop's top, so one
    # preemption can land in one and not the other (means over 20 read 6.61 against 7.08 ms
    # twice in a loaded clean-clone CI run)
    own = np.array(result["ms_each"])
    assert len(own) == result["timed_steps"]
    assert np.median(_step_ms(series)[-len(own):]) == pytest.approx(np.median(own), rel=0.05)
    rate = _steps_per_s(tmp_path)
    assert 1e3 / rate.value == pytest.approx(result["ms_per_step"], rel=0.15)
    # the trace side's rule is the light pass's (steady.optimizer_iterations): analyze on the
    # bundle's trace reads the light pass's steady steps, each cut where the light pass cuts
    # it. Before: with zero_grad at the end (or only the optimizer's step) the window opened
    # one step late (counted in calls, the light pass's step k beginning at call k - 1) and
    # with zero_grad first the trace's last iteration was in no step: 21 steps for 22
    # the light pass's steady steps: each from its start to the next's (the last: its end), 1 ns
    # before; those the window can hold (it opens at a call: with the steady state from step
    # 0, the iteration before the first mark is in no trace)
    calls = {n: (raw["call_series"][n] if n == name else raw["series"][n])["host_start_ns"] for n in (zero, step) if n in raw["series"]}
    h = np.array(series["host_start_ns"], dtype=np.int64)
    first = max(light["warmup"], int(np.count_nonzero(h < min(calls[name]))))
    ends = np.append(h[1:], series["gpu_end_ns"][-1])[first:] - 1
    h = h[first:]
    light_marks = [tuple(z) for z in zip(*(_held(h, ends, calls[n]) for n in sorted(calls)))]
    work = raw["module_work_ns"] + [t for s in raw["modules"]["0"].values() for t in s["host_start_ns"]]
    assert _held(h, ends, work) == [2] * len(h)  # the forward and the loss: one iteration each
    profile = load_trace(bundle)
    found = find_steps(profile)
    assert found.name == name
    t, rg, ops = found.table, profile.ranges, profile.ops
    ts, te = t["host_start_ns"].to_numpy(np.int64), t["host_end_ns"].to_numpy(np.int64)
    trace_marks = [tuple(z) for z in zip(*(_held(ts, te, rg.loc[rg["name"] == n, "start_ns"]) for n in sorted(calls)))]
    assert found.count == len(h) >= light["steps_seen"] - light["warmup"] - 1
    assert trace_marks == light_marks
    linear = _held(ts, te, ops.loc[ops["name"] == "aten::linear", "start_ns"])
    assert _held(ts, te, ops.loc[ops["name"] == "aten::randn", "start_ns"]) == [1] * found.count
    assert linear == [linear[0]] * found.count and linear[0] > 0


def test_top_p_sampling_to_eos_with_a_list_kv_cache_steps_per_forward(tmp_path: Path) -> None:
    # per generation a prefill forward, then one forward per sampled token (host top-p,
    # multinomial), stopping at EOS: generations of different lengths, every forward a step
    light, series, result = _run(tmp_path, "sample_generate.py", "--device", "cpu", "--layers", "2", "--dim", "64", "--heads", "4",
                                  "--vocab", "32", "--max-new-tokens", "32", "--generations", "4", "--prompt-len", "8",
                                  env={"OMP_NUM_THREADS": "1"})  # as the tests below: in the full suite (-n 2) torch's two
    # intra-op threads beside the other worker's stretched the program's 0.4 ms token to 2.0 ms, and the
    # stretched gaps between steps read as pauses (0.62 ms read, 2026-12-03)
    assert len(set(result["lengths"])) > 1  # EOS ended them at different lengths
    assert light["step_name"] == "GPT.forward"
    assert light["steps_seen"] == result["warmup_forwards"] + result["forwards"]
    rate = _steps_per_s(tmp_path)
    assert 1e3 / rate.value == pytest.approx(result["ms_per_step"], rel=0.15)


def test_length_sorted_embedding_batches_are_the_programs_trend_not_warm_up(tmp_path: Path) -> None:
    # queries sorted longest first, padded per batch, encoded, similarity + topk: the
    # batches get faster one by one. Before: the first 5 of 32 left out as warm-up, the rate
    # 0.81 of the program's mean; now only a step slower than each of the next ones is cold
    light, series, result = _run(tmp_path, "embed_retrieval.py", "--device", "cpu", "--dim", "64", "--heads", "4", "--layers", "2",
                                  "--vocab", "1000", "--queries", "256", "--batch", "8", "--max-len", "128", "--corpus", "2000",
                                  env={"OMP_NUM_THREADS": "1"})  # in the full suite two threads' stalls read as a regime (start 22)
    assert light["step_name"] == "Encoder.forward"
    assert light["steps_seen"] == result["batches"] == 32
    ms, start = _step_ms(series), light["steady_start"]
    if start > result["warmup"]:
        # a loaded box can slow the first steps past the program's own warm-up (CI, 2026-12-03:
        # 14.3 16.8 16.1 14.6 10.8 | 6.9 6.3 5.9 ... ms, start 5): more is left out only behind a
        # drop, each step left out slower than 1.25x each of the next five, never the trend's steps
        assert ms[result["warmup"]:start].min() > 1.25 * ms[start:start + 5].max()
    # the program's timed batches, each from its forward to the next (this batch's top-k,
    # the next one's padding): on this loaded box the rate's intervals wander as much
    assert ms[result["warmup"]:].mean() == pytest.approx(result["ms_per_step"], rel=0.1)


@pytest.mark.parametrize("jit", ["script", "trace"])
def test_torchscript_recommendation_inference_steps_per_request_batch(tmp_path: Path, jit: str) -> None:
    # a DLRM-style model under torch.jit.script (or trace + freeze), inference_mode with
    # no_grad nested; each batch made on the host: the scripted module's call is the step
    # (TorchScript runs its submodules without Python: one call per batch)
    light, series, result = _run(tmp_path, "rec_jit.py", "--device", "cpu", "--jit", jit, "--batch", "64", "--tables", "4",
                                  "--rows", "1000", "--dim", "16", "--batches", "30", "--warmup", "3",
                                  env={"OMP_NUM_THREADS": "1"})
    # named after the scripted class (before: RecursiveScriptModule.forward); traced, the
    # eager DLRM that torch.jit.trace called first has that name: the scripted one keeps its class's
    assert light["step_name"] == ("DLRM.forward" if jit == "script" else "RecursiveScriptModule.forward")
    assert light["steps_seen"] == result["warmup"] + result["batches"]
    # each from its call to the next: the next batch's making instead of this one's. Medians:
    # the program's timer and the steps are shifted by one batch's making, so a preemption
    # there (2 ms batches on a loaded 2-core CI box) lands in one and not the other; a mean
    # over 12 batches read 1.69 against the program's 2.46 ms that way
    timed = result["ms_each"][result["warmup"]:]
    assert np.median(_step_ms(series)[-result["batches"]:]) == pytest.approx(np.median(timed), rel=0.1)


# Issue 29, fifth probe: a GAN's two optimizers, a continuous-batching server loop, HF beam
# search / top-k sampling over a left-padded batch, an HF pipeline over a list.


@pytest.mark.parametrize("critic", [5, 1])
def test_wgan_gp_two_optimizers_steps_per_iteration_not_per_optimizer_step(tmp_path: Path, critic: int) -> None:
    # WGAN-GP toy loop, no DataLoader: per iteration 5 critic steps (each with a gradient
    # penalty from autograd.grad(create_graph=True): two backward passes) and one generator
    # step, two Adam optimizers, D.zero_grad() / G.zero_grad() (the modules'); or one critic
    # step, DCGAN's rhythm. The step is the loop's iteration, as the program times it.
    iters, warmup = 30, 5
    light, series, result = _run(tmp_path, "gan_train.py", "--device", "cpu", "--dim", "64", "--batch", "64", "--critic-iters", str(critic),
                                  "--iters", str(iters), "--warmup", str(warmup), env={"OMP_NUM_THREADS": "1"})
    assert light["steps_seen"] == result["iters"] == iters
    assert _step_ms(series)[warmup:].mean() == pytest.approx(result["ms_per_iter"], rel=0.1)
    rate = _steps_per_s(tmp_path)
    assert 1e3 / rate.value == pytest.approx(result["ms_per_step"], rel=0.15)


def test_a_generator_stepped_every_kth_batch_in_the_critics_loop_leaves_one_step_per_batch(tmp_path: Path) -> None:
    # PyTorch-GAN's wgan.py rhythm: per batch one critic step, and `if i % n_critic == 0` a
    # generator step in the same loop. By the order alone (C G C C C C C G) the generator's
    # steps enclose the critic's, as with an inner critic loop: before, one step per 5
    # batches (12 for 60). Both are stepped in one loop (LoopSites): the critic's mark it
    iters, warmup = 60, 5
    light, series, result = _run(tmp_path, "gan_train.py", "--device", "cpu", "--dim", "64", "--batch", "64", "--generator-every", "5",
                                  "--iters", str(iters), "--warmup", str(warmup), env={"OMP_NUM_THREADS": "1"})
    assert light["step_name"] == "Optimizer.step#Adam#1.step", light["how"]
    assert abs(light["steps_seen"] - iters) <= 1
    assert _step_ms(series)[warmup:-1].mean() == pytest.approx(result["ms_per_iter"], rel=0.1)


@pytest.mark.parametrize("critic", [5, 1])
def test_wgan_gp_traced_whole_steps_per_iteration_not_per_optimizer_step(tmp_path: Path, critic: int) -> None:
    # the same loop under a plain torch.profiler, read by analyze: both optimizers' steps are
    # Optimizer.step#Adam.step there (run tells them apart by torch's optimizer hooks), and
    # one step per optimizer step read 180 (60) steps for the 30 iterations. The ops inside
    # each step tell the two Adams apart (10 and 8 parameters); the iteration is then the
    # marking optimizer's, as run reads it
    iters, warmup = 30, 5
    args = ("--device", "cpu", "--dim", "64", "--batch", "64", "--critic-iters", str(critic), "--iters", str(iters), "--warmup", str(warmup))
    steps, ms, traced = _traced(tmp_path, "gan_train.py", *args)
    assert steps.count == traced["iters"] == iters, steps.how
    assert steps.name == "Optimizer.step#Adam#2.step"  # the generator's: it ends the iteration
    # each from the marking optimizer's step to its next: the traced run's iterations after
    # its warm-up, as its own timer (under the tracer too) reads them
    assert ms[warmup:].sum() == pytest.approx(sum(traced["ms_each"][warmup:]), rel=0.1)


@pytest.mark.parametrize("decoder", ["sgd", "adam"])
def test_seq2seq_tutorial_two_optimizers_one_step_per_pair_in_run_and_analyze(tmp_path: Path, decoder: str) -> None:
    # the seq2seq translation tutorial's trainIters: per sentence pair both optimizers'
    # zero_grad (before any module call), the encoder per input token, the decoder per output
    # token (3-10 of each, teacher forcing at random), then both optimizers' steps. Two SGDs
    # (the tutorial's) before: the second zero_grad ended the module scout before any module
    # call, so the light pass saw no work, and the first optimizer's steps marked the
    # iteration: 39 steps for 40 pairs, the first pair's forward in none (and, with work seen,
    # a last step of the two steps alone); the last optimizer stepped marks it now. An SGD and
    # an Adam: the SGD's zero_grad marks it, and the Adam's zero_grad, taken for an optimizer
    # step closing the iteration, read 39 steps; now only steps close it. In run and in a
    # plain trace alike
    iters, warmup = 40, 5
    args = ("--device", "cpu", "--iters", str(iters), "--warmup", str(warmup), "--hidden", "64", "--vocab", "300",
            "--decoder-optim", decoder)
    name = "Optimizer.step#SGD#2.step" if decoder == "sgd" else "Optimizer.zero_grad#SGD.zero_grad"
    light, series, result = _run(tmp_path / "run", "seq2seq_train.py", *args, env={"OMP_NUM_THREADS": "1"})
    assert light["step_name"] == name
    assert light["steps_seen"] == result["iters"] == iters
    # each pair's train() call as the program times it: 2-12 ms with the sentences' lengths
    ms, own = _step_ms(series)[warmup:], np.array(result["ms_each"][warmup:])
    assert ms.sum() == pytest.approx(own.sum(), rel=0.1)
    # each step is its own pair: the pairs' times follow the sentences' random lengths, so the
    # program's times match ours step for step and not one step off (a 2-core host under load
    # takes the aligned correlation from ~0.95 to ~0.8; one step off reads ~0)
    aligned = np.corrcoef(ms, own)[0, 1]
    shifted = max(np.corrcoef(ms[1:], own[:-1])[0, 1], np.corrcoef(ms[:-1], own[1:])[0, 1])
    assert aligned > 0.6 and aligned > shifted + 0.3, (aligned, shifted)
    steps, ms, traced = _traced(tmp_path, "seq2seq_train.py", *args)
    assert (steps.name, steps.count) == (name, iters), steps.how
    assert ms[warmup:].sum() == pytest.approx(sum(traced["ms_each"][warmup:]), rel=0.1)


def test_sam_two_zero_grads_per_batch_one_step_per_batch_in_run_and_analyze(tmp_path: Path) -> None:
    # davda54/sam's loop: per batch two forward-backward passes, first_step(zero_grad=True)
    # and second_step(zero_grad=True); torch's ranges show SAM's zero_grad twice per batch
    # and the base SGD's step once (SAM.step is never called). Before: one step per zero_grad,
    # 59 steps of ~1 ms for 30 batches of 2 ms; the base optimizer's step marks the batch
    iters, warmup = 30, 5
    args = ("--device", "cpu", "--iters", str(iters), "--warmup", str(warmup), "--batch", "64", "--features", "64",
            "--width", "128", "--depth", "2", "--classes", "10")
    light, series, result = _run(tmp_path / "run", "sam_train.py", *args, env={"OMP_NUM_THREADS": "1"})
    assert light["step_name"] == "Optimizer.step#SGD.step"
    assert light["steps_seen"] == result["iters"] == iters
    assert _step_ms(series)[warmup:].sum() == pytest.approx(sum(result["ms_each"][warmup:]), rel=0.1)
    steps, ms, traced = _traced(tmp_path, "sam_train.py", *args)
    assert (steps.name, steps.count) == ("Optimizer.step#SGD.step", iters), steps.how
    assert ms[warmup:].sum() == pytest.approx(sum(traced["ms_each"][warmup:]), rel=0.1)


def test_transfer_learning_tutorial_val_batches_that_zero_grad_are_no_training_steps(tmp_path: Path) -> None:
    # the transfer learning tutorial's train_model: per epoch a 'train' and a 'val' phase over
    # their DataLoaders, optimizer.zero_grad() on every batch of both, backward and step in
    # 'train' only. Before: a zero_grad was a training mark, so the validation batches were
    # training steps too: 54 steps for 36 training batches, the 1.4 ms forwards among the 4 ms
    # iterations, in run and in analyze; the optimizer's steps mark the training batches now
    epochs, train, val = 3, 12, 6
    args = ("--device", "cpu", "--epochs", str(epochs), "--train-batches", str(train), "--val-batches", str(val), "--batch-size", "8",
            "--img-size", "32", "--width", "8")
    light, series, result = _run(tmp_path / "run", "transfer_train.py", *args, env={"OMP_NUM_THREADS": "1"})
    assert light["step_name"] == FETCH
    assert light["steps_seen"] == result["train_batches"] == epochs * train
    # each training batch as the program times it (its fetch included), the first epoch left out
    assert _step_ms(series)[train:].sum() == pytest.approx(sum(result["ms_each"][train:]), rel=0.1)
    steps, ms, traced = _traced(tmp_path, "transfer_train.py", *args)
    assert (steps.name, steps.count) == (FETCH, epochs * train), steps.how
    assert ms[train:].sum() == pytest.approx(sum(traced["ms_each"][train:]), rel=0.1)


def test_reptile_steps_once_per_outer_iteration_not_per_inner_step(tmp_path: Path) -> None:
    # Reptile (the paper's sine example as PyTorch ports write it): per outer iteration a
    # deepcopy of the model, a new SGD on it, 5 inner steps, a hand-written meta-update; an
    # evaluation every 20. Before: the step was the inner zero_grad, 300 steps of 0.38 ms for
    # the program's 60 outer iterations of 3.6 ms. Each outer iteration's optimizer is a new
    # one (the bootstrap's optimizer hooks): its first step marks the iteration
    iterations, inner = 60, 5
    r = run_cli("run", "--collect", "torch", "--out", tmp_path, REAL / "reptile.py", "--device", "cpu", "--iterations", str(iterations),
                "--inner-steps", str(inner), timeout=240, env={"OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    result = program_result(r.stdout)
    (bundle,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    light = json.loads((bundle / "manifest.json").read_text())["light_pass"]
    assert light["step_name"] == "Optimizer.step#SGD#new.step"
    assert light["steps_seen"] == result["iterations"] == iterations
    # each from one task's first inner step to the next task's: the program's iterations,
    # shifted by a part of one; the last ends at its last inner step (its meta-update unseen)
    ms = _step_ms(json.loads((bundle / "raw" / "light.json").read_text())["series"][light["step_name"]])
    own = np.array(result["ms_each"])
    assert ms[1:-1].sum() == pytest.approx(own[2:].sum(), rel=0.1)
    assert 0.5 * own[-1] < ms[-1] <= 1.05 * own[-1]
    rate = _steps_per_s(tmp_path)
    assert 1e3 / rate.value == pytest.approx(own[max(1, light["steady_start"]):].mean(), rel=0.15)
    # the torch pass marked each new optimizer's first step, and analyze steps on them
    d = diagnose(bundle, warnings=False)
    assert d.analysis.steps.name == "Optimizer.step#SGD#new.step" and d.analysis.steps.count >= 5, d.analysis.steps.how


FUNC_STYLES = {  # func_train.py's style: its tiny CPU arguments, the step the light pass must choose
    "pure": (["--iters", "60", "--batch", "32", "--size", "16"], "torch.autograd.grad"),
    "pure-penalty": (["--iters", "60", "--batch", "32", "--size", "16", "--input-penalty", "0.1"], "torch.autograd.grad"),
    "dpsgd": (["--iters", "30", "--batch", "8", "--size", "12"], "SimpleCNN.forward"),
    "maml": (["--iters", "16", "--tasks", "2", "--classes", "3", "--shots", "2", "--size", "12", "--inner-steps", "2",
              "--warmup", "3"], "Optimizer.zero_grad#Adam.zero_grad"),
}


@pytest.mark.parametrize("style", list(FUNC_STYLES))
def test_torch_func_training_steps_once_per_iteration(tmp_path: Path, style: str) -> None:
    # Training written with torch.func: "pure", the JAX way (a model that is a function of a
    # parameter dict, grad_and_value, an update by tree_map: no module, optimizer, data loader
    # or backward() call; before: "no step seen"), its one torch.autograd.grad call per
    # iteration marks it, with an input-gradient penalty by an inner grad too (the inner
    # transform's call, which comes first, is part of the outer's: not 2 steps per iteration); "dpsgd", per-sample gradients by vmap(grad(...)) over
    # functional_call(model, ...): the model's one (batched) call; "maml", functorch's MAML:
    # the inner loop's grad calls inside each outer iteration, whose optimizer marks it
    args, step = FUNC_STYLES[style]
    light, series, result = _run(tmp_path, "func_train.py", "--style", style.split("-")[0], "--device", "cpu", *args,
                                  env={"OMP_NUM_THREADS": "1"})
    assert light["step_name"] == step, light["how"]
    assert light["steps_seen"] == result["iterations"]
    # each from one mark to the next: the program's iterations shifted by a part of one (the
    # last ends at its mark's end), the first two (the first call's imports) left out
    ms, own = _step_ms(series), np.array(result["ms_each"])
    assert ms[2:-1].sum() == pytest.approx(own[3:].sum(), rel=0.1)


def test_dqn_steps_once_per_update_period(tmp_path: Path) -> None:
    # CleanRL's DQN: one loop over environment steps, an epsilon-greedy forward on some of
    # them, and after the learning starts an update (zero_grad, backward, Adam) every 10th:
    # the repeating unit is the update with its 10 environment steps, from one zero_grad to
    # the next, as the program times it (its forwards per environment step come and go with
    # epsilon; the exploration before the learning starts is no step)
    args = ("--device", "cpu", "--total-timesteps", "2000", "--learning-starts", "1000")
    light, series, result = _run(tmp_path, "dqn_train.py", *args, env={"OMP_NUM_THREADS": "1"})
    assert light["step_name"] == "Optimizer.zero_grad#Adam.zero_grad", light["how"]
    assert light["steps_seen"] == result["updates"] == 99
    ms, own = _step_ms(series), np.array(result["ms_update_periods"])
    assert ms[1:-1].sum() == pytest.approx(own[1:].sum(), rel=0.1)
    # a plain torch.profiler trace of the whole run reads the same steps
    steps, ms, traced = _traced(tmp_path, "dqn_train.py", *args)
    assert (steps.name, steps.count) == ("Optimizer.zero_grad#Adam.zero_grad", traced["updates"]), steps.how
    assert ms[1:-1].sum() == pytest.approx(sum(traced["ms_update_periods"][1:]), rel=0.1)


# CleanRL's off-policy programs (sac_train.py, td3_train.py) at their CPU size
RL_TINY = ("--device", "cpu", "--learning-starts", "200", "--hidden", "32", "--batch-size", "32")


def _critic_steps(tmp_path: Path, program: str, timesteps: int, *args: str) -> tuple[dict, dict, dict]:
    """``_run`` of a CleanRL off-policy ``program`` at its CPU size for ``timesteps``
    environment steps, the critics' Adam marking each: one step per critic update, give or
    take the first and the last."""
    light, series, result = _run(tmp_path, program, *RL_TINY, "--total-timesteps", str(timesteps), *args, env={"OMP_NUM_THREADS": "1"})
    assert light["step_name"] == "Optimizer.step#Adam#1.step", light["how"]
    assert abs(light["steps_seen"] - result["q_updates"]) <= 1
    return light, series, result


@pytest.mark.parametrize("timesteps", [600, 601])
def test_sac_steps_once_per_environment_step_whatever_the_parity(tmp_path: Path, timesteps: int) -> None:
    # CleanRL's SAC: three Adams (the critics' every environment step, the actor's and the
    # temperature's twice every 2nd step). Before: 1195 steps of any of the three for 399
    # environment steps, or the actor's pairs as 2-step iterations, by the run's length's
    # parity. Now the critics' steps mark the environment step: one step per step trained,
    # give or take the first and the last, every other one holding the two actor updates
    light, series, result = _critic_steps(tmp_path, "sac_train.py", timesteps)
    assert result["q_updates"] == timesteps - 201
    ms, own = _step_ms(series)[2:-2], np.array(result["ms_each"][203:-2])
    assert ms.mean() == pytest.approx(own.mean(), rel=0.1)
    # every 2nd step holds the actor's updates: the steps alternate short and long
    short, long = np.median(ms[0::2]), np.median(ms[1::2])
    assert max(short, long) > 1.5 * min(short, long)


def test_sac_with_a_longer_policy_delay_names_its_slow_steps_as_scheduled(tmp_path: Path) -> None:
    # policy_frequency 3: every 3rd environment step holds 3 actor and 3 temperature updates
    # (q | q | q a t a t a t). The critics' steps still mark the environment step (before:
    # every Adam zero_grad, 1191 steps for 399); uneven-steps names the slow steps as the
    # loop's own scheduled work, one every 3 steps (before: the DataLoader, GC or swapping)
    from perfdoctor.analysis.metrics import analyze
    from perfdoctor.rules.engine import evaluate, load_rules

    _critic_steps(tmp_path, "sac_train.py", 600, "--policy-frequency", "3")
    (bundle,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    (finding,) = [f for f in evaluate(load_rules(()), analyze(load_trace(bundle))) if f.rule_id == "uneven-steps"]
    assert finding.status == "fail" and finding.title.startswith("Uneven steps: every k-th step is slow")
    assert "one every 3 steps" in finding.values["slow_step_time_ratio"].note


def test_sac_in_a_plain_trace_steps_once_per_environment_step(tmp_path: Path) -> None:
    # the same loop traced whole by torch.profiler: its three Adams told apart by the ops
    # inside their steps (optimizer_ordinals), the critics' marking the environment step
    steps, ms, traced = _traced(tmp_path, "sac_train.py", *RL_TINY, "--total-timesteps", "500")
    assert steps.name == "Optimizer.step#Adam#1.step", steps.how
    assert abs(steps.count - traced["q_updates"]) <= 1
    assert ms[2:-2].mean() == pytest.approx(np.mean(traced["ms_each"][203:-2]), rel=0.1)


@pytest.mark.parametrize("timesteps", [600, 601])
def test_td3_steps_once_per_environment_step_not_per_delayed_actor_update(tmp_path: Path, timesteps: int) -> None:
    # CleanRL's TD3: two Adams, the critics' every environment step, the actor's once every
    # 2nd (`if global_step % policy_frequency == 0`, not compensated as SAC's). By the order of
    # the steps alone (C A C C A) the actor's encloses the critics' as a WGAN's generator
    # encloses its critic's inner loop (C C G): before, one step per 2 environment steps. Both
    # are stepped in one loop, which the light pass now sees (LoopSites): the critics' mark it
    light, series, result = _critic_steps(tmp_path, "td3_train.py", timesteps)
    assert result["q_updates"] == timesteps - 201
    assert result["actor_updates"] == len(range(202, timesteps, 2))  # every even step after the learning starts
    ms, own = _step_ms(series)[2:-2], np.array(result["ms_each"][203:-2])
    assert ms.mean() == pytest.approx(own.mean(), rel=0.1)


def test_lightning_fabric_steps_once_per_optimizer_step(tmp_path: Path) -> None:
    # litgpt's loop on Lightning Fabric: setup() wraps the model, optimizer and loader,
    # fabric.backward per micro-batch under no_backward_sync, clip_gradients, step, zero_grad
    # every 2nd micro-batch: one step per optimizer step, its two micro-batches and fetches
    pytest.importorskip("lightning")
    light, series, result = _run(tmp_path, "fabric_train.py", "--device", "cpu", "--precision", "32-true", "--layers", "2",
                                 "--dim", "64", "--heads", "4", "--vocab", "512", "--block", "32", "--micro-batch", "4",
                                 "--steps", "12", "--accum", "2", "--warmup", "2", env={"OMP_NUM_THREADS": "1"})
    assert light["step_name"] == "Optimizer.step#AdamW.step", light["how"]
    assert light["steps_seen"] == result["optimizer_steps"] == 12
    assert _step_ms(series)[2:].sum() == pytest.approx(sum(result["ms_each"][2:]), rel=0.1)


def test_continuous_batching_steps_per_scheduler_iteration_not_per_forward(tmp_path: Path) -> None:
    # vLLM's loop in plain PyTorch: each iteration admits waiting requests (one prefill
    # forward each) and runs one decode forward over the running batch; requests end at
    # different lengths. The step is the scheduler's iteration, as the program times it:
    # the decode's call site marks it, the prefills' calls since the previous decode join it
    # (before: a step per forward, 71 for 47 iterations, p50 0.41 ms for 0.55 ms/iteration)
    light, series, result = _run(tmp_path, "cont_batch.py", "--device", "cpu", "--dim", "64", "--layers", "2", "--heads", "4",
                                  "--vocab", "256", "--requests", "24", "--slots", "8", "--max-new", "24", "--max-prompt", "32",
                                  env={"OMP_NUM_THREADS": "1"})
    assert result["prefills"] == 24 and result["decodes"] == result["iters"]
    assert light["steps_seen"] == result["iters"]
    assert _step_ms(series)[result["warmup"]:].mean() == pytest.approx(result["ms_per_iter"], rel=0.15)
    rate = _steps_per_s(tmp_path)
    assert 1e3 / rate.value == pytest.approx(result["ms_per_step"], rel=0.15)


@pytest.mark.parametrize("mode", ["beam", "sample"])
def test_hf_beam_search_and_top_k_sampling_over_a_padded_batch_steps_per_forward(tmp_path: Path, mode: str) -> None:
    # generate(num_beams=4) or generate(do_sample=True, top_k=50) over 4 left-padded prompts
    # of different lengths: one model forward per generated position (the prefill included),
    # in the warm-up and the 3 timed generates. Each timed generate's forwards start inside
    # its span (the program's perf_counter_ns, the light pass's clock) and, each up to the
    # next, hold all of it but its setup and beam finalisation (0.95 of it here alone). A
    # generate's last forward runs on to the next generate's first, past the span's end (by
    # the next one's setup, 1-2 ms): it is cut there.
    tokens, generations = 16, 3
    light, series, result = _run(tmp_path, "hf_beam.py", "--mode", mode, "--device", "cpu", "--layers", "2", "--dim", "64",
                                  "--heads", "4", "--kv-heads", "2", "--ffn-dim", "128", "--vocab", "256", "--tokens", str(tokens),
                                  "--generations", str(generations), env={"OMP_NUM_THREADS": "1"})
    assert light["step_name"] == "LlamaForCausalLM.forward"
    assert light["steps_seen"] == result["warmup_forwards"] + result["forwards"]
    starts, ends = np.array(series["host_start_ns"]), np.array(series["gpu_end_ns"])
    end = len(ends)
    for n, (t0, t1) in zip(reversed(result["forwards_each"]), reversed(result["perf_counter_ns_each_generate"])):
        s, e = starts[end - n:end], ends[end - n:end]
        assert t0 < s[0] and s[-1] < t1
        assert 0.75 * (t1 - t0) < (np.minimum(e, t1) - s).sum() <= t1 - t0
        end -= n


def test_hf_pipeline_over_a_list_steps_per_batch(tmp_path: Path) -> None:
    # pipeline("text-classification")(texts, batch_size=8): the pipeline's own DataLoader
    # (tokenising each text in its dataset, padding in its collate) marks the batch; each
    # from its fetch to the next holds the batch's forward and its items' post-processing
    passes, batches = 3, 8
    light, series, result = _run(tmp_path, "hf_pipeline.py", "--device", "cpu", "--layers", "2", "--dim", "64", "--heads", "4",
                                  "--texts", "64", "--batch-size", "8", "--max-words", "60", "--passes", str(passes),
                                  env={"OMP_NUM_THREADS": "1"})
    assert result["batches_per_pass"] == batches
    assert light["step_name"] == FETCH
    assert light["steps_seen"] == (passes + 1) * batches
    ms = _step_ms(series)
    for k, own in enumerate(result["ms_each_pass"]):
        assert ms[(k + 1) * batches:(k + 2) * batches].sum() == pytest.approx(own, rel=0.15)
    rate = _steps_per_s(tmp_path)
    assert 1e3 / rate.value == pytest.approx(result["ms_per_step"], rel=0.15)


@pytest.mark.parametrize("optimizer", ["lbfgs", "adam"])
def test_pinn_with_a_closure_steps_per_optimizer_step_not_per_closure_call(tmp_path: Path, optimizer: str) -> None:
    # a PINN for Burgers' equation: the residual's derivatives by autograd.grad
    # (create_graph=True, a second derivative through the first), no DataLoader, per outer
    # iteration optimizer.step(closure) with zero_grad, the loss and backward inside the
    # closure (LBFGS, the papers' optimizer, calls it several times per step). The step is
    # one optimizer.step(closure), as the program times it.
    iters, warmup = 20, 3
    light, series, result = _run(tmp_path, "pinn_train.py", "--device", "cpu", "--width", "32", "--depth", "4", "--points", "512",
                                  "--iters", str(iters), "--warmup", str(warmup), "--max-iter", "5", "--optimizer", optimizer,
                                  env={"OMP_NUM_THREADS": "1"})
    calls = result["closure_calls"]
    assert (sum(calls) > 2 * iters) if optimizer == "lbfgs" else (calls == [1] * iters)
    assert light["steps_seen"] == result["iters"] == iters
    assert _step_ms(series)[warmup:].mean() == pytest.approx(result["ms_per_iter"], rel=0.1)
    rate = _steps_per_s(tmp_path)
    assert 1e3 / rate.value == pytest.approx(result["ms_per_step"], rel=0.15)


@pytest.mark.parametrize("prefetcher", [False, True])
def test_padded_text_training_steps_per_batch(tmp_path: Path, prefetcher: bool) -> None:
    # variable-length sequences, a collate_fn padding each batch, pin_memory (on CUDA),
    # non_blocking copies, a Transformer encoder classifier; --prefetcher: Apex's
    # data_prefetcher (`while batch is not None`, the next batch fetched inside next()),
    # without its side stream on a CPU. One step per training batch, 16 per epoch; with the
    # prefetcher each epoch's fetches go F0 F1 T0 F2 T1 ... F16(StopIteration) T15
    # F17(StopIteration again): the last batch's step begins at the end of its pass (before:
    # 30 steps for 32)
    light, series, result = _run(tmp_path, "text_train.py", "--device", "cpu", "--dim", "64", "--heads", "4", "--layers", "1",
                                  "--vocab", "1000", "--samples", "256", "--batch", "16", "--max-len", "64", "--epochs", "2",
                                  *(("--prefetcher",) if prefetcher else ()), env={"OMP_NUM_THREADS": "1"})
    assert result["batches"] == 32
    assert light["step_name"] == FETCH
    assert light["steps_seen"] == result["batches"]
    assert _step_ms(series).mean() == pytest.approx(np.mean(result["ms_each"]), rel=0.1)
    rate = _steps_per_s(tmp_path)
    assert 1e3 / rate.value == pytest.approx(result["ms_per_step"], rel=0.15)


# Issue 29, sixth probe: more shapes named nowhere (truncated BPTT with no optimizer and no
# DataLoader, an accelerate-style accumulation loop whose loader fetches one batch ahead,
# detection over lists of variable-size images through a logging generator, a streaming
# encoder's chunk loop calling a method, a background preprocessing thread feeding the
# training through a queue.Queue, a tqdm-wrapped validation under inference_mode).

def test_truncated_bptt_lstm_without_optimizer_steps_per_training_batch(tmp_path: Path) -> None:
    # PyTorch's word_language_model: batchify, get_batch(i) slicing bptt tokens, the hidden
    # state detached per batch, model.zero_grad(), clip_grad_norm_, p.data.add_ by hand (no
    # optimizer), evaluate() after each epoch with the same model under no_grad. The step
    # is one training batch (one BPTT segment), as the program's ms/batch times it
    light, series, result = _run(tmp_path, "lstm_lm.py", "--device", "cpu", "--emsize", "64", "--nhid", "64", "--ntokens", "1000",
                                  "--train-tokens", "6000", "--val-tokens", "1000", "--batch-size", "8", "--bptt", "20",
                                  "--epochs", "2", "--log-interval", "10", env={"OMP_NUM_THREADS": "1"})
    assert result["batches"] == 76 and result["val_batches"] == 10
    assert light["step_name"] == "RNNModel.forward"
    assert light["steps_seen"] == result["batches"]
    assert _step_ms(series).sum() == pytest.approx(sum(result["ms_each"]), rel=0.1)
    rate = _steps_per_s(tmp_path)
    assert 1e3 / rate.value == pytest.approx(result["ms_per_step"], rel=0.1)


D2L = ("--train", "2560", "--test", "512", "--batch-size", "128", "--epochs", "2")


@pytest.mark.parametrize("model", ["scratch", "module"])
def test_d2l_train_ch3_own_sgd_steps_per_training_batch_not_the_test_batches_in_run_and_analyze(tmp_path: Path, model: str) -> None:
    # d2l.ai's train_ch3: its own sgd (no torch.optim, no optimizer range), a training pass
    # over one DataLoader, then evaluate_accuracy over the test DataLoader under no_grad,
    # both fetches named alike. The backward() calls mark the training batches: before,
    # --model module read 48 steps (the 8 test batches among them), and a plain trace 48 for both
    light, series, result = _run(tmp_path / "run", "d2l_train.py", "--model", model, *D2L, env={"OMP_NUM_THREADS": "1"})
    assert result["batches"] == 40 and result["test_batches"] == 8
    assert light["step_name"].startswith("enumerate(DataLoader)#") and light["steps_seen"] == result["batches"]
    assert np.median(_step_ms(series)[3:]) == pytest.approx(result["ms_per_step"], rel=0.15)
    steps, _, traced = _traced(tmp_path, "d2l_train.py", "--model", model, *D2L)
    assert steps.name.startswith("enumerate(DataLoader)#") and steps.count == traced["batches"]


def test_truncated_bptt_lstm_traced_whole_the_step_before_an_evaluation_is_its_own_batch(tmp_path: Path) -> None:
    # the same program traced whole (--steps 0), read by analyze: the run marks the model's
    # calls with grad enabled alone, so the epoch's last training step ran from its call to
    # the next epoch's first, through the evaluation's 5 batches under no_grad (10.3 ms for
    # the program's 3.8). Each step against the traced pass's own timer for its batch
    args = ("--device", "cpu", "--emsize", "64", "--nhid", "64", "--ntokens", "1000", "--train-tokens", "6000", "--val-tokens", "1000",
            "--batch-size", "8", "--bptt", "20", "--epochs", "2", "--log-interval", "10")
    r = run_cli("run", "--collect", "torch", "--steps", "0", "--out", tmp_path, REAL / "lstm_lm.py", *args, timeout=240,
                env={"OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    (bundle,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    warmup = json.loads((bundle / "raw" / "torch.config.json").read_text())["warmup"]
    traced = program_result((bundle / "raw" / "torch.log").read_text())
    assert traced["batches"] == 76 and traced["val_batches"] == 10
    steps = find_steps(load_trace(bundle))
    assert steps.name == "RNNModel.forward" and steps.count == traced["batches"] - warmup - 1  # the last: no next call
    ms = (steps.table["host_end_ns"] - steps.table["host_start_ns"]).to_numpy() / 1e6
    own = np.array(traced["ms_each"][warmup:warmup + steps.count])  # each from its call to the next, as its batch
    per_epoch = traced["batches_per_epoch"]
    before = [k * per_epoch - 1 - warmup for k in range(1, traced["epochs"]) if 0 <= k * per_epoch - 1 - warmup < steps.count]
    assert before, "the traced window holds an evaluation"
    for i in before:
        assert abs(ms[i] - own[i]) <= 0.25 * own[i] + 1.5, (i, ms[i], own[i])
    assert ms[1:].sum() == pytest.approx(own[1:].sum(), rel=0.1)  # the first: the tracer started in it


def test_makemore_by_hand_no_optimizer_module_or_loader_steps_per_backward_in_run_and_analyze(tmp_path: Path) -> None:
    # Karpathy's makemore MLP: top-level code, plain tensors with requires_grad, a minibatch by
    # randint, loss.backward(), p.data += -lr * p.grad: nothing for the light pass to mark and
    # no function to name with --step-fn (before: "no step seen", analyze none). One step per
    # backward call, from one to the next, against the program's own timer of each iteration
    steps, warmup = 200, 20
    r = run_cli("run", "--collect", "torch", "--steps", "0", "--out", tmp_path, REAL / "scratch_mlp.py", "--device", "cpu",
                "--steps", str(steps), "--warmup", str(warmup), "--names", "4000", timeout=240, env={"OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    (bundle,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    light = json.loads((bundle / "manifest.json").read_text())["light_pass"]
    name = light["step_name"]
    assert name == "torch.autograd.backward"
    series = json.loads((bundle / "raw" / "light.json").read_text())["series"][name]
    result = program_result(r.stdout)
    assert light["steps_seen"] == steps
    own = np.array(result["ms_each"])
    assert np.median(_step_ms(series)[-len(own):]) == pytest.approx(np.median(own), rel=0.1)
    assert 1e3 / _steps_per_s(tmp_path).value == pytest.approx(result["ms_per_step"], rel=0.15)
    # the trace: each step one backward (the loss's node evaluated once) and one forward (its
    # one tanh), so per iteration, never per autograd node nor across two
    profile = load_trace(bundle)
    found = find_steps(profile)
    traced_from = json.loads((bundle / "raw" / "torch.config.json").read_text())["warmup"]
    assert found.name == name and found.count == steps - traced_from - 1  # the last: no next backward
    ops = profile.ops
    for what in ("autograd::engine::evaluate_function: NllLossBackward0", "aten::tanh"):
        at = np.sort(ops.loc[ops["name"] == what, "start_ns"].to_numpy(np.int64))
        held = np.searchsorted(at, found.table["host_end_ns"], side="right") - np.searchsorted(at, found.table["host_start_ns"])
        assert (held == 1).all(), (what, np.unique(held, return_counts=True))


def test_accelerate_style_gradient_accumulation_steps_per_optimizer_step(tmp_path: Path) -> None:
    # run_glue_no_trainer's loop: `with accelerator.accumulate(model)`, accelerator.backward,
    # clip when sync_gradients, optimizer.step() / lr_scheduler.step() / zero_grad() on every
    # batch (no-ops unless gradients sync), an evaluation after each epoch; 10 batches per
    # epoch, accumulation 4: optimizer steps after 4, 8 and the loader's last batch. The
    # step is the optimizer step (the Trainer's global_step), as the program times it.
    # Launched as HF's examples are, `accelerate launch --mixed_precision bf16 ...`: the
    # program gets the precision accelerate's launcher gives it (before: "accelerate: no
    # such script")
    light, series, result = _run(tmp_path, "accel_train.py", "--device", "cpu", "--layers", "2", "--dim", "64", "--heads", "4",
                                  "--vocab", "2000", "--max-len", "64", "--batch-size", "8", "--samples", "80",
                                  "--eval-samples", "24", "--accum", "4", "--epochs", "2", env={"OMP_NUM_THREADS": "1"},
                                  launcher=("accelerate", "launch", "--cpu", "--num_processes", "1", "--mixed_precision", "bf16"))
    assert result["mixed_precision"] == "bf16"
    assert result["optimizer_steps"] == 6 and result["micro_batches"] == 20
    assert light["step_name"] == "Optimizer.step#AdamW.step" and "(gradient accumulation, or several loaders read per step)" in light["how"]
    # its micro-batches per optimizer step, 20 / 6 (before: 3.5, the fetch that raised
    # counted as a batch: steady.training_batches)
    assert f"one per {count(result['micro_batches'] / result['optimizer_steps'])} DataLoader batches" in light["how"]
    assert light["steps_seen"] == result["optimizer_steps"]
    assert _step_ms(series).sum() == pytest.approx(sum(result["ms_each"]), rel=0.1)
    rate = _steps_per_s(tmp_path)
    assert 1e3 / rate.value == pytest.approx(result["ms_per_step"], rel=0.15)


def _rank_steps(bundle: Path) -> dict[int, np.ndarray]:
    """Each rank's light-pass steps (ms), from its raw/rank<k>/light.json and the manifest's step."""
    step = json.loads((bundle / "manifest.json").read_text())["light_pass"]["step_name"]
    return {int(d.name.removeprefix("rank")): _step_ms(json.loads((d / "light.json").read_text())["series"][step])
            for d in sorted((bundle / "raw").glob("rank*"))}


ACCEL_TINY = ("--device", "cpu", "--layers", "2", "--dim", "64", "--heads", "4", "--vocab", "2000", "--max-len", "64", "--batch-size", "8",
              "--samples", "160", "--eval-samples", "24", "--accum", "2", "--epochs", "1")


def _check_ranks(tmp_path: Path, stdout: str) -> None:
    """Two ranks of accel_train.py ACCEL_TINY, each its 10 of the 20 batches: every rank's light
    pass on the optimizer step (accumulation 2), timed as the loop iteration, in its
    raw/rank<k>/light.json and in the ranks table, against the rank's own timer."""
    results = program_results(stdout)
    assert len(results) == 2 and all(x["optimizer_steps"] == 5 for x in results)
    (bundle,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["world_size"] == 2 and manifest["light_pass"]["step_name"] == "Optimizer.step#AdamW.step"
    assert all(r["light_pass"]["step_name"] == "Optimizer.step#AdamW.step" for r in manifest["ranks"].values())
    steps = _rank_steps(bundle)
    assert sorted(steps) == [0, 1] and all(ms.size == 5 for ms in steps.values())
    for ms in steps.values():  # iterations, not the optimizer's own step (1.3 ms of ~30)
        assert ms.sum() == pytest.approx(sum(results[0]["ms_each"]), rel=0.25)
    for entry in json.loads((bundle / "ranks.json").read_text())["ranks"]:  # the ranks table's step column
        assert entry["step_ms_p50"] == pytest.approx(np.median(results[0]["ms_each"]), rel=0.3), entry


def test_a_torchrun_job_on_the_cpu_times_each_ranks_iterations(tmp_path: Path) -> None:
    # perfdoctor run --nproc-per-node 2 (torchrun's ranks; on a machine without GPUs the
    # Accelerator runs them with gloo). Before, each rank's light.json kept its step's ranges
    # as measured (a module step's alone was rewritten), and the ranks table read them: the
    # optimizer's own step, 1.4 ms of a 30 ms iteration (DDP's data loader fetch, 0.15 ms of
    # 3 ms); and rank 0's summary, made again on its series already rewritten, chose another
    # step: no step time for rank 0. (ddp_train.py is not the program here: torch 2.13's
    # gloo aborts 1 run in 8 at its exit, or under the profiler hangs there, when the DDP
    # tutorial's destroy_process_group() runs before the model is freed)
    r = run_cli("run", "--collect", "torch", "--nproc-per-node", "2", "--out", tmp_path, REAL / "accel_train.py", *ACCEL_TINY,
                timeout=300, env={"OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    _check_ranks(tmp_path, r.stdout)


def test_accelerate_launch_on_several_processes_runs_torchruns_ranks(tmp_path: Path) -> None:
    # `accelerate launch --multi_gpu --num_processes 2`: torchrun's two ranks with the
    # environment accelerate gives them (not run before: no machine with two GPUs)
    r = run_cli("run", "--collect", "torch", "--out", tmp_path, "--", "accelerate", "launch", "--multi_gpu", "--num_processes", "2",
                REAL / "accel_train.py", *ACCEL_TINY, timeout=300, env={"OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    _check_ranks(tmp_path, r.stdout)


def test_hf_trainer_with_evaluations_steps_per_optimizer_step_in_run_and_analyze(tmp_path: Path) -> None:
    # transformers' own Trainer as its fine-tuning docs use it (no profiler): a BERT
    # classifier, DataCollatorWithPadding, gradient_accumulation_steps=2, an evaluation with
    # compute_metrics every 4 optimizer steps (after steps 4, 8, 12 and 16). The step is the
    # optimizer step (its two micro-batches, their fetch included), not the evaluation after
    # it: each step against the program's TrainerCallback timer (on_step_begin to on_step_end)
    accum, every = 2, 4
    r = run_cli("run", "--collect", "torch", "--out", tmp_path, REAL / "hf_trainer.py", "--device", "cpu", "--layers", "2",
                "--dim", "64", "--heads", "4", "--samples", "256", "--batch", "8", "--accum", str(accum), "--eval-steps",
                str(every), timeout=300, env={"OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    (bundle,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    light = json.loads((bundle / "manifest.json").read_text())["light_pass"]
    series = json.loads((bundle / "raw" / "light.json").read_text())["series"][light["step_name"]]
    result = program_result(r.stdout)
    assert result["optimizer_steps"] == 256 // 8 // accum == len(result["ms_each"])
    assert light["step_name"] == "Optimizer.step#AdamW.step" and light["steps_seen"] == result["optimizer_steps"]
    # medians: the first step's allocations, and the steps whose iteration holds an evaluation
    own = np.array(result["ms_each"][1:])
    ms = _step_ms(series)[1:]
    assert np.median(ms) == pytest.approx(np.median(own), rel=0.1)
    # the rate leaves out the three evaluations between steps (the fourth follows the last)
    rate = _steps_per_s(tmp_path)
    assert "3 pass end(s) between steps left out" in rate.note, rate.note
    assert 1e3 / rate.value == pytest.approx(result["ms_per_step"], rel=0.15)
    # the trace: the same step, each holding its two micro-batches' forwards (BERT's three
    # embedding lookups each) and none of the evaluations' (which the window holds too)
    profile = load_trace(bundle)
    found = find_steps(profile)
    assert found.name == light["step_name"] and found.count >= every + 1
    t, ops = found.table, profile.ops
    at = ops.loc[ops["name"] == "aten::embedding", "start_ns"]
    ts, te = t["host_start_ns"].to_numpy(np.int64), t["host_end_ns"].to_numpy(np.int64)
    assert _held(ts, te, at) == [3 * accum] * found.count
    assert len(at) > 3 * accum * found.count  # an evaluation was traced, outside every step


@pytest.mark.parametrize(("accum", "every"), [(1, 4), (2, 2)])
def test_lightning_fit_with_validations_steps_per_training_batch_in_run_and_analyze(tmp_path: Path, accum: int, every: int) -> None:
    # PyTorch Lightning itself: Trainer.fit with its sanity check (2 validation batches
    # first), a validation every `every` training batches (val_check_interval), AdamW and a
    # step-wise OneCycleLR; 2 epochs of 16 batches; accum 2: accumulate_grad_batches=2 with
    # bf16-mixed autocast, one step per optimizer step, a validation after each. Lightning's
    # loops stop at len(loader) and never exhaust it, so no fetch raises StopIteration:
    # - the validations between training batches were "pauses" of the rate, kept inside it
    #   when short; each now says a pass ended before the step after it, as the HF
    #   Trainer's and the ImageNet example's do;
    # - with accumulation each optimizer step's group held the validation's 2 batches
    #   ("one per 4 DataLoader batches", 9.0 ms per step for the program's 5.2, in run and
    #   in analyze; with a validation every 2 steps, in a traced window of as many groups
    #   of 2 as of 4 too): a fetch whose iteration trains nothing is no group's
    batches = 32
    extra = ("--accum", "2", "--precision", "bf16-mixed") if accum == 2 else ()
    r = run_cli("run", "--collect", "torch", "--out", tmp_path, REAL / "lightning_fit.py", "--accelerator", "cpu", "--width", "256",
                "--features", "64", "--samples", "1024", "--val-samples", "128", "--batch", "64", "--val-every", str(every), *extra,
                timeout=300, env={"OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    (bundle,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    light = json.loads((bundle / "manifest.json").read_text())["light_pass"]
    series = json.loads((bundle / "raw" / "light.json").read_text())["series"][light["step_name"]]
    result = program_result(r.stdout)
    steps = batches // accum
    assert result["batches"] == batches and result["optimizer_steps"] == steps
    assert light["step_name"] == (FETCH if accum == 1 else "Optimizer.step#AdamW.step")
    assert light["steps_seen"] == steps  # not the validations' fetches
    assert accum == 1 or f"one per {accum} DataLoader batches" in light["how"]
    assert series["pass_ended"] == [k > 0 and k % (every // accum) == 0 for k in range(steps)]
    # the step before each validation ends where its training ended: its optimizer step's end
    # (the backward inside it), not at the validation's first fetch after Lightning's set-up
    # of the validation (2 ms of a 12 ms optimizer step on the H200: 1.18x the program's)
    raw = json.loads((bundle / "raw" / "light.json").read_text())["series"]
    marks = [raw[n] for n in raw if n.startswith("Optimizer.") or n == "torch.autograd.backward"]
    spans = sorted((h, e) for m in marks for h, e in zip(m["host_start_ns"], m["gpu_end_ns"]))
    for k in range(steps - 1):
        if series["pass_ended"][k + 1]:
            start = series["host_start_ns"][k]
            assert series["gpu_end_ns"][k] == max(e for h, e in spans if start <= h < series["host_start_ns"][k + 1]), k
    # no full garbage collection among the steps: Lightning's imports leave ~410k objects and
    # run six alone, the last (0.2 s) before fit; the light pass, which imported torch before
    # the program, moved the last into one of the first training steps
    collected = json.loads((bundle / "raw" / "light.json").read_text()).get("full_gcs") or {"start_ns": []}
    assert not [t for t in collected["start_ns"] if series["host_start_ns"][0] <= t <= series["gpu_end_ns"][-1]]
    # each batch's span in the program (its start to the next batch's, or to the validation
    # after it), its optimizer step's: the light steps add up to them
    span = np.array(result["span_each"]).reshape(steps, accum).sum(axis=1)
    assert _step_ms(series).sum() == pytest.approx(span.sum(), rel=0.1)
    rate = _steps_per_s(tmp_path)
    assert "pass end(s) between steps left out" in rate.note and "pause" not in rate.note, rate.note
    assert 1e3 / rate.value == pytest.approx(span[light["steady_start"]:].mean(), rel=0.1)
    # the trace: the same step, each holding its batches' forwards (3 Linear layers each) and
    # none of the validations' forwards, which the traced window holds too
    profile = load_trace(bundle)
    found = find_steps(profile)
    assert found.name == light["step_name"] and found.count >= every // accum
    t, ops = found.table, profile.ops
    at = ops.loc[ops["name"] == "aten::addmm", "start_ns"]
    assert _held(t["host_start_ns"].to_numpy(np.int64), t["host_end_ns"].to_numpy(np.int64), at) == [3 * accum] * found.count
    assert len(at) > 3 * accum * found.count


def test_lightning_fit_with_its_defaults_ends_each_epochs_last_step_before_its_checkpoint(tmp_path: Path) -> None:
    # Lightning with its own defaults (a logger, the progress bar, ModelCheckpoint) and no
    # validation loader: the checkpoint is saved at each training epoch's end. Its loop stops
    # at len(loader), so no fetch raises StopIteration: the epoch's last batch ran on through
    # the save to the next epoch's first fetch (8.7 ms among 2.8 ms steps) and the run's last
    # batch was in no step (47 steps for 48 batches). Now the fetch that yielded its pass's
    # last batch ends its step where its training ended (the optimizer's step), and the
    # next epoch's first step says a pass ended before it
    per_epoch, epochs = 16, 3
    r = run_cli("run", "--collect", "nvml", "--out", tmp_path, REAL / "lightning_fit.py", "--accelerator", "cpu", "--width", "256",
                "--features", "64", "--samples", str(64 * per_epoch), "--batch", "64", "--epochs", str(epochs), "--val-every", "0",
                "--defaults", timeout=300, env={"OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    (bundle,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    light = json.loads((bundle / "manifest.json").read_text())["light_pass"]
    series = json.loads((bundle / "raw" / "light.json").read_text())["series"][light["step_name"]]
    result = program_result(r.stdout)
    assert result["batches"] == per_epoch * epochs
    assert light["step_name"] == FETCH and light["steps_seen"] == result["batches"]
    assert series["pass_ended"] == [k > 0 and k % per_epoch == 0 for k in range(result["batches"])]
    # each step against the program's span of its batch (to the next batch's start, or to
    # the epoch's end: its callback runs before ModelCheckpoint's)
    ms, span = _step_ms(series), np.array(result["span_each"])
    for k in range(per_epoch - 1, result["batches"], per_epoch):
        assert abs(ms[k] - span[k]) <= 0.5 * np.median(span) + 1.0, (k, ms[k], span[k], np.median(span))
    assert ms.sum() == pytest.approx(span.sum(), rel=0.1)


def test_detection_over_lists_of_variable_size_images_through_log_every_steps_per_batch(tmp_path: Path) -> None:
    # torchvision's references/detection evaluate(): @torch.inference_mode(), collate_fn
    # tuple(zip(*batch)), MetricLogger.log_every (a generator around the loader) and a list
    # of images of different sizes per model call (resized and padded inside the model,
    # postprocessed per image with a host NMS loop). One step per batch, its fetch, forward
    # and the outputs' move to the CPU: the program's per-batch times
    light, series, result = _run(tmp_path, "detect_infer.py", "--device", "cpu", "--min-size", "128", "--max-size", "224",
                                  "--images", "32", "--batch-size", "2", "--width", "16", "--print-freq", "4",
                                  env={"OMP_NUM_THREADS": "1"})
    assert result["batches"] == 16
    assert light["step_name"] == FETCH
    assert light["steps_seen"] == result["batches"]
    # the batches the program timed (after its 2 warm-up batches), each from its fetch to
    # the next, against its own per-batch mean. The rate is not checked here: on this box
    # it is read wrong now and then (1e3/steps_per_s 0.82 of the program's in the suite
    # beside another worker, that bundle not kept; 0.61 under real-programs-check, where
    # steady_start left out 9 of 12 batches: the fixture test below)
    ms = _step_ms(series)
    assert ms[result["warmup"]:].mean() == pytest.approx(result["ms_per_step"], rel=0.1)


def test_streaming_encoder_chunk_loop_steps_per_chunk(tmp_path: Path) -> None:
    # WeNet's forward_chunk_by_chunk: the loop over chunks calls the encoder's forward_chunk
    # METHOD (no module call of the encoder), which calls the subsampling and each layer,
    # the attention and conv caches carried; a host CTC greedy step per chunk. No model
    # call marks the chunk: the step is the subsampling's call, once per chunk, whose calls
    # enclose the layers' (before: the first layer's instance, whose calls enclose the
    # other layer's), each up to the next (the chunk's work)
    light, series, result = _run(tmp_path, "stream_encode.py", "--device", "cpu", "--dim", "64", "--heads", "4", "--layers", "2",
                                  "--frames", "1200", "--chunk", "16", "--utterances", "3", "--vocab", "500",
                                  env={"OMP_NUM_THREADS": "1"})
    assert result["chunks_each"] == [19, 19, 19]
    assert light["step_name"] == "Conv2dSubsampling4.forward"
    assert light["steps_seen"] == result["chunks"]
    # the second utterance's chunks, each to the next subsampling call (its last: the
    # third's first, through the third's set-up, where the program's holds the second's
    # own), against the program's own time for them
    assert _step_ms(series)[19:38].sum() == pytest.approx(result["ms_each_utterance"][1], rel=0.15)
    rate = _steps_per_s(tmp_path)
    assert 1e3 / rate.value == pytest.approx(result["ms_per_step"], rel=0.15)


def test_background_thread_preprocessing_through_a_queue_steps_per_training_batch(tmp_path: Path) -> None:
    # prefetch_generator's BackgroundGenerator: a thread making each batch with numpy
    # (spectrograms) into a queue.Queue, the main thread's for loop a blocking get(); no
    # DataLoader; zero_grad / forward / backward / step per batch. One step per batch on the
    # main thread, the get() that waited for the producer inside it. The rate is not checked
    # here: on this box its steady state is read wrong now and then (the test below)
    light, series, result = _run(tmp_path, "prefetch_train.py", "--device", "cpu", "--batch", "16", "--batches", "12",
                                  "--epochs", "2", "--width", "16", "--log-every", "6", env={"OMP_NUM_THREADS": "1"})
    assert result["batches"] == 24
    assert light["step_name"] == "Optimizer.zero_grad#Adam.zero_grad" and light["step_thread"] == "main"
    assert light["steps_seen"] == result["batches"]
    # each from one zero_grad to the next (the last: its own end) holds the program's
    # batches but the first one's fetch and model set-up
    assert _step_ms(series)[1:].sum() == pytest.approx(sum(result["ms_each"][1:]), rel=0.1)


@pytest.mark.parametrize("fixture", ["prefetch-train-cpu-epochs", "detect-infer-cpu-loaded"])
def test_short_uneven_series_steady_state_is_not_their_last_steps(fixture: str) -> None:
    # Light-pass series of two of the programs above, kept as read on this box: the steady
    # state must not leave out most of a short series for a slow stretch in its middle
    # (prefetch_train.py: each epoch's producer-bound batches, the program's own, every
    # epoch; detect_infer.py: the box's load). The first batch or two may be warm-up.
    # Before: a slow stretch ending in the first half was a warm-up, and the start moved to
    # the next settled run: 19 of 24 steps left out (46.4 ms for the program's 65.8), 9 of 12
    # (93.6 ms for 153.1); a warm-up of most of the run is not one (steady.steady_start)
    from perfdoctor.analysis import steady

    d = json.loads((Path(__file__).parents[1] / "fixtures" / "light" / f"{fixture}.json").read_text())
    h, g, gs, ended = d["host_start_ns"], d["gpu_end_ns"], d["gpu_start_ns"], d.get("pass_ended")
    found = steady.series_steady_start(h, g, gs, None, ended)
    assert found.start <= 2
    rate = steady.steady_series(h, g, found.start, gs, None, ended).cadence.steps_per_s
    assert 1e3 / rate == pytest.approx(d["own_ms_per_step"], rel=0.15)


def test_tqdm_wrapped_segmentation_validation_steps_per_batch(tmp_path: Path) -> None:
    # for images, masks in tqdm(val_loader) under inference_mode, three passes (a bar each):
    # the fetch through tqdm's generator marks the batch; each holds the forward, the
    # upsampling and the host confusion matrix; the passes' ends are no step
    passes, per_pass = 3, 8
    light, series, result = _run(tmp_path, "seg_eval.py", "--device", "cpu", "--size", "64", "--batch", "4", "--images", "32",
                                  "--width", "8", "--passes", str(passes), env={"OMP_NUM_THREADS": "1"})
    assert result["batches"] == passes * per_pass
    assert light["step_name"] == FETCH
    assert light["steps_seen"] == result["batches"]
    ms = _step_ms(series)
    for k in range(1, passes):
        assert ms[k * per_pass:(k + 1) * per_pass].sum() == pytest.approx(result["ms_each_pass"][k], rel=0.15)
    rate = _steps_per_s(tmp_path)
    assert 1e3 / rate.value == pytest.approx(result["ms_per_step"], rel=0.15)


def test_ppo_steps_per_iteration_not_per_minibatch_update(tmp_path: Path) -> None:
    # CleanRL's ppo.py: the Agent has no forward (get_action_and_value calls self.actor and
    # self.critic), the rollout under no_grad, the update's minibatches each an optimizer
    # step. The step is the PPO iteration (rollout and update), as CleanRL's loop counts
    # iterations and the program times them (its SPS is env steps per iteration time)
    iters = 6
    light, series, result = _run(tmp_path, "ppo_train.py", "--device", "cpu", "--num-envs", "4", "--num-steps", "16",
                                  "--iterations", str(iters), "--update-epochs", "2", "--num-minibatches", "2",
                                  env={"OMP_NUM_THREADS": "1"})
    assert result["optimizer_steps"] == 4 * iters
    assert light["steps_seen"] == result["iterations"] == iters
    # its how says what the step is: the optimizer's 4 steps per iteration, its 6 iterations
    # (before: "(24x)" alone, the optimizer's steps)
    per = count(result["optimizer_steps"] / result["iterations"])
    assert f"({result['optimizer_steps']}x), {per} per iteration" in light["how"]
    assert f"{count(result['iterations'])} iterations" in light["how"]
    assert light["marks_per_step"] == 4
    assert _step_ms(series)[1:].mean() == pytest.approx(result["ms_per_iter"], rel=0.1)
    rate = _steps_per_s(tmp_path)
    assert 1e3 / rate.value == pytest.approx(result["ms_per_step"], rel=0.15)


def test_ppo_traced_pass_counts_iterations_not_optimizer_steps(tmp_path: Path) -> None:
    # The traced pass ticks once per occurrence of the step's range: the console said "torch
    # pass: 24 steps" for the light pass's 6, and --steps 2 traced 2 zero_grads, half an
    # iteration. Both now count iterations of 4 marks
    args = ("--device", "cpu", "--num-envs", "4", "--num-steps", "64", "--iterations", "6", "--update-epochs", "2", "--num-minibatches", "2")
    r = run_cli("run", "--collect", "torch", "--steps", "2", "--out", tmp_path, REAL / "ppo_train.py", *args, timeout=240,
                env={"OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    (bundle,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    light = json.loads((bundle / "manifest.json").read_text())["light_pass"]
    assert light["steps_seen"] == program_result(r.stdout)["iterations"] == 6 and light["marks_per_step"] == 4
    torch_pass = json.loads((bundle / "raw" / "torch.config.json").read_text())
    assert torch_pass["steps"] == 2 * 4
    said = r.stdout + r.stderr
    assert "torch pass: 6 steps" in said and "24 steps" not in said, said[-1500:]


def test_full_garbage_collections_between_batches_are_the_programs_time_not_pauses(tmp_path: Path) -> None:
    # A labelling script keeps a record per sample; Python's collector runs full collections
    # over them (75-160 ms each here, among ~8 ms batches) between two compiled forwards.
    # The pause rule read those gaps as time the program spent elsewhere: the batches summed
    # to 1,304 ms for the program's 1,607, the rate 7.9 ms per batch for its 10.4. 320
    # batches: two collections among them, as alone (with torch imported before the program
    # the light pass ran more of them in the loop; now as alone, one in 160 batches)
    light, series, result = _run(tmp_path, "predict_dump.py", "--device", "cpu", "--backend", "eager", "--samples", "81920",
                                  env={"OMP_NUM_THREADS": "1"})
    (bundle,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    collected = json.loads((bundle / "raw" / "light.json").read_text())["full_gcs"]
    assert collected and len(collected["start_ns"]) >= 2  # else nothing here is tested
    assert light["step_name"] == "OptimizedModule.forward" and light["steps_seen"] == result["batches"] == 320
    w = result["warmup"]
    assert _step_ms(series)[w:].sum() == pytest.approx(sum(result["ms_each"][w:]), rel=0.05)
    assert 1e3 / _steps_per_s(tmp_path).value == pytest.approx(result["ms_per_step"], rel=0.05)
    # uneven-steps' evidence says what made the slow steps slow: the collection in each, by
    # hand from the recorded collections and the step's span
    from perfdoctor.analysis.metrics import analyze
    from perfdoctor.rules.engine import evaluate, load_rules

    (finding,) = [f for f in evaluate(load_rules(()), analyze(load_trace(bundle))) if f.rule_id == "uneven-steps"]
    (ev,) = [e for e in finding.evidence if e.kind == "slow_untraced_steps"]
    assert ev.columns[-1] == "full GC ms"
    for step, ms, _, beyond, gc_ms in ev.rows[:2]:
        start, end = series["host_start_ns"][step], series["gpu_end_ns"][step]
        inside = sum(min(b, end) - max(a, start) for a, b in zip(collected["start_ns"], collected["end_ns"]) if a < end and b > start)
        assert gc_ms == pytest.approx(inside / 1e6, rel=0.01) and gc_ms == pytest.approx(beyond, rel=0.2)


@pytest.mark.parametrize("save_format", ["torch", "safetensors", "dcp"])
def test_checkpoints_saved_inside_steps_are_named_as_what_makes_them_slow(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory,
                                                                         save_format: str) -> None:
    # A pretraining-style loop saving a checkpoint (model, AdamW and scaler state) after every
    # 10th step: those steps are 2-5x the median. uneven-steps said to look at the data
    # loader, the garbage collector or swapping; now its evidence has each slow step's
    # save time (by hand below, from the recorded saves and the step's span) and its
    # checkpointing variant says to save less often or asynchronously. The same with the
    # model's weights saved by safetensors' save_file (as fine-tuning scripts and
    # transformers' Trainer save them), imported where the loop first saves, and with the
    # model's and optimizer's state saved by torch.distributed.checkpoint.save (torchtitan's;
    # its writer's own torch.save calls inside are not counted again): before, those saves
    # were not timed
    from perfdoctor.analysis.metrics import analyze
    from perfdoctor.rules.engine import PREDICATES, evaluate, light_values, load_rules
    from perfdoctor.rules.evidence import EVIDENCE

    light, series, result = _run(tmp_path, "amp_train.py", "--device", "cpu", "--dtype", "bfloat16", "--batch", "32", "--dim", "64",
                                  "--width", "512" if save_format == "torch" else "1024", "--depth", "4", "--steps", "40", "--warmup", "5",
                                  "--log-every", "20", "--save-every", "10", "--save-format", save_format,
                                  "--out-dir", str(tmp_path_factory.mktemp("ckpt")), env={"OMP_NUM_THREADS": "1"})
    (bundle,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    saves = json.loads((bundle / "raw" / "light.json").read_text())["saves"]
    assert len(saves["start_ns"]) == 4  # steps 9, 19, 29, 39, each once
    assert all(b <= a for a, b in zip(saves["start_ns"][1:], saves["end_ns"]))  # none inside another
    analysis = analyze(load_trace(bundle))
    values = light_values(analysis)
    assert values["slow_step_save_ratio"].value >= 0.5 and PREDICATES["checkpointing"][0](values)
    # an assertion, not an unpacking, so that the module's one rerun covers it: with two busy
    # loops beside it on the 2-core VM the saves explained 0.27-0.48 of the time beyond the
    # median in 4 of 4 runs (every step time-shared, 12-17 of 35 slow), and on the loaded CI
    # box uneven-steps once did not fire at all
    found = [f for f in evaluate(load_rules(()), analysis) if f.rule_id == "uneven-steps"]
    assert len(found) == 1, [f.rule_id for f in evaluate(load_rules(()), analysis)]
    (finding,) = found
    assert finding.title == "Uneven steps: the steps that save a checkpoint"
    assert "checkpoint" in finding.remediation.steps[0]
    if save_format == "torch":
        (ev,) = [e for e in finding.evidence if e.kind == "slow_untraced_steps"]
    else:
        # the weights alone, a third of torch.save's checkpoint: the slow steps hold ~0.13 of
        # the run, so uneven-steps (0.10) passed in one loaded CI run and collected no
        # evidence. The table it shows when it fails, read directly (dcp alike)
        ev = EVIDENCE["slow_untraced_steps"](analysis)
    assert ev.columns[-1] == "checkpoint save ms"
    slow = [row for row in ev.rows if row[-1]]
    assert len(slow) >= 2
    for step, ms, saved in ((row[0], row[1], row[-1]) for row in slow):  # a full GC ms column too, where one ran
        start, end = series["host_start_ns"][step], series["gpu_end_ns"][step]
        inside = sum(min(b, end) - max(a, start) for a, b in zip(saves["start_ns"], saves["end_ns"]) if a < end and b > start)
        assert saved == pytest.approx(inside / 1e6, rel=0.01) and saved <= ms


def test_ppo_traced_whole_reads_one_step_per_iteration(tmp_path: Path) -> None:
    # The same program traced whole on the CPU, read by analyze: its 16 rollout steps per 4
    # minibatch updates held 70 % of the trace's ops between two zero_grads, under the 75 %
    # that tells an inner loop of optimizer steps, because the CPU runs each update's
    # backward on the loop's thread (a GPU on autograd's): 24 steps for 6 iterations. Its
    # forward ops alone, as the light pass counts calls, hold 80 %: each iteration is a step
    steps, ms, traced = _traced(tmp_path, "ppo_train.py", "--device", "cpu", "--num-envs", "4", "--num-steps", "16",
                                "--iterations", "6", "--update-epochs", "2", "--num-minibatches", "2")
    assert steps.name.startswith("Optimizer.zero_grad#") and steps.count == traced["iterations"] == 6
    assert ms == pytest.approx(traced["ms_each"], rel=0.1)  # the program's own timer, iteration by iteration


def test_a_compiled_training_step_decorated_with_arguments_is_one_step_per_call(tmp_path: Path) -> None:
    # The PyTorch 2 recipe: forward, backward, optimizer step and zero_grad in one function
    # under @torch.compile(backend=...). torch's decorator factory calls torch.compile again
    # (through the light pass's wrapper): each call was two nested ranges, 48 steps read for
    # 24 calls, each half a call long. One step per call, as the program times them
    steps, warmup = 24, 4
    light, series, result = _run(tmp_path, "compiled_train_step.py", "--device", "cpu", "--backend", "eager", "--batch", "64",
                                  "--dim", "128", "--width", "512", "--steps", str(steps), "--warmup", str(warmup),
                                  env={"OMP_NUM_THREADS": "1"})
    assert light["step_name"] == "torch.compile: main.<locals>.train_step"  # its __qualname__
    assert light["steps_seen"] == result["steps"] == steps
    # each from its call to the next: the program's call, and the next batch's two randn
    assert _step_ms(series)[warmup:-1].sum() == pytest.approx(sum(result["ms_each"][warmup:-1]), rel=0.15)
    rate = _steps_per_s(tmp_path)
    assert 1e3 / rate.value == pytest.approx(result["ms_per_step"], rel=0.15)


def test_nanogpt_loop_steps_per_iteration_its_evaluations_left_out(tmp_path: Path) -> None:
    # nanoGPT's train.py: no DataLoader, 4 micro-steps per optimizer step, estimate_loss()
    # under no_grad at the top of every 10th iteration. The step is the iteration; the one
    # after each evaluation held it (30.2 ms for the program's 19.9, the rate 5 % slow): it
    # now begins at its first training forward, and a pass ended before it
    iters = 30
    light, series, result = _run(tmp_path, "nanogpt_train.py", "--device", "cpu", "--block", "32", "--batch", "8", "--vocab", "256",
                                  "--dim", "64", "--heads", "4", "--layers", "2", "--max-iters", str(iters), env={"OMP_NUM_THREADS": "1"})
    assert light["step_name"] == "Optimizer.zero_grad#AdamW.zero_grad"
    assert light["steps_seen"] == result["iters"] == iters
    assert [k for k, e in enumerate(series["pass_ended"]) if e] == [10, 20]  # the evaluations after the first
    ms, own = _step_ms(series), np.array(result["ms_each"])
    assert ms[[10, 20]].sum() == pytest.approx(own[[10, 20]].sum(), rel=0.15)
    assert ms[1:].sum() == pytest.approx(own[1:].sum(), rel=0.1)
    # the rate is over the steady steps: against the program's times of the same iterations.
    # Against its mean of all but the first, it failed twice in a loaded full-suite run (28.6
    # against 45.3 ms): the early iterations, slowed by the other test worker, were left out
    # as warm-up, and the rest ran faster once it was done
    rate = _steps_per_s(tmp_path)
    steady = own[max(1, light["steady_start"]):]
    assert 1e3 / rate.value == pytest.approx(steady.mean(), rel=0.1), (rate.note, light["steady_start"], own.round(1).tolist())


def test_nanogpt_traced_whole_leaves_its_evaluations_out_of_the_steps(tmp_path: Path) -> None:
    # The same loop traced whole, read by analyze: a trace has no grad modes, but the
    # evaluation's forwards come before the iteration's backward with no backward of their
    # own. The iterations holding estimate_loss() read 54.6 and 51.7 ms for 27.6 and 24.0
    steps, ms, traced = _traced(tmp_path, "nanogpt_train.py", "--device", "cpu", "--block", "32", "--batch", "8",
                                "--vocab", "256", "--dim", "64", "--heads", "4", "--layers", "2", "--max-iters", "30")
    assert steps.name == "Optimizer.zero_grad#AdamW.zero_grad" and steps.count == traced["iters"] == 30
    assert ms == pytest.approx(traced["ms_each"], rel=0.1)  # the program's own timer, iteration by iteration


def _free_port() -> str:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


DDP_ARGS = ("--device", "cpu", "--batch", "32", "--dim", "128", "--width", "256", "--classes", "10", "--batches", "20", "--epochs", "2")


def test_ddp_training_steps_per_batch_not_per_ddp_forward(tmp_path: Path) -> None:
    # torchrun's script in one process (gloo): DistributedDataParallel's forward runs inside
    # torch's own "DistributedDataParallel.forward" range, which ranked as a user's range
    # ahead of the training loop: 40 steps of the forward alone (p50 0.11 ms of a 0.6 ms
    # batch). One step per batch, as the program times them
    light, series, result = _run(tmp_path, "ddp_train.py", *DDP_ARGS, env={"OMP_NUM_THREADS": "1", "MASTER_PORT": _free_port()})
    assert result["batches"] == 40 and result["world_size"] == 1
    assert light["step_name"] == FETCH
    assert light["steps_seen"] == result["batches"]
    # each from its fetch to the next (the last: to its own end); the program's from the
    # batch before's end: the first (its clock started before the loader) left out
    assert _step_ms(series)[1:].sum() == pytest.approx(sum(result["ms_each"][1:]), rel=0.1)


def test_ddp_training_traced_whole_steps_per_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the same script under a plain torch.profiler, read by analyze: the same choice
    monkeypatch.setenv("MASTER_PORT", _free_port())
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    traced = trace_program(tmp_path / "trace.json", "ddp_train.py", *DDP_ARGS)
    steps = find_steps(load_trace(tmp_path / "trace.json"))
    assert steps.name == FETCH, steps.how
    assert steps.count == traced["batches"] == 40


def test_ddp_forward_benchmark_steps_are_the_loop_iteration(tmp_path: Path) -> None:
    # A DDP model's forward benchmarked (no DataLoader, no optimizer): the step is DDP's own
    # forward range, which timed the forward alone: p50 0.67 ms for the program's 0.78 per
    # batch (its input's creation and the host work on its result left out). Timed as the
    # loop iteration, as a module call is
    light, series, result = _run(tmp_path, "ddp_infer.py", "--device", "cpu", "--batches", "60",
                                 env={"OMP_NUM_THREADS": "1", "MASTER_PORT": _free_port()})
    assert light["step_name"] == "DistributedDataParallel.forward" and light["how"].endswith("timed as the loop iteration: from one occurrence to the next")
    assert light["steps_seen"] == result["batches"] == 60
    w = result["warmup"]
    # each from its forward to the next (the program's from its input's creation: the same time, shifted)
    assert _step_ms(series)[w:-1].sum() == pytest.approx(sum(result["ms_each"][w + 1 :]), rel=0.05)
    assert 1e3 / _steps_per_s(tmp_path).value == pytest.approx(result["ms_per_step"], rel=0.1)


def test_two_stage_ocr_steps_per_page_not_per_recognised_line(tmp_path: Path) -> None:
    # A text detector once per page, then the recogniser once per line found (1-6 a page),
    # both called from the loop: the most frequent class was the step, one per line (105
    # steps for 30 pages, each a line's recognition). The detector's calls enclose the
    # recogniser's: one step per page, the page's lines inside it
    light, series, result = _run(tmp_path, "ocr_pipeline.py", "--device", "cpu", "--pages", "30", env={"OMP_NUM_THREADS": "1"})
    assert light["step_name"] == "TextDetector.forward" and "enclose" in light["how"]
    assert light["steps_seen"] == result["pages"] == 30 and result["lines"] > 30
    w = result["warmup"]
    # each from its detection to the next (the page's image made before it: the same work, shifted by that)
    assert _step_ms(series)[w:-1].sum() == pytest.approx(sum(result["ms_each"][w:-1]), rel=0.05)
    assert 1e3 / _steps_per_s(tmp_path).value == pytest.approx(result["ms_per_step"], rel=0.1)


def test_hand_written_kv_cache_decode_with_eos_stop_steps_per_forward(tmp_path: Path) -> None:
    # greedy decoding by hand around LlamaForCausalLM: a left-padded batch, a prefill, then
    # `while True` feeding one token per sequence back with past_key_values (a DynamicCache)
    # and the mask grown, stopping when every sequence has produced EOS: batches of 7, 21,
    # 32 (the limit) and 12 forwards. One step per forward, the prefill included. Each
    # batch's forwards, each up to the next, hold its own time but for each batch's last,
    # cut at its call's end by the pause after it (the next batch's set-up); as for
    # hf_generate.py, a preempted gap between two forwards on this loaded box (4.5-14 ms
    # among 0.6 ms forwards, seen in the program alone with gc disabled too) reads as a
    # pause and ends that step at its call, so the lower bound is loose (0.84 of batch 1
    # seen); the step's name and count are what this test is for. Above: a batch's last step
    # runs to the next batch's first call where the set-up between them is too short to
    # read as a pause (+2.4 % seen in the full suite)
    light, series, result = _run(tmp_path, "hf_manual_decode.py", "--device", "cpu", "--layers", "2", "--dim", "64", "--heads", "4",
                                  "--kv-heads", "2", "--ffn-dim", "128", "--vocab", "256", "--max-new-tokens", "32",
                                  "--batches", "3", env={"OMP_NUM_THREADS": "1"})
    assert result["forwards_each"] == [7, 21, 32, 12]
    assert light["step_name"] == "LlamaForCausalLM.forward"
    assert light["steps_seen"] == result["warmup_forwards"] + result["forwards"]
    ms = _step_ms(series)
    end = 0
    for n, own in zip(result["forwards_each"], result["ms_each_batch"]):
        assert 0.5 * own < ms[end:end + n].sum() <= 1.1 * own
        end += n


def test_mixture_of_experts_generate_steps_per_forward(tmp_path: Path) -> None:
    # transformers' MixtralForCausalLM (8 experts, 2 a token: the router picks them per token,
    # so the experts' calls vary from token to token) under generate: one step per forward,
    # the prefill included, as for the dense model
    tokens, generations = 16, 2
    light, series, result = _run(tmp_path, "moe_generate.py", "--device", "cpu", "--layers", "2", "--dim", "64", "--heads", "4",
                                  "--kv-heads", "2", "--ffn-dim", "128", "--vocab", "256", "--tokens", str(tokens),
                                  "--generations", str(generations), env={"OMP_NUM_THREADS": "1"})
    assert light["step_name"] == "MixtralForCausalLM.forward"
    assert light["steps_seen"] == (generations + 1) * tokens == (generations + 1) * result["tokens"] / generations
    # the timed generates' forwards, each up to the next (each generate's last: its own end),
    # against the program's time for them (generate's set-up before its first forward and
    # after its last is outside the steps; loose below for a preempted gap read as a pause)
    own = result["ms_per_token"] * result["tokens"]
    assert 0.5 * own < _step_ms(series)[tokens:].sum() <= 1.02 * own


def test_tutorial_translation_greedy_decode_steps_per_token_not_per_decoder_call(tmp_path: Path) -> None:
    # PyTorch's nn.Transformer translation tutorial: per sentence model.encode, then per token
    # model.decode (a method, not forward: no module call spans the token) on the whole
    # prefix, model.generator, torch.max, .item(). The token embedding's calls enclose the
    # rest of each iteration (the decoder, the generator): one step per token, plus one per
    # sentence for its encode (the source's embedding is the same class)
    light, series, result = _run(tmp_path, "translate_greedy.py", "--device", "cpu", "--dim", "64", "--heads", "4", "--layers",
                                  "2", "--ffn", "128", "--vocab", "500", "--sentences", "6", env={"OMP_NUM_THREADS": "1"})
    assert light["step_name"] == "TokenEmbedding.forward" and "enclose" in light["how"]
    each = result["tokens_each"]
    assert light["steps_seen"] == sum(each) + len(each)
    # the timed sentences' steps (an encode, then its tokens), each up to the next, add up to
    # the program's time for each sentence
    ms = _step_ms(series)
    end = sum(n + 1 for n in each[: result["warmup"]])
    for n, own in zip(each[result["warmup"]:], result["ms_each"]):
        assert 0.9 * own < ms[end:end + n + 1].sum() <= 1.05 * own
        end += n + 1


def test_aoti_package_calls_are_the_step(tmp_path: Path) -> None:
    # PyTorch's AOTInductor docs: torch.export, aoti_compile_and_package, aoti_load_package,
    # then the loaded model called per batch. It is no nn.Module and its calls run compiled
    # C++: before, "no step seen". Its calls are the step, timed as the loop iteration (the
    # next batch's input made between two calls: the program times the call alone)
    light, series, result = _run(tmp_path, "aoti_infer.py", "--device", "cpu", "--width", "256", "--batch", "8", "--iters", "40",
                                  "--package", str(tmp_path / "mlp.pt2"), env={"OMP_NUM_THREADS": "1"})
    assert light["step_name"] == "AOTInductor: model #1"
    assert light["steps_seen"] == result["warmup"] + result["iters"]
    ms, own = _step_ms(series)[result["warmup"]:-1], np.array(result["ms_each"][:-1])
    assert own.sum() <= ms.sum() <= 2 * own.sum()


def test_a_step_that_waits_for_a_process_pool_says_so(tmp_path: Path) -> None:
    # A training loop fed by ProcessPoolExecutor.map (log-mel features in numpy): the step's
    # thread blocks on the pool's futures while the work runs in processes no trace holds.
    # Before, the CPU breakdown called that time "in no operator (Python between ops)" and
    # advised torch.compile; the traced pass marks the waits (Condition.wait), so the time
    # is the program's own wait for the pool, told apart from the Python between operators
    iterations = 16
    r = run_cli("run", "--collect", "torch", "--out", tmp_path, REAL / "pool_train.py", "--device", "cpu", "--batch", "16",
                "--workers", "2", "--iters", str(iterations), timeout=240, env={"OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    traced = program_results(r.stdout)[-1]  # the torch pass's own timer
    (bundle,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    light = json.loads((bundle / "manifest.json").read_text())["light_pass"]
    assert light["steps_seen"] == iterations
    view = diagnose(bundle, warnings=False).analysis.cpu
    assert view is not None
    # the traced steps' waits against the program's own time in pool.map. That also holds
    # the submitting and the collecting, on a CPU or waiting for one: ~2.4 ms on a CPU of
    # 9 ms here, and on the loaded CI box the wait read 6.72 ms of an 11.03 ms pool.map.
    # The traced waits hold some of those (a woken thread waits for a CPU inside its wait),
    # so the program's own time in pool.map bounds them from above, and less all of those
    # from below (quiet: 8.6 ms between 5.0 and 9.0; three busy loops beside it: 15.7-19.2 ms
    # between 11.2-14.0 and 18.5-20.6)
    wall = traced["wait_ms_per_step"]
    blocked = wall - traced["busy_ms_per_step"] - traced["runnable_ms_per_step"]
    assert 0.8 * blocked <= view.waits_ms <= 1.1 * wall, (view.waits_ms, traced)
    assert view.waits_ms + view.outside_ops_ms <= view.mean_ms
    kinds = [o.kind for o in view.observations]
    assert "waits" in kinds and "outside-ops" not in kinds, [(o.kind, o.evidence) for o in view.observations]


def test_a_loop_paced_to_a_frame_rate_steps_per_frame_not_per_period(tmp_path: Path) -> None:
    # A real-time demo: per frame a capture, the forward, .item(), then time.sleep until the
    # next frame is due (30 fps). Before, each step ran to the next forward, the sleep with
    # it: p50 33.3 ms for frames the program processed in 1.3 ms (a GPU run's report would
    # fail p99 at the frame period and call the sleep host overhead). The sleep is a wait now
    # (record/bootstrap/waits.py): each step is a frame's work, and the rate says the rest
    frames = 60
    r = run_cli("run", "--collect", "torch", "--out", tmp_path, REAL / "paced_infer.py", "--device", "cpu", "--size", "96",
                "--frames", str(frames), timeout=240, env={"OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    result = program_result(r.stdout)
    (bundle,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    light = json.loads((bundle / "manifest.json").read_text())["light_pass"]
    assert light["step_name"] == "Sequential.forward" and light["steps_seen"] == frames
    series = json.loads((bundle / "raw" / "light.json").read_text())["series"][light["step_name"]]
    # each step from the thread's return from the sleep (the next frame's capture) to the next
    # sleep: the frames the program timed (print and bookkeeping aside), the first left out
    ms, own = _step_ms(series)[1:], np.array(result["ms_each"][1:])
    assert np.median(ms) == pytest.approx(np.median(own), rel=0.15, abs=0.1)
    assert ms.sum() == pytest.approx(own.sum(), rel=0.15)
    assert np.median(ms) < 0.25 * 1e3 / 30  # not the frame period
    rate = diagnose(bundle, warnings=False).analysis.metrics["steps_per_s"]
    assert "in time.sleep left out" in rate.note
    with_waits = float(re.search(r"with them ([\d.]+) /s", rate.note).group(1))
    assert with_waits == pytest.approx(result["fps"], rel=0.05)
    # The traced pass's window opens without stalling the program: the process's first
    # profiler start (Kineto's load, ~1 s here) came inside a step, and one frame of the
    # traced pass took 0.97-1.06 s among ~1.5 ms ones. It is made before the program now
    traced = program_result((bundle / "raw" / "torch.log").read_text())
    assert len(traced["ms_each"]) == frames and max(traced["ms_each"]) < 300, sorted(traced["ms_each"])[-3:]


def _fed_loop(tmp_path: Path, program: str, step: str, batches: int, *args: str) -> tuple[dict, np.ndarray, np.ndarray, Diagnosis]:
    """A loop fed by a slower producer, under perfdoctor run with one intra-op thread
    (torch's spinning OpenMP threads are no producer's work, and a GPU process has none):
    one step per batch, the producer worked during most of the step thread's waits, and
    steps_per_s is the program's mean. (the program's RESULT, the light pass's step ms
    after the fourth, the program's batch ms from the fifth (each step runs from one
    forward to the next: shifted by the part of an iteration before the forward), the
    diagnosis)."""
    r = run_cli("run", "--collect", "torch", "--out", tmp_path, REAL / program, "--device", "cpu", "--batches", str(batches), *args,
                timeout=240, env={"OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    result = program_result(r.stdout)
    (bundle,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    light = json.loads((bundle / "manifest.json").read_text())["light_pass"]
    assert light["step_name"] == step and light["steps_seen"] == batches == result["batches"]
    raw = json.loads((bundle / "raw" / "light.json").read_text())
    series = raw["series"][step]
    worked = [w for t, w in zip(raw["waits"]["tid"], raw["waits"]["worked"]) if t == series["tid"][0]]
    assert len(worked) >= batches // 4 and 2 * sum(worked) >= len(worked), worked  # most of the step thread's waits
    d = diagnose(bundle, warnings=False)
    assert 1e3 / d.analysis.metrics["steps_per_s"].value == pytest.approx(result["ms_per_step"], rel=0.15)
    return result, _step_ms(series)[3:-1], np.array(result["ms_each"][4:]), d


def test_an_ensemble_fanned_out_to_a_thread_pool_steps_once_per_batch(tmp_path: Path) -> None:
    # four LSTM classifiers, each called on the batch by ThreadPoolExecutor.map. The light pass
    # chose one instance's calls (they enclose the others'), but timed them as a pool of
    # workers' calls, each to its own thread's next: p50 0.93 ms for the program's 2.3 ms per
    # batch. Its calls are the loop's iterations whichever pool thread runs them. The traced
    # pass failed ("the steps ran on a worker thread and no trace was started on the main
    # thread"): the calls off the main thread were counted under the class's name
    r = run_cli("run", "--collect", "torch", "--out", tmp_path, REAL / "ensemble_threads.py", "--device", "cpu", "--batches", "40",
                timeout=240, env={"OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    result = program_result(r.stdout)
    (bundle,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    manifest = json.loads((bundle / "manifest.json").read_text())
    light = manifest["light_pass"]
    assert re.fullmatch(r"LSTMClassifier#\d\.forward", light["step_name"]) and light["steps_seen"] == 40, light["how"]
    series = json.loads((bundle / "raw" / "light.json").read_text())["series"][light["step_name"]]
    assert len(set(series["tid"])) > 1 and light["step_thread"] == "worker"  # the calls ran on several pool threads
    ms, own = _step_ms(series)[3:-1], np.array(result["ms_each"][4:])
    assert np.median(ms) == pytest.approx(np.median(own), rel=0.15)
    assert ms.sum() == pytest.approx(own[: ms.size].sum(), rel=0.15)
    assert manifest["collectors"]["torch"]["status"] == "ok"
    assert diagnose(bundle, warnings=False).analysis.cpu.steps >= 10  # the trace's steps, one per batch


def test_sliding_window_inference_steps_once_per_image(tmp_path: Path) -> None:
    # mmsegmentation's slide_inference: 9 windows per image, the model called on each with
    # 33-40 us of stitching between them and ~1.9 ms between images (the division, argmax,
    # the mask to the host). Read as 270 steps of one window, p50 0.257 ms, for the
    # program's 4.28 ms per image: the period is plain in the gaps, but a block of 9 calls
    # looked like timeit's number=9 block of one benchmarked call. The calls' inputs tell
    # them apart: 9 windows of one image's storage, then the next image's
    light, series, result = _run(tmp_path, "slide_infer.py", "--device", "cpu", "--size", "160", "--crop", "64", "--stride", "48",
                                 "--images", "30", env={"OMP_NUM_THREADS": "1"})
    assert result["windows"] == 9
    assert light["steps_seen"] == result["images"] and light["module"]["calls_per_step"] == 9, light["how"]
    assert "9 times on windows of one input" in light["how"] and light["module"]["windows"] is True
    ms, own = _step_ms(series)[3:-1], np.array(result["ms_each"][3:-1])
    assert np.median(ms) == pytest.approx(np.median(own), rel=0.15)
    assert ms.sum() == pytest.approx(own.sum(), rel=0.15)


@pytest.mark.parametrize("inferer", ["function", "sliding", "patch"])
def test_monai_sliding_window_inference_steps_once_per_volume(tmp_path: Path, inferer: str) -> None:
    # MONAI's tutorials: sliding_window_inference(inputs, roi_size, sw_batch_size, model) per
    # volume, or a SlidingWindowInferer, or a PatchInferer. MONAI gathers sw_batch_size windows
    # per model call by torch.cat: no call's input is a view of the volume, and 84 steps of
    # one window batch each read for 12 volumes of 7 calls. Their calls are windows of one input now
    pytest.importorskip("monai")
    light, series, result = _run(tmp_path, "monai_seg.py", "--device", "cpu", "--size", "64", "--roi", "32", "--volumes", "12",
                                 "--channels", "8,16,32", "--inferer", inferer, env={"OMP_NUM_THREADS": "1"})
    assert result["calls"] == 7  # 27 windows of a 64^3 volume, 4 a call
    assert light["steps_seen"] == result["volumes"] and light["module"]["calls_per_step"] == 7, light["how"]
    assert light["step_name"] == "UNet.forward" and light["module"]["windows"] is True
    ms, own = _step_ms(series)[2:-1], np.array(result["ms_each"][2:-1])
    assert np.median(ms) == pytest.approx(np.median(own), rel=0.15)
    assert ms.sum() == pytest.approx(own.sum(), rel=0.15)


def test_a_loop_fed_by_a_producer_thread_steps_at_the_producers_pace(tmp_path: Path) -> None:
    # A background thread decodes batches into a queue.Queue; the main loop takes each off
    # the queue and runs the forward. The producer is the slower side: each batch waits on
    # the queue. Before, that wait ended the step as a server's idle wait does: p50 0.67 ms
    # and 1,468 steps/s for a loop that ran at 22 ms per batch. The rest of the process works
    # during it (the producer: ~1 CPU), so it is the step's own wait for its input now
    _, ms, own, d = _fed_loop(tmp_path, "queue_infer.py", "Sequential.forward", 40, "--batch", "8", "--size", "128")
    assert np.median(ms) == pytest.approx(np.median(own), rel=0.15)
    assert ms.sum() == pytest.approx(own.sum(), rel=0.15)
    # the traced steps hold the waits too: the CPU breakdown names them
    assert "waits" in [o.kind for o in d.analysis.cpu.observations]


def test_a_loop_fed_by_a_process_pool_steps_at_the_pools_pace(tmp_path: Path) -> None:
    # multiprocessing.Pool.imap tokenizes the documents; the main loop scores each batch. The
    # pool is the slower side: each batch waits in imap's next() (a Condition.wait). The
    # work is in the pool's processes, so this process used no CPU meanwhile and the waits
    # read as idle: p50 0.43 ms and 2,275 steps/s for a loop at 10.4 ms per batch. The live
    # children's CPU time counts toward the wait now. Three workers deliver their batches
    # together: one batch in three waits long for the next burst. Those waits read as pauses
    # between iterations (3x the usual time between calls), so each such step ended at its
    # forward: the sum 5.9-15 ms for the program's 153-179 over five runs (on the H100, 4
    # workers: p50 0.70 ms for the program's 39 ms mean); they are the loop's own now
    # (steady.fed_between), as the program's timer counts them
    _, ms, own, d = _fed_loop(tmp_path, "pool_classify.py", "TextClassificationModel.forward", 40, "--batch", "16", "--workers", "3")
    # the pool's results come in bursts (0.1-25 ms a batch): the sum, not the median
    assert ms.sum() == pytest.approx(own.sum(), rel=0.15)
    # the traced window holds the waits too (before the profiler was started ahead of the
    # program, its first start, ~1 s inside the first traced step, let imap's unbounded
    # read-ahead make every batch meanwhile: the window held no wait), and the CPU
    # breakdown sends the pool's work elsewhere
    (waits,) = [o for o in d.analysis.cpu.observations if o.kind == "waits"]
    assert "multiprocessing Pool" in waits.advice


def test_a_cpu_servers_idle_waits_stay_idle_while_torchs_openmp_threads_spin(tmp_path: Path) -> None:
    # threaded_server.py with two intra-op threads: after each forward torch's OpenMP threads
    # spin, so the worker's wait for the next request used half a CPU of the process (85 of
    # 126 waits), which read as a producer's work and put the idle time back in the steps (p99
    # 8.7 ms for 0.5 ms requests). A wait is the step's only where another Python thread was
    # running as it began: the request generator sleeps in one
    light, series, result = _run(tmp_path, "threaded_server.py", "--device", "cpu", "--threads", "2", "--requests", "60",
                                 "--width", "512", "--rate", "100")
    (bundle,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    waits = json.loads((bundle / "raw" / "light.json").read_text())["waits"]
    # the worker's own (the request generator's sleeps, while the worker computes, did work beside them)
    worker = [w for t, w in zip(waits["tid"], waits["worked"]) if t in set(series["tid"])]
    assert len(worker) >= 10 and sum(worker) <= len(worker) // 10, worker  # fewer where requests queue up (19 of 60 at 200/s on the loaded CI box)
    ms = _step_ms(series)[result["warmup"]:]
    own = np.array(result["ms_each"][result["warmup"]:])
    assert np.median(ms) == pytest.approx(np.median(own), rel=0.15, abs=0.1)
    assert np.percentile(ms, 90) < 3 * np.percentile(own, 90) + 0.5  # no idle wait of ~5 ms in the steps


def test_yolo_predict_steps_per_frame_though_the_model_calls_its_own_forward_when_built(tmp_path: Path) -> None:
    # Ultralytics: DetectionModel.__init__ runs self.forward(zeros) directly, so each of its
    # layers is an outermost module call once before any frame (five Conv layers: five calls
    # of one class), then per frame the predictor's AutoBackend wraps the model. The scout
    # once narrowed to the layers there: 8 C2f calls per frame read as steps, and the torch
    # pass, which finds C2f at depth 2, traced no step at all
    r = run_cli("run", "--collect", "torch", "--out", tmp_path, REAL / "yolo_predict.py", "--device", "cpu", "--imgsz", "128",
                "--frames", "30", "--warmup", "5", timeout=240)
    assert r.returncode == 0, r.stderr[-2000:]
    (bundle,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    manifest = json.loads((bundle / "manifest.json").read_text())
    light, result = manifest["light_pass"], program_result(r.stdout)
    assert light["step_name"] == "AutoBackend.forward"
    assert light["steps_seen"] == result["warmup"] + result["frames"]
    # each step from one frame's model call to the next: the frame's own time, phase-shifted
    # by a preprocess (the last frame's step ends with its call)
    series = json.loads((bundle / "raw" / "light.json").read_text())["series"][light["step_name"]]
    ms, own = _step_ms(series)[result["warmup"]:-1], np.array(result["ms_each"][result["warmup"]:-1])
    assert np.isclose(ms, own, rtol=0.1, atol=1.0).mean() >= 0.75, (ms, own)
    # the traced pass marks the same calls and traces its window of them
    assert manifest["collectors"]["torch"]["status"] == "ok", manifest["collectors"]["torch"]
    assert manifest["passes"][1]["steps"] >= 10


def test_d2l_traced_pass_counts_the_training_batches_as_the_light_pass_does(tmp_path: Path) -> None:
    # the traced passes' step ticks (the progress line, the pass's step count) counted every
    # fetch of a loop with no optimizer range: 48 for 40 training batches and 8 test batches
    # (fastai's own Adam: "293 of 248 steps"); each fetch now ticks at its iteration's backward
    r = run_cli("run", "--collect", "torch", "--out", tmp_path, REAL / "d2l_train.py", "--model", "module", *D2L, timeout=240,
                env={"OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    (bundle,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    manifest = json.loads((bundle / "manifest.json").read_text())
    traced = program_result((bundle / "raw" / "torch.log").read_text())
    assert manifest["light_pass"]["steps_seen"] == traced["batches"] == 40
    assert manifest["passes"][1]["steps"] == 40  # the torch pass's ticks
    assert manifest["collectors"]["torch"]["status"] == "ok"
