"""Step ownership across threads: which step each host call and each GPU activity belongs to.

``steps.find_steps`` (perfdoctor 0.x) gives a call to the step whose host range contains the
call's start ON THE SAME THREAD. Real programs launch a step's GPU work from other threads
too: the autograd engine runs backward on its own thread, DDP's reducer launches its
all-reduces from there, a serving engine or a user program has worker threads. That work
is part of the step, and leaving it out undercounts kernels, launches and GPU time.

Rule implemented here: a call belongs to the step whose host window [start, end] contains
the call's START — on the step's own thread first; a call on any other thread belongs to
the step whose window contains it in time (steps of one name do not overlap in time, so the
window identifies the step). When windows of different steps do overlap (nested or
concurrent ranges on several threads), a call on one of the steps' threads keeps its own
thread's step and a call on a third thread goes to the step with the LATEST start among
those containing it (the innermost of nested ranges). GPU activities follow the call that
launched them, by correlation id, so a CUDA-graph replay (one launch, many kernels) is owned
whole by the step of its ``cudaGraphLaunch``.

Pure functions over arrays; results are aligned with ``profile.calls`` / ``profile.activities``
like :attr:`perfdoctor.analysis.steps.Steps.call_step` / ``activity_step``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from perfdoctor.names import api as apinames
from perfdoctor.names.codes import equals
from perfdoctor.profile import Profile


@dataclass
class Ownership:
    """Which step owns each call and each GPU activity (-1: none).

    ``call_step`` / ``activity_step``: int64 Series aligned with ``profile.calls`` /
    ``profile.activities`` (same index), positions in the step table. ``call_same_thread``:
    bool array aligned with calls, True where the owner was found on the call's own thread
    (False for calls owned across threads and for unowned calls).
    """

    call_step: pd.Series
    activity_step: pd.Series
    call_same_thread: np.ndarray

    @property
    def cross_thread_calls(self) -> int:
        return int(((self.call_step.to_numpy() >= 0) & ~self.call_same_thread).sum())


def _window_arrays(table: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    start_col = "host_start_ns" if "host_start_ns" in table else "start_ns"
    end_col = "host_end_ns" if "host_end_ns" in table else "end_ns"
    return (
        table[start_col].to_numpy(np.int64),
        table[end_col].to_numpy(np.int64),
        table["tid"].to_numpy(np.int64),
    )


def containing(w_start: np.ndarray, w_end: np.ndarray, positions: np.ndarray, t: np.ndarray) -> np.ndarray:
    """For each time in ``t``, the position (from ``positions``, windows sorted by start) of
    the latest-starting window that contains it, or -1.

    Latest-starting containing window: the running maximum of ends tells whether ANY window
    up to i reaches t; when the latest-starting window before t does not contain t but an
    earlier one does (an outer range), we walk back through the (few) overlapping windows.
    """
    out = np.full(t.size, -1, dtype=np.int64)
    if positions.size == 0 or t.size == 0:
        return out
    s, e = w_start[positions], w_end[positions]
    idx = np.searchsorted(s, t, side="right") - 1
    ok = idx >= 0
    safe = np.clip(idx, 0, None)
    direct = ok & (t <= e[safe])
    out[direct] = positions[safe[direct]]
    # Windows that overlap: an earlier (outer) window may still contain t.
    reach = np.maximum.accumulate(e)
    retry = np.flatnonzero(ok & ~direct & (t <= reach[safe]))
    for k in retry:  # rare: only where windows overlap
        j = safe[k]
        while j >= 0:
            if s[j] <= t[k] <= e[j]:
                out[k] = positions[j]
                break
            j -= 1
    return out


def call_steps(table: pd.DataFrame, calls: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """For each call, the position in ``table`` (rows: host_start_ns, host_end_ns, tid —
    ``steps.Steps.table`` — or start_ns, end_ns, tid — step ranges) of the step that owns it,
    and whether it was found on the call's own thread.

    Returns ``(step, same_thread)``: int64 array (-1: no step) and bool array, aligned
    with ``calls``.
    """
    n = len(calls)
    step = np.full(n, -1, dtype=np.int64)
    same = np.zeros(n, dtype=bool)
    if table is None or len(table) == 0 or n == 0:
        return step, same
    w_start, w_end, w_tid = _window_arrays(table)
    order = np.argsort(w_start, kind="stable")
    c_start = calls["start_ns"].to_numpy(np.int64)
    c_tid = calls["tid"].to_numpy(np.int64)
    # 1. the step's own thread
    for tid in np.unique(w_tid):
        positions = order[w_tid[order] == tid]
        mask = np.flatnonzero(c_tid == tid)
        found = containing(w_start, w_end, positions, c_start[mask])
        step[mask] = found
        same[mask] = found >= 0
    # 2. any thread, by time
    rest = np.flatnonzero(step < 0)
    if rest.size:
        step[rest] = containing(w_start, w_end, order, c_start[rest])
    return step, same


def activity_steps(call_step: np.ndarray, calls: pd.DataFrame, activities: pd.DataFrame) -> np.ndarray:
    """Each activity's step: the step of the call with its correlation id (-1 when none).

    Every call with a correlation id can own GPU work (launches, graph launches, async
    copies, memsets). Where a correlation id repeats among calls (it should not), the first
    owned call wins.
    """
    if activities.empty:
        return np.zeros(0, dtype=np.int64)
    corr = calls["correlation"].to_numpy(np.int64)
    keep = (corr >= 0) & (call_step >= 0)
    owner = pd.Series(call_step[keep], index=corr[keep])
    owner = owner[~owner.index.duplicated(keep="first")]
    return activities["correlation"].map(owner).fillna(-1).astype("int64").to_numpy()


def assign(profile: Profile, table: pd.DataFrame) -> Ownership:
    """Owners of every call and GPU activity of ``profile`` for the steps in ``table``."""
    calls, acts = profile.calls, profile.activities
    step, same = call_steps(table, calls)
    act = activity_steps(step, calls, acts)
    return Ownership(
        call_step=pd.Series(step, index=calls.index, dtype="int64"),
        activity_step=pd.Series(act, index=acts.index, dtype="int64"),
        call_same_thread=same,
    )


def step_counts(profile: Profile, table: pd.DataFrame, own: Ownership) -> pd.DataFrame:
    """Per step (rows of ``table``): gpu_start_ns, gpu_end_ns (Int64, <NA> without GPU
    work), kernels, launches, and the share of them from other threads
    (kernels_other_threads, launches_other_threads) — the columns ``steps.find_steps``
    computes, under the cross-thread ownership."""
    acts, calls = profile.activities, profile.calls
    n = len(table)
    a_step = own.activity_step.to_numpy()
    out = pd.DataFrame(index=pd.RangeIndex(n))
    stepped = a_step >= 0
    g = pd.DataFrame({"s": a_step[stepped], "start": acts["start_ns"].to_numpy()[stepped], "end": acts["end_ns"].to_numpy()[stepped]})
    out["gpu_start_ns"] = g.groupby("s")["start"].min().reindex(out.index).astype("Int64")
    out["gpu_end_ns"] = g.groupby("s")["end"].max().reindex(out.index).astype("Int64")
    is_kernel = equals(acts["kind"], "kernel") & stepped
    out["kernels"] = np.bincount(a_step[is_kernel], minlength=n)[:n].astype(np.int64)

    c_step = own.call_step.to_numpy()
    launch = apinames.is_launch(calls["name"]) & (c_step >= 0)
    out["launches"] = np.bincount(c_step[launch], minlength=n)[:n].astype(np.int64)
    other = launch & ~own.call_same_thread
    out["launches_other_threads"] = np.bincount(c_step[other], minlength=n)[:n].astype(np.int64)
    # kernels whose launching call is on another thread than the step's
    corr = calls["correlation"].to_numpy(np.int64)
    other_corr = pd.Index(corr[(c_step >= 0) & ~own.call_same_thread & (corr >= 0)])
    k_other = is_kernel & acts["correlation"].isin(other_corr).to_numpy()
    out["kernels_other_threads"] = np.bincount(a_step[k_other], minlength=n)[:n].astype(np.int64)
    return out
