"""Interleaved fresh `perfdoctor analyze TRACE --json` runs; CPU (user+sys of the tree via wait4 of a wrapper) and wall."""
import os, subprocess, sys, time, statistics, json
PY = "/work/main/.venv/bin/python"
WRAP = r'''
import os, sys, time, resource
t0 = time.perf_counter()
pid = os.fork()
if pid == 0:
    os.execve(sys.argv[1], sys.argv[1:], os.environ)
_, st, ru = os.wait4(pid, 0)
wall = time.perf_counter() - t0
# the tree: wait4's rusage of the child includes its waited-for descendants
print(f"{wall:.4f} {ru.ru_utime:.4f} {ru.ru_stime:.4f} {ru.ru_minflt} {os.waitstatus_to_exitcode(st)}")
'''
trees = dict(a.split("=", 1) for a in sys.argv[3:])
n = int(sys.argv[1]); shapes = sys.argv[2].split(",")
res = {(t, s): [] for t in trees for s in shapes}
for i in range(n):
    for s in shapes:
        for t, src in trees.items():
            env = dict(os.environ, PYTHONPATH=src, COLUMNS="120")
            out = subprocess.run([PY, "-c", WRAP, PY, "-m", "perfdoctor", "analyze", f"/tmp/hf80w/{s}-80/trace.json", "--json", "/tmp/hfc/cpu-m.json"],
                                 env=env, cwd="/tmp/hfc", capture_output=True, text=True).stdout.strip().splitlines()[-1].split()
            w, u, sy, f, rc = float(out[0]), float(out[1]), float(out[2]), int(out[3]), out[4]
            res[(t, s)].append((w, u + sy, u, sy, f))
            print(f"{i} {s} {t}: wall {w:.3f} cpu {u+sy:.3f} (u {u:.3f} s {sy:.3f}) faults {f} rc {rc} load {os.getloadavg()[0]:.2f}", flush=True)
print(time.strftime("%H:%M:%S UTC", time.gmtime()), "load", os.getloadavg())
for (t, s), v in res.items():
    med = lambda k: statistics.median(x[k] for x in v)
    print(f"{s:6} {t:8}: wall {med(0):.3f}  cpu {med(1):.3f}  user {med(2):.3f}  sys {med(3):.3f}  faults {med(4):.0f}  (n={len(v)})")
