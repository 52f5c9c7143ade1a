# phase times of one fresh `analyze` (run_analyze's body replicated with marks): wall / CPU ms per phase
import os, sys, time
t0 = time.perf_counter(); c0 = time.process_time()
M = []
def mark(w): M.append((w, time.perf_counter() - t0, time.process_time() - c0))
from pathlib import Path
path = sys.argv[1]
from perfdoctor.cli.early import start_early
start_early([path, "--json", "/tmp/hfc/st-m.json"]); mark("forked")
from perfdoctor.cli import outputs
from perfdoctor.reports.summary import gaps_owner, render_summary
from perfdoctor.reports import attribution, bounds
from perfdoctor.reports.common import named_not_evaluated
from perfdoctor.reports.terminal import brief_renderable, findings_renderable, verdict_text
mark("imports")
from perfdoctor import pipeline
from perfdoctor.collectors import kineto_events as ke, kineto_tables as kt
from perfdoctor.analysis import metrics
from perfdoctor.rules import engine
of = ke.SlicedDecode.finish
def fin(self, raw):
    mark("pre-join"); r = of(self, raw); mark("joined"); return r
ke.SlicedDecode.finish = fin
for mod, fn in ((kt, "profile_of"), (metrics, "analyze"), (engine, "evaluate"), (pipeline, "load_ruleset")):
    f = getattr(mod, fn)
    def w(*a, _f=f, _n=fn, **k):
        r = _f(*a, **k); mark(_n); return r
    setattr(mod, fn, w)
json_out = Path("/tmp/hfc/st-m.json")
d = pipeline.diagnose(Path(path), rules=(), thresholds=())
console = outputs.report_console(json_out)
console.print(verdict_text(d.findings, d.analysis))
console.print(attribution.terminal(d.analysis, blank_after=False))
console.print(bounds.terminal(d.analysis))
render_summary(d.analysis, console, gaps_shown_by=gaps_owner(d.findings), named_below=named_not_evaluated(d.findings))
console.print(findings_renderable(d.findings, d.analysis, with_verdict=False, top=1), crop=False)
mark("report")
p = d.analysis.to_json(); mark("to_json")
outputs.emit_json(json_out, p); mark("emit_json")
sys.stdout.flush()
prev = (0, 0)
out = []
for w, t, c in M:
    out.append(f"{w} {1000*(t-prev[0]):.0f}/{1000*(c-prev[1]):.0f}"); prev = (t, c)
print(" | ".join(out) + f" | total {1000*M[-1][1]:.0f}/{1000*M[-1][2]:.0f}", file=sys.stderr)
os._exit(0)
