# Events.add and columns() over every chunk of a trace, one process: least of N rounds (ms)
import sys, time, gc, pickle
gc.disable()
from perfdoctor.io import read_maybe_gzip
from perfdoctor.collectors import kineto_events as ke
from perfdoctor.collectors.json_chunks import array_slices
raw = read_maybe_gzip(sys.argv[1])
sliced = array_slices(raw, "traceEvents")
spans = sliced.spans(ke.decode_spans(len(raw), 2))
origin = ke.time_origin(raw)
chunks = [list(sliced.decoded(ke.events_decoder, span=s)) for s in spans]
R = int(sys.argv[2]) if len(sys.argv) > 2 else 5
best = {}
for r in range(R):
    evs = []
    t0 = time.perf_counter()
    for span in chunks:
        e = ke.Events(origin)
        for c in span: e.add(c)
        evs.append(e)
    t1 = time.perf_counter()
    tabs = [e.columns() for e in evs]
    t2 = time.perf_counter()
    ps = [pickle.dumps(e, protocol=pickle.HIGHEST_PROTOCOL) for e in evs]
    t3 = time.perf_counter()
    [pickle.loads(p) for p in ps]
    t4 = time.perf_counter()
    for k, v in (("add", t1 - t0), ("columns", t2 - t1), ("dumps", t3 - t2), ("loads", t4 - t3)):
        best[k] = min(best.get(k, 9), v)
print(" ".join(f"{k} {1000*v:.1f}" for k, v in best.items()), "ms (least of", R, ") pickled MB", round(sum(map(len, ps))/1e6, 1))
if len(sys.argv) > 3:
    import cProfile, pstats
    evs = []
    for span in chunks:
        e = ke.Events(origin)
        for c in span: e.add(c)
        evs.append(e)
    pr = cProfile.Profile(); pr.enable()
    [e.columns() for e in evs]
    pr.disable(); pstats.Stats(pr).sort_stats(sys.argv[3]).print_stats(40)
