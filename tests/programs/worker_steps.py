"""A CPU torch loop whose steps run on a worker thread (a server's request thread, a
producer thread): record_function("work_step") ranges inside threading.Thread. The torch
profiler can only start and stop on the thread that set it up (started on this worker, it
killed a CUDA program with SIGSEGV: issue 12)."""

import sys
import threading

import torch
from torch.autograd.profiler import record_function

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 12


def work() -> None:
    x = torch.randn(64, 64)
    for _ in range(steps):
        with record_function("work_step"):
            x = torch.tanh(x @ x)


thread = threading.Thread(target=work, name="worker")
thread.start()
thread.join()
print(f"worker did {steps} steps", flush=True)
