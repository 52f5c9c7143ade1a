"""Tensor parallelism for the engine (``--tp N``, under torchrun): Megatron-style layers.

Each of the N ranks holds 1/N of every attention and MLP block:

- column-parallel: the Q/K/V projections keep the rank's heads (``q_heads / N`` query heads
  and ``kv_heads / N`` K/V heads, so each rank attends over its own heads, with its own
  slice of the KV cache), and the MLP's gate and up projections keep 1/N of their rows;
- row-parallel: the attention output projection ``wo`` and the MLP down projection ``w2``
  keep the matching 1/N of their columns, so each rank's output is a partial sum, and one
  all-reduce per block (two per layer) adds them up before the residual.

Embeddings, norms and the LM head are replicated: every rank computes the same logits
and argmax, so the decode loop and the CUDA-graph capture (``graphs.GraphedStep``: NCCL
collectives can be captured) are the single-GPU ones. On CPU the collectives run on gloo,
which is how the numerics are tested (tests/engine/test_engine_tp.py).

A rank reads ``sum(shard bytes)`` of weights per token instead of all of them: the point of
TP for batch-1 decode, which is bound by weight reads, paid for with 2 × layers small
all-reduces per token (the inference acceleration overview §4.2, ``tp_size``).
"""

from __future__ import annotations

import os
from dataclasses import replace

import torch
import torch.distributed as dist
from torch import Tensor, nn

from perfdoctor.engine.config import BadInput, ModelConfig
from perfdoctor.engine.model import Transformer


def check_divisible(config: ModelConfig, tp: int) -> None:
    """TP ``tp`` splits query heads, K/V heads and the MLP width evenly, or it is refused."""
    for what, n in (("q_heads", config.q_heads), ("kv_heads", config.kv_heads), ("intermediate", config.intermediate)):
        if n % tp:
            raise BadInput(f"--tp {tp}: {what} {n} is not divisible by {tp}")


def shard_config(config: ModelConfig, tp: int) -> ModelConfig:
    """The shapes one rank holds."""
    check_divisible(config, tp)
    return replace(config, name=f"{config.name}-tp{tp}", q_heads=config.q_heads // tp, kv_heads=config.kv_heads // tp,
                   intermediate=config.intermediate // tp)


def shard_hf_state_dict(config: ModelConfig, hf: dict[str, Tensor], rank: int, tp: int) -> dict[str, Tensor]:
    """Rank ``rank``'s slice of Hugging Face-named weights: heads and MLP rows for the
    column-parallel projections, the matching columns for the row-parallel ones."""
    check_divisible(config, tp)
    d = config.head_dim
    q, kv, inter = config.q_heads // tp, config.kv_heads // tp, config.intermediate // tp
    rows = {"q_proj": q * d, "k_proj": kv * d, "v_proj": kv * d, "gate_proj": inter, "up_proj": inter}
    cols = {"o_proj": q * d, "down_proj": inter}
    out = {}
    for name, tensor in hf.items():
        kind = name.rsplit(".", 2)[-2] if name.endswith(".weight") else ""
        if kind in rows:
            n = rows[kind]
            out[name] = tensor[rank * n : (rank + 1) * n].contiguous()
        elif kind in cols:
            n = cols[kind]
            out[name] = tensor[:, rank * n : (rank + 1) * n].contiguous()
        else:
            out[name] = tensor  # embeddings, norms, LM head: every rank holds them
    return out


class AllReduced(nn.Module):
    """A row-parallel block whose partial output is summed over the tensor-parallel group."""

    def __init__(self, inner: nn.Module, group: dist.ProcessGroup | None = None) -> None:
        super().__init__()
        self.inner = inner
        self.group = group

    def forward(self, *args: Tensor) -> Tensor:
        out = self.inner(*args)
        dist.all_reduce(out, group=self.group)
        return out

    def setup_cache(self, *args: object) -> None:  # the attention block's KV cache
        self.inner.setup_cache(*args)  # type: ignore[operator]


def tp_model(config: ModelConfig, hf: dict[str, Tensor], ctx: int, rank: int, tp: int) -> Transformer:
    """This rank's tensor-parallel Transformer: its shard, with an all-reduce after every
    attention and MLP block."""
    model = Transformer.from_hf_state_dict(shard_config(config, tp), shard_hf_state_dict(config, hf, rank, tp), ctx)
    for layer in model.layers:
        layer.attn = AllReduced(layer.attn)
        layer.mlp = AllReduced(layer.mlp)
    return model


def init_tp(tp: int, device_type: str) -> tuple[int, torch.device]:
    """Join torchrun's process group (NCCL on GPUs, gloo on CPU): (rank, this rank's device).

    ``--tp N`` needs ``torchrun --nproc-per-node N``: the world is the tensor-parallel group."""
    world = int(os.environ.get("WORLD_SIZE", "0"))
    if world != tp:
        raise BadInput(f"--tp {tp} runs under torchrun --nproc-per-node {tp} (WORLD_SIZE is {world or 'not set'})")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if device_type == "cuda":
        if torch.cuda.device_count() < tp:
            raise BadInput(f"--tp {tp} needs {tp} GPUs, this machine has {torch.cuda.device_count()}")
        device = torch.device("cuda", local)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device_type == "cuda" else "gloo", device_id=device if device_type == "cuda" else None)
    return dist.get_rank(), device
