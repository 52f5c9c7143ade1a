import sys, collections
lines = open(sys.argv[1]).read().splitlines(); n = len(lines)
leaf = collections.Counter(); leaffn = collections.Counter()
for l in lines:
    fr = l.split(";")
    leaf[fr[-1]] += 1
    leaffn[":".join(fr[-1].split(":")[:2])] += 1
print("samples", n)
for f, c in leaffn.most_common(40): print(f"{100*c/n:5.1f}% {f}")
