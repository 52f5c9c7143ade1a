import sys, collections
lines = open(sys.argv[1]).read().splitlines(); n = len(lines)
incl = collections.Counter(); leaf = collections.Counter(); self_pd = collections.Counter()
for l in lines:
    fr = l.split(";")
    seen = set()
    for f in fr:
        k = ":".join(f.split(":")[:2])
        if k not in seen: seen.add(k); incl[k] += 1
    pd_ = [f for f in fr if f.startswith("perfdoctor")]
    if pd_: leaf[":".join(pd_[-1].split(":")[:2])] += 1
print("samples", n)
for f, c in incl.most_common(int(sys.argv[2])):
    if f.startswith("perfdoctor"): print(f"{100*c/n:5.1f}% {f}")
print("--- deepest perfdoctor function")
for f, c in leaf.most_common(40): print(f"{100*c/n:5.1f}% {f}")
