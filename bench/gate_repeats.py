"""Does a gate over processes pass A vs A and fail A vs A+slowdown? Trials, one table.

    python bench/gate_repeats.py [--trials 20] [--repeat 5] [--budget 10] [--slow 20]
                                 [--steps 40] [--lockstep] [--json gate_repeats.json]

The program is tests/programs/cpu_steps.py, a real torch CPU loop whose ``--slow PCT``
makes every step PCT percent more work. Each trial runs, in an order that alternates from
trial to trial so drift hits both alike:

  - ``same``: ``perfdoctor compare-programs A A --repeat N`` (light passes only), then
    ``perfdoctor gate B --baseline A --fail-on step_latency_ms_p50:+BUDGET%``: must pass;
  - ``slow``: the same with B = ``A --slow SLOW``: must fail.

``--lockstep`` runs ``compare-programs --lockstep``: the compared pairs run at once on one
CPU, taking turns step by step (perfdoctor/record/lockstep.py).

Each trial records the 1-minute load average at its end. The table gives, per condition, how many trials passed and failed the gate (and how many of
the passes were "inconclusive"), the median ratio and interval width, and the spread of
the per-process medians (coefficient of variation). From the per-process medians of all
``same`` trials it also resamples how often a gate with 2, 3, 5 or 8 processes per side
would pass A vs A and fail A vs A+SLOW at budgets of 5 and 10 % — the "how many repeats a
budget needs" table of docs/ci.md, at this machine's noise.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from perfdoctor.compare.stats import welch_log_ratio  # noqa: E402

PROGRAM = ROOT / "tests" / "programs" / "cpu_steps.py"


def perfdoctor(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "perfdoctor", *args], capture_output=True, text=True, env=env)


def trial(work: Path, a: str, b: str, repeat: int, budget: float, lockstep: bool) -> dict:
    out = work / "runs"
    done = perfdoctor("compare-programs", "--repeat", str(repeat), *(["--lockstep"] if lockstep else []),
                      "--out", str(out), "-q", "--", a, b)
    if done.returncode != 0:
        raise SystemExit(f"compare-programs failed: {done.stderr[-2000:]}")
    base, run = sorted(out.iterdir())
    gate = perfdoctor("gate", str(run), "--baseline", str(base), "--fail-on", f"step_latency_ms_p50:+{budget:g}%",
                      "--json", str(work / "gate.json"))
    check = json.loads((work / "gate.json").read_text())["checks"][0]
    p = check["details"]["processes"]
    return {
        "exit_code": gate.returncode, "status": check["status"], "verdict": check["details"]["verdict"],
        "ratio": p["ratio"]["value"], "low": p["ratio"]["low"], "high": p["ratio"]["high"],
        "before": p["before"]["values"], "after": p["after"]["values"], "test": p["test"],
    }


def gate_rates(pool: np.ndarray, n: int, slow: float, budget: float, draws: int, rng: np.random.Generator) -> tuple[float, float]:
    """Resampled: the share of A-vs-A gates that pass and of A-vs-A*slow gates that fail,
    with n processes per side drawn from the measured per-process medians."""
    passes = fails = 0
    bound = 1 + budget / 100
    for _ in range(draws):
        a, b, c = (rng.choice(pool, n, replace=False) for _ in range(3))
        passes += welch_log_ratio(a, b).low <= bound
        fails += welch_log_ratio(a, c * (1 + slow / 100)).low > bound
    return passes / draws, fails / draws


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--budget", type=float, default=10.0, help="percent")
    ap.add_argument("--slow", type=float, default=20.0, help="percent")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--lockstep", action="store_true", help="compare-programs --lockstep")
    ap.add_argument("--json", type=Path, default=Path("gate_repeats.json"))
    args = ap.parse_args()

    a = f"{PROGRAM} --steps {args.steps}"
    conditions = {"same": a, "slow": f"{a} --slow {args.slow:g}"}
    results: dict[str, list[dict]] = {"same": [], "slow": []}
    started = time.time()
    for t in range(args.trials):
        order = ["same", "slow"] if t % 2 == 0 else ["slow", "same"]
        for cond in order:
            with tempfile.TemporaryDirectory() as tmp:
                r = trial(Path(tmp), a, conditions[cond], args.repeat, args.budget, args.lockstep)
            # the machine's load when the trial ended: a shared runner's noise, on record
            r["ended"], r["loadavg_1min"] = time.strftime("%H:%M:%S", time.gmtime()), os.getloadavg()[0]
            results[cond].append(r)
            print(f"trial {t + 1:2d} {cond}: {r['status']:4s} {r['ratio']:.3f} [{r['low']:.3f}, {r['high']:.3f}] {r['verdict']}",
                  file=sys.stderr, flush=True)
        doc = report(args, results, started)  # after every trial: a stopped bench keeps what it measured
        args.json.write_text(json.dumps(doc, indent=1))
    show(args, doc)


def report(args: argparse.Namespace, results: dict[str, list[dict]], started: float) -> dict:
    """The JSON document: per condition, the gate's outcomes; the resampled repeats table."""
    rows = []
    for cond, rs in results.items():
        cvs = [float(np.std(r[side], ddof=1) / np.mean(r[side])) for r in rs for side in ("before", "after")]
        rows.append({
            "condition": cond, "trials": len(rs),
            "passed": sum(r["status"] == "pass" for r in rs), "failed": sum(r["status"] == "fail" for r in rs),
            "inconclusive": sum(r["verdict"].startswith("inconclusive") for r in rs),
            "median_ratio": statistics.median(r["ratio"] for r in rs),
            "median_ci_width": statistics.median(r["high"] - r["low"] for r in rs),
            "median_process_cv": statistics.median(cvs),
        })
    pool = np.asarray([v for r in results["same"] for side in ("before", "after") for v in r[side]] or [1.0])
    rng = np.random.default_rng(0)
    needed = []
    for budget in (5.0, 10.0):
        for n in (2, 3, 5, 8):
            if 3 * n <= len(pool):
                ok, caught = gate_rates(pool, n, 2 * budget, budget, 2000, rng)
                needed.append({"budget_pct": budget, "slowdown_pct": 2 * budget, "processes": n,
                               "passes_a_vs_a": ok, "fails_a_vs_slow": caught})
    return {
        "bench": "gate_repeats", "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
        "machine": f"{platform.node()} {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
        "command": " ".join(["python", "bench/gate_repeats.py", *sys.argv[1:]]),
        "args": {k: str(v) for k, v in vars(args).items()}, "seconds": round(time.time() - started),
        "summary": rows, "repeats_needed": needed, "trials": results,
    }


def show(args: argparse.Namespace, doc: dict) -> None:
    rows, needed = doc["summary"], doc["repeats_needed"]
    print(f"gate step_latency_ms_p50:+{args.budget:g}%, --repeat {args.repeat}, {args.trials} trials, {doc['seconds']} s")
    print(f"{'condition':10s} {'passed':>7s} {'failed':>7s} {'inconcl.':>9s} {'ratio':>7s} {'CI width':>9s} {'proc CV':>8s}")
    for r in rows:
        print(f"{r['condition']:10s} {r['passed']:7d} {r['failed']:7d} {r['inconclusive']:9d} {r['median_ratio']:7.3f} "
              f"{r['median_ci_width']:9.3f} {r['median_process_cv']:8.1%}")
    print(f"\nresampled from {sum(2 * len(r['before']) for r in doc['trials']['same'])} per-process medians of the 'same' trials (2000 draws each):")
    print(f"{'budget':>7s} {'slowdown':>9s} {'processes':>10s} {'A vs A passes':>14s} {'A vs slow fails':>16s}")
    for r in needed:
        print(f"{r['budget_pct']:6g}% {r['slowdown_pct']:8g}% {r['processes']:10d} {r['passes_a_vs_a']:14.1%} {r['fails_a_vs_slow']:16.1%}")


if __name__ == "__main__":
    main()
