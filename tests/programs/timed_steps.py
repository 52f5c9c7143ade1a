"""Steps of known length that time themselves: each decode_step region sleeps 20 ms around
a small matmul, and the program writes its own per-step milliseconds (perf_counter around
the region) to argv[1], so a test can compare them with the light pass's step latency."""

import json
import sys
import time

import torch

import perfdoctor.api as perfdoctor

x = torch.randn(32, 32)
own = []
for _ in range(12):
    t0 = time.perf_counter()
    with perfdoctor.region("decode_step"):
        time.sleep(0.02)
        x = torch.tanh(x @ x)
    own.append((time.perf_counter() - t0) * 1e3)
with open(sys.argv[1], "w") as f:
    json.dump(own, f)
