"""The decode-step variants, by the name the command line accepts.

A *variant* is a factory `model -> step` (see `perfdoctor.engine.generate` for what a step
is); `VARIANTS` maps names to them, and a new implementation is one more entry here (as
`megakernel`, the persistent one-launch step, was, and `fused-int8`, the fused step on int8
weights). The decode loop itself imports none of them.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from torch import Tensor

from perfdoctor.engine.config import BadInput
from perfdoctor.engine.fused import fused_step
from perfdoctor.engine.generate import Step
from perfdoctor.engine.graphs import GraphedStep
from perfdoctor.engine.megakernel import megakernel_step
from perfdoctor.engine.model import Transformer

StepFactory = Callable[[Transformer], Step]


def eager_step(model: Transformer) -> Step:
    """The model's forward on one token, then argmax: one kernel launch per operation."""

    def step(token: Tensor, pos: Tensor) -> Tensor:
        return model(token, pos).argmax(dim=-1)

    return step


def graph_step(model: Transformer) -> Step:
    """The eager step, captured in a CUDA graph."""
    if model.embed.device.type != "cuda":
        raise BadInput("the graph variant needs a CUDA device")
    return GraphedStep(eager_step(model))


VARIANTS: dict[str, StepFactory] = {
    "eager": eager_step, "graph": graph_step, "fused": fused_step, "fused-int8": partial(fused_step, int8=True),
    "megakernel": megakernel_step,
}
