"""How much time per step fixing a finding should win back: small, stated formulas.

The report ranks failures by these numbers, so each one is a formula a reader can check
against the trace, not a model. Every estimator returns the milliseconds per step and the
numbers of its formula (one dataclass per formula below), which
:mod:`perfdoctor.reports.estimates` words: a number becomes text in reports/ only. Parameters (``residual_gap_us``, ``speedup``)
come from the rule's ``[rule.estimate]`` table, so a pack can restate an assumption. Each
also gets the values the rules read (:func:`perfdoctor.rules.signals.inputs`): a number of
the whole job, as the straggler's delay, is one of them and in no rank's Analysis.

Estimates that measure the same bubbles (launch overhead, short kernels, idle GPU) are not
additive; the engine marks findings that share an estimate as overlapping.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Union

import numpy as np
import pandas as pd

from perfdoctor.analysis import steady
from perfdoctor.analysis.metrics import Analysis, Metric
from perfdoctor.names.codes import equals
from perfdoctor.rules.signals import (
    attention_softmax, convolution_layout_share, layout_conversions, model_bytes_per_step, steady_cpu_waits_ms, step_activities,
)


class Need(enum.Enum):
    """What an estimate cannot be made without."""

    GPU_STEPS = "gpu_steps"  # steps with GPU work
    EXPOSED_COMM = "exposed_comm"  # the exposed_comm_ms_per_step metric
    RANKS = "ranks"  # several ranks of one job
    ATTRIBUTION = "attribution"  # the step attribution
    DRAM_BW = "dram_bw"  # dram_bw_util and steps with GPU work
    LIGHT_STEPS = "light_steps"  # the light pass's steady steps
    PYTHON_STACKS = "python_stacks"  # Python stacks in the trace
    FORMULA = "formula"  # the pack gives the rule no estimate: the finding's, not an estimator's


@dataclass(frozen=True)
class Unavailable:
    """No estimate: what it needs, and ``why`` it is missing as its source said it (the
    analysis's reason, which analysis/ still words; the pack's ``no_estimate``), if any."""

    need: Need
    why: str | None = None


class Of(enum.Enum):
    """What a median per step is of."""

    EXPOSED_COMM = "exposed_comm"  # |communication| − |communication ∩ compute|
    STRAGGLER = "straggler"  # the straggler's busy time − the other ranks'
    SYNC_WAIT = "sync_wait"  # the idle gaps in which a synchronizing call returned or was in flight
    COPIES = "copies"  # copy + memset time
    SOFTMAX = "softmax"  # softmax kernel time
    PAGEABLE = "pageable"  # pageable copy time, × the part pinned memory saves
    FP32_GEMM = "fp32_gemm"  # fp32 GEMM time, × the part bf16 saves


@dataclass(frozen=True)
class Median:
    """The median per step of ``of``, × (1 − 1/``speedup``) where the fix makes it faster."""

    of: Of
    ms: float
    speedup: float | None = None


class Gaps(enum.Enum):
    """Which gaps a gap sum adds up."""

    BETWEEN = "between"  # between the step's GPU activities (after a sync, or with the host in Python, excluded)
    IN_REPLAY = "in_replay"  # between two kernels of a replayed graph
    BESIDE_GRAPHS = "beside_graphs"  # next to the eager work beside the graphs


@dataclass(frozen=True)
class GapSum:
    """Median over steps of Σ max(0, gap − ``residual_us``) over ``gaps`` (``ms``), capped at
    the untraced idle time per step (× ``share`` for a part of the gaps) where it exceeds
    it: ``cap_ms`` is then the estimate."""

    gaps: Gaps
    residual_us: float
    ms: float
    cap_ms: float | None = None
    share: float | None = None


class Floor(enum.Enum):
    """Where a step's bandwidth floor came from (:func:`bandwidth_gap`)."""

    DECLARED = "declared"  # declared bytes / (peak × target)
    LIGHT = "light"  # dram_bw_util × untraced step period / target
    SPAN = "span"  # dram_bw_util × |S| / steps / target


@dataclass(frozen=True)
class BandwidthGap:
    """Median over steps of (GPU busy time − the step's bytes at ``target`` of peak, ``floor_ms``)."""

    floor: Floor
    target: float
    floor_ms: float
    ms: float


@dataclass(frozen=True)
class BoundsGap:
    """Σ over the memory-bound classes of (kernel time − its bytes at ``target`` × ``bw_gbps``)."""

    target: float
    bw_gbps: float
    ms: float


@dataclass(frozen=True)
class HostBusy:
    """Idle time per step while the host ran Python, and the call sites that took it (ms per step)."""

    ms: float
    sites: tuple[tuple[str, float], ...]


@dataclass(frozen=True)
class PartTime:
    """The attribution's ``what`` (a label of its parts) per step, × ``saved``."""

    what: str
    ms: float
    source: str
    saved: float


@dataclass(frozen=True)
class HiddenPart:
    """The attribution's ``what`` per step (``ms``), of which making it ahead hides at most
    ``rest_ms``, the rest of the step it would overlap; × ``saved``."""

    what: str
    ms: float
    rest_ms: float
    source: str
    saved: float


@dataclass(frozen=True)
class NchwFed:
    """Per step, the NCHW<->NHWC conversions around the convolution kernels (:func:`nchw_fed`)."""

    conversions: float
    convolutions: float


@dataclass(frozen=True)
class LayoutTime:
    """Layout transforms per step × ``saved``, plus ``penalty`` × the NCHW classes' time
    (``nchw_ms``) where the step is ``fed`` NCHW tensors."""

    transforms_ms: float
    source: str
    saved: float
    ms: float
    penalty: float = 0.0
    nchw_ms: float = 0.0
    fed: NchwFed | None = None


@dataclass(frozen=True)
class NormElementwise:
    """(normalisation × (1 − ``penalty`` where ``fed``) + elementwise) per step × ``saved``."""

    norm_ms: float
    elementwise_ms: float
    source: str
    saved: float
    ms: float
    penalty: float = 0.0
    fed: NchwFed | None = None


@dataclass(frozen=True)
class SlowStepTime:
    """The light pass's slow steps: their time beyond the median, per step, × ``saved``."""

    slow: steady.SlowSteps
    per_step_ms: float
    saved: float


@dataclass(frozen=True)
class CpuWaitTime:
    """The light pass's steady steps' waits for a CPU (``waited_ms`` over ``steps``), per
    step, × ``saved``."""

    waited_ms: float
    steps: int
    per_step_ms: float
    saved: float


# An estimate's formula with its numbers, worded by perfdoctor.reports.estimates.formula.
Formula = Union[Unavailable, Median, GapSum, BandwidthGap, BoundsGap, HostBusy, PartTime, HiddenPart, LayoutTime, NormElementwise, SlowStepTime,
                CpuWaitTime]


@dataclass(frozen=True)
class Estimate:
    ms_per_step: float | None
    how: Formula


def _median_ms(values_ns: np.ndarray) -> float:
    return float(np.median(values_ns)) / 1e6 if len(values_ns) else 0.0


def step_idle_ns(analysis: Analysis) -> np.ndarray:
    """Each step's idle GPU time (its GPU window − busy time; 0 without GPU work): the most
    any idle-based estimate can win back in that step."""
    t = analysis.timeline.steps
    idle = pd.to_numeric(t["idle_ns"], errors="coerce").astype("float64").fillna(0.0).to_numpy()
    return np.clip(idle, 0, None)


def _per_step_ms(analysis: Analysis, per_gap_ns: np.ndarray, steps: np.ndarray) -> float:
    """Median over all steps (a step without such gaps counts 0) of the per-step sum, in ms,
    each step's sum clipped to that step's idle time (an estimate made of idle time can
    never recover more than the GPU was idle)."""
    totals = np.zeros(max(analysis.steps.count, 1))
    np.add.at(totals, steps.astype(np.int64), per_gap_ns)
    if analysis.steps.count:
        totals = np.minimum(totals, step_idle_ns(analysis)[: totals.size])
    return _median_ms(totals)


def exposed_comm(analysis: Analysis, threshold: float | None, params: dict[str, Any], values: Mapping[str, Metric]) -> Estimate:
    """Communication no compute kernel hides: what perfect overlap would win per step
    (``exposed_comm_ms_per_step``)."""
    ms = analysis.value("exposed_comm_ms_per_step")
    if ms is None:
        m = analysis.metrics.get("exposed_comm_ms_per_step")
        return Estimate(None, Unavailable(Need.EXPOSED_COMM, m.reason if m is not None else None))
    return Estimate(ms, Median(Of.EXPOSED_COMM, ms))


def straggler_delay(analysis: Analysis, threshold: float | None, params: dict[str, Any], values: Mapping[str, Metric]) -> Estimate:
    """Balancing the ranks wins back the straggler's delay per step: that long every
    other rank waits for it in a collective (``straggler_delay_ms``, :mod:`perfdoctor.analysis.ranks`)."""
    ms = values["straggler_delay_ms"].value  # the job's, not in the rank's Analysis
    if ms is None:
        return Estimate(None, Unavailable(Need.RANKS))
    return Estimate(ms, Median(Of.STRAGGLER, ms))


def idle_between_kernels(analysis: Analysis, threshold: float | None, params: dict[str, Any], values: Mapping[str, Metric]) -> Estimate:
    """Bubbles between a step's GPU activities, less the gap that back-to-back replay still leaves.

    Per gap: max(0, gap − residual). A CUDA graph replays kernels with ~1-2 µs between them
    instead of the host's launch cadence; a megakernel leaves none (``residual_gap_us = 0``).
    Gaps in which a synchronizing call returned, or was in flight for most of the gap, are
    left out: they are the host-syncs rule's time (:func:`sync_wait_time`), and a graph does not remove a sync. So are gaps in
    which the host ran Python (:func:`perfdoctor.analysis.hostgaps.gap_hosts` "busy"): the
    host-busy-in-gaps rule's time; a graph replays kernels, not the Python between them.
    """
    if analysis.steps.count == 0:
        return Estimate(None, Unavailable(Need.GPU_STEPS))
    return _gap_sum(analysis, _launch_gaps(analysis), float(params.get("residual_gap_us", 2.0)), Gaps.BETWEEN)


def _launch_gaps(analysis: Analysis) -> np.ndarray:
    """Which gaps of the timeline launches can explain: not after or inside a sync, not with the host running Python.
    Computed once per Timeline (a copy returned each time: callers combine it with other masks)."""
    timeline = analysis.timeline
    if timeline.launch_gaps is None:
        timeline.launch_gaps = _launch_gaps_of(analysis)
    return timeline.launch_gaps.copy()


def _launch_gaps_of(analysis: Analysis) -> np.ndarray:
    from perfdoctor.analysis.hostgaps import BETWEEN, gap_hosts

    gaps = analysis.timeline.gaps
    keep = ~gaps["after_sync"].to_numpy(dtype=bool) & ~_waiting(analysis)  # host syncs' time (sync_wait_time)
    h = gap_hosts(analysis)  # computed once per analysis, kept on the timeline
    busy = h["start_ns"].to_numpy(np.int64)[equals(h["host"], "busy") & equals(h["where"], BETWEEN)]
    if busy.size:
        keep &= ~np.isin(gaps["start_ns"].to_numpy(np.int64), busy)  # a gap is known by its start
    return keep


def _inside_replay(analysis: Analysis) -> np.ndarray:
    """Which gaps lie between two kernels of one graph replay: the activity before and the
    one after were both replayed, and no eager activity touches the gap."""
    from perfdoctor.analysis.capture import replayed

    acts = analysis.timeline.activities
    rep = replayed(analysis.profile)[acts.index.to_numpy()]  # the timeline keeps the profile's row labels
    start, end = acts["start_ns"].to_numpy(np.int64), acts["end_ns"].to_numpy(np.int64)
    gaps = analysis.timeline.gaps
    g0, g1 = gaps["start_ns"].to_numpy(np.int64), gaps["end_ns"].to_numpy(np.int64)
    return np.isin(g0, end[rep]) & np.isin(g1, start[rep]) & ~np.isin(g0, end[~rep]) & ~np.isin(g1, start[~rep])


def graph_replay_gaps(analysis: Analysis, threshold: float | None, params: dict[str, Any], values: Mapping[str, Metric]) -> Estimate:
    """Gaps inside graph replays (:func:`_inside_replay`), less ``residual_gap_us``: the idle
    that fewer kernels per replay (fusion) or a persistent kernel removes, and the only
    time a launch-rate finding on graph-replayed steps can win: one graph launch per step
    is the floor short of a megakernel, and the gaps next to the eager work beside the
    graphs are :func:`beside_graph_gaps`'."""
    if analysis.steps.count == 0:
        return Estimate(None, Unavailable(Need.GPU_STEPS))
    launch = _launch_gaps(analysis)
    return _gap_sum(analysis, launch & _inside_replay(analysis), float(params.get("residual_gap_us", 0.0)), Gaps.IN_REPLAY, of=launch)


def beside_graph_gaps(analysis: Analysis, threshold: float | None, params: dict[str, Any], values: Mapping[str, Metric]) -> Estimate:
    """The gaps :func:`idle_between_kernels` counts, less those inside graph replays: the idle
    around the eager launches left beside the graphs, what capturing them wins (added to
    :func:`graph_replay_gaps`, not overlapping it)."""
    if analysis.steps.count == 0:
        return Estimate(None, Unavailable(Need.GPU_STEPS))
    launch = _launch_gaps(analysis)
    return _gap_sum(analysis, launch & ~_inside_replay(analysis), float(params.get("residual_gap_us", 2.0)), Gaps.BESIDE_GRAPHS, of=launch)


def _gap_sum(analysis: Analysis, keep: np.ndarray, residual_us: float, which: Gaps, of: np.ndarray | None = None) -> Estimate:
    """Median over steps of Σ max(0, gap − residual) over the gaps ``keep`` selects, capped
    at the untraced idle time per step. With ``of`` (the gaps that ``keep`` is one part of),
    the cap is that idle time × the part's share of the traced gap time in ``of`` (medians
    per step): parts
    that split the gaps then split the untraced idle too, and their estimates add up."""
    gaps = analysis.timeline.gaps
    length = gaps["length_ns"].to_numpy(dtype=np.float64)
    won = np.clip(length[keep] - residual_us * 1e3, 0, None)
    ms = _per_step_ms(analysis, won, gaps["step"].to_numpy()[keep])
    cap = untraced_idle_ms(analysis)
    share = None
    if cap is not None and of is not None:
        step = gaps["step"].to_numpy()
        whole = _per_step_ms(analysis, length[of], step[of])  # medians per step, as the estimate: an outlier step does not set the share
        share = min(1.0, _per_step_ms(analysis, length[keep & of], step[keep & of]) / whole) if whole > 0 else 0.0
        cap *= share
    if cap is not None and ms > cap:
        # The gaps were measured under the tracer, which stretches host gaps; the step's
        # idle time without it is the most a fix can win back.
        return Estimate(cap, GapSum(which, residual_us, ms, cap, share))
    return Estimate(ms, GapSum(which, residual_us, ms))


def untraced_idle_ms(analysis: Analysis) -> float | None:
    """Per step, the light pass's step time less the GPU busy time measured in the trace
    (kernel durations are not stretched by tracing, host gaps are): the idle time a fix of
    bubbles can win back at most. None without a light pass."""
    p50 = analysis.metrics.get("step_latency_ms_p50")
    busy = analysis.timeline.with_gpu["busy_ns"].to_numpy(dtype=np.float64)
    if p50 is None or p50.value is None or p50.source != "light" or busy.size == 0:
        return None
    return max(0.0, p50.value - float(np.median(busy)) / 1e6)


def sync_wait_time(analysis: Analysis, threshold: float | None, params: dict[str, Any], values: Mapping[str, Metric]) -> Estimate:
    """GPU idle time in the gaps during which a synchronizing call returned, or was in flight
    for most of the gap (:func:`perfdoctor.analysis.hostgaps.gap_hosts` "waiting": a
    synchronous copy the GPU idles behind; the attribution's host-sync time).

    After a sync returns, the GPU has nothing queued until the host issues the next work:
    that bubble is what removing the sync wins (the wait itself is the GPU finishing work
    that has to run anyway).
    """
    if analysis.steps.count == 0:
        return Estimate(None, Unavailable(Need.GPU_STEPS))
    gaps = analysis.timeline.gaps
    gaps = gaps[gaps["after_sync"].to_numpy(dtype=bool) | _waiting(analysis)]
    ms = _per_step_ms(analysis, gaps["length_ns"].to_numpy(dtype=np.float64), gaps["step"].to_numpy())
    return Estimate(ms, Median(Of.SYNC_WAIT, ms))


def _waiting(analysis: Analysis) -> np.ndarray:
    """Which gaps of the timeline the host spent inside a synchronizing call (hostgaps "waiting").
    Computed once per Timeline (the sync-wait estimate and the launch gaps both read it; a copy
    returned each time)."""
    from perfdoctor.analysis.hostgaps import BETWEEN, gap_hosts

    timeline = analysis.timeline
    if timeline.waiting_gaps is None:
        h = gap_hosts(analysis)
        waiting = h["start_ns"].to_numpy(np.int64)[equals(h["host"], "waiting") & equals(h["where"], BETWEEN)]
        timeline.waiting_gaps = np.isin(timeline.gaps["start_ns"].to_numpy(np.int64), waiting)  # a gap is known by its start
    return timeline.waiting_gaps.copy()


def pageable_copy_time(analysis: Analysis, threshold: float | None, params: dict[str, Any], values: Mapping[str, Metric]) -> Estimate:
    """Time in pageable copies × the part pinned memory saves (pinned copies run ``speedup``× faster)."""
    speedup = float(params.get("speedup", 2.0))
    st = analysis.timeline.with_gpu
    if st.empty:
        return Estimate(None, Unavailable(Need.GPU_STEPS))
    ms = _median_ms(st["pageable_ns"].to_numpy()) * (1 - 1 / speedup)
    return Estimate(ms, Median(Of.PAGEABLE, ms, speedup))


def memcpy_time(analysis: Analysis, threshold: float | None, params: dict[str, Any], values: Mapping[str, Metric]) -> Estimate:
    """Copy and memset time inside a step: what keeping the data on the device removes."""
    st = analysis.timeline.with_gpu
    if st.empty:
        return Estimate(None, Unavailable(Need.GPU_STEPS))
    ms = _median_ms(st["copy_ns"].to_numpy())
    return Estimate(ms, Median(Of.COPIES, ms))


def bandwidth_gap(analysis: Analysis, threshold: float | None, params: dict[str, Any], values: Mapping[str, Metric]) -> Estimate:
    """GPU busy time beyond what the step's bytes need at the target bandwidth.

    Where the kernel classes' bounds are known (:mod:`perfdoctor.analysis.bounds`), the
    memory-bound classes' time beyond their bytes at the target; else, for the whole step:

    A step moves B bytes; at the target utilisation that takes ``floor = B / (peak × target)``.
    B comes from where ``dram_bw_util`` came from: the declared bytes (source ``model``);
    a counter averaged over the light pass's steady steps: ``util × peak × step period``
    (1 / steps_per_s); a counter averaged over the traced span S: ``util × peak × |S| / steps``.
    Idle gaps are left out — they are the bubble rules' time — so this is what better
    kernels (weights streamed continuously, fewer bytes) win on top of removing bubbles.
    """
    if analysis.bounds.memory_bound_bw_util()[0] is not None:  # what the rule judged: the memory-bound classes
        ms = analysis.bounds.memory_bound_gap_ms(threshold or 0.0)
        if ms is not None:
            return Estimate(ms, BoundsGap(threshold or 0.0, analysis.bounds.peaks.bw_gbps, ms))
    m = analysis.metrics.get("dram_bw_util")
    util = None if m is None else m.value
    span = analysis.steps.span
    if util is None or not threshold or span is None or analysis.steps.count == 0:
        return Estimate(None, Unavailable(Need.DRAM_BW))
    peak = analysis.value("peak_dram_bw_gbps")
    nbytes = model_bytes_per_step(analysis).value
    sps = analysis.value("steps_per_s")
    if m.source == "model" and nbytes and peak:
        floor_ns = nbytes / (peak * threshold)  # bytes / (GB/s) = ns
        floor = Floor.DECLARED
    elif analysis.light is not None and sps:
        floor_ns = util * 1e9 / sps / threshold
        floor = Floor.LIGHT
    else:
        floor_ns = util * (span[1] - span[0]) / analysis.steps.count / threshold
        floor = Floor.SPAN
    st = analysis.timeline.with_gpu
    ms = _median_ms(np.clip(st["busy_ns"].to_numpy(dtype=np.float64) - floor_ns, 0, None))
    return Estimate(ms, BandwidthGap(floor, threshold, floor_ns / 1e6, ms))


def fp32_gemm_time(analysis: Analysis, threshold: float | None, params: dict[str, Any], values: Mapping[str, Metric]) -> Estimate:
    """fp32 GEMM time × the part bf16 tensor cores save (``speedup``× faster)."""
    speedup = float(params.get("speedup", 2.0))
    k = analysis.timeline.gemm_kernels
    k = k[k["precision"] == "fp32"]
    per_step = (k["end_ns"] - k["start_ns"]).groupby(k["step"]).sum().reindex(range(analysis.steps.count), fill_value=0)
    ms = _median_ms(per_step.to_numpy()) * (1 - 1 / speedup)
    return Estimate(ms, Median(Of.FP32_GEMM, ms, speedup))


def softmax_time(analysis: Analysis, threshold: float | None, params: dict[str, Any], values: Mapping[str, Metric]) -> Estimate:
    """Softmax kernel time per step: what fused attention removes.

    Unfused attention writes the score matrix, runs a softmax pass over it and reads it back
    for the second GEMM; a fused kernel (FlashAttention, SDPA) keeps the scores on chip, so
    the separate softmax pass disappears. The GEMMs stay (fused attention does the same
    FLOPs), so they are not counted: a lower bound of what fusing wins.
    """
    acts = step_activities(analysis)
    k = acts[equals(acts["kind"], "kernel")]
    k = k[attention_softmax(k)]
    if analysis.steps.count == 0:
        return Estimate(None, Unavailable(Need.GPU_STEPS))
    per_step = (k["end_ns"] - k["start_ns"]).groupby(k["step"]).sum().reindex(range(analysis.steps.count), fill_value=0)
    ms = _median_ms(per_step.to_numpy())
    return Estimate(ms, Median(Of.SOFTMAX, ms))


def host_busy_gaps(analysis: Analysis, threshold: float | None, params: dict[str, Any], values: Mapping[str, Metric]) -> Estimate:
    """Idle time (gaps and lead-ins) in which the host ran Python: what moving that work off the step wins."""
    from perfdoctor.analysis.hostgaps import busy_summary

    b = busy_summary(analysis)
    if b.ratio is None:
        return Estimate(None, Unavailable(Need.PYTHON_STACKS, b.reason))
    return Estimate(b.ms_per_step, HostBusy(b.ms_per_step, tuple(b.sites[:3])))


def _part_time(parts: tuple[str, ...], what: str) -> Callable[[Analysis, float | None, dict[str, Any], Mapping[str, Metric]], Estimate]:
    """The attribution's time in ``parts`` per step × ``saved`` (the share the fix removes,
    a pack parameter, 1.0 by default): the untraced step's milliseconds at stake."""

    def estimate(analysis: Analysis, threshold: float | None, params: dict[str, Any], values: Mapping[str, Metric]) -> Estimate:
        a = analysis.attribution
        if a.reason:
            return Estimate(None, Unavailable(Need.ATTRIBUTION, a.reason))
        saved = float(params.get("saved", 1.0))
        ms = sum(a.step[p] for p in parts)
        return Estimate(ms * saved, PartTime(what, ms, a.source, saved))

    # `rules explain` prints an estimate's docstring: each made here says what it counts.
    estimate.__doc__ = f"The step attribution's {what} per step × saved (the share the fix removes, 1.0 by default)."
    return estimate


def host_before_launch_time(analysis: Analysis, threshold: float | None, params: dict[str, Any], values: Mapping[str, Metric]) -> Estimate:
    """The GPU's wait for the host before the step's first launch, per step, at most the rest
    of the step (min(wait, step − wait)) × saved: made ahead, the next step's input overlaps
    this step's remaining work and hides behind no more than it. A step that is nearly all
    host work (GPU busy 0.01 %) wins almost nothing by preparing ahead."""
    a = analysis.attribution
    if a.reason:
        return Estimate(None, Unavailable(Need.ATTRIBUTION, a.reason))
    saved = float(params.get("saved", 1.0))
    wait = a.step["host_before_launch"]
    rest = max(a.step_ms - wait, 0.0)
    return Estimate(min(wait, rest) * saved, HiddenPart("GPU waiting for the host before the step's first launch", wait, rest, a.source, saved))


# The classes that run slower on NCHW tensors than in channels-last: cuDNN's convolutions
# (direct and the 1x1 ones it runs as GEMMs) and batch norms (why: :func:`nchw_fed`; the
# share they lose is the pack's ``nchw_penalty``).
NCHW_PARTS = ("convolution", "gemm", "normalisation")


def nchw_fed(analysis: Analysis, min_conv_share: float = 0.0) -> NchwFed | None:
    """Whether the step feeds NCHW tensors through NHWC kernels, and the evidence: cuDNN's
    NCHW<->NHWC conversions, at least one per convolution kernel (each NHWC convolution of
    an NCHW model converts its input, its output back, and its filter). Then channels-last
    removes the conversions *and* lets the convolutions and batch norms run their NHWC
    kernels, which are faster: the convolutions of an NCHW model are picked among fewer
    algorithms (1x1 ones as NCHW GEMMs) and its batch norm runs an NCHW kernel. None when
    the step has no convolution or converts less often (a channels-last model converting
    its input once), and None where the convolutions with their conversions
    (:func:`convolution_layout_share`) are less than ``min_conv_share`` of the GPU busy time:
    a transformer with one patch-embedding convolution (ViT, TimeSformer) converts around
    it, but its GEMMs are linear layers that channels-last does not touch."""
    if min_conv_share > 0 and (convolution_layout_share(analysis) or 0.0) < min_conv_share:
        return None
    t = analysis.timeline
    n = max(analysis.steps.count, 1)
    conv = int(equals(t.step_kernel_families, "conv").sum())
    conversions = int(layout_conversions(analysis).sum()) if conv else 0
    if conv == 0 or conversions < conv:
        return None
    return NchwFed(conversions / n, conv / n)


def layout_time(analysis: Analysis, threshold: float | None, params: dict[str, Any], values: Mapping[str, Metric]) -> Estimate:
    """What channels-last wins: the layout transforms × ``saved``, plus, where the step
    feeds NCHW tensors through NHWC kernels (:func:`nchw_fed`), ``nchw_penalty`` × the time
    of the classes that run faster in NHWC (:data:`NCHW_PARTS`). ``nchw_penalty`` is a
    measured share (the pack cites the measurement), not a model of cuDNN."""
    a = analysis.attribution
    if a.reason:
        return Estimate(None, Unavailable(Need.ATTRIBUTION, a.reason))
    saved = float(params.get("saved", 1.0))
    share = float(params.get("nchw_penalty", 0.0))
    ms = a.step["layout_transform"] * saved
    fed = nchw_fed(analysis, float(params.get("min_conv_share", 0.0))) if share else None
    if fed is None:
        return Estimate(ms, LayoutTime(a.step["layout_transform"], a.source, saved, ms))
    nchw = sum(a.step[p] for p in NCHW_PARTS)
    ms += share * nchw
    return Estimate(ms, LayoutTime(a.step["layout_transform"], a.source, saved, ms, share, nchw, fed))


def norm_elementwise_time(analysis: Analysis, threshold: float | None, params: dict[str, Any], values: Mapping[str, Metric]) -> Estimate:
    """(normalisation + elementwise) × ``saved``, less the normalisation time channels-last
    already wins where the step feeds NCHW tensors through NHWC kernels (``nchw_penalty`` ×
    normalisation, counted by :func:`layout_time`): the two findings' estimates add up."""
    a = analysis.attribution
    if a.reason:
        return Estimate(None, Unavailable(Need.ATTRIBUTION, a.reason))
    saved = float(params.get("saved", 1.0))
    share = float(params.get("nchw_penalty", 0.0))
    norm, elem = a.step["normalisation"], a.step["elementwise"]
    fed = nchw_fed(analysis, float(params.get("min_conv_share", 0.0))) if share else None
    kept = norm * (1 - share) if fed else norm
    ms = (kept + elem) * saved
    return Estimate(ms, NormElementwise(norm, elem, a.source, saved, ms, share if fed else 0.0, fed))


def slow_step_time(analysis: Analysis, threshold: float | None, params: dict[str, Any], values: Mapping[str, Metric]) -> Estimate:
    """The untraced steps' time beyond the median step, per step (Σ max(0, step − median −
    0.05 ms, the light pass's resolution) / steps, over the light pass's steady state) × saved:
    what the run wins when its slow steps run at the median step's pace. Counted against the
    mean step (1 / steps_per_s), like every estimate's steps/s: the median step does not hold
    this time."""
    light = analysis.light_series
    if light is None or not light.critical_path_ms.size:
        return Estimate(None, Unavailable(Need.LIGHT_STEPS))
    s = steady.slow_steps(light.critical_path_ms, light.cpu_wait_ms)
    saved = float(params.get("saved", 1.0))
    per_step = s.beyond_ms / s.steps
    return Estimate(per_step * saved, SlowStepTime(s, per_step, saved))


def cpu_wait_time(analysis: Analysis, threshold: float | None, params: dict[str, Any], values: Mapping[str, Metric]) -> Estimate:
    """The steady steps' waits for a CPU (the light pass's run-queue delay inside each step), per
    step, × saved: what the steps win on cores of their own. Against the mean step, like
    every estimate's steps/s."""
    waits = steady_cpu_waits_ms(analysis)
    if waits is None:
        return Estimate(None, Unavailable(Need.LIGHT_STEPS))
    waited = float(waits.sum())
    saved = float(params.get("saved", 1.0))
    per_step = waited / waits.size
    return Estimate(per_step * saved, CpuWaitTime(waited, int(waits.size), per_step, saved))


ESTIMATES: dict[str, tuple[Callable[[Analysis, float | None, dict[str, Any], Mapping[str, Metric]], Estimate], tuple[str, ...]]] = {
    # kind: (function, parameters it reads)
    "idle_between_kernels": (idle_between_kernels, ("residual_gap_us",)),
    "graph_replay_gaps": (graph_replay_gaps, ("residual_gap_us",)),
    "beside_graph_gaps": (beside_graph_gaps, ("residual_gap_us",)),
    "sync_wait_time": (sync_wait_time, ()),
    "pageable_copy_time": (pageable_copy_time, ("speedup",)),
    "memcpy_time": (memcpy_time, ()),
    "bandwidth_gap": (bandwidth_gap, ()),
    "fp32_gemm_time": (fp32_gemm_time, ("speedup",)),
    "exposed_comm": (exposed_comm, ()),
    "softmax_time": (softmax_time, ()),
    "host_busy_gaps": (host_busy_gaps, ()),
    "layout_time": (layout_time, ("saved", "nchw_penalty", "min_conv_share")),
    "norm_elementwise_time": (norm_elementwise_time, ("saved", "nchw_penalty", "min_conv_share")),
    "data_loading_time": (_part_time(("data_loading",), "GPU waiting for the DataLoader"), ("saved",)),
    "host_late_time": (_part_time(("host_late",), "GPU waiting for the host to issue work"), ("saved",)),
    "host_before_launch_time": (host_before_launch_time, ("saved",)),
    "straggler_delay": (straggler_delay, ()),
    "slow_step_time": (slow_step_time, ("saved",)),
    "cpu_wait_time": (cpu_wait_time, ("saved",)),
}
