import cProfile, pstats, sys, io, os
from pathlib import Path
from perfdoctor.pipeline import diagnose
from perfdoctor.cli import outputs
from perfdoctor.reports.summary import gaps_owner, render_summary
from perfdoctor.reports import attribution, bounds
from perfdoctor.reports.common import named_not_evaluated
from perfdoctor.reports.terminal import findings_renderable, verdict_text
d = diagnose(Path(sys.argv[1]), rules=[], thresholds=[])
sys.stdout = open(os.devnull, "w")
pr = cProfile.Profile()
pr.enable()
for _ in range(5):
    console = outputs.report_console(Path("m.json"))
    console.print(verdict_text(d.findings, d.analysis))
    console.print(attribution.terminal(d.analysis, blank_after=False))
    console.print(bounds.terminal(d.analysis))
    render_summary(d.analysis, console, gaps_shown_by=gaps_owner(d.findings), named_below=named_not_evaluated(d.findings))
    console.print(findings_renderable(d.findings, d.analysis, with_verdict=False, top=1), crop=False)
    payload = d.analysis.to_json()
    outputs.emit_json(Path("/tmp/hfc/pr.json"), payload)
pr.disable()
sys.stdout = sys.__stdout__
st = pstats.Stats(pr); st.sort_stats("cumulative").print_stats(45)
