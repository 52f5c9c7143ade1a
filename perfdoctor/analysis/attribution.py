"""Where each step's time went: GPU busy by kernel class plus GPU waiting by cause.

One attribution per step, over the step's critical path ``[max(host start, previous step's
GPU end), GPU end]`` (:func:`perfdoctor.analysis.steady.critical_path_ns`): every
nanosecond of that window is either

* **GPU busy** with one of the step's activities, by kernel class (:data:`BUSY_PARTS`).
  Where activities of several classes overlap (two streams), the time goes to the class
  first in :data:`BUSY_PARTS` — communication under compute counts as compute's, the part
  that overlap already hid — so overlapping time counts once and the parts add up; or
* **GPU waiting**, by what the host did meanwhile (:data:`WAIT_PARTS`), read from
  :func:`perfdoctor.analysis.hostgaps.gap_hosts`: a DataLoader ``__next__`` range in flight
  (data loading, taken first: it is what the host is doing whatever else it calls), a
  synchronizing call in flight or returning inside the gap (host sync; on a collective's
  call, communication wait; the host inside a copy call, which from pageable memory blocks
  while the driver stages the bytes, is host sync for the time the call covers), Python
  frames that began in the step (host Python, with call sites), the host issuing the next
  launch late with nothing else in flight (host late, between the step's GPU work; before
  its first GPU work the same is host preparation: host before launch), launch cadence (gaps shorter than
  hostgaps.MIN_GAP_US, the host's issue rate between back-to-back launches).
* What no label covers (an interval hostgaps did not look at) is ``unattributed``: named,
  never spread over the others.

The headline (:attr:`Attribution.step`) is one step of the untraced run: the light pass's
step time p50 where the bundle has one, else the traced critical path p50. GPU busy per
class is the mean over the traced steps (the tracer does not stretch device work); the
waiting is that step time less the busy time, split in the traced steps' proportions (the
tracer does stretch host gaps). When the traced busy time exceeds the untraced step, every
part is scaled to the step and a note says so. The means leave out leading steps that are
warm-up by their device work (:func:`perfdoctor.analysis.steady.device_warmup`: before the
steady state of both the step time and the GPU busy time): a mean is the typical step's only
when the steps repeat the same device work, and a first step that ran 4.6x the GPU work of
the rest (cuDNN autotuning, first calls) would fill the median step with GPU time that no
other step has. The note names the steps left out; they stay in ``per_step`` and every metric.
A step slow only on the host (a stall: the same device work) stays in the means. Parts add up to the step by construction;
per traced step they add up to its critical path exactly (tests check both against the raw
events).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd

from perfdoctor.analysis import hostgaps, steady
from perfdoctor.analysis.steps import is_sync
from perfdoctor.names.api import is_copy
from perfdoctor.analysis.timeline import sorted_union_per_group
from perfdoctor.names.codes import equals, factorize
from perfdoctor.names.families import is_log_softmax
from perfdoctor.schema import DATA_LOADER_SOURCE
from perfdoctor.text import value

# Kernel classes, in the order that wins an overlap (see the module docstring).
BUSY_PARTS = (
    "gemm", "convolution", "attention", "normalisation", "elementwise", "layout_transform",
    "reduction_sampling", "memcpy_memset", "communication", "other",
)
WAIT_PARTS = ("data_loading", "host_sync", "comm_wait", "host_python", "host_late", "host_before_launch", "launch_cadence", "unattributed")
PARTS = BUSY_PARTS + WAIT_PARTS
LABELS = {
    "gemm": "GEMM", "convolution": "convolution", "attention": "attention (incl. softmax)",
    "normalisation": "normalisation", "elementwise": "elementwise", "layout_transform": "layout transform",
    "reduction_sampling": "reduction / sampling", "memcpy_memset": "memcpy / memset", "communication": "communication",
    "other": "other kernels", "data_loading": "waiting: data loading", "host_sync": "waiting: host sync",
    "comm_wait": "waiting: communication", "host_python": "waiting: host Python", "host_late": "waiting: host launching late",
    "host_before_launch": "waiting: host before the step's first launch",
    "launch_cadence": "waiting: launch cadence (< 100 µs gaps)", "unattributed": "unattributed",
}

# Layout transforms: NCHW<->NHWC conversions (cuDNN's nchwToNhwcKernel / nhwcToNchwKernel),
# transposes, permutes and the copies that .contiguous() launches (ATen direct_copy /
# copy_kernel): what channels-last or a fused layout removes.
_CONVERSION = r"nchwToNhwc|nhwcToNchw|nchw2nhwc|nhwc2nchw"
_IS_CONVERSION = re.compile(_CONVERSION, re.I)
_LAYOUT = re.compile(_CONVERSION + r"|transpose|permute|direct_copy|\bcopy_kernel|CopyKernel|unrolled_elementwise_kernel<at::native::copy", re.I)
_SAMPLING = re.compile(r"sampl|multinomial|topk|top_k|argmax|sort|radix", re.I)
_FAMILY_PART = {
    "gemm": "gemm", "conv": "convolution", "attention": "attention", "softmax": "attention", "norm": "normalisation",
    "elementwise": "elementwise", "reduction": "reduction_sampling", "communication": "communication", "other": "other",
}
# A sync call that waits on a collective (c10d's wait, NCCL's stream sync through ProcessGroup)
_COMM_CALL = re.compile(r"nccl|rccl|c10d|ProcessGroup|all_?reduce|all_?gather|barrier", re.I)
ADD_UP_TOLERANCE = 0.01  # the contract: parts add up to the step within 1 %


def is_layout_conversion(name: object) -> bool:
    """An NCHW<->NHWC conversion kernel (cuDNN's, around a convolution that runs in NHWC)."""
    return isinstance(name, str) and bool(_IS_CONVERSION.search(name))


@lru_cache(maxsize=16384)
def kernel_part(name: str, kind: str, fam: str) -> str:
    """The busy part of one GPU activity (its name, kind and :mod:`perfdoctor.names.families` family)."""
    if kind in ("memcpy", "memset"):
        return "memcpy_memset"
    if fam == "communication":
        return "communication"
    text = name if isinstance(name, str) else ""
    if _LAYOUT.search(text):
        return "layout_transform"
    if fam == "softmax" and is_log_softmax(text):
        return "reduction_sampling"  # a loss's log-softmax, not attention
    if fam == "memory":
        return "memcpy_memset" if re.search(r"memset|fill", text, re.I) else "layout_transform"
    if _SAMPLING.search(text) and fam in ("reduction", "other", "elementwise"):
        return "reduction_sampling"
    return _FAMILY_PART.get(fam, "other")


def activity_parts(timeline) -> np.ndarray:
    """The busy part (:func:`kernel_part`) of every step activity of ``timeline``, aligned
    with ``timeline.activities``: computed once per distinct name, kind and family, the
    rows matched to theirs by codes (:func:`.codes.factorize`), not a call per row."""
    parts, row = activity_part_codes(timeline)
    return parts[row]


def activity_part_codes(timeline) -> tuple[np.ndarray, np.ndarray]:
    """:func:`activity_parts` as ``(parts, codes)``, ``parts[codes]`` being it: a test of the
    part of every activity is one on the few parts (:func:`part_is`), not an object compare
    per row (~0.8 ms each on HF 80 MB's 47k activities, 20 of them per analysis). Computed
    once per Timeline (the attribution and the bounds both read it)."""
    if timeline.part_codes is None:
        timeline.part_codes = _activity_part_codes(timeline)
    return timeline.part_codes


def part_is(timeline, part: str | tuple[str, ...]) -> np.ndarray:
    """Which step activities of ``timeline`` are of ``part`` (or of any of a tuple of parts), a boolean array."""
    parts, row = activity_part_codes(timeline)
    hit = np.isin(parts, part) if isinstance(part, tuple) else parts == part
    return hit[row]


def _activity_part_codes(timeline) -> tuple[np.ndarray, np.ndarray]:
    acts = timeline.activities
    if acts.empty:
        return np.zeros(0, dtype=object), np.zeros(0, dtype=np.intp)
    (names, name_of), (kinds, kind_of), (fams, fam_of) = (factorize(c) for c in (acts["name"], acts["kind"], timeline.families))
    # numbered by hashing (pandas), not by np.unique's sort: 0.2 against 2.4 ms on HF 80 MB
    row, triples = pd.factorize((names * len(kind_of) + kinds) * len(fam_of) + fams)
    name, rest = np.divmod(triples, len(kind_of) * len(fam_of))
    kind, fam = np.divmod(rest, len(fam_of))
    parts = np.array([kernel_part(*t) for t in zip(name_of[name], kind_of[kind], fam_of[fam])], dtype=object)
    return parts, row.reshape(-1)


@dataclass
class Attribution:
    """Per traced step (``per_step``: ms, one row per step with GPU work) and for the
    headline step (``step``: ms, adds up to ``step_ms``)."""

    step_ms: float
    source: str  # "light" or the trace's loader
    step: dict[str, float]
    per_step: pd.DataFrame  # columns: step, step_ms, then PARTS
    sites: list[tuple[str, float]] = field(default_factory=list)  # host Python call sites, ms per step
    sync_calls: list[tuple[str, float]] = field(default_factory=list)  # the sync calls waited on, ms per step
    note: str | None = None
    reason: str | None = None  # why there is no attribution

    @property
    def busy_ms(self) -> float:
        return sum(self.step[p] for p in BUSY_PARTS)

    def largest(self, n: int = 3) -> list[tuple[str, float]]:
        return sorted(((p, v) for p, v in self.step.items() if v > 0), key=lambda kv: -kv[1])[:n]

    def share(self, part: str) -> float:
        return self.step.get(part, 0.0) / self.step_ms if self.step_ms > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        if self.reason:
            return {"unit": "ms", "source": self.source, "value": None, "reason": self.reason}
        rows = self.per_step.to_dict(orient="records")
        return {
            "unit": "ms",
            "source": self.source,
            "step_ms": self.step_ms,
            "parts": {p: self.step[p] for p in PARTS},
            "labels": {p: LABELS[p] for p in PARTS},
            "busy_parts": list(BUSY_PARTS),
            "wait_parts": list(WAIT_PARTS),
            "host_python_sites": [{"site": s, "ms_per_step": v} for s, v in self.sites],
            "sync_calls": [{"call": s, "ms_per_step": v} for s, v in self.sync_calls],
            "steps": [{k: (int(v) if k == "step" else float(v)) for k, v in r.items()} for r in rows],
            "note": self.note,
        }


def _absent(reason: str, source: str) -> Attribution:
    return Attribution(0.0, source, {p: 0.0 for p in PARTS}, pd.DataFrame(columns=["step", "step_ms", *PARTS]), reason=reason)


def _busy(analysis, windows: pd.DataFrame, lo: np.ndarray, hi: np.ndarray) -> dict[str, np.ndarray]:
    """Per step (position in ``windows``), GPU busy ns by part inside its window."""
    t = analysis.timeline
    acts = t.activities
    n = len(windows)
    pos = pd.Series(np.arange(n), index=windows.index)
    where = pos.reindex(acts["step"].to_numpy()).to_numpy()
    ok = ~np.isnan(where)
    g = np.where(ok, where, 0).astype(np.int64)
    s = np.clip(acts["start_ns"].to_numpy(np.int64), lo[g], hi[g])
    e = np.clip(acts["end_ns"].to_numpy(np.int64), lo[g], hi[g])
    out: dict[str, np.ndarray] = {}
    covered = np.zeros(n, dtype=np.int64)
    mask = np.zeros(len(acts), dtype=bool)
    # Sorted once: a growing subset taken in this order is in the order union_per_group
    # sorts it in (a stable sort), so each class costs a selection, not a sort; a class
    # with no activity adds nothing (HF 80 MB: 4 of the 10 classes).
    order = np.lexsort((s, g))
    for p in BUSY_PARTS:
        added = ok & part_is(t, p)
        if not added.any():
            out[p] = np.zeros(n, dtype=np.int64)
            continue
        mask |= added
        rows = order[mask[order]]
        union = sorted_union_per_group(s[rows], e[rows], g[rows], n)
        out[p] = union - covered  # what this class adds to the classes before it
        covered = union
    return out


def _waits(h: pd.DataFrame, analysis, windows: pd.DataFrame, lo: np.ndarray, hi: np.ndarray, idle: np.ndarray, first: int = 0):
    """Per step, GPU waiting ns by cause (module docstring) from the labelled intervals ``h``
    (:func:`perfdoctor.analysis.hostgaps.gap_hosts`), the host-Python sites and sync calls
    (ms per step over the headline's steps: those from position ``first`` on)."""
    n = len(windows)
    out = {p: np.zeros(n, dtype=np.int64) for p in WAIT_PARTS}
    sites: dict[str, float] = {}
    syncs: dict[str, float] = {}
    if h.empty:
        out["unattributed"] = idle.copy()
        return out, sites, syncs
    pos = pd.Series(np.arange(n), index=windows.index)
    where = pos.reindex(h["step"].to_numpy()).to_numpy()
    ok = ~np.isnan(where)
    h = h[ok]
    g = where[ok].astype(np.int64)
    s = np.clip(h["start_ns"].to_numpy(np.int64), lo[g], hi[g])
    e = np.clip((h["start_ns"] + h["length_ns"]).to_numpy(np.int64), lo[g], hi[g])
    length = np.clip(e - s, 0, None)
    # Data loading: the time of each interval under a DataLoader __next__ range (any thread).
    r = analysis.profile.ranges
    dl = r[equals(r["source"], DATA_LOADER_SOURCE)]
    loading = hostgaps.Intervals(dl).covered(s, e) if not dl.empty else np.zeros(len(h), dtype=np.int64)
    rest = length - loading
    np.add.at(out["data_loading"], g, loading)
    host = h["host"].to_numpy(dtype=object)
    site = h["site"].to_numpy(dtype=object)
    busy = np.minimum(h["busy_ns"].to_numpy(np.int64), rest)
    codes, sites_named = factorize(site)  # a few distinct sites over every interval: each searched once
    comm = np.array([bool(_COMM_CALL.search(str(x))) for x in sites_named], dtype=bool)[codes]
    # An interval in which a synchronizing call returned is the sync's: the GPU ran dry while
    # the host waited, and stays idle until the host issues new work (estimates.sync_wait_time).
    calls = analysis.profile.calls
    sync_ends = np.sort(calls.loc[is_sync(calls["name"]).to_numpy(), "end_ns"].to_numpy(np.int64)) if not calls.empty else np.zeros(0, np.int64)
    # Each label tested on the few distinct labels (codes), not by an object compare per
    # interval (~0.8 ms each on HF 80 MB's 45k intervals, a dozen per analysis).
    host_of, hosts = factorize(host)
    is_host = {label: (hosts == label)[host_of] for label in ("unknown", "waiting", "launching", "short", "busy")}
    # whether a sync returned inside it, read for the unknown intervals only (the only ones it relabels)
    returned = np.zeros(len(h), dtype=bool)
    unknown_at = np.flatnonzero(is_host["unknown"])
    returned[unknown_at] = np.searchsorted(sync_ends, e[unknown_at], side="right") > np.searchsorted(sync_ends, s[unknown_at], side="left")
    is_host["waiting"] = is_host["waiting"] | (is_host["unknown"] & returned)  # relabelled "waiting"
    is_host["unknown"] = is_host["unknown"] & ~returned
    # The host inside a copy call in what is left unknown: a pageable source is staged by the
    # driver while cudaMemcpyAsync blocks (h200-pageable-sync: 0.23 of the 0.30 ms before
    # each step's first GPU work), the copy's own host side, not host preparation.
    copies = calls[is_copy(calls["name"])] if not calls.empty else calls
    if not copies.empty and unknown_at.size:
        in_copy = np.zeros(len(h), dtype=np.int64)
        still = unknown_at[~returned[unknown_at]]
        in_copy[still] = np.minimum(hostgaps.Intervals(copies).covered(s[still], e[still]), rest[still])
        np.add.at(out["host_sync"], g, in_copy)
        rest = rest - in_copy
    lead = equals(h["where"], hostgaps.LEAD_IN)
    late = {"host_late": ~lead, "host_before_launch": lead}  # where the host's unexplained time goes
    for label, part in (("waiting", "host_sync"), ("launching", "launch_cadence"), ("short", "launch_cadence")):
        m = is_host[label]
        if label == "waiting":
            np.add.at(out["comm_wait"], g[m & comm], rest[m & comm])
            m = m & ~comm
        np.add.at(out[part], g[m], rest[m])
    for part in ("host_late", "host_before_launch"):
        m = is_host["unknown"] & late[part]
        np.add.at(out[part], g[m], rest[m])
    # A busy interval: the Python time is host Python; the rest of it the host issuing late.
    m = is_host["busy"]
    np.add.at(out["host_python"], g[m], busy[m])
    for part in ("host_late", "host_before_launch"):
        np.add.at(out[part], g[m & late[part]], (rest - busy)[m & late[part]])
    steps = max(n - first, 1)
    mine = g >= first
    for i in np.flatnonzero(m & (busy > 0) & mine):
        key = str(site[i]) or "(no user frame: library code)"
        sites[key] = sites.get(key, 0.0) + busy[i] / 1e6 / steps
    for i in np.flatnonzero(is_host["waiting"] & (rest > 0) & mine):
        key = str(site[i]) or "(a sync returned inside the gap)"
        syncs[key] = syncs.get(key, 0.0) + rest[i] / 1e6 / steps
    labelled = sum(out[p] for p in WAIT_PARTS)
    out["unattributed"] = idle - labelled  # intervals hostgaps left out; never negative (they are inside the idle time)
    return out, sites, syncs


def attribute(analysis) -> Attribution:
    """The attribution of ``analysis`` (module docstring)."""
    source = analysis.profile.origin.source or "trace"
    t = analysis.timeline.steps
    w = t[t["gpu_start_ns"].notna() & t["critical_path_ns"].notna()]
    if w.empty:
        return _absent(analysis.steps.reason or "no step launched GPU work", source)
    hi = w["gpu_end_ns"].astype("int64").to_numpy()
    cp = w["critical_path_ns"].astype("int64").to_numpy()
    lo = hi - cp
    busy = _busy(analysis, w, lo, hi)
    busy_total = sum(busy.values())
    idle = cp - busy_total
    warmup = steady.device_warmup(cp, busy_total)
    hosts = hostgaps.gap_hosts(analysis)
    waits, sites, syncs = _waits(hosts, analysis, w, lo, hi, idle, warmup.start)
    per = pd.DataFrame({"step": w.index.to_numpy(), "step_ms": cp / 1e6, **{p: v / 1e6 for p, v in {**busy, **waits}.items()}})
    per = per[["step", "step_ms", *PARTS]]

    light = analysis.metrics.get("step_latency_ms_p50")
    untraced = light is not None and light.value and light.source == "light"
    step_ms = float(light.value) if untraced else float(np.median(cp)) / 1e6
    mean = {p: float(per[p].iloc[warmup.start:].mean()) for p in PARTS}
    busy_ms = sum(mean[p] for p in BUSY_PARTS)
    wait_ms = sum(mean[p] for p in WAIT_PARTS)
    note = None
    head: dict[str, float] = {}
    if busy_ms <= step_ms:
        scale = (step_ms - busy_ms) / wait_ms if wait_ms > 0 else 0.0
        head = {p: mean[p] if p in BUSY_PARTS else mean[p] * scale for p in PARTS}
        if wait_ms <= 0 and step_ms > busy_ms:
            head["unattributed"] = step_ms - busy_ms
    else:
        scale = step_ms / busy_ms
        head = {p: mean[p] * scale if p in BUSY_PARTS else 0.0 for p in PARTS}
        note = (f"the traced steps' mean GPU busy time ({value(busy_ms, 'ms')}) exceeds the "
                f"{'untraced' if untraced else 'median traced'} step ({value(step_ms, 'ms')}): the busy parts are scaled to the step")
    if untraced and note is None:
        note = (f"GPU busy per class: mean of {len(per) - warmup.start} traced steps; waiting: the untraced step {value(step_ms, 'ms')} less the busy "
                f"time, split as in the traced steps (the tracer stretches host gaps, not kernels)")
    if warmup.start:
        ids = per["step"].astype(int).tolist()
        gone = f"step {ids[0]}" if warmup.start == 1 else f"steps {ids[0]}-{ids[warmup.start - 1]}"
        left = (f"parts: mean of steps {ids[warmup.start]}-{ids[-1]}; {gone} left out as warm-up: {warmup.reason}, "
                "the device work the steady steps do not repeat (it stays in the per-step rows and in every metric)")
        note = left if note is None else f"{left}; {note}"
    return Attribution(
        step_ms=step_ms,
        source="light" if untraced else source,
        step=head,
        per_step=per.reset_index(drop=True),
        sites=sorted(sites.items(), key=lambda kv: -kv[1])[:5],
        sync_calls=sorted(syncs.items(), key=lambda kv: -kv[1])[:5],
        note=note,
    )
