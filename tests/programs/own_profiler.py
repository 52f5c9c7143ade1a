"""A training loop that profiles itself, as PyTorch's profiler recipe writes it.

``--mode schedule``: ``with torch.profiler.profile(schedule=..., on_trace_ready=
tensorboard_trace_handler(DIR)) as prof:`` around the loop, ``prof.step()`` per step.
``--mode exit``: the same, with a schedule whose active steps outlast the loop: the trace
is saved by the ``with`` block's exit, and holds ProfilerStep#1..#N (#0 was warm-up), #N
the range the last ``prof.step()`` opened and the exit closed, with no iteration in it.
``--mode top``: as ``exit``, with ``prof.step()`` at the top of each iteration: #0 holds
none, #N (closed by the exit) the last.
``--mode plain``: ``with torch.profiler.profile() as prof:`` around a few steps, then
``print(prof.key_averages().table(...))`` (no trace exported).
``--mode legacy``: the same with ``torch.autograd.profiler.profile()``.
``--device cuda``: the same on the GPU, the profilers with their CUDA activities.
Prints ``RESULT {json}`` with its step count and what its profiler gave it."""

import argparse
import json
import os

import torch
import torch.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--mode", choices=["schedule", "exit", "top", "plain", "legacy"], default="schedule")
p.add_argument("--steps", type=int, default=20)
p.add_argument("--trace-dir", default="own-traces")
p.add_argument("--device", default="cpu")
args = p.parse_args()

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 10)).to(args.device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(32, 128, device=args.device), torch.randint(0, 10, (32,), device=args.device)
cuda = args.device.startswith("cuda")
activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])


def train_step():
    loss = nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


result = {"steps": args.steps, "mode": args.mode}
if args.mode in ("schedule", "exit", "top"):
    active = dict(wait=1, warmup=1, active=3, repeat=1) if args.mode == "schedule" else dict(wait=0, warmup=1, active=args.steps)
    with torch.profiler.profile(
        activities=activities,
        schedule=torch.profiler.schedule(**active),
        on_trace_ready=torch.profiler.tensorboard_trace_handler(args.trace_dir),
    ) as prof:
        for _ in range(args.steps):
            if args.mode == "top":
                prof.step()
            train_step()
            if args.mode != "top":
                prof.step()
    result["own_traces"] = sorted(os.listdir(args.trace_dir))
else:
    for _ in range(args.steps - 3):
        train_step()
    if args.mode == "plain":
        make = lambda: torch.profiler.profile(activities=activities)  # noqa: E731
    else:
        make = lambda: torch.autograd.profiler.profile(use_device="cuda" if cuda else None)  # noqa: E731
    with make() as prof:
        for _ in range(3):
            train_step()
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=5)
    result["own_table_has_mm"] = "aten::mm" in table or "aten::addmm" in table
print("RESULT " + json.dumps(result))
