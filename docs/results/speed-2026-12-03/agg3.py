"""inclusive samples per line of a given perfdoctor function"""
import sys, collections
lines = open(sys.argv[1]).read().splitlines(); n = len(lines)
for fn in sys.argv[2:]:
    c = collections.Counter()
    for l in lines:
        fr = l.split(";")
        seen = set()
        for f in fr:
            p = f.rsplit(":", 1)
            if p[0].endswith(fn) and f not in seen:
                seen.add(f); c[f] += 1
    print("==", fn, sum(c.values()))
    for f, k in sorted(c.items(), key=lambda x: int(x[0].rsplit(":",1)[1])): print(f"  {100*k/n:5.1f}% {f}")
