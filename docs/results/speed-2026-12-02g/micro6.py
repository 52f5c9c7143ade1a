import sys, time, numpy as np
from operator import attrgetter
from perfdoctor.collectors import kineto_events as ke
import gc; gc.disable()
raw = open(sys.argv[1],'rb').read()
sliced = ke.array_slices(raw, "traceEvents")
allevents = []
for sp in sliced.spans(9):
    ev = ke._decode_span(sliced, sp, ke.time_origin(raw))
    taken = ev._joined(ev.ops, "cpu_op")
    allevents.append(taken.events)
    ev.parts = {}; ev.ops = []
F = tuple(ke.SHAPE_COLUMNS.values())
get3 = attrgetter(*F)
ABSENT = (ke._NO_RAW,) * 3
def cur(events):
    args = [a if a is not None else ke._NO_ARGS for a in map(ke._ARGS, events)]
    return ke._shapes(args)
def tup(events):
    args = [a if a is not None else ke._NO_ARGS for a in map(ke._ARGS, events)]
    raws = list(map(get3, args))
    if raws.count(ABSENT) == len(raws):
        return {col: np.full(len(args), b"", dtype=object) for col in ke.SHAPE_COLUMNS}
    return None
def run(f):
    t = time.process_time()
    for e in allevents: f(e)
    return time.process_time() - t
for r in range(3):
    print("current %.1f ms   tuples %.1f ms" % (min(run(cur) for _ in range(5))*1e3, min(run(tup) for _ in range(5))*1e3))
