"""A training loop that validates each epoch (PyTorch's ImageNet example: ``for epoch:
train(loader); validate(val_loader)``), traced by the real torch profiler on CPU: ``analyze``
counts its training iterations only, as ``perfdoctor run``'s light pass does
(``analysis.steps.training_loop``). The validation batches' fetches carry the same range name
(``enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__``), and so does each fetch that
raised StopIteration; neither begins a training iteration. The same for an evaluation-only loop
and for gradient accumulation's optimizer steps, on whole-program traces of the real programs
(tests/programs/real), read against their own facts."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import trace_program

torch = pytest.importorskip("torch")

from perfdoctor.analysis.steps import find_steps  # noqa: E402
from perfdoctor.pipeline import load_trace  # noqa: E402
from perfdoctor.text import count  # noqa: E402

FETCH = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def _train_validate(path: Path, epochs: int = 2, batches: int = 6, val_batches: int = 4, start_at: int = 2, stop_at: int = 1) -> int:
    """Runs the loop and writes the trace of a window of it: the profiler starts in epoch 0's
    training batch ``start_at`` (after its fetch) and stops in the last epoch's validation batch
    ``stop_at``. Returns the program's own count of the training iterations in the window that
    the window also ends (each ends at the next fetch: the next batch's, or the one that raised
    StopIteration at the end of the pass, both traced)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def loader(n: int) -> torch.utils.data.DataLoader:
        data = torch.utils.data.TensorDataset(torch.randn(n * 8, 32), torch.randint(0, 10, (n * 8,)))
        return torch.utils.data.DataLoader(data, batch_size=8, shuffle=True)

    train_loader, val_loader = loader(batches), loader(val_batches)
    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    tracing, traced = False, 0
    for epoch in range(epochs):
        model.train()
        for i, (x, y) in enumerate(train_loader):
            if epoch == 0 and i == start_at:
                prof.start()
                tracing = True
            elif tracing:
                traced += 1  # began at a fetch in the window; its end (the next fetch) is in it too
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            for j, (x, y) in enumerate(val_loader):
                model(x).argmax(1)
                if epoch == epochs - 1 and j == stop_at:
                    prof.stop()
                    tracing = False
    prof.export_chrome_trace(str(path))
    return traced


def test_a_validating_training_loop_steps_on_its_training_iterations_only(tmp_path: Path) -> None:
    path = tmp_path / "train_eval.json"
    trained = _train_validate(path)
    # the window: training batches 3-5 of epoch 0, 6 of epoch 1 (9), and, fetched with the same
    # range name, 2 ends of a training pass, 4 + 2 validation batches and 1 end of a validation pass
    assert trained == 9
    s = find_steps(load_trace(path))
    assert s.name == FETCH
    assert s.count == trained  # was 17: every fetch in the window but the last
    assert f"({trained}x)" in s.how  # was "(18x)"
    assert s.how.startswith("the loop iteration over a DataLoader: ")
    # each step, a fetch to the next, holds its batch's one optimizer step
    doc = json.loads(path.read_text())
    opt = sorted(e["ts"] * 1e3 for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("name") == "Optimizer.step#SGD.step")
    held = np.searchsorted(opt, s.table["host_end_ns"].to_numpy(), side="right") - np.searchsorted(opt, s.table["host_start_ns"].to_numpy())
    assert held.tolist() == [1] * trained


def _fetches_held(path: Path, table) -> list[int]:
    """Per step, the data loader fetches that start inside it."""
    doc = json.loads(path.read_text())
    f = np.sort([e["ts"] * 1e3 for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("name") == FETCH])
    return (np.searchsorted(f, table["host_end_ns"].to_numpy(), side="right") - np.searchsorted(f, table["host_start_ns"].to_numpy())).tolist()


def test_an_evaluation_loop_over_several_passes_steps_on_its_batches_only(tmp_path: Path) -> None:
    # 3 passes of 6 batches, no optimizer: 21 fetches, each pass's last raised StopIteration.
    # A trace does not say which did; the iteration one would begin holds nothing but the next
    # pass's iterator creation (its seed draw), no model work: it fetched no batch. Before: 20
    # steps, two of them each pass's end to the next pass's first fetch.
    path = tmp_path / "eval.json"
    result = trace_program(path, "eval_loop.py", "--passes", "3", "--batches", "6", "--width", "256")
    assert (result["batches"], result["passes"]) == (18, 3)
    s = find_steps(load_trace(path))
    assert s.name == FETCH
    assert s.count == result["batches"]
    assert f"({result['batches']}x)" in s.how
    assert _fetches_held(path, s.table) == [1] * result["batches"]
    # each from its fetch to the next: the program's batch times (each from the previous batch's end)
    ms = (s.table["host_end_ns"] - s.table["host_start_ns"]).to_numpy() / 1e6
    assert ms.mean() == pytest.approx(result["ms_per_batch"], rel=0.1)


@pytest.mark.parametrize("max_iters", [6, None])
def test_gradient_accumulation_with_validation_steps_per_optimizer_step_never_across_it(tmp_path: Path, max_iters: int | None) -> None:
    # train(); validate() each epoch, the optimizer every 3rd batch, each epoch ended by
    # `break` or by its loader's end: each optimizer step is its group, from its first fetch
    # to the first fetch after the step. Before: each epoch's last optimizer step ran to the
    # next epoch's first through the break's fetch, the validation and the next epoch's first
    # batches (9 fetches), and the run's last had no next (3 steps of 4)
    path = tmp_path / "accum.json"
    extra = ("--max-iters", str(max_iters)) if max_iters else ()
    accum, batches = 3, 9
    result = trace_program(path, "train_eval.py", "--epochs", "2", "--batches", str(batches), "--val-batches", "4",
                           "--width", "256", "--accum-steps", str(accum), *extra)
    per_epoch = (max_iters or batches) // accum
    assert result["optimizer_steps"] == 2 * per_epoch
    profile = load_trace(path)
    s = find_steps(profile)
    assert s.name == "Optimizer.step#SGD.step" and "(gradient accumulation, or several loaders read per step)" in s.how
    assert s.count == result["optimizer_steps"]
    # each its group's fetches; the epoch's last ends at the fetch that ended its training pass
    assert _fetches_held(path, s.table) == [accum] * (per_epoch * 2)
    ms = (s.table["host_end_ns"] - s.table["host_start_ns"] + 1).to_numpy() / 1e6
    own = np.array(result["ms_each_iter"]).reshape(-1, accum).sum(axis=1)
    assert ms.sum() == pytest.approx(own.sum(), rel=0.05)
    later = np.delete(ms, np.arange(0, ms.size, per_epoch))  # the program times each epoch's first apart
    assert later.mean() == pytest.approx(result["ms_per_optimizer_step"], rel=0.05)


@pytest.mark.parametrize("zero_grad", ["end", pytest.param("start", marks=pytest.mark.extended), "model"])
def test_a_training_loop_without_a_data_loader_steps_per_optimizer_step(tmp_path: Path, zero_grad: str) -> None:
    # amp_train.py, traced whole: for step in range(n), the batch made on the device,
    # zero_grad at the iteration's end (as written), at its start, or model.zero_grad() (no
    # optimizer range: its step marks the iteration). One step per optimizer step, the light
    # pass's rule (steady.optimizer_iterations) on the trace's ops: before, from one mark to
    # the next, the first iteration (end, model) or the last (start) was in no step: 23 of 24
    path = tmp_path / "amp.json"
    result = trace_program(path, "amp_train.py", "--device", "cpu", "--dtype", "bfloat16", "--batch", "8", "--dim", "16",
                           "--width", "32", "--depth", "1", "--steps", "12", "--warmup", "2", "--log-every", "5",
                           "--zero-grad", zero_grad)
    profile = load_trace(path)
    s = find_steps(profile)
    assert s.name == ("Optimizer.step#AdamW.step" if zero_grad == "model" else "Optimizer.zero_grad#AdamW.zero_grad")
    assert s.count == result["steps"] == 12
    # each holds one iteration: its batch (one randn), its forward (the trace's linears, a
    # twelfth of them) and one optimizer step (but below). The first begins where its last ops outside
    # the optimizer's ranges, as many as an iteration's, begin (model.zero_grad: a few of the
    # model's setup ops too, as many as an iteration runs after its optimizer step)
    ops = profile.ops
    starts, ends = s.table["host_start_ns"].to_numpy(np.int64), s.table["host_end_ns"].to_numpy(np.int64)

    def held(at: np.ndarray) -> list[int]:
        at = np.sort(at)
        return (np.searchsorted(at, ends, side="right") - np.searchsorted(at, starts)).tolist()

    assert held(ops.loc[ops["name"] == "aten::randn", "start_ns"].to_numpy(np.int64)) == [1] * 12
    linear = ops.loc[ops["name"] == "aten::linear", "start_ns"].to_numpy(np.int64)
    assert held(linear) == [len(linear) // 12] * 12
    r = profile.ranges
    # (model.zero_grad: the optimizer's steps are the marks, each step from one to the next,
    # the first to the first mark: the last optimizer step falls in no step)
    stepped = [0] + [1] * 11 if zero_grad == "model" else [1] * 12
    assert held(r.loc[r["name"] == "Optimizer.step#AdamW.step", "start_ns"].to_numpy(np.int64)) == stepped


def test_a_loop_whose_only_data_loader_is_the_evaluations_traced_whole_steps_per_optimizer_step(tmp_path: Path) -> None:
    # amp_train.py --val-every 10 traced whole: the batches made in the loop, a DataLoader over
    # the held-out set every 10 steps. Each validation pass's last fetch (StopIteration) is
    # followed by training, and read as a training fetch: 3 steps, the DataLoader's, for 40.
    # It runs no op where the loader's other fetches index and collate (steps.fetched_nothing)
    path = tmp_path / "amp.json"
    result = trace_program(path, "amp_train.py", "--device", "cpu", "--dtype", "bfloat16", "--batch", "32", "--dim", "64", "--width", "128",
                           "--depth", "2", "--steps", "40", "--warmup", "4", "--log-every", "100", "--val-every", "10")
    profile = load_trace(path)
    s = find_steps(profile)
    assert s.name == "Optimizer.zero_grad#AdamW.zero_grad"
    assert s.count == result["steps"] == 40
    starts, ends = s.table["host_start_ns"].to_numpy(np.int64), s.table["host_end_ns"].to_numpy(np.int64)
    assert np.median(ends - starts) / 1e6 == pytest.approx(np.median(result["ms_each"]), rel=0.15)
    fetches = np.sort(profile.ranges.loc[profile.ranges["name"] == FETCH, "start_ns"].to_numpy(np.int64))
    assert fetches.size == 4 * 5  # a validation after every 10th step, 4 batches and the fetch that ended it
    held = np.searchsorted(fetches, ends, side="right") - np.searchsorted(fetches, starts)
    assert not held.any()  # every validation pass left out of the steps


@pytest.mark.parametrize("torchrl", [pytest.param(False, marks=pytest.mark.extended), True])
def test_ppo_traced_whole_steps_per_iteration_and_its_how_says_so(tmp_path: Path, torchrl: bool) -> None:
    # CleanRL's PPO (ppo_train.py) traced whole, a rollout of 64 environment steps per
    # iteration: its 24 zero_grads come 4 per iteration (2 epochs x 2 minibatches), after
    # the rollout's ops (steady.mark_groups). The step is the iteration, and its how says what
    # it is: 4 optimizer steps per iteration, the program's 6 iterations (before: "(24x)" alone,
    # the optimizer's count, read as one step each). torchrl's PPO tutorial: zero_grad after
    # the optimizer's step (each iteration began after its first minibatch's step, its rollout
    # in the step before) and the advantages again before each of 3 epochs, 4x a minibatch's
    # ops, the rollout's 6x more again (18 steps, one per epoch, before: torchrl's own trace
    # read 39 for 10 iterations)
    path = tmp_path / "ppo.json"
    shape = ("--update-epochs", "3", "--zero-grad", "after", "--advantages", "per-epoch") if torchrl else ("--update-epochs", "2")
    result = trace_program(path, "ppo_train.py", "--device", "cpu", "--num-envs", "4", "--num-steps", "64", "--iterations", "6",
                           "--num-minibatches", "2", *shape)
    s = find_steps(load_trace(path))
    assert s.name == "Optimizer.zero_grad#Adam.zero_grad"
    assert s.count == result["iterations"] == 6
    ms = (s.table["host_end_ns"] - s.table["host_start_ns"]).to_numpy() / 1e6
    assert ms == pytest.approx(result["ms_each"], rel=0.1)  # each iteration, from its rollout's first call
    per = count(result["optimizer_steps"] / result["iterations"])
    assert f"({result['optimizer_steps']}x), {per} per iteration" in s.how
    assert f"{count(result['iterations'])} iterations" in s.how


def test_backward_calls_mark_the_iteration_only_when_nothing_else_does() -> None:
    # perfdoctor run names each torch.autograd.backward call (rangenames.BACKWARD_RANGE): the
    # mark of last resort, for a loop with no optimizer, module call or data loader
    # (makemore's by hand); anything else that marks the loop comes first
    from perfdoctor.analysis.steps import choose_step
    from perfdoctor.names.ranges import BACKWARD_RANGE

    c = choose_step({BACKWARD_RANGE: 300})
    assert (c.kind, c.name, c.iteration) == ("backward", BACKWARD_RANGE, True)
    assert "300x" in c.how
    assert choose_step({BACKWARD_RANGE: 1}) is None  # no iteration to time: from one to the next
    assert choose_step({BACKWARD_RANGE: 30}, modules={"MLP.forward": 30}).kind == "module"  # the nn version's forward
    assert choose_step({BACKWARD_RANGE: 30, "Optimizer.zero_grad#SGD.zero_grad": 30}).kind == "loop"
    assert choose_step({BACKWARD_RANGE: 30, "train_step": 30}).name == "train_step"
    # torch.autograd.grad's calls (torch.func.grad's, rangenames.GRAD_RANGE) alike, after
    # backward(): a gradient penalty's grad calls come several per backward's iteration
    from perfdoctor.names.ranges import GRAD_RANGE

    assert (choose_step({GRAD_RANGE: 60}).kind, choose_step({GRAD_RANGE: 60}).name) == ("backward", GRAD_RANGE)
    assert choose_step({GRAD_RANGE: 150, BACKWARD_RANGE: 30}).name == BACKWARD_RANGE
    assert choose_step({GRAD_RANGE: 60}, modules={"MLP.forward": 60}).kind == "module"


WHOLE = Path(__file__).parents[1] / "fixtures" / "whole"


@pytest.mark.parametrize("step", [None, "Optimizer.step#AdamW.step"])
def test_a_trainer_traced_whole_without_evaluations_ends_its_last_step_at_its_optimizer_step(step: str | None) -> None:
    # HF's Trainer with eval_strategy="no" (its default), traced whole: accelerate's
    # DataLoaderShard fetches a batch ahead, so the last batch trains after the fetch that
    # raised StopIteration and no fetch follows. Before, that step was in none: 3 of 4, by
    # the fetches and by the optimizer's steps (--step). Now it ends where its optimizer step
    # ended (steps.trained_after_last), timed as the program's TrainerCallback times it
    facts = json.loads((WHOLE / "cpu-hf-trainer-no-eval.facts.json").read_text())
    profile = load_trace(WHOLE / "cpu-hf-trainer-no-eval.kineto.json.gz")
    found = find_steps(profile, step)
    opt = profile.ranges[profile.ranges["name"] == "Optimizer.step#AdamW.step"].sort_values("start_ns")
    assert found.count == facts["optimizer_steps"] == len(opt) == 4
    assert found.name == (step or "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__")
    t = found.table.sort_values("host_start_ns")
    assert t["host_end_ns"].iloc[-1] == opt["end_ns"].iloc[-1]
    # each step holds its own optimizer step, the last the last
    held = np.searchsorted(opt["start_ns"].to_numpy(), t["host_end_ns"].to_numpy(), side="right") - np.searchsorted(opt["start_ns"].to_numpy(), t["host_start_ns"].to_numpy())
    assert held.tolist() == [1] * 4
    last_ms = (t["host_end_ns"].iloc[-1] - t["host_start_ns"].iloc[-1]) / 1e6
    assert last_ms == pytest.approx(facts["ms_each"][-1], rel=0.1)
