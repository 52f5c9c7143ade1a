import sys, time, numpy as np
from operator import attrgetter
from perfdoctor.collectors import kineto_events as ke
import gc; gc.disable()
raw = open(sys.argv[1],'rb').read()
sliced = ke.array_slices(raw, "traceEvents")
sp = sliced.spans(9)[1]
ev = ke._decode_span(sliced, sp, ke.time_origin(raw))
taken = ev._joined(ev.ops, "cpu_op")
args = [a if a is not None else ke._NO_ARGS for a in map(ke._ARGS, taken.events)]
print(len(args))
fields = ("input_dims", "input_type", "concrete")
def cur():
    return [ke._raws(args, f) for f in fields]
def joint():
    d, t, c = (list(map(attrgetter(f), args)) for f in fields)
    keys = list(map(b"\0".join, zip(d, t, c)))
    index = {}
    first = np.fromiter(map(index.setdefault, keys, range(len(keys))), dtype=np.intp, count=len(keys))
    u, inv = np.unique(first, return_inverse=True)
    out = []
    for col in (d, t, c):
        seen = {}
        vals = [bytes(col[i]) for i in u.tolist()]
        vals = np.array([seen.setdefault(v, v) for v in vals] + [None], dtype=object)[:-1]
        out.append(vals[inv])
    return out
a, b = cur(), joint()
for x, y in zip(a, b): assert x.tolist() == y.tolist()
for r in range(3):
    t0=time.process_time(); [cur() for _ in range(5)]; t1=time.process_time(); [joint() for _ in range(5)]; t2=time.process_time()
    print("cur %.1f ms  joint %.1f ms" % ((t1-t0)/5*1e3, (t2-t1)/5*1e3))
