"""A decode-like GPU loop for the gpu tests: it times itself, with no profiler.

Each step is one range named decode_step (``--annotate``: perfdoctor.region, record_function
or torch.cuda.nvtx) that runs ``layers`` bf16 GEMVs (1×h by h×h: every weight byte read from
DRAM once per step, like batch-1 decode) with a few elementwise kernels each, then
synchronizes, like a decode step that reads its token back. ``--size big`` moves a lot of
DRAM (h = 8192, 16 layers: 2.1 GB of weights per step, ~0.5 ms of GPU time on an H200), though
its ~100 launches still take the host about as long; ``--size small`` is launch-bound (h = 256,
64 layers: tiny kernels, the GPU mostly idle); ``--size gpu`` is meant to be bound by the GPU
alone (h = 16384, 8 layers: 4.3 GB per step, ~1 ms of DRAM time behind ~50 launches), so its
step time barely depends on how fast the host happens to be (H200: 1.19-1.24 ms over three
plain processes, where ``big`` spread up to 1.65x).
The program writes its own per-step
milliseconds (perf_counter around the step, after the synchronize) to ``--timings``, one
JSON line per run.
"""

import argparse
import json
import time

import torch
from torch.autograd.profiler import record_function

import perfdoctor.api as perfdoctor

SIZES = {"big": (8192, 16), "small": (256, 64), "gpu": (16384, 8)}


def step_range(how: str, weight_bytes: int):
    if how == "region":
        return perfdoctor.region("decode_step", tokens=1, bytes=weight_bytes)
    if how == "rf":
        return record_function("decode_step")
    return torch.cuda.nvtx.range("decode_step")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--size", choices=sorted(SIZES), default="big")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--annotate", choices=["region", "rf", "nvtx"], default="region")
    p.add_argument("--timings", default=None)
    args = p.parse_args()
    hidden, layers = SIZES[args.size]
    gen = torch.Generator(device="cuda").manual_seed(0)
    weights = [torch.randn(hidden, hidden, device="cuda", dtype=torch.bfloat16, generator=gen) / hidden**0.5 for _ in range(layers)]
    weight_bytes = sum(w.numel() * w.element_size() for w in weights)
    x = torch.randn(1, hidden, device="cuda", dtype=torch.bfloat16)
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        with step_range(args.annotate, weight_bytes):
            for w in weights:
                x = torch.nn.functional.silu(x @ w)
                x = x / (x.abs().amax() + 1)
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    if args.timings:
        # One JSON line per run, appended: under perfdoctor run the program runs once per pass.
        with open(args.timings, "a") as f:
            f.write(json.dumps({"step_ms": times, "weight_bytes": weight_bytes}) + "\n")


if __name__ == "__main__":
    main()
