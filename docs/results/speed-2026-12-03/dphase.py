"""Per phase, CPU of every span in one process (least and median of N passes): msgspec decode of the slices, Events.add, Events.columns, pickle.dumps, pickle.loads."""
import sys, time, pickle, statistics
from perfdoctor.collectors import kineto_events as ke
raw = open(sys.argv[1],'rb').read()
sliced = ke.array_slices(raw, "traceEvents")
origin = ke.time_origin(raw)
spans = sliced.spans(ke.decode_spans(len(raw), 2))
import gc; gc.disable()
pt = time.process_time
acc = {k: [] for k in ("decode", "add", "columns", "dumps", "loads")}
for rep in range(int(sys.argv[2])):
    t = dict.fromkeys(acc, 0.0)
    for sp in spans:
        e = ke.Events(origin)
        it = sliced.decoded(ke.events_decoder, span=sp)
        while True:
            a = pt()
            chunk = next(it, None)
            b = pt(); t["decode"] += b - a
            if chunk is None: break
            e.add(chunk); del chunk
            t["add"] += pt() - b
        e.end = sliced.end
        a = pt(); e.columns(); b = pt(); p = pickle.dumps(e, protocol=pickle.HIGHEST_PROTOCOL); c = pt(); pickle.loads(p); d = pt()
        t["columns"] += b - a; t["dumps"] += c - b; t["loads"] += d - c
    for k in acc: acc[k].append(t[k])
print("  ".join(f"{k} {min(v)*1e3:.1f}/{statistics.median(v)*1e3:.1f}" for k, v in acc.items()), " (ms least/median)")
