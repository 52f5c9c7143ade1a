"""A short real torch CPU loop for repeated-run tests: ``--steps`` steps (default 40) of
a small MLP forward (a few ms each on a 2-core CI machine), each a ``perfdoctor.region``
named ``train_step``.

``--slow PCT`` makes every step PCT percent slower, in the same work: the step repeats its
matmuls so that the extra compute is ``PCT`` percent of the measured cost of one step
(calibrated in-process over the first steps, before any timed step), so A and A+20 % differ
by the program, not by a sleep the scheduler rounds."""

from __future__ import annotations

import argparse
import time

import torch

import perfdoctor.api as perfdoctor

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=40)
p.add_argument("--size", type=int, default=256, help="width of the square matmuls (default 256)")
p.add_argument("--slow", type=float, default=0.0, metavar="PCT", help="make each step PCT percent slower (default 0)")
args = p.parse_args()
if args.slow < 0:
    p.error("--slow must be >= 0")

torch.manual_seed(0)
torch.set_num_threads(1)  # one core: a 2-core runner shared with other jobs stays comparable
w = [torch.randn(args.size, args.size) / args.size**0.5 for _ in range(4)]
x = torch.randn(64, args.size)


def work(reps: int) -> torch.Tensor:
    y = x
    for _ in range(reps):
        for m in w:
            y = torch.tanh(y @ m)
    return y


# The slowdown as a number of extra units of work: a step is UNITS units, A+PCT % runs
# UNITS * (1 + PCT/100) of them (rounded), so the ratio of step costs is the asked one
# to within 1/UNITS (2.5 % of the slowdown at 40 units, 20 %).
UNITS = 40
reps = round(UNITS * (1 + args.slow / 100))
work(UNITS)  # warm the allocator and the kernels outside the steps
for _ in range(args.steps):
    with perfdoctor.region("train_step"):
        work(reps)
print(f"cpu_steps: {args.steps} steps of {reps} units (slow {args.slow:g} %)")
