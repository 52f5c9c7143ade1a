"""The bench's wrapper (RSS/PSS sampler every 20 ms) vs a bare wait4 wrapper, interleaved, on perfdoctor analyze."""
import sys, subprocess, json, os, statistics, time
sys.path.insert(0, "/work/wt-hf80d/bench")
import analyze_vs_hta as B
PY = "/work/main/.venv/bin/python"
BARE = '''
import os, sys, time, json
t0 = time.perf_counter()
pid = os.fork()
if pid == 0:
    os.execve(sys.argv[1], sys.argv[1:], os.environ)
_, st, ru = os.wait4(pid, 0)
print(json.dumps({"wall_s": time.perf_counter() - t0, "cpu_s": ru.ru_utime + ru.ru_stime}))
'''
n = int(sys.argv[1]); shape = sys.argv[2]; tree = sys.argv[3]
argv = [PY, "-m", "perfdoctor", "analyze", f"/tmp/hf80w/{shape}-80/trace.json", "--json", "/tmp/hfc/obs-m.json"]
env = dict(os.environ, PYTHONPATH=tree, COLUMNS="120")
res = {"bench": [], "bare": []}
for i in range(n):
    for k in res:
        w = B.WRAPPER if k == "bench" else BARE
        out = subprocess.run([PY, "-c", w, *argv], env=env, cwd="/tmp/hfc", capture_output=True, text=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        res[k].append((r["wall_s"], r["cpu_s"]))
        print(i, k, f"{r['wall_s']:.3f} {r['cpu_s']:.3f} load {os.getloadavg()[0]:.2f}", flush=True)
for k, v in res.items():
    print(k, "wall median %.3f least %.3f | cpu median %.3f least %.3f" % (statistics.median(x[0] for x in v), min(x[0] for x in v), statistics.median(x[1] for x in v), min(x[1] for x in v)))
