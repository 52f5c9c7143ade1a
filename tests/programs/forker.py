"""A program that forks mid-run (a data-loader worker, a subprocess helper made by fork):
the child does a few steps of its own and exits through the normal interpreter exit, the
parent waits for it and carries on. Under perfdoctor run the child must leave collection
alone: it once ran perfdoctor's exit hook on the inherited profiler and hung the torch pass,
and in the light pass wrote its results over the parent's (issue 12)."""

import os
import sys

import torch

import perfdoctor.api as perfdoctor

x = torch.randn(32, 32)
for _ in range(4):
    with perfdoctor.region("parent_step"):
        x = torch.tanh(x @ x)
pid = os.fork()
if pid == 0:
    # No torch compute here: torch's CPU thread pool, used by the parent, hangs in a forked
    # child (with or without perfdoctor). Pure-Python steps still go through the regions.
    for _ in range(7):
        with perfdoctor.region("child_step"):
            sum(range(10_000))
    sys.exit(0)  # unwinds through whatever wraps the program, as a real child would
_, status = os.waitpid(pid, 0)
for _ in range(4):
    with perfdoctor.region("parent_step"):
        x = torch.tanh(x @ x)
print(f"parent {os.getpid()} done, child exit status {os.waitstatus_to_exitcode(status)}", flush=True)
