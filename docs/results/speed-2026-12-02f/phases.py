"""In-process phases of analyze after the decode (load once per repeat), CPU (process_time) per phase; medians."""
import sys, time, statistics, io, os
from pathlib import Path
trace = sys.argv[1]; n = int(sys.argv[2]) if len(sys.argv) > 2 else 5
from perfdoctor.pipeline import start_loading, load_ruleset
from perfdoctor.analysis.metrics import analyze
from perfdoctor.rules.engine import evaluate
from perfdoctor.io import write_json
from perfdoctor.reports.summary import gaps_owner, render_summary
from perfdoctor.reports import attribution, bounds
from perfdoctor.reports.common import named_not_evaluated
from perfdoctor.reports.terminal import findings_renderable, verdict_text
from rich.console import Console
res = {}
def t(name, f):
    c0 = time.process_time(); r = f(); res.setdefault(name, []).append(time.process_time() - c0); return r
for i in range(n):
    with start_loading(Path(trace)) as loading:
        rs = t("rules", lambda: load_ruleset(()))
        prof = t("load", loading.result)
    a = t("analyze", lambda: analyze(prof))
    f = t("evaluate", lambda: evaluate(rs, a))
    def rep():
        con = Console(file=io.StringIO(), width=120)
        con.print(verdict_text(f, a)); con.print(attribution.terminal(a, blank_after=False)); con.print(bounds.terminal(a))
        render_summary(a, con, gaps_shown_by=gaps_owner(f), named_below=named_not_evaluated(f))
        con.print(findings_renderable(f, a, with_verdict=False, top=1), crop=False)
    t("report", rep)
    j = t("to_json", a.to_json)
    t("write_json", lambda: write_json(Path("/tmp/hfc/ph.json"), j))
print(" ".join(f"{k} {statistics.median(v)*1000:.0f}" for k, v in res.items()), "ms (CPU, median of", n, ")")
