# inclusive samples of function F, split by the perfdoctor frame that called it (the frame just above F's first occurrence)
import sys, collections
lines = open(sys.argv[1]).read().splitlines(); n = len(lines); f = sys.argv[2]
c = collections.Counter(); tot = 0
for l in lines:
    fr = l.split(";")
    idx = next((i for i, x in enumerate(fr) if ":".join(x.split(":")[:2]) == f), None)
    if idx is None: continue
    tot += 1
    c[fr[idx - 1] if idx else "?"] += 1
print(f"{f}: {tot} samples ({100*tot/n:.1f}%)")
for k, v in c.most_common(30): print(f"{100*v/n:5.2f}% {v:4d} {k}")
