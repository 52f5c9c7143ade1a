"""The light pass's scout: from the bootstrap's :class:`~perfdoctor.bundle.protocol.PassResults`,
the step (:func:`find_step`), its steady state and the window the traced passes use
(:func:`light_summary`, the manifest's ``light_pass``), and the NVML counters over the
steady steps."""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from perfdoctor.analysis import steady, steps
from perfdoctor.bundle.protocol import LightPass, PassResults
from perfdoctor.collectors import nvml
from perfdoctor.names import ranges as rangenames
from perfdoctor.record.options import DEFAULT_WARMUP, RunOptions
from perfdoctor.text import count, percent, value

# Below this many steps the scout does not move the window: the reference steady_start
# compares against (the median of the second half) then rests on four steps or fewer, and a
# noisy loop (an 8-step CPU loop on a shared machine put its steady start anywhere in 0-4
# over three runs) would move the window at random.
SCOUT_MIN_STEPS = 10


class ModuleStep(NamedTuple):
    """What :func:`module_step` found."""

    name: str
    calls: dict[str, Any]  # its series: one entry per step (a group's first call, as the entry says)
    entry: dict[str, Any]  # its ``light_pass.module`` entry, which the traced passes mark by
    how: str
    joined: list[bool] | None  # per iteration: it holds known work (never a pause by its length)
    moded: tuple[list[int], list[bool]] | None  # one grad mode's calls: their positions, a pass ended before each


def choose_module(modules: dict[str, dict[str, Any]]) -> tuple[int, str, bool] | None:
    """The outermost repeating module call: the shallowest depth (0, then 1) where a class
    completed at least two calls, and of its repeating classes the one whose calls mark the
    loop iteration (:func:`perfdoctor.analysis.steps.iteration_call`: a two-stage pipeline's
    detector, once per frame, encloses its classifier's calls, one per object found; the
    third item True), or, where the most frequent is a helper, the one whose calls enclose it
    (:func:`perfdoctor.analysis.steps.helper_encloser`: a BO loop's outcome transform, once
    per fit, around its input transform's calls), else the most frequent. Depth 1 wins only
    when no depth-0 call repeats (a wrapper module whose one call runs the whole loop)."""
    for depth in sorted(modules, key=int):
        starts = {name: s["host_start_ns"][: len(s["gpu_end_ns"])] for name, s in modules[depth].items() if len(s["gpu_end_ns"]) >= 2}
        if starts:
            marked = steps.iteration_call(starts) or steps.helper_encloser(
                {name: (h, modules[depth][name]["gpu_end_ns"]) for name, h in starts.items()})
            return int(depth), marked or max(starts, key=lambda n: len(starts[n])), marked is not None  # ties: the first seen
    return None


def module_step(modules: dict[str, dict[str, Any]], classes: dict[str, str], waits: dict[str, list[int]] | None = None) -> ModuleStep | None:
    """The module step (:class:`ModuleStep`), or None. The class is :func:`choose_module`'s.

    Called with grad enabled and disabled (``grad``), when one mode's calls are the steps
    (:func:`perfdoctor.analysis.steps.grad_mode_steps`: a training loop's, an evaluation
    under ``no_grad`` after each epoch): ``moded``, their positions and per one
    whether an end of pass (the other mode's calls) lies before it. The calls are timed as
    iterations all together, so the last training call before an evaluation ends where the
    evaluation's first call begins; the entry says which mode (``grad``), which the traced
    passes mark alone. No gap is a pause by its length: a garbage collection (60-80 ms) before
    a backward read as one, the step its forward alone (lstm_lm.py: 196 ms for the program's 252).
    Else, when two of its instances or more repeat at depth 0 (their calls carry ``instance``) and one of them
    marks the loop iteration (:func:`perfdoctor.analysis.steps.iteration_instance`: in
    assisted generation the target, whose one forward per iteration verifies the draft's
    several), the step is that instance's calls alone, named ``Class#k.forward`` (k: its
    ordinal by first call, which the traced passes count alike); merged with the draft's,
    the steps were one per forward of either model, uneven, many times the iterations. An
    iteration holding the other instances' calls (the draft's forwards before the next
    verify) is never cut at a pause: that work is the iteration's, and its length varies
    (transformers changes the number of draft tokens as they are accepted), so the pause
    rule cut the longer ones at the target's own end (0.49 of the program's time, once).

    One instance called k times per iteration, back to back, then the loop's own work
    (classifier-free guidance as two UNet calls before the scheduler's step): the step is
    each group of k calls (:func:`perfdoctor.analysis.steps.call_groups`), timed from its
    first call as the iteration, and the entry says so (``calls_per_step``, and ``groups``:
    the group sizes in call order, run-length encoded, which the traced passes follow to mark
    each group's first call only); one step per call read 2 steps per denoising step at half
    its time. Else, one instance called from several places in its loop, one of which marks
    the iteration (:func:`perfdoctor.analysis.steps.site_groups`: a continuous-batching
    server's decode, once per iteration, after the prefills of the requests it admitted):
    the step is each group of calls up to and with that place's call, ``groups`` saying so
    (one step per forward read 71 for 47 scheduler iterations)."""
    found = choose_module(modules)
    if found is None:
        return None
    depth, name, encloses = found
    calls = modules[str(depth)][name]
    module = {"name": name, "depth": depth, "class": classes.get(name, name), "span": "the loop iteration: each call and the host work until the next call"}
    cls = name.removesuffix(".forward")
    moded = steps.grad_mode_steps(calls["grad"]) if calls.get("grad") else None
    if moded is not None:
        grad, mine, ended = moded
        n, what, runs = len(calls["gpu_end_ns"]), "enabled" if grad else "disabled", int(ended.sum())
        how = (f"module: {cls}, its {len(mine)} calls with grad {what} of its {n}: the other {n - len(mine)} end a pass "
               f"({runs} run{'s' if runs != 1 else ''} between them)")
        rows = series_rows(calls, range(n))
        # joined: each gap is the step's own work or the other mode's pass, never a pause by length
        return ModuleStep(name, rows, {**module, "grad": grad}, how, [True] * (n - 1), (mine.tolist(), ended.tolist()))
    instances = calls.get("instance")
    instance = steps.iteration_instance(instances) if instances else None
    if instance is None:
        rows = series_rows(calls, range(len(calls["gpu_end_ns"])))
        groups = steps.call_groups(calls["host_start_ns"][: len(calls["gpu_end_ns"])],
                                   calls.get("host_end_ns") or calls["gpu_end_ns"], calls.get("tid"), _waited_between(calls, waits),
                                   calls.get("window"))
        sited = steps.site_groups(calls["site"]) if groups is None and calls.get("site") else None
        if sited is not None:
            how = (f"module: {cls}, one step per iteration of its loop ({len(sited.sizes)} for its {len(calls['gpu_end_ns'])} "
                   "calls): the call from the place that calls it once per iteration, with the calls from its other places since the one before")
            span = ("the loop iteration: the calls from the other places, then the one from the place that marks it, and the host "
                    "work until the next iteration's first call")
            return ModuleStep(name, grouped_series(rows, sited), {**module, "span": span, "groups": sited.runs()}, how, None, None)
        if groups is None:
            return _call_step(name, rows, module, modules[str(depth)] if encloses else None)
        k = groups.calls
        each = "on windows of one input" if groups.windows else "back to back"
        how = (f"module: {cls}, {k} calls per step: called {k} times {each}, then the loop's own work "
               f"({len(groups.sizes)} groups of its {len(calls['gpu_end_ns'])} calls)")
        span = f"the loop iteration: each group of {k} calls {each} and the host work until the next group"
        windows = {"windows": True} if groups.windows else {}
        return ModuleStep(name, grouped_series(rows, groups), {**module, "span": span, "calls_per_step": k, "groups": groups.runs(), **windows},
                          how, None, None)
    step = f"{cls}#{instance}.forward"
    mine = [i for i, k in enumerate(instances) if k == instance]
    how = (f"module: {cls}#{instance}: the {cls} instance (#{instance} by first call) whose {len(mine)} calls enclose "
           f"the {len(instances) - len(mine)} calls of its other instances at depth 0: the loop iteration")
    joined = (np.diff(mine) > 1).tolist()  # another instance's call between this one and the next
    return ModuleStep(step, series_rows(calls, mine), {**module, "name": step, "instance": instance}, how, joined, None)


def _waited_between(calls: dict[str, Any], waits: dict[str, list[int]] | None) -> np.ndarray | None:
    """Per gap between two calls (one's host end to the next's host start), the time the
    calls' thread waited for another thread or process there (the light pass's ``waits``,
    worked or not), or None where the waits or the threads are not known."""
    tid = calls.get("tid")
    n = len(calls["gpu_end_ns"])
    if not waits or tid is None or len(tid) < n or n < 2:
        return None
    h, e, t = (np.asarray(v[:n], dtype=np.int64) for v in (calls["host_start_ns"], calls.get("host_end_ns") or calls["gpu_end_ns"], tid))
    w_tid = np.asarray(waits.get("tid", []), dtype=np.int64)
    out = np.zeros(n - 1, dtype=np.int64)
    for thread in np.unique(t):
        gap = np.flatnonzero((t[:-1] == thread) & (t[1:] == thread))
        mine = w_tid == thread
        ranges = {k: np.asarray(waits[k], dtype=np.int64)[: w_tid.size][mine] for k in ("start_ns", "end_ns")}
        out[gap] = steady.time_inside(e[gap], h[gap + 1], ranges)
    return out


def _call_step(name: str, rows: dict[str, Any], module: dict[str, Any], enclosed: dict[str, dict[str, Any]] | None) -> ModuleStep:
    """A module step of one step per call of the class. ``enclosed``: the classes at its depth,
    when its calls enclose theirs (:func:`choose_module`: a detector's classifier, called per
    object found): their calls between two of its are the iteration's work, never a pause,
    and those after its last call the last iteration's (:func:`perfdoctor.analysis.steps.enclosed_tail_end`)."""
    cls = name.removesuffix(".forward")
    if enclosed is None:
        return ModuleStep(name, rows, module, f"module: {cls}", None, None)
    others = [(h, e) for n, s in enclosed.items() if n != name for h, e in zip(s["host_start_ns"], s["gpu_end_ns"])]
    how = f"module: {cls}, whose calls enclose the other repeating classes' at depth {module['depth']}: the loop iteration"
    starts, ends = rows["host_start_ns"][: len(rows["gpu_end_ns"])], rows["gpu_end_ns"]
    tail = steps.enclosed_tail_end(starts, others)
    if tail is not None and ends[-1] is not None and tail > ends[-1]:
        rows = {**rows, "gpu_end_ns": [*ends[:-1], tail]}  # the last iteration: its enclosed calls after it are its own
    return ModuleStep(name, rows, module, how, steps.others_between(starts, [h for h, _ in others]), None)


def grouped_series(calls: dict[str, Any], groups: steps.CallGroups) -> dict[str, Any]:
    """One step per group of calls (:func:`perfdoctor.analysis.steps.call_groups`): its first
    call's host and GPU start and thread, its last call's GPU end."""
    first, last = series_rows(calls, groups.firsts()), series_rows(calls, groups.lasts())
    return {**first, "gpu_end_ns": last["gpu_end_ns"]}


def series_rows(series: dict[str, Any], rows: Sequence[int]) -> dict[str, Any]:
    """The steps ``rows`` of ``series``, as a series (each step's thread too)."""
    return {k: [series[k][i] for i in rows] if series.get(k) is not None else None
            for k in ("host_start_ns", "gpu_start_ns", "gpu_end_ns", "tid", "run_delay_ns", "run_delay_read")}


def _range_counts(
    series: dict[str, dict[str, Any]], results: PassResults, work: list[int], work_grad: list[bool]
) -> tuple[dict[str, int], dict[str, Any], list[int], dict[str, dict[str, Any]]]:
    """(steps per range name, as the step choice counts them; the data loader's ends of
    passes; the training marks; without a data loader, per optimizer range, its iterations
    as :func:`loop_series` times them) of the light pass's series and the loop's ``work``
    (:func:`loop_work`, with each call's grad mode)."""
    counts = {name: len(s["gpu_end_ns"]) for name, s in series.items()}
    ends_of_passes = _loader_passes(results, work, work_grad)
    # the training fetches and marks: the same rule as analyze's on a trace
    trained, marks = steps.training_loop(
        {n: s["host_start_ns"][: len(s["gpu_end_ns"])] for n, s in series.items()
         if n.startswith(rangenames.LOOP_PREFIXES) or n == rangenames.BACKWARD_RANGE},
        ends_of_passes["host_start_ns"], _evaluation_fetches(series, ends_of_passes, work, work_grad))
    counts.update(trained)
    # an evaluation loop's fetches, those whose iteration held the loop's work: as analyze
    # counts them, not the one a `break` left
    counts.update({n: len(steady.loop_iterations(s, ends_of_passes, None, work)["host_start_ns"])
                   for n, s in series.items() if n.startswith(rangenames.DATA_LOADER_PREFIX) and n not in trained})
    # an optimizer's marks in groups, each iteration's work before them (a PPO rollout): as
    # loop_series times them
    loader = bool(_fetches(series, ends_of_passes)["host_start_ns"])
    loops = {} if loader else {n: optimizer_loop(n, s, series, work) for n, s in series.items() if n.startswith(rangenames.LOOP_PREFIXES[1:])}
    return counts, ends_of_passes, marks, loops


def loop_work(results: PassResults) -> tuple[list[int], list[bool]]:
    """The loop's work: its model's calls at depth 0 (timed until a loop range repeated, their
    host starts noted after), and each one's grad mode (enabled where the series does not say)."""
    timed = ((results.modules or {}).get("0") or {}).values()
    work = [h for s in timed for h in s["host_start_ns"]] + (results.module_work_ns or [])
    grad = [g for s in timed for g in (s.get("grad") or [True] * len(s["host_start_ns"]))]
    noted = results.module_work_grad or [True] * len(results.module_work_ns or [])
    return work, grad + noted


def find_step(results: PassResults, options: RunOptions) -> tuple[str | None, str | None, dict[str, Any] | None, bool]:
    """(step name, how it was found, the module step, whether its series was rewritten: timed
    as the loop iteration or merged from serving ranges) from the light pass's results.

    The choice is :func:`perfdoctor.analysis.steps.choose_step`, the one ``analyze`` makes on a
    trace: the user's markers (``--step``, perfdoctor.region/step, ``--step-fn``), serving ranges,
    calls of a torch.compile-d function, ..., the replays of one CUDA graph, ..., the outermost
    repeating module call. A name that marks the loop iteration (a compiled call, a graph's
    replays, torch's loop ranges chosen or named, a module call) gets, in ``results.series``, a series timed as the iteration."""
    automatic = options.step is None and options.step_fn is None
    series = results.step_series()
    apart: set[str] = set()
    if automatic:
        series = optimizer_instance(series)
        apart = _marking_none(series)
    work, work_grad = loop_work(results)
    counts, ends_of_passes, marks, loops = _range_counts(series, results, work, work_grad)
    groups = {n: (len(f["host_start_ns"]), f["group"]) for n, f in loops.items() if f.get("group")}
    api_counts = results.step_counts or {}
    if options.step is not None:
        user = [n for n in counts if n == options.step or fnmatch.fnmatchcase(n, options.step)]
        if not user:
            return None, None, None, False
    else:
        user = [n for n in api_counts if counts.get(n)]
    found = module_step(results.modules or {}, results.module_classes or {}, results.waits) if automatic else None
    modules = {found.name: len(found.moded[0] if found.moded else found.calls["gpu_end_ns"])} if found is not None else {}
    # one series per CUDA graph replayed (GraphReplays): the step when that graph is (nearly) every replay, as in a trace
    graph = steps.one_graph({n: c for n, c in counts.items() if rangenames.kind(n) == rangenames.REPLAY})
    compiled = {n: s["host_start_ns"][: len(s["gpu_end_ns"])] for n, s in series.items() if rangenames.kind(n) == rangenames.COMPILED}
    starts = {n: s["host_start_ns"] for n, s in series.items() if rangenames.kind(n) == rangenames.LOOP}
    choice = steps.choose_step({n: c for n, c in counts.items() if n not in apart}, user=user, modules=modules,
                               replays=counts[graph] if graph else 0, compiled_starts=compiled, groups=groups, loop_starts=starts)
    if choice is None:
        return None, None, None, False
    name = graph if choice.name == steps.GRAPH_REPLAY else choice.name
    if (split := rangenames.parse_optimizer_instance(name)) is not None:
        choice = replace(choice, how=f"{choice.how}; {_optimizer_how(name, split, counts)}")
    if choice.kind == "user":
        how = "--step" if options.step is not None else "--step-fn" if options.step_fn is not None else (
            "perfdoctor.region" if name in api_counts else "range")
        marker = rangenames.kind(name)
        if marker not in (rangenames.LOOP, rangenames.BACKWARD):
            return name, how, None, False
        # named, as chosen (and in analyze): a --step fetch was timed alone, not its iteration
        choice = steps.Choice(marker, name, f"{how}, timed as {steps.ITERATION}", True)
    if choice.kind == "serving":
        series[name] = serving_series(series)
        results.series = series
        return name, choice.how, None, True
    if choice.kind == "profiler_step":
        # the program's own torch.profiler: ProfilerStep#0, #1, ... one after another, each
        # from one prof.step() to the next: the loop iteration already (the one the
        # profiler's exit closed is in results.profiler_exit, not here: no iteration)
        series[name] = profiler_series(series, results)
        results.series = series
        return name, choice.how, None, True
    module, joined, moded = None, None, None
    if choice.kind == "module":
        _, calls, module, how, joined, moded = found  # type: ignore[misc]
    else:
        calls, prefill = with_eager_calls(name, series[name], results.modules) if choice.kind == "compiled" else (series[name], "")
    if choice.kind == "compiled":
        calls, joined = compiled_iterations(calls, [h for n, hs in compiled.items() if n != name for h in hs])
    if choice.kind == "loop":
        timed = loop_series(name, calls, series, ends_of_passes, marks, work, loops.get(name), work_grad)
    elif choice.iteration:
        # one instance of several marking the iteration: one loop's calls on any thread (an ensemble on a thread pool)
        timed = call_iterations(calls, joined, results.waits, results.full_gcs, bool(module and "instance" in module),
                                _loop_fetches(series, ends_of_passes, work, work_grad))
    if moded is not None:
        timed = {**{k: [v[i] for i in moded[0]] if isinstance(v, list) else v for k, v in timed.items()}, "pass_ended": moded[1]}
    if choice.iteration:
        if module is None:
            # the calls as measured stay in raw/light.json beside the iteration (a module
            # step's are under "modules"): a later reading can re-derive the iteration
            results.call_series = {**(results.call_series or {}), name: calls}
        series[name] = timed
        results.series = series
    return name, choice.how + prefill if module is None else how, module, choice.iteration


def _marking_none(series: dict[str, dict[str, Any]]) -> set[str]:
    """The ranges of ``series`` that mark no iteration: another optimizer's steps, a
    closure's zero_grad (:func:`perfdoctor.analysis.steps.enclosed_marks`), the program's own
    profiler's steps where it steps mid-iteration (:func:`_profiler_cuts`)."""
    apart = steps.other_optimizers(series)
    apart |= steps.enclosed_marks({n: (s["host_start_ns"][: len(s["gpu_end_ns"])], s.get("host_end_ns") or s["gpu_end_ns"])
                                   for n, s in series.items() if n not in apart})
    return apart | _profiler_cuts(series)


def _profiler_cuts(series: dict[str, dict[str, Any]]) -> set[str]:
    """The ProfilerStep#N names of ``series`` when the program's profiler steps in the middle
    of its training iterations (:func:`perfdoctor.analysis.steps.cuts_iterations`:
    Lightning's PyTorchProfiler), else none."""
    def spans(kind: Callable[[str], bool]) -> tuple[list[int], list[int]]:
        parts = [s for n, s in series.items() if kind(n)]
        return ([h for s in parts for h in s["host_start_ns"][: len(s["gpu_end_ns"])]],
                [e for s in parts for e in (s.get("host_end_ns") or s["gpu_end_ns"])])

    profiled = {n for n in series if rangenames.kind(n) == rangenames.PROFILER_STEP}
    opt = spans(lambda n: n.startswith(rangenames.OPTIMIZER_STEP_PREFIX))
    return profiled if profiled and steps.cuts_iterations(*spans(profiled.__contains__), *opt) else set()


def _optimizer_how(name: str, split: tuple[str, int], counts: dict[str, int]) -> str:
    """What the step choice says of one optimizer's steps named apart (:func:`optimizer_instance`)."""
    torch_name, ordinal = split
    if ordinal == rangenames.NEW_OPTIMIZER:
        return (f"the first step of each optimizer torch names {torch_name!r}: the program makes a new one per outer iteration "
                f"({counts[name]}), whose other {counts[torch_name]} steps are their inner loops (Reptile, MAML, test-time adaptation)")
    return f"the steps of one optimizer (#{ordinal} by first step) of those torch names {torch_name!r}, which enclose the others' {counts[torch_name]}"


def optimizer_instance(series: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Two optimizers of one class step under one range name (a GAN's critic and generator,
    both Adam: ``Optimizer.step#Adam.step`` k + 1 times per iteration). When a name's steps
    carry their optimizer (``instance``, the bootstrap's ``OptimizerSteps``) and one of them
    marks the loop iteration (:func:`perfdoctor.analysis.steps.iteration_instance`: the
    generator, stepped once per iteration, encloses the critic's k steps; stepped alike,
    the last stepped, which ends the iteration), its steps become a series of their own,
    ``Optimizer.step#Adam#2.step`` (:func:`perfdoctor.names.ranges.optimizer_instance`, which
    the traced passes mark), and the name keeps the others' steps: the iteration's work
    (:func:`perfdoctor.analysis.steps.other_optimizers`). Where one optimizer after another
    steps a few times each (:func:`perfdoctor.analysis.steps.optimizer_lives`: a new one per
    outer iteration, Reptile's), each one's first step is the series,
    ``Optimizer.step#SGD#new.step``."""
    for name, s in series.items():
        instances = s.get("instance") if name.startswith(rangenames.OPTIMIZER_STEP_PREFIX) else None
        ordinal = steps.iteration_instance(instances, closing=True, loops=s.get("loop")) if instances else None
        if ordinal is None and instances and steps.optimizer_lives(instances):
            ordinal = rangenames.NEW_OPTIMIZER  # a new optimizer per outer iteration: each one's first step marks it
        if ordinal is not None:
            mine = np.asarray(instances) == ordinal if ordinal != rangenames.NEW_OPTIMIZER else steps.first_steps(instances)
            # every per-step list (host_end_ns too: steady.optimizer_iterations reads it), not a None
            others, marks = ({k: [x for x, m in zip(v, mine) if m == keep] if isinstance(v, list) else v for k, v in s.items()}
                             for keep in (False, True))
            return {**series, name: others, rangenames.optimizer_instance(name, ordinal): marks}
    return series


def compiled_iterations(calls: dict[str, Any], others: list[int]) -> tuple[dict[str, Any], list[bool]]:
    """The compiled calls that begin an iteration (:func:`perfdoctor.analysis.steps.iteration_begins`:
    not the draft's cache fill right after a speculative decode's verify), and which
    iterations hold the other compiled functions' calls (``others``, host starts: the
    draft's tokens before the next verify): the iteration's work, never a pause."""
    calls = series_rows(calls, np.flatnonzero(steps.iteration_begins(calls["host_start_ns"], others)).tolist())
    return calls, steps.others_between(calls["host_start_ns"], others)


def call_iterations(calls: dict[str, Any], joined: list[bool] | None, waits: dict[str, list[int]] | None,
                    full_gcs: dict[str, list[int]] | None = None, one_loop: bool = False,
                    fetches: tuple[list[int], list[int]] = ([], [])) -> dict[str, Any]:
    """The loop iterations of a step found as a call: the call and the host work until the
    next one (on the H200 an HF generate spent ~0.5 ms per token between forward calls).
    Without CUDA (host clock) the next call's host start marks the iteration's end. A wait
    for another thread between two calls (``waits``, the light pass's) ends the iteration,
    and the next begins where the thread resumed (a server's worker blocked on its request
    queue is idle, not serving; taking the next request is its service): each step's
    ``waited_ns`` say so; a wait while the rest of the process worked (a producer, a process
    pool's workers: ``steady.fed_between``) is the iteration's own, never a pause. Calls on
    several threads (a pool of workers) are iterations of each thread's loop: each ends at its
    own thread's next call, unless ``one_loop``: one instance of several that marks the
    iteration of the loop that calls them all (:func:`module_step`), whichever threads run
    it, its calls one series. An ensemble of 4 LSTMs fanned out by ``ThreadPoolExecutor.map`` per batch
    (ensemble_threads.py) ran instance #1 on one pool thread or another: each call ended at
    its thread's next, p50 0.93 ms for the program's 2.3 ms per batch. The time another process took
    the CPU from the thread (``run_delay_ns``) never makes a pause of the program's, nor
    does a full garbage collection between two calls (``full_gcs``: the program's own
    allocations' cost, which its own timer counts). Nor does the wait for a data loader's
    next batch between calls made once per batch (``fetches``: every fetch's host start, and
    those that ended a pass: :func:`perfdoctor.analysis.steady.fetched_between`)."""
    starts = calls["gpu_start_ns"] if calls.get("gpu_start_ns") is not None else calls["host_start_ns"]
    n = len(calls["gpu_end_ns"])
    tid = calls.get("tid")
    if one_loop and tid is not None and len(set(tid[:n])) > 1:
        tid = None  # one loop's calls on the threads of a pool: no thread's waits are the loop's
    idle_from, waited, resumed = steady.waits_between(calls["host_start_ns"], tid, waits)
    delay = (calls.get("run_delay_ns") or [])[:n] or None  # each start's wait for a CPU (RunQueue): no pause
    read = (calls.get("run_delay_read") or [])[:n] or None  # which of those were read, not interpolated
    if full_gcs and n:
        # the collections between each call's end and the next call's start, as a running total beside the waits
        collected = np.r_[0, np.cumsum(steady.time_inside(calls["gpu_end_ns"][: n - 1], calls["host_start_ns"][1:n], full_gcs))]
        delay = (collected + np.asarray(delay, dtype=np.int64) if delay else collected).tolist()
    threads = np.unique(np.asarray(tid[:n], dtype=np.int64)) if tid is not None and len(tid) >= n else np.empty(0)
    if threads.size > 1:
        t, ends_ns = np.asarray(tid[:n], dtype=np.int64), np.asarray(calls["gpu_end_ns"], dtype=np.int64).copy()
        for thread in threads:
            rows = np.flatnonzero(t == thread)
            # joined (known work between a call and the series' next) is the series', not a thread's
            ends_ns[rows] = steady.iteration_ends_ns([starts[i] for i in rows], ends_ns[rows], idle_from=idle_from[rows],
                                                     run_delay=[delay[i] for i in rows] if delay else None,
                                                     run_delay_read=[read[i] for i in rows] if delay and read else None)
        ends = ends_ns.tolist()
    else:
        # a wait for the next input while its producer worked is the iteration's, never a pause
        fed = (steady.fed_between(calls["host_start_ns"][:n], tid, waits)
               | steady.fetched_between(calls["host_start_ns"][:n], *fetches))[: max(n - 1, 0)]
        joined = (np.asarray(joined[: fed.size], dtype=bool) | fed).tolist() if joined is not None else fed.tolist()
        ends = steady.iteration_ends_ns(starts, calls["gpu_end_ns"], joined=joined, idle_from=idle_from, run_delay=delay,
                                        run_delay_read=read).tolist()
    began = np.where(resumed >= 0, resumed, np.asarray(calls["host_start_ns"], dtype=np.int64)).tolist()
    return {**calls, "host_start_ns": began, "gpu_end_ns": ends, "waited_ns": waited.tolist()}


def with_eager_calls(name: str, calls: dict[str, Any], modules: dict[str, Any] | None) -> tuple[dict[str, Any], str]:
    """The compiled calls ``name`` of a module (``torch.compile: Class.forward``) with the
    module's eager calls at depth 0 (``modules``, the light pass's) as one series, and what
    to add to the step's how. transformers' generate compiles the model's ``__call__`` for
    its decode steps and runs the prefill eager: each generate's first token is an eager
    call of the same forward, and without it the prefill fell between steps as a pause (HF
    generate with its own compile on the H200: 252 of 256 forwards, the rate 0.91 of the
    program's tokens/s). An eager call with a compiled call inside it (``model(x)`` over
    ``model.forward = torch.compile(model.forward)``) is that call's wrapper, not another
    step: left out."""
    eager = ((modules or {}).get("0") or {}).get(name.removeprefix(rangenames.COMPILED_PREFIX))
    if not name.startswith(rangenames.COMPILED_PREFIX) or not eager or not eager.get("gpu_end_ns"):
        return calls, ""
    inner = np.sort(np.asarray(calls["host_start_ns"], dtype=np.int64))
    rows = []
    for i, (start, end) in enumerate(zip(eager["host_start_ns"], eager["gpu_end_ns"])):
        j = np.searchsorted(inner, start)
        if j == len(inner) or inner[j] > end:  # no compiled call inside: not a wrapper
            rows.append(i)
    if not rows:
        return calls, ""
    return merged_series([calls, series_rows(eager, rows)]), f", with its {len(rows)} eager call{'s' if len(rows) > 1 else ''} (a prefill: the same forward, not compiled)"


def loop_series(
    name: str, calls: dict[str, Any], series: dict[str, dict[str, Any]], exhausted: dict[str, Any], marks: list[int],
    work_ns: list[int] | None = None, loop: dict[str, Any] | None = None, work_grad: list[bool] | None = None,
) -> dict[str, Any]:
    """The iterations torch's loop range ``name`` marks (``calls``, its series). The range is
    only a part of the iteration (the batch's fetch, the optimizer's step). A fetch's runs to
    the next, or to the end of its pass: a fetch that raised StopIteration (``exhausted``);
    ``marks`` (:func:`perfdoctor.analysis.steps.training_loop`) keep its training iterations,
    and without them ``work_ns`` (the model's calls) those that held the loop's work.
    The optimizer's step closes its iteration: from its group's first fetch to the first
    fetch after it (:func:`perfdoctor.analysis.steady.step_groups`, over every fetch, the
    exhausted ones the ends of passes); without fetches, from one step to the next. Each
    step says whether a pass ended between the step before and it (``pass_ended``: an
    evaluation pass, the epoch's end), a pause of the rate whatever its length. Without
    fetches (``for step in range(n)``), :func:`perfdoctor.analysis.steady.optimizer_loop`:
    one per optimizer step (or group of them), wherever ``zero_grad`` falls in it (``loop``:
    that result, when the step choice has it already); a step that held an evaluation pass
    before its training (``work_grad``: each work call's grad mode,
    :func:`perfdoctor.analysis.steady.evaluation_passes`) begins after it, ``pass_ended``."""
    if name.startswith(rangenames.DATA_LOADER_PREFIX):
        return steady.loop_iterations(calls, exhausted, marks, work_ns)
    fetches = _fetches(series, exhausted)
    passes = set(exhausted["host_start_ns"]) | set(_evaluation_fetches(series, exhausted, work_ns or [], work_grad or []))
    ends = [h in passes for h in fetches["host_start_ns"]]  # each fetch: it ended a pass or was an evaluation's
    if all(ends):
        # no data loader feeds the training (none, or an evaluation's alone: batches made in
        # the loop, a DataLoader over the held-out set every N steps, where the optimizer's
        # steps grouped behind the evaluations' fetches read 3 steps of 36 ms for 40 of 3.7,
        # amp_train.py --val-every 10): one iteration per optimizer step, the first (or last)
        # one the series' marks leave out included
        # "group" (marks per iteration) stays for light_summary: the traced passes count marks
        loop = loop if loop is not None else optimizer_loop(name, calls, series, work_ns)
        timed = {k: v for k, v in loop.items() if k != "mark"}
        if work_ns and work_grad and len(work_grad) == len(work_ns):
            begins, ended = steady.evaluation_passes(timed["host_start_ns"], work_ns, work_grad)
            if ended.any():
                moved = begins != np.asarray(timed["host_start_ns"], dtype=np.int64)
                timed["host_start_ns"] = begins.tolist()
                if timed.get("gpu_start_ns") is not None:  # the stream idle at the moved start: its host time
                    timed["gpu_start_ns"] = np.where(moved, begins, np.asarray(timed["gpu_start_ns"], dtype=np.int64)).tolist()
                timed["pass_ended"] = ended.tolist()
        return timed
    n = len(calls["gpu_end_ns"])
    at, first, after, pass_ended = steady.step_groups(
        calls["host_start_ns"][:n], fetches["host_start_ns"], ends, (series.get(rangenames.BACKWARD_RANGE) or {}).get("host_start_ns"))
    reached = fetches["gpu_start_ns"] or fetches["host_start_ns"]  # the stream reaching the next fetch: the iteration's end
    return {
        "host_start_ns": [fetches["host_start_ns"][i] for i in first],
        "gpu_start_ns": [fetches["gpu_start_ns"][i] for i in first] if fetches["gpu_start_ns"] is not None else None,
        "gpu_end_ns": [max(int(calls["gpu_end_ns"][k]), int(reached[j] if reached[j] is not None else fetches["host_start_ns"][j]))
                       for k, j in zip(at, after)],
        "pass_ended": pass_ended.tolist(),
    }


def _evaluation_fetches(series: dict[str, dict[str, Any]], exhausted: dict[str, Any], work: list[int], work_grad: list[bool]) -> list[int]:
    """Host starts of the data loader fetches whose iteration holds the loop's ``work`` and
    none with grad enabled (``work_grad``): an evaluation loop's under the training loader's
    range name (:func:`perfdoctor.analysis.steady.evaluation_fetches`)."""
    if len(work_grad) != len(work):
        return []
    every = _fetches(series, exhausted)["host_start_ns"]
    flags = steady.evaluation_fetches(every, work, [w for w, g in zip(work, work_grad) if g])
    ended = set(exhausted["host_start_ns"])
    return [h for h, e in zip(every, flags) if e and h not in ended]


def _loop_fetches(series: dict[str, dict[str, Any]], ends_of_passes: dict[str, Any], work: list[int], work_grad: list[bool]) -> tuple[list[int], list[int]]:
    """(every data loader fetch's host start, those of the fetches that ended a pass or were an
    evaluation's): where a call step's loop fetched its batches (:func:`call_iterations`)."""
    ended = ends_of_passes["host_start_ns"] + _evaluation_fetches(series, ends_of_passes, work, work_grad)
    return _fetches(series, ends_of_passes)["host_start_ns"], ended


def _fetches(series: dict[str, dict[str, Any]], exhausted: dict[str, Any]) -> dict[str, Any]:
    """Every data loader fetch as one series, those that raised StopIteration (``exhausted``) too."""
    return merged_series([s for n, s in series.items() if n.startswith(rangenames.DATA_LOADER_PREFIX)] + [exhausted])


def optimizer_loop(name: str, calls: dict[str, Any], series: dict[str, dict[str, Any]], work_ns: list[int] | None) -> dict[str, Any]:
    """The iterations of a loop with no data loader that the optimizer's range ``name`` marks
    (``calls``): :func:`perfdoctor.analysis.steady.optimizer_loop`, the optimizer's other
    ranges in ``series`` its other marks."""
    others = merged_series([s for n, s in series.items() if n != name and n.startswith(rangenames.optimizer_others(name))])
    return steady.optimizer_loop(calls, others, work_ns, name.startswith(rangenames.LOOP_PREFIXES[1]), rangenames.closes_iteration(name))


def _loader_passes(results: PassResults, work: list[int], work_grad: list[bool]) -> dict[str, Any]:
    """The ends of passes over the data loaders, every loader's, as one series: the fetches
    that raised StopIteration, and where no fetch raised right after a pass's last training
    batch, the end of that batch's training work (:func:`perfdoctor.analysis.steady.training_ends`):
    a loop that stopped at its loader's length (the fetch that yielded the pass's last batch)
    or a training pass that an evaluation loop's fetches follow (:func:`_evaluation_fetches`:
    Lightning's validation every N batches, whose set-up before its first fetch, 1.3 ms of a
    15.2 ms optimizer step on the H200, is no training step's); and the run's last fetch with
    training after it (``steady.last_fetch_trained``: HF's Trainer, a loop left by ``break``)."""
    ended = list((results.exhausted or {}).values())
    series = results.series or {}
    fetches = sorted(h for n, s in series.items() if n.startswith(rangenames.DATA_LOADER_PREFIX) for h in s["host_start_ns"])
    raised = sorted(h for s in ended for h in s["host_start_ns"])
    before = [h for hs in (results.last_batches or {}).values() for h in hs]
    evaluating = set(_evaluation_fetches(series, merged_series(ended) if ended else _NO_PASSES, work, work_grad))
    before += [a for a, b in zip(fetches, fetches[1:]) if b in evaluating and a not in evaluating]
    marks = _marks([s for n, s in series.items() if n.startswith(rangenames.LOOP_PREFIXES[1:]) or rangenames.kind(n) == rangenames.BACKWARD])
    # no training: the run's last batch ends where its model call ended (Lightning's predict
    # loop stops at its loader's length, accelerate's loader under Trainer.predict fetches a
    # batch ahead: no fetch ends it, and it was dropped: 399 of 400); a pass's other ends stay
    # where the next pass's first fetch is, its model's calls not the last of its iterations
    last_marks = marks if marks["host_start_ns"] else _marks(_model_calls(results))
    cuda = any(s.get("gpu_start_ns") is not None for s in series.values())
    last = steady.last_fetch_trained(fetches + raised, last_marks["host_start_ns"])
    for lasts, by in (([h for h in before if h != last], marks), ([] if last is None else [last], last_marks)):
        ends = steady.training_ends(lasts, fetches, raised, by)
        if ends["host_start_ns"]:
            ended.append(ends if cuda else {**ends, "gpu_start_ns": None})
    return merged_series(ended) if ended else _NO_PASSES


def _marks(marked: list[dict[str, Any]]) -> dict[str, list[int]]:
    """Series of training marks as one (host starts, host ends, GPU ends); a series without
    host ends (a bundle's older light.json) gives its GPU ends, as where calls are grouped."""
    return {k: [v for s in marked for v in s.get(k) or s["gpu_end_ns"]] for k in ("host_start_ns", "host_end_ns", "gpu_end_ns")}


_NO_PASSES = {"host_start_ns": [], "gpu_start_ns": None, "gpu_end_ns": []}


def _model_calls(results: PassResults) -> list[dict[str, Any]]:
    """The loop's model calls at depth 0 as series of (host start, host end): those timed
    while the light pass scouted, and those noted after (their GPU ends unknown: the host's)."""
    timed = [s for s in ((results.modules or {}).get("0") or {}).values() if s.get("host_start_ns")]
    starts, ends = results.module_work_ns or [], results.module_work_end_ns or []
    done = [(h, e) for h, e in zip(starts, ends) if e]
    if done:
        host, end = [h for h, _ in done], [e for _, e in done]
        timed.append({"host_start_ns": host, "host_end_ns": end, "gpu_end_ns": end})
    return timed


def profiler_series(series: dict[str, dict[str, Any]], results: PassResults) -> dict[str, Any]:
    """The ProfilerStep#N ranges of ``series`` as one series of loop iterations. The range
    the profiler's exit closed (``results.profiler_exit``) is left out
    (:mod:`perfdoctor.names.ranges`, ``profiler_step``) —
    unless the program calls ``prof.step()`` at the top of its loop: then #0, from the
    profiler's start to the first ``prof.step()``, holds no iteration and the range the exit
    closed holds the last one (N iterations, N steps either way). #0 is taken for empty when
    no other range or module call the light pass timed starts in it while most later steps
    hold one (a loop of plain tensor code shows nothing either way: the exit's range is
    left out, as in the recipe's loop)."""
    merged = merged_series([s for n, s in series.items() if rangenames.kind(n) == rangenames.PROFILER_STEP])
    exited = list((results.profiler_exit or {}).values())
    starts = merged["host_start_ns"]
    if not exited or len(starts) < 3:
        return merged
    seen = [h for n, s in series.items() if rangenames.kind(n) != rangenames.PROFILER_STEP for h in s["host_start_ns"]]
    seen += [h for depth in (results.modules or {}).values() for s in depth.values() for h in s["host_start_ns"]]
    step_of = np.searchsorted(np.asarray(starts, dtype=np.int64), np.asarray(seen, dtype=np.int64), side="right") - 1
    held = np.bincount(step_of[step_of >= 0], minlength=len(starts))  # starts before #0 belong to no step
    if held[0] or (held[1:] > 0).sum() * 2 <= len(starts) - 1:
        return merged
    return merged_series([series_rows(merged, range(1, len(starts))), *exited])


def merged_series(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One series from several (their steps in host-start order)."""
    rows = sorted(
        (h, (s["gpu_start_ns"] or [None] * len(s["host_start_ns"]))[i], s["gpu_end_ns"][i])
        for s in parts
        for i, h in enumerate(s["host_start_ns"][: len(s["gpu_end_ns"])])
    )
    cuda = any(s["gpu_start_ns"] is not None for s in parts)
    return {
        "host_start_ns": [r[0] for r in rows],
        "gpu_start_ns": [r[1] for r in rows] if cuda else None,
        "gpu_end_ns": [r[2] for r in rows],
    }


def serving_series(series: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One series from the serving ranges of one engine (the most frequent): the names
    differ step by step, the steps are one loop. SGLang also writes a vLLM-style range
    around each of its own, so one engine's names only, or each step would count twice."""
    by_engine: dict[str, list[str]] = {}
    for name in series:
        parsed = rangenames.parse_serving(name)
        if parsed is not None:
            by_engine.setdefault(parsed[0], []).append(name)
    names = max(by_engine.values(), key=lambda ns: sum(len(series[n]["host_start_ns"]) for n in ns))
    return merged_series([series[n] for n in names])


# What to do where the program's work runs in processes it started
CHILDREN_ADVICE = ("call that function in the main process (one GPU: as the child would run it, e.g. worker(0, ...) instead of "
                   "mp.spawn(worker, ...)), or launch the ranks with torchrun: perfdoctor run -- torchrun --nproc-per-node N SCRIPT")


def _no_step(options: RunOptions, children: str | None = None, programs_only: bool = False) -> str:
    if children and programs_only:
        return f"no step seen: {children}; run the program that does the work under perfdoctor itself: perfdoctor run SCRIPT ARGS"
    if children:
        return f"no step seen: {children}; {CHILDREN_ADVICE}"
    if options.step is not None:
        return (
            f"no step seen: no range named {options.step!r} completed (a record_function, NVTX or "
            "perfdoctor.region name; without --step perfdoctor chooses the step)"
        )
    if options.step_fn is not None:
        return f"no step seen: {options.step_fn} was never called"
    return (
        "no step seen: no record_function/NVTX range, torch.compile-d function, CUDA graph replay, "
        "AOTInductor model call, torch.nn.Module call or backward() call repeated; name it with --step-fn __main__:FUNCTION (a function whose "
        "every call is one whole step: the call is what is timed), --step RANGE, or perfdoctor.region around the loop's body (a loop at the "
        "top of a script has no function to name)"
    )


# The steps found in the program's own process hold under this share of its run, while work
# it started in processes of its own ran: mnist_hogwild's test loop, 1 % of the run, beside
# the training in its two spawned processes
CHILDREN_SHARE = 0.1


def _children_work(results: PassResults, name: str, options: RunOptions) -> str | None:
    """Why the steps found (``name``) are not the program's work, or None where they may be:
    the program ran work in multiprocessing processes of its own (mnist_hogwild: ``train`` in
    2 spawned processes on a shared model), nothing in its own process trained (no optimizer
    step or backward call, no model call with grad), and its steps hold under
    :data:`CHILDREN_SHARE` of the run: the parent's test loop read as the step, 32 batches
    of 4.4 ms against the children's 400 training batches of 24 ms. A DataLoader's and a
    pool's workers are no such processes (``process_work``), and a process feeding the
    steps leaves them most of the run."""
    series = results.series or {}
    if not results.children or results.child_programs_only() or not results.program_ns or name not in series:
        return None
    if any(n.startswith(rangenames.LOOP_PREFIXES[1:]) for n in series) or any(results.module_work_grad or []):
        return None
    s = series[name]
    run = results.program_ns[1] - results.program_ns[0]
    if not s["host_start_ns"] or run <= 0:
        return None
    share = (s["gpu_end_ns"][-1] - s["host_start_ns"][0]) / run
    if share >= CHILDREN_SHARE:
        return None
    return (f"no step of the program's work seen: {results.children_note()}; the {count(len(s['host_start_ns']))} steps of {name!r} "
            f"in its own process hold {percent(share)} of its run and train nothing; {CHILDREN_ADVICE}")


# Another optimizer's steps, all before or all after the chosen step's, holding this share of
# the training (theirs and the step's span) or more: a phase the step does not describe
PHASE_SHARE = 0.25


def _other_phase(results: PassResults, name: str) -> str | None:
    """Where the step (``name``) is one optimizer's iteration and another optimizer's steps
    ran in a phase of their own, all before or all after it, holding :data:`PHASE_SHARE` of
    the training (that phase and the steps' span) or more: which, how long, and how to
    analyse it; else None. A PINN trained as its tutorials do, Adam for 150 iterations then
    L-BFGS for 15 ``step(closure)`` calls of ~23 closures each: the step was Adam's iteration,
    3.8 ms, and nothing said that L-BFGS ran 1.43 s against Adam's 0.58 (interleaved
    optimizers, a GAN's two, are one loop's: no phase)."""
    series = results.series or {}
    if not name.startswith(rangenames.LOOP_PREFIXES[1:]) or name not in series:
        return None
    mine = rangenames.optimizer_class(name)
    s = series[name]
    first, last = s["host_start_ns"][0], s["gpu_end_ns"][-1]
    found = []
    for other, o in series.items():
        if not other.startswith(rangenames.OPTIMIZER_STEP_PREFIX) or rangenames.optimizer_class(other) == mine:
            continue
        spans = [(h, e) for h, e in zip(o["host_start_ns"], o["gpu_end_ns"]) if e is not None]  # completed
        if len(spans) < 2 or not (all(e < first for _, e in spans) or all(h > last for h, _ in spans)):
            continue  # interleaved with the step's, or a lone call
        held = sum(e - h for h, e in spans)
        if held >= PHASE_SHARE * (held + last - first):
            found.append((held, other, len(spans)))
    if not found:
        return None
    held, other, n = max(found)
    return (f"another optimizer ran a phase of its own outside these steps: {count(n)} steps of {other!r}, "
            f"{value(held / 1e6, 'ms')} against {value((last - first) / 1e6, 'ms')} from these steps' first to their last, "
            f"in no number of this bundle; perfdoctor run --step {other!r} analyses that phase")


def light_summary(results: PassResults, options: RunOptions) -> LightPass:
    """``manifest.light_pass`` from the light pass's results: the scout's report.

    The step (and how it was found), its critical-path times, where its steady state starts
    (:func:`perfdoctor.analysis.steady.steady_start`) and the warm-up the traced passes skip: the
    user's ``--warmup`` when given, else the steady state's start.
    """
    name, how, module, rewritten = find_step(results, options)
    elsewhere = _children_work(results, name, options) if name is not None and options.step is None and options.step_fn is None else None
    if elsewhere is not None:
        name, how, module, rewritten = None, None, None, False
    clock = results.step_end_clock
    summary = LightPass(
        step_name=name,
        how=how,
        step_end_clock=clock,
        timing=(
            "critical path per step: end of its GPU work minus the later of its host start and the previous "
            "step's GPU end (CUDA events, no sync added), no tracer"
            if clock == "cuda-event"
            else "host start to host end (the program used no GPU), no tracer"
        ),
        steps_seen=0,
        warmup_explicit=options.warmup is not None,
        module=module,
        iteration=rewritten or None,  # raw/light.json then carries the rewritten series
    )
    if name is None:
        summary = replace(
            summary,
            reason=elsewhere or _no_step(options, results.children_note(), results.child_programs_only()),
            steady_start=0, steady_reason="no step", warmup=options.warmup or 0, step_latency_ms=[],
        )
    else:
        s = results.series[name]  # type: ignore[index]
        summary.marks_per_step = s.pop("group", None)
        noted_steps(s, results, name)
        cp = steady.critical_path_ns(s["host_start_ns"], s["gpu_end_ns"], s.get("tid"))
        found = steady.series_steady_start(s["host_start_ns"], s["gpu_end_ns"], s.get("gpu_start_ns"), s.get("waited_ns"),
                                           s.get("pass_ended"), s.get("cpu_wait_ns"), s.get("tid"), new_optimizers(results, s))
        if options.warmup is not None:
            warmup, why = options.warmup, "--warmup"
        elif len(cp) >= SCOUT_MIN_STEPS:
            warmup, why = found.start, "the steady state's start"
        else:
            warmup, why = DEFAULT_WARMUP, f"fewer than {SCOUT_MIN_STEPS} steps: too few to place the window by the steady state"
        # an instance's step (Class#k.forward) counts its calls off the main thread as the class's
        called = name.replace(f"#{module['instance']}.forward", ".forward") if module and "instance" in module else name
        threads = (results.worker_steps or {}).get(called, 0)
        summary = replace(
            summary,
            warmup_reason=why,
            steps_seen=len(cp),
            steady_start=found.start,
            steady_reason=found.reason,
            warmup=warmup,
            step_latency_ms=[round(v / 1e6, 6) for v in cp[warmup:].tolist()],
            step_thread="worker" if threads else "main",
            trains=any(n.startswith(rangenames.LOOP_PREFIXES[1:]) for n in results.series or {}) or None,
            other_phase=_other_phase(results, name) if options.step is None else None,
        )
    if options.tokens_per_step is not None:
        summary.declared = {"tokens": options.tokens_per_step, "source": "--tokens-per-step"}
    elif name is not None and (results.declared or {}).get(name):
        summary.declared = {**results.declared[name], "source": "the program"}  # type: ignore[index]
    summary.timing_error = results.timing_error or None
    return summary


# what noted_steps adds to the chosen series: perfdoctor run rewrites raw/light.json with them
NOTED = ("compiled_ns", "gc_ns", "save_ns", "cpu_wait_ns", "idle_before_ns", "gc_before_ns")


def carries_series(light: LightPass, results: PassResults) -> bool:
    """Whether :func:`light_summary` rewrote the chosen series (timed as the loop iteration)
    or noted its steps (:func:`noted_steps`) in ``results``: the pass's light.json (each
    rank's too) is then written again, so that readers find the series the summary timed."""
    return bool(light.iteration) or bool(set(NOTED) & set((results.series or {}).get(light.step_name or "") or {}))


def noted_steps(series: dict[str, Any], results: PassResults, name: str) -> None:
    """Per step of the chosen ``series`` (of step ``name``), in place: how long torch.compile
    compiled inside it (``compiled_ns``: the analysis leaves such steps out of the steady
    steps' rate and p50), how long Python's full garbage collections ran inside it
    (``gc_ns``), how long the program's checkpoint saves ran (``torch.save``, safetensors'
    ``save_file``, DCP's ``save``: ``save_ns``) and how long the step's thread waited for a CPU
    (``cpu_wait_ns``: another process on its cores) — what uneven-steps' evidence names — and
    how long its thread waited (``time.sleep``, a queue, a socket: the light pass's waits)
    between the previous step's end and its start (``idle_before_ns``: what time-between-steps'
    evidence says of each stretch, OpenMMLab's sleep at an epoch change all of it, an
    evaluation none) and how long full garbage collections ran there (``gc_before_ns``: a
    library's own ``gc.collect()`` at each epoch's end, PyKEEN's training loop), each only
    when some step has any."""
    compiled = steady.time_inside(series["host_start_ns"], series["gpu_end_ns"], results.compiles)
    if compiled.any():
        series["compiled_ns"] = compiled.tolist()
    for key, spans in (("gc_ns", results.full_gcs), ("save_ns", results.saves)):
        if spans:
            held = steady.time_inside(series["host_start_ns"][: len(series["gpu_end_ns"])], series["gpu_end_ns"], spans)
            if held.any():
                series[key] = held.tolist()
    ends = series["gpu_end_ns"]
    if results.full_gcs and len(ends) > 1:
        between = steady.time_inside(ends[:-1], series["host_start_ns"][1: len(ends)], results.full_gcs)
        if between.any():
            series["gc_before_ns"] = np.r_[0, between].tolist()
    thread = _step_thread(results, name)
    if thread is None:
        return
    n = len(ends)
    tids = series.get("tid") or []
    # each step's own thread's waits (a pool's steps, on several at once: one thread's
    # counter over all their spans counted its waits up to 8 times, 112 % of the steps' time)
    threads = np.asarray(tids[:n], dtype=np.int64) if len(tids) >= n and len(set(tids[:n])) > 1 else np.full(n, thread, dtype=np.int64)
    waited = np.zeros(n, dtype=np.int64)
    for t in np.unique(threads):
        rows = np.flatnonzero(threads == t)
        at, delay = _run_queue_reads(results, name, int(t))
        if at:
            waited[rows] = steady.cpu_waits_inside(np.asarray(series["host_start_ns"][:n])[rows], np.asarray(ends)[rows], at, delay)
    if waited.any():
        series["cpu_wait_ns"] = waited.tolist()
    # the series' own ends (an iteration's, not its call's): the waits between two steps
    idle = _waited_between({"host_start_ns": series["host_start_ns"], "gpu_end_ns": ends, "tid": [thread] * len(ends)}, results.waits)
    if idle is not None and idle.any():
        series["idle_before_ns"] = np.r_[0, idle].tolist()


def new_optimizers(results: PassResults, series: dict[str, Any]) -> np.ndarray | None:
    """Per step of ``series``, whether an optimizer steps for the first time in it (a class's,
    or another instance's of one: each trial of an Optuna study trains a new model with a new
    optimizer), past the run's first: a new configuration, whose pace is no warm-up
    (:func:`perfdoctor.analysis.steady.steady_start`). None where no optimizer came later, or
    one came every few steps (fewer than REGIME_WINDOW a configuration on average)."""
    firsts = []
    for name, s in (results.series or {}).items():
        if not name.startswith(rangenames.OPTIMIZER_STEP_PREFIX):
            continue
        starts, owners = s["host_start_ns"][: len(s["gpu_end_ns"])], s.get("instance") or [0] * len(s["gpu_end_ns"])
        seen: set[int] = set()
        for at, owner in zip(starts, owners):
            if owner not in seen:
                seen.add(owner)
                firsts.append(at)
    h = np.asarray(series["host_start_ns"][: len(series["gpu_end_ns"])], dtype=np.int64)
    if len(firsts) < 2 or len(firsts) * steady.REGIME_WINDOW > h.size:
        return None  # a new optimizer every few steps (Reptile's per outer iteration) begins no configuration
    k = np.searchsorted(h, sorted(firsts)[1:], side="right") - 1
    fresh = np.zeros(h.size, dtype=bool)
    fresh[k[k >= 0]] = True
    return fresh if fresh.any() else None


def _step_thread(results: PassResults, name: str) -> int | None:
    """The thread that runs step ``name``'s calls (the most of them), None when unknown."""
    own = (results.call_series or {}).get(name) or (results.series or {}).get(name) or {}
    tids = own.get("tid") or []
    return max(set(tids), key=tids.count) if tids else None


def _run_queue_reads(results: PassResults, name: str, thread: int) -> tuple[list[int], list[int]]:
    """(host times, run-queue delay counters) of ``thread``, which runs step ``name``'s calls:
    every read the light pass made on it, at the start of any call as measured: the other
    series, the step's own calls (``call_series``) and the module calls. The chosen series
    itself is left out: rewritten as the iteration, a step may begin where its thread
    resumed, not where its call read the counter."""
    series = results.series or {}
    measured = [*(s for n, s in series.items() if n != name), *(results.call_series or {}).values(),
                *(s for depth in (results.modules or {}).values() for s in depth.values())]
    reads = sorted({(h, d) for s in measured if s.get("run_delay_ns") and s.get("tid")
                    for h, t, d in zip(s["host_start_ns"], s["tid"], s["run_delay_ns"]) if t == thread and d is not None})
    return [h for h, _ in reads], [d for _, d in reads]


# The traced window opens past a leading run of steady steps faster than this share of the
# steady median (see window_start).
TYPICAL = 0.8


def window_start(steady_ms: Sequence[float], steps: int) -> int:
    """How many of the light pass's steady steps (``steady_ms``, its ``step_latency_ms``) the
    traced window lets run past the steady state's start: 0, or those of a leading run of
    steps faster than :data:`TYPICAL` of the steady median. The steady state leaves out
    slower first steps only; faster ones are a transient too: a producer's queue, filled
    during a slow first iteration, drained first (prefetch_train.py on the H200: four steps
    of 4-8 ms before the 59 ms ones, and a window from step 1 held those four of its ten,
    traced p50 22.5 ms against 59.2). Up to the first step from which
    :data:`~perfdoctor.analysis.steady.SETTLED_RUN` in a row reach it, where a window of
    ``steps`` (0: all the rest) still fits; else 0."""
    cp, run = np.asarray(steady_ms, dtype=np.float64), steady.SETTLED_RUN
    if cp.size < run:
        return 0
    typical = cp >= TYPICAL * np.median(cp)
    return next((k for k in range(cp.size - max(steps, run) + 1) if typical[k:k + run].all()), 0)


def window_warmup(results: PassResults, light: LightPass, steps: int = 0) -> int:
    """The calls of the step's range the traced passes let run before their window opens:
    for torch's loop ranges, which mark a point of the loop iteration the light pass times,
    the last call (of those the traced passes count: a fetch that raised StopIteration too)
    at or before the start of the light pass's step ``warmup``, the warm-up in steps; for
    other ranges (a call, its iteration from it on) the warm-up itself.

    A training loop with no data loader whose marks close the iteration (``zero_grad`` at its
    end, or only the optimizer's ``step``) has one before its first mark
    (``steady.optimizer_iterations``), and step ``k`` begins at call ``k - 1``: counted in
    calls, the window opened one step late (amp_train.py: the trace's 21 steps for the light
    pass's 22 steady ones). So does an optimizer step over its group of fetches (gradient
    accumulation), each beginning at its group's first fetch, before its call (train_eval.py
    --accum-steps 3: the trace's 2 steps for 3 steady ones, now 3, each its 3 fetches). Marks
    in groups (``steady.mark_groups``: CleanRL's PPO, 4 zero_grads per iteration after its
    rollout) begin each step after the previous group's last mark: the window opens at that
    mark (ppo_train.py --num-steps 64 traced on CPU, warm-up 1: at call 3, its 10 calls
    holding iterations 1 and 2 whole; counted in steps less the one before the first mark,
    at call 0, after iteration 0's rollout, and they held iteration 1 alone).

    The warm-up in steps is the light pass's, moved past fast leading steps
    (:func:`window_start`, for a window of ``steps``) unless the user gave ``--warmup``."""
    warmup, name = light.warmup or 0, light.step_name or ""
    calls = (results.call_series or {}).get(name)
    s = (results.series or {}).get(name)
    if not light.warmup_explicit:
        warmup += window_start(light.step_latency_ms or [], steps)
    if not warmup or rangenames.kind(name) != rangenames.LOOP or not calls or len((s or {}).get("host_start_ns") or []) <= warmup:
        return warmup
    raised = ((results.exhausted or {}).get(name) or {}).get("host_start_ns") or []
    counted = np.sort(np.asarray([*calls["host_start_ns"], *raised], dtype=np.int64))
    return max(0, int(np.searchsorted(counted, s["host_start_ns"][warmup], side="right")) - 1)  # type: ignore[index]


def steady_steps(results: PassResults, light: LightPass) -> list[tuple[int, int]]:
    """The critical-path interval of every steady step: ``[max(h[k], g[k-1]), g[k]]`` from
    the light pass's warm-up on (the time the steps occupied; pauses between them are not in it)."""
    name = light.step_name
    if name is None:
        return []
    s = results.series[name]  # type: ignore[index]
    h, g = s["host_start_ns"], s["gpu_end_ns"]
    first = light.warmup or 0
    return [(max(h[k], g[k - 1]) if k else h[k], g[k]) for k in range(first, len(g))]


def steady_counters(samples_file: Path, steps: list[tuple[int, int]]) -> tuple[dict[str, Any], str | None]:
    """``light_pass.counters``: each GPM metric over exactly the steady steps (see
    :func:`perfdoctor.collectors.nvml.steps_mean`); plus why there are none."""
    if not steps:
        return {}, "no steady steps"
    if not samples_file.exists():
        return {}, "the light pass had no NVML sampler"
    intervals = nvml.read_intervals(samples_file)
    if not intervals:
        return {}, "no GPM samples (GPM unsupported here, or the pass ended before two samples)"
    out = {}
    for metric in ("dram_bw_util", "sm_occupancy", "sm_util"):
        if metric in intervals:
            out[metric] = {"source": "nvml-gpm", **nvml.steps_mean(intervals[metric], steps)}
    return out, None


def window_means(samples_file: Path, steps: list[tuple[int, int]]) -> dict[str, Any]:
    """Plain mean of each NVML metric's samples stamped inside the steady steps' span (kept
    for readers of perfdoctor 0.1 bundles; ``counters`` is the time-weighted GPM value).
    perf_counter and the sampler's CLOCK_MONOTONIC are the same clock on Linux."""
    if not samples_file.exists() or not steps:
        return {}
    table = nvml.read_samples(samples_file)
    inside = table[(table["time_ns"] >= steps[0][0]) & (table["time_ns"] <= steps[-1][1])]
    return {
        metric: {"mean": float(group["value"].mean()), "samples": int(len(group)), "source": str(group["source"].iloc[0])}
        for metric, group in inside.groupby("metric")
    }
