import pickle, sys, time
from perfdoctor.analysis.metrics import analyze
from perfdoctor.analysis import comms
p = pickle.load(open(sys.argv[1], "rb")); a = analyze(p)
best = 9
for i in range(7):
    t = time.process_time(); per = comms.step_metrics(p, a.steps.table, a.steps.activity_step); best = min(best, time.process_time() - t)
print(f"step_metrics least of 7 {1000*best:.2f} ms", comms.summary(per))
