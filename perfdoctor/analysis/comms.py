"""Communication metrics: how much GPU time collectives take and how much of it is hidden.

Definitions (all times are unions of intervals, so kernels on several streams count once):

``comm_ns``        union of communication kernels (:mod:`perfdoctor.names.families`: NCCL/RCCL,
                   custom all-reduce, symmetric-memory collectives)
``busy_ns``        union of all GPU activities (kernels, copies, memsets)
``comm_share``     comm_ns / busy_ns — the share of busy GPU time spent communicating
``compute_ns``     union of compute-class kernels (HTA's "computation": every kernel that is
                   not communication and not a memcpy/memset)
``overlap_ns``     |comm ∩ compute| = comm_ns + compute_ns − |comm ∪ compute|
``overlap``        overlap_ns / comm_ns — HTA's compute–communication overlap (1.0: every
                   collective ran under compute; 0.0: fully serialized)
``exposed_ns``     comm_ns − overlap_ns — communication the step waits for
``collectives``    number of communication kernels
``mean_collective_us``  mean duration of one communication kernel (small collectives are
                   latency-bound: many short ones suggest bucketing / fusing)

Per step, a window is the step's GPU span [gpu_start_ns, gpu_end_ns] and every activity is
clipped to it (the time view); ``collectives`` counts the communication kernels the step
OWNS (``activity_step``) when ownership is given, else those starting inside the window.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from perfdoctor.names import families
from perfdoctor.profile import Profile

# Why a cross-rank metric is absent for one process (the rules' inputs and the cross-rank
# view say it alike); here because both load this module, and the view's module does not
# load with every rule evaluation.
NEEDS_RANKS = "needs several ranks of one job (perfdoctor run --nproc-per-node N, or a folder of per-rank traces)"

COLUMNS = ("comm_ns", "busy_ns", "compute_ns", "overlap_ns", "exposed_ns", "comm_share", "overlap", "collectives", "mean_collective_us")


def union_ns(starts: np.ndarray, ends: np.ndarray, lo: int | None = None, hi: int | None = None) -> int:
    """Length of the union of ``[start, end)`` intervals, clipped to ``[lo, hi)`` if given."""
    a, b = union_pieces(starts, ends, lo, hi)
    return int((b - a).sum())


def union_pieces(starts: np.ndarray, ends: np.ndarray, lo: int | None = None, hi: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The union of ``[start, end)`` intervals, clipped to ``[lo, hi)`` if given, as disjoint
    pieces ``[a, b)`` in start order: sorted by start, each interval adds what reaches past
    the running maximum of the ends before it. The sweep only compares and picks, so run on
    the positions of the times among a rank's endpoints it cuts the same pieces as on the
    times, for every rank whose endpoints lie in that order (:func:`perfdoctor.analysis.ranks.group_steps`)."""
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    if lo is not None:
        s, e = np.maximum(s, lo), np.maximum(e, lo)
    if hi is not None:
        s, e = np.minimum(s, hi), np.minimum(e, hi)
    if s.size == 0:
        return s, e
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    a = np.maximum(s, np.concatenate(([s[0]], np.maximum.accumulate(e)[:-1])))
    keep = e > a
    return a[keep], e[keep]


def classes(profile: Profile) -> pd.Series:
    """HTA class (compute / communication / memory) of every activity, aligned with it."""
    return families.kernel_classes(profile.activities["name"], profile.activities["kind"])


def _metrics(start: np.ndarray, end: np.ndarray, kclass: np.ndarray, lo: int | None, hi: int | None, collectives: int, coll_ns: int) -> dict:
    comm = kclass == "communication"
    comp = kclass == "compute"
    comm_ns = union_ns(start[comm], end[comm], lo, hi)
    compute_ns = union_ns(start[comp], end[comp], lo, hi)
    # without communication kernels the union of both is the compute union (one sweep less per step)
    either_ns = union_ns(start[comm | comp], end[comm | comp], lo, hi) if comm.any() else compute_ns
    busy_ns = union_ns(start, end, lo, hi)
    overlap_ns = comm_ns + compute_ns - either_ns
    return {
        "comm_ns": comm_ns,
        "busy_ns": busy_ns,
        "compute_ns": compute_ns,
        "overlap_ns": overlap_ns,
        "exposed_ns": comm_ns - overlap_ns,
        "comm_share": comm_ns / busy_ns if busy_ns else float("nan"),
        "overlap": overlap_ns / comm_ns if comm_ns else float("nan"),
        "collectives": collectives,
        "mean_collective_us": coll_ns / collectives / 1e3 if collectives else float("nan"),
    }


def profile_metrics(profile: Profile, window: tuple[int, int] | None = None, kclass: pd.Series | None = None) -> dict:
    """Communication metrics over the whole trace or ``window`` (lo, hi) in ns.

    ``overlap`` and ``comm_share`` are NaN when there is no communication / no GPU work:
    "no collectives" is not "perfectly overlapped".
    """
    acts = profile.activities
    kc = (classes(profile) if kclass is None else kclass).to_numpy()
    start, end = acts["start_ns"].to_numpy(np.int64), acts["end_ns"].to_numpy(np.int64)
    lo, hi = window if window is not None else (None, None)
    comm = kc == "communication"
    if window is not None:
        comm_in = comm & (start >= lo) & (start < hi)
    else:
        comm_in = comm
    coll_ns = int((end[comm_in] - start[comm_in]).sum())
    return _metrics(start, end, kc, lo, hi, int(comm_in.sum()), coll_ns)


def step_metrics(profile: Profile, table: pd.DataFrame, activity_step: pd.Series | np.ndarray | None = None) -> pd.DataFrame:
    """:data:`COLUMNS` per step (rows of ``steps.Steps.table``; a step without GPU work gets
    zeros and NaN ratios)."""
    acts = profile.activities
    order = np.argsort(acts["start_ns"].to_numpy(np.int64), kind="stable")
    kc = classes(profile).to_numpy()[order]
    start = acts["start_ns"].to_numpy(np.int64)[order]
    end = acts["end_ns"].to_numpy(np.int64)[order]
    reach = np.maximum.accumulate(end) if end.size else end
    comm = kc == "communication"
    owner = None if activity_step is None else np.asarray(activity_step, dtype=np.int64)[order]
    n = len(table)
    if owner is not None:  # collectives the step owns, counted once for all steps
        owned = comm & (owner >= 0) & (owner < n)
        n_coll = np.bincount(owner[owned], minlength=n)[:n]
        coll_dur = np.bincount(owner[owned], weights=(end - start)[owned], minlength=n)[:n]
    rows = []
    for i, (g0, g1) in enumerate(zip(table["gpu_start_ns"], table["gpu_end_ns"])):
        if pd.isna(g0) or pd.isna(g1):
            rows.append(_metrics(start[:0], end[:0], kc[:0], None, None, 0, 0))
            continue
        lo, hi = int(g0), int(g1)
        # activities sorted by start: those that can touch [lo, hi) lie between the first
        # whose running end passes lo and the last that starts before hi
        a, b = int(np.searchsorted(reach, lo, side="right")), int(np.searchsorted(start, hi, side="left"))
        sl = slice(a, max(a, b))
        near = end[sl] > lo
        s_, e_, k_ = start[sl][near], end[sl][near], kc[sl][near]
        if owner is not None:
            count, coll_ns = int(n_coll[i]), int(coll_dur[i])
        else:  # communication kernels that start inside the window
            c0 = int(np.searchsorted(start, lo, side="left"))
            inside = comm[c0:b]
            count, coll_ns = int(inside.sum()), int((end[c0:b][inside] - start[c0:b][inside]).sum())
        rows.append(_metrics(s_, e_, k_, lo, hi, count, coll_ns))
    return pd.DataFrame(rows, columns=list(COLUMNS), index=table.index)


def summary(per_step: pd.DataFrame) -> dict:
    """Step-level communication metrics for the rules: medians over steps with GPU work.

    ``comm_share``, ``comm_overlap``, ``exposed_comm_ms``, ``collectives_per_step``,
    ``mean_collective_us``; NaN when no step communicates.
    """
    has = per_step[per_step["busy_ns"] > 0]
    if has.empty:
        return {k: float("nan") for k in ("comm_share", "comm_overlap", "exposed_comm_ms", "collectives_per_step", "mean_collective_us")}
    comm = has[has["collectives"] > 0]
    return {
        "comm_share": float(has["comm_share"].median()),
        "comm_overlap": float(comm["overlap"].median()) if not comm.empty else float("nan"),
        "exposed_comm_ms": float(has["exposed_ns"].median() / 1e6),
        "collectives_per_step": float(has["collectives"].median()),
        "mean_collective_us": float(comm["mean_collective_us"].median()) if not comm.empty else float("nan"),
    }
