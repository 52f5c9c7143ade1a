"""A CPU program's steps: where each step's host time went, operator by operator.

What ``torch.profiler``'s ``key_averages().table()`` shows for a whole trace, per step: for
each CPU operator (``aten::mm``, ...) its calls, self time (its duration less that of the
events directly inside it) and total time, averaged over the steps; the same for the
module and ``record_function`` ranges inside the steps; the step latency from the traced
step ranges; and the observations the evidence supports (one operator dominating, the data
loader, time outside any operator). Pure: a Profile and its step table in, a
:class:`CpuView` out (:func:`breakdown`); the words are in :mod:`perfdoctor.reports.cpu`.

Nesting is per host thread: an event is inside the innermost earlier event of its thread
that encloses it (events sorted by start, the longer first; :func:`child_ns`), as the
profiler builds its event tree. Each operator and range is counted in the step its start falls in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from perfdoctor.declare import DECLARE_PREFIX
from perfdoctor.analysis.steps import ran_no_gpu
from perfdoctor.analysis.hostgaps import PYTHON_SOURCE
from perfdoctor.analysis.timeline import union_per_group
from perfdoctor.names.codes import equals, starts_with
from perfdoctor.names.ranges import AOTI_PREFIX, COMPILED_FX, COMPILED_OPS, COMPILED_PREFIX, DATA_LOADER_PREFIX, PROCESS_WAIT_RANGE, WAIT_RANGE, WORKED_RANGE
from perfdoctor.schema import DATA_LOADER_SOURCE
from perfdoctor.profile import LightSteps, Profile
from perfdoctor.text import count, percent, value

MODULE_SOURCES = ("record_function", "python")  # user ranges and Python frames ("nn.Module: Linear_0")

# When an observation is worth a reader's time (the evidence in the trace must hold):
# one operator whose self time is half the step is the step's cost: the step gets faster
# only if that operator does.
DOMINANT_SHARE = 0.5
# The DataLoader above 5 % of the step: the seed pack's data-loading threshold (rule
# data-loading), the same bound on a CPU step.
DATA_LOADING_SHARE = 0.05
# Host time outside every operator (Python between ops, or work the profiler does not
# record) above a quarter of the step: interpretation, not computation, sets the step time.
OUTSIDE_OPS_SHARE = 0.25
# The step's thread waiting for work done elsewhere (a pool's futures, a queue) above 5 % of
# the step: the DataLoader's bound (the step's input made elsewhere is data loading by
# another name).
WAITS_SHARE = DATA_LOADING_SHARE

# The iterator class torch names in the fetch's range ("enumerate(DataLoader)#_MultiProcessing
# DataLoaderIter.__next__"): with it the batches already come from worker processes.
MULTIPROCESS_ITER = "_MultiProcessingDataLoaderIter"
NO_WORKERS_ADVICE = ("load in worker processes (DataLoader(num_workers=N), persistent_workers=True, prefetch_factor) so "
                     "batches are ready when the step asks")
# With workers the step waits for them: they make batches slower than it uses them. The trace
# holds only this process, so it cannot say which of their costs is the larger.
WORKERS_ADVICE = ("the DataLoader already loads in worker processes and the step still waits for them: they make batches "
                  "slower than the step uses them. Make each sample cheaper (the Dataset's __getitem__ and transforms: "
                  "profile one worker, or move the per-sample work to batched tensor ops), or add workers (num_workers, "
                  "while CPU cores are free); prefetch_factor only absorbs bursts, persistent_workers=True saves the "
                  "workers' start at each epoch, pin_memory=True the copy to a GPU")
# With workers, the fetch spent under this share of its time waiting for them (perfdoctor
# run's traced passes mark the waits: loader_waits): their batches were ready, and the time is
# this process taking each in. An HF pipeline with 2 workers: 0.38 of a 3.8 ms fetch waited,
# the rest unpickled a batch of strings; "add workers" cannot win it back.
READY_SHARE = 0.5
RECEIVE_ADVICE = ("the workers had the batches ready: the fetch's time is this process taking each batch in, not waiting for "
                  "them, so more workers do not help. What crosses from a worker is pickled whole unless it is a tensor (whose "
                  "storage goes through shared memory): return tensors from the Dataset and collate_fn (tokenise or decode into "
                  "tensors in the workers, not lists of strings, dicts or many small objects), fewer and larger tensors per batch; "
                  "on a GPU, pin_memory=True takes the batches in on its own thread")
# The step's thread blocked on another thread or process (perfdoctor run's traced passes
# mark Condition.wait, a SimpleQueue's get, a blocking socket read, time.sleep: record/bootstrap/waits.py).
# Another process's work is in no trace of this one; a thread's operators are, and count as
# operators, not as the wait.
WAITS_ADVICE = ("the step's time is spent where that work runs: another thread of this process (a producer filling a "
                "queue) is in this trace, its operators beside the step's; another process (a ProcessPoolExecutor, a "
                "multiprocessing Pool) is in no trace of this one, so profile it there. If it prepares the step's input, "
                "overlap it with the step (submit the next batch's work before running this one, as a DataLoader with "
                "workers prefetches), or make it cheaper or wider (more workers while CPU cores are free); a deliberate "
                "pause (a rate limit, Event.wait(timeout)) is no cost to remove")
# Forward operators: composite ops a backward pass's own work never calls (a linear layer's
# backward runs aten::mm, a layer norm's native_layer_norm_backward). One inside the autograd
# engine's evaluate_function is the forward run again: activation checkpointing's recompute
# (torch.utils.checkpoint, transformers' gradient_checkpointing_enable()), which a block stack
# paid ~20 % of its step for (half of its forward's matmuls ran under the backward)
FORWARD_OPS = ("aten::linear", "aten::matmul", "aten::layer_norm", "aten::group_norm", "aten::batch_norm", "aten::rms_norm",
               "aten::scaled_dot_product_attention", "aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::embedding",
               "aten::gelu", "aten::softmax", "aten::dropout")
BACKWARD_NODE = "autograd::engine::evaluate_function: "
# the recompute's share of the step from which it is an observation
RECOMPUTE_SHARE = 0.10
RECOMPUTE_ADVICE = ("each checkpointed block runs its forward twice, once more in the backward: where memory allows, "
                    "checkpoint fewer blocks (every other layer, or none), or save the costly outputs and recompute only the "
                    "cheap ops (selective checkpointing: torch.utils.checkpoint's context_fn with "
                    "torch.utils.checkpoint.create_selective_checkpoint_contexts)")
# Where the Python between operators is: a trace with stacks has the frames already.
RECORD_STACKS = "a trace with Python stacks (torch.profiler.profile(with_stack=True)) names the lines"
STACKS_NAME_LINES = "the Python frames among the modules and ranges, by self time, name the lines"


@dataclass(frozen=True)
class Observation:
    """One thing the breakdown shows, with the numbers that show it."""

    kind: str  # "dominant-op" | "data-loading" | "waits" | "outside-ops" | "recompute"
    title: str
    evidence: str
    advice: str
    ms_per_step: float  # the step time it concerns (what fixing it could win back at most)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "title": self.title, "evidence": self.evidence, "advice": self.advice,
                "ms_per_step": self.ms_per_step}


@dataclass
class CpuView:
    """The CPU breakdown of the steps. Tables are per step (means over ``steps``):
    ``ops``: name, calls, self_ms, total_ms, self_share (of the mean step's host time), largest
    self time first, the operators after the first ``top`` summed into one last row (``rest``
    True, named "(N others)", its total NaN: nested operators would count twice);
    ``modules``: the same columns for the ranges."""

    steps: int
    step_ms: np.ndarray  # each step's host duration (its range)
    ops: pd.DataFrame
    modules: pd.DataFrame
    op_self_ms: float  # Σ operator self time per step (all threads)
    outside_ops_ms: float  # per step, the time no operator runs on any thread, nor a DataLoader fetch, nor a wait
    data_loading_ms: float  # per step, the DataLoader's __next__
    # per step, the step's thread waiting for another thread or process (perfdoctor.wait ranges)
    # while no operator runs on any thread and no DataLoader fetch is open
    waits_ms: float = 0.0
    # the fetch's iterator runs worker processes (_MultiProcessingDataLoaderIter): the advice
    # cannot be "use workers"
    loader_workers: bool = False
    # the light pass's steady steps where its step is the DataLoader's fetch: (the fetch's
    # median ms, the step's median ms), untraced (untraced_fetch); None otherwise
    untraced_fetch: tuple[float, float] | None = None
    # per step, the part of the DataLoader's __next__ its thread spent waiting for the workers
    # (or for pin_memory's thread): loader_waits; None where the trace does not mark the waits
    data_waiting_ms: float | None = None
    has_stacks: bool = False  # Python frames in the trace (with_stack=True): the module table names the lines
    # per step, the time some operator runs on some thread, and how many threads ran one: an
    # ensemble fanned out to a thread pool runs its models' operators at once, their self
    # times adding up past the step (4 LSTMs: 247 % of it)
    op_busy_ms: float = 0.0
    op_threads: int = 1
    # how the step's model is compiled already ("torch.compile", "AOTInductor", "TorchScript":
    # :func:`compiled_as`), None where it runs eager: the advice cannot be "torch.compile"
    compiled: str | None = None
    # per step, the forward run again inside the backward (activation checkpointing's
    # recompute: :func:`recomputed_ms`)
    recompute_ms: float = 0.0
    observations: list[Observation] = field(default_factory=list)

    @property
    def overlapping(self) -> bool:
        """Operators ran on several threads at once: their self times add up past the time
        any of them ran (by more than 5 %: a thread's op starting as another's ends)."""
        return self.op_threads > 1 and self.op_self_ms > 1.05 * self.op_busy_ms

    @property
    def mean_ms(self) -> float:
        """The mean step: every per-step figure of the view is a mean over the steps (their
        sums / n), so a share is of this step, not of the median one."""
        return float(self.step_ms.mean())

    def latency(self) -> dict[str, float]:
        v = self.step_ms
        return {"min": float(v.min()), "p50": float(np.percentile(v, 50)), "p90": float(np.percentile(v, 90)),
                "p99": float(np.percentile(v, 99)), "max": float(v.max())}

    def to_json(self) -> dict[str, Any]:
        def rows(df: pd.DataFrame) -> list[dict[str, Any]]:
            return [{k: (v.item() if isinstance(v, np.generic) else v) for k, v in r.items()} for r in df.to_dict("records")]

        return {"steps": self.steps, "step_latency_ms": self.latency(), "ops_per_step": rows(self.ops),
                "modules_per_step": rows(self.modules), "op_self_ms_per_step": self.op_self_ms,
                "outside_ops_ms_per_step": self.outside_ops_ms, "data_loading_ms_per_step": self.data_loading_ms,
                "waits_ms_per_step": self.waits_ms,
                "observations": [o.to_json() for o in self.observations]}


def is_cpu_only(profile: Profile) -> bool:
    """No GPU ran (:func:`perfdoctor.analysis.steps.ran_no_gpu`), but CPU operators did."""
    return ran_no_gpu(profile) and not profile.ops.empty


def child_ns(start: np.ndarray, end: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """Per event, the time the events directly inside it (same thread) cover: each event is
    charged to the innermost earlier event that encloses it (starts no later, ends no
    earlier). Events need not nest strictly: with ``with_stack=True`` a ``record_function``
    range opens inside the ``__enter__`` frame and closes inside ``__exit__``, so the frame
    it only overlaps is skipped and the function around both loses the range's time
    (charged to ``__enter__``, whose self time clamps to 0, it left the optimizer's wrapper
    2.47 of its 2.51 ms as self time). Such children overlap each other (``__enter__`` and
    the range): their union is taken, not their sum, which would count the overlap twice."""
    n = len(start)
    child = np.zeros(n, dtype=np.int64)
    if not n:
        return child
    order = np.lexsort((-(end - start), start, tid))  # by thread, then start, the enclosing (longer) first
    acc = [0] * n  # by position in that order
    reach = [-(1 << 63)] * n  # per event, the latest end among its children so far (they come by start)
    stack: list[int] = []  # open events (positions); one only overlapped may stay below the top after it ended
    ends: list[int] = []  # their ends, beside them: the sweep reads nothing else of the stack
    thread = None
    for k, (si, ei, ti) in enumerate(zip(start[order].tolist(), end[order].tolist(), tid[order].tolist())):
        if ti != thread:
            stack, ends, thread = [], [], ti
        while ends and ends[-1] <= si:
            stack.pop()
            ends.pop()
        if ends:
            j = len(ends) - 1
            # the top encloses k under strict nesting; else down past the events k outlives
            while j >= 0 and ends[j] < ei:
                j -= 1
            if j >= 0:
                p = stack[j]
                r = reach[p]
                if ei > r:  # the part of k no earlier child of p covered (children come by start)
                    acc[p] += ei - (si if si > r else r)
                    reach[p] = ei
        stack.append(k)
        ends.append(ei)
    child[order] = acc
    return child


def _step_of(start: np.ndarray, step_start: np.ndarray, step_end: np.ndarray,
             tid: np.ndarray | None = None, step_tid: np.ndarray | None = None) -> np.ndarray:
    """The step each start falls in (steps in host order), -1 outside every step. Steps of
    one thread do not overlap; where they run on several threads at once (``step_tid``: a
    thread pool's requests, each calling the model), an event on a step's thread (``tid``)
    is that thread's step's, and one on another thread (the autograd engine's) the last
    step begun before it. By time alone, 8 threads' requests took each other's operators:
    "10.5 ms per step in no operator", and a client thread's wait 100 % of a worker's step."""
    k = np.searchsorted(step_start, start, side="right") - 1
    inside = (k >= 0) & (start < step_end[np.clip(k, 0, None)])
    k = np.where(inside, k, -1)
    if tid is None or step_tid is None or np.unique(step_tid).size < 2:
        return k
    for thread in np.unique(step_tid):
        rows = np.flatnonzero(step_tid == thread)
        mine = np.flatnonzero(tid == thread)
        j = np.searchsorted(step_start[rows], start[mine], side="right") - 1
        held = (j >= 0) & (start[mine] < step_end[rows][np.clip(j, 0, None)])
        k[mine] = np.where(held, rows[np.clip(j, 0, None)], -1)
    return k


def _table(names: np.ndarray, self_ns: np.ndarray, total_ns: np.ndarray, steps: int, step_ms: float, top: int) -> pd.DataFrame:
    df = pd.DataFrame({"name": names, "calls": 1, "self_ns": self_ns, "total_ns": total_ns})
    g = df.groupby("name", sort=False).sum().sort_values(["self_ns", "total_ns"], ascending=False)
    head, rest = g.iloc[:top], g.iloc[top:]
    if len(rest):
        head = pd.concat([head, pd.DataFrame({"calls": [rest["calls"].sum()], "self_ns": [rest["self_ns"].sum()],
                                              "total_ns": [np.nan]}, index=[f"({len(rest)} others)"])])
    out = pd.DataFrame({
        "name": head.index.astype(str),
        "rest": np.arange(len(head)) >= top,
        "calls": head["calls"].to_numpy(np.float64) / steps,
        "self_ms": head["self_ns"].to_numpy(np.float64) / 1e6 / steps,
        "total_ms": head["total_ns"].to_numpy(np.float64) / 1e6 / steps,
    })
    out["self_share"] = out["self_ms"] / step_ms if step_ms > 0 else np.nan
    return out


def breakdown(profile: Profile, steps: pd.DataFrame, top: int = 10) -> CpuView | None:
    """The CPU breakdown of the steps in ``steps`` (the timeline's step table: name, tid,
    host_start_ns, host_end_ns); None without steps or without CPU operators in them."""
    if steps.empty or profile.ops.empty:
        return None
    st = steps.sort_values("host_start_ns")
    s0, s1 = st["host_start_ns"].to_numpy(np.int64), st["host_end_ns"].to_numpy(np.int64)
    ops, r = profile.ops, profile.ranges
    mods = r[r["source"].isin(MODULE_SOURCES) & ~r["name"].str.startswith(DECLARE_PREFIX, na=False)]
    mods = mods[~mods["name"].isin(set(st["name"]) | {WORKED_RANGE})]  # the step range itself is the step, not a module in it (nor a wait's marker)
    # a wait on a thread that runs no step is another thread's (a server's clients waiting
    # on their futures read 100.6 % of the worker's batch step), not the step's
    foreign = mods["name"].str.startswith(WAIT_RANGE, na=False) & ~mods["tid"].isin(set(st["tid"]))
    mods = mods[~foreign]
    # One event tree of ranges and operators: a module's self time is what its operators leave.
    start = np.concatenate([ops["start_ns"].to_numpy(np.int64), mods["start_ns"].to_numpy(np.int64)])
    end = np.concatenate([ops["end_ns"].to_numpy(np.int64), mods["end_ns"].to_numpy(np.int64)])
    tid = np.concatenate([ops["tid"].to_numpy(np.int64), mods["tid"].to_numpy(np.int64)])
    names = np.concatenate([ops["name"].to_numpy(object), mods["name"].to_numpy(object)])
    is_op = np.arange(len(start)) < len(ops)
    st_tid = st["tid"].to_numpy(np.int64)
    k = _step_of(start, s0, s1, tid, st_tid)
    inside = k >= 0
    if not (inside & is_op).any():
        return None
    n = len(st)
    step_ms = (s1 - s0) / 1e6
    total = end - start
    self_ns = np.maximum(total - child_ns(start, end, tid), 0)
    # Every per-step figure below is a mean over the steps (their sums / n), so a share is
    # of the mean step: against the median, a few tracer-stretched steps (a loaded CPU: p50
    # 8.4 ms, p90 188 ms) made one operator "417 % of the step".
    mean = float(step_ms.mean())  # the tables' share of CpuView.mean_ms, before the view exists
    sel_op, sel_mod = inside & is_op, inside & ~is_op
    op_table = _table(names[sel_op], self_ns[sel_op], total[sel_op], n, mean, top)
    mod_table = _table(names[sel_mod], self_ns[sel_mod], total[sel_mod], n, mean, top)
    # Time in no operator on any thread (an operator on the autograd thread is work too):
    # the interpreter between operators, or work the profiler does not record.
    # Nor in the DataLoader's fetch: its wait (for worker processes, which the trace does not
    # hold) is data loading, said once (seen 10.37 ms "no operator" + 9.15 ms data loading in
    # an 11.37 ms step).
    dl = r[r["source"] == DATA_LOADER_SOURCE]
    d0, d1 = dl["start_ns"].to_numpy(np.int64), dl["end_ns"].to_numpy(np.int64)
    dk = _step_of(d0, s0, s1, dl["tid"].to_numpy(np.int64), st_tid)
    busy = union_per_group(np.maximum(start[sel_op], s0[k[sel_op]]), np.minimum(end[sel_op], s1[k[sel_op]]), k[sel_op], n)
    a, b, g = (np.concatenate([start[sel_op], d0[dk >= 0]]), np.concatenate([end[sel_op], d1[dk >= 0]]),
               np.concatenate([k[sel_op], dk[dk >= 0]]))
    covered = union_per_group(np.maximum(a, s0[g]), np.minimum(b, s1[g]), g, n)
    # The waits count where nothing above covers them: what they add to the union.
    w0, w1, wk = _waits(r, st_tid, s0, s1)
    a, b, g = np.concatenate([a, w0]), np.concatenate([b, w1]), np.concatenate([g, wk])
    waited = union_per_group(np.maximum(a, s0[g]), np.minimum(b, s1[g]), g, n)
    outside = float(np.mean(np.maximum((s1 - s0) - waited, 0))) / 1e6
    data_ms = fetch_ms(r, s0, s1)
    workers = bool(dl["name"][dk >= 0].str.contains(MULTIPROCESS_ITER, regex=False, na=False).any())
    view = CpuView(steps=n, step_ms=step_ms, ops=op_table, modules=mod_table, op_self_ms=float(self_ns[sel_op].sum()) / 1e6 / n,
                   outside_ops_ms=outside, data_loading_ms=data_ms, waits_ms=float(np.mean(waited - covered)) / 1e6, loader_workers=workers,
                   data_waiting_ms=loader_waits(r, s0, s1), untraced_fetch=untraced_fetch(profile.light),
                   has_stacks=bool(equals(r["source"], PYTHON_SOURCE).any()), op_busy_ms=float(busy.mean()) / 1e6,
                   op_threads=int(np.unique(tid[sel_op]).size))
    view.recompute_ms = recomputed_ms(ops, s0, s1, st_tid)
    inside_ranges = r["name"][_step_of(r["start_ns"].to_numpy(np.int64), s0, s1, r["tid"].to_numpy(np.int64), st_tid) >= 0]
    view.compiled = compiled_as(pd.concat([st["name"], inside_ranges]), names[sel_op])
    view.observations = observations(view)
    return view


def recomputed_ms(ops: pd.DataFrame, s0: np.ndarray, s1: np.ndarray, step_tid: np.ndarray) -> float:
    """Per step (``s0``/``s1``: the steps' host starts and ends), the time forward operators
    (:data:`FORWARD_OPS`) ran inside the autograd engine's evaluate_function on the same
    thread, called there directly, not by another operator: the forward run again in the
    backward (activation checkpointing). The union of their spans, nested ones counted once.

    Why directly: a backward formula under ``torch.func.vmap`` runs its ``aten::mm`` through
    the batching rule, which calls ``aten::matmul`` (``vmap(grad(...))``'s per-sample
    gradients: 8 matmuls a step inside AddmmBackward0, read as a 13 % recompute of a program
    that checkpoints nothing). A checkpointed block's forward is called from Python inside the
    node (the saved tensors' unpack hook, or CheckpointFunctionBackward)."""
    names = ops["name"]
    node = starts_with(names, BACKWARD_NODE)  # each distinct name tested once
    fwd = names.isin(FORWARD_OPS).to_numpy()
    if not node.any() or not fwd.any() or not len(s0):
        return 0.0
    aten = starts_with(names, "aten::")  # operators (a node's own apply, AddmmBackward0, is none)
    start, end, tid = (ops[c].to_numpy(np.int64) for c in ("start_ns", "end_ns", "tid"))
    inside = np.zeros(len(ops), dtype=bool)
    for thread in np.unique(tid[node]):
        mine = node & (tid == thread)
        order = np.argsort(start[mine], kind="stable")
        a, b = start[mine][order], np.maximum.accumulate(end[mine][order])  # the nodes' spans, nested ones held by their outer
        # every operator of the thread inside a node, in nesting order (start, then the longer first)
        ask = np.flatnonzero(aten & (tid == thread))
        k = np.searchsorted(a, start[ask], side="right") - 1
        held = (k >= 0) & (end[ask] <= b[np.clip(k, 0, None)])
        ask, k = ask[held], k[held]
        order = np.lexsort((-end[ask], start[ask]))
        ask, k = ask[order], k[order]
        # an operator is called by another where one before it inside the same node ends at or after
        # its end: the prefix maximum of the ends within each node (each node's ends lifted above
        # the earlier nodes', so that one running maximum serves them all)
        lifted = (end[ask] - a[0]) + k * (int(b[-1] - a[0]) + 1)
        before = np.r_[np.iinfo(np.int64).min, np.maximum.accumulate(lifted)[:-1]] if ask.size else lifted
        inside[ask[fwd[ask] & (before < lifted)]] = True
    k = _step_of(start[inside], s0, s1, tid[inside], step_tid)
    held = k >= 0
    if not held.any():
        return 0.0
    k = k[held]
    spans = union_per_group(np.maximum(start[inside][held], s0[k]), np.minimum(end[inside][held], s1[k]), k, len(s0))
    return float(spans.sum()) / 1e6 / len(s0)


def untraced_fetch(light: LightSteps | None) -> tuple[float, float] | None:
    """(the fetch's median ms, the step's median ms) over the light pass's steady steps, where
    its step is a DataLoader's fetch timed as the loop iteration (``LightSteps.call_ns``: each
    fetch alone); None elsewhere, or with fewer than 3 such steps. The tracer stretches a
    fetch of many small operators more than the step around it: poutyne's ``fit`` on numpy
    arrays indexes and stacks its 32 samples one by one (197 operator events a fetch), 6.3 %
    of the traced step, 5.2 % of the light pass's (0.33 and 0.29 ms of 5.3 and 5.6)."""
    if light is None or light.call_ns is None or not light.name.startswith(DATA_LOADER_PREFIX):
        return None
    first = light.steady_start or 0
    calls, steps = light.call_ns[first:], (light.gpu_end_ns - light.host_start_ns)[first:]
    timed = calls >= 0
    if timed.sum() < 3:
        return None
    return float(np.median(calls[timed])) / 1e6, float(np.median(steps[timed])) / 1e6


def fetch_ms(ranges: pd.DataFrame, s0: np.ndarray, s1: np.ndarray) -> float:
    """Per step (``s0``/``s1``: the steps' host starts and ends), the ms of the DataLoader's
    ``__next__`` ranges that start inside them."""
    dl = ranges[ranges["source"] == DATA_LOADER_SOURCE]
    d0, d1 = dl["start_ns"].to_numpy(np.int64), dl["end_ns"].to_numpy(np.int64)
    return float((d1 - d0)[_step_of(d0, s0, s1) >= 0].sum()) / 1e6 / max(len(s0), 1)


def loader_waits(ranges: pd.DataFrame, s0: np.ndarray, s1: np.ndarray) -> float | None:
    """Per step (``s0``/``s1``: the steps' host starts and ends), the ms the DataLoader's
    ``__next__`` ranges inside them spent waiting, on their own thread: for a worker's batch
    (:data:`~perfdoctor.names.ranges.PROCESS_WAIT_RANGE`, a ``multiprocessing`` queue's poll)
    or for pin_memory's thread (:data:`~perfdoctor.names.ranges.WAIT_RANGE`, its queue's
    ``Condition.wait``); the rest of the fetch took the batch in. None where the trace marks
    no wait for another process (not ``perfdoctor run``'s traced pass, or no worker process
    ran): unknown, not zero."""
    names = ranges["name"]
    if not len(s0) or not equals(names, PROCESS_WAIT_RANGE).any():
        return None
    fetches = ranges[ranges["source"] == DATA_LOADER_SOURCE]
    waits = ranges[equals(names, PROCESS_WAIT_RANGE) | equals(names, WAIT_RANGE)]
    waited = 0
    for tid, f in fetches.groupby("tid", sort=False):
        f = f.sort_values("start_ns", kind="stable")
        f0, f1 = f["start_ns"].to_numpy(np.int64), f["end_ns"].to_numpy(np.int64)
        stepped = _step_of(f0, s0, s1) >= 0
        w = waits[waits["tid"] == tid]
        a, b = w["start_ns"].to_numpy(np.int64), w["end_ns"].to_numpy(np.int64)
        k = np.searchsorted(f0, a, side="right") - 1  # the fetch each wait began in (a thread's fetches do not overlap)
        ok = k >= 0
        ok[ok] &= (a[ok] < f1[k[ok]]) & stepped[k[ok]]
        waited += int((np.minimum(b[ok], f1[k[ok]]) - a[ok]).sum())
    return waited / len(s0) / 1e6


def compiled_as(range_names: pd.Series, op_names: np.ndarray) -> str | None:
    """How the steps' model is already compiled, from the names of the steps and the ranges
    and operators inside them: torch.compile's calls (the light pass's ``torch.compile: fn``
    step, inductor's ``## Call CompiledFxGraph`` range, the ``Torch-Compiled Region`` and
    ``TorchDynamo Cache Lookup`` operators), an AOTInductor model's calls, or a TorchScript
    method (an operator without a namespace, ``forward``: a scripted or traced module's
    call, whose graph's own ops, once frozen, record no event); None: eager."""
    ranges = range_names.astype(str)
    if ranges.str.startswith(AOTI_PREFIX).any():
        return "AOTInductor"
    if ranges.str.startswith((COMPILED_PREFIX, COMPILED_FX)).any() or any(str(n).startswith(COMPILED_OPS) for n in op_names):
        return "torch.compile"
    if any(n == "forward" for n in op_names):
        return "TorchScript"
    return None


def _waits(ranges: pd.DataFrame, step_tid: np.ndarray, s0: np.ndarray, s1: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The waits (start, end, step) that start inside a step on the step's own thread: another
    thread's wait (a prefetch thread blocked on its queue) is not the step's."""
    w = ranges[equals(ranges["name"], WAIT_RANGE)]
    w0, w1, w_tid = w["start_ns"].to_numpy(np.int64), w["end_ns"].to_numpy(np.int64), w["tid"].to_numpy(np.int64)
    wk = _step_of(w0, s0, s1, w_tid, step_tid)
    mine = (wk >= 0) & (w_tid == step_tid[np.clip(wk, 0, None)])
    return w0[mine], w1[mine], wk[mine]


def observations(view: CpuView) -> list[Observation]:
    """What the breakdown shows, each only where its evidence holds (thresholds above), as
    shares of the mean step (:attr:`CpuView.mean_ms`)."""
    step_ms = view.mean_ms
    found: list[Observation] = []
    if step_ms <= 0:
        return found
    ops = view.ops[~view.ops["rest"]]
    if len(ops):
        lead = ops.iloc[0]
        method = view.compiled == "TorchScript" and "::" not in str(lead["name"])
        if lead["self_ms"] >= DOMINANT_SHARE * step_ms and method:
            # a frozen / optimize_for_inference graph's ops (prim::mkldnn_convolution, fusion
            # groups) emit no event: their time is the method's own
            found.append(Observation(
                "dominant-op", f"A TorchScript method's own time is most of the step: {lead['name']}",
                f"{lead['name']}: {value(lead['self_ms'], 'ms')} self time per step ({percent(lead['self_share'])} of the "
                f"{value(step_ms, 'ms')} step, mean), {count(lead['calls'])} calls, in no operator the profiler recorded: "
                "the scripted graph's own ops (a frozen graph's convolutions, its fusion groups) record no event",
                "profile the model before torch.jit.freeze / optimize_for_inference (or the eager model) to see which "
                "operators these are; then fewer or smaller calls, a lower precision, or more intra-op threads (torch.set_num_threads)",
                float(lead["self_ms"])))
        elif lead["self_ms"] >= DOMINANT_SHARE * step_ms:
            found.append(Observation(
                "dominant-op", f"One operator is most of the step: {lead['name']}",
                f"{lead['name']}: {value(lead['self_ms'], 'ms')} self time per step ({percent(lead['self_share'])} of the "
                f"{value(step_ms, 'ms')} step, mean), {count(lead['calls'])} calls",
                "the step gets faster only if this operator does: fewer or smaller calls, a lower precision, "
                f"more intra-op threads (torch.set_num_threads){'' if view.compiled else ', or torch.compile to fuse what surrounds it'}",
                float(lead["self_ms"])))
    untraced = view.untraced_fetch
    # the fetch's share of the step, untraced where the light pass timed it (the tracer's cost
    # per operator falls on a fetch of many small ones more than on the step)
    fetch_share = untraced[0] / untraced[1] if untraced is not None and untraced[1] > 0 else view.data_loading_ms / step_ms
    if fetch_share >= DATA_LOADING_SHARE:
        waiting = view.data_waiting_ms
        ready = view.loader_workers and waiting is not None and waiting < READY_SHARE * view.data_loading_ms
        found.append(Observation(
            "data-loading", "The step takes in its data (DataLoader): the workers' batches were ready" if ready
            else "The step waits for its data (DataLoader)",
            f"DataLoader __next__{f' ({MULTIPROCESS_ITER}: worker processes)' if view.loader_workers else ''}: "
            f"{value(view.data_loading_ms, 'ms')} per step ({percent(view.data_loading_ms / step_ms)} "
            f"of the {value(step_ms, 'ms')} step, mean)"
            + (f", of which {value(waiting, 'ms')} waiting for the workers" if view.loader_workers and waiting is not None else "")
            + (f"; untraced, the light pass's median fetch {value(untraced[0], 'ms')} of its {value(untraced[1], 'ms')} step "
               f"({percent(fetch_share)})" if untraced is not None else ""),
            RECEIVE_ADVICE if ready else WORKERS_ADVICE if view.loader_workers else NO_WORKERS_ADVICE,
            untraced[0] if untraced is not None else view.data_loading_ms))
    if view.waits_ms >= WAITS_SHARE * step_ms:
        found.append(Observation(
            "waits", "The step waits for other threads or processes (a pool's results, a queue)",
            f"the step's thread blocked (perfdoctor.wait) while no operator ran on any thread: {value(view.waits_ms, 'ms')} "
            f"per step ({percent(view.waits_ms / step_ms)} of the {value(step_ms, 'ms')} step, mean)",
            WAITS_ADVICE, view.waits_ms))
    if view.recompute_ms >= RECOMPUTE_SHARE * step_ms:
        found.append(Observation(
            "recompute", "The backward runs the forward again (activation checkpointing)",
            f"forward operators ({', '.join(n.removeprefix('aten::') for n in FORWARD_OPS[:3])}, ...) inside the backward: "
            f"{value(view.recompute_ms, 'ms')} per step ({percent(view.recompute_ms / step_ms)} of the {value(step_ms, 'ms')} step, mean)",
            RECOMPUTE_ADVICE, view.recompute_ms))
    if view.outside_ops_ms >= OUTSIDE_OPS_SHARE * step_ms:
        found.append(Observation(
            "outside-ops", "Much of the step runs in no operator (Python between ops, or work the profiler does not record)",
            f"{value(view.outside_ops_ms, 'ms')} per step in no torch operator on any thread{' and no DataLoader fetch' if view.data_loading_ms else ''}"
            f"{', not waiting' if view.waits_ms else ''} "
            f"({percent(view.outside_ops_ms / step_ms)} of the {value(step_ms, 'ms')} step, mean)",
            f"the operators are not what sets the step time: {STACKS_NAME_LINES if view.has_stacks else RECORD_STACKS}; "
            f"batch per-element Python work into fewer, larger tensor operations{'' if view.compiled else ', or torch.compile the step'}",
            view.outside_ops_ms))
    return found
