"""An evidence table in words: its title, its note, its cells that are numbers with a meaning,
and its findings.json entry (:mod:`perfdoctor.rules.evidence` hands up the rows and a
:class:`~perfdoctor.rules.evidence.Note` or the numbers a note says).

The terminal, Markdown, HTML and findings.json take the title, the note and the cells from
here, so the four say one thing.
"""

from __future__ import annotations

from typing import Any

from perfdoctor.analysis import steady
from perfdoctor.rules.evidence import AgainstFloor, Evidence, GapCount, HostIntervals, Lead, Note, Share, Tier
from perfdoctor.text import count, duration_us, num, percent, times, value

TITLES = {
    "top_short_kernels": "Most repeated short kernels (< 10 µs) per step",
    "top_kernels": "Kernels by time per step",
    "kernel_families": "GPU time by kernel family per step",
    "largest_gaps": "Largest gaps between GPU activities inside steps",
    "sync_calls": "Host calls that wait for the GPU, inside steps",
    "pageable_copies": "Copies from or to pageable host memory, per step",
    "memcpys": "All copies inside steps",
    "gemm_kernels": "GEMM kernels and the precision their names state",
    "attention_kernels": "Attention and softmax kernels per step",
    "step_latencies": "Slowest steps (critical path)",
    "slow_untraced_steps": "Slowest untraced steps (light pass, steady state)",
    "time_between_steps": "Longest times between the loop's steps (light pass, steady state)",
    "nvml_series": "Sampled GPU metrics during the run",
    "launch_summary": "Launch calls inside steps",
    "bandwidth_budget": "Bandwidth budget of one step",
    "comm_timeline": "Communication per step",
    "top_collectives": "Communication kernels in the steps",
    "capture_windows": "CUDA-graph stream captures",
    "step_queue_delays": "Queue delay of each step's first GPU work",
    "host_in_gaps": "What the host ran while the GPU had nothing to do (Python stacks)",
}

NOTES = {
    Note.NO_SHORT_KERNELS: "no kernels shorter than 10 µs inside the steps",
    Note.NO_KERNELS: "no kernels inside the steps",
    Note.NO_GPU_ACTIVITY: "no GPU activity inside the steps",
    Note.NO_GAPS: "no gaps between GPU activities inside the steps",
    Note.NO_SYNC_CALLS: "no synchronizing calls inside the steps",
    # Without Python frames the call site of an .item() is not in the trace: say how to find
    # it rather than leaving the user to guess.
    Note.NO_STACKS: ("this trace has no Python stacks; find the call sites with "
                     "torch.profiler.profile(with_stack=True) or torch.cuda.set_sync_debug_mode('warn')"),
    Note.NO_PAGEABLE_COPIES: "no pageable copies inside the steps",
    Note.NO_COPIES: "no copies inside the steps",
    Note.NO_GEMMS: "no GEMM kernels inside the steps",
    Note.NO_ATTENTION: "no attention or softmax kernels inside the steps",
    Note.NO_GPU_STEPS: "no steps with GPU work",
    Note.LIGHT_HEADLINE: "traced steps; the headline step latency comes from the light (untraced) pass",
    Note.NO_LIGHT_PASS: "no light pass (perfdoctor run times every step untraced)",
    Note.NO_NVML: "no NVML samples (perfdoctor run collects them)",
    Note.NO_LAUNCHES: "no launch calls inside the steps",
    Note.NO_PEAK: "the device peak bandwidth is unknown",
    Note.NO_BYTES: "the step declares no bytes (perfdoctor.declare): the floor cannot be computed",
    Note.NO_STEPS: "no steps",
    Note.NO_COMM: "no communication kernels in the steps",
    Note.NO_CAPTURE: "no stream capture in the trace",
    Note.NO_LAUNCHING_CALL: "no step's first GPU activity has its launching call in the trace",
}

_SECTION = "(low-latency MegaKernel tutorial, §7.1 Adapting to the hardware)"
TIERS = {
    Tier.LARGE: f"≥ 600 GB/s: supports 13B-parameter models {_SECTION}",
    Tier.MEDIUM: f"300-600 GB/s: 7B-parameter models recommended {_SECTION}",
    Tier.SMALL: f"< 300 GB/s: below the seed's tiers; prefer models well under 7B {_SECTION}",
}


def title(e: Evidence) -> str:
    return TITLES[e.kind]


def note(e: Evidence) -> str | None:
    """What the table says beside its rows (what is missing, what they leave out), or None."""
    n = e.note
    if n is None or isinstance(n, str):  # a str: the analysis's own reason
        return n or None
    if isinstance(n, Note):
        return NOTES[n]
    if isinstance(n, GapCount):
        return (f"{count(n.per_step)} gaps per step, {value(n.ms_per_step, 'ms')} per step in total; one row per pair of "
                "activities around a gap, its longest; in steps: the steps with a gap between the same two at least half as long")
    if isinstance(n, HostIntervals):
        return f"idle intervals ≥ {duration_us(n.min_gap_us)}: " + ", ".join(f"{c} {k}" for k, c in n.counts)
    if isinstance(n, steady.SlowSteps):
        return f"{n.summary}; step numbers count from the run's first step"
    raise TypeError(f"no words for the evidence note {type(n).__name__}")


def cell(v: Any) -> Any:
    """A cell as findings.json holds it: a number with a meaning in words, any other as it is."""
    if isinstance(v, Share):
        return percent(v.of)
    if isinstance(v, Lead):
        return duration_us(v.us, signed=True)
    if isinstance(v, AgainstFloor):
        return f"{num(v.ms)} ({times(v.ms / v.floor_ms)})"
    if isinstance(v, Tier):
        return TIERS[v]
    return v


def evidence_json(e: Evidence) -> dict[str, Any]:
    """One evidence entry of findings.json: kind, title, columns, rows and a note when there is one."""
    out: dict[str, Any] = {"kind": e.kind, "title": title(e), "columns": e.columns, "rows": [[cell(v) for v in row] for row in e.rows]}
    said = note(e)
    if said:
        out["note"] = said
    return out
