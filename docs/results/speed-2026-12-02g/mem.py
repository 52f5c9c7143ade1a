import sys, time, resource
from perfdoctor.collectors import kineto_events as ke
raw = open(sys.argv[1],'rb').read()
sliced = ke.array_slices(raw, "traceEvents")
origin = ke.time_origin(raw)
spans = sliced.spans(ke.decode_spans(len(raw), 2))
import gc; gc.disable()
keep = sys.argv[2] == "keep"
held=[]
def rss(): return int(open('/proc/self/statm').read().split()[1])*4096/2**20
r0=rss(); t=time.process_time()
for sp in spans[:6]:
    ev = ke._decode_span(sliced, sp, origin)
    if keep:
        held.append((ev.parts, ev.ops, ev.step_ops))
        ev.parts = dict(ev.parts); ev.ops = list(ev.ops); ev.step_ops=list(ev.step_ops)
    ev.columns()
print(sys.argv[2], "rss +%.0f MB, cpu %.3f" % (rss()-r0, time.process_time()-t))
