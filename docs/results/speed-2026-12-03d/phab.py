# interleaved st.py runs of trees: median CPU ms per phase and paired median differences vs the first tree
# usage: phab.py N SHAPE NAME=TREE ...
import os, subprocess, sys, statistics, re
n, shape = int(sys.argv[1]), sys.argv[2]
trees = dict(a.split("=", 1) for a in sys.argv[3:]); names = list(trees)
res = {v: [] for v in names}
for i in range(n):
    order = names[i % len(names):] + names[:i % len(names)]
    for v in order:
        env = dict(os.environ, PYTHONPATH=trees[v], COLUMNS="120")
        err = subprocess.run(["/work/main/.venv/bin/python", "/tmp/s3/st.py", f"/tmp/hf80w/{shape}-80/trace.json"], env=env, cwd="/tmp/hfc", capture_output=True, text=True).stderr.strip().splitlines()[-1]
        d = {}
        for part in err.split(" | "):
            k, v2 = part.rsplit(" ", 1); w, c = v2.split("/"); d[k] = (float(w), float(c))
        res[v].append(d)
keys = list(res[names[0]][0])
print("phase".ljust(12), *[f"{v:>16}" for v in names], "  paired cpu diff vs", names[0])
for k in keys:
    row = [statistics.median(r[k][1] for r in res[v]) for v in names]
    diffs = [statistics.median(a[k][1] - b[k][1] for a, b in zip(res[v], res[names[0]])) for v in names[1:]]
    print(k.ljust(12), *[f"{x:16.1f}" for x in row], "  ", *[f"{d:+.1f}" for d in diffs])
print("load", os.getloadavg())
