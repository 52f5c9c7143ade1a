"""Interleaved fresh `perfdoctor analyze TRACE --json` runs of variants (NAME=SRC[@ENV=V,ENV=V]); wall, CPU (user+sys of the tree via wait4), faults."""
import os, subprocess, sys, time, statistics
PY = "/work/main/.venv/bin/python"
WRAP = r'''
import os, sys, time
t0 = time.perf_counter()
pid = os.fork()
if pid == 0:
    os.execve(sys.argv[1], sys.argv[1:], os.environ)
_, st, ru = os.wait4(pid, 0)
wall = time.perf_counter() - t0
print(f"{wall:.4f} {ru.ru_utime:.4f} {ru.ru_stime:.4f} {ru.ru_minflt} {os.waitstatus_to_exitcode(st)}")
'''
n = int(sys.argv[1]); shapes = sys.argv[2].split(",")
variants = {}
for a in sys.argv[3:]:
    name, spec = a.split("=", 1)
    spec, _, script = spec.partition("#")
    src, _, envs = spec.partition("@")
    variants[name] = (src, dict(e.split(":", 1) for e in envs.split(",") if e), script)
res = {(v, s): [] for v in variants for s in shapes}
os.makedirs("/tmp/hfc", exist_ok=True)
print(time.strftime("%H:%M:%S UTC", time.gmtime()), "load", os.getloadavg(), flush=True)
for i in range(n):
    for s in shapes:
        for v, (src, envs, script) in variants.items():
            env = dict(os.environ, PYTHONPATH=src, COLUMNS="120", **envs)
            out = subprocess.run([PY, "-c", WRAP, PY] + ([script] if script else ["-m", "perfdoctor"]) + ["analyze", f"/tmp/hf80w/{s}-80/trace.json", "--json", "/tmp/hfc/cpu-m.json"],
                                 env=env, cwd="/tmp/hfc", capture_output=True, text=True).stdout.strip().splitlines()[-1].split()
            w, u, sy, f, rc = float(out[0]), float(out[1]), float(out[2]), int(out[3]), out[4]
            res[(v, s)].append((w, u + sy, u, sy, f))
            print(f"{i} {s} {v}: wall {w:.3f} cpu {u+sy:.3f} (u {u:.3f} s {sy:.3f}) faults {f} rc {rc} load {os.getloadavg()[0]:.2f}", flush=True)
print(time.strftime("%H:%M:%S UTC", time.gmtime()), "load", os.getloadavg())
for (v, s), r in res.items():
    q = lambda k, f: f(x[k] for x in r)
    print(f"{s:6} {v:10}: wall least {q(0,min):.3f} med {q(0,statistics.median):.3f} | cpu least {q(1,min):.3f} med {q(1,statistics.median):.3f} | user med {q(2,statistics.median):.3f} sys med {q(3,statistics.median):.3f} | faults med {q(4,statistics.median):.0f} (n={len(r)})")
