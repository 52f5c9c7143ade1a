"""A CPU torch loop annotated with the perfdoctor API: one decode_step region per step
(declaring 1 token and 32 KiB), a nested region inside, and a one-off prefill region."""

import sys

import torch

import perfdoctor.api as perfdoctor

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 6
x = torch.randn(64, 64)
with perfdoctor.region("prefill"):
    x = x @ x
for _ in range(steps):
    with perfdoctor.region("decode_step", tokens=1, bytes=64 * 64 * 4 * 2):
        with perfdoctor.region("matmul"):
            x = torch.tanh(x @ x)
