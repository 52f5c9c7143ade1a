"""Steps forever (perfdoctor.step() each iteration, a short sleep inside), after touching
the file named by argv[1], so a test can kill it mid-run."""

import pathlib
import sys
import time

import torch

import perfdoctor.api as perfdoctor

x = torch.randn(32, 32)
ready = pathlib.Path(sys.argv[1])
i = 0
while True:
    perfdoctor.step()
    x = torch.tanh(x @ x)
    time.sleep(0.02)
    i += 1
    if i == 5:
        ready.touch()
