"""perfdoctor analyze vs Holistic Trace Analysis vs the bare JSON decode, on two trace shapes.

Both shapes are real H200 traces repeated by ``bench/make_big_trace.py`` to ≥ 200 MB:

- ``eager``: the Llama-1B eager decode fixture (tests/fixtures/h200-llama1b-eager-5steps), ×20;
- ``hf``: an unannotated Hugging Face ``generate`` (tests/fixtures/wild/h200-hf-unannotated), ×30.

Each measurement is one fresh process, timed from the outside: wall, CPU (its children's
included) and peak RSS from ``wait4`` (the largest single process of the tree), and the
peak of the RSS and PSS summed over the process and its children, sampled every 20 ms from
``/proc`` (perfdoctor decodes a large trace in one forked process per CPU; PSS counts a
page the processes share — the file's bytes, the libraries — once):

- ``perfdoctor``: ``perfdoctor analyze TRACE --json metrics.json`` — every metric, the
  terminal summary and the ranked findings, exactly what a user runs;
- ``HTA``: HolisticTraceAnalysis (PyPI ``holistictraceanalysis``) loading the trace, then
  ``get_temporal_breakdown`` and ``get_idle_time_breakdown``. HTA 0.5.0's temporal breakdown
  asserts ``non_compute_time >= 0`` and fails on the HF shape (float rounding of µs times);
  its work is done by then, the failure is recorded and the idle-time breakdown still runs;
- ``decode``: the floor — read the file and ``msgspec.json.decode`` it, nothing else;
- ``decode-typed``: perfdoctor's own decode alone (typed structs naming only the fields it
  reads, in slices), the floor for this loader.

Medians of ``--repeats`` fresh processes per tool, the tools interleaved; the load average
is recorded before and after each shape (the CPU machine is shared). perfdoctor's modules
are byte-compiled first, as an installed package's are. Prints a table of ratios and
writes JSON.

    python bench/analyze_vs_hta.py --work /tmp/bench-traces --repeats 3 --json bench-analyze.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHAPES = {
    "eager": (ROOT / "tests/fixtures/h200-llama1b-eager-5steps.kineto.json.gz", 20),
    "hf": (ROOT / "tests/fixtures/wild/h200-hf-unannotated.kineto.json.gz", 30),
}

HTA = textwrap.dedent(
    """
    import sys, logging
    logging.disable(logging.WARNING)
    from hta.trace_analysis import TraceAnalysis
    t = TraceAnalysis(trace_dir=sys.argv[1])
    try:
        t.get_temporal_breakdown(visualize=False)
    except AssertionError:
        print("temporal breakdown: HTA's assertion failed")
    t.get_idle_time_breakdown(visualize=False)
    """
)
DECODE = "import sys, msgspec\nmsgspec.json.decode(open(sys.argv[1], 'rb').read())\n"
DECODE_TYPED = textwrap.dedent(
    """
    import sys
    from perfdoctor.collectors.json_chunks import array_slices
    from perfdoctor.collectors.kineto_events import events_decoder
    from perfdoctor.io import read_maybe_gzip
    raw = read_maybe_gzip(sys.argv[1])  # the loader's own read (a mapped file), not a copy
    for chunk in array_slices(raw, "traceEvents").decoded(events_decoder):
        del chunk
    """
)


WRAPPER = textwrap.dedent(
    """
    import os, subprocess, sys, threading, time, json
    def tree(pid):  # the process and its descendants (perfdoctor forks decoders)
        out = [pid]
        try:
            for child in open(f"/proc/{pid}/task/{pid}/children").read().split():
                out += tree(int(child))
        except OSError:
            pass
        return out
    def memory(pid):  # (RSS, PSS) of the tree in MB; PSS counts a page shared by n processes 1/n times
        rss = pss = 0
        for p in tree(pid):
            try:
                for line in open(f"/proc/{p}/smaps_rollup"):
                    if line.startswith("Rss:"): rss += int(line.split()[1])
                    elif line.startswith("Pss:"): pss += int(line.split()[1])
            except OSError:
                pass
        return rss / 1024, pss / 1024
    peak = [0.0, 0.0]
    def sample(pid, done):
        while not done.wait(0.02):
            peak[:] = [max(a, b) for a, b in zip(peak, memory(pid))]
    t0 = time.perf_counter()
    p = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    done = threading.Event()
    sampler = threading.Thread(target=sample, args=(p.pid, done), daemon=True)
    sampler.start()
    pid, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    done.set(); sampler.join()
    out = p.stdout.read().decode(); err = p.stderr.read().decode()
    print(json.dumps({"wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime, "peak_rss_mb": ru.ru_maxrss / 1024,
                      "tree_rss_mb": peak[0], "tree_pss_mb": peak[1], "status": status, "out": out[-500:], "err": err[-2000:]}))
    """
)


def measure(argv: list[str]) -> dict[str, float | str]:
    """One fresh process, timed by a wrapper that ``wait4``s it: its own wall, CPU and peak RSS."""
    done = subprocess.run([sys.executable, "-c", WRAPPER, *argv], capture_output=True, text=True, env={**os.environ, "COLUMNS": "120"})
    r = json.loads(done.stdout)
    if r["status"] != 0:
        raise SystemExit(f"{argv[:4]} failed:\n{r['err']}")
    return {
        "wall_s": r["wall_s"],
        "cpu_s": r["cpu_s"],
        "peak_rss_mb": r["peak_rss_mb"],
        "tree_rss_mb": r["tree_rss_mb"],
        "tree_pss_mb": r["tree_pss_mb"],
        "note": "temporal breakdown: HTA's assertion failed" if "assertion failed" in r["out"] else "",
    }


def build(shape: str, work: Path) -> Path:
    source, copies = SHAPES[shape]
    out = work / shape / "trace.json"
    if not out.exists():
        subprocess.run([sys.executable, str(ROOT / "bench/make_big_trace.py"), str(source), "--copies", str(copies), "-o", str(out)], check=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, required=True, help="where the big traces are built (kept between runs)")
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    py = sys.executable
    # Every tool runs from compiled bytecode, as an installed package does: pip compiled
    # HTA's; perfdoctor's own may be stale here (PYTHONDONTWRITEBYTECODE is set on the CPU
    # machine), which would add recompiling its changed modules to every fresh process.
    import perfdoctor

    subprocess.run([py, "-m", "compileall", "-q", str(Path(perfdoctor.__file__).parent)], check=True)
    results: dict[str, dict] = {}
    for shape in args.shapes:
        trace = build(shape, args.work)
        hta_dir = trace.parent / "hta-input"  # HTA reads a directory of traces: one holding just this one
        hta_dir.mkdir(exist_ok=True)
        if not (hta_dir / trace.name).exists():
            (hta_dir / trace.name).symlink_to(trace)
        metrics_out = trace.parent / "metrics.json"
        tools = {
            "perfdoctor": [py, "-m", "perfdoctor", "analyze", str(trace), "--json", str(metrics_out)],
            "HTA": [py, "-c", HTA, str(hta_dir)],
            "decode": [py, "-c", DECODE, str(trace)],
            "decode-typed": [py, "-c", DECODE_TYPED, str(trace)],
        }
        load_before = os.getloadavg()
        runs = {tool: [] for tool in tools}
        for _ in range(args.repeats):  # interleaved, so a burst of load hits every tool alike
            for tool, argv in tools.items():
                runs[tool].append(measure(argv))
        results[shape] = {
            "trace": str(trace),
            "trace_mb": trace.stat().st_size / 1e6,
            "load_before": load_before,
            "load_after": os.getloadavg(),
            "tools": {
                tool: {
                    "wall_s": statistics.median(r["wall_s"] for r in rs),
                    "cpu_s": statistics.median(r["cpu_s"] for r in rs),
                    "peak_rss_mb": statistics.median(r["peak_rss_mb"] for r in rs),
                    "tree_rss_mb": statistics.median(r["tree_rss_mb"] for r in rs),
                    "tree_pss_mb": statistics.median(r["tree_pss_mb"] for r in rs),
                    "notes": sorted({r["note"] for r in rs if r["note"]}),
                    "runs": rs,
                }
                for tool, rs in runs.items()
            },
        }

    print(f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.node()}, {os.cpu_count()} CPUs, median of {args.repeats} fresh processes")
    head = f"{'shape':<7}{'MB':>5} {'tool':<14}{'wall s':>8}{'CPU s':>8}{'peak MB':>9}{'tree RSS':>9}{'tree PSS':>9}{'PSS/trace':>10}"
    print(head)
    for shape, r in results.items():
        for tool, t in r["tools"].items():
            print(
                f"{shape:<7}{r['trace_mb']:>5.0f} {tool:<14}{t['wall_s']:>8.2f}{t['cpu_s']:>8.2f}{t['peak_rss_mb']:>9.0f}"
                f"{t['tree_rss_mb']:>9.0f}{t['tree_pss_mb']:>9.0f}{t['tree_pss_mb'] / r['trace_mb']:>9.2f}x"
            )
        t = r["tools"]
        pd_, hta = t["perfdoctor"], t["HTA"]
        r["ratios"] = {
            "hta_over_perfdoctor_wall": hta["wall_s"] / pd_["wall_s"],
            "hta_over_perfdoctor_cpu": hta["cpu_s"] / pd_["cpu_s"],
            "hta_over_perfdoctor_rss": hta["peak_rss_mb"] / pd_["peak_rss_mb"],
            "hta_over_perfdoctor_tree_rss": hta["tree_rss_mb"] / pd_["tree_rss_mb"],
            "perfdoctor_over_decode_wall": pd_["wall_s"] / t["decode"]["wall_s"],
            "perfdoctor_over_typed_decode_wall": pd_["wall_s"] / t["decode-typed"]["wall_s"],
        }
        q = r["ratios"]
        print(
            f"{shape:<7}      HTA/perfdoctor {q['hta_over_perfdoctor_wall']:.1f}x wall, {q['hta_over_perfdoctor_cpu']:.1f}x CPU, "
            f"{q['hta_over_perfdoctor_rss']:.1f}x peak RSS ({q['hta_over_perfdoctor_tree_rss']:.1f}x summed over processes); perfdoctor/decode {q['perfdoctor_over_decode_wall']:.2f}x "
            f"(typed decode {q['perfdoctor_over_typed_decode_wall']:.2f}x); load {r['load_before'][0]:.1f} → {r['load_after'][0]:.1f}"
        )
        for note in hta["notes"]:
            print(f"{shape:<7}      HTA: {note}")
    if args.json:
        args.json.write_text(json.dumps({"date": dt.datetime.now(dt.timezone.utc).isoformat(), "host": platform.node(), "cpus": os.cpu_count(), "repeats": args.repeats, "shapes": results}, indent=2))


if __name__ == "__main__":
    main()
