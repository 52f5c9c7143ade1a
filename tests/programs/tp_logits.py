"""Tensor-parallel numerics on CPU (gloo), under torchrun: the TP=N engine against the
one-process engine on the same tiny weights.

Usage: torchrun --standalone --nproc-per-node 2 tp_logits.py OUT.json — rank 0 writes the
largest logit difference over a prefill and 6 decode positions, and both greedy token lists.
"""

import json
import os
import sys

import torch

from perfdoctor.engine.config import TINY
from perfdoctor.engine.generate import generate, random_prompt
from perfdoctor.engine.model import Transformer
from perfdoctor.engine.parallel import init_tp, tp_model
from perfdoctor.engine.variants import eager_step
from perfdoctor.engine.weights import random_hf_state_dict

CTX = 64


def main() -> None:
    tp = int(os.environ["WORLD_SIZE"])
    rank, device = init_tp(tp, "cpu")
    weights = random_hf_state_dict(TINY, 0, device, torch.float32)
    full = Transformer.from_hf_state_dict(TINY, weights, CTX)
    parallel = tp_model(TINY, weights, CTX, rank, tp)
    prompt = random_prompt(TINY, 12, 0)
    diff = 0.0
    with torch.no_grad():
        tokens, pos = prompt, torch.arange(prompt.shape[0])
        for _ in range(7):  # the prefill, then decode steps on the model's own argmax
            a, b = full(tokens, pos), parallel(tokens, pos)
            diff = max(diff, float((a - b).abs().max()))
            tokens, pos = a[-1:].argmax(-1), pos[-1:] + 1
    full.setup_cache(CTX)
    parallel.setup_cache(CTX)
    ours = generate(parallel, eager_step(parallel), prompt, 16).tokens
    reference = generate(full, eager_step(full), prompt, 16).tokens
    if rank == 0:
        with open(sys.argv[1], "w") as f:
            json.dump({"max_abs_diff": diff, "tp_tokens": ours, "tokens": reference, "shard_q_heads": parallel.config.q_heads}, f)
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
