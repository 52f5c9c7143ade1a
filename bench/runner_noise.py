"""How a CPU runner's speed moves: per CPU, over time, and between CPUs. One table.

    python bench/runner_noise.py [--seconds 30] [--window 0.5] [--json runner_noise.json]

One process per CPU, pinned to it, all at once, each repeating the unit of work of
tests/programs/cpu_steps.py (four 64x256 @ 256x256 matmuls with tanh, single-threaded) and
keeping the median unit time of every ``--window`` seconds. Per CPU the table gives the fast
level (10th percentile of the windows), the slow level (90th) and their ratio, the share of
windows slower than 1.15x the fast level, and how long such slow stretches last; then the
correlation of the CPUs' window series. Speed changes that last seconds and differ between
CPUs are what ``perfdoctor compare-programs --lockstep`` is for (docs/ci.md, "Lockstep"):
processes run one after the other land in different states, and only two programs taking
turns on one CPU see the same one.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

SLOW = 1.15  # a window this much slower than the CPU's fast level counts as slow


def probe(cpu: int, seconds: float, window: float) -> list[float]:
    """In the child: the median unit time (ms) of each window, pinned to ``cpu``."""
    os.sched_setaffinity(0, {cpu})
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    w = [torch.randn(256, 256) / 16 for _ in range(4)]
    x = torch.randn(64, 256)

    def unit() -> None:
        y = x
        for m in w:
            y = torch.tanh(y @ m)

    for _ in range(200):
        unit()
    out, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end:
        times, stop = [], time.perf_counter() + window
        while (t := time.perf_counter()) < stop:
            unit()
            times.append(time.perf_counter() - t)
        out.append(statistics.median(times) * 1e3)
    return out


def stretches(slow: np.ndarray) -> list[int]:
    """Lengths (in windows) of the runs of consecutive slow windows."""
    runs, n = [], 0
    for s in slow:
        if s:
            n += 1
        elif n:
            runs.append(n)
            n = 0
    return runs + ([n] if n else [])


def summarize(series: dict[int, list[float]], window: float) -> dict:
    rows = []
    for cpu, ms in series.items():
        v = np.asarray(ms)
        fast, slow_level = np.percentile(v, 10), np.percentile(v, 90)
        slow = v > SLOW * fast
        runs = stretches(slow)
        rows.append({"cpu": cpu, "windows": len(v), "fast_ms": float(fast), "slow_ms": float(slow_level),
                     "slow_over_fast": float(slow_level / fast), "slow_share": float(slow.mean()),
                     "slow_stretch_s_median": float(np.median(runs) * window) if runs else 0.0,
                     "slow_stretch_s_max": float(max(runs) * window) if runs else 0.0})
    cpus = list(series)
    n = min(len(series[c]) for c in cpus)
    corr = float(np.corrcoef([series[c][:n] for c in cpus])[0, 1]) if len(cpus) == 2 and n > 2 else None
    return {"rows": rows, "correlation_first_two": corr}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--window", type=float, default=0.5)
    ap.add_argument("--json", type=Path, default=Path("runner_noise.json"))
    ap.add_argument("--probe", type=int, help=argparse.SUPPRESS)  # internal: the child on one CPU
    args = ap.parse_args()
    if args.probe is not None:
        print(json.dumps(probe(args.probe, args.seconds, args.window)))
        return
    cpus = sorted(os.sched_getaffinity(0))
    started = time.time()
    children = {c: subprocess.Popen([sys.executable, __file__, "--probe", str(c), "--seconds", str(args.seconds),
                                     "--window", str(args.window)], stdout=subprocess.PIPE, text=True) for c in cpus}
    series = {c: json.loads(p.communicate()[0]) for c, p in children.items()}
    doc = {"bench": "runner_noise", "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
           "machine": f"{platform.node()} {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
           "loadavg_1min_end": os.getloadavg()[0], "args": {"seconds": args.seconds, "window": args.window},
           **summarize(series, args.window), "series_ms": {str(c): s for c, s in series.items()}}
    args.json.write_text(json.dumps(doc, indent=1))
    print(f"{'cpu':>4s} {'fast ms':>8s} {'slow ms':>8s} {'slow/fast':>10s} {'slow share':>11s} {'stretch s (median, max)':>24s}")
    for r in doc["rows"]:
        print(f"{r['cpu']:4d} {r['fast_ms']:8.2f} {r['slow_ms']:8.2f} {r['slow_over_fast']:10.2f} {r['slow_share']:11.0%} "
              f"{r['slow_stretch_s_median']:12.1f} {r['slow_stretch_s_max']:10.1f}")
    if doc["correlation_first_two"] is not None:
        print(f"correlation of CPU {cpus[0]} and CPU {cpus[1]} over time: {doc['correlation_first_two']:+.2f}")


if __name__ == "__main__":
    main()
