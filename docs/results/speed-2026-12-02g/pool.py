"""Pool cpu.py sets: least and median wall and CPU per shape and tree, with each set's time and load."""
import re, statistics, sys, glob
rows, sets = [], []
for f in sorted(glob.glob(sys.argv[1])):
    lines = open(f).read().splitlines()
    got = [l.split() for l in lines if re.match(r"^\d+ (hf|eager) (before|after):", l)]
    if not got: continue
    loads = [float(r[-1]) for r in got]
    sets.append(f"{f.split('/')[-1]}: {len(got)} runs, load {min(loads):.2f}-{max(loads):.2f}")
    rows += got
print("\n".join(sets))
for s in ("hf", "eager"):
    for t in ("before", "after"):
        v = [(float(r[4]), float(r[6])) for r in rows if r[1] == s and r[2] == t + ":"]
        w, c = [x[0] for x in v], [x[1] for x in v]
        print(f"{s:5} {t:6} n={len(v):2} wall least {min(w):.3f} median {statistics.median(w):.3f} | cpu least {min(c):.3f} median {statistics.median(c):.3f}")
