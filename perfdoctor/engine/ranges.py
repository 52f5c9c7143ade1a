"""Named ranges that tell perfdoctor what a step is and what it must cost.

A workload marks each step with a range (`step_range`), visible to the torch profiler
(`record_function`) and to Nsight tools (NVTX). Once per run, before the steps, it emits
a zero-work declaration range (`perfdoctor.declare`):

    perfdoctor.declare step=decode_step tokens=1 bytes=2471272448

From it perfdoctor turns step times into `tokens_per_s` and the model-based
`dram_bw_util` (declared bytes / step time / peak). Torch is imported lazily so this module
stays cheap to import where torch is absent.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from perfdoctor.declare import declaration_name


@contextmanager
def step_range(name: str) -> Iterator[None]:
    """A range named `name` in the torch profiler and, when CUDA is present, in NVTX."""
    import torch

    nvtx = torch.cuda.is_available()
    with torch.autograd.profiler.record_function(name):
        if nvtx:
            torch.cuda.nvtx.range_push(name)
        try:
            yield
        finally:
            if nvtx:
                torch.cuda.nvtx.range_pop()


def declare_step(name: str, tokens: int, bytes_per_step: int) -> None:
    """Emit the zero-work range declaring that each `name` step makes `tokens` tokens
    and must read `bytes_per_step` bytes."""
    with step_range(declaration_name(name, tokens, bytes_per_step)):
        pass
