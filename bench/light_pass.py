"""How faithful is `perfdoctor run`'s light pass? One run, one table.

    python bench/light_pass.py [--trials 5] [--steps 200] [--json light_pass.json]

The program is tests/programs/gpu_decode.py, which times its own steps (perf_counter around
each step, after its synchronize). For each size (GPU-bound "gpu", DRAM-heavy but host-paced
"big", launch-bound "small") and trial, in a shuffled order so drift hits every mode alike, three processes:
  - `alone`: the program with no perfdoctor at all;
  - `light`: `perfdoctor run --collect torch` (without nvml selected the light pass has no
    NVML sampler beside it);
  - `light+nvml`: `perfdoctor run --collect nvml` (the light pass samples NVML and GPM, as
    it does in a default run since issue 19).
Per process the median step time after --warmup steps: the light pass's own measurement and
the program's own timer in the same process. The table gives the median over trials and the
range, and each ratio against `alone`, so the light pass's error (light vs same process) and
its perturbation of the program (same process vs alone) show separately.

Every process is pinned to the GPU's local CPUs (NVML's CPU affinity; `--no-pin` to skip), so
on a two-socket host no process launches from the far socket. That is not all the noise: on
the H200 test machine (one NUMA node) two processes of the same host-paced loop, no
perfdoctor in either, differed by up to 1.65x. Only the GPU-bound size gives a step time that
is the same from process to process, so only there does light vs alone measure what the light
pass costs the program; light vs own timer (same process) measures its accuracy everywhere.
Needs a CUDA GPU and NVML.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "tests" / "programs" / "gpu_decode.py"
MODES = {"alone": None, "light": "torch", "light+nvml": "nvml"}
SIZES = ("gpu", "big", "small")  # tests/programs/gpu_decode.py --size


def one_process(mode: str, size: str, steps: int, warmup: int, work: Path) -> dict[str, float]:
    """Median step ms of one process: the program's own timer, and the light pass's when run under perfdoctor."""
    timings = work / f"{mode}-{size}-{random.random():.9f}.jsonl"
    program = [str(PROGRAM), "--size", size, "--steps", str(steps), "--timings", str(timings)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    collect = MODES[mode]
    if collect is None:
        cmd = [sys.executable, *program]
    else:
        out = work / "runs"
        cmd = [sys.executable, "-m", "perfdoctor.record.run", "--quiet", "--out", str(out), "--collect", collect,
               "--warmup", str(warmup), "--steps", "0", *program]
    subprocess.run(cmd, check=True, env=env, timeout=300, capture_output=True)
    own = json.loads(timings.read_text().splitlines()[0])["step_ms"][warmup:]  # the first line: the light pass's run
    row = {"own_ms": statistics.median(own)}
    if collect is not None:
        bundle = sorted(out.iterdir(), key=lambda p: p.stat().st_mtime)[-1]
        light = json.loads((bundle / "manifest.json").read_text())["light_pass"]
        row["light_ms"] = statistics.median(light["step_latency_ms"])
        row["nvml_sampled"] = light["nvml_sampled"]
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--sizes", default=",".join(SIZES), help=f"comma-separated from {','.join(SIZES)}")
    p.add_argument("--modes", default=",".join(MODES), help=f"comma-separated from {','.join(MODES)} (alone is always run)")
    p.add_argument("--no-pin", dest="pin", action="store_false", help="leave the processes where the OS puts them")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    modes = ["alone", *(m for m in args.modes.split(",") if m in MODES and m != "alone")]
    sizes = [z for z in args.sizes.split(",") if z in SIZES]
    pinned = None
    if args.pin:
        from perfdoctor.collectors.nvml import local_cpus

        pinned = sorted(local_cpus())
        os.sched_setaffinity(0, pinned)  # the children (perfdoctor, the program) inherit it
        print(f"pinned to the GPU's local CPUs: {pinned}")
    random.seed(0)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        for trial in range(args.trials):
            jobs = [(m, z) for m in modes for z in sizes]
            random.shuffle(jobs)
            for mode, size in jobs:
                row = one_process(mode, size, args.steps, args.warmup, Path(tmp))
                rows.append({"trial": trial, "mode": mode, "size": size, **row})
                print(f"trial {trial} {size:5} {mode:10} " + " ".join(f"{k}={v:.4f}" for k, v in row.items() if isinstance(v, float)), flush=True)
    table = summarize(rows, modes, sizes)
    print()
    print(f"{'size':6}{'mode':12}{'light ms':>20}{'own timer ms':>20}{'light/own':>11}{'own/alone':>11}{'light/alone':>12}")
    for t in table:
        rng = lambda k: f"{t[k]:.3f} [{t[k + '_min']:.3f}-{t[k + '_max']:.3f}]" if t.get(k) is not None else "-"  # noqa: E731
        ratio = lambda v: f"{v - 1:+.1%}" if v is not None else "-"  # noqa: E731
        print(f"{t['size']:6}{t['mode']:12}{rng('light_ms'):>20}{rng('own_ms'):>20}{ratio(t['light_vs_own']):>11}"
              f"{ratio(t['own_vs_alone']):>11}{ratio(t['light_vs_alone']):>12}")
    if args.json:
        meta = vars(args) | {"json": str(args.json), "pinned_cpus": pinned}
        args.json.write_text(json.dumps({"rows": rows, "table": table, "args": meta}, indent=1))


def summarize(rows: list[dict], modes: list[str], sizes: list[str]) -> list[dict]:
    """Per size and mode: the median over trials of each per-process median, its range, and the ratios."""
    out = []
    for size in sizes:
        alone = statistics.median(r["own_ms"] for r in rows if r["size"] == size and r["mode"] == "alone")
        for mode in modes:
            sel = [r for r in rows if r["size"] == size and r["mode"] == mode]
            t: dict = {"size": size, "mode": mode, "trials": len(sel)}
            for key in ("light_ms", "own_ms"):
                vals = [r[key] for r in sel if key in r]
                if vals:
                    t |= {key: statistics.median(vals), key + "_min": min(vals), key + "_max": max(vals)}
            t["light_vs_own"] = t["light_ms"] / t["own_ms"] if "light_ms" in t else None
            t["own_vs_alone"] = t["own_ms"] / alone
            t["light_vs_alone"] = t["light_ms"] / alone if "light_ms" in t else None
            out.append(t)
    return out


if __name__ == "__main__":
    main()
