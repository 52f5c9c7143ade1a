"""An estimate's formula in words, with the numbers it used (:mod:`perfdoctor.rules.estimates`
hands up the numbers: one dataclass per formula).

``formula`` is the one place a formula becomes text: the terminal, Markdown, HTML and
findings.json say what it returns, and a failure without an estimate says why with it.
"""

from __future__ import annotations

from perfdoctor.analysis import steady
from perfdoctor.rules.estimates import (
    BandwidthGap, BoundsGap, CpuWaitTime, Estimate, Floor, Formula, GapSum, Gaps, HiddenPart, HostBusy, LayoutTime, Median, NchwFed,
    Need, NormElementwise, Of, PartTime, SlowStepTime, Unavailable,
)
from perfdoctor.text import count, duration_us, num, setting, value

NEEDS = {  # what an estimate lacks; {why}: the reason its source gave
    Need.GPU_STEPS: "needs steps with GPU work",
    Need.EXPOSED_COMM: "needs exposed_comm_ms_per_step ({why})",
    Need.RANKS: "needs straggler_delay_ms (several ranks of one job)",
    Need.ATTRIBUTION: "needs the step attribution ({why})",
    Need.DRAM_BW: "needs dram_bw_util and steps with GPU work",
    Need.LIGHT_STEPS: "needs the light pass's steady steps (perfdoctor run)",
}
# A failing rule always says what fixing it wins back, or why it cannot (issue 20, item 11):
# a pack rule without [rule.estimate] or no_estimate says this.
NO_FORMULA = "the rule pack gives this rule no formula for the time it costs (add [rule.estimate] or no_estimate)"
# Said where the source gave no reason of its own.
UNSAID = {Need.EXPOSED_COMM: "not computed", Need.PYTHON_STACKS: "needs Python stacks", Need.FORMULA: NO_FORMULA}

MEDIANS = {  # {ms}: the median per step; {speedup}: how much faster the fix makes it
    Of.EXPOSED_COMM: "median over steps of |communication| − |communication ∩ compute| = {ms}",
    Of.STRAGGLER: "the straggler's median busy time − the other ranks' = {ms} the others wait per step",
    Of.SYNC_WAIT: "median over steps of the GPU idle gaps in which a synchronizing call returned or was in flight = {ms}",
    Of.COPIES: "median copy + memset time per step = {ms}",
    Of.SOFTMAX: "median softmax kernel time per step (the pass fused attention removes; its GEMMs stay) = {ms}",
    Of.PAGEABLE: "median pageable copy time per step × (1 − 1/{speedup}, pinned copies being {speedup}× faster) = {ms}",
    Of.FP32_GEMM: "median fp32 GEMM time per step × (1 − 1/{speedup}) = {ms}",
}

GAPS = {
    Gaps.BETWEEN: "over the gaps between the step's GPU activities (gaps after a host sync or with the host running Python excluded)",
    Gaps.IN_REPLAY: "over the gaps between two kernels of a replayed graph",
    Gaps.BESIDE_GRAPHS: "over the gaps next to the eager work beside the graphs (gaps after a host sync or with the host running Python excluded)",
}

FLOORS = {
    Floor.DECLARED: "declared bytes / (peak × {target})",
    Floor.LIGHT: "dram_bw_util × untraced step period / target",
    Floor.SPAN: "dram_bw_util × |S| / steps / target",
}


def _ms(x: float) -> str:
    return value(x, "ms")


def needs(u: Unavailable) -> str:
    """Why there is no estimate: ``needs the step attribution (no steps found)``."""
    if u.need not in NEEDS:  # the source's reason is the whole sentence
        return u.why or UNSAID[u.need]
    return NEEDS[u.need].format(why=u.why or UNSAID.get(u.need, ""))


def _gap_sum(g: GapSum) -> str:
    text = f"median over steps of Σ max(0, gap − {duration_us(g.residual_us)}) {GAPS[g.gaps]} = {_ms(g.ms)}"
    if g.cap_ms is None:
        return text
    share = "" if g.share is None else f" × {num(g.share)}, this part's share of the traced gaps"
    return f"{text}, capped at the untraced idle time per step (light step − GPU busy){share} = {_ms(g.cap_ms)}"


def _fed(fed: NchwFed) -> str:
    return f"{count(fed.conversions)} NCHW<->NHWC conversions per step around {count(fed.convolutions)} convolution kernels"


def _layout(t: LayoutTime) -> str:
    text = f"layout transforms {_ms(t.transforms_ms)} per step (attribution, {t.source}) × {setting(t.saved)}"
    if t.fed is not None:
        text += (f" + {setting(t.penalty)} × {_ms(t.nchw_ms)} of convolution + GEMM + normalisation, the NCHW penalty "
                 f"channels-last also removes ({_fed(t.fed)})")
    return f"{text} = {_ms(t.ms)}"


def _norm(t: NormElementwise) -> str:
    norm = f"normalisation {_ms(t.norm_ms)}"
    if t.fed is not None:
        norm += f" × (1 − {setting(t.penalty)}, the NCHW penalty layout-transforms counts: {_fed(t.fed)})"
    return (f"({norm} + elementwise {_ms(t.elementwise_ms)}) per step (attribution, {t.source}) "
            f"× {setting(t.saved)} that the fix removes = {_ms(t.ms)}")


def _slow(t: SlowStepTime) -> str:
    s = t.slow
    return (f"{s.summary}: the steps' time beyond the median (past the light pass's {_ms(steady.RESOLUTION_MS)} resolution), "
            f"{_ms(s.beyond_ms)} / {s.steps} steps = {_ms(t.per_step_ms)} per step (light pass) × {setting(t.saved)} that the fix removes")


def _host(h: HostBusy) -> str:
    sites = "; ".join(f"{site} {_ms(ms)}" for site, ms in h.sites) or "no user frame named"
    return (f"median per step of the idle time while the host ran Python, clipped to the step's critical path less GPU busy "
            f"= {_ms(h.ms)} (per step: {sites})")


def how(f: Formula) -> str:
    """A formula in words with its numbers."""
    if isinstance(f, Unavailable):
        return needs(f)
    if isinstance(f, Median):
        return MEDIANS[f.of].format(ms=_ms(f.ms), speedup=setting(f.speedup) if f.speedup is not None else "")
    if isinstance(f, GapSum):
        return _gap_sum(f)
    if isinstance(f, BandwidthGap):
        return (f"median over steps of (GPU busy time − {FLOORS[f.floor].format(target=setting(f.target))}) = busy − {_ms(f.floor_ms)} "
                f"(the step's bytes at {setting(f.target)} of peak) = {_ms(f.ms)}; idle gaps are counted by the bubble rules")
    if isinstance(f, BoundsGap):
        return (f"Σ over the memory-bound classes of (kernel time − its bytes / ({setting(f.target)} × {value(f.bw_gbps, 'GB/s')})) "
                f"per step = {_ms(f.ms)}; idle gaps and compute-bound time are other rules'")
    if isinstance(f, HostBusy):
        return _host(f)
    if isinstance(f, PartTime):
        return f"{f.what} {_ms(f.ms)} per step (attribution, {f.source}) × {setting(f.saved)} that the fix removes"
    if isinstance(f, HiddenPart):
        return (f"{f.what} {_ms(f.ms)} per step (attribution, {f.source}), made ahead: hidden behind the rest of the step, "
                f"{_ms(f.rest_ms)}, at most, × {setting(f.saved)} that the fix removes")
    if isinstance(f, LayoutTime):
        return _layout(f)
    if isinstance(f, NormElementwise):
        return _norm(f)
    if isinstance(f, SlowStepTime):
        return _slow(f)
    if isinstance(f, CpuWaitTime):
        return (f"the steady steps' waits for a CPU (run-queue delay), {_ms(f.waited_ms)} / {f.steps} steps = {_ms(f.per_step_ms)} "
                f"per step (light pass) × {setting(f.saved)} that the fix removes")
    raise TypeError(f"no words for the formula {type(f).__name__}")


def formula(e: Estimate) -> str:
    """The estimate's formula: ``median copy + memset time per step = 1.20 ms``."""
    return how(e.how)
