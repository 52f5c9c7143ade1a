"""Prefill, then greedy decode one token at a time; the decode step is swappable.

A *step* is a function `(token [1], pos [1]) -> next token [1]`, all int64 tensors on the
model's device: it runs the model on one token at one position (appending to the KV cache)
and returns the argmax. Keeping the argmax on the device means the loop never waits for
the GPU, so the host can queue steps ahead of it. The loop never names a variant: the
step is passed in (`perfdoctor.engine.variants` builds them by name), as gpt-fast applies
its speed-ups from outside the decode loop.

Each step is marked with the public `perfdoctor.region`, declaring its token and the bytes
it must read, the same way a user marks their own program.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from perfdoctor.api import region
from perfdoctor.engine.config import BadInput, ModelConfig
from perfdoctor.engine.model import Transformer

Step = Callable[[Tensor, Tensor], Tensor]

STEP_NAME = "decode_step"


def random_prompt(config: ModelConfig, length: int, seed: int) -> Tensor:
    """`length` token ids drawn uniformly from the vocabulary, on the CPU."""
    if length < 1:
        raise BadInput(f"prompt length must be at least 1, got {length}")
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(config.vocab_size, (length,), generator=gen)


def decode_bytes_per_step(model: Transformer, context: int, weight_bytes: int | None = None) -> int:
    """Bytes a decode step must read with `context` positions cached: weights + K/V in use.

    `weight_bytes` replaces the model's own weight bytes for a step that reads other copies
    of them (`fused-int8` reads int8 ones)."""
    kv = model.config.kv_bytes_per_position(model.embed.element_size()) * context
    return (model.weight_bytes_per_token() if weight_bytes is None else weight_bytes) + kv


@dataclass(frozen=True)
class Generation:
    """Result of `generate`: the new tokens and how long the decode loop took."""

    tokens: list[int]  # the first comes from the prefill, the rest from decode steps
    decode_steps: int
    decode_s: float
    bytes_per_step: int  # as declared: at the generation's mid-point context


def generate(model: Transformer, step: Step, prompt: Tensor, n_tokens: int) -> Generation:
    """Prefill `prompt` [P] then greedily decode until `n_tokens` new tokens exist.

    Each decode step is one `decode_step` region declaring 1 token and `bytes_per_step`: the
    step's `weight_bytes` attribute if it has one (its own copies of the weights), else the
    model's weights, plus the K/V in use.
    The decode loop alone is timed: with CUDA events on a GPU (no synchronisation inside
    the loop), with the wall clock on a CPU.
    """
    P = prompt.shape[0]
    if P < 1 or n_tokens < 1:
        raise BadInput("need a prompt of at least 1 token and at least 1 new token")
    if P + n_tokens - 1 > model.ctx:
        raise BadInput(f"prompt {P} + {n_tokens} tokens needs ctx >= {P + n_tokens - 1}, have {model.ctx}")
    device = model.embed.device
    bytes_per_step = decode_bytes_per_step(model, P + n_tokens // 2, getattr(step, "weight_bytes", None))

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
            with region(STEP_NAME, tokens=1, bytes=bytes_per_step):
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
