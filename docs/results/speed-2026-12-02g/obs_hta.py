"""obs.py for HTA: the bench's wrapper vs a bare wait4 wrapper on the bench's HTA script."""
import sys, subprocess, json, os, statistics
sys.path.insert(0, "/work/wt-hf80d/bench")
import analyze_vs_hta as B
PY = "/work/main/.venv-hta/bin/python"
BARE = open("/tmp/hfd/obs.py").read().split("BARE = '''")[1].split("'''")[0]
n = int(sys.argv[1]); shape = sys.argv[2]
argv = [PY, "-c", B.HTA, f"/tmp/hf80w/{shape}-80/hta-input"]
res = {"bench": [], "bare": []}
for i in range(n):
    for k in res:
        w = B.WRAPPER if k == "bench" else BARE
        out = subprocess.run(["/work/main/.venv/bin/python", "-c", w, *argv], cwd="/tmp/hfc", capture_output=True, text=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        res[k].append((r["wall_s"], r["cpu_s"]))
        print(i, k, f"{r['wall_s']:.3f} {r['cpu_s']:.3f} load {os.getloadavg()[0]:.2f}", flush=True)
for k, v in res.items():
    print(k, "wall median %.3f least %.3f | cpu median %.3f least %.3f" % (statistics.median(x[0] for x in v), min(x[0] for x in v), statistics.median(x[1] for x in v), min(x[1] for x in v)))
