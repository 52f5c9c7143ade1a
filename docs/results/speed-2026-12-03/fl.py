import sys, time, gc
import numpy as np
from perfdoctor.collectors import kineto_events as ke
raw = open(sys.argv[1],'rb').read()
sliced = ke.array_slices(raw, "traceEvents")
spans = sliced.spans(ke.decode_spans(len(raw), 2))
gc.disable()
chunks = []
for sp in spans[:3]:
    for chunk in sliced.decoded(ke.events_decoder, span=sp):
        ev, _ = ke._phases(chunk); chunks.append(ev)
n = sum(map(len, chunks)); print("events", n)
def old(evs):
    return ke._floats_of(map(ke._TS, evs), len(evs)), ke._floats_of(map(ke._DUR, evs), len(evs))
def new(evs):
    return np.fromiter(map(ke._TS, evs), dtype=np.float64, count=len(evs)), np.fromiter(map(ke._DUR, evs), dtype=np.float64, count=len(evs))
from operator import attrgetter
both = attrgetter("ts", "dur")
def pair(evs):
    a = np.array(list(map(both, evs)), dtype=np.float64)
    return a[:, 0], a[:, 1]
for r in range(3):
    for f in (old, new, pair):
        best = 9
        for _ in range(5):
            t = time.perf_counter()
            for c in chunks: f(c)
            best = min(best, time.perf_counter() - t)
        print(f.__name__, f"{best*1e3:.2f} ms")
