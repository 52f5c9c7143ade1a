import sys, time, pickle, numpy as np
from perfdoctor.collectors import kineto_events as ke
from perfdoctor.names.codes import factorize_values
raw = open(sys.argv[1],'rb').read()
sliced = ke.array_slices(raw, "traceEvents")
origin = ke.time_origin(raw)
spans = sliced.spans(ke.decode_spans(len(raw), 2))
import gc; gc.disable()
evs=[]
for sp in spans:
    e = ke._decode_span(sliced, sp, origin); e.columns(); evs.append(e)
def coded(e):
    import copy
    t = e.tables
    def conv(cols):
        out={}
        for k,v in cols.items():
            if v.dtype==object and len(v):
                c,u = factorize_values(v); out[k]=(c.astype(np.int32),u)
            else: out[k]=v
        return out
    return (e.op_counts, [conv(a) for a in t.activities], [(conv(c),p,q) for c,p,q in t.calls], [(conv(c),p,q) for c,p,q in t.ranges], (conv(t.ops[0]),t.ops[1],t.ops[2]))
for name, objs in (("current", evs), ("coded", [coded(e) for e in evs])):
    for rep in range(3):
        t0=time.process_time(); ps=[pickle.dumps(o, protocol=5) for o in objs]; t1=time.process_time()
        [pickle.loads(p) for p in ps]; t2=time.process_time()
        print(name, "dumps %.4f loads %.4f bytes %d" % (t1-t0, t2-t1, sum(map(len,ps))))
