# perfdoctor analyze right after HTA (as in the bench), trees alternating; user and sys CPU apart
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
print(json.dumps({"wall_s": wall, "user": ru.ru_utime, "sys": ru.ru_stime, "flt": ru.ru_minflt}))
'''
n = int(sys.argv[1]); trees = dict(a.split("=", 1) for a in sys.argv[2:])
argv = [PY, "-m", "perfdoctor", "analyze", "/tmp/hf80w/hf-80/trace.json", "--json", "/tmp/hf80w/hf-80/metrics.json"]
hta = ["/work/main/.venv-hta/bin/python", "-c", B.HTA, "/tmp/hf80w/hf-80/hta-input"]
res = {k: {"after_hta": [], "second": []} for k in trees}
for i in range(n):
    for k, tree in list(trees.items())[:: 1 if i % 2 else -1]:
        subprocess.run(hta, capture_output=True)
        env = dict(os.environ, PYTHONPATH=tree, COLUMNS="120")
        for slot in ("after_hta", "second"):
            r = json.loads(subprocess.run([PY, "-c", BARE, *argv], env=env, capture_output=True, text=True, cwd="/tmp/hfc").stdout)
            res[k][slot].append(r)
            print(k, slot, {a: round(b, 3) for a, b in r.items()}, flush=True)
print(time.strftime("%H:%M:%S"), "load", os.getloadavg())
for k, v in res.items():
    for slot, rs in v.items():
        print(f"{k:8} {slot:9} wall med {statistics.median(r['wall_s'] for r in rs):.3f} user {statistics.median(r['user'] for r in rs):.3f} sys {statistics.median(r['sys'] for r in rs):.3f} flt {statistics.median(r['flt'] for r in rs):.0f}")
