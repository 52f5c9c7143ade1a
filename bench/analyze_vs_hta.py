"""perfdoctor vs Holistic Trace Analysis: parse a large Kineto trace and compute the metrics.

Each tool runs in its own fresh process (so peak memory is its own), on the same trace file:

- perfdoctor: ``load_trace`` + ``analyze`` (every metric of the contract) + top kernels + gaps;
- HTA (PyPI ``holistictraceanalysis``): ``TraceAnalysis`` loading the trace, then
  ``get_temporal_breakdown`` and ``get_idle_time_breakdown``.

Prints one table (wall seconds, CPU seconds, peak RSS, ratios) and writes JSON.

    python bench/make_big_trace.py tests/fixtures/h200-llama1b-eager-5steps.kineto.json.gz --copies 20 -o /tmp/big/trace.json
    python bench/analyze_vs_hta.py /tmp/big/trace.json --repeats 3 --json bench-analyze.json
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path

PERFDOCTOR = textwrap.dedent(
    """
    import sys
    from perfdoctor.collectors import load_trace
    from perfdoctor.metrics import analyze
    from perfdoctor.breakdown import top_kernels, largest_gaps
    a = analyze(load_trace(sys.argv[1]))
    top_kernels(a); largest_gaps(a)
    print("steps", a.metrics["steps"].value, "idle", a.metrics["gpu_idle_ratio"].value)
    """
)

HTA = textwrap.dedent(
    """
    import sys, logging
    logging.disable(logging.WARNING)
    from hta.trace_analysis import TraceAnalysis
    t = TraceAnalysis(trace_dir=sys.argv[1])
    t.get_temporal_breakdown(visualize=False)
    t.get_idle_time_breakdown(visualize=False)
    print("ok")
    """
)


def measure(python: str, code: str, arg: str) -> dict[str, float]:
    """Wall and CPU seconds and peak RSS of one fresh process running ``code``."""
    import time

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run([python, "-c", code, arg], capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"benchmark process failed:\n{done.stderr[-2000:]}")
    return {"wall_s": wall, "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)}


def peak_rss_mb(python: str, code: str, arg: str) -> float:
    """Peak RSS of one process running ``code``.

    RUSAGE_CHILDREN's ru_maxrss is the largest child so far, so each measurement runs in a
    fresh wrapper process whose only child is the tool.
    """
    wrapper = (
        "import resource, subprocess, sys\n"
        "subprocess.run(sys.argv[1:], check=True, capture_output=True)\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    out = subprocess.run([sys.executable, "-c", wrapper, python, "-c", code, arg], capture_output=True, text=True, check=True)
    return int(out.stdout.strip()) / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", type=Path, help="an uncompressed Kineto trace (.json)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--python", default=sys.executable, help="interpreter with perfdoctor and holistictraceanalysis")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    # HTA reads a directory of traces; give it one holding just this trace.
    hta_dir = args.trace.parent / "hta-input"
    hta_dir.mkdir(exist_ok=True)
    link = hta_dir / args.trace.name
    if not link.exists():
        link.symlink_to(args.trace.resolve())

    results = {}
    for tool, code, arg in (("perfdoctor", PERFDOCTOR, str(args.trace)), ("HTA", HTA, str(hta_dir))):
        runs = [measure(args.python, code, arg) for _ in range(args.repeats)]
        results[tool] = {
            "wall_s": statistics.median(r["wall_s"] for r in runs),
            "cpu_s": statistics.median(r["cpu_s"] for r in runs),
            "peak_rss_mb": peak_rss_mb(args.python, code, arg),
            "runs": runs,
        }
    size_mb = args.trace.stat().st_size / 1e6
    pd_, hta = results["perfdoctor"], results["HTA"]
    print(f"trace: {args.trace} ({size_mb:.0f} MB), median of {args.repeats} runs, {platform.node()}")
    print(f"{'tool':<12}{'wall s':>10}{'CPU s':>10}{'peak RSS MB':>14}")
    for tool, r in results.items():
        print(f"{tool:<12}{r['wall_s']:>10.2f}{r['cpu_s']:>10.2f}{r['peak_rss_mb']:>14.0f}")
    print(
        f"{'HTA/ours':<12}{hta['wall_s'] / pd_['wall_s']:>9.1f}x{hta['cpu_s'] / pd_['cpu_s']:>9.1f}x"
        f"{hta['peak_rss_mb'] / pd_['peak_rss_mb']:>13.1f}x"
    )
    if args.json:
        args.json.write_text(json.dumps({"trace_mb": size_mb, "repeats": args.repeats, "results": results}, indent=2))


if __name__ == "__main__":
    main()
