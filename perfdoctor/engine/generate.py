"""Prefill, then greedy decode one token at a time; the decode step is swappable.

A *step* is a function `(token [1], pos [1]) -> next token [1]`, all int64 tensors on the
model's device: it runs the model on one token at one position (appending to the KV cache)
and returns the argmax. Keeping the argmax on the device means the loop never waits for
the GPU, so the host can queue steps ahead of it. A *variant* is a factory
`model -> step`; `VARIANTS` maps the names the command line accepts to them, and a new
implementation (a fused Triton step, say) is one more entry.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from perfdoctor.engine.config import BadInput, ModelConfig
from perfdoctor.engine.fused import fused_step
from perfdoctor.engine.model import Transformer
from perfdoctor.engine.ranges import declare_step, step_range

Step = Callable[[Tensor, Tensor], Tensor]
StepFactory = Callable[[Transformer], Step]

STEP_NAME = "decode_step"


def eager_step(model: Transformer) -> Step:
    """The model's forward on one token, then argmax: one kernel launch per operation."""

    def step(token: Tensor, pos: Tensor) -> Tensor:
        return model(token, pos).argmax(dim=-1)

    return step


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


def graph_step(model: Transformer) -> Step:
    """The eager step, captured in a CUDA graph."""
    if model.embed.device.type != "cuda":
        raise BadInput("the graph variant needs a CUDA device")
    return GraphedStep(eager_step(model))


VARIANTS: dict[str, StepFactory] = {"eager": eager_step, "graph": graph_step, "fused": fused_step}


def random_prompt(config: ModelConfig, length: int, seed: int) -> Tensor:
    """`length` token ids drawn uniformly from the vocabulary, on the CPU."""
    if length < 1:
        raise BadInput(f"prompt length must be at least 1, got {length}")
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(config.vocab_size, (length,), generator=gen)


def decode_bytes_per_step(model: Transformer, context: int) -> int:
    """Bytes a decode step must read with `context` positions cached: weights + K/V in use."""
    kv = model.config.kv_bytes_per_position(model.embed.element_size()) * context
    return model.weight_bytes_per_token() + kv


@dataclass(frozen=True)
class Generation:
    """Result of `generate`: the new tokens and how long the decode loop took."""

    tokens: list[int]  # the first comes from the prefill, the rest from decode steps
    decode_steps: int
    decode_s: float
    bytes_per_step: int  # as declared: at the generation's mid-point context


def generate(model: Transformer, step: Step, prompt: Tensor, n_tokens: int) -> Generation:
    """Prefill `prompt` [P] then greedily decode until `n_tokens` new tokens exist.

    Emits the `decode_step` declaration first, then one `decode_step` range per step.
    The decode loop alone is timed: with CUDA events on a GPU (no synchronisation inside
    the loop), with the wall clock on a CPU.
    """
    P = prompt.shape[0]
    if P < 1 or n_tokens < 1:
        raise BadInput("need a prompt of at least 1 token and at least 1 new token")
    if P + n_tokens - 1 > model.ctx:
        raise BadInput(f"prompt {P} + {n_tokens} tokens needs ctx >= {P + n_tokens - 1}, have {model.ctx}")
    device = model.embed.device
    bytes_per_step = decode_bytes_per_step(model, P + n_tokens // 2)
    declare_step(STEP_NAME, 1, bytes_per_step)

    # no_grad, not inference_mode: tensors made here stay ordinary tensors, which every
    # step implementation (torch.compile's included) accepts as inputs.
    with torch.no_grad():
        out = torch.empty(n_tokens, dtype=torch.long, device=device)
        logits = model(prompt.to(device), torch.arange(P, device=device))
        token = logits[-1:].argmax(dim=-1)
        out[0:1].copy_(token)
        pos = torch.tensor([P], device=device)
        timer = _Timer(device)
        for i in range(1, n_tokens):
            with step_range(STEP_NAME):
                token = step(token, pos)
                out[i : i + 1].copy_(token)
                pos += 1
        decode_s = timer.stop()
    return Generation(out.tolist(), n_tokens - 1, decode_s, bytes_per_step)


class _Timer:
    """Elapsed time from construction to `stop()`; CUDA events on a GPU."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        if self.cuda:
            self.start, self.end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            self.start.record()
        else:
            self.t0 = time.perf_counter()

    def stop(self) -> float:
        if not self.cuda:
            return time.perf_counter() - self.t0
        self.end.record()
        self.end.synchronize()
        return self.start.elapsed_time(self.end) / 1e3
