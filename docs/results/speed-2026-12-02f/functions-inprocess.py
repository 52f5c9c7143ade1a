"""Fresh load per rep; inclusive CPU of named functions (wrapped), medians over reps."""
import sys, time, statistics, io, importlib, functools, collections
from pathlib import Path
trace = sys.argv[1]; n = int(sys.argv[2]); names = sys.argv[3:]
from perfdoctor.pipeline import start_loading, load_ruleset
import perfdoctor.analysis.metrics as M
from perfdoctor.rules.engine import evaluate
acc = collections.defaultdict(float); depth = collections.Counter()
for spec in names:
    mod, fn = spec.rsplit(":", 1)
    m = importlib.import_module(mod)
    owner = m; parts = fn.split(".")
    for p in parts[:-1]: owner = getattr(owner, p)
    orig = getattr(owner, parts[-1])
    def mk(orig, spec):
        @functools.wraps(orig)
        def w(*a, **k):
            depth[spec] += 1
            c = time.process_time()
            try: return orig(*a, **k)
            finally:
                depth[spec] -= 1
                if depth[spec] == 0: acc[spec] += time.process_time() - c
        return w
    setattr(owner, parts[-1], mk(orig, spec))
    # also patch modules that imported the name directly
    for mm in list(sys.modules.values()):
        if mm and getattr(mm, "__name__", "").startswith("perfdoctor") and getattr(mm, parts[-1], None) is orig and len(parts) == 1:
            setattr(mm, parts[-1], getattr(owner, parts[-1]))
res = collections.defaultdict(list)
from perfdoctor.reports.summary import gaps_owner, render_summary
from perfdoctor.reports import attribution as RA, bounds as RB
from perfdoctor.reports.common import named_not_evaluated
from perfdoctor.reports.terminal import findings_renderable, verdict_text
from rich.console import Console
for i in range(n):
    with start_loading(Path(trace)) as loading:
        rs = load_ruleset(()); prof = loading.result()
    acc.clear()
    c = time.process_time()
    a = M.analyze(prof); acc["=analyze"] = time.process_time() - c
    c = time.process_time(); f = evaluate(rs, a); acc["=evaluate"] = time.process_time() - c
    c = time.process_time()
    con = Console(file=io.StringIO(), width=120)
    con.print(verdict_text(f, a)); con.print(RA.terminal(a, blank_after=False)); con.print(RB.terminal(a))
    render_summary(a, con, gaps_shown_by=gaps_owner(f), named_below=named_not_evaluated(f))
    con.print(findings_renderable(f, a, with_verdict=False, top=1), crop=False)
    acc["=report"] = time.process_time() - c
    for k, v in acc.items(): res[k].append(v)
for k, v in res.items(): print(f"{k:60} {statistics.median(v)*1000:7.1f} ms")
