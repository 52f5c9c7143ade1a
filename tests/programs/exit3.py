"""Prints its argv, does three record_function steps, then exits with status 3."""

import sys

import torch
from torch.autograd.profiler import record_function

print("argv", sys.argv[1:], flush=True)
x = torch.randn(32, 32)
for _ in range(3):
    with record_function("work"):
        x = x @ x
sys.exit(3)
