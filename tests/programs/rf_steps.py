"""A CPU torch loop whose steps are record_function("train_step") ranges.

Usage: python rf_steps.py STEPS FACTS.json — writes what it saw of its own launch (argv,
cwd, __name__, sys.path[0]) to FACTS.json, so tests can check it ran as python would run it.
"""

import json
import os
import sys

import torch
from torch.autograd.profiler import record_function


def main() -> None:
    steps, facts = int(sys.argv[1]), sys.argv[2]
    with open(facts, "w") as f:
        json.dump({"argv": sys.argv, "cwd": os.getcwd(), "name": __name__, "path0": sys.path[0]}, f)
    x = torch.randn(64, 64)
    for _ in range(steps):
        with record_function("train_step"):
            with record_function("inner"):
                x = torch.tanh(x @ x)
    print(f"done {steps} steps", flush=True)
    print(f"compiler loaded: {'torch._dynamo' in sys.modules}", flush=True)  # never compiled: as python runs it


if __name__ == "__main__":
    main()
