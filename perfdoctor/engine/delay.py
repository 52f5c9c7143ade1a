"""`--delay-us`: a known, fixed slowdown of the decode step, for testing regression gates.

A gate must fail on a real regression of known size and pass on none. The delay is a GPU
kernel that spins for a fixed number of clock cycles (`torch.cuda._sleep`), issued at the
start of every decode step — inside the CUDA graph for the graph and fused variants, so the
replayed step is what gets slower, and the host loop is unchanged. The cycles per
microsecond are measured once, with CUDA events around a long spin, so the delay is in
microseconds of this GPU at its current clock (a boost clock that changes under load
changes it by the same factor as the rest of the step's compute, not its memory time).
"""

from __future__ import annotations

import torch
from torch import Tensor

from perfdoctor.engine.generate import Step
from perfdoctor.engine.graphs import GraphedStep

PROBE_CYCLES = 20_000_000  # ~10 ms at 2 GHz: long enough that launch overhead is noise


def cycles_per_us() -> float:
    """Clock cycles of `torch.cuda._sleep` per microsecond on the current GPU, measured."""
    torch.cuda._sleep(PROBE_CYCLES // 10)  # first launch: module load, clocks up
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(PROBE_CYCLES)
    end.record()
    end.synchronize()
    return PROBE_CYCLES / (start.elapsed_time(end) * 1e3)


def with_delay(step: Step, delay_us: float) -> Step:
    """`step` (of a model on the current CUDA device) with a GPU spin of about `delay_us` µs
    first; inside the graph of a GraphedStep (which captures at its first call, so wrapping
    its inner step here is in time)."""
    cycles = int(round(delay_us * cycles_per_us()))
    inner = step.step if isinstance(step, GraphedStep) else step

    def delayed(token: Tensor, pos: Tensor) -> Tensor:
        torch.cuda._sleep(cycles)
        return inner(token, pos)

    if isinstance(step, GraphedStep):
        step.step = delayed
        return step
    return delayed
