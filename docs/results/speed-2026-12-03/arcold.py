"""automatic_ranges' first call (cold, as in `perfdoctor analyze`) on a loaded profile, one fresh process."""
import sys, time
from perfdoctor.collectors import torch_profiler
from perfdoctor.analysis import steps as S
p = torch_profiler.load(sys.argv[1])
t = time.process_time(); S.automatic_ranges(p); print(f"{(time.process_time() - t)*1e3:.2f}")
