# inclusive page faults and CPU per perfdoctor function (module-level functions and methods of selected modules), one fresh analyze
import os, sys, time, resource, types, importlib, functools, collections
path = sys.argv[1]
from perfdoctor.cli.early import start_early
start_early([path, "--json", "/tmp/hfc/fp-m.json"])
MODS = ["perfdoctor.analysis." + m for m in ("metrics", "timeline", "steps", "attribution", "bounds", "hostgaps", "ownership", "capture", "comms", "workload", "serving", "steady", "cpu")] + \
       ["perfdoctor.rules." + m for m in ("engine", "signals", "evidence", "estimates")] + ["perfdoctor.names." + m for m in ("codes", "families", "kernels", "api")] + \
       ["perfdoctor.collectors.kineto_tables", "perfdoctor.collectors.checks", "perfdoctor.profile", "perfdoctor.reports.summary", "perfdoctor.reports.terminal", "perfdoctor.reports.attribution", "perfdoctor.reports.bounds", "perfdoctor.io"]
F = collections.Counter(); C = collections.Counter(); N = collections.Counter()
ru = resource.getrusage; SELF = resource.RUSAGE_SELF
def wrap(f, name):
    @functools.wraps(f)
    def w(*a, **k):
        f0 = ru(SELF).ru_minflt; c0 = time.process_time()
        try: return f(*a, **k)
        finally: F[name] += ru(SELF).ru_minflt - f0; C[name] += time.process_time() - c0; N[name] += 1
    return w
for mn in MODS:
    m = importlib.import_module(mn)
    for k, v in list(vars(m).items()):
        if isinstance(v, types.FunctionType) and v.__module__ == mn:
            setattr(m, k, wrap(v, f"{mn.split('.',1)[1]}.{k}"))
        elif isinstance(v, type) and v.__module__ == mn:
            for kk, vv in list(vars(v).items()):
                if isinstance(vv, types.FunctionType):
                    setattr(v, kk, wrap(vv, f"{mn.split('.',1)[1]}.{k}.{kk}"))
                elif type(vv).__name__ == "cached_property":
                    vv.func = wrap(vv.func, f"{mn.split('.',1)[1]}.{k}.{kk}")
# names imported by other modules were bound before wrapping: re-bind them
for mn in MODS:
    m = importlib.import_module(mn)
    for k, v in list(vars(m).items()):
        if isinstance(v, types.FunctionType) and v.__module__ != mn and v.__module__ in MODS:
            src = importlib.import_module(v.__module__)
            if hasattr(src, k): setattr(m, k, getattr(src, k))
from perfdoctor.cli.analyze_run import run_analyze
from pathlib import Path
sys.stdout = open(os.devnull, "w")
run_analyze(Path(path), json_out=Path("/tmp/hfc/fp-m.json"))
sys.stdout = sys.__stdout__
print("faults (inclusive), cpu ms, calls")
for k, v in (sorted(F.items(), key=lambda kv: -C[kv[0]]) if os.environ.get("BYCPU") else F.most_common())[:int(sys.argv[2]) if len(sys.argv) > 2 else 45]: print(f"{v:6d} {1000*C[k]:7.1f} {N[k]:5d} {k}")
os._exit(0)
