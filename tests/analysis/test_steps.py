"""Steps without markers: found automatically, and how every step was found is said.

The real H200 fixtures carry step ranges; stripping them and finding the steps again must
give the same steps as the annotated analysis (same count, same kernels per step, same GPU
windows). The reference is the annotated analysis, whose counts the fixture README states as
facts from the programs.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from conftest import FIXTURES
from perfdoctor.pipeline import load_trace
from perfdoctor.analysis.metrics import analyze
from perfdoctor.analysis.steps import (AUTO_STEP, cuts_iterations, enclosed_marks, find_steps, grad_mode_steps, iteration_instance, iteration_site,
                                      optimizer_ordinals, other_optimizers, repeating_region, repeating_units, site_groups)
from perfdoctor.names import ranges as rangenames
from perfdoctor.profile import BundleFacts

CASES = [
    # fixture, step prefix to strip, expected steps (README facts), how: sync or launch sequence
    ("h200-decode-eager-5steps.kineto.json.gz", "decode_step", 5, "host syncs"),
    ("h200-decode-graph-10steps.kineto.json.gz", "decode_step", 10, "host syncs"),
    ("h200-llama1b-eager-5steps.kineto.json.gz", "decode_step", 5, "launch sequence"),
    ("h200-pageable-sync-10steps.kineto.json.gz", "copy_step", 10, "host syncs"),
    ("h200-profilerstep-5steps.kineto.json.gz", "ProfilerStep", 5, "launch sequence"),
    ("h200-decode-eager-5steps.nsys.sqlite.gz", "decode_step", 5, "host syncs"),
    ("h200-decode-graph-10steps.nsys.sqlite.gz", "decode_step", 10, "host syncs"),
    ("h200-matmul-20steps.nsys.sqlite.gz", "step", 20, "launch sequence"),
]


def _strip(profile, prefix: str):
    profile.ranges = profile.ranges[~profile.ranges["name"].str.startswith(prefix)].reset_index(drop=True)
    return profile


@pytest.mark.parametrize("fixture, prefix, count, how", CASES, ids=[c[0].split(".")[0] + "-" + c[0].split(".")[1] for c in CASES])
def test_automatic_steps_equal_the_annotated_steps(fixture: str, prefix: str, count: int, how: str) -> None:
    ref = analyze(load_trace(FIXTURES / fixture), step=prefix + "*").timeline.steps
    a = analyze(_strip(load_trace(FIXTURES / fixture), prefix))
    assert a.steps.name == AUTO_STEP
    assert a.steps.how.startswith("automatic") and how in a.steps.how
    t = a.timeline.steps
    assert len(ref) == count and len(t) == count
    assert t["kernels"].tolist() == ref["kernels"].tolist()
    assert t["gpu_start_ns"].tolist() == ref["gpu_start_ns"].tolist()
    assert t["gpu_end_ns"].tolist() == ref["gpu_end_ns"].tolist()


def test_the_pageable_nsys_file_also_finds_its_warm_up_iteration() -> None:
    # The nsys file holds one more iteration of the same loop body, in a range named
    # `warmup` (README): without markers it is a step like the others.
    a = analyze(_strip(load_trace(FIXTURES / "h200-pageable-sync-10steps.nsys.sqlite.gz"), "copy_step"))
    assert a.steps.count == 11 and set(a.timeline.steps["kernels"]) == {4}


def test_a_layer_is_not_a_step_the_outermost_repetition_is() -> None:
    layer = [1, 2, 3, 4, 5, 6]
    step = [9, 10] + layer * 16 + [11, 12, 13]
    seq = np.asarray([7, 7, 8] + step * 5)  # start-up work, then 5 steps
    period, lo, hi = repeating_region(seq)
    assert period == len(step) == 101
    assert (lo, hi) == (3, 3 + 5 * 101)


def test_a_few_fits_of_a_waiting_loop_step_per_iteration_not_per_fit() -> None:
    # kmeans_fit.py's sync-delimited units on the H100: per fit the start-up's unit (the
    # centres drawn), then 40 iterations; per iteration the distances' unit (0), 32 clusters'
    # nonzero (1) and the shift's .item() (2). The fit repeats 3 times and covers all; the
    # iteration repeats 40 times within each fit; the cluster 32 times within an iteration.
    iteration = [0] + [1] * 32 + [2]
    fit = [5] + iteration * 40
    period, lo, hi = repeating_units(np.asarray(fit * 3))
    assert period == len(iteration) and hi - lo == 40 * len(iteration)
    assert repeating_region(np.asarray(fit * 3))[0] == len(fit)  # what it read before
    # one unit per iteration (kmeans' scatter style, a decode's token): the same
    assert repeating_units(np.asarray(([5] + [0] * 40) * 3))[0] == 1
    # a step of three waits repeated five times: no period repeats often, the outermost holds
    assert repeating_units(np.asarray([7] + [0, 1, 2] * 5))[0] == 3


def test_no_repetition_means_no_automatic_step() -> None:
    assert repeating_region(np.arange(50)) is None


ZERO_GRAD, STEP = "Optimizer.zero_grad#LBFGS.zero_grad", "Optimizer.step#LBFGS.step"


def test_a_loop_range_run_inside_another_marks_no_iteration() -> None:
    # optimizer.step(closure) over [0, 8], [10, 18], [20, 28]; the closure's zero_grad inside
    # each (at 1, 3 | 11 | 21, 23), or outside, at the iteration's start (at 9, 19, 29)
    step = ([0, 10, 20], [8, 18, 28])
    assert enclosed_marks({STEP: step, ZERO_GRAD: ([1, 3, 11, 21, 23], [2, 4, 12, 22, 24])}) == {ZERO_GRAD}
    assert enclosed_marks({STEP: step, ZERO_GRAD: ([9, 19, 29], [9, 19, 29])}) == set()
    # one of three inside (a zero_grad after the loop's last step, say) is not most of them
    assert enclosed_marks({STEP: step, ZERO_GRAD: ([1, 9, 19], [2, 9, 19])}) == set()
    # other ranges are never marks: a user range around the whole loop encloses nothing
    assert enclosed_marks({"train": ([-1], [100]), STEP: step}) == set()


def test_one_optimizers_steps_named_apart_leave_the_other_optimizer_ranges_no_mark() -> None:
    fetch = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    zero_grad, step = "Optimizer.zero_grad#Adam.zero_grad", "Optimizer.step#Adam.step"
    mine = rangenames.optimizer_instance(step, 2)
    assert mine == "Optimizer.step#Adam#2.step" and rangenames.parse_optimizer_instance(mine) == (step, 2)
    assert rangenames.parse_optimizer_instance(step) is None
    # the data loader's fetch still marks the iteration (it comes first); a user range is none
    assert other_optimizers([fetch, zero_grad, step, mine, "train"]) == {zero_grad, step}
    assert other_optimizers([fetch, zero_grad, step]) == set()


def test_two_optimizers_of_one_class_told_apart_by_the_ops_inside_their_steps() -> None:
    # gan_train.py in a plain trace: the critic's first step (state made: 390 ops), 4 more
    # (260), the generator's first (312), then 5 critic steps and one generator step (208)
    # per iteration; the generator's steps enclose the critic's: they mark the iteration
    critic, first_c, gen, first_g = 0, 1, 2, 3
    sig = [first_c] + [critic] * 4 + [first_g] + ([critic] * 5 + [gen]) * 29
    ordinals = optimizer_ordinals(sig)
    assert ordinals.tolist() == ([1] * 5 + [2]) * 30
    assert iteration_instance(ordinals) == 2
    # one each (DCGAN's rhythm): alike, the last stepped marks it (its step ends the
    # iteration), where of two models called alike the first does
    ordinals = optimizer_ordinals([first_c, first_g] + [critic, gen] * 29)
    assert ordinals.tolist() == [1, 2] * 30 and iteration_instance(ordinals, closing=True) == 2
    assert iteration_instance(ordinals) == 1
    # TD3's policy delay (the critics every environment step, the actor every 2nd): by the
    # order alone the actor's steps hold the critics' in every gap, as a generator's hold its
    # critic's inner loop; with the loops that called them (the light pass's), both in one
    # loop, the critics' steps mark its iteration, while a critic in an inner loop of its own
    # leaves the generator's
    td3 = [1] + [1, 2, 1] * 20
    assert iteration_instance(td3, closing=True) == 2
    assert iteration_instance(td3, closing=True, loops=[0] * len(td3)) == 1
    wgan = ([1] * 5 + [2]) * 30
    assert iteration_instance(wgan, closing=True, loops=[{1: 7, 2: 3}[o] for o in wgan]) == 2
    assert iteration_instance(wgan, closing=True, loops=[0] * len(wgan)) == 1  # `if i % 5 == 4: generator step`
    # SAC's (the critics every step, the actor's and the temperature's Adams twice every 2nd
    # step: q | q a t a t): each holds the others in half of its gaps, give or take the one
    # that the run's length adds, those gaps at a fixed interval; the critics' steps mark
    # the environment step, whatever the length (before: the actor's pairs or nothing, by
    # the parity of the steps) and the delay
    for k in (2, 3, 4):  # its policy_frequency: every k-th step, k actor and temperature steps
        sac = [1] + ([1] * (k - 1) + [2, 3] * k + [1]) * 30
        for n in range(len(sac) - 3 * k, len(sac) + 1):
            assert iteration_instance(sac[:n], closing=True) == 1, (k, n)
    # two optimizers each in a loop of its own, one after the other: still none
    assert iteration_instance([1] * 30 + [2] * 30, closing=True) is None
    # one optimizer; ops that vary with no fixed pattern (LBFGS's closure calls); a pattern
    # that breaks after the first period; too few periods: nothing told apart
    assert optimizer_ordinals([first_c] + [critic] * 40) is None
    rng = np.random.default_rng(0)
    assert optimizer_ordinals(rng.integers(0, 5, 60)) is None
    assert optimizer_ordinals(([critic] * 5 + [gen]) * 10 + [critic] * 3 + [gen] + ([critic] * 5 + [gen]) * 10) is None
    assert optimizer_ordinals([critic, gen] * 2) is None


def test_the_instance_that_encloses_the_others_calls_marks_the_iteration() -> None:
    # each depth-0 call of one class, by its instance's ordinal (by first call)
    draft, target = 1, 2
    # assisted generation: the draft drafts (its own prefill first), the target verifies;
    # the last iterations verify without a draft (no room left), a second generate follows
    generate = [draft] * 5 + [target] + ([draft] * 4 + [target]) * 6 + [target, target]
    assert iteration_instance(generate * 2) == target
    # a model called twice per iteration never marks it, whichever is called first (half of
    # its gaps hold the other's call: not more than half)
    assert iteration_instance([1, 1, 2] * 6) == 2
    assert iteration_instance([1, 2, 2] * 6) == 1
    # a teacher and its student, called alike: the first called
    assert iteration_instance([1, 2] * 6) == 1
    # an evaluation before and after the loop encloses it too, but it is an outer loop
    assert iteration_instance([1] + [2, 3, 3, 3] * 5 + [1]) == 2
    # two models each in a loop of its own, one after the other: none marks the other's iteration
    assert iteration_instance([1] * 10 + [2] * 5) is None
    # one instance that repeats (a model, a loss module made anew each iteration): the class
    assert iteration_instance([1] * 8) is None
    assert iteration_instance([1, 2, 1, 3, 1, 4, 1, 5]) is None



def test_the_site_called_in_every_iteration_marks_it_when_the_others_are_inside_its_loop() -> None:
    # each depth-0 call of one module, by its call site's ordinal (by first call)
    prefill, decode = 1, 2
    # a continuous-batching loop: 4 requests admitted in the first iteration, then one every
    # other iteration; each iteration's prefills, then its one decode
    server = [prefill] * 4 + [decode] + ([decode] + [prefill, decode]) * 8 + [decode] * 3
    assert iteration_site(server) == decode
    groups = site_groups(server)
    assert groups.sizes == [5] + [1, 2] * 8 + [1] * 3 and groups.calls == 1
    # a call after the last decode (a request admitted as the loop ends): a group of its own
    assert site_groups(server + [prefill]).sizes == groups.sizes + [1]
    # a generate loop: its prefill once per generation marks an outer loop (3 calls, 3 ** 2
    # <= 15 decodes): every call a step
    assert iteration_site(([prefill] + [decode] * 5) * 3) is None
    # a warm-up loop before the timed loop (image_infer.py's two `model(x)`): not inside it
    assert iteration_site([1] * 10 + [2] * 20) is None
    # two calls per iteration from two places (classifier-free guidance): the body's last
    # call closes the iteration
    assert iteration_site([1, 2] * 6) == 2
    assert site_groups([1, 2] * 6).sizes == [2] * 6
    # one site (the common case), or a site called once: no mark
    assert iteration_site([1] * 8) is None and site_groups([1] * 8) is None
    assert iteration_site([1] * 4 + [2] + [1] * 4) is None
    # a third site outside the loop (a last call after it) is enough for none
    assert iteration_site(server + [3]) is None


def test_the_calls_of_the_grad_mode_most_calls_ran_in_are_the_steps_the_other_modes_runs_end_passes() -> None:
    t, f = True, False
    # word_language_model: 4 training calls per epoch, then an evaluation of 2 under no_grad
    mode, mine, ended = grad_mode_steps([t] * 4 + [f] * 2 + [t] * 4 + [f] * 2)
    assert mode is True
    assert mine.tolist() == [0, 1, 2, 3, 6, 7, 8, 9]
    assert ended.tolist() == [False] * 4 + [True] + [False] * 3  # epoch 2's first: after a run
    # an evaluation before training (a sanity check) ends nothing: no step before it
    mode, mine, ended = grad_mode_steps([f] * 2 + [t] * 5)
    assert mine.tolist() == [2, 3, 4, 5, 6] and not ended.any()
    # an inference loop whose warm-up ran with grad enabled: its no-grad calls
    mode, mine, ended = grad_mode_steps([t] * 2 + [f] * 6)
    assert mode is False and mine.tolist() == [2, 3, 4, 5, 6, 7] and not ended.any()
    # a tie: the grad-enabled calls
    assert grad_mode_steps([t] * 3 + [f] * 3)[0] is True
    # one mode only (an inference program, a training one): every call a step
    assert grad_mode_steps([f] * 6) is None and grad_mode_steps([t] * 6) is None
    # a no-grad forward in every training step (3 of 3 gaps hold one; 2 of 4 still ends passes)
    assert grad_mode_steps([t, f] * 4) is None
    assert grad_mode_steps([t, f, t, t, f, t, t]) is not None
    # the mode's calls once: nothing repeats
    assert grad_mode_steps([f, t]) is None

def test_library_ranges_are_never_the_step() -> None:
    p = load_trace(FIXTURES / "h200-decode-eager-5steps.kineto.json.gz")
    named = p.ranges["name"] == "decode_step"
    p.ranges.loc[named, "name"] = "cub::DeviceScan::InclusiveScan"
    a = analyze(p)
    assert a.steps.name == AUTO_STEP and a.steps.count == 5
    # asked for by name, the user gets it
    assert find_steps(p, "cub::*").count == 5


@pytest.mark.parametrize("name", ["ncclAllReduce", "cudnn:conv", "cuBLASLt gemm", "thrust::sort",
                                  # Lightning's PyTorchProfiler: its model's forward, one of its hooks
                                  "[pl][module]torch.nn.modules.container.Sequential: net", "[pl][profile]run_training_batch"])
def test_other_library_range_names_are_skipped(name: str) -> None:
    p = load_trace(FIXTURES / "h200-decode-eager-5steps.kineto.json.gz")
    p.ranges.loc[p.ranges["name"] == "decode_step", "name"] = name
    assert analyze(p).steps.name == AUTO_STEP


def test_profiler_steps_that_end_inside_the_optimizer_steps_are_no_iterations() -> None:
    """Lightning steps the profiler at each ``training_step``'s end, inside ``Optimizer.step``
    (its closure): each ProfilerStep ends inside an optimizer step. The recipe's
    ``prof.step()`` at the loop's end, or HF's ``on_step_end``, ends each after it."""
    ends = np.array([100, 200, 300, 400])
    starts = np.r_[0, ends[:-1]]
    lightning = (ends - 30, ends + 40)  # the closure: forward, profiler step, backward, update
    recipe = (ends - 30, ends - 10)
    assert cuts_iterations(starts, ends, *lightning)
    assert not cuts_iterations(starts, ends, *recipe)
    # most of them decide: one step of four cut (a profiler's stop inside the last) is not it
    mixed = (np.r_[recipe[0][:3], lightning[0][3:]], np.r_[recipe[1][:3], lightning[1][3:]])
    assert not cuts_iterations(starts, ends, *mixed)
    assert not cuts_iterations(starts, ends, [], []) and not cuts_iterations([], [], *lightning)
    # optimizer steps outside the profiled window say nothing
    assert not cuts_iterations(starts, ends, np.r_[recipe[0], 500, 600], np.r_[recipe[1], 560, 660])


def test_how_the_step_was_found_is_said() -> None:
    eager = FIXTURES / "h200-decode-eager-5steps.kineto.json.gz"
    assert "--step" in analyze(load_trace(eager), step="decode_step").steps.how
    assert "most frequent" in analyze(load_trace(eager)).steps.how
    assert "ProfilerStep#N" in analyze(load_trace(FIXTURES / "h200-profilerstep-5steps.kineto.json.gz")).steps.how
    p = load_trace(eager)
    p.origin = replace(p.origin, bundle=BundleFacts(step="decode_step"))
    assert analyze(p).steps.how.startswith("recorded by the run")


def test_a_traced_wait_with_the_worked_marker_inside_is_no_idle_wait() -> None:
    """The traced passes mark a wait during which the rest of the process worked with a
    marker inside it, at its end, on its thread: that wait is the step's, not idle (the light
    pass's ``worked``). Another thread's marker, or one outside the wait, changes nothing."""
    import pandas as pd

    from perfdoctor.analysis.steps import traced_waits

    w, m = rangenames.WAIT_RANGE, rangenames.WORKED_RANGE
    ranges = pd.DataFrame({
        "name": [w, m, w, m, w, m],
        "tid": [1, 1, 1, 2, 1, 1],
        "start_ns": [0, 95, 200, 290, 400, 600],
        "end_ns": [100, 95, 300, 290, 500, 600],
    })
    assert traced_waits(ranges)[["start_ns", "worked"]].values.tolist() == [[0, 1], [200, 0], [400, 0]]
    assert traced_waits(ranges[ranges["name"] == w])["worked"].tolist() == [0, 0, 0]  # no marker: every wait idle
    assert rangenames.kind(m) == rangenames.kind(w) == rangenames.WAIT  # never a step


def test_iteration_ranges_keep_a_worked_wait_in_the_step_of_one_thread_only() -> None:
    """One thread's calls at 0, 100, 200 with a worked wait at [50, 90) between the first two:
    the step's own wait, kept (the first step runs to the next call). Two threads calling the
    step (a pool's workers): another worker's work is no producer's, the same wait ends the
    first step at 49 (steady.waits_between's one rule, called once over every thread)."""
    import pandas as pd

    from perfdoctor.analysis.steps import iteration_ranges

    calls = pd.DataFrame({"name": ["f"] * 3, "tid": [1, 1, 1], "start_ns": [0, 100, 200], "end_ns": [10, 110, 210]})
    waits = pd.DataFrame({"tid": [1], "start_ns": [50], "end_ns": [90], "worked": [1]})
    assert iteration_ranges(calls, waits)[["start_ns", "end_ns"]].values.tolist() == [[0, 99], [100, 199]]
    pool = pd.concat([calls, pd.DataFrame({"name": ["f"] * 2, "tid": [2, 2], "start_ns": [30, 130], "end_ns": [40, 140]})])
    got = iteration_ranges(pool, waits)
    assert got[got["tid"] == 1][["start_ns", "end_ns"]].values.tolist() == [[0, 49], [90, 199]]
    assert iteration_ranges(calls, waits.assign(worked=0))[["start_ns", "end_ns"]].values.tolist() == [[0, 49], [90, 199]]
