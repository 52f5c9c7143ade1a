"""`GraphedStep`: a decode step captured once in a CUDA graph and replayed.

Used by the `graph` variant (the eager step, captured) and the `fused` one (the Triton
kernels, captured). Lives apart from the variants so that both can use it without either
importing the other.
"""

from __future__ import annotations

import torch
from torch import Tensor

from perfdoctor.engine.generate import Step


class GraphedStep:
    """`step` captured once in a CUDA graph, replayed on copies of its inputs.

    Replaying replaces hundreds of kernel launches by one. The graph reads its inputs from
    static buffers and writes a static output, so each call copies the token and position
    in, replays, and returns the output buffer (valid until the next call). The capture
    happens at the first call, with that call's real inputs: the warm-up runs before it
    write the same K/V rows the real step writes, so they change nothing.
    """

    def __init__(self, step: Step) -> None:
        self.step = step
        self.weight_bytes = getattr(step, "weight_bytes", None)  # see generate
        self.graph: torch.cuda.CUDAGraph | None = None

    def _capture(self, token: Tensor, pos: Tensor) -> None:
        self.token, self.pos = token.clone(), pos.clone()
        # Warm up outside the graph: lazy initialisation (cuBLAS handles, torch.compile's
        # compilation and autotuning) must not happen during capture. First on the current
        # stream, then on a side stream as the CUDA graph docs advise.
        self.step(self.token, self.pos)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                self.step(self.token, self.pos)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.out = self.step(self.token, self.pos)

    def __call__(self, token: Tensor, pos: Tensor) -> Tensor:
        if self.graph is None:
            self._capture(token, pos)
        self.token.copy_(token)
        self.pos.copy_(pos)
        self.graph.replay()
        return self.out
