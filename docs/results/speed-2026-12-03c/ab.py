"""Interleaved fresh `perfdoctor analyze TRACE --json m.json` runs of trees (NAME=PYTHONPATH), wait4-timed (wall, CPU of the
tree, minor faults); per tree least and median, and the paired differences against the first tree (each round runs every
tree once, in an order rotated per round, so no tree always follows another). Usage: ab.py N SHAPES NAME=TREE ..."""
import os, subprocess, sys, time, statistics
PY = "/work/main/.venv/bin/python"
WRAP = r'''
import os, sys, time
t0 = time.perf_counter()
pid = os.fork()
if pid == 0:
    os.execve(sys.argv[1], sys.argv[1:], os.environ)
_, st, ru = os.wait4(pid, 0)
print(f"{time.perf_counter() - t0:.4f} {ru.ru_utime + ru.ru_stime:.4f} {ru.ru_minflt} {os.waitstatus_to_exitcode(st)}")
'''
n, shapes = int(sys.argv[1]), sys.argv[2].split(",")
trees = dict(a.split("=", 1) for a in sys.argv[3:])
names = list(trees)
res = {(v, s): [] for v in names for s in shapes}
os.makedirs("/tmp/hfc", exist_ok=True)
print(time.strftime("%H:%M:%S UTC", time.gmtime()), "load", " ".join(f"{x:.2f}" for x in os.getloadavg()), flush=True)
for i in range(n):
    for s in shapes:
        order = names[i % len(names):] + names[:i % len(names)]
        for v in order:
            env = dict(os.environ, PYTHONPATH=trees[v], COLUMNS="120")
            out = subprocess.run([PY, "-c", WRAP, PY, "-m", "perfdoctor", "analyze", f"/tmp/hf80w/{s}-80/trace.json", "--json", "/tmp/hfc/ab-m.json"],
                                 env=env, cwd="/tmp/hfc", capture_output=True, text=True).stdout.strip().splitlines()[-1].split()
            w, c, f, rc = float(out[0]), float(out[1]), int(out[2]), out[3]
            res[(v, s)].append((w, c, f))
            print(f"{i} {s} {v}: wall {w:.3f} cpu {c:.3f} faults {f} rc {rc} load {os.getloadavg()[0]:.2f}", flush=True)
print(time.strftime("%H:%M:%S UTC", time.gmtime()), "load", " ".join(f"{x:.2f}" for x in os.getloadavg()))
for s in shapes:
    for v in names:
        r = res[(v, s)]
        line = f"{s:6} {v:10}: wall least {min(x[0] for x in r):.3f} med {statistics.median(x[0] for x in r):.3f} | cpu least {min(x[1] for x in r):.3f} med {statistics.median(x[1] for x in r):.3f} | faults med {statistics.median(x[2] for x in r):.0f}"
        if v != names[0]:
            base = res[(names[0], s)]
            dw = [x[0] - b[0] for x, b in zip(r, base)]; dc = [x[1] - b[1] for x, b in zip(r, base)]
            line += f" | paired vs {names[0]}: wall {statistics.median(dw):+.3f} cpu {statistics.median(dc):+.3f}"
        print(line + f" (n={len(r)})")
