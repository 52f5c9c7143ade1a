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
idxs = [np.flatnonzero(np.random.default_rng(0).random(len(c)) < 0.5) for c in chunks]
def comp():
    for c, idx in zip(chunks, idxs): [c[i] for i in idx.tolist()]
def mp():
    for c, idx in zip(chunks, idxs): list(map(c.__getitem__, idx.tolist()))
from operator import itemgetter
def ig():
    for c, idx in zip(chunks, idxs): list(itemgetter(*idx.tolist())(c))
def objarr():
    for c, idx in zip(chunks, idxs):
        a = np.empty(len(c), dtype=object); a[:] = c; a[idx].tolist()
for r in range(3):
    for f in (comp, mp, ig, objarr):
        best = min((lambda t: (f(), time.perf_counter() - t)[1])(time.perf_counter()) for _ in range(7))
        print(f.__name__, f"{best*1e3:.2f} ms")
