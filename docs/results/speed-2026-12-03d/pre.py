import time, sys, os
t0 = time.perf_counter(); c0 = time.process_time()
M = [("start", 0, c0)]
def m(w): M.append((w, time.perf_counter() - t0, time.process_time()))
import perfdoctor.cli; m("perfdoctor.cli")
from perfdoctor.cli import early; m("cli.early")
os.environ["OPENBLAS_NUM_THREADS"] = "1"; import numpy; del os.environ["OPENBLAS_NUM_THREADS"]; m("numpy")
import perfdoctor.pipeline; m("pipeline")
from perfdoctor.collectors import torch_profiler; m("torch_profiler(msgspec,kineto_events)")
from perfdoctor.io import read_maybe_gzip
raw = read_maybe_gzip(sys.argv[1]); m("mmap")
from perfdoctor.collectors import kineto_events as ke
sl = ke.array_slices(raw, "traceEvents"); m("array_slices")
sp = sl.spans(ke.decode_spans(len(raw), 2)); m("spans")
o = ke.time_origin(raw); m("time_origin")
print(" | ".join(f"{w} {1000*t:.1f}/{1000*c:.1f}" for w, t, c in M))
