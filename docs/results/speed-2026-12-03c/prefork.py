import os, sys, time
t0 = time.perf_counter()
real_fork = os.fork
def fork():
    t = time.perf_counter() - t0
    mods = sorted(m for m in sys.modules if not m.startswith("_") and "." not in m)
    print(f"fork at {t:.3f} cpu {time.process_time():.3f}; {len(sys.modules)} modules; top-level: {' '.join(mods)}", file=sys.stderr)
    os.fork = real_fork
    return real_fork()
os.fork = fork
sys.argv = ["perfdoctor", "analyze", sys.argv[1], "--json", "/tmp/hfc/pf.json"]
from perfdoctor.cli import program
program()
