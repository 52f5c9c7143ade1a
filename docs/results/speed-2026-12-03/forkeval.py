"""Prototype: rules evaluated in a forked child while the parent computes what the report reads."""
import os, sys, pickle
from perfdoctor.rules import engine
orig = engine.evaluate
def evaluate(rules, analysis, cross_rank=None):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            data = pickle.dumps(orig(rules, analysis, cross_rank), protocol=5)
            with os.fdopen(w, "wb") as f: f.write(data)
            os._exit(0)
        except BaseException:
            os._exit(1)
    os.close(w)
    if os.environ.get("WARM", "1") == "1":
        analysis.attribution; analysis.bounds
    with os.fdopen(r, "rb") as f: data = f.read()
    _, st = os.waitpid(pid, 0)
    if st != 0: return orig(rules, analysis, cross_rank)
    return pickle.loads(data)
engine.evaluate = evaluate
sys.argv = ["perfdoctor"] + sys.argv[1:]
from perfdoctor.cli import program
program()
