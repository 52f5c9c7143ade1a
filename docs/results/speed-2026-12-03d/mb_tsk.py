import pickle, sys, time, resource
from perfdoctor.analysis.metrics import analyze
from perfdoctor.rules.evidence import top_short_kernels
p = pickle.load(open(sys.argv[1], "rb")); a = analyze(p); a.timeline.step_kernels
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt; t = time.process_time(); ev = top_short_kernels(a); c = time.process_time() - t
print(f"top_short_kernels {1000*c:.2f} ms {resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0} faults", len(ev.rows))
