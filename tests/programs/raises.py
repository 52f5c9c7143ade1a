"""Three record_function steps, then an uncaught exception (exit 1 with a traceback)."""

import torch
from torch.autograd.profiler import record_function

x = torch.randn(16, 16)
for _ in range(3):
    with record_function("work"):
        x = x @ x
raise RuntimeError("the program failed on purpose")
