import pickle, sys, time
from perfdoctor.analysis.metrics import analyze
from perfdoctor.names import families
p = pickle.load(open(sys.argv[1], "rb"))
t = time.process_time(); a = analyze(p); c = time.process_time() - t
print(f"analyze {1000*c:.1f} ms; families.family cache {families.family.cache_info()}")
