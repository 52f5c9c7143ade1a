"""Where a multi-rank analysis spends its time: cProfile of what ``perfdoctor analyze FOLDER``
does for a folder of per-rank traces (``bench/many_ranks.py --folder FOLDER`` builds one),
in-process (the CLI ends by ``os._exit``, before ``python -m cProfile`` could write).

    python bench/profile_ranks.py FOLDER OUT.prof     # then: python -m pstats OUT.prof

Prints the seconds of the diagnosis (load, analyses, rules) and of the terminal report.
"""

from __future__ import annotations

import cProfile
import io
import sys
import time
from pathlib import Path

from rich.console import Console

from perfdoctor.pipeline import diagnose
from perfdoctor.reports.ranks import render_ranks


def main() -> int:
    folder, out = Path(sys.argv[1]), sys.argv[2]
    profiler = cProfile.Profile()
    t0 = time.perf_counter()
    profiler.enable()
    d = diagnose(folder)
    t1 = time.perf_counter()
    render_ranks(d, Console(file=io.StringIO(), width=200))
    profiler.disable()
    print(f"diagnosis {t1 - t0:.1f} s, report {time.perf_counter() - t1:.1f} s, {len(d.cross_rank.per_step)} ranks ({len(d.cross_rank.runs)} analysed in full)")
    profiler.dump_stats(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
