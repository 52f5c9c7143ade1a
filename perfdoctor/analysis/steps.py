"""Steps: find the user's unit of work and tie GPU activities to it.

A step is a host range (record_function, NVTX push/pop or ``ProfilerStep#N``), found in
the contract's order: ``--step PATTERN``, the step a run bundle recorded, ``ProfilerStep#N``,
the most frequent user range with GPU work — and, for a trace with none of these, the
step found automatically (:func:`automatic_ranges`): the repeating unit of GPU work between
the host's synchronisations, else the outermost period of the launch sequence. Library
ranges (``cub::DeviceScan...``, NCCL, cuDNN, cuBLAS, thrust) and Python stack frames are
never steps. ``Steps.how`` says, in words, how the step was found. GPU work
belongs to the step whose host range contains the start of the call that launched it — on
the step's own thread first, else by time on any thread (autograd backward, DDP, worker
threads; :mod:`perfdoctor.analysis.ownership`) — matched by correlation id. A CUDA graph replay is one launch call whose
correlation id every replayed kernel carries, so a graph-captured decode step owns all its
kernels and is not mistaken for an idle GPU.
"""

from __future__ import annotations

import fnmatch
import re
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from perfdoctor.names import api as apinames

from perfdoctor.analysis import ownership

from perfdoctor.analysis import serving, steady
from perfdoctor.bundle.protocol import LightPass
from perfdoctor.errors import UsageError
from perfdoctor.declare import DECLARE_PREFIX
from perfdoctor.names.codes import equals, factorize, starts_with
from perfdoctor.names.kernels import family, per_name
from perfdoctor.names import ranges as rangenames
from perfdoctor.profile import Profile
from perfdoctor.text import count

LAUNCH_PREFIXES = apinames.LAUNCH_PREFIXES  # CUDA, driver and HIP launches (graph launches too)
SYNC_NAMES = apinames.SYNC_NAMES
PROFILER_STEP_GLOB = rangenames.PROFILER_STEP_GLOB
AUTO_STEP = "(automatic step)"
NO_BOUNDARY = -1  # the first unit of a trace: nothing before it ended
ITERATION = "the loop iteration: from one occurrence to the next"  # how iteration steps are timed


@dataclass(frozen=True)
class Choice:
    """Which evidence is the step (:func:`choose_step`).

    ``kind``: ``user`` (the user's markers), ``serving``, ``compiled``, ``profiler_step``,
    ``range``, ``loop``, ``module`` or ``backward``. ``name``: the range (or module step) name;
    :data:`perfdoctor.analysis.serving.STEP_NAME` for the serving family. ``iteration``: the
    name marks the loop iteration rather than spanning the step, so a step runs from one
    occurrence to the next (a compiled call returns before its token is done, the data
    loader's ``__next__`` is only the fetch, a module call leaves out the loop's own work).
    """

    kind: str
    name: str
    how: str
    iteration: bool


# DataLoader batches per optimizer step from which the optimizer's step is the training
# iteration (gradient accumulation over 2 or more batches; 1.9, not 2: the loader's last
# fetch, which raises StopIteration, and an epoch's remainder)
ACCUMULATION = 1.9
# zero_grad calls per optimizer step from which the step marks the iteration, not zero_grad:
# a loop that zeroes at its top and again after the step, SAM's first_step(zero_grad=True) and
# second_step(zero_grad=True) (before: one step per zero_grad, 59 for 30 iterations)
ZERO_GRADS = 1.9


def choose_step(
    counts: Mapping[str, int],
    user: Collection[str] = (),
    modules: Mapping[str, int] | None = None,
    works: Callable[[str], bool] = lambda name: True,
    totals: Mapping[str, float] | None = None,
    replays: int = 0,
    compiled_starts: Mapping[str, Sequence[int]] | None = None,
    groups: Mapping[str, tuple[int, int]] | None = None,
    loop_starts: Mapping[str, Sequence[int]] | None = None,
) -> Choice | None:
    """The step, by the order of evidence (docs/metrics.md, "Step"), the same for a trace
    (:func:`find_steps`) and for ``perfdoctor run``'s light pass (its scout,
    :func:`perfdoctor.record.light.find_step`):

    1. the user's markers: ``user`` (names from ``--step``, ``perfdoctor.region``/``step``,
       ``--step-fn``) — the most frequent;
    2. serving-engine step ranges (vLLM, SGLang): every one of them, one family, one range
       is enough;
    3. compiled-graph calls, one per iteration (``## Call CompiledFxGraph`` ranges, the calls
       of a ``torch.compile``-d function): the most frequent, seen twice;
       — of several compiled functions, the one whose calls enclose the others'
       (:func:`iteration_call` over ``compiled_starts``, their calls' host starts): a
       speculative decode's verifying forward, not its draft's k tokens;
    4. ``ProfilerStep#N``;
    5. the most frequent other range seen twice for which ``works(name)`` (it has GPU
       work); a tie goes to the longer total time in ``totals`` (the outer of two ranges
       that repeat alike), else to the name seen first;
    6. ``replays``: one CUDA/HIP graph replayed that often, once per period of the loop
       (:func:`graph_replays` in a trace, :func:`one_graph` over the light pass's replays of
       each ``torch.cuda.CUDAGraph``), seen twice. After the user's ranges: a range around
       each replay (``decode_step``) also holds the work that feeds it;
    7. the training (or evaluation) iteration, marked by torch's loop ranges (the data loader's
       ``__next__``, else ``Optimizer.zero_grad``, else ``Optimizer.step``), seen twice — but
       a generator's calls where an inference loop generates per fetch
       (:func:`generates_per_fetch`: its tokens, the module step of 9);
       with gradient accumulation (``ACCUMULATION`` or more fetches per iteration that steps an
       optimizer: :func:`stepped_fetches` over ``loop_starts``, the loop ranges' host starts;
       without them, per step of the most frequent optimizer),
       or ``ZERO_GRADS`` or more ``zero_grad`` calls per step, the optimizer's step marks
       it; ``groups``: per optimizer range whose marks come several
       per iteration, the loop's own work between the groups (a loop with no data loader:
       ``steady.mark_groups``, CleanRL's PPO updates after each rollout), the iterations
       they mark and the marks per iteration, which the how says;
    8. torch's parallel wrapper's forward range (``DistributedDataParallel.forward``: a
       model's forward, inside each iteration and each ProfilerStep), seen twice, with GPU
       work, timed as the loop iteration (a module call's is: an inference loop's host work
       on the batch and its result is the iteration's);
    9. the outermost repeating module call (``modules``: its name and calls, at least two);
    10. the calls of ``torch.autograd.backward`` (:data:`perfdoctor.names.ranges.BACKWARD_RANGE`,
        ``perfdoctor run`` names them), seen twice: a training loop written with no
        optimizer, no module and no data loader (makemore's by hand), timed as the loop
        iteration from one backward to the next; else the outermost calls of
        ``torch.autograd.grad`` (:data:`perfdoctor.names.ranges.GRAD_RANGE`: ``torch.func.grad``
        in a loop written the JAX way), alike.

    ``counts``: every range name seen and how often. Library ranges (NCCL, cub, dynamo's
    own) and warm-up ranges are never the step. None when nothing qualifies.
    """
    mine = [n for n in user if counts.get(n, 0) > 0]
    if mine:
        name = max(mine, key=lambda n: counts[n])
        return Choice("user", name, "", False)
    by_kind: dict[str, list[str]] = {}
    for name, n in counts.items():
        if n > 0:
            by_kind.setdefault(rangenames.kind(name), []).append(name)
    if by_kind.get(rangenames.SERVING):
        return Choice("serving", serving.STEP_NAME, "serving step ranges (vLLM/SGLang names)", False)
    compiled = [n for n in by_kind.get(rangenames.COMPILED, ()) if counts[n] >= 2]
    if compiled:
        name = iteration_call({n: (compiled_starts or {}).get(n, ()) for n in compiled}) or max(compiled, key=lambda n: counts[n])
        how = f"compiled-graph calls {name!r} ({counts[name]}x), timed as {ITERATION}"
        return Choice("compiled", name, how, True)
    if by_kind.get(rangenames.PROFILER_STEP):
        return Choice("profiler_step", PROFILER_STEP_GLOB, "ProfilerStep#N annotations (torch.profiler schedule)", False)
    total = totals or {}
    ranked = sorted(
        (n for n in by_kind.get(rangenames.RANGE, ()) if counts[n] >= 2),
        key=lambda n: (-counts[n], -total.get(n, 0.0)),  # stable: the first seen wins a full tie
    )
    for name in ranked:
        if works(name):
            return Choice("range", name, f"ranges named {name!r}: the most frequent range with GPU work ({counts[name]}x)", False)
    if replays >= 2:
        return Choice("compiled", GRAPH_REPLAY, f"one CUDA/HIP graph replayed {replays}x, timed as {ITERATION}", True)
    loop = sorted((n for n in by_kind.get(rangenames.LOOP, ()) if counts[n] >= 2), key=rangenames.loop_rank)
    if loop:
        name = loop[0]
        generator = next((m for m, n in (modules or {}).items() if generates_per_fetch(name, counts, m, n)), None)
        if generator is not None:  # an inference loop's generator: its tokens, not its batches
            return Choice("module", generator, f"module: {generator.removesuffix('.forward')}", True)
        # the most frequent optimizer step
        opt = max((n for n in loop if n.startswith(rangenames.OPTIMIZER_STEP_PREFIX)), key=lambda n: counts[n], default=None)
        if opt is not None and rangenames.loop_rank(name) == 1 and counts[name] >= ZERO_GRADS * counts[opt]:
            name = opt  # zero_grad twice per step: the step marks the iteration
        stepped = counts[opt] if opt is not None else 0
        if opt is not None and loop_starts is not None and name in loop_starts:
            stepped = stepped_fetches(loop_starts[name], [loop_starts[n] for n in loop if n.startswith(rangenames.OPTIMIZER_STEP_PREFIX)
                                                          and n in loop_starts]) or stepped
        if opt is not None and rangenames.loop_rank(name) == 0 and counts[name] >= ACCUMULATION * stepped:
            # gradient accumulation: the iteration is the optimizer's step over several
            # batches (what HF Trainer and nanoGPT count as a step and time); per batch,
            # every k-th step would carry the optimizer and read as "uneven". The counts
            # alone cannot tell it from loaders zipped (FixMatch's labeled and unlabeled
            # batches, one step per pair): the same step, so the text names both
            how = (f"the training iteration: torch's {opt!r} ({counts[opt]}x), one per "
                   f"{count(counts[name] / stepped)} DataLoader batches (gradient accumulation, or several loaders read "
                   f"per step), timed as {ITERATION}")
            return Choice("loop", opt, how, True)
        return Choice("loop", name, _loop_how(name, counts[name], (groups or {}).get(name)), True)
    wrapped = [n for n in by_kind.get(rangenames.WRAPPER, ()) if counts[n] >= 2 and works(n)]
    if wrapped:
        name = max(wrapped, key=lambda n: counts[n])  # the first seen of a tie, as ranked ranges
        how = f"ranges named {name!r}: torch's parallel wrapper around the model's forward ({counts[name]}x), timed as {ITERATION}"
        return Choice("range", name, how, True)
    for name, n in (modules or {}).items():
        if n >= 2:
            return Choice("module", name, f"module: {name.removesuffix('.forward')}", True)
    backward = [n for n in by_kind.get(rangenames.BACKWARD, ()) if counts[n] >= 2]
    if backward:
        # backward() before autograd.grad: a gradient penalty's or a PDE residual's grad
        # calls come several per iteration, inside a loop whose backward() marks it
        name = min(backward, key=lambda n: n != rangenames.BACKWARD_RANGE)
        how = (f"the training iteration: each {name}() call ({counts[name]}x; no optimizer, data loader or module "
               f"call marks it), timed as {ITERATION}")
        return Choice("backward", name, how, True)
    return None


# A generator's class (transformers' ...ForCausalLM, ...LMHeadModel, ...ForConditionalGeneration,
# ...Seq2SeqLM) and its calls per DataLoader fetch from which its tokens are the steps
GENERATOR = re.compile(r"ForCausalLM|LMHeadModel|ForConditionalGeneration|Seq2SeqLM|SpeechSeq2Seq")
GENERATE_CALLS = 4


def generates_per_fetch(fetch: str, counts: Mapping[str, int], module: str, calls: int) -> bool:
    """Whether an inference loop over a DataLoader (``fetch``; no backward or optimizer step
    among ``counts``) generates per batch: its model step (``module``, ``calls`` calls) is a
    generator's (:data:`GENERATOR`), called :data:`GENERATE_CALLS` times or more per fetch.
    Its tokens are then the steps, not the fetch: transformers' pipelines (speech recognition,
    text generation, translation) run generate() per batch of their own DataLoader, and a
    Whisper pipeline read one step per clip of 32 tokens (the p50 54x a token's)."""
    return (not rangenames.trains(counts) and rangenames.loop_rank(fetch) == 0 and bool(GENERATOR.search(module))
            and calls >= GENERATE_CALLS * max(counts.get(fetch, 0), 1))


def stepped_fetches(fetches: Sequence[int], optimizers: Sequence[Sequence[int]]) -> int:
    """How many of a loop's iterations, each from a fetch's host start (``fetches``) to the
    next, hold an optimizer step (``optimizers``: each optimizer range's host starts), by any
    optimizer. Not the most frequent optimizer's steps: an Optuna study trains a new model
    per trial with the optimizer the trial draws (SGD 600, RMSprop 480 and Adam 240 steps of
    1,320 batches), which read as 2.2 batches per SGD step, "gradient accumulation"; nor their
    sum: a GAN's two optimizers step in one iteration."""
    f = np.sort(np.asarray(fetches, dtype=np.int64))
    starts = [np.asarray(o, dtype=np.int64) for o in optimizers if len(o)]
    if not f.size or not starts:
        return 0
    k = np.searchsorted(f, np.concatenate(starts), side="right") - 1
    return int(np.unique(k[k >= 0]).size)


def _loop_how(name: str, seen: int, grouped: tuple[int, int] | None) -> str:
    """How torch's loop range ``name``, seen ``seen`` times, marks the step: each one an
    iteration, or ``grouped`` (the iterations, the marks per iteration: ``choose_step``'s
    ``groups``) several of them one."""
    # the data loader's range marks an evaluation loop's iteration as well as a training one's
    what = "the loop iteration over a DataLoader" if rangenames.loop_rank(name) == 0 else "the training iteration"
    if grouped is None:
        return f"{what}: torch's {name!r} ({seen}x), timed as {ITERATION}"
    iterations, per = grouped
    return (f"{what}: torch's {name!r} ({seen}x), {count(per)} per iteration after the loop's own work "
            f"(an inner loop of optimizer steps: {count(iterations)} iterations), timed as {ITERATION}")


# The share of an instance's gaps (between two of its calls in a row) that must hold a call
# of another instance for its calls to enclose that one's: more than half, so that a model
# called twice per iteration (A A B: half of A's gaps hold B) never encloses the model
# called once, and a few gaps without (an assisted generate's last iterations may verify
# with no draft: the draft has no room left) do not break the rhythm.
ENCLOSES = 0.5
# Optimizers: more than this share, so that a rhythm of exactly half (every 2nd gap, whose
# count a run's length tips over or under 0.5 by one gap) is never read so; such a delayed
# rhythm (TD3's and SAC's policy delay) has its own rule: the gaps that hold the other's
# steps come at a fixed interval, this share of them at least, DELAYED_GAPS of them or more
ENCLOSES_STEPS = 0.55
DELAYED_SHARE, DELAYED_GAPS = 0.8, 3
SAME_CALLS = 0.02  # optimizers stepped as often as each other, within this share of the calls,
PERIOD_CALLS = 8  # or this many (the run's end cuts a period: SAC's critics lead by their k, up to 8)


def same_calls(calls: int) -> float:
    """How many fewer calls than ``calls`` are as many, for :func:`iteration_instance`."""
    return max(SAME_CALLS * calls, PERIOD_CALLS)


def iteration_instance(instances: Sequence[int], closing: bool = False, loops: Sequence[int | None] | None = None) -> int | None:
    """Which instance of one module class marks the loop iteration, from the instance of
    each of the class's depth-0 calls in call order (their ordinals,
    :class:`perfdoctor.record.bootstrap.steps.Instances`); None when none does, and then the
    class's calls are the step, as with one instance. ``closing``: the instances are
    optimizers, whose steps close the iteration, so a tie goes to the last stepped.

    An instance that repeats (two calls or more) encloses another when that one is called
    between more than ``ENCLOSES`` of its consecutive calls. The iteration's mark encloses
    every other repeating instance called at least as often, and there is one: assisted
    generation's target (one verifying forward per iteration) encloses its draft (several
    forwards per iteration), not the other way round. Of those, the one called most often:
    a model called once per run of the loop (an evaluation before and after it) encloses
    the loop too, but it is an outer loop. Two models called alike (a teacher and its
    student) enclose each other: the first called. Two optimizers stepped alike (the
    seq2seq tutorial's encoder and decoder optimizers, a DCGAN's critic and generator): the
    last stepped, whose step ends the iteration; with the first, from one of its steps to
    the next held the other's step of the iteration before, and the iteration's forward
    and backward before its first step were in no step. Two models each in a loop of its own,
    one after the other, enclose none: None.

    An instance called once per run of a loop that another repeats through (a prefill before
    each generation's decode calls) encloses it too, with no third to outrank it: it marks
    an outer loop, not the iteration, when it runs no more often than the other runs per
    gap between two of its calls (``mine.size ** 2 <= other.size``: 3 generations of 31
    decode calls), while an iteration's mark repeats more often than its few inner calls (a
    speculative decode's 26 verifying forwards, 4 drafts each: 104).

    ``loops`` (optimizers, the light pass's): the loop that called each step
    (:class:`perfdoctor.record.bootstrap.steps.LoopSites`). An instance stepped more often
    than the encloser in the encloser's own loop is stepped every iteration of it, and the
    encloser every k-th (TD3's critics and its delayed actor, CleanRL's loop: one actor
    step per 2 environment steps enclosed the critics' as a GAN's generator encloses its
    critic's inner loop): the most stepped of those marks the iteration."""
    at = np.asarray(instances, dtype=np.int64)
    ordinals, counts = np.unique(at, return_counts=True)
    calls = {int(o): np.flatnonzero(at == o) for o, n in zip(ordinals, counts) if n >= 2}

    def encloses(mine: np.ndarray, other: np.ndarray, share: float) -> bool:
        between = np.searchsorted(other, mine[1:]) - np.searchsorted(other, mine[:-1])
        return bool(np.mean(between > 0) > share) and mine.size ** 2 > other.size

    def delayed(mine: np.ndarray, other: np.ndarray, share: float) -> bool:
        held = np.flatnonzero(np.searchsorted(other, mine[1:]) > np.searchsorted(other, mine[:-1]))
        if held.size < DELAYED_GAPS:
            return False
        _, every = np.unique(np.diff(held), return_counts=True)
        return bool(every.max() >= share * (held.size - 1))

    def marks(holds: Callable[[np.ndarray, np.ndarray, float], bool], share: float, slack: Callable[[int], float] = lambda n: 0) -> list[int]:
        return [o for o, mine in calls.items()
                if (rest := [c for p, c in calls.items() if p != o and c.size >= mine.size - slack(mine.size)])
                and all(holds(mine, c, share) for c in rest)]

    # the most calls; a tie goes to the first called (ordinals are in order of first call),
    # or for optimizers to the last
    found = max(marks(encloses, ENCLOSES_STEPS if closing else ENCLOSES), key=lambda o: (calls[o].size, o if closing else -o), default=None)
    if found is not None and loops is not None and len(loops) == at.size:
        site = {o: Counter(loops[i] for i in mine).most_common(1)[0][0] for o, mine in calls.items()}
        every = [o for o in calls if site[o] is not None and site[o] == site[found] and calls[o].size > calls[found].size]
        found = max(every, key=lambda o: (calls[o].size, o), default=found)
    if found is None and closing:
        # a delayed rhythm: CleanRL's SAC steps its critics' Adam every environment step, and
        # every k-th step (policy_frequency, 2 by default) its actor's and its temperature's
        # Adams k times each (q | q a t a t): each holds the others in 1/k of its gaps, one
        # gap more or less with the run's length (before: 1195 steps of any of the three for
        # 399 iterations, or the actor's pairs as 2-step iterations, by the parity of the
        # run's length), those gaps at a fixed interval. Of those stepped about as often as
        # the most stepped, the first one stepped begins the iteration: the critics'. (TD3's
        # actor, stepped once every 2nd step, encloses its critics' steps, found above: two
        # environment steps per iteration in a plain trace; the light pass's ``loops`` mend it)
        held = marks(delayed, DELAYED_SHARE, same_calls)
        most = max((calls[o].size for o in held), default=0)
        found = min((o for o in held if calls[o].size >= most - same_calls(most)), default=None)
    return found


# A new optimizer per outer iteration: Reptile's and MAML's inner loops take 1-10 steps on a
# fresh copy of the model (learn2learn, higher, the Reptile paper's 5-10); a fold or a trial of
# a hyperparameter search trains one for tens to thousands of steps, its steps the iteration.
LIFE_STEPS = 10
LIVES = 4


def first_steps(instances: Sequence[int]) -> np.ndarray:
    """Which steps are the first of a run of one optimizer's (``instances``: each step's
    optimizer, in step order): with :func:`optimizer_lives`, each new optimizer's first step."""
    at = np.asarray(instances, dtype=np.int64)
    return np.r_[True, at[1:] != at[:-1]] if at.size else np.zeros(0, dtype=bool)


def optimizer_lives(instances: Sequence[int]) -> bool:
    """Whether each of a loop's optimizers lives for one outer iteration (``instances``: each
    step's optimizer, by ordinal of first step, in step order): every optimizer's steps one
    run, one after the other (none steps again after the next one started), at least
    ``LIVES`` of them, of at most ``LIFE_STEPS`` steps on median. Reptile over 60 tasks, 5 SGD
    steps each on a copy of the model, then the meta-update: the step was the inner step
    (0.38 ms, 300 of them) where the program times 60 outer iterations of 3.6 ms. A GAN's two
    optimizers alternate (:func:`iteration_instance`); k folds of 32 steps each keep theirs."""
    at = np.asarray(instances, dtype=np.int64)
    if at.size == 0:
        return False
    firsts = np.flatnonzero(first_steps(at))
    lives = at[firsts]
    if lives.size < LIVES or np.unique(lives).size != lives.size:
        return False
    return bool(np.median(np.diff(np.r_[firsts, at.size])) <= LIFE_STEPS)


def iteration_call(starts: Mapping[str, Sequence[int]]) -> str | None:
    """Which of several repeating functions (``starts``: each one's calls' host starts) marks
    the loop iteration: :func:`iteration_instance`'s rule over their calls in time order,
    each function an ordinal by its first call. gpt-fast's speculative decode compiles
    ``decode_one_token`` (the draft's k tokens) and ``model_forward`` (the target verifying
    them in one call): the most frequent compiled function was the draft's token, k steps
    per iteration. None when none encloses the others (one function: the caller's choice)."""
    names = sorted((n for n, h in starts.items() if len(h) >= 2), key=lambda n: min(starts[n]))
    if len(names) < 2:
        return None
    calls = sorted((h, k) for k, n in enumerate(names) for h in starts[n])
    mark = iteration_instance([k for _, k in calls])
    return None if mark is None else names[mark]


# The most frequent of a loop's repeating functions is a helper, not the loop's work, where its
# calls hold less than this share of the time from its first call to its last (BoTorch's
# Normalize input transform, called in every kernel evaluation: 9.7 % of a BO loop whose GP
# fit and acquisition run in scipy and in gpytorch code no nn.Module call sees); a decode
# loop's forward holds most of its span
HELPER_SHARE = 0.25
# ... and the function enclosing it that marks the iteration repeats at least this often
OUTER_CALLS = 3


def helper_encloser(calls: Mapping[str, tuple[Sequence[int], Sequence[int]]]) -> str | None:
    """Which of several repeating functions (``calls``: each one's calls' host starts and ends,
    in order) marks the loop iteration where the most frequent is a helper (its calls hold
    less than HELPER_SHARE of its span): of those whose calls enclose the helper's (one of
    its calls between more than ENCLOSES of their gaps) and repeat OUTER_CALLS times or more,
    the least called, the outermost (ties: the first called). A BO loop's outcome transform,
    once per fit, encloses the input transform's ~270 calls per iteration; the objective,
    once per iteration too, is called once more before the loop. None otherwise:
    :func:`iteration_call`'s rule, or the most frequent, stands."""
    if len(calls) < 2:
        return None
    top = max(calls, key=lambda n: len(calls[n][0]))
    starts, ends = (np.asarray(v, dtype=np.int64) for v in calls[top])
    span = int(ends.max() - starts.min()) if starts.size else 0
    if span <= 0 or int((ends - starts).sum()) >= HELPER_SHARE * span:
        return None
    found = []
    for name, (mine, _) in calls.items():
        at = np.asarray(mine, dtype=np.int64)
        if name != top and at.size >= OUTER_CALLS and np.mean(others_between(at, starts)) > ENCLOSES:
            found.append((at.size, int(at.min()), name))
    return min(found)[2] if found else None


def others_between(mine: Sequence[int], others: Sequence[int]) -> list[bool]:
    """For each two consecutive calls ``mine`` (host starts, in order), whether one of
    ``others`` starts between them: known work of the iteration, never a pause
    (:func:`perfdoctor.analysis.steady.iteration_ends_ns`'s ``joined``)."""
    at, other = np.asarray(mine, dtype=np.int64), np.sort(np.asarray(others, dtype=np.int64))
    return (np.searchsorted(other, at[1:]) > np.searchsorted(other, at[:-1])).tolist()


def enclosed_tail_end(mine: Sequence[int], others: Sequence[tuple[int, int | None]]) -> int | None:
    """Where the last iteration of the calls ``mine`` (host starts, in order) that enclose
    ``others`` (the other classes' calls, (host start, end)) ends: the latest end of the other
    calls after its last call, when no more of them come there than the gaps between its calls
    hold, their most plus their spread (iterations that hold the same number, a decode of
    fixed length, allow no more; a phase after the loop is no iteration's); None when none
    come, or too many (the last call keeps its own end). A batch's ``model.generate`` of a T5
    runs its encoder once, then a decoder forward per token: the last batch read 1.8 ms, its
    encoder alone, for the program's 57.9 (and the median of a run of 48 steps fell 12 % with
    it). Why the spread: BoTorch's loop calls its input transform 244-708 times an iteration
    as scipy's L-BFGS-B takes more or fewer steps, and its last iteration 790 times, once
    scipy 1.17 was installed: with no more than the most allowed, it read 0.03 ms for the
    program's 140."""
    at = np.asarray(mine, dtype=np.int64)
    known = sorted((int(h), int(e)) for h, e in others if e is not None)
    if at.size < 2 or not known:
        return None
    starts = np.asarray([h for h, _ in known], dtype=np.int64)
    first = int(np.searchsorted(starts, at[-1]))
    per_gap = np.diff(np.searchsorted(starts, at))
    if first == starts.size or starts.size - first > 2 * int(per_gap.max()) - int(per_gap.min()):
        return None
    return max(e for _, e in known[first:])


def iteration_begins(mine: Sequence[int], others: Sequence[int]) -> np.ndarray:
    """Which calls ``mine`` (host starts, in order) of the function marking the iteration
    (:func:`iteration_call`) begin one: the first, and each after a call of ``others``. A
    second call with none between is the same iteration's (gpt-fast's speculative decode,
    every draft token accepted, runs ``model_forward`` once more, on the draft, to fill its
    cache: 41 calls for 26 iterations)."""
    if not len(others):
        return np.ones(len(mine), dtype=bool)
    return np.r_[True, others_between(mine, others)].astype(bool)


# --- a module called several times per iteration -------------------------------------------
# (call_groups: the rule's reasoning is in its docstring)
MAX_GROUP = 4  # calls per step at most, but for windows of one input: classifier-free guidance 2, InstructPix2Pix's 3
# windows of one input per step at most: a segmentation slide's 4-25, tiled diffusion's views; a
# pass over one preloaded tensor's hundreds of chunks is an inference loop (the cut costs calls x k)
MAX_WINDOWS = 256
BACK_TO_BACK_NS = 50_000  # a group's calls: only a Python statement between them (4-36 us seen on a loaded CPU)
GROUP_SEPARATION = 6.0  # the loop's work between groups against the gaps inside them, medians (7.6x seen under load)
GROUP_SHARE = 0.75  # the calls that must fall in back-to-back runs of exactly k
MIN_GROUPS = 3  # such runs, at least
SHORT_GROUP_COST = 1.5  # a group closed before its k-th call, against one gap read against its class
GROUP_CLIP = 64.0  # gaps longer than this many times the first quartile weigh as that long in the split


@dataclass(frozen=True)
class CallGroups:
    """A module step of ``calls`` calls per loop iteration (:func:`call_groups`): ``sizes``,
    each group's number of calls in call order (they sum to the calls), mostly ``calls``.
    Of :func:`site_groups`, the sizes vary and ``calls`` is 1: one call per step past the
    groups known (a traced pass's calls after the light pass's last group)."""

    calls: int
    sizes: list[int]
    windows: bool = False  # the calls of a group took windows of one input (call_groups' ``window``)

    def firsts(self) -> list[int]:
        """The position of each group's first call."""
        return np.r_[0, np.cumsum(self.sizes)[:-1]].astype(int).tolist()

    def lasts(self) -> list[int]:
        """The position of each group's last call."""
        return (np.cumsum(self.sizes) - 1).astype(int).tolist()

    def runs(self) -> list[list[int]]:
        """``sizes`` run-length encoded, ``[[size, times], ...]``: what a traced pass follows
        (:class:`perfdoctor.record.bootstrap.steps.ModuleSteps`)."""
        out: list[list[int]] = []
        for s in self.sizes:
            if out and out[-1][0] == s:
                out[-1][1] += 1
            else:
                out.append([int(s), 1])
        return out


def _two_classes(log_gaps: np.ndarray) -> float:
    """The threshold (in log ns) that splits ``log_gaps`` into two classes with the largest
    variance between them (Otsu's): the gaps inside groups and the gaps between them. The
    gaps are first clipped at ``GROUP_CLIP`` times their first quartile (inside the short
    class whenever k > 1): a few very long gaps (a pipeline's text encoding and image
    decoding between its loops, or on a loaded CPU 2-10 ms stalls, once 2.2 s) otherwise
    made a class of their own, and the loop's work fell in with the back-to-back gaps."""
    x = np.sort(np.minimum(log_gaps, np.quantile(log_gaps, 0.25) + np.log(GROUP_CLIP)))
    n = x.size
    s = np.arange(1, n)
    c = np.cumsum(x)[:-1]
    mu0, mu1 = c / s, (x.sum() - c) / (n - s)
    between = s * (n - s) * (mu0 - mu1) ** 2
    i = int(np.argmax(between))
    return float((x[i] + x[i + 1]) / 2)


def call_groups(host_start: Sequence[int], host_end: Sequence[int], tid: Sequence[int] | None = None,
                waited: Sequence[int] | None = None, window: Sequence[bool] | None = None) -> CallGroups | None:
    """The calls of the outermost repeating module (its depth-0 calls in call order: host
    start and host end of each, and its thread) grouped k > 1 per loop iteration, or None
    (one call per iteration: the step is the call, as before).

    Nothing marks the iteration when the module step is the last evidence (:func:`choose_step`,
    8.): a loop that calls one model several times per iteration (classifier-free guidance
    written as two UNet calls, unconditional then conditional, and then the scheduler's
    update; a siamese network's two branches) read as k steps per iteration at 1/k of the
    time each. What the light pass knows of the loop is the host gaps between the calls,
    from each call's end to the next one's start. Two calls in one iteration run back to
    back: between them only the Python of one statement (4-36 us here on a loaded 2-core
    CPU); between iterations runs the loop's own work (the guidance mix, the scheduler's
    step, a progress bar, a sync: 0.1-0.5 ms on that CPU). So the period is in the work
    between calls, and this rule asks for it there, not in the noise of the gaps' lengths:

    1. the gaps (same thread only: a thread change always ends a group) fall in two classes
       (:func:`_two_classes`, in log time), whose medians lie ``GROUP_SEPARATION`` apart, and
       the short class is back to back, a median of ``BACK_TO_BACK_NS`` at most. A decode
       loop's gaps hold its per-token work (sampling, stopping checks: 0.5 ms on the H200
       for HF generate), so a decode loop that stalls every N tokens (a log line, a
       checkpoint) has no back-to-back class and stays one step per token, however regular
       the stall; a loop whose gaps are all alike (noise, prefill and decode) has no two
       classes;
    2. the runs of calls joined by short gaps have one size k, 2 to ``MAX_GROUP`` (more for
       windows of one input, below), for ``GROUP_SHARE`` of the calls and ``MIN_GROUPS``
       runs at least: the period repeats inside the loop. A tight loop with nothing between
       calls (a benchmark's ``for _ in range(n): model(x)``) is one long run per loop, more
       than ``MAX_GROUP`` calls, and not a period; random gaps give runs of every size (most
       often 1);
    3. the groups are then cut by that period, not gap by gap: the cut with the fewest
       disagreements with the two classes (a long gap inside a group, a short one between
       groups, each 1) where a group closed before its k-th call costs ``SHORT_GROUP_COST``
       (dynamic programming over the calls). One back-to-back gap slowed past the threshold
       (a preemption, a garbage collection: one of 24 gaps in a warm-up on this CPU was
       387 us) then splits no group, while a stray call (an extra call before a loop) is
       its own short group and the period goes on after it.

    ``waited`` (ns per gap, where known): the time the calls' thread waited for another
    thread or process in each gap (the light pass's waits). It is no work of the loop's and
    says nothing of the period, so it is taken out of the gap: a loop fed by a process pool
    in bursts (pool_classify.py, 3 workers) takes a burst's batches back to back and waits
    for the next burst; the waits made runs of 2 calls, and one run read 22 steps, most of
    two batches, for its 40. Less the waits, its gaps are mostly its own Python (median 28-41
    us, 80 % under 100 us over 39 runs), no second class: one step per call.

    ``window`` (per call, where known): whether the call took another window of the previous
    call's input (a tensor of the same shape on the same storage at another place, grad
    disabled: the light pass's :class:`~perfdoctor.record.bootstrap.steps.Windows`). Where
    runs of window-joined calls have one size k and the input changes across the longer
    gaps (:func:`_window_groups`), each run is a step, up to ``MAX_WINDOWS`` calls and
    whatever work between them; that comes first. mmsegmentation's sliding-window inference
    calls its model on 9 crops of each image, the stitching between them (adding each crop's
    padded logits into the image's: 33-90 us on this CPU, where it computes; 60-90 us of
    launches on the H100), the mask to the host between images (2-4 ms): one step per
    window read 270 steps of 0.26 ms for 30 images at 4.28 ms. A benchmark's block (timeit's
    ``number``) calls on one tensor, a loop over slices of one preloaded tensor that logs
    every 10th batch never changes input between its runs: the gaps' rule, as before.

    Left out: a tight loop (nothing between calls) that stalls every 2 to 4 calls reads as
    groups; whether a model is fed its own output (one step per call) or the same inputs
    twice is not recorded, only windows."""
    h = np.asarray(host_start, dtype=np.int64)
    e = np.asarray(host_end, dtype=np.int64)
    n = h.size
    if n < 2 * MIN_GROUPS:
        return None
    gaps = np.maximum(h[1:] - e[:-1] - (0 if waited is None else np.asarray(waited, dtype=np.int64)[: n - 1]), 1)
    outer = np.zeros(n - 1, dtype=bool) if tid is None else np.asarray(tid)[1:] != np.asarray(tid)[:-1]
    windows = _window_groups(gaps, outer, window)
    if windows is not None:
        return windows
    inner = np.log(gaps[~outer].astype(float))
    if inner.size < 2 or np.ptp(inner) == 0:
        return None
    cut = _two_classes(inner)
    short = (np.log(gaps.astype(float)) <= cut) & ~outer
    lo, hi = gaps[short], gaps[~short & ~outer]
    if lo.size == 0 or hi.size == 0 or np.median(lo) > BACK_TO_BACK_NS or np.median(hi) < GROUP_SEPARATION * np.median(lo):
        return None
    k = _period(np.diff(np.r_[0, np.flatnonzero(~short) + 1, n]), n)  # of the runs of calls joined by short gaps
    return None if k is None or k > MAX_GROUP else CallGroups(k, _cut_groups(short, outer, k))


def _window_groups(gaps: np.ndarray, outer: np.ndarray, window: Sequence[bool] | None) -> CallGroups | None:
    """:func:`call_groups` by the calls' windows of one input: the runs of window-joined
    calls (on one thread) have one size k, 2 to ``MAX_WINDOWS``, by :func:`_period`, and
    ``GROUP_SHARE`` of the gaps where the input changes are ``GROUP_SEPARATION`` times the
    median gap between windows. The median, not a class of the gaps: a loaded CPU preempts
    some of a group's 8 gaps for a millisecond, which split its runs of short gaps (20 of 30
    images in runs of 9, 9 of 270 gaps over 0.5 ms). A decode loop over slices of its token
    buffer changes input after its prefill too, with a token's work between: no."""
    if window is None or len(window) < outer.size + 1:
        return None
    joined = np.asarray(window[1: outer.size + 1], dtype=bool) & ~outer
    k = _period(np.diff(np.r_[0, np.flatnonzero(~joined) + 1, outer.size + 1]), outer.size + 1)
    changed = gaps[~joined & ~outer]
    if k is None or k > MAX_WINDOWS or changed.size == 0:
        return None
    if np.mean(changed >= GROUP_SEPARATION * np.median(gaps[joined])) < GROUP_SHARE:
        return None
    return CallGroups(k, _cut_groups(joined, outer, k), True)


def _period(runs: np.ndarray, n: int) -> int | None:
    """The size k > 1 that most of ``n`` calls' runs have, when ``MIN_GROUPS`` runs at least
    and ``GROUP_SHARE`` of the calls have it; else None."""
    if runs.size == 0:
        return None
    sizes, counts = np.unique(runs, return_counts=True)
    weight = sizes * counts
    i = int(np.argmax(weight))
    k = int(sizes[i])
    return k if k >= 2 and counts[i] >= MIN_GROUPS and weight[i] >= GROUP_SHARE * n else None


def _cut_groups(short: np.ndarray, outer: np.ndarray, k: int) -> list[int]:
    """Group sizes (at most ``k`` calls each) for calls whose gaps are ``short`` (back to
    back) or not, a group never across an ``outer`` gap, with the fewest disagreements:
    :func:`call_groups`, 3. State: the calls in the open group less one."""
    inf = float("inf")
    cost = [0.0] + [inf] * (k - 1)
    back: list[list[int]] = []  # per gap, per state after it: the state before it
    for s, o in zip(short.tolist(), outer.tolist()):
        new, came = [inf] * k, [0] * k
        if not o:
            for p in range(k - 1):
                new[p + 1], came[p + 1] = cost[p] + (0.0 if s else 1.0), p
        split = [cost[p] + (1.0 if s else 0.0) + (SHORT_GROUP_COST if p < k - 1 else 0.0) for p in range(k)]
        p = int(np.argmin(split))
        new[0], came[0] = split[p], p
        cost = new
        back.append(came)
    final = [cost[p] + (SHORT_GROUP_COST if p < k - 1 else 0.0) for p in range(k)]
    state = int(np.argmin(final))
    sizes, size = [], 1
    for came in reversed(back):
        if state == 0:
            sizes.append(size)
            size = 1
        else:
            size += 1
        state = came[state]
    sizes.append(size)
    return sizes[::-1]


# --- a module called from several places per iteration ------------------------------------


def iteration_site(sites: Sequence[int]) -> int | None:
    """Which call site of one module marks the loop iteration, from the site of each of its
    depth-0 calls in call order (ordinals by first call: the place in the program that made
    the call, :class:`perfdoctor.record.bootstrap.steps.ModuleSteps`); None when none does,
    and then every call is a step, as with one site.

    A continuous-batching server prefills each newly admitted request with a forward of its
    own, then runs one decode forward over the running batch: per scheduler iteration the
    decode's site once and the prefill's 0 to n times (cont_batch.py: 47 iterations, 24
    prefills; a step per forward read 71). The site called most often marks the iteration
    (of two called alike, the one first called last: the loop body's last call closes it,
    classifier-free guidance written as two calls) when each other site's calls lie inside
    its loop: more than ``ENCLOSES`` of them between its first call and its last (not a
    warm-up loop before it), and more than its calls per gap between two of theirs, the
    outer-loop test of :func:`iteration_instance` (``other.size ** 2 > mine.size``): a
    prefill once per generation before a run of decode calls (HF generate's ``_prefill``, a
    hand-written ``generate()``) marks an outer loop, and its call is a step of its own, the
    generation's first token. (Two models read the other way, the one called less often
    marking the iteration: an assisted generate's draft is a helper called several times
    in every iteration; a site called less often is work only some iterations do.)"""
    at = np.asarray(sites, dtype=np.int64)
    ordinals, counts = np.unique(at, return_counts=True)
    if ordinals.size < 2:
        return None
    mark = int(max(zip(counts.tolist(), ordinals.tolist()))[1])  # ordinals are in order of first call
    mine = np.flatnonzero(at == mark)
    for o in ordinals[ordinals != mark]:
        theirs = np.flatnonzero(at == o)
        inside = np.mean((theirs > mine[0]) & (theirs < mine[-1]))
        if inside <= ENCLOSES or theirs.size ** 2 <= mine.size:
            return None
    return mark


def site_groups(sites: Sequence[int]) -> CallGroups | None:
    """A module's calls (their sites in call order, :func:`iteration_site`) grouped one per
    loop iteration: each group the calls since the previous call of the marking site, up to
    and with its next call (an iteration's prefills, then its decode); calls after the last
    one, a group of their own. None when no site marks the iteration."""
    mark = iteration_site(sites)
    if mark is None:
        return None
    bounds = np.r_[0, np.flatnonzero(np.asarray(sites) == mark) + 1]
    if bounds[-1] < len(sites):
        bounds = np.r_[bounds, len(sites)]
    return CallGroups(1, np.diff(bounds).astype(int).tolist())


# --- a module called with grad enabled and disabled ---------------------------------------


def grad_mode_steps(grad: Sequence[bool]) -> tuple[bool, np.ndarray, np.ndarray] | None:
    """Which of a module's depth-0 calls are the steps when some ran with grad enabled and
    some without (``grad``: each call's ``torch.is_grad_enabled()``, in call order): the
    calls of the mode most of them ran in (grad enabled on a tie), when the other mode's
    calls come in runs between few of theirs. Returns (that mode, the positions of its calls,
    and per one of them whether a run of the other mode lies between the previous one and
    it: an end of pass, its time no step's), or None: every call is a step, as before.

    PyTorch's word_language_model trains with no optimizer and no data loader (nothing but
    the model's calls marks its loop) and evaluates the same model under ``torch.no_grad()``
    after each epoch: one step per call read 86 for its 76 training batches, the rate 2.56
    ms per step for the program's 2.86 (lstm_lm.py). An inference loop whose warm-up ran
    with grad enabled keeps its no-grad calls. When more than ``ENCLOSES`` of the gaps
    between two calls of the mode hold the other's (a no-grad forward in every training
    step: the iteration's own work), None."""
    g = np.asarray(grad, dtype=bool)
    mode = bool(2 * np.count_nonzero(g) >= g.size)
    mine = np.flatnonzero(g == mode)
    if mine.size < 2 or mine.size == g.size:
        return None
    between = np.diff(mine) > 1  # a call of the other mode between two of the mode's
    if np.mean(between) > ENCLOSES:
        return None
    return mode, mine, np.r_[False, between]


def _iteration_marks(marks: pd.DataFrame, ranges: pd.DataFrame) -> pd.DataFrame:
    """The compiled-call ``marks`` that begin an iteration (:func:`iteration_begins`), against
    the other compiled functions' calls in ``ranges``."""
    kinds = per_name(ranges["name"], rangenames.kind)
    others = ranges.loc[(kinds == rangenames.COMPILED).to_numpy() & (ranges["name"] != marks["name"].iloc[0]).to_numpy(), "start_ns"]
    marks = marks.sort_values("start_ns", kind="stable")
    return marks[iteration_begins(marks["start_ns"].to_numpy(np.int64), others.to_numpy(np.int64))]


def training_loop(
    hosts: Mapping[str, Sequence[int]], ends_of_passes: Sequence[int] = (), evaluating: Sequence[int] = ()
) -> tuple[dict[str, int], list[int]]:
    """The training iteration's facts, one rule for a trace (:func:`choose_step_ranges`) and
    for the light pass (:func:`perfdoctor.record.light.find_step`), from ``hosts``: the host
    starts of each torch loop range (data loader fetches, ``Optimizer.step``/``zero_grad``).

    Returns (per data loader range, the fetches that trained: ``steady.training_batches``,
    for ``choose_step``'s counts; the host starts of the optimizer's steps, else of its
    zero_grad, the marks an iteration must hold to be a training step:
    ``steady.loop_iterations``). Not a zero_grad beside steps: the transfer learning
    tutorial calls ``optimizer.zero_grad()`` on every batch of its 'val' phase too (forward
    only), and its 36 training batches read 54 steps, the validation's among them. (An
    iteration whose step AMP's ``GradScaler`` skipped, found inf, is none then.)
    ``ends_of_passes``: the fetches that raised StopIteration, which the light pass sees. A
    trace does not say which fetch raised: it records that fetch as one more range of the
    same name, and what it has instead is that no optimizer mark follows it before the next
    fetch (the iteration it would begin holds none: an evaluation loop's first batch, the
    next epoch's), as for an evaluation batch; the iteration before it ends at it, as at an
    end of pass. No marks (no training): no counts, and in a trace a fetch that raised is
    told apart by the work after it (:func:`training_iterations`). ``evaluating``: the
    fetches whose iteration trains nothing (``steady.evaluation_fetches``), counted as ends of
    passes: no training batch, and none of a group.

    A loop over a data loader that steps its own optimizer (d2l's ``sgd``, Keras' torch
    backend, a hand-written ``p -= lr * p.grad``) has no optimizer range: its ``backward()``
    calls (the light pass's :data:`~perfdoctor.names.ranges.BACKWARD_RANGE` series, in
    ``hosts``) mark its training batches instead, so its evaluation loop's batches are none
    (d2l_train.py --model module: 120 steps for 100 training batches and 20 test batches)."""
    marks = sorted(h for n, hs in hosts.items() if n.startswith(rangenames.LOOP_PREFIXES[1:]) for h in hs)
    if not marks and any(n.startswith(rangenames.DATA_LOADER_PREFIX) for n in hosts):
        marks = sorted(h for n, hs in hosts.items() if n == rangenames.BACKWARD_RANGE for h in hs)
    if not marks:
        return {}, []
    # the optimizer's steps group the batches and mark them (a zero_grad may open a group, not
    # end it, and may zero an evaluation's batch)
    stepped = sorted(h for n, hs in hosts.items() if n.startswith(rangenames.OPTIMIZER_STEP_PREFIX) for h in hs) or marks
    apart = set(evaluating)
    counts = {
        n: steady.training_batches([h for h in hs if h not in apart], [*ends_of_passes, *(h for h in hs if h in apart)], stepped,
                                   hosts.get(rangenames.BACKWARD_RANGE))
        for n, hs in hosts.items() if n.startswith(rangenames.DATA_LOADER_PREFIX)
    }
    return counts, stepped


def other_optimizers(names: Collection[str]) -> set[str]:
    """With one optimizer's steps named apart among ``names`` (``Optimizer.step#Adam#2.step``,
    :func:`perfdoctor.names.ranges.optimizer_instance`: the light pass found they mark the
    iteration, ``perfdoctor run``'s traced passes mark them so), the other optimizer ranges:
    the other optimizers' steps (under torch's name) and every ``zero_grad`` (torch's range
    does not say whose it is). They mark no iteration: the work of one."""
    if not any(rangenames.parse_optimizer_instance(n) for n in names):
        return set()
    return {n for n in names if n.startswith(rangenames.LOOP_PREFIXES[1:]) and rangenames.parse_optimizer_instance(n) is None}


# An optimizer range's steps searched for a period (the last ones), and the whole periods a
# trace must hold for the period to tell its optimizers apart (a few steps of noise repeat too)
OPTIMIZER_SEQUENCE = 2_000
OPTIMIZER_REPEATS = 3


def optimizer_ordinals(signatures: Sequence[int]) -> np.ndarray | None:
    """Which optimizer made each step of one torch range name, from each step's signature
    (the ops inside it, :func:`step_signatures`), in step order: per step its optimizer's
    ordinal by first step (1 for the first), or None when the signatures tell none apart.

    A plain trace names the steps of a GAN's two Adams alike, ``Optimizer.step#Adam.step``,
    where ``perfdoctor run`` tells them apart by torch's optimizer hooks (the light pass's
    ``instance``). The ops inside a step run once per parameter (torch's for-loop Adam on a
    CPU: 26 per parameter), so the critic's 10 parameters and the generator's 8 give two
    signatures, 260 and 208 ops, in a fixed pattern per iteration: gan_train.py's 5 critic
    steps, then the generator's (period 6), or one each (period 2). Each optimizer's first
    step also makes its state (390 and 312 ops): the pattern holds from the second period on.
    So the steps are the period's positions (:func:`repeating_region`, the outermost), those
    with one signature one optimizer, when the pattern has two signatures or more, holds
    over ``OPTIMIZER_REPEATS`` periods and every step after the first period. One optimizer
    (a signature that does not change) or ops that vary (LBFGS's closure calls, as many as
    its line search takes): None. Left out: two optimizers whose steps run the same ops (a
    foreach or fused step launches one op per kind over all parameters)."""
    sig = np.asarray(signatures, dtype=np.int64)
    n = sig.size
    offset = max(0, n - OPTIMIZER_SEQUENCE)
    region = repeating_region(sig[offset:])
    if region is None:
        return None
    period, start, stop = region
    position = (np.arange(n) - start - offset) % period
    pattern = sig[start + offset:start + offset + period]
    if period < 2 or stop - start < OPTIMIZER_REPEATS * period or (sig[period:] != pattern[position[period:]]).any():
        return None
    label = pd.factorize(pattern[position])[0]  # numbered by first step
    return label + 1 if label.max() >= 1 else None


def step_signatures(marks: pd.DataFrame, ops: pd.DataFrame) -> np.ndarray:
    """Per range of ``marks`` (one name, in start order), a code of the op names inside it on
    its thread, in order: equal codes exactly when the sequences are (:func:`_sequence_codes`)."""
    ops = ops.sort_values(["tid", "start_ns"], kind="stable")
    codes = pd.factorize(ops["name"])[0]
    o_tid, o_start = ops["tid"].to_numpy(), ops["start_ns"].to_numpy(np.int64)
    keys = []
    for tid, start, end in zip(marks["tid"].to_numpy(), marks["start_ns"].to_numpy(np.int64), marks["end_ns"].to_numpy(np.int64)):
        lo, hi = np.searchsorted(o_tid, tid, side="left"), np.searchsorted(o_tid, tid, side="right")
        a, b = lo + np.searchsorted(o_start[lo:hi], start, side="left"), lo + np.searchsorted(o_start[lo:hi], end, side="right")
        keys.append(codes[a:b])
    return _sequence_codes(keys)


def optimizer_instances(ranges: pd.DataFrame, ops: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """For a trace whose optimizer ranges name no optimizer apart (a plain torch.profiler
    trace), the steps of the optimizer that marks the loop iteration, renamed as ``perfdoctor
    run``'s light pass names their series (``Optimizer.step#Adam#2.step``,
    :func:`perfdoctor.names.ranges.optimizer_instance`; torch's name keeps the others' steps,
    the iteration's work), and how they were found; the rule is
    the light pass's (:func:`iteration_instance`) over the optimizers
    :func:`optimizer_ordinals` tells apart. Empty and "" when there are none: one optimizer
    per class, or ops that tell none apart. A plain trace of gan_train.py read 180 steps for
    its 30 iterations, one per step of either optimizer."""
    names = ranges["name"].drop_duplicates()
    steps_of = [n for n in names if str(n).startswith(rangenames.OPTIMIZER_STEP_PREFIX)]
    if ops.empty or any(rangenames.parse_optimizer_instance(n) for n in steps_of):
        return ranges.iloc[0:0], ""
    for name in steps_of:
        marks = _outermost(ranges[ranges["name"] == name])
        if len(marks) < 2 * OPTIMIZER_REPEATS:
            continue
        ordinals = optimizer_ordinals(step_signatures(marks, ops))
        mark = iteration_instance(ordinals, closing=True) if ordinals is not None else None
        if mark is None:
            continue
        mine = marks[ordinals == mark]
        how = (f"; the steps of one optimizer (#{mark} by first step, told apart by the ops inside its steps: "
               f"{ordinals.max()} optimizers in a fixed pattern) of those torch names {name!r}, which enclose the others' {len(marks) - len(mine)}")
        return mine.assign(name=rangenames.optimizer_instance(name, int(mark))), how
    return ranges.iloc[0:0], ""


def enclosed_marks(spans: Mapping[str, tuple[Sequence[int], Sequence[int]]]) -> set[str]:
    """The torch loop ranges (``spans``: per name, its calls' host starts and ends) most of
    whose calls start inside a call of another one: ``optimizer.step(closure)`` whose closure
    calls ``optimizer.zero_grad()`` (LBFGS, which calls it several times per step; Lightning).
    They mark no iteration: the range around them does, and rule 7 of :func:`choose_step`,
    which prefers ``zero_grad``, read one step per closure call (a PINN under LBFGS: 119
    steps for 20)."""
    loops = {n: (np.asarray(s, dtype=np.int64), np.asarray(e, dtype=np.int64)) for n, (s, e) in spans.items()
             if rangenames.kind(n) == rangenames.LOOP and len(s)}
    enclosed = set()
    for name, (starts, _) in loops.items():
        inside = np.zeros(starts.size, dtype=bool)
        for other, (s, e) in loops.items():
            if other != name:
                order = np.argsort(s, kind="stable")
                inside |= steady.within(starts, s[order], e[order])
        if np.mean(inside) > 0.5:
            enclosed.add(name)
    return enclosed


# The ops that create a data loader's iterator: ``_BaseDataLoaderIter.__init__`` draws its
# base seed, ``torch.empty((), dtype=torch.int64).random_(generator=...).item()``
# (torch/utils/data/dataloader.py), between a pass's last fetch and the next pass's first
LOADER_ITERATOR_OPS = frozenset({"aten::empty", "aten::random_", "aten::item", "aten::_local_scalar_dense"})


def loop_work(profile: Profile) -> pd.DataFrame:
    """The host work a loop iteration over a data loader does besides fetching (its model's):
    every CPU op and launch call (start_ns, end_ns, tid), less the ops that create a loader's
    iterator (:data:`LOADER_ITERATOR_OPS`); ``backward``: it runs inside an autograd node's
    evaluation on its thread (:func:`in_backward`)."""
    ops = profile.ops[~profile.ops["name"].isin(LOADER_ITERATOR_OPS)]
    launches = profile.calls[is_launch(profile.calls["name"])]
    work = pd.concat([t[["start_ns", "end_ns", "tid"]] for t in (ops, launches)], ignore_index=True)
    return work.assign(backward=in_backward(profile.ops, work))


def first_backwards(fetch_ns: np.ndarray, work: pd.DataFrame) -> np.ndarray:
    """Per data loader iteration (from a fetch's start to the next's) that runs a backward, the
    start of its first backward work: in a trace, what the light pass's ``backward()`` series
    is to :func:`training_loop` (the marks of a loop that steps its own optimizer)."""
    back = np.sort(work.loc[work["backward"], "start_ns"].to_numpy(np.int64))
    fetches = np.sort(fetch_ns)
    at = np.searchsorted(back, fetches, side="left")
    bound = np.searchsorted(back, np.append(fetches[1:], np.iinfo(np.int64).max), side="left")
    return back[at[at < bound]]


def in_backward(ops: pd.DataFrame, work: pd.DataFrame) -> np.ndarray:
    """Per row of ``work``, whether it starts inside a backward op (an autograd node's
    evaluation, :data:`perfdoctor.names.ranges.BACKWARD_OP_PREFIX`) on its thread. On a GPU
    the backward runs on autograd's own thread; on the CPU on the loop's, among its forwards."""
    out = np.zeros(len(work), dtype=bool)
    nodes = ops[starts_with(ops["name"], rangenames.BACKWARD_OP_PREFIX)].sort_values("start_ns", kind="stable")
    tids = work["tid"].to_numpy()
    for tid, n in nodes.groupby("tid", sort=False):
        start, end = n["start_ns"].to_numpy(np.int64), n["end_ns"].to_numpy(np.int64)
        outer = start > np.r_[np.iinfo(np.int64).min, np.maximum.accumulate(end)[:-1]]  # nested nodes: their outermost
        mine = tids == tid
        out[mine] = steady.within(work["start_ns"].to_numpy(np.int64)[mine], start[outer], end[outer])
    return out


# The work beyond the usual iteration's, in calls of the step's module (the median work inside
# one), from which the time between two steps holds the other grad mode's calls: half a call
OTHER_MODE_CALLS = 0.5


def own_work_ends(timed: pd.DataFrame, marks: pd.DataFrame, work: pd.DataFrame) -> pd.DataFrame:
    """Step ranges ``timed`` (each from its mark to the next, :func:`iteration_ranges` of
    ``marks``) of a module step whose steps are one grad mode's calls
    (:func:`grad_mode_steps`: ``perfdoctor run`` marks those alone), each that holds the
    other mode's calls cut at the end of its own work: of the first as many items of
    ``work`` (:func:`loop_work`) from its mark on as the median step holds.

    PyTorch's word_language_model evaluates the model under ``no_grad`` after each epoch,
    the calls the run left unmarked: the epoch's last training step ran through the whole
    evaluation to the next epoch's first call (lstm_lm.py traced whole: 10.3 ms for a batch
    the program timed at 3.8; now 3.0). The light pass, which times every call, ends it where the evaluation's first
    call begins; a trace shows the evaluation's ops instead: its training steps hold 351
    ops each (86 in the model's call), the one before the evaluation 702. A step holding
    ``OTHER_MODE_CALLS`` of a call's ops or more beyond the median holds the other mode's
    calls; fewer (a log line's ``.item()`` every n steps) are the step's own."""
    out = timed.copy()
    for tid, t in timed.groupby("tid", sort=False):
        mine = work[work["tid"] == tid].sort_values("start_ns", kind="stable")
        at, reach = mine["start_ns"].to_numpy(np.int64), np.maximum.accumulate(mine["end_ns"].to_numpy(np.int64))
        first = np.searchsorted(at, t["start_ns"].to_numpy(np.int64), side="left")
        held = np.searchsorted(at, t["end_ns"].to_numpy(np.int64), side="right") - first
        call = np.searchsorted(at, marks.loc[t.index, "end_ns"].to_numpy(np.int64), side="right") - first
        usual = int(np.median(held)) if held.size else 0
        other = (held - usual >= OTHER_MODE_CALLS * max(float(np.median(call)), 1.0)) & (usual > 0)
        if other.any():
            own = reach[np.minimum(first + usual, at.size) - 1]
            out.loc[t.index[other], "end_ns"] = np.maximum(own, marks.loc[t.index, "end_ns"].to_numpy(np.int64))[other]
    return out


def loop_ranges(
    marks: pd.DataFrame, fetches: pd.DataFrame, ends: np.ndarray, training: Sequence[int], work: pd.DataFrame | None,
    others: pd.DataFrame | None = None, last_trained: int | None = None,
) -> pd.DataFrame:
    """Step ranges from torch's loop range ``marks`` (the one name chosen or named by
    ``--step``), each the loop iteration, by the light pass's rules
    (:func:`perfdoctor.record.light.loop_series`): a fetch's by :func:`training_iterations`;
    the optimizer's step's over its group, from its first fetch to the first fetch after the
    step (``steady.step_groups`` over ``fetches``, every data loader range, outermost, and
    ``ends``, those that fetched no batch, the ends of passes: :func:`pass_ends`), never
    across the evaluation loop or the epochs' gap before it; without fetches, from one step
    to the next, one per optimizer step: :func:`optimizer_ranges`. ``last_trained``: where the
    training after the trace's last fetch ended (:func:`trained_after_last`), which ends
    that fetch's iteration as one more fetch would."""
    if str(marks["name"].iloc[0]).startswith(rangenames.DATA_LOADER_PREFIX):
        if last_trained is not None and marks["start_ns"].max() == fetches["start_ns"].max():
            # the iteration of that fetch ends where its training ended, as at one more fetch
            last = marks.loc[[marks["start_ns"].idxmax()]]
            marks = pd.concat([marks, last.assign(start_ns=last_trained + 1, end_ns=last_trained + 1)], ignore_index=True)  # left out: the last
        return training_iterations(marks, training, work)
    if fetches.empty or np.asarray(ends, dtype=bool).all():  # no loader feeds the training: the light pass's rule
        return optimizer_ranges(marks, others, work)
    m = _outermost(marks)
    starts = fetches["start_ns"].to_numpy(np.int64)
    if last_trained is not None:
        starts, ends = np.append(starts, last_trained + 1), np.append(np.asarray(ends, dtype=bool), True)
    at, first, after, _ = steady.step_groups(m["start_ns"].to_numpy(np.int64), starts, ends)  # a trace's rate counts every step
    timed = m.iloc[at].copy()
    timed["start_ns"] = starts[first]
    timed["end_ns"] = starts[after] - 1
    return timed.sort_values("start_ns", kind="stable")


def trained_after_last(fetches: pd.DataFrame, others: pd.DataFrame, ops: pd.DataFrame, work: pd.DataFrame | None = None) -> int | None:
    """Where the training after the trace's last fetch ended (``steady.last_fetch_trained``,
    the light pass's rule), its marks the optimizer ranges of ``others`` (the loop ranges),
    when the program went on after it (an op of ``ops`` began later); else None. A whole
    trace of HF's Trainer read 7 steps for its 8. A range the profiler's stop closed is cut
    (Lightning's profiler stops inside the optimizer step: the last one read 19.8 ms among
    2.5 ms ones, the trace's end its end). With no optimizer (an evaluation loop), the loop's
    ``work`` after the last fetch is its batch's, as the light pass's model calls are: a loop
    stopped at its loader's length (Lightning's predict) read one batch short."""
    if fetches.empty:
        return None
    opt = others[starts_with(others["name"], rangenames.LOOP_PREFIXES[1:])]
    spans = opt if not opt.empty or work is None else work
    at = fetches["start_ns"].to_numpy(np.int64)
    last = steady.last_fetch_trained(at, spans["start_ns"])
    if last is None:
        return None
    marks = {"host_start_ns": spans["start_ns"].tolist(), "host_end_ns": spans["end_ns"].tolist(), "gpu_end_ns": spans["end_ns"].tolist()}
    found = steady.training_ends([last], at, [], marks)["host_start_ns"]
    # the ops' own ends: no range for the profiler's stop to cut
    return found[0] if found and (spans is work or (ops["start_ns"] > found[0]).any()) else None


def ended_before_evaluations(timed: pd.DataFrame, fetches: pd.Series, evaluating: pd.Series, loops: pd.DataFrame) -> pd.DataFrame:
    """``timed`` (the training iterations :func:`loop_ranges` found) with each one that an
    evaluation loop's fetch ends (``evaluating``, host starts, among every fetch's:
    ``fetches``) ending where its training ended instead: the latest optimizer range in it,
    the light pass's rule (``steady.training_ends``). The evaluation's set-up before its
    first fetch (Lightning's, 1.3 ms of a 15.2 ms optimizer step on the H200; a new
    iterator's worker processes) is no training step's."""
    opt = loops[starts_with(loops["name"], rangenames.LOOP_PREFIXES[1:])]
    # an evaluation's fetch trains nothing up to the next fetch: at the trace's end, a training
    # batch whose backward the window cut off (Lightning's profiler stops inside its optimizer
    # step) is flagged so by steady.evaluation_fetches, and its optimizer range tells it apart
    every, o = np.sort(fetches.to_numpy(np.int64)), np.sort(opt["start_ns"].to_numpy(np.int64))
    e = evaluating.to_numpy(np.int64)
    upto = np.r_[every, np.iinfo(np.int64).max][np.searchsorted(every, e, side="right")]
    e = e[np.searchsorted(o, upto) == np.searchsorted(o, e)]
    nxt = timed["end_ns"].to_numpy(np.int64) + 1  # each ends 1 ns before the next fetch (iteration_ranges)
    before = np.isin(nxt, e)
    if not before.any():
        return timed
    marks = {"host_start_ns": opt["start_ns"].tolist(), "host_end_ns": opt["end_ns"].tolist(), "gpu_end_ns": opt["end_ns"].tolist()}
    ends = steady.training_ends(timed["start_ns"].to_numpy(np.int64)[before], fetches.to_numpy(np.int64), [], marks)
    end_of = dict(zip(ends["last_ns"], ends["host_start_ns"]))
    start = timed["start_ns"].to_numpy(np.int64)
    return timed.assign(end_ns=[min(int(e), end_of.get(int(s), int(e))) for s, e in zip(start, timed["end_ns"])])


def optimizer_ranges(marks: pd.DataFrame, others: pd.DataFrame | None, work: pd.DataFrame | None) -> pd.DataFrame:
    """Step ranges of a training loop with no data loader (``for step in range(n)``) from
    the optimizer's marks (``marks``: its ``zero_grad`` or ``step``, the one chosen): one per
    optimizer step, by the light pass's rule (``steady.optimizer_iterations``): from one mark
    to the next (:func:`iteration_ranges`), and the iteration before the first mark
    (``zero_grad`` at the iteration's end) or after the last (``zero_grad`` at its start)
    when the trace holds it whole. ``others``: the optimizer's other marks (the ``step``
    ranges beside the ``zero_grad`` chosen); ``work``: the loop's work, :func:`loop_work`
    (the trace's ops and launches on the marks' thread outside the optimizer's ranges, where
    the light pass has its depth-0 module calls): an iteration's make-up in marks and work,
    counted between two marks, says where the first begins. The first ends 1 ns before the
    first mark, as the others end before the next; the last at its optimizer step's end.
    Marks that fall inside the iterations (the loop's work between an optimizer step's end
    and the next mark: ``steady.closed_by_steps``) give one step per mark from the previous
    optimizer step's end to its own's, each ending 1 ns before the next begins."""
    timed = iteration_ranges(marks)
    m = _outermost(marks)
    found = optimizer_loop(marks, others, work) if not timed.empty else None
    if found is None:
        return timed
    starts, ends = np.asarray(found["host_start_ns"], dtype=np.int64), np.asarray(found["gpu_end_ns"], dtype=np.int64)
    if found.get("mark") is not None:
        # the marks fall inside the iterations (zero_grad after the forward: each from the step
        # before to its own step's end), or several mark one (a rollout, then minibatch
        # updates: each group's first mark, over its iteration); each up to the next
        return m.iloc[found["mark"]].assign(start_ns=starts, end_ns=np.minimum(ends, np.r_[starts[1:] - 1, np.iinfo(np.int64).max]))
    first, last = m["start_ns"].iloc[0], m["start_ns"].iloc[-1]
    rows = [timed]
    if starts.size and starts[0] < first:  # the iteration before the first mark
        rows.insert(0, m.iloc[:1].assign(start_ns=starts[0], end_ns=first - 1))
    if starts.size and starts[-1] == last:  # the one after the last
        rows.append(m.iloc[-1:].assign(end_ns=max(int(ends[-1]), int(m["end_ns"].iloc[-1]))))
    out = pd.concat(rows) if len(rows) > 1 else timed
    # an evaluation before an iteration's training is no part of it (the light pass's
    # steady.evaluation_passes, by the backward where a trace has no grad modes)
    backward = work["backward"].to_numpy()
    forward = work[(work["tid"] == m["tid"].iloc[0]).to_numpy() & ~backward]
    return out.assign(start_ns=steady.evaluation_starts(out["start_ns"].to_numpy(np.int64), out["end_ns"].to_numpy(np.int64),
                                                        forward["start_ns"].to_numpy(np.int64), work.loc[backward, "start_ns"].to_numpy(np.int64)))


def optimizer_loop(marks: pd.DataFrame, others: pd.DataFrame | None, work: pd.DataFrame | None) -> dict | None:
    """``steady.optimizer_loop`` over a trace's optimizer ``marks`` (one name; ``others``: the
    loop ranges, the optimizer's other marks among them; ``work``: :func:`loop_work`) on
    their thread, or None (no work, marks on several threads): :func:`optimizer_ranges`'
    iterations, and the groups :func:`choose_step_ranges` tells ``choose_step``."""
    m = _outermost(marks)
    if m.empty or work is None or m["tid"].nunique() > 1:
        return None
    tid = m["tid"].iloc[0]
    name = str(m["name"].iloc[0])
    o = m.iloc[0:0] if others is None else others[(others["name"] != name).to_numpy()
                                                  & starts_with(others["name"], rangenames.optimizer_others(name))]
    o = _outermost(o[o["tid"] == tid]) if not o.empty else o
    calls = {"host_start_ns": m["start_ns"].to_numpy(np.int64), "gpu_start_ns": None, "gpu_end_ns": m["end_ns"].to_numpy(np.int64)}
    other = {"host_start_ns": o["start_ns"].to_numpy(np.int64), "gpu_start_ns": None, "gpu_end_ns": o["end_ns"].to_numpy(np.int64)}
    # the work outside the optimizer's ranges: its first step, which makes its state, has
    # more ops than the others (amp_train.py: 804 against 684 per iteration, 394 outside);
    # and outside the backward, as on a GPU, where it runs on autograd's thread: the light
    # pass counts forward calls. CleanRL's PPO on the CPU, 16 rollout steps per 4 updates:
    # the rollout's gaps held 70 % of all the ops, 80 % of the forward ones (mark_groups)
    mine = work[(work["tid"] == tid).to_numpy() & ~work["backward"].to_numpy()].sort_values("start_ns", kind="stable")
    at, end = mine["start_ns"].to_numpy(np.int64), mine["end_ns"].to_numpy(np.int64)
    opt = pd.concat([m, o])
    inside = np.zeros(at.size + 1, dtype=np.int64)
    np.add.at(inside, np.searchsorted(at, opt["start_ns"].to_numpy(np.int64)), 1)
    np.add.at(inside, np.searchsorted(at, opt["end_ns"].to_numpy(np.int64), side="right"), -1)
    outside = np.cumsum(inside)[:-1] == 0
    return steady.optimizer_loop(calls, other, at[outside], name.startswith(rangenames.LOOP_PREFIXES[1]), rangenames.closes_iteration(name),
                                 end[outside])


def optimizer_groups(loops: pd.DataFrame, work: pd.DataFrame | None, names: Collection[str]) -> dict[str, tuple[int, int]]:
    """Per optimizer range of ``names`` among a trace's ``loops`` (torch's loop ranges, none a
    data loader's) whose marks come several per iteration, each iteration's work before them
    (a PPO rollout: ``steady.mark_groups``): the iterations :func:`loop_ranges` times and the
    marks in each, ``choose_step``'s ``groups``."""
    found = {n: optimizer_loop(g, loops, work) for n, g in loops.groupby("name", sort=False)
             if n in names and n.startswith(rangenames.LOOP_PREFIXES[1:])}
    return {n: (len(x["host_start_ns"]), x["group"]) for n, x in found.items() if x is not None and x.get("group")}


def pass_ends(fetches: pd.DataFrame, work: pd.DataFrame | None) -> np.ndarray:
    """Per data loader fetch (``fetches``, outermost, in start order): it fetched no batch
    and ended a pass — its iteration holds no ``work`` (:func:`loop_work`) on its thread
    after it, when two or more do. A trace does not say which fetch raised StopIteration
    (the light pass is told) nor which one a ``break`` left: this is what it shows of both."""
    ended = np.zeros(len(fetches), dtype=bool)
    timed = iteration_ranges(fetches)
    if work is None or timed.empty:
        return ended
    held = _hold_work(timed, fetches.loc[timed.index, "end_ns"], work)
    ended[fetches.index.get_indexer(timed.index)] = ~held
    return ended | fetched_nothing(fetches, work)


def fetched_nothing(fetches: pd.DataFrame, work: pd.DataFrame) -> np.ndarray:
    """Per data loader fetch (``fetches``), whether it ran no op of ``work`` on its thread
    where its loader's fetches usually run some (the median, per range name: a single-process
    loader's indexing and collation): the fetch that raised StopIteration, whatever follows it.
    An evaluation's DataLoader every N steps of a loop whose batches are made in it is
    followed by training: its end read as a training fetch, 3 steps of the whole trace for 40
    (amp_train.py --val-every 10). A worker loader's fetches run none: nothing is told."""
    ran = _holds_on_thread(fetches["start_ns"].to_numpy(np.int64) - 1, fetches["end_ns"].to_numpy(np.int64), fetches["tid"].to_numpy(), work)
    usual = pd.Series(ran, dtype=np.float64).groupby(fetches["name"].to_numpy()).transform("median").to_numpy()
    return ~ran & (usual > 0)


def training_iterations(fetches: pd.DataFrame, marks: Sequence[int], work: pd.DataFrame | None) -> pd.DataFrame:
    """:func:`iteration_ranges` of data loader fetch ranges, those that begin no training
    iteration left out: ``steady.loop_iterations``'s rule (the light pass's), which keeps the
    iterations holding one of ``marks`` (:func:`training_loop`) when two or more do.

    Without marks (an evaluation loop), a fetch whose iteration holds no ``work``
    (:func:`loop_work`) between its end and the next fetch begins none, when two or more
    do: it fetched no batch. That is how a trace tells the fetch that raised StopIteration at
    a pass's end, which the light pass is told (its ``exhausted``): nothing but the next
    pass's iterator creation runs before the next pass's first fetch (a ``for epoch: for x in
    loader: model(x)`` loop read 3 passes of 5 batches as 17 steps)."""
    timed = iteration_ranges(fetches)
    if timed.empty:
        return timed
    if not len(marks):
        return timed if work is None else timed[_hold_work(timed, fetches.loc[timed.index, "end_ns"], work)]
    f = _outermost(fetches)
    calls = {"host_start_ns": f["start_ns"].to_numpy(np.int64), "gpu_start_ns": None, "gpu_end_ns": f["end_ns"].to_numpy(np.int64)}
    kept = steady.loop_iterations(calls, training_marks=marks)["host_start_ns"]
    return timed[timed["start_ns"].isin(kept)]


def _hold_work(timed: pd.DataFrame, fetch_end: pd.Series, work: pd.DataFrame) -> np.ndarray:
    """Which iterations hold ``work`` on their thread between their fetch's end and their own
    end (``steady.holds_work``, the light pass's rule, per thread); all of them when fewer
    than two do (a trace without ops or launches says nothing)."""
    held = _holds_on_thread(fetch_end.to_numpy(np.int64), timed["end_ns"].to_numpy(np.int64), timed["tid"].to_numpy(), work)
    return held if np.count_nonzero(held) >= 2 else np.ones(len(timed), dtype=bool)


def _holds_on_thread(after: np.ndarray, until: np.ndarray, tids: np.ndarray, work: pd.DataFrame) -> np.ndarray:
    """``steady.holds_work`` per range (after ``after``, by ``until``), on the range's own thread."""
    held = np.zeros(len(tids), dtype=bool)
    for tid in np.unique(tids):
        mine = tids == tid
        held[mine] = steady.holds_work(after[mine], until[mine], work.loc[work["tid"] == tid, "start_ns"])
    return held


def traced_waits(ranges: pd.DataFrame) -> pd.DataFrame:
    """The :data:`~perfdoctor.names.ranges.WAIT_RANGE` ranges of ``perfdoctor run``'s traced
    passes, ``worked`` 1 for those with a :data:`~perfdoctor.names.ranges.WORKED_RANGE`
    inside them on their thread (the rest of the process worked meanwhile), as the light
    pass's waits carry it (:func:`perfdoctor.analysis.steady.waits_between` reads it)."""
    waits = ranges[equals(ranges["name"], rangenames.WAIT_RANGE)].assign(worked=0)
    worked = ranges[equals(ranges["name"], rangenames.WORKED_RANGE)]
    if waits.empty or worked.empty:
        return waits
    busy = np.zeros(len(waits), dtype=bool)
    w_tid, w0, w1 = (waits[c].to_numpy(np.int64) for c in ("tid", "start_ns", "end_ns"))
    m_tid, m_at = worked["tid"].to_numpy(np.int64), worked["start_ns"].to_numpy(np.int64)
    for tid in np.unique(m_tid):
        # a thread is in one wait at a time: a marker's wait is its thread's last begun at or before it
        mine = np.flatnonzero(w_tid == tid)
        if not mine.size:
            continue
        mine = mine[np.argsort(w0[mine], kind="stable")]
        at = m_at[m_tid == tid]
        k = np.searchsorted(w0[mine], at, side="right") - 1
        hit = mine[np.clip(k, 0, None)]
        busy[hit[(k >= 0) & (at <= w1[hit])]] = True
    return waits.assign(worked=busy.astype(np.int64))


def stops_at_pauses(name: str) -> bool:
    """Whether a call-marked step's iteration ends at its call where a pause follows (a model's
    forward, a compiled function). A backward call's and a graph replay's run to the next one
    whatever the time between, as a loop's markers (a fetch, an optimizer step) do: the next
    forward runs between two backwards (makemore by hand: a stall on a loaded CPU read as a
    pause cut the next iteration's forward off one step), the copies around a replay."""
    return name != GRAPH_REPLAY and rangenames.kind(name) not in (rangenames.BACKWARD, rangenames.REPLAY)


def iteration_ranges(marks: pd.DataFrame, waits: pd.DataFrame | None = None, stop_at_pauses: bool = False) -> pd.DataFrame:
    """Step ranges from the ranges that mark a loop iteration: per thread, from the start of
    one to the start of the next (the last one's iteration has no known end: left out).
    Each ends 1 ns before the next begins, so a call at that instant belongs to one step —
    or, with ``stop_at_pauses`` (a call, not a loop's marker: the light pass's rule,
    ``steady.iteration_ends_ns``), at its own end where a pause follows it and no wait for
    a producer holds the time (``steady.fed_between``), or where its thread began to wait
    for another thread before the next (``waits``: the
    :data:`perfdoctor.names.ranges.WAIT_RANGE` ranges of ``perfdoctor run``'s traced passes,
    by ``steady.waits_between``, the light pass's rule): a server's worker idle between
    requests, not serving (its own range kept whole); the next then begins where the wait
    ended (taking the request is its service)."""
    marks = _outermost(marks).sort_values(["tid", "start_ns"], kind="stable")
    idle = resumed = fed = None
    if waits is not None and not waits.empty:
        # one call over every thread's marks (each thread's steps are its own series there),
        # so that it judges whether one thread runs the steps (worked waits: steady.waits_between)
        w = {c: waits[c].to_numpy(np.int64) for c in ("tid", "start_ns", "end_ns", "worked") if c in waits}
        idle, _, resumed = steady.waits_between(marks["start_ns"].to_numpy(np.int64), marks["tid"].to_numpy(np.int64), w)
        fed = steady.fed_between(marks["start_ns"].to_numpy(np.int64), marks["tid"].to_numpy(np.int64), w) if stop_at_pauses else None
    parts = []
    at = 0
    for _, m in marks.groupby("tid", sort=False):  # marks sorted by thread: each group's rows are contiguous
        rows, at = slice(at, at + len(m) - 1), at + len(m)  # its steps but the last
        if len(m) < 2:
            continue
        part = m.iloc[:-1].copy()
        end = m["start_ns"].to_numpy(np.int64)[1:] - 1
        if stop_at_pauses:
            # whisper's beam search traced one token step holding the next clip's encoder,
            # 659 ms among 33 ms ones, where the light pass ended it at its call (CPU, 2026-12-06)
            own = part["end_ns"].to_numpy(np.int64)
            after = np.maximum(end + 1 - own, 0)
            paused = steady.pauses(after, own - part["start_ns"].to_numpy(np.int64) + after)
            if fed is not None:
                paused &= ~fed[rows]
            end = np.where(paused, np.minimum(own, end), end)
        if idle is not None:
            end = np.where(idle[rows] >= 0, np.maximum(part["end_ns"].to_numpy(np.int64), np.minimum(end, idle[rows] - 1)), end)
            part["start_ns"] = np.where(resumed[rows] >= 0, resumed[rows], part["start_ns"].to_numpy(np.int64))
        part["end_ns"] = end
        parts.append(part)
    if not parts:
        return marks.iloc[0:0]
    return pd.concat(parts).sort_values("start_ns", kind="stable")


def _outermost(ranges: pd.DataFrame) -> pd.DataFrame:
    """Ranges of one name nested in another of that name on the same thread, left out: the
    outer one is the step (PARAM names its measure block and the forward inside it alike)."""
    r = ranges.sort_values(["tid", "start_ns"], kind="stable")
    keep = np.ones(len(r), dtype=bool)
    tid, end = r["tid"].to_numpy(), r["end_ns"].to_numpy()
    names = r["name"].to_numpy()
    reach: dict[tuple, int] = {}
    for i in range(len(r)):
        key = (tid[i], names[i])
        if end[i] <= reach.get(key, -1):
            keep[i] = False
        else:
            reach[key] = end[i]
    return r[keep].sort_values("start_ns", kind="stable")


def base_name(names: pd.Series) -> pd.Series:
    """API names without nsys's suffixes: ``cudaMemcpy_v3020`` → ``cudaMemcpy``, ``_ptsz`` too."""
    return per_name(names, apinames.base_name)


def is_launch(names: pd.Series) -> pd.Series:
    """Host calls that enqueue a kernel or a whole CUDA graph (a graph launch is one launch);
    CUDA runtime and driver, HIP, with nsys's ``_v``/``_ptsz`` suffixes (:mod:`perfdoctor.names.api`)."""
    return pd.Series(apinames.is_launch(names), index=names.index, dtype=bool)


def is_sync(names: pd.Series) -> pd.Series:
    """Host calls that block until the device catches up (``cudaMemcpy`` is the synchronous copy)."""
    return pd.Series(apinames.is_sync(names), index=names.index, dtype=bool)


def union_ns(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int) -> int:
    """Length of the union of intervals ``[start, end)`` clipped to ``[lo, hi)``.

    Overlapping intervals (kernels on several streams) count once: after sorting by start,
    each interval adds only the part that ends past everything before it.
    """
    s = np.clip(np.asarray(starts, dtype=np.int64), lo, hi)
    e = np.clip(np.asarray(ends, dtype=np.int64), lo, hi)
    if s.size == 0:
        return 0
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    previous = np.concatenate(([lo], reach[:-1]))
    return int(np.clip(e - np.maximum(s, previous), 0, None).sum())


@dataclass
class Steps:
    """The steps of a trace and which step each call and GPU activity belongs to.

    ``table`` has one row per step (ordered by host start): name, tid, host_start_ns,
    host_end_ns, gpu_start_ns, gpu_end_ns (``<NA>`` for a step with no GPU work), kernels,
    launches. ``activity_step`` and ``call_step`` give, for each row of
    ``profile.activities`` / ``profile.calls``, its step's position in ``table`` or -1.
    ``span`` is the profiled span S in ns, ``None`` when the trace has no GPU activity.
    """

    name: str | None
    reason: str | None
    table: pd.DataFrame
    activity_step: pd.Series
    call_step: pd.Series
    span: tuple[int, int] | None
    how: str = ""  # how the step was found, for the report ("ranges named 'decode_step'", ...)

    @property
    def count(self) -> int:
        return len(self.table)


def is_library_range(names: pd.Series) -> pd.Series:
    """Ranges a library opened (``cub::DeviceScan::InclusiveScan``, ``ncclAllReduce``, a
    ``cuBLAS`` or ``cuDNN`` NVTX domain): they repeat and own GPU work, but they are not
    the user's unit of work."""
    return per_name(names, rangenames.is_library).astype(bool)


def _candidate_ranges(profile: Profile) -> pd.DataFrame:
    """Ranges that can be steps: not declarations, not Python stack frames, not library ranges."""
    r = profile.ranges
    return r[~starts_with(r["name"], DECLARE_PREFIX) & ~equals(r["source"], "python") & ~is_library_range(r["name"]).to_numpy()]


def ran_no_gpu(profile: Profile) -> bool:
    """No GPU ran in this trace: no GPU activity, no GPU API call, and no device work of a
    kind perfdoctor does not read (MTIA events: a device ran, unread) — a CPU program."""
    return profile.activities.empty and profile.calls.empty and not profile.origin.unread_device_work


def no_trace(profile: Profile) -> str | None:
    """Why ``profile``, a run bundle's, has no traced steps where it has no trace at all (no
    traced pass ran, or none left a trace: ``--collect nvml``), from its loader's reason."""
    bundle = profile.origin.bundle
    if bundle is None or bundle.activities_from is not None or not (profile.activities.empty and profile.calls.empty and profile.ranges.empty):
        return None
    return f"no trace: {bundle.reason or 'no trace in the bundle'}"


def choose_step_ranges(profile: Profile, pattern: str | None) -> tuple[str | None, pd.DataFrame, str | None, str]:
    """The ranges that are steps: ``pattern`` (or the step a run bundle recorded), else
    :func:`choose_step` over the trace's ranges and CUDA/HIP graph replays, else the
    automatic step. A name that marks the loop iteration (a compiled-graph call, torch's
    loop ranges, a module step, the replays of a run's CUDA graph) gives steps from one
    occurrence to the next.

    Returns (step name, ranges, reason when none, how they were found).
    """
    ranges = _candidate_ranges(profile)
    if (untraced := no_trace(profile)) is not None:
        # no step to find, and no --step to name (the light pass's steps are the bundle's)
        return None, ranges, untraced, ""
    # as run's light pass names them; --step names a range as the trace has it
    instance, instance_how = optimizer_instances(ranges, profile.ops) if not pattern else (ranges.iloc[0:0], "")
    if not instance.empty:
        ranges = ranges.copy()
        ranges.loc[instance.index, "name"] = instance["name"]
    waits = traced_waits(profile.ranges)  # perfdoctor run's traced passes mark them
    loops = ranges[starts_with(ranges["name"], rangenames.LOOP_PREFIXES)]
    fetches = loops[starts_with(loops["name"], rangenames.DATA_LOADER_PREFIX)]
    work = loop_work(profile) if not loops.empty else None  # a loop with no data loader: to find its first or last iteration
    # the fetches that ended a pass, kept apart from the others as the light pass keeps the
    # ones that raised StopIteration: the batches per optimizer step are counted per pass
    f = _outermost(fetches)
    ends = pass_ends(f, work)
    ended = f[ends]
    # an evaluation loop's fetches under the training loader's name (Lightning's validation),
    # which train nothing: ends of passes to the training groups, as in the light pass
    evaluating = np.zeros(len(f), dtype=bool)
    if work is not None:
        starts = f["start_ns"].to_numpy(np.int64)
        order = np.argsort(starts, kind="stable")
        evaluating[order] = steady.evaluation_fetches(starts[order], work["start_ns"], work.loc[work["backward"], "start_ns"])
        evaluating &= ~ends
    parted = ends | evaluating  # decided once: loop_ranges cuts an optimizer step's group at them too
    last_trained = trained_after_last(f, loops, profile.ops, work)
    hosts = {n: g.to_numpy(np.int64) for n, g in loops.drop(index=ended.index).groupby("name", sort=False)["start_ns"]}
    if work is not None and not f.empty:
        hosts[rangenames.BACKWARD_RANGE] = first_backwards(f["start_ns"].to_numpy(np.int64), work)
    trained, training = training_loop(hosts, ended["start_ns"].to_numpy(np.int64), f.loc[evaluating, "start_ns"].to_numpy(np.int64))
    # an evaluation loop's fetches, those that fetched a batch (a training loop's: trained), as run counts them
    fetched = {n: len(training_iterations(g, [], work)) for n, g in fetches.groupby("name", sort=False) if n not in trained}
    bundle = profile.origin.bundle
    recorded = bundle.step if bundle is not None else None
    how = f"ranges named {pattern!r} (--step)" if pattern else ""
    module_step = moded = False  # the run's automatic module step: timed as the loop iteration there; of one grad mode
    if not pattern and recorded and (
        (ranges["name"] == recorded).any() or ranges["name"].map(lambda n: fnmatch.fnmatchcase(n, recorded)).any()
    ):
        pattern = recorded  # a run bundle remembers the step its run traced
        light_pass = LightPass.from_json(bundle.light_pass or {})
        run_how = light_pass.how
        span = (light_pass.module or {}).get("span")  # an automatic module step is the loop iteration
        module_step, moded = bool(span), (light_pass.module or {}).get("grad") is not None
        run_how = f"{run_how}; timed as {span}" if run_how and span else run_how
        how = f"recorded by the run: ranges named {recorded!r}" + (f" ({run_how})" if run_how else "")
    if pattern or recorded == serving.STEP_NAME:
        if (pattern or recorded) in (serving.STEP_NAME, "serving"):
            served = serving.step_ranges(profile)
            if served.empty and pattern:
                raise UsageError(f"--step {pattern!r}: this trace has no vLLM/SGLang serving step ranges")
            if not served.empty:
                return serving.STEP_NAME, served, None, how or "serving step ranges (vLLM/SGLang names), recorded by the run"
    if pattern:
        every = profile.ranges[~starts_with(profile.ranges["name"], DECLARE_PREFIX) & ~equals(profile.ranges["source"], "python")]
        # asked for by name: even a library range. An exact name first (``step[DECODE bs=32]``
        # has brackets that fnmatch would read as a character class), a glob second.
        matched = every[every["name"] == pattern]
        if matched.empty:
            matched = every[every["name"].map(lambda n: fnmatch.fnmatchcase(n, pattern))]
        if matched.empty:
            common = ranges["name"].value_counts().head(5).index.tolist()
            hint = f"; ranges in this trace: {', '.join(map(repr, common))}" if common else "; this trace has no ranges"
            raise UsageError(f"--step {pattern!r} matches no range{hint}")
        if equals(matched["source"], "profiler_step").all():
            matched = profiler_steps(profile, matched)
        marker = rangenames.kind(pattern)
        if module_step or marker in (rangenames.COMPILED, rangenames.LOOP, rangenames.REPLAY, rangenames.BACKWARD):
            # a marker of the iteration, not the iteration (run's scout times it so too): the
            # model's forward leaves out the host work of HF generate's loop between forwards
            # (logits processors, stopping criteria: 1.6 ms of a 20 ms token on the H200)
            loop = marker == rangenames.LOOP
            if marker == rangenames.COMPILED:
                matched = _iteration_marks(matched, ranges)
            timed = (loop_ranges(matched, f, parted, training, work, loops, last_trained) if loop else
                     iteration_ranges(matched, waits, stop_at_pauses=stops_at_pauses(pattern)))
            if moded and not timed.empty:
                timed = own_work_ends(timed, _outermost(matched), work if work is not None else loop_work(profile))
            if not timed.empty:
                return pattern, timed, None, how if (module_step or ITERATION in how) else f"{how}, timed as {ITERATION}"
        return pattern, matched, None, how

    launch_calls = profile.calls[is_launch(profile.calls["name"])]
    auto: list = []  # the automatic step, found at most once

    def automatic() -> tuple[pd.DataFrame, str]:
        if not auto:
            auto.append(automatic_ranges(profile))
        return auto[0]

    replays = graph_replays(profile)
    if not replays.empty and _replays_per_unit(replays, automatic()[0]) > 1:
        # vLLM's piecewise graphs: one replay per piece of the model, many per iteration
        replays = replays.iloc[0:0]
    counts = {**ranges["name"].value_counts(sort=False).to_dict(), **trained, **fetched}  # a loader's batches, as run counts them
    apart = other_optimizers(counts)
    apart |= enclosed_marks({n: (g["start_ns"], g["end_ns"]) for n, g in loops.groupby("name", sort=False) if n not in apart})
    profiled, opt = ranges[equals(ranges["source"], "profiler_step")], loops[starts_with(loops["name"], rangenames.OPTIMIZER_STEP_PREFIX)]
    if cuts_iterations(profiled["start_ns"], profiled["end_ns"], opt["start_ns"], opt["end_ns"]):
        apart |= {n for n in counts if rangenames.kind(n) == rangenames.PROFILER_STEP}
    for name in apart:
        del counts[name]
    lengths = (ranges["end_ns"] - ranges["start_ns"]).groupby(ranges["name"]).sum().to_dict()
    cpu = ran_no_gpu(profile)  # no GPU work for a range to have: a CPU program's repeating range is its step
    compiled = ranges[per_name(ranges["name"], rangenames.kind) == rangenames.COMPILED]
    choice = choose_step(
        counts, works=lambda n: cpu or _has_gpu_work(ranges[ranges["name"] == n], launch_calls, profile), totals=lengths,
        replays=len(replays), compiled_starts={n: g.to_numpy(np.int64) for n, g in compiled.groupby("name", sort=False)["start_ns"]},
        groups=optimizer_groups(loops, work, counts) if f.empty else None,
        loop_starts={n: g.to_numpy(np.int64) for n, g in loops.groupby("name", sort=False)["start_ns"]},
    )
    if choice is not None and cpu and choice.kind == "range" and not choice.iteration:
        choice = Choice("range", choice.name, f"ranges named {choice.name!r}: the most frequent range, no GPU ran ({counts[choice.name]}x)", False)
    if choice is not None:
        if choice.kind == "serving":
            served = serving.step_ranges(profile)  # every vLLM/SGLang step range, one family
            kinds = ", ".join(sorted(set(serving.parse(served["name"])["kind"].astype(str))))
            return serving.STEP_NAME, served, None, f"serving step ranges (vLLM/SGLang names: {kinds})"
        if choice.kind == "profiler_step":
            return PROFILER_STEP_GLOB, profiler_steps(profile, ranges[equals(ranges["source"], "profiler_step")]), None, choice.how
        if choice.name == GRAPH_REPLAY and not automatic()[0].empty:
            # one replay per period of the loop: that period, which also holds the eager
            # work around the replay (the inputs' copies before it), is the better-cut step
            found, auto_how = automatic()
            return AUTO_STEP, found, None, f"{auto_how}; one CUDA/HIP graph replay per step"
        marks = replays if choice.name == GRAPH_REPLAY else ranges[ranges["name"] == choice.name]
        if choice.kind == "loop":
            marks = loop_ranges(marks, f, parted, training, work, loops, last_trained)  # not an evaluation loop's batches
            marks = ended_before_evaluations(marks, f["start_ns"], f.loc[evaluating, "start_ns"], loops)
        elif choice.iteration:
            marks = iteration_ranges(_iteration_marks(marks, ranges) if choice.name != GRAPH_REPLAY else marks, waits,
                                     stop_at_pauses=stops_at_pauses(choice.name))
        else:
            marks = _outermost(marks)
        if not marks.empty:
            return choice.name, marks, None, choice.how + (instance_how if choice.name in set(instance["name"]) else "")
    found, auto_how = automatic()
    if not found.empty:
        return AUTO_STEP, found, None, auto_how
    return (
        None,
        ranges.iloc[0:0],
        "no step ranges found: no ProfilerStep#N, no serving or compiled-graph range, no range name that repeats "
        f"with GPU work, no training-loop range, and no repeating unit of GPU work ({auto_how}) (use --step NAME)",
        "",
    )


def cuts_iterations(step_starts: Sequence[int], step_ends: Sequence[int], opt_starts: Sequence[int], opt_ends: Sequence[int]) -> bool:
    """Whether torch.profiler's steps (``ProfilerStep#N``, host starts and ends) end inside
    the optimizer's steps (``Optimizer.step#…``, host starts and ends), most of those within
    them: the profiler stepped in the middle of each training iteration, so its steps are not
    iterations. Lightning's PyTorchProfiler steps it at the end of each ``training_step``,
    which runs inside ``Optimizer.step`` (the closure), and at the end of each
    ``validation_step``, so that its steps also count validation batches (a fit's trace: 34
    ProfilerSteps for 30 training iterations, the one after a validation 1.1 ms for 2.4).
    The loop's ranges mark the iterations then. The same rule for a trace and the light pass."""
    ends = np.sort(np.asarray(step_ends, dtype=np.int64))
    lo, hi = np.asarray(opt_starts, dtype=np.int64), np.asarray(opt_ends, dtype=np.int64)
    if not ends.size or not lo.size:
        return False
    within = (lo >= np.min(np.asarray(step_starts, dtype=np.int64))) & (hi <= ends[-1])  # in the profiled steps
    first_after = np.minimum(np.searchsorted(ends, lo, side="right"), ends.size - 1)
    cut = within & (ends[first_after] > lo) & (ends[first_after] < hi)
    return 2 * int(cut.sum()) > int(within.sum())


def profiler_steps(profile: Profile, rows: pd.DataFrame) -> pd.DataFrame:
    """The ``ProfilerStep#N`` ranges that are steps: ``rows`` but one at either end that
    holds no iteration (:mod:`perfdoctor.names.ranges`, ``profiler_step``): the last, which
    torch.profiler's exit closed after the loop's last ``prof.step()``, or the first, from
    the profiler's start to a ``prof.step()`` at the top of the loop. A trace does not say
    which call closed a range; such a one is the last of two or more, or the first of
    three or more, and nothing starts inside it: no CPU op, no API call, no range but Python frames, on any
    thread. (A schedule's trace is saved by the ``prof.step()`` that closes its last active
    step, which holds that step's work: kept.) ``perfdoctor run``'s light pass sees the exit
    close it and keeps it out of its series (:func:`perfdoctor.record.light.profiler_series`)."""
    if len(rows) < 2:
        return rows
    starts = rows["start_ns"].to_numpy(np.int64)
    others = profile.ranges[~equals(profile.ranges["source"], "python")]
    ends = [rows.index[int(np.argmax(starts))]] + ([rows.index[int(np.argmin(starts))]] if len(rows) >= 3 else [])

    def empty(i: Any) -> bool:
        lo, hi = int(rows.at[i, "start_ns"]), int(rows.at[i, "end_ns"])
        for table in (profile.ops, profile.calls, others):
            begun = table["start_ns"].to_numpy(np.int64)
            inside = (begun >= lo) & (begun <= hi)
            if table is others:
                inside &= table.index.to_numpy() != i
            if inside.any():
                return False
        return True

    return rows.drop(index=[i for i in ends if empty(i)])


GRAPH_REPLAY = "(CUDA/HIP graph replay)"
# The share of all graph replays that one graph must have to be the step: a torch.compile
# decode loop (cudagraph trees) replays one graph per token; vLLM's piecewise graphs replay
# a different graph per piece of the model (23 per step in the TraceLens trace), none of
# which is the step.
ONE_GRAPH_SHARE = 0.9


def one_graph(replays: Mapping[str, int], total: int | None = None) -> str | None:
    """The graph whose replays can be the step, from each graph's replay count: the most
    replayed, when it was replayed at least twice and makes up ``ONE_GRAPH_SHARE`` of all
    ``total`` replays (default: the sum of the counts); else None. The same rule for a
    trace's graph launches (:func:`graph_replays`) and for the light pass's replays of each
    ``torch.cuda.CUDAGraph`` (:func:`perfdoctor.record.light.find_step`)."""
    graph = max(replays, key=lambda g: replays[g], default=None)  # ties: the first counted
    if graph is None:
        return None
    n = replays[graph]
    return graph if n >= 2 and n >= ONE_GRAPH_SHARE * (sum(replays.values()) if total is None else total) else None


def _replays_per_unit(replays: pd.DataFrame, units: pd.DataFrame) -> float:
    """Median number of ``replays`` starting inside each of ``units`` (the repeating unit of
    GPU work, :func:`automatic_ranges`); 1 when there are no units to count in. A graph is
    the step only when the loop's own period holds one replay of it."""
    if units.empty:
        return 1.0
    starts = np.sort(replays["start_ns"].to_numpy(np.int64))
    inside = np.searchsorted(starts, units["end_ns"].to_numpy(np.int64), side="right") - np.searchsorted(
        starts, units["start_ns"].to_numpy(np.int64), side="left"
    )
    return float(np.median(inside))


def graph_replays(profile: Profile) -> pd.DataFrame:
    """The CUDA/HIP graph launches of a trace that replay one and the same graph, as ranges
    (the launch call), when that graph is replayed at least twice and makes up
    ``ONE_GRAPH_SHARE`` of all replays; else empty. Which graph a launch replays: the graph
    id of its kernels, else their first kernel's name (the pieces of a piecewise-captured
    model share that too: :func:`choose_step_ranges` also asks for one replay per period)."""
    calls, acts = profile.calls, profile.activities
    graph = calls[apinames.is_graph_launch(calls["name"])]
    empty = pd.DataFrame({c: pd.Series(dtype=t) for c, t in (("name", object), ("start_ns", "int64"), ("end_ns", "int64"), ("tid", "int64"), ("source", object))})
    if len(graph) < 2 or acts.empty:
        return empty
    first = acts.sort_values("start_ns", kind="stable").drop_duplicates("correlation").set_index("correlation")
    gid = graph["correlation"].map(first["graph_id"])
    which = gid.where(gid.fillna(-1) >= 0, graph["correlation"].map(first["name"]))
    which = which.dropna()
    if which.empty:
        return empty
    step_graph = one_graph(which.astype(str).value_counts().to_dict(), len(graph))
    if step_graph is None:
        return empty
    mine = graph.loc[which.index[which.astype(str) == step_graph]]
    return pd.DataFrame(
        {"name": GRAPH_REPLAY, "start_ns": mine["start_ns"].to_numpy(np.int64), "end_ns": mine["end_ns"].to_numpy(np.int64),
         "tid": mine["tid"].to_numpy(np.int64), "source": "graph_replay"}
    )


# --- automatic steps -----------------------------------------------------------------------


MAX_SEQUENCE = 20_000  # launches searched for a period (the last ones: the loop, not start-up)


def _longest_run(flags: np.ndarray) -> tuple[int, int]:
    """(start, length) of the longest run of True in ``flags``."""
    edges = np.diff(np.r_[0, flags.astype(np.int8), 0])
    starts, stops = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    if starts.size == 0:
        return 0, 0
    k = int(np.argmax(stops - starts))
    return int(starts[k]), int(stops[k] - starts[k])


def repeating_region(seq: np.ndarray, min_repeats: int = 2) -> tuple[int, int, int] | None:
    """The outermost repetition in ``seq``: (period, start, stop) or None.

    For each period ``p``, the longest stretch where ``seq[i] == seq[i + p]`` holds covers
    ``run + p`` elements repeating with period ``p``. Start-up work before the loop (library
    initialisation, a warm-up of other shapes) breaks the stretch, so it is left out. A
    transformer *layer* also repeats, but only within a step: the head, the embedding and
    the LM head between layers of consecutive steps break its stretch after one step, while
    the step's own period runs across all steps. So the step is the period whose stretch
    covers the most elements (the smallest such period: 2 steps also repeat, with the same
    cover), with at least ``min_repeats`` repetitions.
    """
    return _widest(_stretches(seq, min_repeats))


def _stretches(seq: np.ndarray, min_repeats: int) -> list[tuple[int, int, int]]:
    """Per period ``p`` of ``seq`` whose longest stretch repeats ``min_repeats`` times or
    more: (p, the stretch's start, the length of its run of ``seq[i] == seq[i + p]``)."""
    out = []
    for p in range(1, seq.size // min_repeats + 1):
        start, run = _longest_run(seq[:-p] == seq[p:])
        if run >= (min_repeats - 1) * p:
            out.append((p, start, run))
    return out


def _widest(stretches: Iterable[tuple[int, int, int]]) -> tuple[int, int, int] | None:
    """(period, start, stop) of the stretch covering the most elements, the smallest period
    winning a tie (they come in period order)."""
    best: tuple[int, int, int] | None = None
    for p, start, run in stretches:
        if best is None or run + p > best[2] - best[1]:  # strictly more: the smallest period wins a tie
            best = (p, start, start + run + p)
    return best


LOOP_REPEATS = 8  # a loop's iterations in a trace of it: a fit's, a generation's or an epoch's are fewer


def repeating_units(signature: np.ndarray) -> tuple[int, int, int] | None:
    """The step's repetition in a sequence of sync-delimited units (their signatures):
    the outermost one (:func:`repeating_region`) that repeats ``LOOP_REPEATS`` times or more,
    else the outermost of any.

    Every unit ends where the host waited, so a transformer layer, which never waits, is no
    unit: the repetitions here are of loops that wait. The outermost is too often a loop
    around the step's loop, repeated a few times in a whole program's trace: three k-means
    fits of 40 iterations (each ``.item()`` of the centres' shift a unit), four generations
    of 100 tokens, a few epochs. Their stretch covers more than one run of the step's loop,
    whose stretch ends with its run, but they repeat a few times where the step repeats tens
    (measured on the H100: kmeans_fit.py read one step per fit, 565 ms, for 7.3 ms
    iterations). An inner loop that waits at each turn (kmeans_pytorch's ``nonzero`` per
    cluster) repeats often too, but its stretch ends within one iteration: among the periods
    that repeat often, the outermost is still the step."""
    stretches = _stretches(signature, 2)  # one scan: those that repeat often are among them
    often = _widest(t for t in stretches if t[2] >= (LOOP_REPEATS - 1) * t[0])
    return often if often is not None else _widest(stretches)


def _loop_phase(unit_start: np.ndarray, previous_end: np.ndarray, period: int) -> int:
    """Where in the period a step starts: the position with the longest host time before
    it (median over repetitions) — the loop's own overhead, the Python between steps."""
    gaps = np.where(previous_end == NO_BOUNDARY, 0, unit_start - previous_end)
    best, phase = -np.inf, 0
    for r in range(period):
        g = gaps[r::period]
        if g.size and np.median(g) > best:
            best, phase = float(np.median(g)), r
    return phase


def _units_to_ranges(
    starts: np.ndarray, ends: np.ndarray, boundary: np.ndarray, work_starts: np.ndarray, tid: int, period: int, phase: int
) -> pd.DataFrame:
    """Whole periods of units from ``phase`` on, as step ranges (partial periods at the
    edges are left out: the trace cut that step).

    A step's host range ends with its last unit and starts with its first launch — or
    earlier, with the calls that put GPU work in the queue before it (a blocking copy, a
    memset) since the previous unit ended (``boundary``). How many such leading calls a
    step has is taken from the typical step (the median), so the first step does not
    swallow the start-up work that happens to precede it."""
    first = np.arange(phase, starts.size - period + 1, period)
    bound = boundary[first].copy()
    if bound.size and bound[0] == NO_BOUNDARY:
        # Nothing ended before the first step: reach back at most one typical step.
        typical = int(np.median(np.diff(starts[first]))) if first.size > 1 else 0
        bound[0] = starts[first[0]] - typical
    at_launch = np.searchsorted(work_starts, starts[first], side="left")
    leading = at_launch - np.searchsorted(work_starts, bound, side="right")
    typical_leading = int(np.median(leading[1:])) if leading.size > 1 else int(leading[0]) if leading.size else 0
    take = np.clip(np.minimum(leading, typical_leading), 0, None)
    begin = np.where(take > 0, work_starts[np.clip(at_launch - take, 0, max(work_starts.size - 1, 0))], starts[first])
    return pd.DataFrame(
        {
            "name": AUTO_STEP,
            "start_ns": np.minimum(begin, starts[first]),
            "end_ns": ends[first + period - 1],
            "tid": tid,
            "source": "automatic",
        }
    )


def _as_text(names: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """The distinct names (as text) and each row's code, numbered by first appearance."""
    codes, uniques = factorize(names)
    if not all(isinstance(u, str) for u in uniques):
        codes, uniques = factorize(names.astype(str))
    return uniques, codes


def _family_codes(names: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """Per row of ``codes`` (each a position in ``names``, the distinct kernel names), a code
    of its kernel's family, numbered by first appearance: units compared by families, not
    exact names (a decode step's elementwise kernels switch between vectorized and unrolled
    variants as the context length changes parity, seen in HF generate on the H200)."""
    return pd.factorize(pd.Series([family(str(u)) for u in names], dtype=object))[0][codes]


def waiting_turns(profile: Profile, table: pd.DataFrame) -> np.ndarray:
    """Per step of ``table`` (host range and thread), the longest run of consecutive
    sync-delimited parts (:func:`unit_signatures`, on the step's thread, each ending with its
    sync; parts with no launch left out) that launch the same kernel families: the turns of a
    loop that waits for the GPU at each. 1 where no two consecutive parts repeat, 0 where the
    step never syncs."""
    calls, acts = profile.calls.sort_values("start_ns", kind="stable"), profile.activities
    launch, sync = is_launch(calls["name"]).to_numpy(), is_sync(calls["name"]).to_numpy()
    calls, launch, sync = calls[launch | sync], launch[launch | sync], sync[launch | sync]
    corrs, kernel_of = first_by_correlation(acts)
    names, name_codes = _as_text(pd.Series(kernel_of, dtype=object))
    family_of = _family_codes(names, name_codes)  # per correlation
    corr, start, tid = calls["correlation"].to_numpy(np.int64), calls["start_ns"].to_numpy(np.int64), calls["tid"].to_numpy()
    at = np.minimum(np.searchsorted(corrs, corr), max(corrs.size - 1, 0))
    code = np.where(launch & (corrs[at] == corr), family_of[at], -1)  # -1: a sync, or a launch with no GPU activity
    turns = np.zeros(len(table), dtype=np.int64)
    for k, (lo_ns, hi_ns, step_tid) in enumerate(table[["host_start_ns", "host_end_ns", "tid"]].itertuples(index=False)):
        lo, hi = np.searchsorted(start, [lo_ns, hi_ns])
        mine = tid[lo:hi] == step_tid
        c, s = code[lo:hi][mine], sync[lo:hi][mine]
        ran = c >= 0
        ends = np.cumsum(ran)[s]  # per sync, the launches before it: each part ends with its sync
        sizes = np.diff(np.r_[0, ends])
        parts = unit_signatures(c[ran], ends)[:-1][sizes > 0]  # the launches after the last sync are no part
        turns[k] = 1 + _longest_run(np.diff(parts) == 0)[1] if parts.size else 0
    return turns


def first_by_correlation(acts: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """The distinct correlations of ``acts`` (sorted) and the name of each one's first
    activity by start (the first in the table among equal starts): the lookup table that
    ``acts.sort_values("start_ns", kind="stable").drop_duplicates("correlation")
    .set_index("correlation")["name"]`` is, as two arrays (a sorted search instead of pandas'
    sort, drop and map: ~5 ms less on HF 80 MB's 47k activities)."""
    order = np.argsort(acts["start_ns"].to_numpy(np.int64), kind="stable")
    corrs, first = np.unique(acts["correlation"].to_numpy(np.int64)[order], return_index=True)
    return corrs, acts["name"].to_numpy(dtype=object)[order[first]]


def unit_signatures(families: np.ndarray, cut: np.ndarray) -> np.ndarray:
    """The units' codes, numbered by first appearance, equal units (the same sequence of
    family codes) one code: ``families`` (integer codes, one per launch) cut at ``cut``
    (:func:`numpy.split`'s indices). Each unit keyed by its codes' bytes, which are equal
    exactly when the sequences are (one dtype, so one width): a tuple per unit made one
    numpy scalar per launch and hashed each (HF 80 MB's 46k launches in 132 units: 2.4 ms,
    0.2 ms this way)."""
    return _sequence_codes(np.split(families, cut))


def _sequence_codes(sequences: Sequence[np.ndarray]) -> np.ndarray:
    """A code per integer array (one dtype), numbered by first appearance, equal arrays one
    code: each keyed by its bytes, equal exactly when the sequences are."""
    return pd.factorize(pd.Series([c.tobytes() for c in sequences], dtype=object))[0]


def automatic_ranges(profile: Profile) -> tuple[pd.DataFrame, str]:
    """Step ranges for a trace without markers, and how they were found (or why not).

    On the thread that launches the most work: (1) the host's synchronisations cut the
    launches into units; when the sequence of units (each a tuple of the kernel names it
    launched) repeats, the step is one period of units — a loop that syncs once per step
    gives one unit per step, one that syncs three times (a blocking copy and two
    ``.item()``) gives three. (2) Without syncs, the launch sequence itself (kernel names)
    is searched for its outermost repetition (:func:`repeating_region`). A step's host
    range runs from the first call that queued its GPU work to the end of its last call
    (its closing sync included).
    """
    calls, acts = profile.calls, profile.activities
    empty = pd.DataFrame({c: pd.Series(dtype=t) for c, t in (("name", object), ("start_ns", "int64"), ("end_ns", "int64"), ("tid", "int64"), ("source", object))})
    launches = calls[is_launch(calls["name"])]
    if launches.empty or acts.empty:
        return empty, "no launches with GPU work"
    tid = int(launches["tid"].value_counts().index[0])
    mine = calls[calls["tid"] == tid].sort_values("start_ns", kind="stable")
    launch = mine[is_launch(mine["name"])]
    # what each launch ran: its first GPU activity's name (a graph launch: its first kernel)
    corrs, kernel_of = first_by_correlation(acts)
    l_corr = launch["correlation"].to_numpy(np.int64)
    at = np.minimum(np.searchsorted(corrs, l_corr), corrs.size - 1)
    kernel = np.where(corrs[at] == l_corr, kernel_of[at], None)  # None: no activity of that correlation
    ran = ~pd.isna(kernel)
    launch = launch[ran]
    if len(launch) < 2:
        return empty, "fewer than two launches with GPU work"
    kernel_names, codes = _as_text(pd.Series(kernel[ran], dtype=object))
    l_start = launch["start_ns"].to_numpy(np.int64)
    l_end = launch["end_ns"].to_numpy(np.int64)
    m_corr = mine["correlation"].to_numpy(np.int64)
    has_work = corrs[np.minimum(np.searchsorted(corrs, m_corr), corrs.size - 1)] == m_corr  # not np.isin: its table spans the ids' range
    work_starts = np.sort(mine["start_ns"].to_numpy(np.int64)[has_work & (m_corr >= 0)])

    syncs = mine[is_sync(mine["name"])]
    if not syncs.empty:
        # unit j: the launches after sync j-1 ended, up to the end of sync j
        s_end = syncs["end_ns"].to_numpy(np.int64)
        unit_of = np.searchsorted(s_end, l_start, side="left")
        # launches are in start order, so each unit's launches are one slice
        cut = np.flatnonzero(np.diff(unit_of)) + 1
        first_launch = np.r_[0, cut]
        units = unit_of[first_launch]
        if units.size >= 2:
            # A unit's signature is the sequence of its kernels' families, not their exact
            # names: a decode step's elementwise kernels switch between vectorized and
            # unrolled variants as the context length changes parity (seen in HF generate
            # on the H200), which would make every other token look different.
            signature = unit_signatures(_family_codes(kernel_names, codes), cut)
            offset = max(0, signature.size - MAX_SEQUENCE)
            region = repeating_units(signature[offset:])
            if region is not None:
                period, lo, hi = region
                keep = slice(lo + offset, hi + offset)
                last_launch = np.r_[cut - 1, unit_of.size - 1]
                u_start = l_start[first_launch][keep]
                u_end = np.where(units < s_end.size, s_end[np.clip(units, 0, s_end.size - 1)], l_end[last_launch])[keep]
                # where the previous unit with launches ended (its closing sync): a step's
                # own launch-less parts before its first launch (a blocking copy) come after it
                u_prev = np.r_[NO_BOUNDARY, s_end[np.clip(units[:-1], 0, s_end.size - 1)]][keep]
                phase = _loop_phase(u_start, u_prev, period)
                out = _units_to_ranges(u_start, u_end, u_prev, work_starts, tid, period, phase)
                if len(out) >= 2:
                    names = sorted(set(base_name(syncs["name"])))
                    return out, (
                        f"automatic: the repeating unit of GPU work between host syncs ({', '.join(names)}), "
                        f"{period} sync-delimited part{'s' if period > 1 else ''} per step"
                    )
    offset = max(0, codes.size - MAX_SEQUENCE)
    region = repeating_region(codes[offset:])
    if region is None:
        return empty, "the launch sequence does not repeat"
    period, lo, hi = region
    lo, hi = lo + offset, hi + offset
    prev_end = np.r_[NO_BOUNDARY, l_end[:-1]]
    phase = _loop_phase(l_start[lo:hi], prev_end[lo:hi], period)
    out = _units_to_ranges(l_start[lo:hi], l_end[lo:hi], prev_end[lo:hi], work_starts, tid, period, phase)
    if len(out) < 2:
        return empty, "the launch sequence repeats fewer than twice"
    return out, f"automatic: the repeating launch sequence ({period} launches per step, its outermost period)"


def _has_gpu_work(ranges: pd.DataFrame, launch_calls: pd.DataFrame, profile: Profile) -> bool:
    """Whether any launch falls in one of the ranges — on their thread or, by time, on
    another (a step whose launches all come from a worker thread is still a step)."""
    if profile.activities.empty or launch_calls.empty:
        return False
    return bool((ownership.call_steps(ranges, launch_calls)[0] >= 0).any())


def _containing_range(ranges: pd.DataFrame, calls: pd.DataFrame) -> np.ndarray:
    """For each call, the position (in ``ranges`` sorted by start) of the range on its thread
    that contains the call's start, or -1. Step ranges of one name do not nest."""
    out = np.full(len(calls), -1, dtype=np.int64)
    if ranges.empty or calls.empty:
        return out
    order = np.argsort(ranges["start_ns"].to_numpy(), kind="stable")
    r_start = ranges["start_ns"].to_numpy()[order]
    r_end = ranges["end_ns"].to_numpy()[order]
    r_tid = ranges["tid"].to_numpy()[order]
    c_start = calls["start_ns"].to_numpy()
    c_tid = calls["tid"].to_numpy()
    for tid in np.unique(r_tid):
        in_thread = np.flatnonzero(r_tid == tid)
        mask = c_tid == tid
        idx = np.searchsorted(r_start[in_thread], c_start[mask], side="right") - 1
        ok = idx >= 0
        cand = np.where(ok, in_thread[np.clip(idx, 0, None)], -1)
        ok &= c_start[mask] <= r_end[np.clip(cand, 0, None)]
        out[np.flatnonzero(mask)] = np.where(ok, cand, -1)
    return out


def find_steps(profile: Profile, pattern: str | None = None) -> Steps:
    """Find the steps of ``profile`` and assign calls and GPU activities to them."""
    name, ranges, reason, how = choose_step_ranges(profile, pattern)
    ranges = ranges.sort_values("start_ns", kind="stable", ignore_index=True)
    calls, acts = profile.calls, profile.activities

    # A call belongs to the step whose host range contains its start: on the step's own
    # thread first, else by time on any thread (autograd backward, DDP's reducer, worker
    # threads); GPU work follows its launching call by correlation id (perfdoctor.analysis.ownership).
    own = ownership.assign(profile, ranges)
    call_step, activity_step = own.call_step, own.activity_step
    table = pd.DataFrame(
        {
            "name": ranges["name"].to_numpy(),
            "tid": ranges["tid"].to_numpy(),
            "host_start_ns": ranges["start_ns"].to_numpy(),
            "host_end_ns": ranges["end_ns"].to_numpy(),
        }
    )
    # Per step: its GPU window (first start, last end; NA without GPU work), kernels and launches.
    n = len(table)
    owner = activity_step.to_numpy()
    mine = (owner >= 0) & (owner < n)
    step, start, end = owner[mine], acts["start_ns"].to_numpy(np.int64)[mine], acts["end_ns"].to_numpy(np.int64)[mine]
    first, last = np.full(n, np.iinfo(np.int64).max), np.full(n, np.iinfo(np.int64).min)
    np.minimum.at(first, step, start)
    np.maximum.at(last, step, end)
    none = np.bincount(step, minlength=n) == 0
    table["gpu_start_ns"] = pd.arrays.IntegerArray(np.where(none, 0, first), none)
    table["gpu_end_ns"] = pd.arrays.IntegerArray(np.where(none, 0, last), none)
    table["kernels"] = np.bincount(step[equals(acts["kind"], "kernel")[mine]], minlength=n).astype(np.int64)
    launch_step = call_step.to_numpy()
    launch_step = launch_step[is_launch(calls["name"]).to_numpy() & (launch_step >= 0) & (launch_step < n)]
    table["launches"] = np.bincount(launch_step, minlength=n).astype(np.int64)
    counts = ownership.step_counts(profile, table, own)
    table["kernels_other_threads"] = counts["kernels_other_threads"].to_numpy()
    table["launches_other_threads"] = counts["launches_other_threads"].to_numpy()

    if table["gpu_start_ns"].notna().any():
        span = (int(table["gpu_start_ns"].min()), int(table["gpu_end_ns"].max()))
    elif name is None and not acts.empty:
        span = (int(acts["start_ns"].min()), int(acts["end_ns"].max()))
    else:
        span = None
    if name is not None and span is None and reason is None:
        reason = f"the steps named {name!r} launched no GPU work"
    return Steps(name=name, reason=reason, table=table, activity_step=activity_step, call_step=call_step, span=span, how=how)
