# the Profile's tables of a trace: new tree vs base tree, compared exactly (values, dtypes, index, columns, block layout)
import pickle, sys
from pathlib import Path
from perfdoctor.collectors import torch_profiler
p = torch_profiler.load(Path(sys.argv[1]), processes=int(sys.argv[3]) if len(sys.argv) > 3 else None)
out = {}
for t in ("activities", "calls", "ranges", "ops"):
    df = getattr(p, t)
    out[t] = (df, str(df.columns.dtype), type(df.index).__name__, [(str(b.dtype), list(b.mgr_locs.as_array), b.values.flags["C_CONTIGUOUS"]) for b in df._mgr.blocks])
pickle.dump(out, open(sys.argv[2], "wb"))
