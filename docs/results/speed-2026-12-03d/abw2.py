import os, subprocess, sys, json, statistics, time
sys.path.insert(0, "/work/wt-speed3/bench")
import analyze_vs_hta as B
PY = "/work/main/.venv/bin/python"
BARE = r'''
import os, sys, time, json, subprocess
t0 = time.perf_counter()
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
pid, st, ru = os.wait4(p.pid, 0)
wall = time.perf_counter() - t0
p.stdout.read(); p.stderr.read()
print(json.dumps({"wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime}))
'''
n = int(sys.argv[1]); tree = sys.argv[2]
argv = [PY, "-m", "perfdoctor", "analyze", "/tmp/hf80w/hf-80/trace.json", "--json", "/tmp/hf80w/hf-80/metrics.json"]
cfgs = {"bare@/tmp": (BARE, "/tmp/hfc"), "bench@/tmp": (B.WRAPPER, "/tmp/hfc"), "bench@wt": (B.WRAPPER, "/work/wt-speed3"), "bare@wt": (BARE, "/work/wt-speed3")}
res = {k: [] for k in cfgs}
env = dict(os.environ, PYTHONPATH=tree, COLUMNS="120")
for i in range(n):
    keys = list(cfgs); keys = keys[i % len(keys):] + keys[:i % len(keys)]
    for k in keys:
        w, cwd = cfgs[k]
        r = json.loads(subprocess.run([PY, "-c", w, *argv], env=env, capture_output=True, text=True, cwd=cwd).stdout)
        res[k].append((r["wall_s"], r["cpu_s"]))
print(time.strftime("%H:%M:%S"), "load", os.getloadavg())
for k, v in res.items():
    print(f"{k:12} wall med {statistics.median(x[0] for x in v):.3f} least {min(x[0] for x in v):.3f} | cpu med {statistics.median(x[1] for x in v):.3f} least {min(x[1] for x in v):.3f} (n={len(v)})")
