import sys, collections
lines = open(sys.argv[1]).read().splitlines()
n = len(lines); leaf = collections.Counter(); incl = collections.Counter()
for l in lines:
    fr = l.split(";")
    pd_ = [f for f in fr if f.startswith("perfdoctor")]
    if pd_: leaf[pd_[-1]] += 1
    for f in set(":".join(x.split(":")[:2]) for x in fr): incl[f] += 1
print("samples", n)
for f, c in leaf.most_common(int(sys.argv[2]) if len(sys.argv) > 2 else 60): print(f"{100*c/n:5.1f}% {f}")
