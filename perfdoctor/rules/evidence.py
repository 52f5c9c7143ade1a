"""Evidence: the few rows of the trace that show *why* a rule failed.

A finding that says "GPU idle 94 %" is a number; a finding that lists the kernel that ran
480 times per step for 3 µs each, and the 120 µs gap in which the host was still issuing
the next launch, is a diagnosis. Each collector here is a pure function of an
:class:`~perfdoctor.analysis.metrics.Analysis` returning one small table (:class:`Evidence`); rules
name the collectors they want in their ``evidence`` list.

Per-step figures are averages over the steps found (``/ step``), so they compare directly
with the step latency.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Union

import numpy as np
import pandas as pd

from perfdoctor.analysis import steady
from perfdoctor.analysis.hostgaps import PYTHON_SOURCE, user_frames  # which Python frames are the user's
from perfdoctor.analysis.metrics import SHORT_KERNEL_NS, Analysis
from perfdoctor.names.codes import equals, factorize, tally
from perfdoctor.names.kernels import family, gemm_precision, label, labels
from perfdoctor.rules.signals import model_bytes_per_step, paused_time_ratio, step_kernel_families, step_activities
from perfdoctor.analysis.steps import base_name, is_launch, is_sync
from perfdoctor.analysis.timeline import kernel_table

TOP = 8  # rows per evidence table: enough to act on, short enough for a PR comment


class Note(enum.Enum):
    """What an evidence table says beside (or instead of) its rows."""

    NO_SHORT_KERNELS = "no_short_kernels"
    NO_KERNELS = "no_kernels"
    NO_GPU_ACTIVITY = "no_gpu_activity"
    NO_GAPS = "no_gaps"
    NO_SYNC_CALLS = "no_sync_calls"
    NO_STACKS = "no_stacks"  # the sync calls' sites: how to find them without Python stacks
    NO_PAGEABLE_COPIES = "no_pageable_copies"
    NO_COPIES = "no_copies"
    NO_GEMMS = "no_gemms"
    NO_ATTENTION = "no_attention"
    NO_GPU_STEPS = "no_gpu_steps"
    LIGHT_HEADLINE = "light_headline"  # the traced steps are not the headline's (the light pass's)
    NO_LIGHT_PASS = "no_light_pass"
    NO_NVML = "no_nvml"
    NO_LAUNCHES = "no_launches"
    NO_PEAK = "no_peak"
    NO_BYTES = "no_bytes"
    NO_STEPS = "no_steps"
    NO_COMM = "no_comm"
    NO_CAPTURE = "no_capture"
    NO_LAUNCHING_CALL = "no_launching_call"


@dataclass(frozen=True)
class GapCount:
    """The gaps between GPU activities: how many per step, and their time per step."""

    per_step: float
    ms_per_step: float


@dataclass(frozen=True)
class HostIntervals:
    """The idle intervals of at least ``min_gap_us``, counted by what the host did in them."""

    min_gap_us: float
    counts: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class Share:
    """A cell: a share of a whole (a percentage in words)."""

    of: float


@dataclass(frozen=True)
class Lead:
    """A cell: when the launch after a gap was issued, µs after (+) or before (−) the gap began."""

    us: float


@dataclass(frozen=True)
class AgainstFloor:
    """A cell: the measured step time and its multiple of the step's bandwidth floor."""

    ms: float
    floor_ms: float


class Tier(enum.Enum):
    """The seed's model-size tier for a device's peak bandwidth (the low-latency tutorial §7.1)."""

    LARGE = "large"  # ≥ 600 GB/s
    MEDIUM = "medium"  # 300-600 GB/s
    SMALL = "small"  # < 300 GB/s


# An evidence cell that is a number with a meaning, worded by perfdoctor.reports.evidence.cell
# (findings.json and every table alike); other cells are names, counts and rounded floats.
Cell = Union[Share, Lead, AgainstFloor, Tier]


# What a table says beside its rows, worded by perfdoctor.reports.evidence.note; a str is the
# analysis's own reason (analysis/ still words its reasons), a SlowSteps the light pass's slow steps.
Said = Union[Note, GapCount, HostIntervals, steady.SlowSteps, str]


@dataclass
class Evidence:
    """One small table: ``rows`` are lists aligned with ``columns``; ``note`` says what is
    missing, or what the rows leave out (reports/evidence.py gives it its title and words)."""

    kind: str
    columns: list[str]
    rows: list[list[Any]] = field(default_factory=list)
    note: Said | None = None


def _steps(analysis: Analysis) -> int:
    return max(1, analysis.steps.count)


def _r(x: float, digits: int = 3) -> float:
    """Round for display without turning small values into 0 (3 significant digits)."""
    if x == 0 or not np.isfinite(x):
        return float(x)
    return float(f"{x:.{digits}g}")


def _clip(text: str, n: int = 48) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def grouped(frame: pd.DataFrame, keys: str | list[str], **named: tuple[str, str]) -> pd.DataFrame:
    """``frame.groupby(keys).agg(**named)`` for named aggregations ``name=(column, how)``
    with ``how`` one of "size", "sum", "mean": the same frame (pandas' own groupby, its keys
    sorted and missing keys dropped), each column one call on the grouped column. pandas'
    dict-like ``agg`` costs ~6 ms for one key and ~9 for two whatever the rows (its
    dispatch): the sync-call and copy evidence asked it three times per analysis."""
    by = frame.groupby(keys)
    return pd.DataFrame({name: getattr(by[column], how)() for name, (column, how) in named.items()})


def _kernel_table(kernels: pd.DataFrame, analysis: Analysis) -> pd.DataFrame:
    """The timeline's kernel table (:func:`perfdoctor.analysis.timeline.kernel_table`) of a subset of
    the step kernels, indexed by label, with ``total`` and ``mean`` in ns."""
    g = kernel_table(kernels, analysis.steps.count).set_index("kernel")
    return g.rename(columns={"total_ns": "total", "mean_ns": "mean"})


def top_short_kernels(analysis: Analysis) -> Evidence:
    k = analysis.timeline.step_kernels
    # the columns the kernel table reads, then the rows: not every column of the short kernels copied
    k = k[["kind", "name", "start_ns", "end_ns"]][((k["end_ns"] - k["start_ns"]) < SHORT_KERNEL_NS).to_numpy()]
    ev = Evidence("top_short_kernels", ["kernel", "per step", "mean µs", "ms / step"])
    if k.empty:
        ev.note = Note.NO_SHORT_KERNELS
        return ev
    g = _kernel_table(k, analysis).sort_values(["count", "total"], ascending=False, kind="stable").head(TOP)
    ev.rows = [[label, _r(r["per_step"]), _r(r["mean"] / 1e3), _r(r["ms_per_step"])] for label, r in g.iterrows()]
    return ev


def top_kernels(analysis: Analysis) -> Evidence:
    """The timeline's kernel table: the same rows the terminal summary shows."""
    ev = Evidence("top_kernels", ["kernel", "family", "per step", "mean µs", "ms / step", "share"])
    g = analysis.timeline.kernels
    if g.empty:
        ev.note = Note.NO_KERNELS
        return ev
    ev.rows = [
        [r.kernel, r.family, _r(r.per_step), _r(r.mean_ns / 1e3), _r(r.ms_per_step), Share(float(r.share))]
        for r in g.head(TOP).itertuples()
    ]
    return ev


def kernel_families(analysis: Analysis) -> Evidence:
    acts = step_activities(analysis)
    ev = Evidence("kernel_families", ["family", "ms / step", "share", "activities / step"])
    if acts.empty:
        ev.note = Note.NO_GPU_ACTIVITY
        return ev
    dur = acts["end_ns"].to_numpy(np.int64) - acts["start_ns"].to_numpy(np.int64)
    g = tally(analysis.timeline.families, dur).sort_values("total", ascending=False)
    total = max(1, int(g["total"].sum()))
    n = _steps(analysis)
    ev.rows = [[f, _r(r["total"] / n / 1e6), Share(float(r["total"] / total)), _r(r["count"] / n)] for f, r in g.iterrows()]
    return ev


def _first_start(corr: np.ndarray, start: np.ndarray, wanted: int) -> Any:
    """The start of the first call (in table order) with correlation id ``wanted``; None
    when none has it or the id is negative (no launch). For the ten largest gaps: a compare
    over the ids each, not a Series of every call's id built by hashing them."""
    if wanted < 0:
        return None
    at = np.flatnonzero(corr == wanted)
    return start[at[0]] if at.size else None


def largest_gaps(analysis: Analysis) -> Evidence:
    """The longest bubbles, one row per pair of GPU activities around them (the largest gap
    between those two, in the step it happened in), what ran around it, in how many steps
    the same two left a gap at least half as long, and what the host was doing meanwhile. A
    bubble that recurs every step (a sync at the same point, the same slow host work) takes
    one row, so the rows behind it are the next bubbles, not its copies.

    "next launch issued" is when the call that launched the kernel after the gap started,
    relative to the start of the gap: a positive value means the GPU sat idle waiting for
    the host to issue work (launch-bound); a negative one means the work was queued in
    time and something on the device side (a dependency, a sync) held it back.
    """
    ev = Evidence(
        "largest_gaps",
        ["step", "at ms", "gap µs", "before", "after", "in steps", "next launch issued", "host calls during gap"],
    )
    gaps = analysis.timeline.gaps
    if gaps.empty:
        ev.note = Note.NO_GAPS
        return ev
    total = gaps["length_ns"].sum() / _steps(analysis) / 1e6
    ev.note = GapCount(len(gaps) / _steps(analysis), total)
    calls = analysis.profile.calls
    c_corr = calls["correlation"].to_numpy(np.int64)
    c_start = calls["start_ns"].to_numpy()
    c_end = calls["end_ns"].to_numpy()
    c_name = calls["name"].to_numpy()
    top = _largest_per_pair(gaps)
    # columns zipped, not itertuples: that builds a namedtuple class per call (~2 ms, per rank of a folder)
    cols = ("step", "start_ns", "end_ns", "window_start_ns", "length_ns", "before", "after", "steps", "after_correlation")
    for step, start_ns, end_ns, window_start_ns, length_ns, before, after, steps, correlation in zip(*(top[c] for c in cols)):
        launched = _first_start(c_corr, c_start, correlation)
        issued = "unknown" if launched is None else Lead((int(launched) - int(start_ns)) / 1e3)
        overlap = (c_start < end_ns) & (c_end > start_ns)
        counted = Counter(base_name(pd.Series(c_name[overlap], dtype=object)))
        host = ", ".join(f"{n} ×{c}" if c > 1 else n for n, c in counted.most_common(3)) or "none (host between CUDA calls)"
        ev.rows.append(
            [
                int(step),
                _r((start_ns - window_start_ns) / 1e6),
                _r(length_ns / 1e3),
                _clip(label(before)),
                _clip(label(after)),
                int(steps),
                issued,
                host,
            ]
        )
    return ev


RECURRING_SHARE = 0.5  # a step has a row's bubble when the same two activities left a gap at least this share of it


def _largest_per_pair(gaps: pd.DataFrame) -> pd.DataFrame:
    """The largest gap of each (before, after) pair of activity names, longest first (ties:
    the first in the table), at most :data:`TOP`, with ``steps``: how many steps have a gap
    between the same two at least :data:`RECURRING_SHARE` of it."""
    before, _ = factorize(gaps["before"], copy=False)  # only read
    after, after_names = factorize(gaps["after"], copy=False)
    pair = before.astype(np.int64) * max(len(after_names), 1) + after
    length = gaps["length_ns"].to_numpy(np.int64)
    step = gaps["step"].to_numpy(np.int64)
    # The longest first (ties in table order) among the m longest, m grown until TOP pairs
    # show: a sort of every gap (45k on HF 80 MB) cost 2 ms, the few longest are enough.
    m = TOP
    while True:
        cut = np.partition(length, len(length) - m)[len(length) - m] if m < len(length) else length.min()
        at = np.flatnonzero(length >= cut)  # every gap tied with the m-th longest, in table order
        order = at[np.argsort(-length[at], kind="stable")]
        _, first = np.unique(pair[order], return_index=True)  # each pair's first place in that order
        if len(first) >= TOP or m >= len(length):
            break
        m *= 8
    rows = order[np.sort(first)][:TOP]
    recurring = [np.unique(step[(pair == pair[i]) & (length >= RECURRING_SHARE * length[i])]).size for i in rows]
    return gaps.iloc[rows].assign(steps=recurring)


MAX_SITE_LOOKUPS = 500  # sync calls looked up for their call site: plenty to name the loop's lines


def python_call_site(frames: pd.DataFrame, tid: int, t_ns: int) -> str | None:
    """The innermost user Python frame (``file.py(line): fn``) running on ``tid`` at ``t_ns``.

    Library frames (torch, site-packages) are skipped: the user wants their own line.
    """
    f = frames[(frames["tid"] == tid) & (frames["start_ns"] <= t_ns) & (frames["end_ns"] >= t_ns)]
    f = f[user_frames(f["name"])]
    if f.empty:
        return None
    return str(f.loc[f["start_ns"].idxmax(), "name"])


def sync_calls(analysis: Analysis) -> Evidence:
    """Synchronizing calls per step, with the Python line that issued them when the trace has stacks."""
    ev = Evidence("sync_calls", ["call", "per step", "mean µs", "ms / step", "Python call sites"])
    calls = analysis.profile.calls
    in_step = calls[(analysis.steps.call_step.to_numpy() >= 0)]
    s = in_step[is_sync(in_step["name"])]
    if s.empty:
        ev.note = Note.NO_SYNC_CALLS
        return ev
    s = s.assign(dur=s["end_ns"] - s["start_ns"], name=base_name(s["name"]))
    frames = analysis.profile.ranges
    frames = frames[equals(frames["source"], PYTHON_SOURCE)]
    sites: dict[str, Counter] = {}
    for r in s.head(MAX_SITE_LOOKUPS).itertuples():
        site = python_call_site(frames, r.tid, r.start_ns) if not frames.empty else None
        if site:
            sites.setdefault(r.name, Counter())[site] += 1
    g = grouped(s, "name", count=("dur", "size"), total=("dur", "sum"), mean=("dur", "mean")).sort_values("total", ascending=False)
    n = _steps(analysis)
    for name, r in g.head(TOP).iterrows():
        where = "; ".join(f"{site} ×{c}" for site, c in sites.get(name, Counter()).most_common(3)) or "—"
        ev.rows.append([name, _r(r["count"] / n), _r(r["mean"] / 1e3), _r(r["total"] / n / 1e6), where])
    if not sites:
        # Without Python frames the call site of an .item() is not in the trace: say how
        # to find it rather than leaving the user to guess.
        ev.note = Note.NO_STACKS
    return ev


def _copies(analysis: Analysis) -> pd.DataFrame:
    acts = step_activities(analysis)
    return acts[equals(acts["kind"], "memcpy")]


def pageable_copies(analysis: Analysis) -> Evidence:
    ev = Evidence("pageable_copies", ["direction", "per step", "MB / step", "ms / step", "GB/s"])
    c = _copies(analysis)
    c = c[c["host_mem"] == "pageable"]
    if c.empty:
        ev.note = Note.NO_PAGEABLE_COPIES
        return ev
    ev.rows = _copy_rows(c, analysis, ["copy_kind"])
    return ev


def memcpys(analysis: Analysis) -> Evidence:
    ev = Evidence("memcpys", ["direction", "host memory", "per step", "MB / step", "ms / step", "GB/s"])
    c = _copies(analysis)
    if c.empty:
        ev.note = Note.NO_COPIES
        return ev
    ev.rows = _copy_rows(c.assign(host_mem=c["host_mem"].replace("", "-")), analysis, ["copy_kind", "host_mem"])
    return ev


def _copy_rows(c: pd.DataFrame, analysis: Analysis, keys: list[str]) -> list[list[Any]]:
    c = c.assign(dur=c["end_ns"] - c["start_ns"], nbytes=c["bytes"].fillna(0))
    g = grouped(c, keys, count=("dur", "size"), total=("dur", "sum"), nbytes=("nbytes", "sum")).sort_values("total", ascending=False)
    n = _steps(analysis)
    rows = []
    for key, r in g.head(TOP).iterrows():
        key = list(key) if isinstance(key, tuple) else [key]
        gbps = r["nbytes"] / r["total"] if r["total"] > 0 else float("nan")  # bytes/ns == GB/s
        rows.append([*key, _r(r["count"] / n), _r(r["nbytes"] / n / 1e6), _r(r["total"] / n / 1e6), _r(gbps)])
    return rows


def gemm_kernels(analysis: Analysis) -> Evidence:
    k = analysis.timeline.gemm_kernels
    ev = Evidence("gemm_kernels", ["kernel", "precision", "per step", "ms / step"])
    if k.empty:
        ev.note = Note.NO_GEMMS
        return ev
    g = _kernel_table(k, analysis).sort_values("total", ascending=False).head(TOP)
    ev.rows = [[label, gemm_precision(r["name"]), _r(r["per_step"]), _r(r["ms_per_step"])] for label, r in g.iterrows()]
    return ev


def attention_kernels(analysis: Analysis) -> Evidence:
    k = analysis.timeline.step_kernels
    k = k[step_kernel_families(analysis).isin(("attention", "softmax"))]
    ev = Evidence("attention_kernels", ["kernel", "family", "per step", "ms / step"])
    if k.empty:
        ev.note = Note.NO_ATTENTION
        return ev
    g = _kernel_table(k, analysis).sort_values("total", ascending=False).head(TOP)
    ev.rows = [[label, family(r["name"]), _r(r["per_step"]), _r(r["ms_per_step"])] for label, r in g.iterrows()]
    return ev


def step_latencies(analysis: Analysis) -> Evidence:
    """The slowest steps by critical-path time, from the timeline's step table."""
    ev = Evidence(
        "step_latencies",
        ["step", "latency ms", "host lead ms", "host before first GPU work ms", "GPU busy ms", "GPU idle in window ms"],
    )
    st = analysis.timeline.with_gpu
    if st.empty:
        ev.note = Note.NO_GPU_STEPS
        return ev
    for idx, r in st.nlargest(TOP, "critical_path_ns").iterrows():
        lead = r["host_lead_ns"]
        before = int(r["gpu_start_ns"]) - int(r["host_start_ns"])
        ev.rows.append(
            [int(idx), _r(r["critical_path_ns"] / 1e6), "—" if pd.isna(lead) else _r(lead / 1e6), _r(before / 1e6),
             _r(r["busy_ns"] / 1e6), _r(r["idle_ns"] / 1e6)]
        )
    if analysis.light is not None:
        ev.note = Note.LIGHT_HEADLINE
    return ev


def slow_untraced_steps(analysis: Analysis) -> Evidence:
    """The light pass's slowest steady steps: the steps ``uneven-steps`` is about. The traced
    window is a few steps and may hold none of them (train_loop.py with 4 workers: 9 traced
    iterations of at most 104 ms, while the untraced run had 5 of 22 at 59-202 ms). Where
    Python's full garbage collections ran inside steps, how long in each (predict_dump.py's
    slow batches: 75-160 ms of collection each, the rest of them a median batch), and how long
    the program's saves ran in each (``torch.save``, safetensors' ``save_file``,
    torch.distributed.checkpoint's ``save``: a checkpoint saved every N steps, or an inference
    job's outputs written every N batches: "save ms", not "checkpoint", which a prediction
    writer's files are not), and, where the
    run paused between its loops, whether a pause came before each (a loop's first step);
    where the steps' model calls vary (an RL episode's policy calls), how many each made."""
    light, series = analysis.light, analysis.light_series
    held = [(c, v) for c, v in (("full GC ms", light.gc_ns if light is not None else None),
                                ("save ms", light.save_ns if light is not None else None),
                                ("CPU wait ms", light.cpu_wait_ns if light is not None else None)) if v is not None]
    calls = light.work_calls if light is not None and series is not None and series.steps is not None else None
    if calls is not None and not steady.calls_vary(calls[series.steps]):
        calls = None
    paused = series.paused if series is not None and series.paused is not None and series.paused.any() else None
    ev = Evidence("slow_untraced_steps", ["step", "latency ms", "× median", "beyond the median ms", *(c for c, _ in held),
                                          *(("model calls",) if calls is not None else ()), *(("after a pause",) if paused is not None else ())])
    if light is None or series is None or not series.critical_path_ms.size:
        ev.note = Note.NO_LIGHT_PASS
        return ev
    cp = series.critical_path_ms
    s = steady.slow_steps(cp, series.cpu_wait_ms)
    for i in np.argsort(-cp, kind="stable")[:TOP]:
        step = int(series.steps[i])
        ev.rows.append([step, _r(cp[i]), _r(cp[i] / s.median_ms) if s.median_ms else "—", _r(max(0.0, cp[i] - s.median_ms)),
                        *(_r(v[step] / 1e6) for _, v in held), *((int(calls[step]),) if calls is not None else ()),
                        *(("yes" if paused[i] else "no",) if paused is not None else ())])
    ev.note = s
    return ev


def time_between_steps(analysis: Analysis) -> Evidence:
    """The light pass's longest stretches between steady steps that were the program's own
    (``time-between-steps``): each pass end (an evaluation pass, an epoch's end and whatever
    the loop does there) and each pause (the program's work between steps: a prefill or an
    encoder per generate, a checkpoint), with the step after it: where in the loop the time
    goes, and how regularly. ``waiting ms`` (where the run noted any): how much of the stretch
    before that step the loop's thread spent in ``time.sleep``, a queue or a socket (OpenMMLab's
    sleep at each epoch change: all of it; an evaluation: none); ``full GC ms`` likewise
    Python's full garbage collections (PyKEEN's ``gc.collect()`` at each epoch's end). The
    note is the signal's: the kinds' totals and the whole loop's time."""
    light = analysis.light
    held = [(c, v) for c, v in (("waiting ms", light.idle_before_ns), ("full GC ms", light.gc_before_ns))
            if v is not None] if light is not None else []
    ev = Evidence("time_between_steps", ["after step", "what", "ms", "share of the loop", *(c for c, _ in held)])
    series = analysis.light_series
    if series is None or series.cadence.steps_per_s is None:
        ev.note = Note.NO_LIGHT_PASS
        return ev
    cad = series.cadence
    total = cad.loop_ms
    for i in np.argsort(-cad.own_ms, kind="stable")[:TOP]:
        after = int(cad.own_after[i])
        ev.rows.append([after, "pass end" if cad.own_pass_end[i] else "pause", _r(float(cad.own_ms[i])), Share(float(cad.own_ms[i]) / total),
                        *(_r(v[after] / 1e6) for _, v in held)])
    ev.note = paused_time_ratio(analysis).note
    return ev


def nvml_series(analysis: Analysis) -> Evidence:
    ev = Evidence("nvml_series", ["metric", "source", "samples", "min", "median", "max"])
    s = analysis.profile.samples
    if s.empty:
        ev.note = Note.NO_NVML
        return ev
    for (metric, source), g in s.groupby(["metric", "source"]):
        v = g["value"].to_numpy(dtype=float)
        ev.rows.append([metric, source, len(v), _r(v.min()), _r(float(np.median(v))), _r(v.max())])
    return ev


def launch_summary(analysis: Analysis) -> Evidence:
    """Launch calls per step by API name: shows at a glance whether steps are graph-replayed."""
    ev = Evidence("launch_summary", ["call", "per step", "mean µs"])
    calls = analysis.profile.calls
    in_step = calls[analysis.steps.call_step.to_numpy() >= 0]
    launches = in_step[is_launch(in_step["name"])]
    if launches.empty:
        ev.note = Note.NO_LAUNCHES
        return ev
    g = tally(base_name(launches["name"]), launches["end_ns"].to_numpy(np.int64) - launches["start_ns"].to_numpy(np.int64))
    g = g.assign(mean=g["total"] / g["count"]).sort_values("count", ascending=False)
    ev.rows = [[n, _r(r["count"] / _steps(analysis)), _r(r["mean"] / 1e3)] for n, r in g.iterrows()]
    return ev


def bandwidth_budget(analysis: Analysis) -> Evidence:
    """The seed's model-size tier for this device (the low-latency tutorial §7.1) and the bandwidth floor of a step."""
    ev = Evidence("bandwidth_budget", ["quantity", "value"])
    peak = analysis.value("peak_dram_bw_gbps")
    if not peak:
        ev.note = Note.NO_PEAK
        return ev
    tier = Tier.LARGE if peak >= 600 else Tier.MEDIUM if peak >= 300 else Tier.SMALL
    ev.rows = [["device peak GB/s", _r(peak)], ["seed tier", tier]]
    nbytes = model_bytes_per_step(analysis).value
    if nbytes:
        floor_ms = nbytes / (peak * 1e9) * 1e3
        ev.rows += [
            ["declared bytes / step (GB)", _r(nbytes / 1e9)],
            ["floor at 100 % of peak, ms / step", _r(floor_ms)],
            ["floor at 85 % of peak, ms / step", _r(floor_ms / 0.85)],
        ]
        p50 = analysis.value("step_latency_ms_p50")
        if p50:
            ev.rows.append(["measured step p50, ms (× floor)", AgainstFloor(p50, floor_ms)])
    else:
        ev.note = Note.NO_BYTES
    return ev



def comm_timeline(analysis: Analysis) -> Evidence:
    """Communication per step (:func:`perfdoctor.analysis.comms.step_metrics`): time, share of busy
    time, overlap with compute, exposed time, collectives."""
    from perfdoctor.analysis import comms

    ev = Evidence(
        "comm_timeline",
        ["step", "comm ms", "share of busy", "overlap", "exposed ms", "collectives", "mean collective µs"],
    )
    if analysis.steps.count == 0:
        ev.note = Note.NO_STEPS
        return ev
    per = comms.step_metrics(analysis.profile, analysis.steps.table, analysis.steps.activity_step)
    per = per[per["collectives"] > 0]
    if per.empty:
        ev.note = Note.NO_COMM
        return ev
    for idx, r in per.nlargest(TOP, "exposed_ns").iterrows():
        ev.rows.append([
            int(idx), _r(r["comm_ns"] / 1e6), _r(r["comm_share"]), _r(r["overlap"]), _r(r["exposed_ns"] / 1e6),
            int(r["collectives"]), _r(r["mean_collective_us"]),
        ])
    return ev


def top_collectives(analysis: Analysis) -> Evidence:
    """Communication kernels inside the steps grouped by readable name."""
    ev = Evidence("top_collectives", ["kernel", "per step", "mean µs", "ms per step"])
    k = analysis.timeline.step_kernels
    k = k[step_kernel_families(analysis).to_numpy() == "communication"] if not k.empty else k
    if k.empty:
        ev.note = Note.NO_COMM
        return ev
    dur = (k["end_ns"] - k["start_ns"]).to_numpy(np.int64)
    n = _steps(analysis)
    # tally, not groupby.agg (~4 ms per call, once per rank of a folder): the same groups
    # (sorted labels), integer sums, mean = sum / count; largest totals first, ties by label
    g = tally(labels(k["name"]), dur).sort_values("total", ascending=False, kind="stable").head(TOP)
    ev.rows = [[_clip(str(lbl)), _r(c / n), _r(t / c / 1e3), _r(t / n / 1e6)]
               for lbl, c, t in zip(g.index, g["count"].astype(float), g["total"].astype(float))]
    return ev


def capture_windows(analysis: Analysis) -> Evidence:
    """Stream captures (:func:`perfdoctor.analysis.capture.capture_windows`): where, how long, how many
    launches recorded graph nodes instead of running."""
    from perfdoctor.analysis import capture

    ev = Evidence("capture_windows", ["thread", "at ms", "length ms", "launches recorded"])
    w = capture.capture_windows(analysis.profile)
    if w.empty:
        ev.note = Note.NO_CAPTURE
        return ev
    t0 = int(analysis.profile.calls["start_ns"].min())
    for r in w.head(TOP).itertuples():
        ev.rows.append([int(r.tid), _r((r.begin_ns - t0) / 1e6), _r((r.end_ns - r.begin_ns) / 1e6), int(r.launches)])
    return ev


def step_queue_delays(analysis: Analysis) -> Evidence:
    """Per step: how long its first GPU activity waited after the host launched it."""
    from perfdoctor.analysis import serving

    ev = Evidence("step_queue_delays", ["step", "name", "queue delay ms", "host start → GPU ms"])
    if analysis.steps.count == 0:
        ev.note = Note.NO_STEPS
        return ev
    q = serving.queue_delay(analysis.profile, analysis.steps.table, analysis.steps.activity_step)
    q = q[q["queue_delay_ns"].notna()]
    if q.empty:
        ev.note = Note.NO_LAUNCHING_CALL
        return ev
    q = q.assign(d=q["queue_delay_ns"].astype("float64")).nlargest(TOP, "d")
    names = analysis.steps.table["name"]
    for idx, r in q.iterrows():
        ev.rows.append([int(idx), _clip(str(names.iloc[idx])), _r(r["d"] / 1e6), _r(float(r["host_to_gpu_ns"]) / 1e6)])
    return ev

def host_in_gaps(analysis: Analysis) -> Evidence:
    """The longest idle intervals in which the host ran Python, with the call site that ran
    (:mod:`perfdoctor.analysis.hostgaps`)."""
    from perfdoctor.analysis.hostgaps import MIN_GAP_US, busy_summary, gap_hosts

    ev = Evidence("host_in_gaps",
                  ["step", "where", "idle µs", "host busy µs", "call site"])
    b = busy_summary(analysis)
    if b.ratio is None:
        ev.note = b.reason
        return ev
    h = gap_hosts(analysis)
    for r in h[h["host"] == "busy"].head(TOP).itertuples():
        ev.rows.append([int(r.step), r.where, _r(r.length_ns / 1e3), _r(r.busy_ns / 1e3), r.site or "— (library frames only)"])
    counts = h["host"].value_counts()
    ev.note = HostIntervals(MIN_GAP_US, tuple((k, int(counts.get(k, 0))) for k in ("busy", "waiting", "launching", "unknown")))
    return ev


EVIDENCE: dict[str, Callable[[Analysis], Evidence]] = {
    "top_short_kernels": top_short_kernels,
    "top_kernels": top_kernels,
    "kernel_families": kernel_families,
    "largest_gaps": largest_gaps,
    "sync_calls": sync_calls,
    "pageable_copies": pageable_copies,
    "memcpys": memcpys,
    "gemm_kernels": gemm_kernels,
    "attention_kernels": attention_kernels,
    "step_latencies": step_latencies,
    "slow_untraced_steps": slow_untraced_steps,
    "time_between_steps": time_between_steps,
    "nvml_series": nvml_series,
    "launch_summary": launch_summary,
    "bandwidth_budget": bandwidth_budget,
    "comm_timeline": comm_timeline,
    "top_collectives": top_collectives,
    "capture_windows": capture_windows,
    "step_queue_delays": step_queue_delays,
    "host_in_gaps": host_in_gaps,
}
