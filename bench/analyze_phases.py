"""Where one ``perfdoctor analyze TRACE`` spends its time: phases from cProfile.

Runs the CLI in this process under cProfile (the forked decoders are not profiled: their
share shows as the parent's wait in ``load``), once per trace, and prints the cumulative
time of each phase and the functions with the most time of their own:

- ``start``: the interpreter's imports of the CLI and typer's argument parsing, up to the
  analyze command;
- ``load``: reading and decoding the trace into a Profile (``pipeline.start_loading`` and
  the loader's ``result``; an Nsight Systems export's ``nsys.load_views``);
- ``rules``: loading the rule packs (this imports the analysis, pandas with it);
- ``analyze``: steps, timeline and metrics (``analysis.metrics.analyze``);
- ``evaluate``: the rules with their evidence and estimates (``rules.engine.evaluate``);
- ``output``: the rest of the command: the terminal summary and the JSON.

cProfile slows Python-heavy code more than C-heavy code, so the phases' shares are a guide
to where to look, and ``bench/analyze_vs_hta.py`` gives the times to quote.

    python bench/analyze_phases.py TRACE [TRACE ...] [--top 15]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import subprocess
import sys
import tempfile
import textwrap

CHILD = textwrap.dedent(
    """
    import cProfile, os, sys, time
    out, trace = sys.argv[1], sys.argv[2]
    pr, pid, real_exit, t0 = cProfile.Profile(), os.getpid(), os._exit, time.perf_counter()
    def leave(status):  # the CLI ends with os._exit (console.leave): save the profile first
        if os.getpid() == pid:
            pr.disable()
            pr.dump_stats(out)
            print(f"wall {time.perf_counter() - t0:.3f}", file=sys.stderr)
        real_exit(status)
    os._exit = leave
    sys.argv = ["perfdoctor", "analyze", trace, "--json", out + ".metrics.json"]
    pr.enable()
    from perfdoctor.cli import program
    program()
    """
)

PHASES = {  # phase: functions (file suffix, function name) whose cumulative time it is
    "command": [("cli/analyze_run.py", "run_analyze")],
    "start_loading": [("perfdoctor/pipeline.py", "start_loading")],
    "result": [("collectors/torch_profiler.py", "result"), ("collectors/nsys.py", "load_views"), ("perfdoctor/pipeline.py", "_load_bundle")],
    "rules": [("perfdoctor/pipeline.py", "load_ruleset")],
    "analyze": [("analysis/metrics.py", "analyze")],
    "evaluate": [("rules/engine.py", "evaluate")],
}


def cumulative(stats: pstats.Stats, names: list[tuple[str, str]]) -> float:
    """The largest cumulative time among the functions named (the outermost call of each)."""
    best = 0.0
    for (file, _line, func), (_cc, _nc, _tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        if any(file.endswith(f) and func == n for f, n in names):
            best = max(best, ct)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--top", type=int, default=12, help="functions shown by their own time")
    args = ap.parse_args()
    for trace in args.traces:
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "analyze.prof")
            done = subprocess.run([sys.executable, "-c", CHILD, out, trace], capture_output=True, text=True)
            wall = next((line.split()[1] for line in done.stderr.splitlines() if line.startswith("wall ")), "?")
            if not os.path.exists(out):
                print(f"{trace}: no profile (exit {done.returncode}): {done.stderr.strip()[-300:]}")
                continue
            stats = pstats.Stats(out)
        total = stats.total_tt  # type: ignore[attr-defined]
        t = {p: cumulative(stats, names) for p, names in PHASES.items()}
        load = t["start_loading"] + t["result"]  # the rule packs load between the two
        phases = {
            "start": total - t["command"],
            "load": load,
            "rules": t["rules"],
            "analyze": t["analyze"],
            "evaluate": t["evaluate"],
            "output": t["command"] - load - t["rules"] - t["analyze"] - t["evaluate"],
        }
        print(f"\n{trace}: {total:.2f} s under cProfile (wall {wall} s)")
        print("  " + "  ".join(f"{p} {v:.2f}" for p, v in phases.items()))
        stats.sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
