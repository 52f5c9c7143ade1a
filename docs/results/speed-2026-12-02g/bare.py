"""perfdoctor analyze (before, after) and HTA on hf-80 timed by a bare wait4 wrapper (no memory sampler), interleaved: wall and CPU."""
import sys, subprocess, json, os, statistics, time
sys.path.insert(0, "/work/wt-hf80d/bench")
import analyze_vs_hta as B
PY, HPY = "/work/main/.venv/bin/python", "/work/main/.venv-hta/bin/python"
BARE = '''
import os, sys, time, json
t0 = time.perf_counter()
pid = os.fork()
if pid == 0:
    os.execve(sys.argv[1], sys.argv[1:], os.environ)
_, st, ru = os.wait4(pid, 0)
print(json.dumps({"wall_s": time.perf_counter() - t0, "cpu_s": ru.ru_utime + ru.ru_stime}))
'''
n, shape = int(sys.argv[1]), sys.argv[2]
trace = f"/tmp/hf80w/{shape}-80/trace.json"
tools = {"before": ([PY, "-m", "perfdoctor", "analyze", trace, "--json", "/tmp/hfc/bare-m.json"], "/tmp/hfd/base"),
         "after": ([PY, "-m", "perfdoctor", "analyze", trace, "--json", "/tmp/hfc/bare-m.json"], "/tmp/hfd/snap1"),
         "HTA": ([HPY, "-c", B.HTA, f"/tmp/hf80w/{shape}-80/hta-input"], None)}
res = {k: [] for k in tools}
for i in range(n):
    for k, (argv, pp) in tools.items():
        for _ in range(1 if k == "HTA" else 3):
            env = dict(os.environ, COLUMNS="120", **({"PYTHONPATH": pp} if pp else {}))
            out = subprocess.run([PY, "-c", BARE, *argv], env=env, cwd="/tmp/hfc", capture_output=True, text=True)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            res[k].append((r["wall_s"], r["cpu_s"]))
            print(i, k, f"{r['wall_s']:.3f} {r['cpu_s']:.3f} load {os.getloadavg()[0]:.2f}", flush=True)
print(time.strftime("%H:%M:%S UTC", time.gmtime()), "load", os.getloadavg())
for k, v in res.items():
    print(f"{k:7} n={len(v)} wall median {statistics.median(x[0] for x in v):.3f} least {min(x[0] for x in v):.3f} | cpu median {statistics.median(x[1] for x in v):.3f} least {min(x[1] for x in v):.3f}")
h = statistics.median(x[0] for x in res["HTA"])
for k in ("before", "after"):
    print(f"HTA / {k}, wall medians: {h / statistics.median(x[0] for x in res[k]):.1f}x")
