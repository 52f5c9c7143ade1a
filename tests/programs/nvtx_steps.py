"""A CPU torch loop whose steps are ranges of the `nvtx` package (no-ops without an NVTX
tool attached; perfdoctor mirrors them into the torch profiler). Also one range annotated
twice under one name (record_function + NVTX), which must count once."""

import nvtx
import torch
from torch.autograd.profiler import record_function

x = torch.randn(64, 64)
for _ in range(6):
    with nvtx.annotate("nvtx_step"):
        x = torch.tanh(x @ x)
    nvtx.push_range("pushed")
    x = x + 1
    nvtx.pop_range()
    with record_function("both"):
        nvtx.push_range("both")
        x = x * 0.5
        nvtx.pop_range()
