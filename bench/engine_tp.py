"""Decode speed of the tensor-parallel engine against one GPU: run it under torchrun.

    torchrun --standalone --nproc-per-node 2 bench/engine_tp.py --json engine_tp.json

Rows, on the same config, weights, prompt and context (bench/engine.py's timing: median
decode time of --repeats generations after a warm-up one):
  - ``tp1 <variant>``: the one-GPU engine on rank 0's GPU (the other ranks wait);
  - ``tp<N> <variant>``: every rank decoding together, 2 all-reduces per layer per token.
GB/s is per rank: the weight and K/V bytes one rank reads per step over the step time.
``match`` is the fraction of tokens equal to the tp1 row of the same variant (bf16
all-reduces sum in another order, so near-tied argmaxes can flip). On CPU it runs the tiny
config on gloo (a check of the wiring, not a speed claim). Rank 0 prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).parent))  # bench/engine.py, the single-GPU bench
from engine import match, time_step  # noqa: E402

from perfdoctor.engine.generate import random_prompt  # noqa: E402
from perfdoctor.engine.measure import Speed, peak_dram_bandwidth  # noqa: E402
from perfdoctor.engine.model import Transformer  # noqa: E402
from perfdoctor.engine.parallel import init_tp, tp_model  # noqa: E402
from perfdoctor.engine.variants import VARIANTS  # noqa: E402
from perfdoctor.engine.weights import model_weights  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--variants", default="eager,graph", help="comma-separated engine variants (default eager,graph)")
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--ctx", type=int, default=2048)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", default=None)
    a = p.parse_args()
    cuda = torch.cuda.is_available()
    tp = int(os.environ.get("WORLD_SIZE", "1"))
    rank, device = init_tp(tp, "cuda" if cuda else "cpu")
    config_name, dtype = ("llama-3.2-1b", torch.bfloat16) if cuda else ("tiny", torch.float32)
    ctx = a.ctx if cuda else 128
    tokens = a.tokens if cuda else 24
    config, weights = model_weights(config_name, None, 0, device, dtype)
    prompt = random_prompt(config, 16, 0)
    peak = peak_dram_bandwidth(device.index or 0) if cuda else None
    rows, reference = [], {}
    variants = a.variants.split(",") if cuda else ["eager"]  # the graph variant needs CUDA
    for variant in variants:
        if rank == 0:  # the one-GPU reference, on rank 0 alone
            single = Transformer.from_hf_state_dict(config, weights, ctx)
            seconds, result = time_step(single, VARIANTS[variant], prompt, tokens, a.repeats)
            reference[variant] = result.tokens
            rows.append({"name": f"tp1 {variant}", **asdict(Speed.of(seconds, result.decode_steps, result.bytes_per_step, peak)), "match": 1.0})
            del single
        dist.barrier()
        model = tp_model(config, weights, ctx, rank, tp)
        seconds, result = time_step(model, VARIANTS[variant], prompt, tokens, a.repeats)
        if rank == 0:
            speed = Speed.of(seconds, result.decode_steps, result.bytes_per_step, peak)
            rows.append({"name": f"tp{tp} {variant}", **asdict(speed), "match": match(result.tokens, reference[variant])})
        del model
        dist.barrier()
    if rank == 0:
        name = torch.cuda.get_device_name(device) if cuda else "cpu"
        print(f"{config.name}, {str(dtype).removeprefix('torch.')}, ctx {ctx}, {tokens} tokens, {tp} x {name}")
        print(f"{'row':<14} {'ms/token':>9} {'tokens/s':>9} {'GB/s/rank':>10} {'match':>6}")
        for r in rows:
            print(f"{r['name']:<14} {r['ms_per_token']:>9.3f} {r['tokens_per_s']:>9.1f} {r['gb_per_s']:>10.1f} {r['match']:>6.2f}")
        if a.json:
            Path(a.json).write_text(json.dumps({"config": config.name, "device": name, "tp": tp, "tokens": tokens, "rows": rows}, indent=2))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
