"""Steps: find the user's unit of work and tie GPU activities to it.

A step is a host range (record_function, NVTX push/pop or ``ProfilerStep#N``). GPU work
belongs to the step whose host range contains the start of the call that launched it, on
the same thread — matched by correlation id. A CUDA graph replay is one launch call whose
correlation id every replayed kernel carries, so a graph-captured decode step owns all its
kernels and is not mistaken for an idle GPU.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

import numpy as np
import pandas as pd

from perfdoctor.errors import UsageError
from perfdoctor.declare import DECLARE_PREFIX
from perfdoctor.profile import Profile

LAUNCH_PREFIXES = (
    "cudaLaunchKernel",
    "cuLaunchKernel",
    "cudaLaunchCooperativeKernel",
    "cudaGraphLaunch",
    "cuGraphLaunch",
)
SYNC_NAMES = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaMemcpy")
PROFILER_STEP_GLOB = "ProfilerStep#*"


def base_name(names: pd.Series) -> pd.Series:
    """API names without nsys's version suffix: ``cudaMemcpy_v3020`` → ``cudaMemcpy``."""
    return names.str.replace(r"_v\d+$", "", regex=True)


def is_launch(names: pd.Series) -> pd.Series:
    """Host calls that enqueue a kernel or a whole CUDA graph (a graph launch is one launch)."""
    return names.str.startswith(LAUNCH_PREFIXES, na=False)


def is_sync(names: pd.Series) -> pd.Series:
    """Host calls that block until the device catches up (``cudaMemcpy`` is the synchronous copy)."""
    return base_name(names).isin(SYNC_NAMES)


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


def _candidate_ranges(profile: Profile) -> pd.DataFrame:
    """Ranges that can be steps: not declarations, not Python stack frames."""
    r = profile.ranges
    return r[~r["name"].str.startswith(DECLARE_PREFIX, na=False) & (r["source"] != "python")]


def choose_step_ranges(profile: Profile, pattern: str | None) -> tuple[str | None, pd.DataFrame, str | None]:
    """The ranges that are steps, by the contract's order: ``pattern`` (or the step a run
    bundle recorded), ProfilerStep#N, most frequent.

    Returns (step name, ranges, reason when none).
    """
    ranges = _candidate_ranges(profile)
    recorded = (profile.meta.get("bundle") or {}).get("step")
    if not pattern and recorded and ranges["name"].map(lambda n: fnmatch.fnmatchcase(n, recorded)).any():
        pattern = recorded  # a run bundle remembers the step its run traced
    if pattern:
        matched = ranges[ranges["name"].map(lambda n: fnmatch.fnmatchcase(n, pattern))]
        if matched.empty:
            common = ranges["name"].value_counts().head(5).index.tolist()
            hint = f"; ranges in this trace: {', '.join(map(repr, common))}" if common else "; this trace has no ranges"
            raise UsageError(f"--step {pattern!r} matches no range{hint}")
        return pattern, matched, None
    profiler_steps = ranges[ranges["name"].str.match(r"^ProfilerStep#\d+$", na=False)]
    if not profiler_steps.empty:
        return PROFILER_STEP_GLOB, profiler_steps, None
    user = ranges[ranges["source"] != "profiler_step"]
    counts = user["name"].value_counts()
    launch_calls = profile.calls[is_launch(profile.calls["name"])]
    for name, n in counts.items():
        if n < 2:
            break
        candidate = user[user["name"] == name]
        if _has_gpu_work(candidate, launch_calls, profile):
            return name, candidate, None
    return None, ranges.iloc[0:0], "no step ranges found: no ProfilerStep#N and no range name that repeats with GPU work (use --step NAME)"


def _has_gpu_work(ranges: pd.DataFrame, launch_calls: pd.DataFrame, profile: Profile) -> bool:
    if profile.activities.empty or launch_calls.empty:
        return False
    pos = _containing_range(ranges, launch_calls)
    return bool((pos >= 0).any())


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
    name, ranges, reason = choose_step_ranges(profile, pattern)
    ranges = ranges.sort_values("start_ns", kind="stable", ignore_index=True)
    calls, acts = profile.calls, profile.activities

    call_step = pd.Series(_containing_range(ranges, calls), index=calls.index, dtype="int64")
    # Every call with a correlation id can own GPU work (launches, async copies, memsets).
    owner = pd.Series(call_step.to_numpy(), index=calls["correlation"].to_numpy())
    owner = owner[(owner.index >= 0)]
    owner = owner[~owner.index.duplicated(keep="first")]
    activity_step = pd.Series(
        acts["correlation"].map(owner).fillna(-1).astype("int64").to_numpy(), index=acts.index, dtype="int64"
    )

    table = pd.DataFrame(
        {
            "name": ranges["name"].to_numpy(),
            "tid": ranges["tid"].to_numpy(),
            "host_start_ns": ranges["start_ns"].to_numpy(),
            "host_end_ns": ranges["end_ns"].to_numpy(),
        }
    )
    stepped = acts[activity_step.to_numpy() >= 0]
    by_step = stepped.groupby(activity_step[activity_step >= 0].to_numpy())
    table["gpu_start_ns"] = by_step["start_ns"].min().reindex(table.index).astype("Int64")
    table["gpu_end_ns"] = by_step["end_ns"].max().reindex(table.index).astype("Int64")
    kernels = stepped[stepped["kind"] == "kernel"]
    table["kernels"] = (
        kernels.groupby(activity_step[kernels.index].to_numpy()).size().reindex(table.index, fill_value=0).astype("int64")
    )
    launches = call_step[is_launch(calls["name"]).to_numpy() & (call_step.to_numpy() >= 0)]
    table["launches"] = launches.value_counts().reindex(table.index, fill_value=0).astype("int64")

    if table["gpu_start_ns"].notna().any():
        span = (int(table["gpu_start_ns"].min()), int(table["gpu_end_ns"].max()))
    elif name is None and not acts.empty:
        span = (int(acts["start_ns"].min()), int(acts["end_ns"].max()))
    else:
        span = None
    if name is not None and span is None and reason is None:
        reason = f"the steps named {name!r} launched no GPU work"
    return Steps(name=name, reason=reason, table=table, activity_step=activity_step, call_step=call_step, span=span)
