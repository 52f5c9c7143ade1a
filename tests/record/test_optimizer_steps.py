"""A loop with no data loader stepped by optimizers that torch's range names do not tell
apart (a GAN's two Adams), or by ``optimizer.step(closure)`` whose closure calls
``zero_grad`` (LBFGS): the bootstrap's :class:`OptimizerSteps` and the light pass's choice
(:func:`perfdoctor.record.light.find_step`) over hand-made series."""

from __future__ import annotations

import types

import torch

from perfdoctor import api
from perfdoctor.bundle.protocol import PassResults
from perfdoctor.record.bootstrap.clock import StepTimes, Timer
from perfdoctor.record.bootstrap.steps import OptimizerSteps
from perfdoctor.record.light import find_step
from perfdoctor.record.options import RunOptions
from test_module_steps import Regions

STEP = "Optimizer.step#SGD.step"


def _gan_loop(critic: tuple[torch.optim.SGD, torch.optim.SGD], iterations: int, times: StepTimes | None = None) -> None:
    """Per iteration two steps of D's optimizer, then one of G's (``critic``: the two); each
    step timed as the light pass's range hook times it (``times``), around torch's step."""
    d, g = critic
    for _ in range(iterations):
        for opt in (d, d, g):
            if times is not None:
                times.start(STEP)
            opt.step()
            if times is not None:
                times.end(STEP)


def _optimizers() -> tuple[torch.optim.SGD, torch.optim.SGD]:
    d, g = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(3))
    d.grad, g.grad = torch.ones(2), torch.ones(3)
    return torch.optim.SGD([d], lr=0.1), torch.optim.SGD([g], lr=0.1)


def test_each_step_notes_its_optimizer_and_a_traced_pass_marks_the_chosen_ones_steps() -> None:
    from torch.optim import optimizer as hooks

    iterations = 3
    session = types.SimpleNamespace(mode="light", disabled=False, pattern=None)
    steps, times = OptimizerSteps(session, hooks), StepTimes(Timer())
    try:
        _gan_loop(_optimizers(), iterations, times)
        series, _ = times.series()
        steps.annotate(series, times)
    finally:
        steps.uninstall()
    # each step's optimizer, by ordinal within its class in order of first step
    assert series[STEP]["instance"] == [1, 1, 2] * iterations
    # one optimizer stepping (or a second one stepping once): the series reads as it always did
    session, times = types.SimpleNamespace(mode="light", disabled=False, pattern=None), StepTimes(Timer())
    steps = OptimizerSteps(session, hooks)
    try:
        d, g = _optimizers()
        _gan_loop((d, d), iterations, times)
        series, _ = times.series()
        steps.annotate(series, times)
    finally:
        steps.uninstall()
    assert "instance" not in series[STEP]

    # a traced pass whose step is the second SGD's (G's): its steps become a region, D's do not
    regions = Regions()
    api.subscribe(regions)
    steps = OptimizerSteps(types.SimpleNamespace(mode="torch", disabled=False, pattern="Optimizer.step#SGD#2.step"), hooks)
    try:
        _gan_loop(_optimizers(), iterations)
    finally:
        steps.uninstall()
        api._listeners.remove(regions)
    assert regions.names == ["Optimizer.step#SGD#2.step"] * iterations
    assert not hooks._global_optimizer_pre_hooks and not hooks._global_optimizer_post_hooks  # uninstalled


def _series(starts: list[int], ends: list[int]) -> dict:
    return {"host_start_ns": starts, "gpu_start_ns": None, "gpu_end_ns": ends}


def test_a_gan_steps_once_per_iteration_at_the_optimizer_that_encloses_the_others() -> None:
    # 4 iterations 100 apart: the critic's forward at 1 and 21, its optimizer's steps at 10
    # and 30, the generator's forward at 50 and its step at 60 (each step 2 long), all
    # under one name; before: 12 steps, one per optimizer step
    n = 4
    at = [100 * k + o for k in range(n) for o in (10, 30, 60)]
    critic, generator = [100 * k + o for k in range(n) for o in (1, 21)], [100 * k + 50 for k in range(n)]
    results = PassResults(
        series={"Optimizer.step#Adam.step": {**_series(at, [h + 2 for h in at]), "instance": [1, 1, 2] * n}},
        modules={"0": {"Critic.forward": _series(critic, [h + 5 for h in critic]),
                       "Generator.forward": _series(generator, [h + 5 for h in generator])}},
    )
    name, how, module, rewritten = find_step(results, RunOptions(target=["x.py"]))
    assert (name, module, rewritten) == ("Optimizer.step#Adam#2.step", None, True)
    assert "#2 by first step" in how and "enclose the others' 8" in how
    # from one generator step to the next, and the first iteration, from its first forward
    # (steady.optimizer_iterations: 2 critic steps and 3 forwards before the first mark)
    assert results.series[name] == _series([1, 60, 160, 260], [60, 160, 260, 360])
    assert results.call_series[name]["host_start_ns"] == [60, 160, 260, 360]
    # torch's name keeps the critic's steps: the iteration's work
    assert results.series["Optimizer.step#Adam.step"]["host_start_ns"] == [10, 30, 110, 130, 210, 230, 310, 330]
    # each optimizer's zero_grad before its step (5 before each: 5, 25, 55, ...), whose
    # optimizer torch's range does not say: no mark, the iteration's work (before: chosen
    # before the steps, 12 steps)
    zero_grad = [h - 5 for h in at]
    results = PassResults(
        series={"Optimizer.step#Adam.step": {**_series(at, [h + 2 for h in at]), "instance": [1, 1, 2] * n},
                "Optimizer.zero_grad#Adam.zero_grad": _series(zero_grad, [z + 1 for z in zero_grad])},
        modules={"0": {"Critic.forward": _series(critic, [h + 5 for h in critic]),
                       "Generator.forward": _series(generator, [h + 5 for h in generator])}},
    )
    name = find_step(results, RunOptions(target=["x.py"]))[0]
    assert results.series[name] == _series([1, 60, 160, 260], [60, 160, 260, 360])
    # named by --step, torch's name is what it always was: every step
    results = PassResults(series={"Optimizer.step#Adam.step": {**_series(at, [h + 2 for h in at]), "instance": [1, 1, 2] * n}})
    assert find_step(results, RunOptions(target=["x.py"], step="Optimizer.step#Adam.step"))[0] == "Optimizer.step#Adam.step"
    assert len(results.series["Optimizer.step#Adam.step"]["host_start_ns"]) == 3 * n - 1


def test_a_step_with_a_closure_is_the_iteration_not_the_zero_grad_inside_it() -> None:
    # optimizer.step(closure) at 0, 100, 200, 300, each 80 long; inside it the closure's
    # zero_grad (LBFGS: at 5, 35, 65; the last step converges after one call) and forwards
    n = 4
    at = [100 * k for k in range(n)]
    zero_grad = [100 * k + o for k in range(n - 1) for o in (5, 35, 65)] + [305]
    forwards = [z + 10 for z in zero_grad]
    results = PassResults(
        series={"Optimizer.step#LBFGS.step": _series(at, [h + 80 for h in at]),
                "Optimizer.zero_grad#LBFGS.zero_grad": _series(zero_grad, [z + 1 for z in zero_grad])},
        modules={"0": {"MLP.forward": _series(forwards, [f + 3 for f in forwards])}},
    )
    name, _, _, rewritten = find_step(results, RunOptions(target=["x.py"]))
    # before: the zero_grad (rule 7 prefers it), 9 steps for 4
    assert (name, rewritten) == ("Optimizer.step#LBFGS.step", True)
    # each step to the next, the last to its own end
    assert results.series[name] == _series(at, [100, 200, 300, 380])


def _reptile_loop(tasks: int, inner: int, times: StepTimes | None = None) -> None:
    """Reptile's outer loop: per task a copy of the weights and a new SGD on it, ``inner``
    steps, then the new optimizer dropped (the next one may take its freed id)."""
    weights = torch.nn.Parameter(torch.zeros(3))
    for _ in range(tasks):
        copy = torch.nn.Parameter(weights.detach().clone())
        copy.grad = torch.ones(3)
        opt = torch.optim.SGD([copy], lr=0.1)
        for _ in range(inner):
            if times is not None:
                times.start(STEP)
            opt.step()
            if times is not None:
                times.end(STEP)
        del opt


def test_a_new_optimizer_per_outer_iteration_is_noted_and_its_first_steps_marked() -> None:
    from torch.optim import optimizer as hooks

    session = types.SimpleNamespace(mode="light", disabled=False, pattern=None)
    steps, times = OptimizerSteps(session, hooks), StepTimes(Timer())
    try:
        _reptile_loop(5, 3, times)
        series, _ = times.series()
        steps.annotate(series, times)
    finally:
        steps.uninstall()
    # a freed optimizer is forgotten: the next one (the same id, often) is a new ordinal
    assert series[STEP]["instance"] == [1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 5, 5, 5]
    regions = Regions()
    api.subscribe(regions)
    steps = OptimizerSteps(types.SimpleNamespace(mode="torch", disabled=False, pattern="Optimizer.step#SGD#new.step"), hooks)
    try:
        _reptile_loop(5, 3)
    finally:
        steps.uninstall()
        api._listeners.remove(regions)
    assert regions.names == ["Optimizer.step#SGD#new.step"] * 5  # each new optimizer's first step, no other


def test_optimizer_lives() -> None:
    from perfdoctor.analysis.steps import LIFE_STEPS, LIVES, optimizer_lives

    def lives(*sizes: int) -> list[int]:
        return [k + 1 for k, n in enumerate(sizes) for _ in range(n)]

    assert optimizer_lives(lives(*[5] * 60))  # Reptile: 60 tasks of 5 steps
    assert optimizer_lives(lives(*[LIFE_STEPS] * LIVES)) and optimizer_lives(lives(1, 5, 5, 5, 12))  # the median
    assert not optimizer_lives(lives(*[5] * (LIVES - 1)))  # too few to be a loop
    assert not optimizer_lives(lives(*[32] * 5))  # k folds: each trains for many steps, its steps the iteration
    assert not optimizer_lives([1, 1, 1, 1, 2] * 20)  # a GAN's two optimizers alternate
    assert not optimizer_lives(lives(5, 5, 5) + [1, 1] + lives(5, 5, 5)[10:])  # the first steps again later
    assert not optimizer_lives([])


def test_reptile_steps_once_per_outer_iteration_at_each_new_optimizers_first_step() -> None:
    # 5 outer iterations 100 apart: a deepcopy at 0, then per inner step (3) a zero_grad at
    # 10 + 20j, a forward at 12 + 20j and the step at 18 + 20j (2 long), the meta-update at
    # 80; each outer iteration's optimizer a new one. Before: 15 steps, one per inner step
    n, inner = 5, 3
    at = [100 * k + 18 + 20 * j for k in range(n) for j in range(inner)]
    zero_grad = [h - 8 for h in at]
    forwards = [h - 6 for h in at]
    results = PassResults(
        series={STEP: {**_series(at, [h + 2 for h in at]), "instance": [k + 1 for k in range(n) for _ in range(inner)]},
                "Optimizer.zero_grad#SGD.zero_grad": _series(zero_grad, [z + 1 for z in zero_grad])},
        modules={"0": {"MLP.forward": _series(forwards, [f + 3 for f in forwards])}},
    )
    name, how, module, rewritten = find_step(results, RunOptions(target=["x.py"]))
    assert (name, module, rewritten) == ("Optimizer.step#SGD#new.step", None, True)
    assert "a new one per outer iteration (5), whose other 10 steps are their inner loops" in how
    # from one new optimizer's first step to the next's; the last to its last inner step's end
    # (the zero_grad before each first step: 1 of the 5 other marks between two)
    assert results.series[name] == _series([18, 118, 218, 318, 418], [118, 218, 318, 418, 460])
    # four optimizers of 32 steps each (k folds): the inner steps stay the iteration
    at = [1000 * k + 10 * j for k in range(4) for j in range(32)]
    results = PassResults(series={STEP: {**_series(at, [h + 2 for h in at]), "instance": [k + 1 for k in range(4) for _ in range(32)]}})
    assert find_step(results, RunOptions(target=["x.py"]))[0] == STEP


def test_a_profiler_stepped_inside_the_optimizers_steps_marks_no_iteration() -> None:
    # Lightning's PyTorchProfiler: each training_step runs inside Optimizer.step (its
    # closure, 10..90 of each 100) and the profiler steps at its end (50): ProfilerStep#k
    # from one such end to the next. The data loader's fetch (0..5) opens each iteration.
    n = 6
    fetch, opt = [100 * k for k in range(n)], [100 * k + 10 for k in range(n)]
    profiled = {f"ProfilerStep#{k}": _series([100 * k - 50], [100 * k + 50]) for k in range(1, n)}
    forwards = [100 * k + 20 for k in range(n)]
    results = PassResults(
        series={"enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__": _series(fetch, [f + 5 for f in fetch]),
                STEP: _series(opt, [o + 80 for o in opt]), **profiled},
        modules={"0": {"MLP.forward": _series(forwards, [f + 10 for f in forwards])}},
    )
    name, _, _, rewritten = find_step(results, RunOptions(target=["x.py"]))
    # before: 'ProfilerStep#*', each from the middle of one iteration to the middle of the next
    assert (name, rewritten) == ("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", True)
    assert results.series[name]["host_start_ns"][:n - 1] == fetch[:n - 1]
    # stepped at each iteration's end (the recipe's prof.step()), its steps are the iterations
    results = PassResults(
        series={STEP: _series(opt, [o + 30 for o in opt]),
                **{f"ProfilerStep#{k}": _series([100 * k - 50], [100 * k + 50]) for k in range(1, n)}},
    )
    assert find_step(results, RunOptions(target=["x.py"]))[0] == "ProfilerStep#*"


def test_loop_sites_name_the_innermost_loop_of_each_call() -> None:
    # the loop a call sits in, from the bytecode: an inner loop apart from its outer one, a
    # call under an `if` in the loop's own, a `continue` (a jump back from inside the body)
    # still one loop, a helper without a loop seen through its caller's, none outside a loop
    import sys
    import threading

    from perfdoctor.record.bootstrap.steps import LoopSites

    sites, seen = LoopSites(), {}

    def note(tag: str) -> None:
        seen.setdefault(tag, set()).add(sites.of(sys._getframe(1)))

    def helper(tag: str) -> None:
        note(tag)

    def program() -> None:
        note("outside")
        for i in range(4):
            for _ in range(3):
                note("inner")
            if i == 1:
                continue
            note("outer")
            if i % 2 == 0:
                helper("outer, every 2nd, through a helper")

    # on a thread of its own, as a program's main code: no caller's loop (pytest's) around it
    thread = threading.Thread(target=program)
    thread.start()
    thread.join()
    assert seen["outside"] == {None}
    assert len(seen["inner"]) == len(seen["outer"]) == 1 and seen["inner"] != seen["outer"]
    assert seen["outer, every 2nd, through a helper"] == seen["outer"]
