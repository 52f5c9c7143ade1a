"""perfdoctor analyze vs Holistic Trace Analysis vs the bare JSON decode, on two trace shapes
at two sizes, and ``perfdoctor analyze`` on every trace of the real corpus.

Both shapes are real H200 traces repeated by ``bench/make_big_trace.py`` to about 80 MB and
to ≥ 200 MB (``--sizes``; at 80 MB the fixed costs — start-up, imports, rule packs — weigh
more against HTA than at 200 MB):

- ``eager``: the Llama-1B eager decode fixture (tests/fixtures/h200-llama1b-eager-5steps),
  ×8 (84 MB) and ×20 (209 MB);
- ``hf``: an unannotated Hugging Face ``generate`` (tests/fixtures/wild/h200-hf-unannotated),
  ×11 (79 MB) and ×30 (215 MB).

``--corpus DIR`` (default ``../shared/traces`` beside the repository, when present) also
times ``perfdoctor analyze TRACE --json …`` on every file of the corpus and on each folder
of per-rank traces in it (the way a user analyses them), ``--repeats`` fresh processes
each, interleaved over the traces, and prints each one's median and best wall time against
the 3 s budget (issue 29). Traces of a format perfdoctor refuses by name exit 2: timed too.

Each measurement is one fresh process, timed from the outside: wall, CPU (its children's
included) and peak RSS from ``wait4`` (the largest single process of the tree); then, in a
second fresh process of its own (the sampler slows what it watches: ``measure``), the peak
of the RSS and PSS summed over the process and its children, sampled every 20 ms from
``/proc`` (perfdoctor decodes a large trace in one forked process per CPU; PSS counts a
page the processes share — the file's bytes, the libraries — once). Until 2026-12-03 one
run gave both, so the walls and ratios recorded before then include the sampler:

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
are byte-compiled first, as an installed package's are. HTA runs under ``--hta-python``
(default: this interpreter), so it can live in a virtual environment of its own.
``--baseline TREE`` also times ``perfdoctor analyze`` from another checkout (``PYTHONPATH=TREE``,
"perfdoctor-baseline"), interleaved with this one on every trace: a before/after from one
run, under the same load. Run it from a neutral directory: ``python -m`` puts the working
directory first on ``sys.path``. Prints a table of ratios and writes JSON (after each part,
so a run cut short keeps what it measured).

    python bench/analyze_vs_hta.py --work /tmp/bench-traces --repeats 3 --json bench-analyze.json \
        --hta-python .venv-hta/bin/python
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
SHAPES = {  # source, copies at each size (MB): the copies that reach about that size
    "eager": (ROOT / "tests/fixtures/h200-llama1b-eager-5steps.kineto.json.gz", {80: 8, 200: 20}),
    "hf": (ROOT / "tests/fixtures/wild/h200-hf-unannotated.kineto.json.gz", {80: 11, 200: 30}),
}
SIZES = (80, 200)
CORPUS = ROOT.parent / "shared" / "traces"
BUDGET_S = 3.0  # issue 29: every corpus trace analysed in under 3 s on the 2-core machine

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
    sampled = sys.argv[1] == "sampled"
    t0 = time.perf_counter()
    p = subprocess.Popen(sys.argv[2:], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    done = threading.Event()
    sampler = threading.Thread(target=sample, args=(p.pid, done), daemon=True)
    if sampled:
        sampler.start()
    pid, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    done.set()
    if sampled:
        sampler.join()
    out = p.stdout.read().decode(); err = p.stderr.read().decode()
    print(json.dumps({"wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime, "peak_rss_mb": ru.ru_maxrss / 1024,
                      "tree_rss_mb": peak[0], "tree_pss_mb": peak[1], "status": status, "out": out[-500:], "err": err[-2000:]}))
    """
)


def measure(argv: list[str], allowed: tuple[int, ...] = (0,), pythonpath: str | None = None, sampled: bool = False) -> dict[str, float | str]:
    """One fresh process, timed by a wrapper that ``wait4``s it: its own wall, CPU and peak RSS;
    ``sampled``: also the tree's RSS and PSS, read from ``/proc`` every 20 ms — in a run of its
    own, never the timed one: reading ``smaps_rollup`` walks the process's page tables under
    its memory map's lock, so the sampler slows the process it watches, and most a short one
    that faults in many pages (perfdoctor on hf 80 MB: ~58k faults in ~0.7 s). ``allowed``:
    the exit codes that are not a failure of the bench; ``pythonpath``: the checkout it imports
    perfdoctor from (default: the environment's)."""
    env = {**os.environ, "COLUMNS": "120", **({"PYTHONPATH": pythonpath} if pythonpath else {})}
    mode = "sampled" if sampled else "timed"
    done = subprocess.run([sys.executable, "-c", WRAPPER, mode, *argv], capture_output=True, text=True, env=env)
    r = json.loads(done.stdout)
    code = os.waitstatus_to_exitcode(r["status"])
    if code not in allowed:
        raise SystemExit(f"{argv[:4]} failed:\n{r['err']}")
    return {
        "exit": code,
        "wall_s": r["wall_s"],
        "cpu_s": r["cpu_s"],
        "peak_rss_mb": r["peak_rss_mb"],
        "tree_rss_mb": r["tree_rss_mb"],
        "tree_pss_mb": r["tree_pss_mb"],
        "note": "temporal breakdown: HTA's assertion failed" if "assertion failed" in r["out"] else "",
    }


def build(shape: str, size: int, work: Path) -> Path:
    source, copies = SHAPES[shape][0], SHAPES[shape][1][size]
    out = work / f"{shape}-{size}" / "trace.json"
    if not out.exists():
        subprocess.run([sys.executable, str(ROOT / "bench/make_big_trace.py"), str(source), "--copies", str(copies), "-o", str(out)], check=True)
    return out


def corpus_entries(corpus: Path) -> list[Path]:
    """Every trace file of the corpus, and each folder of per-rank traces one level below its
    top folders (``wild/param_dlrm_8ranks``): analysed as a folder, the way its README reads it."""
    files = sorted(p for p in corpus.rglob("*") if p.is_file() and p.name != "README.md")
    folders = sorted(p for p in corpus.glob("*/*") if p.is_dir())
    return files + folders


def time_corpus(py: str, corpus: Path, repeats: int, work: Path, trees: dict[str, str | None]) -> dict[str, dict]:
    """``perfdoctor analyze`` on every corpus entry, from each of ``trees`` (name:
    PYTHONPATH): ``repeats`` fresh processes each, the entries and trees interleaved (a
    burst of load spreads over all of them, not one)."""
    entries = corpus_entries(corpus)
    runs: dict[tuple[Path, str], list] = {(e, t): [] for e in entries for t in trees}
    for _ in range(repeats):
        for e in entries:
            for t, path in trees.items():
                argv = [py, "-m", "perfdoctor", "analyze", str(e), "--json", str(work / "corpus-metrics.json")]
                runs[e, t].append(measure(argv, allowed=(0, 2), pythonpath=path))
    out: dict[str, dict] = {}
    for (e, t), rs in runs.items():
        size = sum(f.stat().st_size for f in e.rglob("*") if f.is_file()) if e.is_dir() else e.stat().st_size
        walls = [r["wall_s"] for r in rs]
        out.setdefault(str(e.relative_to(corpus)), {"bytes": size})[t] = {
            "exit": rs[0]["exit"],
            "wall_s": statistics.median(walls),
            "best_wall_s": min(walls),
            "cpu_s": statistics.median(r["cpu_s"] for r in rs),
            "walls": walls,
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, required=True, help="where the big traces are built (kept between runs)")
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--sizes", nargs="*", type=int, default=list(SIZES), choices=list(SIZES), help="trace sizes in MB (none: the corpus only)")
    ap.add_argument("--tools", nargs="+", default=["perfdoctor", "HTA", "decode", "decode-typed"], choices=["perfdoctor", "HTA", "decode", "decode-typed"])
    ap.add_argument("--hta-python", default=sys.executable, help="the interpreter that has HTA (holistictraceanalysis)")
    ap.add_argument("--corpus", default=str(CORPUS), help="the real-trace corpus to time ('none': skip it)")
    ap.add_argument("--baseline", default=None, metavar="TREE", help="also time perfdoctor from this checkout (PYTHONPATH), interleaved")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    if "perfdoctor" not in args.tools or ("HTA" not in args.tools and args.sizes):
        ap.error("--tools needs perfdoctor and HTA (the ratios are theirs)")

    py = sys.executable
    # Every tool runs from compiled bytecode, as an installed package does: pip compiled
    # HTA's; perfdoctor's own may be stale here (PYTHONDONTWRITEBYTECODE is set on the CPU
    # machine), which would add recompiling its changed modules to every fresh process.
    # The baseline tree too: a copy made with `git archive` has no bytecode at all.
    import perfdoctor

    for package in (Path(perfdoctor.__file__).parent, *([Path(args.baseline) / "perfdoctor"] if args.baseline else [])):
        subprocess.run([py, "-m", "compileall", "-q", str(package)], check=True)
    args.work.mkdir(parents=True, exist_ok=True)
    started = dt.datetime.now(dt.timezone.utc)
    corpus = None if args.corpus == "none" else Path(args.corpus)
    trees = {"perfdoctor": None, **({"perfdoctor-baseline": args.baseline} if args.baseline else {})}
    corpus_times: dict[str, dict] = {}
    corpus_load: tuple = ()
    results: dict[str, dict] = {}

    def save() -> None:
        if args.json:
            doc = {
                "date": started.isoformat(),
                "host": platform.node(),
                "cpus": os.cpu_count(),
                "repeats": args.repeats,
                "baseline": args.baseline,
                "corpus": {"path": str(corpus), "load": corpus_load, "traces": corpus_times} if corpus_times else None,
                "shapes": results,
            }
            args.json.write_text(json.dumps(doc, indent=2))

    if corpus is not None and corpus.is_dir():
        load_before = os.getloadavg()
        corpus_times = time_corpus(py, corpus, args.repeats, args.work, trees)
        corpus_load = (load_before, os.getloadavg())
        save()
    for size in args.sizes:
        for shape in args.shapes:
            trace = build(shape, size, args.work)
            hta_dir = trace.parent / "hta-input"  # HTA reads a directory of traces: one holding just this one
            hta_dir.mkdir(exist_ok=True)
            if not (hta_dir / trace.name).exists():
                (hta_dir / trace.name).symlink_to(trace)
            metrics_out = trace.parent / "metrics.json"
            analyze = [py, "-m", "perfdoctor", "analyze", str(trace), "--json", str(metrics_out)]
            tools = {
                "perfdoctor": (analyze, None),
                "perfdoctor-baseline": (analyze, args.baseline),
                "HTA": ([args.hta_python, "-c", HTA, str(hta_dir)], None),
                "decode": ([py, "-c", DECODE, str(trace)], None),
                "decode-typed": ([py, "-c", DECODE_TYPED, str(trace)], None),
            }
            tools = {t: v for t, v in tools.items() if t in args.tools or (t == "perfdoctor-baseline" and args.baseline)}
            load_before = os.getloadavg()
            runs = {tool: [] for tool in tools}
            for _ in range(args.repeats):  # interleaved, so a burst of load hits every tool alike
                for tool, (argv, path) in tools.items():
                    # the time from a run with no sampler, the tree's memory from one of its own
                    timed, sampled = measure(argv, pythonpath=path), measure(argv, pythonpath=path, sampled=True)
                    runs[tool].append({**timed, "tree_rss_mb": sampled["tree_rss_mb"], "tree_pss_mb": sampled["tree_pss_mb"],
                                       "sampled_wall_s": sampled["wall_s"]})
            results[f"{shape}-{size}"] = {
                "shape": shape,
                "trace": str(trace),
                "trace_mb": trace.stat().st_size / 1e6,
                "load_before": load_before,
                "load_after": os.getloadavg(),
                "tools": {
                    tool: {
                        "wall_s": statistics.median(r["wall_s"] for r in rs),
                        "sampled_wall_s": statistics.median(r["sampled_wall_s"] for r in rs),  # with the sampler
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
            save()

    print(f"{started:%Y-%m-%d %H:%M} UTC, {platform.node()}, {os.cpu_count()} CPUs, median of {args.repeats} fresh processes")
    if corpus_times:
        print(f"\nperfdoctor analyze on the corpus {corpus} (load {corpus_load[0][0]:.1f} → {corpus_load[1][0]:.1f}); budget {BUDGET_S:.0f} s")
        base = "  baseline: median / best / CPU s" if args.baseline else ""
        print(f"{'trace':<78}{'MB':>6}{'exit':>5}{'median s':>9}{'best s':>8}{'CPU s':>7}{base}")
        for name, c in sorted(corpus_times.items(), key=lambda kv: -kv[1]["perfdoctor"]["wall_s"]):
            d = c["perfdoctor"]
            flag = "  OVER" if d["wall_s"] >= BUDGET_S else ""
            b = c.get("perfdoctor-baseline")
            was = f"  {b['wall_s']:.2f} / {b['best_wall_s']:.2f} / {b['cpu_s']:.2f}" if b else ""
            print(f"{name:<78}{c['bytes'] / 1e6:>6.2f}{d['exit']:>5}{d['wall_s']:>9.2f}{d['best_wall_s']:>8.2f}{d['cpu_s']:>7.2f}{was}{flag}")
        for t in trees:
            walls = [c[t]["wall_s"] for c in corpus_times.values()]
            over = sum(w >= BUDGET_S for w in walls)
            print(f"{t}: {len(walls)} traces, slowest median {max(walls):.2f} s, sum of medians {sum(walls):.1f} s; over {BUDGET_S:.0f} s: {over}")
    if results:
        print(f"\n{'shape':<11}{'MB':>5} {'tool':<14}{'wall s':>8}{'CPU s':>8}{'peak MB':>9}{'tree RSS':>9}{'tree PSS':>9}{'PSS/trace':>10}")
    for key, r in results.items():
        for tool, t in r["tools"].items():
            print(
                f"{key:<11}{r['trace_mb']:>5.0f} {tool:<14}{t['wall_s']:>8.2f}{t['cpu_s']:>8.2f}{t['peak_rss_mb']:>9.0f}"
                f"{t['tree_rss_mb']:>9.0f}{t['tree_pss_mb']:>9.0f}{t['tree_pss_mb'] / r['trace_mb']:>9.2f}x"
            )
        t = r["tools"]
        pd_, hta = t["perfdoctor"], t["HTA"]
        r["ratios"] = {
            **({"hta_over_baseline_wall": hta["wall_s"] / t["perfdoctor-baseline"]["wall_s"]} if "perfdoctor-baseline" in t else {}),
            "hta_over_perfdoctor_wall": hta["wall_s"] / pd_["wall_s"],
            "hta_over_perfdoctor_cpu": hta["cpu_s"] / pd_["cpu_s"],
            "hta_over_perfdoctor_rss": hta["peak_rss_mb"] / pd_["peak_rss_mb"],
            "hta_over_perfdoctor_tree_rss": hta["tree_rss_mb"] / pd_["tree_rss_mb"],
        }
        for floor in ("decode", "decode-typed"):
            if floor in t:
                r["ratios"][f"perfdoctor_over_{floor.replace('-', '_')}_wall"] = pd_["wall_s"] / t[floor]["wall_s"]
        q = r["ratios"]
        floors = ", ".join(f"perfdoctor/{f} {q[f'perfdoctor_over_{f.replace(chr(45), chr(95))}_wall']:.2f}x" for f in ("decode", "decode-typed") if f in t)
        print(
            f"{key:<11}      HTA/perfdoctor {q['hta_over_perfdoctor_wall']:.1f}x wall, {q['hta_over_perfdoctor_cpu']:.1f}x CPU, "
            f"{q['hta_over_perfdoctor_rss']:.1f}x peak RSS ({q['hta_over_perfdoctor_tree_rss']:.1f}x summed over processes); {floors}; "
            f"load {r['load_before'][0]:.1f} → {r['load_after'][0]:.1f}"
        )
        print(f"{key:<11}      with the memory sampler running (as recorded before 2026-12-03): perfdoctor "
              f"{pd_['sampled_wall_s']:.2f} s, HTA {hta['sampled_wall_s']:.2f} s, {hta['sampled_wall_s'] / pd_['sampled_wall_s']:.1f}x")
        if "hta_over_baseline_wall" in q:
            print(f"{key:<11}      HTA/perfdoctor-baseline {q['hta_over_baseline_wall']:.1f}x wall")
        for note in hta["notes"]:
            print(f"{key:<11}      HTA: {note}")
    save()

if __name__ == "__main__":
    main()
