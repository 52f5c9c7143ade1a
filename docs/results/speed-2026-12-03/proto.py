import numpy as np, pandas as pd
from pandas.api.internals import create_dataframe_from_blocks
from perfdoctor.collectors.kineto_tables import *
from perfdoctor.collectors import kineto_tables as kt
from perfdoctor.schema import ACTIVITY_COLUMNS, CALL_COLUMNS, RANGE_COLUMNS, OP_COLUMNS

def table(columns, parts, order=None, extra=None):
    names = list(columns)
    n = sum(len(p[names[0] if names[0] in p else next(iter(p))]) for p in parts) if parts else 0
    byd = {}
    for i, (c, d) in enumerate(columns.items()):
        byd.setdefault(d, []).append(i)
    blocks = []
    for d, idx in byd.items():
        b = np.empty((len(idx), n), dtype=d)
        for r, i in enumerate(idx):
            c = names[i]
            if extra is not None and c in extra:
                b[r] = extra[c]; continue
            if order is None:
                np.concatenate([p[c] for p in parts], out=b[r])
            else:
                np.take(np.concatenate([p[c] for p in parts]), order, out=b[r])
        blocks.append((b, np.array(idx)))
    return create_dataframe_from_blocks(blocks, index=pd.RangeIndex(n), columns=pd.Index(names))

def joined2(spans):
    parts = [s.activities[i] for i in range(len(ACTIVITY_CATEGORIES)) for s in spans]
    start = np.concatenate([p["start_ns"] for p in parts])
    order = np.argsort(start, kind="stable")
    activities = table(ACTIVITY_COLUMNS, parts, order)
    calls = [s.calls[i] for i in range(len(CALL_CATEGORIES)) for s in spans]
    ranges = [s.ranges[i] for i in range(3) for s in spans]
    ops = [s.ops for s in spans]
    hosts = calls + ranges + ops
    tids = kt._thread_ids(np.concatenate([h[1] for h in hosts]), np.concatenate([h[2] for h in hosts]))
    n_calls, n_ranges = (sum(len(h[1]) for h in part) for part in (calls, ranges))
    return (activities, table(CALL_COLUMNS, [h[0] for h in calls], extra={"tid": tids[:n_calls]}),
            table(RANGE_COLUMNS, [h[0] for h in ranges], extra={"tid": tids[n_calls:n_calls+n_ranges]}),
            table(OP_COLUMNS, [h[0] for h in ops], extra={"tid": tids[n_calls+n_ranges:]}))
