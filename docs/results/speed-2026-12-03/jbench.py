import sys, time, pickle, gc
from pathlib import Path
from perfdoctor.collectors import torch_profiler, kineto_tables
from perfdoctor.collectors.kineto_events import Events
path = Path(sys.argv[1])
L = torch_profiler.Loading(path, 1)
doc, events = L._sliced.finish(L._raw) if L._sliced is not None else (None, None)
spans = [e.columns() for e in events]
blob = pickle.dumps(spans)
gc.disable(); import proto
for fn_name in sys.argv[2:]:
    fn = eval(fn_name)
    best = 9
    for i in range(9):
        s = pickle.loads(blob)
        t = time.perf_counter(); out = fn(s); best = min(best, time.perf_counter() - t)
    print(fn_name, f"{best*1e3:.2f} ms")
import proto
a = kineto_tables.joined(pickle.loads(blob)); b = proto.joined2(pickle.loads(blob))
for x, y in zip(a, b):
    pd = __import__("pandas")
    pd.testing.assert_frame_equal(x, y, check_exact=True)
    assert list(x.dtypes) == list(y.dtypes) and x.columns.dtype == y.columns.dtype, (x.dtypes, y.dtypes)
print("equal")
