#!/usr/bin/env python3
"""A model's forward timed by ``torch.utils.benchmark`` (the PyTorch benchmark recipe):
``Timer(stmt="model(x)", globals={...}).blocked_autorange(min_run_time=...)``, or the
standard library's ``timeit.repeat`` with ``--timer timeit``. The step is one run of the
statement: one forward. A forward pre-hook counts the forwards (the autorange's own
calibration runs included), which neither timer says.

Its own number: the measurement's mean per run (``Measurement.mean``; ``timeit``: the total
over all repeats divided by the runs), over the timed runs only.

    python bench_timer.py                                      # a 4096-wide MLP, batch 64, cuda
    python bench_timer.py --device cpu --width 256 --min-run-time 0.5
    python bench_timer.py --device cpu --width 256 --timer timeit --number 20 --repeat 3
"""
import argparse
import json
import timeit

import torch
import torch.nn as nn
import torch.utils.benchmark as benchmark


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--width", type=int, default=4096)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--timer", choices=["benchmark", "timeit"], default="benchmark")
    p.add_argument("--min-run-time", type=float, default=2.0, help="blocked_autorange's min_run_time (s)")
    p.add_argument("--number", type=int, default=50, help="timeit: runs per repeat")
    p.add_argument("--repeat", type=int, default=5, help="timeit: repeats")
    p.add_argument("--device", default="cuda")
    args = p.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)
    layers = []
    for _ in range(args.depth):
        layers += [nn.Linear(args.width, args.width), nn.GELU()]
    model = nn.Sequential(*layers).to(device).eval()
    x = torch.randn(args.batch, args.width, device=device)
    forwards = [0]
    model.register_forward_pre_hook(lambda *_: forwards.__setitem__(0, forwards[0] + 1))

    with torch.inference_mode():
        if args.timer == "benchmark":
            # Timer synchronises CUDA itself around each block of runs
            m = benchmark.Timer(stmt="model(x)", globals={"model": model, "x": x}, label="mlp",
                                description=f"{args.depth}x{args.width}, batch {args.batch}").blocked_autorange(
                                    min_run_time=args.min_run_time)
            print(m)
            timed, ms = m.number_per_run * len(m.raw_times), m.mean * 1e3
        else:
            sync = "torch.cuda.synchronize()" if device.type == "cuda" else "pass"
            times = timeit.repeat(f"model(x); {sync}", globals={"model": model, "x": x, "torch": torch},
                                  number=args.number, repeat=args.repeat)
            timed, ms = args.number * args.repeat, sum(times) / (args.number * args.repeat) * 1e3
            print(f"timeit: {args.repeat} x {args.number} runs, best {min(times) / args.number * 1e3:.3f} ms, "
                  f"mean {ms:.3f} ms")
    print("RESULT " + json.dumps({"program": "bench_timer", "timer": args.timer, "step": "one run of the statement (forward)",
                                  "ms_per_step": ms, "runs": timed, "forwards": forwards[0]}))


if __name__ == "__main__":
    main()
