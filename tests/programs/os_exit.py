"""A loop of module calls that leaves by ``os._exit`` (as programs do to skip a slow
teardown), optionally from a thread; a forked child that also leaves by ``os._exit``
(as a DataLoader worker does). ``--kill``: SIGKILL instead (the out-of-memory killer's
way), which no program or bootstrap outlives. Prints ``RESULT {json}`` with its step count."""

import json
import os
import signal
import sys
import threading

import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 12
from_thread = "--thread" in sys.argv
model = torch.nn.Linear(64, 64)
x = torch.randn(8, 64)
with torch.no_grad():
    for _ in range(steps):
        model(x)
pid = os.fork()
if pid == 0:
    os._exit(0)  # the child: must not write the parent's results
os.waitpid(pid, 0)
print("RESULT " + json.dumps({"steps": steps}), flush=True)
if "--kill" in sys.argv:
    os.kill(os.getpid(), signal.SIGKILL)
if from_thread:
    threading.Thread(target=os._exit, args=(0,)).start()
    threading.Event().wait()
os._exit(0)
