import random, statistics
def run(sizes, J, per_mb=6.0, pk=0.3, unpk=0.3, fixed=0.6):
    # times in ms; child starts at 0, parent at J; both take spans in order
    t = {"c": 0.0, "p": J}; owner = []
    pend = []  # child's spans finished (time) to unpickle by parent
    for s in sizes:
        who = min(t, key=t.get)
        cost = fixed + per_mb * s + (pk * s if who == "c" else 0)
        t[who] += cost; owner.append(who)
        if who == "c": pend.append((t["c"], s))
    # parent unpickles child spans: those ready at its span ends get unpickled then; approximate: all unpickle costs added to parent,
    # and the parent cannot finish before the child's last span arrives
    p_end = t["p"] + sum(unpk * s for _, s in pend)
    last_child = max((tc for tc, _ in pend), default=0)
    last_unpk = unpk * pend[-1][1] if pend else 0
    return max(p_end, last_child + last_unpk)
random.seed(1)
A = [8.7] * 9
B = [8.7] * 7 + [4.35] * 2 + [2.17] * 4
C = [8.7] * 8 + [4.35] * 2
D = [4.35] * 18
for name, sz in (("9x8.7", A), ("taper 7+2+4", B), ("taper 8+2", C), ("18x4.35", D)):
    ends = [run(sz, random.uniform(230, 300)) for _ in range(20000)]
    print(f"{name:14} mean end {statistics.mean(ends):6.1f} ms  p90 {sorted(ends)[18000]:6.1f}")
def run2(sizes, J, per_mb=6.0, pk=0.3, unpk=0.3, fixed=0.6):
    t = {"c": 0.0, "p": J}
    for s in sizes:
        who = min(t, key=t.get)
        t[who] += fixed + per_mb * s + (pk * s if who == "c" else unpk * s)
    return max(t.values()), abs(t["c"] - t["p"])
for name, sz in (("9x8.7", A), ("taper 7+2+4", B)):
    r = [run2(sz, random.uniform(230, 300)) for _ in range(20000)]
    print(name, "mean end", statistics.mean(x[0] for x in r), "mean imbalance", statistics.mean(x[1] for x in r))
