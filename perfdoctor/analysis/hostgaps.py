"""What the host was doing while the GPU had nothing to do: waiting, launching, or running Python.

Inside a step's critical path the GPU idles in two kinds of interval
(:func:`idle_intervals`): the gaps between the step's GPU activities
(:attr:`perfdoctor.analysis.timeline.Timeline.gaps`), and the step's lead-in — from the later of its
host start and the previous step's GPU end to its first GPU work (host preprocessing at
the top of a step lands there). Each interval gets a cause, read on the host thread that
runs the step:

``waiting``    synchronizing calls (``cudaStreamSynchronize``, ``.item()``'s copy, a
               synchronous ``cudaMemcpy`` / ``hipMemcpyWithStream``) were in flight for at
               least half of the interval: the host-sync rule's time
``launching``  the host issued the next GPU work in the first half of the interval: launch
               latency or a device-side dependency, the launch and bubble rules' time
``busy``       the host issued nothing for at least half of the interval, and Python frames
               that begin inside the step (``with_stack=True``) cover at least half of it,
               less the time inside CUDA calls: preprocessing, tokenisation, scheduling.
               The call site is the innermost *user* frame among those holding most of that
               time (library frames — installed packages, ``torch/``, the standard
               library — are skipped; the loop's enclosing frames begin before the step and
               name nothing)
``unknown``    the host issued nothing for half of the interval, and no Python frame says why
``short``      shorter than MIN_GAP_US: launch overhead's scale, not host work

Every interval ends with the launch of the work after it, so "busy" counts the time from
the interval's start to the first launch inside it: the host's time before it issued more.

:func:`gap_hosts` labels every interval; :func:`busy_summary` gives the share of idle time
the host was busy in Python, the median per step, and the call sites that took it.
"""

from __future__ import annotations

import re
import sysconfig
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd

from perfdoctor.names.codes import equals, per_name
from perfdoctor.analysis.steps import is_launch, is_sync, ran_no_gpu
from perfdoctor.schema import repeated

PYTHON_SOURCE = "python"  # ranges.source of Python frames (Kineto python_function events)
USER_FRAME = re.compile(r"\.py\(\d+\)")  # "file.py(42): fn"
# Library frames. The torch profiler writes a frame's file relative to the sys.path entry it
# was found under (seen on the H200: "scipy/ndimage/_interpolation.py(763): zoom",
# "torch/nn/modules/module.py(1775): _call_impl", "typing.py(...)", while the user's script
# is "record_wild_traces.py(212): preprocess"). So a relative path with a directory is an
# installed package; absolute paths are libraries when under site-/dist-packages, the
# standard library or torch; "<built-in ...>" and "<frozen ...>" are the interpreter's.
LIBRARY_FRAME = re.compile(r"site-packages|dist-packages|/torch/|/lib/python3|^<|^[^/.<][^(]*/")
# Standard-library modules that are one file: a bare "typing.py(1397): inner" frame is theirs.
STDLIB_FILES = frozenset(p.stem for p in Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))


def _is_user_frame(name: str) -> bool:
    if not USER_FRAME.search(name) or LIBRARY_FRAME.search(name):
        return False
    return name.split(".py(", 1)[0] not in STDLIB_FILES


def user_frames(names: pd.Series) -> np.ndarray:
    """Which Python frame names are the user's own code (``file.py(line): fn`` outside the
    libraries above), each distinct name tested once."""
    return per_name(names.fillna(""), _is_user_frame).astype(bool).to_numpy()
# Intervals shorter than this are launch overhead's scale (an eager decode step's gaps are
# 5-30 µs on the H200), not host work; 100 µs is HTA's launch-delay cutoff.
MIN_GAP_US = 100.0
BUSY_SHARE = 0.5  # "busy" when Python ran for at least this share of the interval
MAX_GAPS = 20000  # long intervals looked at one by one per trace; beyond this the smallest are left out
COLUMNS = ["step", "start_ns", "length_ns", "where", "host", "site", "busy_ns"]
BETWEEN, LEAD_IN = "between GPU work", "before the step's first GPU work"


def _overlap(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int) -> np.ndarray:
    return np.clip(np.minimum(ends, hi) - np.maximum(starts, lo), 0, None)


def idle_intervals(analysis) -> dict[str, np.ndarray]:
    """The gaps between each step's GPU activities and each step's lead-in (see the module
    docstring), as columns: step, start_ns, end_ns (int64) and where (object). Arrays, not a
    frame: :func:`_gap_hosts` reads them as arrays (HF 80 MB: 45k intervals)."""
    g = analysis.timeline.gaps
    cols = {c: [g[c].to_numpy(np.int64)] for c in ("step", "start_ns", "end_ns")}
    where = [repeated(BETWEEN, len(g))]
    t = analysis.timeline.steps
    w = t[t["gpu_start_ns"].notna()]
    if not w.empty:
        gpu_start = w["gpu_start_ns"].to_numpy(np.int64)
        prev_end = np.concatenate(([np.iinfo(np.int64).min], w["gpu_end_ns"].to_numpy(np.int64)[:-1]))
        lead_lo = np.maximum(w["host_start_ns"].to_numpy(np.int64), prev_end)
        keep = gpu_start > lead_lo
        for c, v in (("step", w.index.to_numpy(np.int64)[keep]), ("start_ns", lead_lo[keep]), ("end_ns", gpu_start[keep])):
            cols[c].append(v)
        where.append(repeated(LEAD_IN, int(keep.sum())))
    return {**{c: np.concatenate(v) for c, v in cols.items()}, "where": np.concatenate(where)}


class Intervals:
    """Intervals sorted by start (one thread's calls, or its frames), with their union as
    prefix sums so that the covered length of many windows is two searchsorted calls."""

    def __init__(self, table: pd.DataFrame) -> None:
        start = table["start_ns"].to_numpy(np.int64)
        order = np.argsort(start, kind="stable")
        self._unsorted = table
        self.start = start[order]
        self.end = table["end_ns"].to_numpy(np.int64)[order]
        self.row = order  # position in the original table: "first" means first there
        self.longest = int((self.end - self.start).max()) if self.start.size else 0
        reach = np.maximum.accumulate(self.end) if self.start.size else self.end
        opens = np.r_[True, self.start[1:] > reach[:-1]] if self.start.size else np.zeros(0, dtype=bool)
        self.block_start = self.start[opens]
        self.block_end = reach[np.r_[np.flatnonzero(opens)[1:] - 1, len(reach) - 1]] if opens.any() else reach[:0]
        self.before = np.r_[0, np.cumsum(self.block_end - self.block_start)]

    @cached_property
    def table(self) -> pd.DataFrame:
        """The rows in start order (sorted when first read: the covered length needs only
        the times, and a thread's calls are most of a trace's calls)."""
        return self._unsorted.iloc[self.row]

    def _upto(self, x: np.ndarray) -> np.ndarray:
        k = np.searchsorted(self.block_start, x, side="right") - 1
        inside = np.clip(x - self.block_start[np.maximum(k, 0)], 0, (self.block_end - self.block_start)[np.maximum(k, 0)]) if self.before.size > 1 else 0
        return np.where(k >= 0, self.before[np.maximum(k, 0)] + inside, 0)

    def covered(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Per window [lo, hi): the length of the union of the intervals inside it (as
        :func:`perfdoctor.analysis.steps.union_ns` of the overlapping ones)."""
        return np.clip(self._upto(hi) - self._upto(lo), 0, None)

    def overlapping(self, lo: int, hi: int) -> np.ndarray:
        """Positions (in start order) of the intervals meeting (lo, hi)."""
        a = np.searchsorted(self.start, lo - self.longest, side="left")
        b = np.searchsorted(self.start, hi, side="left")
        idx = np.arange(a, b)
        return idx[self.end[a:b] > lo]


def gap_hosts(analysis) -> pd.DataFrame:
    """The intervals of :func:`idle_intervals`, the long ones first, largest first, with ``host`` (waiting /
    launching / busy / unknown / short), ``site`` (the user frame of a busy interval, the
    sync call of a waiting one) and ``busy_ns`` (time Python ran, busy intervals only).

    Computed once per Timeline (the host-busy signal, its estimate and its evidence all
    read it); the per-interval work is searchsorted over each thread's sorted intervals."""
    timeline = analysis.timeline
    if timeline.host_gaps is None:
        timeline.host_gaps = _gap_hosts(analysis)
    return timeline.host_gaps


def _gap_hosts(analysis) -> pd.DataFrame:
    if analysis.steps.count == 0:
        return pd.DataFrame({c: [] for c in COLUMNS})
    gaps = idle_intervals(analysis)
    all_length = gaps["end_ns"] - gaps["start_ns"]
    long = np.flatnonzero(all_length >= MIN_GAP_US * 1e3)
    short = np.flatnonzero(all_length < MIN_GAP_US * 1e3)
    # Only long intervals are looked at one by one: the MAX_GAPS longest, longest first (ties
    # in trace order). The short ones follow them in trace order: no reader needs them sorted,
    # and sorting them cost more than the rest of the table (HF 80 MB: 45k of 45k intervals).
    long = long[np.argsort(-all_length[long], kind="stable")[:MAX_GAPS]]
    table = analysis.steps.table
    tids, step_start = table["tid"].to_numpy(), table["host_start_ns"].to_numpy(np.int64)
    calls = analysis.profile.calls
    launch_start = np.sort(calls.loc[is_launch(calls["name"]).to_numpy(), "start_ns"].to_numpy(np.int64))  # any thread
    frames = analysis.profile.ranges
    frames = frames[equals(frames["source"], PYTHON_SOURCE)]
    step, lo, hi, length = gaps["step"][long], gaps["start_ns"][long], gaps["end_ns"][long], all_length[long]
    tid = tids[step] if len(step) else np.zeros(0, dtype=np.int64)
    host = repeated("", len(long))
    site = repeated("", len(long))
    busy = np.zeros(len(long), dtype=np.int64)
    # The host's time before it issued more: up to the first launch inside the interval.
    k = np.searchsorted(launch_start, lo, side="left")
    nxt = launch_start[np.minimum(k, len(launch_start) - 1)] if len(launch_start) else hi
    until = np.where((k < len(launch_start)) & (nxt < hi), nxt, hi)
    sync_mask = is_sync(calls["name"]).to_numpy()
    for t in np.unique(tid):
        on = np.flatnonzero(tid == t)
        sync = Intervals(calls[sync_mask & (calls["tid"] == t).to_numpy()])
        waiting = sync.covered(lo[on], hi[on]) >= BUSY_SHARE * length[on]
        sync_names = sync.table["name"].to_numpy(dtype=object)  # once: a pandas lookup per interval cost ~0.1 ms each
        for i in on[waiting]:
            s = sync.overlapping(int(lo[i]), int(hi[i]))
            site[i] = str(sync_names[s[np.argmin(sync.row[s])]])  # the first in the trace's order
        host[on[waiting]] = "waiting"
        rest = on[~waiting]
        launching = until[rest] - lo[rest] < BUSY_SHARE * length[rest]
        host[rest[launching]] = "launching"
        rest = rest[~launching]
        if rest.size == 0:
            continue
        # Frames that begin inside the step: the loop's enclosing frames cover every
        # interval and name nothing. Time inside CUDA calls is the driver's, not Python's.
        cuda = Intervals(calls[["start_ns", "end_ns"]][(calls["tid"] == t).to_numpy()]).covered(lo[rest], until[rest])
        mine = frames[(frames["tid"] == t).to_numpy()]
        for st in np.unique(step[rest]):
            here = rest[step[rest] == st]
            f = mine[(mine["start_ns"].to_numpy(np.int64) >= step_start[st]) & (mine["start_ns"].to_numpy(np.int64) < until[here].max())]
            fr = Intervals(f)
            covered = np.maximum(fr.covered(lo[here], until[here]) - cuda[np.searchsorted(rest, here)], 0)
            ok = covered >= BUSY_SHARE * length[here]
            host[here[~ok]] = "unknown"
            host[here[ok]] = "busy"
            busy[here[ok]] = covered[ok]
            user = user_frames(fr.table["name"]) if ok.any() else np.zeros(0, dtype=bool)
            frame_names = fr.table["name"].to_numpy(dtype=object)
            for i in here[ok]:
                u = fr.overlapping(int(lo[i]), int(until[i]))
                u = u[user[u]]
                if u.size == 0:
                    continue
                share = _overlap(fr.start[u], fr.end[u], int(lo[i]), int(until[i]))
                cand = u[share >= BUSY_SHARE * share.max()]  # the frames holding most of it: the innermost names it
                latest = cand[fr.start[cand] == fr.start[cand].max()]
                site[i] = str(frame_names[latest[np.argmin(fr.row[latest])]])
    rows = np.concatenate([long, short])
    labels = repeated("short", len(short))
    return pd.DataFrame({
        "step": gaps["step"][rows], "start_ns": gaps["start_ns"][rows], "length_ns": all_length[rows], "where": gaps["where"][rows],
        "host": np.concatenate([host, labels]), "site": np.concatenate([site, repeated("", len(short))]),
        "busy_ns": np.concatenate([busy, np.zeros(len(short), dtype=np.int64)]),
    }, columns=COLUMNS)


def not_working_ns(analysis) -> np.ndarray:
    """Per step, the part of its critical path in which the GPU did no work for it
    (critical path − busy): the most that moving host work off the step can win."""
    t = analysis.timeline.steps
    cp = pd.to_numeric(t["critical_path_ns"], errors="coerce").fillna(0).to_numpy(dtype=float)
    busy = pd.to_numeric(t["busy_ns"], errors="coerce").fillna(0).to_numpy(dtype=float)
    return np.clip(cp - busy, 0, None)


@dataclass
class BusySummary:
    ratio: float | None  # busy time / all idle-interval time in the steps; None without Python frames
    ms_per_step: float  # median over steps of the busy time, clipped to not_working_ns
    sites: list[tuple[str, float]] = field(default_factory=list)  # (call site, ms per step), largest first
    reason: str | None = None  # why ratio is None


def busy_summary(analysis) -> BusySummary:
    """Share of the steps' idle time the host spent running Python (neither waiting nor
    launching), the median busy time per step (clipped to :func:`not_working_ns`), and the
    call sites that took it. Without a GPU there is no GPU idle time to read: that reason
    comes first (a reason about the GPU, so the reports count the rule among the checks of GPU
    work), never advice to record stacks the trace may well have."""
    if ran_no_gpu(analysis.profile):
        return BusySummary(None, 0.0, reason="no GPU ran in this trace (no GPU activity, no CUDA call): no GPU idle time to explain")
    frames = analysis.profile.ranges
    if not equals(frames["source"], PYTHON_SOURCE).any():
        return BusySummary(None, 0.0, reason="the trace has no Python stacks (record with torch.profiler.profile(with_stack=True))")
    h = gap_hosts(analysis)
    total = float(h["length_ns"].sum()) if not h.empty else 0.0
    if total <= 0:
        return BusySummary(None, 0.0, reason="no idle time inside the steps")
    busy = h[h["host"] == "busy"]
    n = analysis.steps.count
    per_step = busy.groupby("step")["busy_ns"].sum().reindex(range(n), fill_value=0).to_numpy(dtype=float)
    per_step = np.minimum(per_step, not_working_ns(analysis))
    sites = busy[busy["site"] != ""].groupby("site")["busy_ns"].sum().sort_values(ascending=False) / n / 1e6
    return BusySummary(
        ratio=float(busy["busy_ns"].sum()) / total,
        ms_per_step=float(np.median(per_step)) / 1e6,
        sites=[(str(k), float(v)) for k, v in sites.items()],
    )
