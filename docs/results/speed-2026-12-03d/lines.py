# per-line inclusive samples within functions matching a pattern: python lines.py STK PATTERN [N]
import sys, collections, re
lines = open(sys.argv[1]).read().splitlines(); n = len(lines)
pat = re.compile(sys.argv[2]); top = int(sys.argv[3]) if len(sys.argv) > 3 else 40
c = collections.Counter()
for l in lines:
    seen = set()
    for f in l.split(";"):
        k = ":".join(f.split(":")[:2])
        if pat.search(k) and f not in seen:
            seen.add(f); c[f] += 1
for f, k in c.most_common(top): print(f"{100*k/n:5.1f}% {k:4d} {f}")
