"""How far the light pass's GPU clock puts an event from the host time it happened at.

The light pass (perfdoctor/record/bootstrap/clock.py, ``GpuClock``) puts a CUDA event on the
host clock as ``t0 + ref.elapsed_time(event)``, where ``t0`` is read after a
``synchronize()`` and *before* the reference event is recorded: the reference's GPU time is
later than ``t0`` by the time the record takes to reach the idle GPU, and every event it
maps comes out early by that much. A step's critical path (GPU end − host start) is then
short by it. On a GPU-bound loop that synchronizes every step, the light pass read 1.8-4.2 %
under the program's own timer in the same process (``tests/record/test_run_gpu.py``'s
latency test, H200, three sessions): this script measures the offset itself.

Per trial, on an idle GPU: host time ``T`` → record an event → ``synchronize()`` → host time
``T2``; the event happened in ``[T, T2]``. For each anchoring, the mapped time ``M``:

- ``before`` (as shipped): ``t0`` read after the sync, then the reference recorded;
- ``after``: the reference recorded, synchronized, then ``t0`` read (late by the sync's return);
- ``middle``: the middle of [before the record, after the sync] of the reference, the
  narrowest of several tries.

Prints ``M − T`` (µs; negative: mapped before the event could have happened) and ``T2 − M``
quantiles per anchoring, and writes JSON with ``--json``.

    python bench/gpu_clock.py [--trials 300] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def anchors(torch) -> dict[str, tuple[object, int]]:
    """(reference event, its host ns) per anchoring."""
    out = {}
    ref = torch.cuda.Event(enable_timing=True)
    ref.record()
    torch.cuda.synchronize()
    t0 = time.perf_counter_ns()
    ref.record()
    out["before"] = (ref, t0)
    ref2 = torch.cuda.Event(enable_timing=True)
    ref2.record()
    torch.cuda.synchronize()
    ref2.record()
    torch.cuda.synchronize()
    out["after"] = (ref2, time.perf_counter_ns())
    best = None
    for _ in range(20):
        ev = torch.cuda.Event(enable_timing=True)
        ev.record()
        torch.cuda.synchronize()
        a = time.perf_counter_ns()
        ev.record()
        torch.cuda.synchronize()
        b = time.perf_counter_ns()
        if best is None or b - a < best[2] - best[1]:
            best = (ev, a, b)
    out["middle"] = (best[0], (best[1] + best[2]) // 2)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trials", type=int, default=300)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    import torch

    from perfdoctor.record.bootstrap.clock import GpuClock

    torch.ones(1, device="cuda")
    clock = GpuClock(torch)  # the shipped anchoring, through the shipped code
    refs = anchors(torch)
    rows = {name: {"early_us": [], "late_us": []} for name in ["shipped", *refs]}
    for _ in range(args.trials):
        torch.cuda.synchronize()
        t = time.perf_counter_ns()
        ev = clock.mark()
        torch.cuda.synchronize()
        t2 = time.perf_counter_ns()
        mapped = {"shipped": clock.resolve(ev, complete=True)}
        for name, (ref, t0) in refs.items():
            mapped[name] = t0 + int(ref.elapsed_time(ev) * 1e6)
        for name, m in mapped.items():
            rows[name]["early_us"].append((m - t) / 1e3)
            rows[name]["late_us"].append((t2 - m) / 1e3)
        time.sleep(0.001)
    table = {}
    print(f"{'anchoring':10}{'M-T p10':>10}{'p50':>9}{'p90':>9}{'T2-M p10':>10}{'p50':>9}{'p90':>9}   (us; M-T < 0: mapped before the event)")
    for name, r in rows.items():
        q = {k: statistics.quantiles(v, n=10) for k, v in r.items()}
        table[name] = {k: {"p10": q[k][0], "p50": statistics.median(v), "p90": q[k][-1]} for k, v in r.items()}
        e, l_ = table[name]["early_us"], table[name]["late_us"]
        print(f"{name:10}{e['p10']:10.2f}{e['p50']:9.2f}{e['p90']:9.2f}{l_['p10']:10.2f}{l_['p50']:9.2f}{l_['p90']:9.2f}")
    if args.json:
        args.json.write_text(json.dumps({"trials": args.trials, "device": torch.cuda.get_device_name(), "table": table, "raw": rows}))


if __name__ == "__main__":
    main()
