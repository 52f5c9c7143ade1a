import os, sys, time
t0 = time.perf_counter(); c0 = time.process_time()
marks = []
SEEN = {}
def mark(what):
    marks.append((what, time.perf_counter() - t0, time.process_time() - c0))
    if what in ("< finish", "exit"):
        SEEN[what] = set(sys.modules)
import importlib.abc, importlib.util
WRAP = {"perfdoctor.pipeline": ["start_early", "diagnose", "load_ruleset"], "perfdoctor.collectors.torch_profiler": [],
        "perfdoctor.analysis.metrics": ["analyze"], "perfdoctor.rules.engine": ["evaluate"], "perfdoctor.collectors.kineto_tables": ["profile_of"], "perfdoctor.collectors.kineto_events": [], "perfdoctor.reports.terminal": []}
def wrapmod(m):
    if m.__name__ == "perfdoctor.collectors.kineto_events":
        cls = m.SlicedDecode
        for fn in ("finish", "_decoded"):
            f = getattr(cls, fn)
            def w(*a, _f=f, _n=fn, **k):
                mark("> " + _n)
                try: return _f(*a, **k)
                finally: mark("< " + _n)
            setattr(cls, fn, w)
        ow = cls._work
        def work(self, _o=ow):
            for i, ev in _o(self):
                os.write(2, f"span {i} pid {os.getpid()} @{time.perf_counter()-t0:.3f}/{time.process_time()-c0:.2f}\n".encode())
                yield i, ev
        cls._work = work
    for fn in WRAP.get(m.__name__, []):
        f = getattr(m, fn)
        def w(*a, _f=f, _n=fn, **k):
            mark("> " + _n)
            try: return _f(*a, **k)
            finally: mark("< " + _n)
        setattr(m, fn, w)
class Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in WRAP and name not in ("pandas", "rich", "typer"): return None
        sys.meta_path.remove(self)
        try: spec = importlib.util.find_spec(name)
        finally: sys.meta_path.insert(0, self)
        if spec is None: return None
        orig = spec.loader.exec_module
        def exec_module(module, _o=orig, _n=name):
            if _n in ("pandas", "rich", "typer"): mark("> import " + _n)
            _o(module)
            if _n in ("pandas", "rich", "typer"): mark("< import " + _n)
            wrapmod(module)
        spec.loader.exec_module = exec_module
        return spec
sys.meta_path.insert(0, Finder())
real_exit = os._exit; pid = os.getpid()
def leave(code):
    if os.getpid() == pid:
        mark("exit")
        print(" ".join(f"{w}@{t:.3f}/{c:.2f}" for w, t, c in marks), file=sys.stderr)
        if "< finish" in SEEN: print("late imports:", sorted(SEEN["exit"] - SEEN["< finish"]), file=sys.stderr)
    real_exit(code)
os._exit = leave
sys.argv = ["perfdoctor", "analyze", sys.argv[1], "--json", "/tmp/hfc/tl-m.json"]
from perfdoctor.cli import program
program()
