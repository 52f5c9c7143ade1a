# timeline.build cold (first call in a fresh process, after find_steps), and warm (least of 5)
import pickle, sys, time, numpy as np, resource
from perfdoctor.analysis import timeline as tl
from perfdoctor.analysis.steps import find_steps
p = pickle.load(open(sys.argv[1], "rb"))
steps = find_steps(p)
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
t0 = time.process_time(); tl.build(p, steps); cold = time.process_time() - t0
f1 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
warm = min((lambda t: (tl.build(p, steps), time.process_time() - t)[1])(time.process_time()) for _ in range(5))
print(f"cold {1000*cold:.1f} ms ({f1-f0} faults) warm {1000*warm:.1f} ms")
