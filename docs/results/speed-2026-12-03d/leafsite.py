# for samples whose leaf matches PATTERN: the deepest perfdoctor frame (file:function:line)
import sys, collections, re
lines = open(sys.argv[1]).read().splitlines(); n = len(lines)
pat = re.compile(sys.argv[2]); c = collections.Counter(); tot = 0
for l in lines:
    fr = l.split(";")
    if not any(pat.search(f) for f in fr[-int(sys.argv[4]) if len(sys.argv) > 4 else -1:]): continue
    tot += 1
    pd_ = [f for f in fr if f.startswith("perfdoctor")]
    c[pd_[-1] if pd_ else "?"] += 1
print(f"{tot} samples ({100*tot/n:.1f}%)")
for f, k in c.most_common(int(sys.argv[3]) if len(sys.argv) > 3 else 25): print(f"{100*k/n:5.2f}% {k:4d} {f}")
