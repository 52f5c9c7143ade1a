"""A data-parallel CPU job for torchrun (gloo): every step runs a small MLP forward and
backward, then all-reduces the gradients; the program times itself.

Usage (one process per rank, torchrun sets RANK/WORLD_SIZE/MASTER_ADDR):

    torchrun --nproc-per-node 2 allreduce_steps.py --steps 30 --slow-rank 1 --slow-ms 20 --timers DIR

Each step is a ``record_function("train_step")`` range. ``--slow-rank R --slow-ms X`` makes
rank R sleep X ms per step before its all-reduce (a straggler: the other ranks wait X ms
longer in theirs). With ``--timers DIR`` each run appends one JSON line to
``DIR/rank<k>.jsonl``: per step, the whole step, the compute before the all-reduce and the
all-reduce itself (perf_counter ns), the program's own view for tests to compare with
perfdoctor's. ``--fail-rank R`` makes rank R exit 3 after its first step; ``--hang-rank R``
makes it sleep forever there (a hung rank); ``--linger-rank R`` makes it sleep forever after
its last step, while the other ranks' programs end (a rank left behind, as one blocked in a
collective its peers left never returns).
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
import torch.distributed as dist
from torch.autograd.profiler import record_function


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--slow-ms", type=float, default=0.0)
    p.add_argument("--fail-rank", type=int, default=-1)
    p.add_argument("--hang-rank", type=int, default=-1)
    p.add_argument("--linger-rank", type=int, default=-1)
    p.add_argument("--timers", default=None)
    p.add_argument("--backend", default="gloo", help="gloo (CPU tensors) or nccl (one GPU per rank)")
    a = p.parse_args()
    torch.set_num_threads(1)  # several ranks share two cores
    dist.init_process_group(a.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cpu")
    if a.backend == "nccl":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
        torch.cuda.set_device(device)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(a.width, a.width), torch.nn.Tanh(), torch.nn.Linear(a.width, a.width)).to(device)
    x = torch.randn(32, a.width, device=device)
    steps, compute, comm = [], [], []
    for i in range(a.steps):
        t0 = time.perf_counter_ns()
        with record_function("train_step"):
            model.zero_grad()
            model(x).square().mean().backward()
            if rank == a.slow_rank:
                time.sleep(a.slow_ms / 1e3)
            if device.type == "cuda":
                torch.cuda.synchronize()
            t1 = time.perf_counter_ns()
            for param in model.parameters():
                dist.all_reduce(param.grad)
            if device.type == "cuda":
                torch.cuda.synchronize()  # the program's own timers end when the GPU is done
            t2 = time.perf_counter_ns()
        steps.append(t2 - t0)
        compute.append(t1 - t0)
        comm.append(t2 - t1)
        if i == 0 and rank == a.fail_rank:
            raise SystemExit(3)
        if i == 0 and rank == a.hang_rank:
            time.sleep(3600)
    if rank == a.linger_rank:
        time.sleep(3600)
    if a.timers:
        os.makedirs(a.timers, exist_ok=True)
        with open(os.path.join(a.timers, f"rank{rank}.jsonl"), "a") as f:
            f.write(json.dumps({"rank": rank, "world_size": world, "step_ns": steps, "compute_ns": compute, "comm_ns": comm}) + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
