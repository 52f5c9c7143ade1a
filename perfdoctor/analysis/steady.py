"""Step time from a series of steps: the critical path, the steady state, the cadence.

Pure functions on per-step arrays (integer ns on one clock), shared by the light pass of
``perfdoctor run`` (which uses :func:`steady_start` to place the traced windows) and by the
analysis of any step table (trace or light pass). No pandas, no torch.

For step ``k`` with host start ``h[k]`` and the end of its GPU work ``g[k]``:

* **critical-path time** ``cp[k] = g[k] − max(h[k], g[k−1])`` (``cp[0] = g[0] − h[0]``).
  When the host waits for every step, that is host start → GPU end; when the host runs
  ahead (an asynchronous loop, graph replays), it is the interval between completions —
  time spent queued behind earlier steps is not latency;
* **host before GPU** ``max(0, s[k] − max(h[k], g[k−1]))`` with ``s[k]`` the start of the
  step's GPU work: the critical path less the GPU window, host time that belongs to the
  step (its data loading) though no GPU work of it ran;
* **host lead** ``max(0, g[k−1] − h[k])``: how far ahead of the GPU the host issued step
  ``k`` (0 = the GPU waited for the host);
* **pause** before step ``k``: ``max(h[k], gs[k]) − g[k−1]`` (``gs[k]``: the stream
  reaching the step, when known) when it is longer than the median step and
  ``PAUSE_FACTOR`` times the usual gap between steps — time in which the program did
  something other than steps (a prefill, I/O, a new request), left out of the step rate;
  and before a step after the end of a data loader pass (``pass_ended``: an evaluation
  pass or the epoch's end lies between the two), whatever its length.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from perfdoctor.text import num, setting, value

# A step more than this factor slower than the steady median counts as warm-up when it
# comes before the steady run (first calls, compilation, graph capture, cache allocation).
WARMUP_FACTOR = 1.25
# Consecutive steps within the factor that mark the start of the steady state.
SETTLED_RUN = 3
# A window of this many steps, most of them slow, is a slow regime (a warm-up), not lone
# slow steps: a prefill per generate() call is not one, nor the noise of a host-bound loop
# (the real HF series, tests/fixtures/series/hf.json, has 4 slow steps in 7, none in 11).
REGIME_WINDOW = 11
# A gap between steps this many times the usual one (and longer than a median step) is a
# pause: the program did something other than steps.
PAUSE_FACTOR = 3.0


def _ns(values: np.ndarray | list[int]) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


def critical_path_ns(host_start: np.ndarray | list[int], gpu_end: np.ndarray | list[int],
                     threads: np.ndarray | list[int] | None = None) -> np.ndarray:
    """Per step, its critical-path time in ns (see the module docstring). ``threads``: each
    step's thread, where steps run on several at once (a thread pool's requests, each calling
    the model): a step then queues behind its own thread's previous step only. Queued behind
    whichever step ended last, 8 threads' overlapping requests of ~12 ms read 0.2-7 ms
    (``ThreadPoolExecutor.map(predict, ...)``: p50 0.59 of the program's own timer)."""
    h, g = _ns(host_start), _ns(gpu_end)
    if h.size == 0:
        return h
    previous_end = _previous_ends(g, threads)
    # A step that ended before the one before it ended ran beside it, not queued behind it
    # (a pool's workers, each its own loop: async_server.py --executor read -0.006 ms for a
    # request of 0.597 ms): its own span
    return g - np.maximum(h, np.where(previous_end <= g, previous_end, h))


def host_before_gpu_ns(host_start: np.ndarray | list[int], gpu_start: np.ndarray | list[int], gpu_end: np.ndarray | list[int]) -> np.ndarray:
    """Per step, the part of its critical path before its GPU work starts:
    ``max(0, gpu_start[k] − max(h[k], g[k−1]))`` = critical path − GPU window (0 when the
    step's work was queued behind the previous step's). Host work the step waits for before
    its first launch reaches the GPU: loading its data (``enumerate(DataLoader)#...__next__``
    in a training step), preprocessing, the launch latency."""
    h, s, g = _ns(host_start), _ns(gpu_start), _ns(gpu_end)
    if h.size == 0:
        return h
    previous_end = np.concatenate(([np.iinfo(np.int64).min], g[:-1]))
    return np.maximum(0, s - np.maximum(h, previous_end))


def host_lead_ns(host_start: np.ndarray | list[int], gpu_end: np.ndarray | list[int],
                 threads: np.ndarray | list[int] | None = None) -> np.ndarray:
    """Per step after the first, how long before the previous step's GPU end the host
    started it (0 when the GPU was already idle, waiting for the host); of its own thread's
    previous step where ``threads`` gives each step's thread (:func:`critical_path_ns`)."""
    h, g = _ns(host_start), _ns(gpu_end)
    previous = _previous_ends(g, threads)[1:]
    return np.where(previous > h[1:], previous - h[1:], 0)  # a thread's first step has none (the int64 minimum)


def in_flight(host_start: np.ndarray | list[int], end: np.ndarray | list[int]) -> np.ndarray:
    """Per step, how many steps were under way while it ran, itself included, on average over
    its span: 1 for a loop's steps; more where several threads run them at once (a thread
    pool's requests). Over the span, not at its start: requests arriving at random on a
    4-thread executor found 2 under way as each began, and ran beside 3 or more for most of
    their time."""
    h, g = _ns(host_start), _ns(end)
    if not h.size:
        return np.zeros(0)
    t = np.concatenate([h, g])
    d = np.concatenate([np.ones(h.size, dtype=np.int64), -np.ones(g.size, dtype=np.int64)])
    o = np.lexsort((d, t))  # by time; at one time an end before a start
    t, d = t[o], d[o]
    under_way = np.cumsum(d)  # after each event
    area = np.concatenate([[0.0], np.cumsum(under_way[:-1] * np.diff(t).astype(np.float64))])

    def integral(x: np.ndarray) -> np.ndarray:
        i = np.searchsorted(t, x, side="right") - 1
        return area[i] + under_way[i] * (x - t[i]).astype(np.float64)

    span = (g - h).astype(np.float64)
    return np.where(span > 0, (integral(g) - integral(h)) / np.where(span > 0, span, 1.0), 1.0)


def _previous_ends(g: np.ndarray, threads: np.ndarray | list[int] | None) -> np.ndarray:
    """Per step, the end of the step before it (the int64 minimum for the first): of its own
    thread's where ``threads`` gives each step's thread (steps that run on several at once)."""
    if threads is None or len(threads) < g.size:
        return np.concatenate(([np.iinfo(np.int64).min], g[:-1]))
    t = np.asarray(threads[: g.size], dtype=np.int64)
    previous = np.full(g.size, np.iinfo(np.int64).min, dtype=np.int64)
    for thread in np.unique(t):
        rows = np.flatnonzero(t == thread)
        previous[rows[1:]] = g[rows[:-1]]
    return previous


def iteration_ends_ns(
    gpu_start: np.ndarray | list[int], gpu_end: np.ndarray | list[int], stop_at_pauses: bool = True,
    joined: list[bool] | None = None, idle_from: np.ndarray | None = None, run_delay: list[int] | None = None,
    run_delay_read: list[bool] | None = None,
) -> np.ndarray:
    """GPU ends of steps that are calls inside a loop, extended to the whole iteration.

    When the step is found automatically as a repeating call (a model's ``forward`` in
    Hugging Face ``generate``), the loop also does work between calls (sampling, stopping
    checks, launching small kernels) that belongs to producing the step's token. The GPU
    start of call ``k+1`` is a CUDA event recorded when the host began that call: it
    completes when everything issued before it has run, or right away when the GPU was
    idle waiting for the host. So ``max(g[k], gpu_start[k+1])`` is the end of iteration
    ``k``: its own GPU work and the host work after it. The last call keeps its own end,
    and so does a call followed by a pause (:func:`pauses`, against the median iteration:
    the program did something else before the next call, e.g. the eager prefill before a
    compiled decode loop's next generation): that time belongs to no iteration, and the
    cadence leaves it out. ``stop_at_pauses=False`` where the call is only the head of the
    loop's body (torch's DataLoader fetch): the time to the next fetch is the iteration
    itself, however uneven (a loaded CPU made some 3x the median). ``joined[k]``: the time
    between call ``k`` and the next holds known work of the iteration (an assisted
    generate's draft forwards between two verifying calls): never a pause. ``idle_from[k]``
    (host ns, -1 for none): when the call's thread began waiting for another thread before
    the next call (:func:`waits_between`: a server's worker blocked on its request queue):
    the iteration ends there at the latest, its own GPU work aside — the wait is no work of
    the program's. ``run_delay[k]`` (ns, the light pass's: the thread's time waiting for a
    CPU at each call's start, :class:`perfdoctor.record.bootstrap.clock.RunQueue`): what
    other processes took between call ``k`` and the next is no pause of the program's, so
    the pause rule sees the time after a call without it (the whole iteration's wait: a
    pause is long however it was interrupted).
    """
    g = _ns(gpu_end).copy()
    if g.size > 1 and gpu_start is not None:
        # A CPU-only run records no CUDA event: its GPU starts are None, and a call's own
        # end is then all that is known.
        known = np.array([v is not None for v in gpu_start], dtype=bool)
        begun = np.array([int(v) if v is not None else 0 for v in gpu_start], dtype=np.int64)
        nxt, ends = begun[1:], g[:-1]
        if idle_from is not None:
            idle = _ns(idle_from)[: nxt.size]
            nxt = np.where(idle >= 0, np.minimum(nxt, idle), nxt)
        after = np.where(known[1:], np.maximum(nxt - ends, 0), 0)  # host work to the next call
        paused = np.zeros(after.size, dtype=bool)
        if stop_at_pauses:
            calls = np.where(known[:-1], ends - begun[:-1], 0)  # each call's own span
            less = after if run_delay is None else np.maximum(after - cpu_waits_after(run_delay, run_delay_read), 0)
            paused = pauses(less, calls + after, usual_of=after)
            if joined is not None:
                paused &= ~np.asarray(joined, dtype=bool)
        g[:-1] = np.where(known[1:] & ~paused, np.maximum(ends, nxt), ends)
    return g


def cpu_waits_after(run_delay: list[int] | np.ndarray, read: list[bool] | np.ndarray | None = None) -> np.ndarray:
    """Per call but the last, how long its thread may have waited for a CPU between its start
    and the next call's (``run_delay``: the thread's run-queue delay at each start). The light
    pass reads the counter at a start 5 ms after its last read or after a gap of 1 ms
    (:class:`perfdoctor.record.bootstrap.clock.RunQueue`) and interpolates the starts between
    in time (``read``: which were read), so a neighbour's 4 ms in the gap after a 1 ms call
    was spread over the five calls since the last read: the gap kept 2.2-3.2 ms of it, and 11
    of litgpt's 1 ms tokens on a shared CPU read as pauses of the program's. Where ``read``
    says, a gap before a read start (every gap of 1 ms or more) may hold all the delay since
    the last read at or before its call; the others keep their share in time."""
    d = _ns(run_delay)
    step = np.clip(np.diff(d), 0, None)
    if read is None or d.size < 2:
        return step
    r = np.asarray(read, dtype=bool)[: d.size]
    last = np.maximum.accumulate(np.where(r, np.arange(r.size), 0))  # the last read at or before each start
    return np.where(r[1:], np.clip(d[1:] - d[last[:-1]], 0, None), step)


def loop_iterations(
    calls: dict, ends_of_passes: dict | None = None, training_marks: np.ndarray | list[int] | None = None,
    work_ns: np.ndarray | list[int] | None = None,
) -> dict:
    """The loop iterations a torch loop range marks (the data loader's ``__next__``,
    ``Optimizer.step``), as a series: each from one range's start to the next's
    (:func:`iteration_ends_ns`, no pauses: the rest of the body is the iteration, however
    uneven), the last one left out (no next start ends it).

    ``ends_of_passes``: the data loader fetches that end a pass (a series), each of which
    ends the iteration before it and begins none. For the fetch's own range, the fetches
    that raised StopIteration (the light pass's ``exhausted``): without them the last batch
    of an epoch ran to the next epoch's first fetch, through everything between (an
    evaluation loop: one step of 27 ms among 4 ms ones). (The optimizer's step, which
    closes a group of accumulated batches, is timed over its group: :func:`step_groups`.)
    An end of pass whose iteration holds the loop's work (a training mark, else the work
    below) begins that iteration after all: a prefetcher (Apex's ``data_prefetcher``)
    fetches batch k+1 before training batch k, so the pass's last batch trains after the
    fetch that found the loader exhausted, up to the next fetch (the prefetcher's next
    ``next()`` raises again): text_train.py --prefetcher read 30 steps for its 32 batches.

    ``training_marks``: host starts of the optimizer's steps (else its ``zero_grad``) in a run
    that trains: only the iterations holding one are kept, so an evaluation loop's batches
    (the same range name, another loader: PyTorch's ImageNet example validates after each
    epoch) are not training steps. Kept whole when fewer than two iterations hold one.

    ``work_ns``: without training marks (an evaluation loop), the host starts of the loop's
    work (the light pass's depth-0 module calls): an iteration that holds none after its
    fetch's end (``calls["host_end_ns"]``) begins none (:func:`holds_work`): its fetch was
    the one a ``break`` left, its batch unused (a trace's rule, on its ops).

    With ``ends_of_passes`` given, or training marks that leave out fetches between two
    training batches (another loop's: an evaluation pass), the series also says per
    iteration kept whether a pass ended between the previous one kept and it
    (``pass_ended``; the first: False): what lies there (an evaluation pass, the epoch's
    end) is no step's, a pause of the rate whatever its length (:func:`cadence`)."""
    n = len(calls["gpu_end_ns"])
    ends_of_passes = ends_of_passes or {"host_start_ns": [], "gpu_start_ns": None, "gpu_end_ns": []}
    m = len(ends_of_passes["gpu_end_ns"])
    host = np.concatenate((_ns(calls["host_start_ns"][:n]), _ns(ends_of_passes["host_start_ns"][:m])))
    starts = np.concatenate(tuple(
        _ns(s["gpu_start_ns"][:k]) if s.get("gpu_start_ns") is not None else _ns(s["host_start_ns"][:k])
        for s, k in ((calls, n), (ends_of_passes, m))
    ))
    gpu_end = np.concatenate((_ns(calls["gpu_end_ns"]), _ns(ends_of_passes["gpu_end_ns"])))
    order = np.argsort(host, kind="stable")
    ends = iteration_ends_ns(starts[order], gpu_end[order], stop_at_pauses=False)
    mine = order < n
    ended = ~mine
    begins = np.ones(order.size, dtype=bool)
    begins[-1:] = False  # the last range has no next start
    keep = mine & begins
    if training_marks is not None and len(training_marks):
        bounds = np.append(host[order][1:], np.iinfo(np.int64).max)
        marks = np.sort(_ns(training_marks))
        holds = np.searchsorted(marks, host[order], side="left") < np.searchsorted(marks, bounds, side="left")
        if np.count_nonzero(keep & holds) >= 2:
            keep = begins & holds  # an end of pass too, when a prefetcher's last batch trains after it
            # fetches that train nothing between two that do are another loop's: an
            # evaluation pass, ended by its length, not StopIteration (Lightning's loops stop
            # at len(loader) and never exhaust it)
            ended = ended | (mine & begins & ~holds)
    elif work_ns is not None and calls.get("host_end_ns") is not None:
        fetched = np.concatenate((_ns(calls["host_end_ns"][:n]), host[n:]))[order]  # an end of pass fetched nothing
        held = holds_work(fetched, np.append(host[order][1:], np.iinfo(np.int64).max), work_ns)
        if np.count_nonzero(keep & held) >= 2:
            keep = begins & held
    index = order[keep]
    gpu_start = calls.get("gpu_start_ns")
    if gpu_start is not None:
        gpu_start = list(gpu_start[:n]) + list(ends_of_passes.get("gpu_start_ns") or [None] * m)[:m]
    out = {
        "host_start_ns": host[index].tolist(),
        "gpu_start_ns": [gpu_start[i] for i in index] if gpu_start is not None else None,
        "gpu_end_ns": ends[keep].tolist(),
    }
    if ended.any():
        at = np.flatnonzero(keep)
        # from the previous step's own fetch on: an end of pass that began a step ended its pass too
        out["pass_ended"] = _ended_between(ended, at, at).tolist()
    return out


def training_ends(
    last_ns: np.ndarray | list[int], fetch_ns: np.ndarray | list[int], raised_ns: np.ndarray | list[int], marks: dict,
) -> dict:
    """Ends of training passes over a data loader that no fetch tells, each where its last
    batch's training ended. A loop that stops at the loader's length (Lightning's) never calls
    its iterator again to raise StopIteration, so the iteration of each pass's last batch ran
    on through the epoch's end (a checkpoint's save: 8.7 ms among 2.8 ms steps in
    ``lightning_fit.py``) to the next epoch's first fetch; and through an evaluation loop's
    set-up to its first fetch.

    ``last_ns``: host starts of the fetches of those last batches (one that yielded its
    pass's last batch, one that an evaluation loop's fetches follow); ``fetch_ns``: every
    fetch's; ``raised_ns``: the fetches that raised StopIteration — a pass whose iterator
    raised before the next fetch has its end already (a plain ``for`` loop, a prefetcher's).
    ``marks``: the training marks as a series (the optimizer's ranges and the backward
    calls: ``host_start_ns``, ``host_end_ns``, ``gpu_end_ns``). For each other last batch
    whose iteration holds a mark: an end of pass where the latest of them ended, as a fetch
    that raised right after it would be (a series: ``host_start_ns`` its host end,
    ``gpu_start_ns`` and ``gpu_end_ns`` its GPU end; ``last_ns``, the fetch whose iteration it
    ends). Without a mark (an evaluation loop) the pass's end stays unknown."""
    fetches, raised = np.sort(_ns(fetch_ns)), np.sort(_ns(raised_ns))
    start, end, gpu = _ns(marks.get("host_start_ns") or []), _ns(marks.get("host_end_ns") or []), marks.get("gpu_end_ns") or []
    host_at, gpu_at, of = [], [], []
    for last in np.unique(_ns(last_ns)):
        i = np.searchsorted(fetches, last, side="right")
        nxt = fetches[i] if i < fetches.size else np.iinfo(np.int64).max
        if np.searchsorted(raised, last, side="right") < np.searchsorted(raised, nxt, side="left"):
            continue  # its iterator raised StopIteration: that fetch ends the pass
        inside = np.flatnonzero((start >= last) & (start < nxt))
        if inside.size:
            host_at.append(int(end[inside].max()))
            gpu_at.append(max(int(gpu[k]) for k in inside))
            of.append(int(last))
    return {"host_start_ns": host_at, "gpu_start_ns": gpu_at, "gpu_end_ns": gpu_at, "last_ns": of}


def last_fetch_trained(fetch_ns: np.ndarray | list[int], mark_ns: np.ndarray | list[int]) -> int | None:
    """The run's last fetch (``fetch_ns``: every fetch's host start, those that raised
    StopIteration too), whose iteration no fetch ends, when training marks (``mark_ns``,
    host starts, as :func:`training_ends`'s) follow it, no more of them than one iteration
    holds (the most between two fetches; a training with no loader after the loop's is no
    iteration of it); else None. Its end is then :func:`training_ends`'s. A loader that
    fetches a batch ahead (accelerate's ``DataLoaderShard``, under HF's Trainer) trains its
    last batch after the fetch that raised, and with no evaluation after the last epoch
    (the Trainer's default) no fetch follows: a Trainer fine-tuning read 119 steps for its
    120. So does a loop left by ``break`` after its last batch's training."""
    fetches, starts = np.sort(_ns(fetch_ns)), np.sort(_ns(mark_ns))
    if not fetches.size:
        return None
    after = starts.size - np.searchsorted(starts, fetches[-1])
    between = np.diff(np.searchsorted(starts, fetches))
    return int(fetches[-1]) if 0 < after <= (between.max() if between.size else 1) else None


def optimizer_iterations(calls: dict, others: dict, work_ns: np.ndarray | list[int] | None = None, closing: bool = False) -> dict:
    """The training iterations of a loop with no data loader (``for step in range(n)``, a
    batch made on the device), marked by the optimizer's ``zero_grad`` or ``step``
    (``calls``, the one chosen): :func:`loop_iterations` (from one mark to the next), and
    the iteration each end of the series leaves out, one per optimizer step.

    ``others``: the optimizer's other marks (``step`` when ``zero_grad`` is chosen; none
    when only ``step`` is seen, ``model.zero_grad()`` being no optimizer range), a series;
    ``work_ns``: host starts of the loop's work (the light pass's depth-0 module calls).
    Between two marks lie ``k`` of the other marks and ``w`` calls of work (medians over
    the series: an iteration's make-up). Before the first mark, ``k`` other marks (the
    optimizer's step before a ``zero_grad`` that ends the iteration, as ``amp_train.py``
    writes it) and ``w`` calls of work are an iteration too, the first: from the earliest
    of its last ``w`` calls and ``k`` marks to the first mark (before, 23 steps for 24
    iterations). After the last mark, ``k`` other marks (a ``zero_grad`` before the optimizer's
    step: at the iteration's start, the common shape, or after the forward) are the last
    iteration, to the end of its optimizer step (the host work after it is unknown); where
    the first mark has fewer than ``k`` before it, inside its own iteration (each new
    optimizer's first step, a zero_grad before it: Reptile), that many fewer. With
    ``k`` = 0 (only the optimizer's step, which always closes the iteration) only the first
    is added. Without work known, only the last: nothing says where the first began, and the
    last one's optimizer step ends it whatever ran before (higher's MAML loop makes a new
    module class per task, which the narrowed light pass does not note: 199 steps for 200).

    ``closing``: the marks are an optimizer's steps, which end their iterations
    (``rangenames.closes_iteration``). Before the first one there may be fewer than ``k``
    other marks: a ``zero_grad`` after each step (or a second one at the top of the loop) is
    the iteration before's, and SAM zeroes after its first ascent step and after the
    update. The first iteration is then its ``w`` calls of work, from the mark just before
    them (a ``zero_grad`` at the loop's top) if one is, and the last mark ends the last
    iteration (before: 30 steps for 30 iterations, the first one's forward in none and the
    last the trailing zero_grad alone).

    When most of the other marks run inside the marks' own ranges (``optimizer.step(closure)``,
    the closure calling ``zero_grad``: LBFGS, Lightning), the step holds the iteration's
    forward and backward: each mark is an iteration, the last one to its own end (before,
    19 steps for 20 by a zero_grad's 1 per closure; work is not needed: a trace's work
    leaves out what runs inside the optimizer's ranges). Several marks per iteration
    (:func:`mark_groups`): one iteration per group, with ``mark``, each group's first mark's
    position in ``calls``, and ``group``, the marks per iteration."""
    out = loop_iterations(calls)
    n = len(calls["gpu_end_ns"])
    m = len(others["gpu_end_ns"]) if others else 0
    h = _ns(calls["host_start_ns"][:n])
    order = np.argsort(_ns(others["host_start_ns"][:m]), kind="stable") if m else np.zeros(0, dtype=np.int64)
    oh = _ns(others["host_start_ns"][:m])[order] if m else np.zeros(0, dtype=np.int64)
    oe = _ns(others["gpu_end_ns"][:m])[order] if m else np.zeros(0, dtype=np.int64)
    gpu_start = calls.get("gpu_start_ns")
    rows = {key: list(out[key]) if out.get(key) is not None else None for key in ("host_start_ns", "gpu_start_ns", "gpu_end_ns")}

    def with_last(end_ns: int) -> dict:  # the iteration the last mark begins, to ``end_ns``
        rows["host_start_ns"].append(int(h[-1]))
        if rows["gpu_start_ns"] is not None:
            rows["gpu_start_ns"].append(gpu_start[n - 1])
        rows["gpu_end_ns"].append(end_ns)
        return rows

    # on the host's clock: a GPU end reaches past the next iteration's host start when the host runs ahead
    if n >= 2 and m and np.mean(within(oh, h, _ns((calls.get("host_end_ns") or calls["gpu_end_ns"])[:n]))) > 0.5:
        return with_last(int(_ns(calls["gpu_end_ns"])[-1]))
    work = np.sort(_ns(work_ns if work_ns is not None else []))
    if n < 2:
        return out
    begins = mark_groups(h, work) if work.size else None
    if begins is not None:
        return _group_iterations(h, _ns(calls["gpu_end_ns"][:n]), oh, oe, work, begins, gpu_start is not None)
    k = int(np.median(np.diff(np.searchsorted(oh, h))))
    w = int(np.median(np.diff(np.searchsorted(work, h)))) if work.size else 0
    o0, w0 = int(np.searchsorted(oh, h[0])), int(np.searchsorted(work, h[0]))
    if w >= 1 and w0 >= w and (o0 >= k or closing):
        ahead = o0 < k  # an optimizer step's first iteration, with fewer marks before it
        if ahead:  # from its work, or the mark just before it (a zero_grad at the loop's top)
            j = int(np.searchsorted(oh, work[w0 - w]))
            lead = j > 0 and (w0 == w or oh[j - 1] > work[w0 - w - 1])
            begin = int(oh[j - 1] if lead else work[w0 - w])
        else:
            begin = int(min(work[w0 - w], oh[o0 - k] if k else work[w0 - w]))
        first = gpu_start[0] if gpu_start is not None and gpu_start[0] is not None else int(h[0])
        rows["host_start_ns"].insert(0, begin)
        if rows["gpu_start_ns"] is not None:
            rows["gpu_start_ns"].insert(0, begin)
        rows["gpu_end_ns"].insert(0, int(max(first, oe[o0 - 1] if o0 else first)))
        if ahead:
            return rows
    # after the last mark, its iteration's other marks: k, less those an iteration has before
    # its mark where the first mark falls inside its iteration after fewer than k (a lead-in:
    # Reptile's zero_grad before each new optimizer's first step, 1 of 9)
    o1 = int(np.searchsorted(oh, h[-1]))
    after = k - (o0 if o0 < k else 0)
    if k and after and m - o1 >= after:
        return with_last(int(max(oe[o1 + after - 1], _ns(calls["gpu_end_ns"])[-1])))
    return rows


# A gap between two optimizer marks holding this many times the usual gap's work calls (its
# first quartile, at least 1) holds work of the loop outside the optimizer's: ppo_train.py's
# rollout, 35 module calls against 2 per minibatch update; a plain loop's gaps hold alike
OUTER_CALLS = 4.0
# The share of the loop's work calls such gaps must hold for the optimizer's marks to be an
# inner loop of the iteration: its rollout runs the model far more often than its updates
# (ppo_train.py's test config 85 %; CleanRL's defaults, 128 steps against 16 updates, 89 %),
# a periodic evaluation less than the training between two (nanoGPT's shakespeare_char
# config, 400 forwards every 250 iterations of one: 62 %, its sum)
OUTER_SHARE = 0.75
# The share of the calls between groups of marks that the gaps parting them again must hold:
# the rollout against the advantages recomputed before each epoch (torchrl's PPO tutorial: 87
# and 94 % in two traces; ppo_train.py --advantages per-epoch, 3 epochs: 71 %; 10 epochs would
# read less). Also an evaluation 3x the rollout's work every 3rd iteration (67 %) would join 3
# iterations: evaluations that long are rare (SB3's EvalCallback: about one rollout's steps)
COARSE_SHARE = 0.5


def mark_groups(mark_ns: np.ndarray | list[int], work_ns: np.ndarray | list[int]) -> np.ndarray | None:
    """Which optimizer marks (host starts, in order) begin a loop iteration when each
    iteration holds several, or None (one per mark, as before).

    CleanRL's PPO steps one optimizer per minibatch, epochs x minibatches times per
    iteration, after a rollout under ``no_grad`` (the model called once per environment
    step): every k-th gap between two marks holds the rollout, many times the work calls
    (``work_ns``: the light pass's module calls, a trace's ops) of the others. Read one step
    per mark, ppo_train.py gave 24 steps for its 6 iterations (:func:`_outer_begins` says
    how the gaps part them). The groups are grouped again while their own gaps part them so:
    torchrl's PPO tutorial computes GAE before each epoch, a gap of 4.5x the minibatches' ops
    in a trace, and the rollout's 20x more again; the epochs alone read 4 steps per
    iteration (39 for 10). Not by time: those gaps held 52-63 % of it in ppo_train.py on this
    loaded box, the updates slowed more than the rollout, while their calls are the
    program's own, the same every run. Gradient accumulation and a plain loop have gaps
    alike (k = 1)."""
    h, w = _ns(mark_ns), np.sort(_ns(work_ns))
    calls = np.diff(np.searchsorted(w, h))
    begins = _outer_begins(calls, OUTER_SHARE)
    while begins is not None and (coarse := _outer_begins(calls[begins[1:] - 1], COARSE_SHARE)) is not None:
        begins = begins[coarse]
    return begins


def _outer_begins(calls: np.ndarray, share: float) -> np.ndarray | None:
    """Where groups begin (positions among ``calls.size + 1`` marks) when the gaps holding
    ``OUTER_CALLS`` times the usual work calls (``calls``: each gap's) or more part the marks
    into groups of one size k >= 2 (the first and the last group no larger: a record may cut
    them) and hold more than ``share`` of the calls in all gaps; else None."""
    if calls.size < 2:
        return None
    outer = calls >= OUTER_CALLS * max(float(np.quantile(calls, 0.25)), 1.0)
    begins = np.r_[0, np.flatnonzero(outer) + 1]
    sizes = np.diff(np.r_[begins, calls.size + 1])
    inner = sizes[1:-1]
    if inner.size == 0 or inner.min() < 2 or np.ptp(inner) or max(sizes[0], sizes[-1]) > inner[0]:
        return None
    return begins if int(calls[outer].sum()) > share * int(calls.sum()) else None


def _groups_last_marks(h: np.ndarray, oh: np.ndarray, work: np.ndarray, begins: np.ndarray) -> np.ndarray:
    """Host start of each group's last mark but the last group's (:func:`_group_iterations`'
    arguments): its last chosen mark, or after it an other mark of the optimizer's that sits
    as the other marks sit inside a group, as many work calls after the chosen mark before it
    (``zero_grad`` chosen: its ``step`` after the forward). The mark just before the next
    group's first chosen one was taken: where the optimizer steps before ``zero_grad``
    (torchrl's PPO tutorial), that is the next group's own first step, after the rollout, and
    each iteration began one minibatch into its update, the rollout in the one before (the
    last: 208 ms against the program's 1,000)."""
    prev = h[begins[1:] - 1]
    o = np.sort(oh)
    if not o.size:
        return prev
    at = np.searchsorted(h, o, side="right") - 1  # the chosen mark before each other mark
    after = np.searchsorted(work, o) - np.searchsorted(work, h[np.maximum(at, 0)])  # work calls from it
    group = np.searchsorted(begins, at, side="right") - 1
    inside = (at >= 0) & (at + 1 < h.size) & (np.searchsorted(begins, at + 1, side="right") - 1 == group)
    if not inside.any():
        return prev
    kin = o[(at >= 0) & ~inside & (after <= int(np.median(after[inside])))]  # sitting as inside a group
    if not kin.size:
        return prev
    j = np.searchsorted(kin, h[begins[1:]], side="left") - 1  # the last of them before the next group
    near = kin[np.maximum(j, 0)]
    return np.where((j >= 0) & (near > prev), near, prev)


def _group_iterations(h: np.ndarray, e: np.ndarray, oh: np.ndarray, oe: np.ndarray, work: np.ndarray, begins: np.ndarray,
                      with_gpu_start: bool) -> dict:
    """The iterations of :func:`mark_groups`' groups of marks (``h``, ``e``: the chosen marks'
    host starts and GPU ends; ``oh``, ``oe``: the optimizer's other marks'; ``work``: the
    loop's work, sorted). Each begins at the first work call after the previous group's last
    mark (the rollout's first forward: the program's iteration begins there) and ends where
    the next begins; the first at as many calls before its first mark as the others hold
    there; the last at its last mark's end (the host work after it is unknown). A group the
    record cuts (a trace's window: the first without those calls before it, the last with
    fewer marks than the others) is left out. ``mark``: each iteration's first mark's position
    in ``h``; ``group``: the marks of a whole group (the step's how says them: ppo_train.py's
    read "24x", its optimizer's steps, for its 6 iterations of 4)."""
    marks_h, marks_e = np.r_[h, oh], np.r_[e, oe]
    order = np.argsort(marks_h, kind="stable")
    marks_h, marks_e = marks_h[order], marks_e[order]
    firsts = h[begins]
    before = np.searchsorted(marks_h, _groups_last_marks(h, oh, work, begins), side="right") - 1  # each group's previous one's last mark
    starts = np.minimum(work[np.minimum(np.searchsorted(work, marks_h[before], side="right"), work.size - 1)], firsts[1:])
    lead = np.searchsorted(work, firsts[1:]) - np.searchsorted(work, starts)  # calls from a group's start to its first mark
    w0, need = int(np.searchsorted(work, firsts[0])), int(np.median(lead))
    starts = np.r_[work[w0 - need] if need <= w0 else firsts[0], starts]
    last = np.r_[before, marks_h.size - 1]  # each group's last mark
    ends = np.maximum(np.maximum.accumulate(marks_e)[last], np.r_[starts[1:], 0])
    sizes = np.diff(np.r_[begins, h.size])
    whole = np.r_[need <= w0, np.ones(begins.size - 2, dtype=bool), sizes[-1] == sizes[1]]
    return {"host_start_ns": starts[whole].tolist(), "gpu_start_ns": starts[whole].tolist() if with_gpu_start else None,
            "gpu_end_ns": ends[whole].tolist(), "mark": begins[whole].tolist(), "group": int(sizes[1])}


# An evaluation before a training step's work comes at most once in this many steps (nanoGPT's
# eval_interval, an epoch's validation: one in 10 and rarer); more often, what opens those
# steps with grad disabled is the loop's own work on a schedule
EVALUATIONS_EVERY = 4


def evaluation_passes(host_start: np.ndarray | list[int], work_ns: np.ndarray | list[int],
                      work_grad: np.ndarray | list[bool]) -> tuple[np.ndarray, np.ndarray]:
    """Per step of a loop marked by its optimizer (host starts, in order), where it begins once
    an evaluation before its training is left out, and whether one was (``pass_ended``).
    ``work_ns``, ``work_grad``: the loop's model calls and their grad modes. nanoGPT's
    train.py runs ``estimate_loss()`` under ``no_grad`` at the top of every
    ``eval_interval``-th iteration, with no data loader to say a pass ended: that step held
    the evaluation, 30.2 ms for the program's 19.9. A step that opens with more calls with
    grad disabled than a training step usually does (the median, before the first call with
    grad enabled: kornia's ``with torch.no_grad(): x = aug(x)``, a distillation's teacher before
    the student, SAC's actor choosing the action are the iteration's own) begins at the first
    of its usual ones, or with none usual, at its first call with grad enabled. Before, any
    call with grad disabled before one with grad enabled made the step an evaluation's, and
    with one in every step none was: kornia's validation passes stayed inside two steps of 85
    and 167 ms for the program's 14 and 37. Only when such steps are at most one in
    :data:`EVALUATIONS_EVERY`: more in every other iteration is the iteration's own (TD3's
    delayed actor update, every 2nd step, opens its step with a call with grad enabled, the
    others with the action's and the targets' calls, grad disabled)."""
    h, w = _ns(host_start), _ns(work_ns)
    g = np.asarray(work_grad, dtype=bool)
    ended = np.zeros(h.size, dtype=bool)
    if h.size < 2 or w.size == 0 or g.all():
        return h, ended
    order = np.argsort(w, kind="stable")
    w, g = w[order], g[order]
    bounds = np.searchsorted(w, np.r_[h, np.iinfo(np.int64).max])
    lead = np.zeros(h.size, dtype=np.int64)  # per step, its calls with grad disabled before its first with grad enabled
    trains = np.zeros(h.size, dtype=bool)  # it has one
    for k in range(h.size):
        on = np.flatnonzero(g[bounds[k]:bounds[k + 1]])
        if on.size:
            lead[k], trains[k] = on[0], True
    if not trains.any():
        return h, ended
    usual = int(np.median(lead[trains]))
    begins = h.copy()
    for k in np.flatnonzero(trains & (lead > usual)):  # an evaluation's calls before the training's
        begins[k], ended[k] = w[bounds[k] + lead[k] - usual], True
    if EVALUATIONS_EVERY * int(ended.sum()) > int(trains.sum()):
        return h, np.zeros(h.size, dtype=bool)
    return begins, ended


# Forward work beyond the usual iteration's, as a share of it, that holds an evaluation (half
# a forward and more); less is the iteration's own (a log line's .item() every n steps)
EVALUATION_SHARE = 0.5


def evaluation_starts(starts: np.ndarray | list[int], ends: np.ndarray | list[int], work_ns: np.ndarray | list[int],
                      backward_ns: np.ndarray | list[int]) -> np.ndarray:
    """A trace's :func:`evaluation_passes`: it has no grad modes, but it has the backward.
    Per training iteration (host ``starts`` and ``ends``), the loop's forward work before the
    first op of its backward (``work_ns``: a trace's ops and launches on the loop's thread,
    none of the backward's; ``backward_ns``: the backward's ops on any thread: a GPU's run on
    autograd's own, :func:`perfdoctor.analysis.steps.loop_work`). One holding
    ``EVALUATION_SHARE`` of the usual (the median) or more beyond it holds an evaluation
    before its training: it begins the usual count before its backward. Only when such
    iterations are fewer than half. nanoGPT's train.py traced whole on the CPU: the
    iterations holding ``estimate_loss()`` read 54.6 and 51.7 ms for the program's 27.6 and 24.0."""
    s, e = _ns(starts).copy(), _ns(ends)
    w, bwd = np.sort(_ns(work_ns)), np.sort(_ns(backward_ns))
    if not bwd.size:
        return s
    first = bwd[np.minimum(np.searchsorted(bwd, s), bwd.size - 1)]  # each iteration's first backward op, if inside it
    known = (first >= s) & (first <= e)
    lo = np.searchsorted(w, s)
    before = np.searchsorted(w, first) - lo
    if int(known.sum()) < 3:
        return s
    usual = int(np.median(before[known]))
    evaluating = known & (before >= usual + max(1.0, EVALUATION_SHARE * usual))
    if 2 * int(evaluating.sum()) >= int(known.sum()):
        return s
    s[evaluating] = w[lo[evaluating] + before[evaluating] - usual]
    return s


def optimizer_loop(calls: dict, others: dict, work_ns: np.ndarray | list[int] | None, zero_grad: bool, closing: bool = False,
                   work_end_ns: np.ndarray | list[int] | None = None) -> dict:
    """The training iterations of a loop with no data loader marked by the optimizer's
    ``calls`` (``zero_grad`` ones when ``zero_grad``; steps that end their iterations when
    ``closing``): :func:`closed_by_steps` where the marks
    fall inside the iterations, else :func:`optimizer_iterations`. ``mark``, when present:
    each iteration's mark's position in ``calls``; ``group``, when several mark one
    iteration (:func:`mark_groups`): how many. ``work_end_ns``: the work's host ends, where
    known (a trace's ops), in ``work_ns``'s order."""
    closed = closed_by_steps(calls, others, work_ns if work_ns is not None else [], work_end_ns) if zero_grad else None
    return closed if closed is not None else optimizer_iterations(calls, others, work_ns, closing)


def closed_by_steps(calls: dict, others: dict, work_ns: np.ndarray | list[int], work_end_ns: np.ndarray | list[int] | None = None) -> dict | None:
    """The training iterations of a loop with no data loader whose ``zero_grad`` marks
    (``calls``) fall inside them, where :func:`optimizer_iterations` has them begin: the
    loop's work (``work_ns``, host starts) runs between an optimizer step's end (``others``)
    and the next mark, in the median iteration. The old
    PyTorch quickstart's loop (forward, loss, ``zero_grad``, backward, step): from one mark
    to the next, step k held iteration k's backward and step and iteration k+1's forward,
    iteration 0's forward in none, and a slow forward read as the step before (prof_train.py
    export: 20.8 ms for an iteration of 12.6). Each iteration then runs from the previous
    optimizer step's host end (the stream reaching it: that step's GPU end) to the end of
    its own (the first from the earliest of the last as many calls of work before its mark
    as the median iteration holds there, after any gap among them longer than the median
    iteration; none when fewer), one per mark followed by a step
    before the next mark. A gap runs from the end of the work before it where
    ``work_end_ns`` gives the ends (a trace's ops, nested: the first ``aten::linear``'s
    ``aten::t`` ran 1 ms, and its next op began 1 ms after it), else from its start. Returns the series with ``mark``: each iteration's mark's position
    in ``calls``; None for another shape (a mark at the iteration's start or end, several
    marks per iteration: :func:`mark_groups`, CleanRL's PPO zeroing after each minibatch's
    forward, 24 steps read for its 6 iterations)."""
    n, m = len(calls["gpu_end_ns"]), len(others["gpu_end_ns"]) if others else 0
    order = np.argsort(_ns(work_ns), kind="stable")
    work = _ns(work_ns)[order]
    if n < 2 or m == 0 or work.size == 0:
        return None
    reach = np.maximum.accumulate(_ns(work_end_ns)[order]) if work_end_ns is not None else work  # busy until
    h = _ns(calls["host_start_ns"][:n])
    if mark_groups(h, work) is not None:
        return None
    order = np.argsort(_ns(others["host_start_ns"][:m]), kind="stable")
    oh = _ns(others["host_start_ns"][:m])[order]
    oend = _ns((others.get("host_end_ns") or others["gpu_end_ns"])[:m])[order]
    oe = _ns(others["gpu_end_ns"][:m])[order]
    # per mark: the optimizer step that closes its iteration (the first after it, before the next mark)
    q = np.searchsorted(oh, h, side="right")
    closes = (q < m) & (oh[np.minimum(q, m - 1)] < np.r_[h[1:], np.iinfo(np.int64).max])
    before = np.r_[False, closes[:-1]]  # a step between the mark before and this one
    prev = np.minimum(np.r_[0, q[:-1]], m - 1)  # where ``before``: that step
    after = np.searchsorted(work, h) - np.searchsorted(work, oend[prev], side="right")
    if not before.any() or int(np.median(after[before])) < 1:
        return None
    held = int(np.median(after[before]))
    at = np.searchsorted(work, h[0])
    since = np.searchsorted(work, oend[q[0] - 1], side="right") if q[0] > 0 else 0  # after a step before the first mark
    starts = np.where(before, oend[prev], 0)
    # after the last gap in that work longer than the median iteration (one step's end to
    # the next's): PARAM's linear benchmark ran 6 ops 1 s before its first iteration (that
    # step read 1022 ms); a first forward is slow, its stretch 5x the others' (prof_train.py)
    first = work[at - held:at] if at - since >= held else work[:0]
    idle = first[1:] - reach[at - held:at][:-1] if first.size else first  # from the work before's end
    cut = np.flatnonzero(idle > np.median(np.diff(oend))) + 1 if m > 1 else np.zeros(0, dtype=np.int64)
    if first.size:
        starts[0] = first[cut[-1] if cut.size else 0]
    keep = closes & np.r_[first.size > 0, before[1:]]
    cuda = calls.get("gpu_start_ns") is not None
    return {
        "host_start_ns": starts[keep].tolist(),
        "gpu_start_ns": np.where(before, oe[prev], starts)[keep].tolist() if cuda else None,
        "gpu_end_ns": oe[np.minimum(q, m - 1)][keep].tolist(),
        "mark": np.flatnonzero(keep).tolist(),
    }


def within(at_ns: np.ndarray | list[int], starts_ns: np.ndarray | list[int], ends_ns: np.ndarray | list[int]) -> np.ndarray:
    """Per time of ``at_ns``, whether it lies inside one of the ranges ``[starts_ns, ends_ns]``
    (in start order, one after another: one name's calls on one thread)."""
    at, starts, ends = _ns(at_ns), _ns(starts_ns), _ns(ends_ns)
    i = np.searchsorted(starts, at, side="right") - 1
    return (i >= 0) & (at <= ends[np.maximum(i, 0)]) if starts.size else np.zeros(at.size, dtype=bool)


def _ended_between(ended: np.ndarray, after: np.ndarray, begins: np.ndarray) -> np.ndarray:
    """Per step of a series, whether a pass ended between the previous step and it: whether
    one of the fetches (in host order; ``ended``: it ended a pass) from the previous step's
    ``after`` (the first fetch past it) to the step's ``begins`` (its first fetch),
    excluded, did. The first step: False (no step before it in the series)."""
    seen = np.r_[0, np.cumsum(np.asarray(ended, dtype=np.int64))]
    return np.r_[False, seen[begins[1:]] > seen[after[:-1]]] if begins.size else np.zeros(0, dtype=bool)


def evaluation_fetches(
    fetch_host_ns: np.ndarray | list[int], work_ns: np.ndarray | list[int], training_ns: np.ndarray | list[int]
) -> np.ndarray:
    """Per data loader fetch (in host order), whether its iteration, to the next fetch, holds
    the loop's work (``work_ns``: host starts) and none of it trains (``training_ns``: the
    light pass's model calls with grad enabled, a trace's work inside backward ops): an
    evaluation loop's batch under a training loader's range name, ended by its length, not
    StopIteration (Lightning's validation). Its fetches end a pass as that fetch does: they
    begin no training group and part two (:func:`step_groups`,
    :func:`training_batches`); counted in a group, with validation after every optimizer
    step every group held the validation's batches too (lightning_fit.py --accum 2
    --val-every 2: "one per 4 DataLoader batches", 9.0 ms per step for the program's 5.2).
    None when nothing trains."""
    f = _ns(fetch_host_ns)
    train = np.sort(_ns(training_ns))
    if f.size == 0 or train.size == 0:
        return np.zeros(f.size, dtype=bool)
    nxt = np.append(f[1:], np.iinfo(np.int64).max)
    work = np.sort(_ns(work_ns))
    held = np.searchsorted(work, nxt, side="left") > np.searchsorted(work, f, side="left")
    trains = np.searchsorted(train, nxt, side="left") > np.searchsorted(train, f, side="left")
    return held & ~trains


def holds_work(after_ns: np.ndarray | list[int], until_ns: np.ndarray | list[int], work_ns: np.ndarray | list[int]) -> np.ndarray:
    """Per loop iteration, whether any of ``work_ns`` (host starts of the loop's work: a
    trace's ops and launches on the iteration's thread, the light pass's module calls) lies
    after its fetch's end ``after_ns`` and by its end ``until_ns`` (its callers keep every
    iteration when fewer than two hold work: nothing then says which work is the loop's). An
    evaluation loop's iteration that holds none fetched no batch it used: the fetch that
    raised StopIteration, or the one a ``break`` at the top of the loop left (``if i == n:
    break``)."""
    w = np.sort(_ns(work_ns))
    return np.searchsorted(w, _ns(until_ns), side="right") > np.searchsorted(w, _ns(after_ns), side="right")


def step_groups(
    mark_host_ns: np.ndarray | list[int], fetch_host_ns: np.ndarray | list[int], pass_ends: np.ndarray | list[bool],
    trained_ns: np.ndarray | list[int] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The iterations of a loop range that closes one rather than opening it: the
    optimizer's step, one per group of accumulated batches (``mark_host_ns``), over every
    data loader fetch (``fetch_host_ns``; ``pass_ends``: which of them fetched no batch and
    ended a pass — the one that raised StopIteration, which the light pass is told; in a
    trace one whose iteration holds no work, :func:`perfdoctor.analysis.steps.pass_ends`). A
    step's iteration is its group: from the group's first fetch to the first fetch
    after the step (the next group's, or its pass's end). The group is the fetches since the
    previous step after the last end of pass among them (an evaluation loop's batches, the
    previous epoch's end, lie before it), at most as many as a group holds: the upper median
    count between two steps with no end of pass between them, or a size above it that enough
    of them hold (:func:`group_size`: Poisson-sampled batches split into 4 or 5). An epoch's
    remainder, stepped at its end, holds fewer; a sanity check's batches before the first
    group, which ended no pass, are left out by it. When every step ends a pass (one
    optimizer step per epoch), a group holds the upper median of the fetches after the last
    end. Before, each step ran to
    the next: an epoch's last through the validation (cut at its pass's end, it held only
    the optimizer's step), its first group in no step, and with one step per epoch every
    step held the validation and the next epoch (train_eval.py: 17.9 ms against the
    program's 14 ms, the last 0.26 ms).

    Returns, per step kept (one with a group before it and a fetch after it), its position
    in ``mark_host_ns``, the positions in ``fetch_host_ns`` of its group's first fetch and
    of the first fetch after it, and whether a pass ended between the previous step kept and
    its group, or fetches of no group lie there (another loop's that never exhausted its
    loader: Lightning's validation) (the first: False): the time there (a validation, the
    epoch's end) is no step's, a pause of the rate (:func:`cadence`'s ``pass_ended``). The first step of a
    record that begins inside its group (a trace's window) is left out: its group is not
    whole.

    An end of pass with a step after it and before the next fetch is a fetch of that step's
    group (:func:`loop_iterations`' rule for a prefetcher): accelerate's ``DataLoaderShard``
    fetches one batch ahead, so the epoch's last group (synced at the loader's end) trains
    and steps after the fetch that raised; cut there, that step's group was empty and it was
    left out (accel_train.py: 4 steps for its 6 optimizer steps). ``trained_ns``: the loop's
    backward calls, which train such a batch too where the step comes later: a group that
    spans two passes (an endless ``cycle()`` over the prefetching loader, denoising-diffusion-
    pytorch's Trainer: 13 batches per epoch in groups of 2) trains the pass's last batch,
    then fetches the next pass's first, before its step."""
    marks, fetches = _ns(mark_host_ns), _ns(fetch_host_ns)
    empty = np.zeros(0, dtype=np.int64)
    if marks.size == 0 or fetches.size == 0:
        return empty, empty, empty, np.zeros(0, dtype=bool)
    by_mark, order = np.argsort(marks, kind="stable"), np.argsort(fetches, kind="stable")
    f, raised = fetches[order], np.asarray(pass_ends, dtype=bool)[order]
    # an end of pass followed by a step before the next fetch trained that step's last batch
    # (a loader that fetches one ahead, accelerate's DataLoaderShard: the epoch's last step
    # comes after the fetch that raised): a fetch of its group, not its pass's end
    trained = raised & holds_work(f, np.append(f[1:], np.iinfo(np.int64).max) - 1, marks if trained_ns is None else np.r_[marks, _ns(trained_ns)])
    ended = raised & ~trained
    after = np.searchsorted(f, marks[by_mark], side="right")  # each step's next fetch
    prev = np.r_[0, after[:-1]]  # the first fetch after the previous step
    last_end = np.maximum.accumulate(np.where(ended, np.arange(f.size), -1))  # the last end of pass up to each fetch
    last = np.where(after > 0, last_end[np.maximum(after - 1, 0)], -1)
    lo = np.maximum(prev, last + 1)
    span = after - lo
    # no end of pass since the previous step, and not its pass's last group (a remainder:
    # closed by the pass's end, or trained after it)
    seen = np.r_[0, np.cumsum(trained)]
    clean = (last < prev) & ~np.r_[raised, False][after] & (seen[after] == seen[prev])
    clean[0] = False  # nothing before the first step says where its group began
    group = max(group_size(span[clean] if clean.any() else span, upper=True), 1)
    # a one-ahead loader's new pass fetches twice before its first batch trains: the group
    # after a trained end of pass (which it holds, or the group before ended with) holds one
    # fetch more than batches
    ahead = (seen[after] - seen[np.maximum(prev - 1, 0)] > 0).astype(np.int64)
    first = np.maximum(lo, after - group - ahead)
    keep = (after < f.size) & (after > first)
    keep[0] &= last[0] >= 0 or span[0] >= group
    # a fetch in no group between two steps is another loop's: a pass ended there too
    # (Lightning's validation stops at len(loader) and never exhausts it)
    edges = np.zeros(f.size + 1, dtype=np.int64)
    np.add.at(edges, first[keep], 1)
    np.add.at(edges, after[keep], -1)
    apart = ended | (np.cumsum(edges)[:-1] == 0)
    return by_mark[keep], order[first[keep]], order[after[keep]], _ended_between(apart, after[keep], first[keep])


def training_batches(fetch_host_ns: list[int], ends_of_passes_host_ns: list[int], training_marks: list[int],
                     trained_ns: list[int] | None = None) -> int:
    """How many of a data loader range's fetches trained, for the batches-per-optimizer-step
    ratio and the count the step's how says. A fetch whose iteration (to the next fetch, or
    to its pass's end: a fetch that raised StopIteration) holds a training mark closes a
    group: the fetches since the previous group or the pass's start. ``training_marks``: the
    optimizer's steps (else its zero_grad), so a group is the batches of one optimizer step.
    A loop fetches as many batches per step in every group (1, or its gradient
    accumulation), or one more in some (:func:`group_size`). A group that holds more also fetched batches that never
    trained, from an evaluation loop that did not exhaust its loader, so no end of pass
    parts them: Lightning's sanity check before the first step (with its validation at each
    epoch's end: 71 counted for 64 steps before). Fetches after a pass's last group (an
    evaluation loop after the training batches, a batch ``break`` left) close none. All of
    them when no iteration holds a mark.

    An end of pass followed by a mark before the next fetch or end closes that mark's group
    (:func:`loop_iterations`: a prefetcher trains the pass's last batch after the fetch that
    found the loader exhausted) but fetched no batch: its loader fetches one ahead, so in its
    pass each group's batches are the fetches before the one its mark follows. Counted as a
    fetch, it read one batch more per pass than trained, unless the median group happened to
    cut the pass's first (its batch fetched ahead): accel_train.py, accumulation 4 counted
    across epochs (groups 4, 4, 2 | 2, 4, 4), read 21 for its 20 micro-batches. ``trained_ns``:
    the loop's backward calls, which train that batch too where its group's mark comes after
    the next pass's first fetch (:func:`step_groups`)."""
    fetches, ends, marks = np.sort(_ns(fetch_host_ns)), np.sort(_ns(ends_of_passes_host_ns)), np.sort(_ns(training_marks))
    every = np.sort(np.r_[fetches, ends])
    nxt = np.append(every[1:], np.iinfo(np.int64).max)[np.searchsorted(every, ends, side="right") - 1]
    work = marks if trained_ns is None else np.sort(np.r_[marks, _ns(trained_ns)])
    trains = np.searchsorted(work, ends, side="left") < np.searchsorted(work, nxt, side="left")
    batch = np.r_[np.ones(fetches.size, dtype=bool), np.zeros(int(trains.sum()), dtype=bool)]  # a fetch, not an end
    fetches = np.r_[fetches, ends[trains]]
    order = np.argsort(fetches, kind="stable")
    fetches, batch, ends = fetches[order], batch[order], ends[~trains]
    passes = np.searchsorted(ends, fetches, side="left")  # each fetch's pass: ends before it
    bound = np.minimum(np.append(fetches[1:], np.iinfo(np.int64).max),
                       np.append(ends, np.iinfo(np.int64).max)[passes])  # its iteration's end
    closes = np.flatnonzero(np.searchsorted(marks, fetches, side="left") < np.searchsorted(marks, bound, side="left"))
    if closes.size == 0:
        return int(fetches.size)
    closes = closes - np.isin(passes[closes], passes[~batch])  # a pass fetched one ahead: each group's last batch is one fetch back
    begins = np.maximum(np.r_[0, closes[:-1] + 1], np.searchsorted(passes, passes[closes], side="left"))
    seen = np.r_[0, np.cumsum(batch)]
    size = seen[closes + 1] - seen[begins]  # the batches, not the ends of passes among them
    return int(np.minimum(size, group_size(size)).sum())


# A group size past the median counts where at least this share of the groups hold it (and
# each size between): Poisson-sampled logical batches split into physical ones hold 4 or 5
# (Opacus' BatchMemoryManager, 256 expected in 64s: 5 in 35-45 %); a validation's fetches
# between two steps (Lightning's, which never exhausts its loader) add several batches to a
# group every few steps, a size no step's own group has
GROUP_SIZE_SHARE = 0.1


def group_size(sizes: np.ndarray, upper: bool = False) -> int:
    """The most batches one optimizer step's group holds, from the groups' ``sizes``: their
    median (``upper``: the upper one), then each next size up while at least
    GROUP_SIZE_SHARE of the groups hold it. A fixed accumulation's groups are one size; a
    group beyond it also fetched another loop's batches (a sanity check's, a validation's)."""
    sizes = np.sort(np.asarray(sizes, dtype=np.int64))
    if sizes.size == 0:
        return 0
    most = int(sizes[sizes.size // 2 if upper else (sizes.size - 1) // 2])
    counts = np.bincount(sizes)
    while most + 1 < counts.size and counts[most + 1] >= GROUP_SIZE_SHARE * sizes.size:
        most += 1
    return most


def waits_between(
    host_start: np.ndarray | list[int], tid: np.ndarray | list[int] | None, waits: dict | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The waits for another thread between the steps of a series, from the light pass's
    ``waits`` (``{"tid", "start_ns", "end_ns"}``, every thread's: :mod:`perfdoctor.record.bootstrap.waits`;
    those with ``worked`` 1, during which the rest of the process worked, are the step's own
    wait for its input from a thread beside it, and left out here where one thread runs the
    steps)
    and each step's thread ``tid``. Per step ``k``: when its thread began waiting after the
    step began and before that thread's next step began (-1: it did not; a thread's last
    step: -1); how long step ``k`` waited since its thread's step before began (ns; 0 for a
    thread's first); and when its thread resumed, the end of the last of those waits (-1:
    none). Each thread's steps are its own series: a pool of several workers interleaves
    theirs. A server's worker blocks on its
    request queue between requests: idle, not the step's work nor the program's
    (:func:`iteration_ends_ns`, :func:`paused_before`); the work after it, before the call
    (taking the request, moving its input), is the next request's."""
    h = _ns(host_start)
    idle_from, waited = np.full(h.size, -1, dtype=np.int64), np.zeros(h.size, dtype=np.int64)
    resumed = np.full(h.size, -1, dtype=np.int64)
    if tid is None or not waits or h.size < 2:
        return idle_from, waited, resumed
    t, w_tid = _ns(tid)[: h.size], _ns(waits.get("tid", []))
    w_start, w_end = _ns(waits.get("start_ns", [])), _ns(waits.get("end_ns", []))
    worked = waits.get("worked")
    if worked is not None and len(worked) and np.unique(t).size == 1:
        # the rest of the process worked meanwhile: a wait for the step's input, not idle. With
        # several threads running the step (a pool's workers) another worker's work is no
        # producer's: every wait stays idle
        idle = _ns(worked)[: w_tid.size] == 0
        w_tid, w_start, w_end = w_tid[idle], w_start[idle], w_end[idle]
    for thread in np.unique(t):
        mine = np.flatnonzero(w_tid == thread)
        if mine.size == 0:
            continue
        order = mine[np.argsort(w_start[mine], kind="stable")]
        starts, ends = w_start[order], w_end[order]
        own = np.flatnonzero(t == thread)
        for k, nxt in zip(own[:-1], own[1:]):
            lo, hi = np.searchsorted(starts, [h[k], h[nxt]], side="left")
            if hi > lo:
                idle_from[k] = starts[lo]
                waited[nxt] = int(np.clip(np.minimum(ends[lo:hi], h[nxt]) - starts[lo:hi], 0, None).sum())
                resumed[nxt] = min(int(ends[lo:hi].max()), int(h[nxt]))
    return idle_from, waited, resumed


def fed_between(host_start: np.ndarray | list[int], tid: np.ndarray | list[int] | None, waits: dict | None) -> np.ndarray:
    """Per step of a series: whether its thread waited, between it and its thread's next
    step, while the rest of the process worked (``waits``' ``worked``, the light pass's: a
    producer making the next input, a process pool's workers tokenizing the next batch). That
    wait is the iteration's own, however long: a pool of 4 workers delivers its batches 4 at a
    time, and the one batch in 4 that waits ~120 ms for them is no pause of the loop's
    (:func:`iteration_ends_ns`' ``joined``). :func:`waits_between` over the worked waits alone."""
    h = _ns(host_start)
    worked = (waits or {}).get("worked")
    if worked is None or not len(worked):
        return np.zeros(h.size, dtype=bool)
    keep = _ns(worked) == 1
    fed = {k: _ns(waits.get(k, []))[: keep.size][keep] for k in ("tid", "start_ns", "end_ns")}
    return waits_between(h, tid, fed)[0] >= 0


def fetched_between(host_start: np.ndarray | list[int], fetch_ns: np.ndarray | list[int], ended_ns: np.ndarray | list[int]) -> np.ndarray:
    """Per step of a series found as a call (``host_start``, one thread's, in order), whether a
    data loader fetch (``fetch_ns``) lies between it and the next step and no end of a pass
    (``ended_ns``: a fetch that raised StopIteration, an evaluation's) does: the call runs once
    per iteration of a loop over that loader, and the wait for the next batch is the
    iteration's own, however long (:func:`iteration_ends_ns`' ``joined``). A ResNet-18 trained
    under ``torch.compile(mode="reduce-overhead")`` steps on its backward graph's replay, once
    per batch: the batches its 4 workers prefetched during the compile came at once, then
    each waited up to 90 ms for them, and those waits were left out as pauses (9.8 ms per
    step for the program's 42.7, H100). Only where most steps have a fetch before the next:
    calls many to a fetch (a decode's tokens over a loader of prompts) keep their pauses
    (the next prompt's prefill)."""
    h = _ns(host_start)
    if h.size < 2:
        return np.zeros(h.size, dtype=bool)
    f, e = np.sort(_ns(fetch_ns)), np.sort(_ns(ended_ns))
    fetched = np.searchsorted(f, h[1:], side="left") > np.searchsorted(f, h[:-1], side="right")
    if 2 * np.count_nonzero(fetched) < fetched.size:
        return np.zeros(h.size, dtype=bool)
    ended = np.searchsorted(e, h[1:], side="left") > np.searchsorted(e, h[:-1], side="right")
    return np.r_[fetched & ~ended, False]


def cpu_waits_inside(
    begins: np.ndarray | list[int], ends: np.ndarray | list[int], at_ns: np.ndarray | list[int], delay_ns: np.ndarray | list[int]
) -> np.ndarray:
    """Per span ``[begins[k], ends[k]]``, how long one thread waited for a CPU inside it: its
    run-queue delay counter (cumulative ns, :class:`perfdoctor.record.bootstrap.clock.RunQueue`:
    ``delay_ns``, read at host times ``at_ns``) at both edges, interpolated between reads and
    held flat beyond the first and the last. Another process on the program's CPUs shows
    there, where nothing in the program's own timeline does."""
    at, delay = _ns(at_ns), _ns(delay_ns)
    if at.size == 0:
        return np.zeros(len(begins), dtype=np.int64)
    order = np.argsort(at, kind="stable")
    at, delay = at[order], np.maximum.accumulate(delay[order])
    waited = np.interp(_ns(ends), at, delay) - np.interp(_ns(begins), at, delay)
    return np.clip(np.rint(waited), 0, None).astype(np.int64)


def time_inside(
    begins: np.ndarray | list[int], ends: np.ndarray | list[int], ranges: dict | None
) -> np.ndarray:
    """Per span from ``begins[k]`` to ``ends[k]`` (host ns), how much of ``ranges``
    (``{"start_ns", "end_ns"}``, host ns) lies inside it: the sum of each range's overlap
    with it (ns, 0 for none). The light pass's ranges: when torch.compile compiled
    (:class:`perfdoctor.record.bootstrap.steps.Compiles`; a step that compiled, dynamo
    compiling again for a last, smaller batch, is no steady work of the program's:
    :func:`steady_series` leaves it out), and when Python's collector ran a full collection
    (:class:`perfdoctor.record.bootstrap.clock.FullCollections`: one between two calls is
    no pause, :func:`perfdoctor.record.light.call_iterations`)."""
    h, g = _ns(begins), _ns(ends)
    out = np.zeros(h.size, dtype=np.int64)
    if not ranges or h.size == 0:
        return out
    cs, ce = _ns(ranges.get("start_ns", [])), _ns(ranges.get("end_ns", []))
    n = min(cs.size, ce.size)
    for a, b in zip(cs[:n].tolist(), ce[:n].tolist()):
        out += np.clip(np.minimum(g, b) - np.maximum(h, a), 0, None)
    return out


def pauses(idle_before: np.ndarray, step_ns: np.ndarray, usual_of: np.ndarray | None = None) -> np.ndarray:
    """Which of the times between steps are pauses: longer than a median step AND much
    longer than the program's usual time between steps. A loop that always spends 2 ms on
    the host between steps (sampling, stopping criteria) has no pauses — that time is part
    of its rate — while the prefill between two generate() calls stands out from it.

    ``usual_of``: the times between steps the usual one is the median of, where
    ``idle_before`` has another process's time taken out (:func:`cpu_waits_after`). That is
    an estimate: between two reads of the run queue a wait is spread in time over each call
    and the gap after it, so a short gap loses all of it. Under two busy loops on a 2-core box
    the usual gap of makemore's loop read 0 so, and three gaps that had lost a 4 ms
    preemption but for 0.1 ms were pauses: 12.8 ms of the program's time left out of its rate."""
    base = idle_before if usual_of is None else usual_of
    usual = max(float(np.median(np.clip(base, 0, None))), 0.0) if base.size else 0.0
    return (idle_before > float(np.median(step_ns))) & (idle_before > PAUSE_FACTOR * usual)


@dataclass(frozen=True)
class Steady:
    """Where the steady state of a step series starts, and why."""

    start: int  # index of the first steady step
    reason: str
    # (0, start - 1) when the warm-up held a slow regime (not only a few cold first steps):
    # the run had two regimes, and a timer around the whole run averages both
    slow_stretch: tuple[int, int] | None = None


def _slow_regimes(slow: np.ndarray, window: int) -> list[tuple[int, int]]:
    """(first, last) of each run of steps whose centred ``window``-step window holds mostly
    slow steps: a regime, not a lone prefill or spike. Centred, so that where a regime
    meets the next its last window's noise does not stretch it."""
    n = slow.size
    if n < window:
        return []
    counts = np.convolve(slow.astype(np.int64), np.ones(window, dtype=np.int64), mode="valid")
    inside = np.zeros(n, dtype=bool)
    inside[window // 2 : window // 2 + counts.size] = counts * 2 > window
    edges = np.diff(np.r_[0, inside.astype(np.int8), 0])
    return list(zip(np.flatnonzero(edges == 1).tolist(), (np.flatnonzero(edges == -1) - 1).tolist()))


def steady_start(critical_path: np.ndarray | list[int], paused: np.ndarray | None = None, fresh: np.ndarray | None = None) -> Steady:
    """The first step of the steady state of a series of critical-path times.

    The rule (docs/metrics.md, "Steady state"): the reference is the median of the second
    half of the series, which a warm-up shorter than half the run cannot move. A step is
    slow when it takes more than ``WARMUP_FACTOR`` x the reference. The steady state starts
    at the first step that begins a run of ``SETTLED_RUN`` consecutive steps none of which
    is slow, after the last *slow regime* that begins in the first half: ``REGIME_WINDOW``
    consecutive steps most of which are slow. Such a regime after some fast steps is a
    warm-up the program's own warm-up did not cover (Hugging Face ``generate`` after a short
    warm-up call: the first context lengths it never reached load new kernels, 50-80 ms per
    token, then 12-15 ms), and the steady state is the regime after it. Lone slow steps
    after the start (a prefill per ``generate``, a tail spike) are part of the workload,
    never dropped. Series shorter than four steps are used whole.

    A slow regime is a warm-up only when it ends in the first half of the run (the
    reference assumes a warm-up shorter than half of it) or when a pause ends it
    (``paused[k]``: the program did something else before step ``k``, e.g. the prefill of
    the next ``generate`` call: the slow regime was a call of its own). One that runs on
    past the middle of a loop that never paused is the program's own variation, kept with
    the rest: a host-paced ViT-small at batch 1 on the H200 ran steps 24-70 at 3.95 ms and
    the others at ~3.1 in one loop, its own timer over all of them (3.48 ms); the later
    regime alone read 0.86 of it. Nor is one that a new configuration ends (``fresh[k]``: a
    new optimizer steps first in step ``k``): an Optuna study's trial of a larger model,
    whose next trial trains another, is that model's work.
    """
    cp = np.asarray(critical_path, dtype=np.float64)
    n = cp.size
    if n < 4:
        return Steady(0, f"{n} steps: too few to tell warm-up from steady state, all used")
    reference = float(np.median(cp[n // 2 :]))
    fast = cp <= WARMUP_FACTOR * reference
    run = min(SETTLED_RUN, n - n // 2)
    settled = [i for i in range(n - run + 1) if fast[i : i + run].all()]
    if not settled:
        return Steady(0, "no steady run found (the steps never settle): all used")
    every = _slow_regimes(~fast, REGIME_WINDOW)
    found = [r for r in every if r[0] < n // 2]
    # A regime past the middle with no pause is the program's variation, and so are the
    # slow regimes before it that no pause ended at its speed (one drift, its edges cut by
    # noise). One far slower than that drift is a warm-up all the same: HF generate on the
    # H200 (2026-12-04) ran its warm-up call at ~70 ms per token and its timed calls at
    # 18-28 ms; the light pass kept all but 2 steps and read 24.8 tokens/s for the
    # program's 44.2, as a 28 ms stretch across the middle makes this rule do.
    late = next((r for r in found if r[1] >= n // 2 and not _ends_at_pause(r[1], paused)), None)
    regimes = [
        r for r in found
        if (late is None or r[1] < late[0]) and not _ends_at_pause(r[1], fresh)
        and (_ends_at_pause(r[1], paused) or (r[1] < n // 2 and (late is None or _level(cp, r) > WARMUP_FACTOR * _level(cp, late))))
    ]
    after = regimes[-1][1] + 1 if regimes else 0
    start = next((i for i in settled if i >= after), settled[0])
    why_kept = "the slower runs past the middle of the run with no pause: the program's own variation, not a warm-up"
    if regimes and start and float(np.median(cp[:start])) <= WARMUP_FACTOR * reference:
        # what the regimes would leave out is not slower as a whole: a noisy loop's slow
        # stretches among fast ones (ViT-small b1 on the H200: 51 steps at a 3.27 ms median
        # against 3.09 after them), not a warm-up
        regimes, after, start = [], 0, settled[0]
        why_kept = "the steps before the last slow stretch are no slower as a whole: slow stretches among fast steps, not a warm-up"
    back = [r for r in every if r[0] >= start]
    if regimes and back and start and float(np.median(cp[:start])) <= WARMUP_FACTOR * float(np.median(np.concatenate([cp[a : b + 1] for a, b in back]))):
        # the program falls back to that speed after the would-be warm-up: its own variation
        # (a host-paced training loop on the H200 ran steps 16-85 at ~2.05 ms, 86-121 at ~1.5,
        # 122-135 at ~2.1 and the rest at ~1.5: cutting the first 86 read 0.90 of its mean)
        regimes, after, start = [], 0, settled[0]
        why_kept = f"the program runs as slowly again later (steps {back[0][0]}-{back[-1][1]}): its own variation, not a warm-up"
    kept = [r for r in found if r[1] >= after]
    regimes_kept, trend = "", False
    if kept:
        start = min(start, kept[0][0])  # a kept regime from the first steps on is not their warm-up either
        inside = np.zeros(n, dtype=bool)
        for first, last in kept:
            inside[first : last + 1] = True
        inside[:start] = False
        slow_ms, rest_ms = float(np.median(cp[inside])) / 1e6, float(np.median(cp[start:][~inside[start:]])) / 1e6
        regimes_kept = (
            f"; the run has two regimes, both kept: steps {kept[0][0]}-{kept[-1][1]} mostly at {value(slow_ms, 'ms')} (median), the "
            f"others at {value(rest_ms, 'ms')}; {why_kept}"
        )
        if start == kept[0][0] and start > 0:
            # the kept regime begins where the warm-up would end: the steps before it are the
            # same variation unless a drop sets them apart. A loop whose steps get faster one
            # by one (batches sorted longest first, as sentence-transformers' encode sorts
            # them) has no drop: only the steps slower than each of the next few are cold
            # (embed_retrieval.py: 5 of 32 length-sorted batches left out, the rate 0.81 of
            # the program's own mean). Every step before the drop slower than each of the next
            # half window: on a loaded box one step of the decline 1.25x the next three was
            # seen, and a lone spike just before the regime (22.7 ms among 7-13) 1.25x the next five
            cliff = _cold_until(cp, start)
            if cliff < start:
                regimes_kept += (
                    f"; steps {cliff}-{start - 1} before it get faster step by step, no drop between them and it: "
                    f"the program's own trend, kept"
                )
                start, trend = cliff, True
    if start > n // 2 and not any(_ends_at_pause(r[1], paused) for r in regimes):
        # A warm-up of most of the run contradicts the reference, the median of a second half
        # it was assumed not to reach: the slow steps are the program's own (each epoch's
        # producer-bound batches, prefetch_train.py: 19 of 24 left out, 46.4 ms for its 65.8)
        # or the box's load (detect_infer.py: 9 of 12, 93.6 ms for 153.1). Only the cold first
        # steps, each slower than each of the next ones, are left out. A slow regime ended by
        # a pause (the prefill of the next generate call) may still be longer.
        cold = _cold_until(cp, n // 2)
        regimes_kept += (f"; steps {cold}-{start - 1} kept: as a warm-up they would have been most of the run with no pause "
                         f"(more than its second half, whose median is the reference): the program's own variation")
        regimes, start, trend = [], cold, True
    if start == 0:
        return Steady(0, "no warm-up: the first steps are as fast as the rest" + regimes_kept)
    why = (
        f"left out the first {start} steps as warm-up: slower than {setting(WARMUP_FACTOR)}x the steady "
        f"median ({value(reference / 1e6, 'ms')}) before {run} steady steps in a row"
    ) if not trend else f"left out the first {start} steps as warm-up: each slower than {setting(WARMUP_FACTOR)}x each of the {REGIME_WINDOW // 2} steps after them"
    # two regimes to speak of: a slow regime left out, and more warm-up than one window of it
    # (a cold start of a few steps is just a warm-up)
    stretch = (0, start - 1) if regimes and start >= max(after, REGIME_WINDOW) else None
    if stretch is not None:
        slow_ms = float(np.median(cp[:start])) / 1e6
        why += (
            f"; the run has two regimes: steps 0-{start - 1} at {value(slow_ms, 'ms')} (median), then {value(reference / 1e6, 'ms')}: "
            f"the steady state is the later one (a timer over both averages them)"
        )
    return Steady(start, why + regimes_kept, stretch)


def _level(cp: np.ndarray, regime: tuple[int, int]) -> float:
    """A regime's median step."""
    return float(np.median(cp[regime[0] : regime[1] + 1]))


def _cold_until(cp: np.ndarray, top: int) -> int:
    """The last step at or before ``top`` whose steps before it are each slower than
    ``WARMUP_FACTOR`` x each of the half window after it: where the cold first steps end
    (0: none). Searched from ``top`` down, so a drop between two stretches is found first."""
    return next((i for i in range(top, 0, -1) if float(cp[:i].min()) > WARMUP_FACTOR * float(cp[i : i + REGIME_WINDOW // 2].max())), 0)


def _ends_at_pause(last: int, paused: np.ndarray | None) -> bool:
    """A pause before one of the steps just after a slow regime ending at ``last``. Near,
    not at: the regime's edge comes from centred windows, and noise moves it a few steps."""
    if paused is None:
        return False
    near = np.asarray(paused, dtype=bool)[max(last + 1 - REGIME_WINDOW // 2, 0) : last + 2 + REGIME_WINDOW // 2]
    return bool(near.any())


def device_warmup(critical_path: np.ndarray | list[int], gpu_busy: np.ndarray | list[int]) -> Steady:
    """The leading steps of a *trace* that are warm-up by what the device did, not only by time.

    A trace alone cannot know the warm-up from its step times (docs/metrics.md): a slow first
    step may be the tracer starting, a prefill, a host stall, and its metrics use every
    step. Its GPU busy time per step is another matter: the tracer does not stretch device
    work, and the steady steps of a loop repeat the same work, so a leading step whose own
    GPU work is slow by the steady-state rule (first calls, cuDNN autotuning, allocation run
    device work later steps do not repeat) shows its warm-up in the trace itself. The steps
    returned (``start``) precede the steady state by :func:`steady_start` of *both* series:
    a step slow only on the host (a stall, a late launch: the same device work) is kept,
    and so is one whose device work differs while its time does not (a bigger batch).
    """
    by_time, by_work = steady_start(critical_path), steady_start(gpu_busy)
    start = min(by_time.start, by_work.start)
    if start == 0:
        return Steady(0, "no step before the steady state of both the step time and the GPU work")
    cp, busy = np.asarray(critical_path, dtype=np.float64), np.asarray(gpu_busy, dtype=np.float64)
    steps = "the first step" if start == 1 else f"the first {start} steps"
    return Steady(
        start,
        f"{steps} ({value(float(np.sum(cp[:start])) / 1e6, 'ms')} of critical path, {value(float(np.sum(busy[:start])) / 1e6, 'ms')} of GPU work) "
        f"before the steady state of both the step time ({value(float(np.median(cp[start:])) / 1e6, 'ms')}) and the GPU work "
        f"({value(float(np.median(busy[start:])) / 1e6, 'ms')} per step)",
    )


def paused_before(
    host_start: np.ndarray | list[int], gpu_end: np.ndarray | list[int], gpu_start: np.ndarray | list[int] | None = None,
    waited: np.ndarray | list[int] | None = None, pass_ended: np.ndarray | list[bool] | None = None,
) -> np.ndarray:
    """Per step, whether a pause (:func:`pauses`) came before it: the time from the previous
    step's GPU end to the step's start (the later of its host start and ``gpu_start``, the
    stream reaching it, where known; see :func:`cadence`), or its thread waited for another
    thread since the previous step (``waited``, ns: :func:`waits_between`) longer than a
    median step: a server idle between requests, however regular its waits, or a data
    loader's pass ended since the previous step (``pass_ended``: :func:`step_groups`,
    :func:`loop_iterations`), whatever the time between them: an evaluation pass or the
    epoch's end. The first step has none.

    A wait shorter than a step is the thread catching its producer mid-batch, nothing the
    program did apart from its loop: a loop fed by a process pool in bursts (pool_classify.py
    on the loaded CI box) waited 0.09 ms before 2 of 40 steps, and one of those, near the end
    of a stretch of slow steps, made the stretch a call of its own ended by a pause: 28 of 40
    steps were cut as warm-up, 4.4 ms per step read for the program's 7.9."""
    idle, waits, ends = _pauses_and_waits(host_start, gpu_end, gpu_start, waited, pass_ended)
    if waited is not None and waits.any():
        waits &= _ns(waited)[: waits.size] > np.median(critical_path_ns(host_start, gpu_end))
    return idle | waits | ends


def _pauses_and_waits(
    host_start: np.ndarray | list[int], gpu_end: np.ndarray | list[int], gpu_start: np.ndarray | list[int] | None,
    waited: np.ndarray | list[int] | None, pass_ended: np.ndarray | list[bool] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per step: a pause of the program's own came before it (:func:`pauses` over the time
    between steps less the waits, the times after an end of pass neither pauses nor counted
    in the usual time between steps), its thread waited for another thread before it, and a
    pass ended before it (``pass_ended``, as given; never the first step)."""
    h, g = _ns(host_start), _ns(gpu_end)
    idle, waits, ends = np.zeros(h.size, dtype=bool), np.zeros(h.size, dtype=bool), np.zeros(h.size, dtype=bool)
    if h.size < 2:
        return idle, waits, ends
    began = _began(h, gpu_start)
    wait = np.zeros(h.size - 1, dtype=np.int64) if waited is None else _ns(waited)[1 : h.size]
    if pass_ended is not None:
        ends[1:] = np.asarray(pass_ended, dtype=bool)[1 : h.size]
    free = ~ends[1:]
    idle[1:][free] = pauses((began[1:] - g[:-1] - wait)[free], critical_path_ns(h, g))
    waits[1:] = (wait > RESOLUTION_MS * 1e6) & free
    return idle, waits, ends


def _began(h: np.ndarray, gpu_start: np.ndarray | list[int] | None) -> np.ndarray:
    """Per step, when it started: the later of its host start and the stream reaching it."""
    if gpu_start is None:
        return h
    return np.maximum(h, np.array([h[i] if v is None else int(v) for i, v in enumerate(list(gpu_start)[: h.size])], dtype=np.int64))


def _per_step_ns(values: np.ndarray | list[int] | None, steps: int) -> np.ndarray:
    """``values`` (ns per step, e.g. each step's wait for a CPU) over ``steps`` steps: 0 for
    a step it has none for, or for every step where it is None."""
    out = np.zeros(steps, dtype=np.int64)
    if values is not None:
        got = _ns(values)[:steps]
        out[: got.size] = got
    return out


def series_steady_start(
    host_start: np.ndarray | list[int], gpu_end: np.ndarray | list[int], gpu_start: np.ndarray | list[int] | None = None,
    waited: np.ndarray | list[int] | None = None, pass_ended: np.ndarray | list[bool] | None = None,
    cpu_wait: np.ndarray | list[int] | None = None, threads: np.ndarray | list[int] | None = None,
    fresh: np.ndarray | None = None,
) -> Steady:
    """:func:`steady_start` of a light-pass series: its critical path, its pauses left out.
    Decided once, by ``perfdoctor run`` (:func:`perfdoctor.record.light.light_summary`), or by
    the analysis for a perfdoctor 0.1 bundle, which did not store it. ``cpu_wait`` (ns per
    step, :func:`cpu_waits_inside`): the step's thread waiting for a CPU, another process on
    its cores, which is the machine's load, not the program's warm-up: the warm-up is judged
    on the time without it (accelerate's loop on a shared CPU: neighbours slowed its first
    34 of 48 steps, 40-336 ms of waits each, and they were left out as warm-up, the p50 0.72
    of its own timer's)."""
    cp = critical_path_ns(host_start, gpu_end, threads)
    wait = _per_step_ns(cpu_wait, cp.size)
    paused = paused_before(host_start, gpu_end, gpu_start, waited, pass_ended)
    found = steady_start(cp, paused, fresh)
    if not wait.any() or (judged := steady_start(np.maximum(cp - wait, 0), paused, fresh)).start == found.start:
        return found
    return replace(judged, reason=f"{judged.reason} (each step's wait for a CPU left out, {value(float(wait.sum()) / 1e6, 'ms')} in all: "
                                  f"another process's time, no warm-up; with it, {found.start} steps)")

@dataclass(frozen=True)
class Cadence:
    """The completion rate of a step series, pauses left out."""

    steps_per_s: float | None
    pauses: int  # intervals left out as pauses
    reason: str | None = None  # why steps_per_s is None
    # the rate with the pauses in (every interval of the series): what a timer around the
    # whole loop reads when the pauses are work of the program's own (a prefill or an
    # encoder per generate(), generate's set-up), so a user can check either number
    with_pauses_per_s: float | None = None
    paused_ms: float = 0.0  # the time left out (each pause and the step after it; a wait alone), summed
    # of those, the waits of the step's thread for another thread (a server's worker for requests)
    waits: int = 0
    waited_ms: float = 0.0
    # of those, the ends of a data loader's pass between two steps (an evaluation pass, the
    # epoch's end), and the time from the step before to the step after, summed
    pass_ends: int = 0
    pass_end_ms: float = 0.0
    # of those, the steps that compiled (torch.compile compiling again inside the loop):
    # each such step's interval, summed; ``compiles_kept``: steps that compiled but were
    # kept, because most steady steps compile (recompiling is then the program's work)
    compiles: int = 0
    compiled_ms: float = 0.0
    compiles_kept: int = 0
    # the completion-to-completion intervals counted, ms (their number over their sum is
    # steps_per_s): the sample a diff tests steps_per_s's change on (perfdoctor.compare.samples)
    intervals_ms: np.ndarray = field(default_factory=lambda: np.zeros(0), compare=False)
    # the program's own time between its steps, one entry per pause or pass end (the waits
    # and compiles above left out: a server idle between requests, a warm-up's cost): the
    # step after it (its index in the series), whether a pass ended there, and its time as
    # paused_ms counts it (a pass end's, from the step before to the step after; a pause's,
    # its interval). What time-between-steps weighs (perfdoctor.rules.signals.paused_time_ratio)
    own_after: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64), compare=False)
    own_pass_end: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool), compare=False)
    own_ms: np.ndarray = field(default_factory=lambda: np.zeros(0), compare=False)

    @property
    def intervals(self) -> int:
        """How many intervals were counted."""
        return int(self.intervals_ms.size)

    @property
    def loop_ms(self) -> float:
        """Every interval's time, the pauses in: the loop from its first step's end to its last's."""
        return float(self.intervals_ms.sum()) + self.paused_ms


def cadence(
    host_start: np.ndarray | list[int], gpu_end: np.ndarray | list[int], gpu_start: np.ndarray | list[int] | None = None,
    waited: np.ndarray | list[int] | None = None, pass_ended: np.ndarray | list[bool] | None = None,
    compiled: np.ndarray | list[bool] | None = None, first: int = 0, threads: np.ndarray | list[int] | None = None,
) -> Cadence:
    """Steps per second: completion-to-completion intervals ``g[k] − g[k−1]`` summed over
    the steps the program issued back to back. An interval whose step started more than a
    median critical-path time after the previous step ended, and more than ``PAUSE_FACTOR``
    times the usual time between steps, is a pause (the program did something else in
    between: a prefill, I/O) and is left out, so the rate is that of the loop, as the
    program's own timer around its loop sees it.

    A step starts at the later of its host start and ``gpu_start`` (the stream reaching the
    step, when known). Why both: a program whose host runs ahead of the GPU (a CUDA-graph
    decode loop that does not synchronise around its prefill) queues the eager prefill
    between two steps long before the GPU runs it, so the host sees no pause at all; the
    stream reaches the next step only after the prefill's kernels. (The H200 decode loop of
    2026-12-02, which does synchronise, lost its pauses in :func:`iteration_ends_ns`
    instead: 24.5 ms prefills inside three iterations, the rate 19 % under its own timer.)

    ``waited`` (ns per step, :func:`waits_between`): the step's thread waited for another
    thread before it (a server's worker for the next request). Only the wait is left out of
    that interval, not the step after it: when every request waits, the steps are still the
    server's work, and the rate is the rate it serves at.

    ``pass_ended`` (per step, :func:`step_groups`, :func:`loop_iterations`): a data loader's
    pass ended between the previous step and it (an evaluation pass, the epoch's end): the
    time from the previous step's end to the step's start is left out, whatever its length
    (a validation shorter than a step is no step's either: train_eval.py with one optimizer
    step per epoch on the H200 read 86.1 ms per step for the program's 71.4), and the step
    after it is kept: with one step per epoch every interval follows an end of pass.

    ``compiled`` (per step, :func:`time_inside` of the compilations): torch.compile compiled inside the
    step: its whole interval is left out (the compilation is no steady work of the program's).

    ``first``: the index of the first step given in the whole series (the first steady
    step), which ``own_after`` counts from."""
    h, g = _ns(host_start), _ns(gpu_end)
    if h.size < 2:
        return Cadence(None, 0, "needs at least two steps")
    if threads is not None and len(threads) >= h.size and np.unique(np.asarray(threads[: h.size])).size > 1:
        return _pool_cadence(h, g)
    intervals = np.diff(g)
    wait = np.zeros(intervals.size, dtype=np.int64) if waited is None else np.clip(_ns(waited)[1 : h.size], 0, intervals.clip(0))
    idle, waits, ends = (p[1:] for p in _pauses_and_waits(h, g, gpu_start, waited, pass_ended))
    comp = np.zeros(intervals.size, dtype=bool) if compiled is None else np.asarray(compiled, dtype=bool)[1 : h.size]
    comp &= ~idle  # a pause before it says it already
    own_pause = idle.copy()
    idle, ends = idle | comp, ends & ~comp
    waits &= ~idle  # a pause of the program's own leaves the whole interval out
    between = np.zeros(intervals.size, dtype=np.int64)
    if ends.any():
        between = np.clip(_began(h, gpu_start)[1:] - g[:-1], 0, intervals.clip(0))  # the pass's time: from the step before to the step
    busy = np.where(ends, intervals - between, np.where(waits, intervals - wait, intervals))
    kept = busy[~idle]
    total = int(kept.sum())
    paused = int(idle.sum() + waits.sum() + ends.sum())
    if kept.size == 0 or total <= 0:
        return Cadence(None, paused, "no back-to-back steps with a positive interval")
    if not paused:
        return Cadence(kept.size / (total / 1e9), 0, intervals_ms=kept / 1e6)
    waited_ms, pass_end_ms = float(wait[waits].sum()) / 1e6, float(between[ends].sum()) / 1e6
    own = np.flatnonzero(own_pause | ends)
    return Cadence(kept.size / (total / 1e9), paused, intervals_ms=kept / 1e6,
                   own_after=own + 1 + first, own_pass_end=ends[own], own_ms=np.where(ends, between, intervals)[own] / 1e6,
                   with_pauses_per_s=intervals.size / (int(intervals.sum()) / 1e9),
                   paused_ms=float(intervals[idle].sum()) / 1e6 + waited_ms + pass_end_ms, waits=int(waits.sum()), waited_ms=waited_ms,
                   pass_ends=int(ends.sum()), pass_end_ms=pass_end_ms, compiles=int(comp.sum()),
                   compiled_ms=float(intervals[comp].sum()) / 1e6)


def _pool_cadence(h: np.ndarray, g: np.ndarray) -> Cadence:
    """:func:`cadence` of steps that run on several threads at once (a pool's requests): the
    completions in the order they came, the time in which no step was under way on any
    thread left out (a server's wait for requests). In series order the intervals came out
    negative, and each thread's own wait for work, while the others served, was left out:
    an asyncio service's requests on 6 executor threads read 2,850 a second for the 1,397 it
    served."""
    ends = np.sort(g)
    intervals = np.diff(ends)
    o = np.argsort(h, kind="stable")
    covered_to = np.maximum.accumulate(g[o])[:-1]  # the latest end of the steps begun so far
    begins = h[o][1:]
    gaps = begins > covered_to
    idle = (time_inside(ends[:-1], ends[1:], {"start_ns": covered_to[gaps].tolist(), "end_ns": begins[gaps].tolist()})
            if gaps.any() else np.zeros(intervals.size, dtype=np.int64))
    busy = intervals - idle
    if busy.sum() <= 0:
        return Cadence(None, 0, "no step under way between the completions")
    idled = idle > 0
    rate = intervals.size / (float(busy.sum()) / 1e9)
    if not idled.any():
        return Cadence(rate, 0, intervals_ms=busy / 1e6)
    return Cadence(rate, int(idled.sum()), with_pauses_per_s=intervals.size / (float(intervals.sum()) / 1e9),
                   paused_ms=float(idle.sum()) / 1e6, waits=int(idled.sum()), waited_ms=float(idle.sum()) / 1e6, intervals_ms=busy / 1e6)


@dataclass(frozen=True)
class SlowSteps:
    """The steps of a steady series slower than its median, and what they cost: each step's
    time beyond the median step, summed (``beyond_ms``). Uneven steps — a training loop whose
    DataLoader falls behind every few iterations (train_loop.py with 4 workers on the H200:
    ~47 ms iterations and 150-190 ms ones) — put much of a run's time where the median step
    does not look: a program's own "ms per iteration" (a mean) counts it, the median does not."""

    steps: int
    median_ms: float
    total_ms: float  # Σ critical path
    beyond_ms: float  # Σ max(0, critical path − median − RESOLUTION_MS)
    slow: int  # steps slower than WARMUP_FACTOR × the median (the ones worth naming)
    slow_min_ms: float | None
    slow_max_ms: float | None
    period: int | None = None  # the slow ones every k-th step (slow_period), where on a schedule

    @property
    def summary(self) -> str:
        """``5 of 22 steps slower than 1.25x the median 46.7 ms (58.8-202 ms)`` (one slow step:
        ``(62.7 ms)``), and ``, one every 4 steps`` where they come on a schedule."""
        text = f"{self.slow} of {self.steps} steps slower than {setting(WARMUP_FACTOR)}x the median {value(self.median_ms, 'ms')}"
        if self.slow:
            low = f"{num(self.slow_min_ms)}-" if num(self.slow_min_ms) != num(self.slow_max_ms) else ""
            text += f" ({low}{value(self.slow_max_ms, 'ms')})"
        return text + (f", one every {self.period} steps" if self.period else "")


# What a light-pass step's time can be trusted to: its CUDA events and bookkeeping cost
# 35-50 us per step on the H200 host and the clock mapping is within ±8 us (docs/performance.md,
# seventh reading). A step is slow only by more than this: 57 us CPU steps on a loaded 2-core
# machine jittered past 10 % of the run otherwise, a "slow step" no fix can win back.
RESOLUTION_MS = 0.05


def slow_steps(critical_path_ms: np.ndarray, cpu_wait_ms: np.ndarray | None = None) -> SlowSteps:
    """:class:`SlowSteps` of a steady series (ms per step): the time beyond the median step by
    more than RESOLUTION_MS; its period, :func:`slow_period`'s."""
    cp = np.asarray(critical_path_ms, dtype=np.float64)
    med = float(np.median(cp)) if cp.size else 0.0
    at = _slow_at(cp, med)
    slow = cp[at]
    beyond = float(np.clip(cp - med - RESOLUTION_MS, 0, None).sum())
    return SlowSteps(int(cp.size), med, float(cp.sum()), beyond, int(slow.size),
                     float(slow.min()) if slow.size else None, float(slow.max()) if slow.size else None,
                     slow_period(cp, cpu_wait_ms))


def _slow_at(cp: np.ndarray, median_ms: float) -> np.ndarray:
    """Which steps of ``cp`` (ms) are slow: slower than WARMUP_FACTOR x the median, by more
    than RESOLUTION_MS (their indices, in order)."""
    return np.flatnonzero((cp > WARMUP_FACTOR * median_ms) & (cp > median_ms + RESOLUTION_MS))


# A stretch of slow steps at a pace of its own: this share of its steps slow at least, and
# its slow steps' p90 at most this many times their p10 (a T5's beam batches: 1.07; an H200
# loop whose DataLoader fell behind for its second half: 7 of 12 slow, 48-187 ms, no pace)
PACE_SHARE, PACE_SPREAD = 0.8, 1.5


def slow_stretches(critical_path_ms: np.ndarray) -> np.ndarray:
    """Which steps of a steady series (ms per step) lie in a stretch of slow ones at a pace
    of their own (``slow_steps``' measure; a regime as :func:`steady_start` finds them, a
    window of REGIME_WINDOW steps around each mostly slow; PACE_SHARE and PACE_SPREAD): the run
    changed pace for a while. A T5's batches, generated greedy and then with 4 beams, ran the
    beam half at 1.4x the median: uneven-steps blamed random stalls (the garbage collector,
    swapping)."""
    cp = np.asarray(critical_path_ms, dtype=np.float64)
    inside = np.zeros(cp.size, dtype=bool)
    if not cp.size:
        return inside
    slow = np.zeros(cp.size, dtype=bool)
    slow[_slow_at(cp, float(np.median(cp)))] = True
    for first, last in _slow_regimes(slow, REGIME_WINDOW):
        # and the slow steps right before and after it: a centred window misses the run's
        # first and last half window
        while first > 0 and slow[first - 1]:
            first -= 1
        while last + 1 < cp.size and slow[last + 1]:
            last += 1
        for a, b in _paces(cp, first, last):
            level = cp[a : b + 1][slow[a : b + 1]]
            if level.size >= PACE_SHARE * (b + 1 - a) and np.percentile(level, 90) <= PACE_SPREAD * np.percentile(level, 10):
                inside[a : b + 1] = True
    return inside


def _paces(cp: np.ndarray, first: int, last: int) -> list[tuple[int, int]]:
    """The stretch ``first``..``last`` cut where its pace changes, while the REGIME_WINDOW
    steps before and after a step differ in median by more than PACE_SPREAD (at the step
    where they differ most, then each part alike): back-to-back stretches at paces of their
    own are each a stretch. An Optuna study's trials, each a model of its own size (15 ms a
    batch, then 4.8 ms), were one stretch with no pace: uneven-steps then blamed random
    stalls, "~2.3 ms per step recoverable"."""
    w = REGIME_WINDOW
    seg = cp[first : last + 1]
    if seg.size < 2 * w:
        return [(first, last)]
    med = np.median(np.lib.stride_tricks.sliding_window_view(seg, w), axis=1)  # med[j]: seg[j : j + w]'s
    before, after = med[: seg.size - 2 * w + 1], med[w:]  # around a cut at first + w + j
    lo, hi = np.minimum(before, after), np.maximum(before, after)
    ratio = np.where(lo > 0, hi / np.where(lo > 0, lo, 1.0), 0.0)
    j = int(np.argmax(ratio))
    if ratio[j] <= PACE_SPREAD:
        return [(first, last)]
    cut = first + w + j
    return _paces(cp, first, cut - 1) + _paces(cp, cut, last)


# Slow steps that come on a schedule: at least this many, this share of the intervals
# between them one period, which is at least 2 steps (every step slow is no schedule)
PERIODIC_SLOW, PERIODIC_SHARE = 3, 0.8


def without_waits(critical_path_ms: np.ndarray, cpu_wait_ms: np.ndarray | None) -> np.ndarray:
    """Each step's time (ms) less its thread's wait for a CPU (``SteadySeries.cpu_wait_ms``):
    the program's own time, a neighbour's left out; the time itself where no wait was read."""
    cp = np.asarray(critical_path_ms, dtype=np.float64)
    return cp if cpu_wait_ms is None else np.clip(cp - np.asarray(cpu_wait_ms, dtype=np.float64), 0, None)


def slow_period(critical_path_ms: np.ndarray, cpu_wait_ms: np.ndarray | None = None) -> int | None:
    """The period, in steps, of a steady series' slow steps (``slow_steps``' measure) where
    they come on a schedule: the loop's own work every k-th step (``if step % k == 0``: a log
    line that syncs, an evaluation, SAC's delayed policy update, a checkpoint); None where
    they come at random or too few. Where the steps waited for a CPU (``cpu_wait_ms``, per
    step), also their time without those waits: a neighbour's time falls on steps at random
    and hides the schedule (CleanRL's SAC on a loaded 2-core machine, its every 3rd step's
    policy update: the most common gap between slow steps 3 in 61 of 95, no schedule; 120
    of 147 without the waits)."""
    cp = np.asarray(critical_path_ms, dtype=np.float64)
    if not cp.size:
        return None
    for times in [cp] if cpu_wait_ms is None else [cp, without_waits(cp, cpu_wait_ms)]:
        med = float(np.median(times))
        period = _schedule(times, med, _slow_at(times, med))
        if period is not None:
            return period
    return None


def _schedule(cp: np.ndarray, median_ms: float, at: np.ndarray) -> int | None:
    """:func:`slow_period` of the series ``cp`` whose slow steps are ``at``: their own period,
    else the period of the fewest steps that hold half the time beyond the median, where
    every step in their phase is slow (the last may be cut by the run's end). A loop whose
    other steps drift past the slow threshold hides the schedule among them: torchdiffeq's
    ode_demo evaluates every 20 iterations (263-513 ms among 25 ms ones, 80 % of the time
    beyond the median) while its adaptive solver's work grows over training, so half the
    steps read slow, their most common gap 1, and uneven-steps named random stalls."""
    period = _period(cp.size, at)
    if period is not None:
        return period
    beyond = np.clip(cp - median_ms - RESOLUTION_MS, 0, None)
    if beyond.sum() <= 0:
        return None
    order = np.argsort(-beyond, kind="stable")
    heavy = np.sort(order[: int(np.searchsorted(np.cumsum(beyond[order]), 0.5 * beyond.sum())) + 1])
    k = int(np.gcd.reduce(np.diff(heavy))) if heavy.size >= 2 else 0
    if k < 2:
        return None
    phase = np.arange(int(heavy[0]) % k, cp.size, k)
    slow = np.zeros(cp.size, dtype=bool)
    slow[at] = True
    return k if phase.size > PERIODIC_SLOW and slow[phase[:-1]].all() else None


def _period(steps: int, at: np.ndarray) -> int | None:
    """:func:`slow_period` of a series of ``steps`` steps whose slow ones are ``at``."""
    if steps < 2 * PERIODIC_SLOW or at.size < PERIODIC_SLOW:
        return None
    gaps, counts = np.unique(np.diff(at), return_counts=True)
    k = int(gaps[np.argmax(counts)])
    return k if k >= 2 and counts.max() >= PERIODIC_SHARE * (at.size - 1) else None


def held_share(critical_path_ms: np.ndarray, held_ms: np.ndarray) -> float | None:
    """The share of a steady series' time beyond the median (``slow_steps``' measure) that
    ``held_ms`` (per step: time inside it spent in one thing, torch.save calls) accounts for,
    each step's at most its own time beyond the median; None when no step runs beyond it."""
    cp = np.asarray(critical_path_ms, dtype=np.float64)
    if not cp.size:
        return None
    beyond = np.clip(cp - float(np.median(cp)) - RESOLUTION_MS, 0, None)
    if beyond.sum() <= 0:
        return None
    return float(np.minimum(np.asarray(held_ms, dtype=np.float64), beyond).sum() / beyond.sum())


# Work that varies: the steps' model calls (most / fewest over the steps that made any) at
# least this spread apart (an RL episode's policy calls, 12 to 2,703 in REINFORCE's CartPole)
WORK_SPREAD = 2.0


def calls_vary(calls: np.ndarray) -> bool:
    """Whether per-step model calls vary by :data:`WORK_SPREAD` or more over the steps that
    made any (a step before the loop's first noted call has none: unknown), three at least."""
    made = np.asarray(calls)[np.asarray(calls) > 0]
    return made.size >= 3 and made.max() >= WORK_SPREAD * made.min()


def work_share(critical_path_ms: np.ndarray, calls: np.ndarray) -> float | None:
    """The share of a steady series' time beyond the median (:func:`held_share`) that the
    steps' own work accounts for: each step's model calls at the median time per call,
    beyond the median step. None where the calls do not vary (:func:`calls_vary`)."""
    cp, calls = np.asarray(critical_path_ms, dtype=np.float64), np.asarray(calls, dtype=np.float64)
    if not calls_vary(calls):
        return None
    made = calls > 0
    expected = calls * float(np.median(cp[made] / calls[made]))
    return held_share(cp, np.clip(expected - float(np.median(cp)), 0.0, None))


@dataclass(frozen=True)
class SteadySeries:
    """A step series over its steady state: what the metrics of a light pass are made of."""

    critical_path_ms: np.ndarray  # per steady step
    host_lead_ms: np.ndarray  # per steady step that has a predecessor
    cadence: Cadence
    steps: np.ndarray | None = None  # each critical path's step (its index in the whole series)
    # per steady step: a pause came before it (paused_before: the program did something else
    # between the loop's steps: a prefill or an encoder, an evaluation, the epoch's end)
    paused: np.ndarray | None = None
    # per steady step: its thread's wait for a CPU (cpu_waits_inside), ms: another process's
    # time or the program's other threads', not the step's own work
    cpu_wait_ms: np.ndarray | None = None


def steady_series(
    host_start: np.ndarray | list[int],
    gpu_end: np.ndarray | list[int],
    start: int,
    gpu_start: np.ndarray | list[int] | None = None,
    waited: np.ndarray | list[int] | None = None,
    pass_ended: np.ndarray | list[bool] | None = None,
    compiled_ns: np.ndarray | list[int] | None = None,
    threads: np.ndarray | list[int] | None = None,
    cpu_wait: np.ndarray | list[int] | None = None,
) -> SteadySeries:
    """The series from step ``start`` on. The critical path of the first steady step still
    uses the step before it (it may have been queued behind the last warm-up step), so it
    is computed over the whole series and then cut; the cadence counts intervals between
    steady steps only.

    ``compiled_ns`` (per step, :func:`time_inside` of the compilations): a steady step that compiled is
    left out of the critical paths (the p50) and of the cadence, as a warm-up step is
    (compile_infer.py: dynamo compiling again for the first pass's last, smaller batch, 514
    ms among 1.1 ms batches, read the rate 40x slow) — unless half the steady steps or more
    compiled: recompiling is then the program's steady work, kept (``compiles_kept``)."""
    h, g = _ns(host_start), _ns(gpu_end)
    k = min(max(int(start), 0), max(h.size - 1, 0))
    cp = critical_path_ns(h, g, threads)[k:] / 1e6
    # host_lead_ns[i] belongs to step i + 1: the steady steps from k are entries k - 1 on.
    lead = host_lead_ns(h, g, threads)[max(k - 1, 0) :] / 1e6
    compiled = None if compiled_ns is None else _ns(compiled_ns)[k : h.size] > 0
    kept_compiles = 0
    if compiled is not None and (not compiled.any() or compiled.sum() * 2 >= compiled.size):
        kept_compiles, compiled = int(compiled.sum()), None
    cad = cadence(
        h[k:], g[k:], None if gpu_start is None else _ns(gpu_start)[k:], None if waited is None else _ns(waited)[k:],
        None if pass_ended is None else np.asarray(pass_ended, dtype=bool)[k:], compiled, first=k,
        threads=None if threads is None else np.asarray(threads)[k:])
    steps = np.arange(k, k + cp.size)
    paused = paused_before(h, g, gpu_start, waited, pass_ended)[k:] if h.size > 1 else np.zeros(cp.size, dtype=bool)
    if compiled is not None:
        cp, steps, paused = cp[~compiled], steps[~compiled], paused[~compiled]
    elif kept_compiles:
        cad = replace(cad, compiles_kept=kept_compiles)
    wait = None if cpu_wait is None else _per_step_ns(cpu_wait, h.size)[steps] / 1e6
    return SteadySeries(cp.astype(np.float64), lead.astype(np.float64), cad, steps, paused, wait)
