"""In one process: plain vs the old ModuleSteps (HEAD 56b59a8, scratch/old) vs the new, narrowed on the same model,
forward by forward in random order (the bench's --alternate method, three states)."""
import sys, time, random, statistics, types, json
import torch
sys.path.insert(0, "tests/programs/real"); sys.path.insert(0, "scratch/old")
from image_infer import VisionTransformer, vit_small
from perfdoctor.record.bootstrap.steps import ModuleSteps as New
from perfdoctor.record.bootstrap.clock import Timer as NewTimer
from perfdoctor_old.record.bootstrap.steps import ModuleSteps as Old
from perfdoctor_old.record.bootstrap.clock import Timer as OldTimer
dev, tree, pairs = sys.argv[1], sys.argv[2], int(sys.argv[3])
if dev == "cpu":
    torch.set_num_threads(1)
if tree == "vit_tiny":
    m, x = VisionTransformer(img_size=16, patch_size=16, embed_dim=16, depth=12, num_heads=2, num_classes=10), torch.randn(1, 3, 16, 16)
else:
    m, x = vit_small(img_size=224), torch.randn(1, 3, 224, 224)
m, x = m.to(dev).eval(), x.to(dev)
cls = type(m)
sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
calls = {}
with torch.inference_mode():
    for label, Steps, T in (("old", Old, OldTimer), ("new", New, NewTimer)):
        steps = Steps(types.SimpleNamespace(timer=T()))
        for _ in range(7):
            m(x)
        assert not steps.scouting and steps.own
        calls[label] = (steps, cls.__dict__["__call__"])
        del cls.__call__
        steps.uninstall()  # torch's __call__ back; our closure kept
    def state(s):
        if s == "plain":
            if "__call__" in cls.__dict__: del cls.__call__
        else:
            cls.__call__ = calls[s][1]
    states = ["plain", "old", "new"]
    for _ in range(30):
        for s in states: state(s); m(x)
    sync()
    t = {s: [] for s in states}
    for _ in range(pairs):
        for s in random.sample(states, 3):
            state(s)
            t0 = time.perf_counter_ns(); m(x); t[s].append(time.perf_counter_ns() - t0)
        sync()
    state("plain")
plain = statistics.median(t["plain"]) / 1e3
out = {"device": dev, "tree": tree, "pairs": pairs, "plain_us": plain}
for s in ("old", "new"):
    d = [(a - b) / 1e3 for a, b in zip(t[s], t["plain"])]
    out[s] = (statistics.fmean(d), statistics.stdev(d) / len(d) ** .5)
d = [(a - b) / 1e3 for a, b in zip(t["new"], t["old"])]
out["new-old"] = (statistics.fmean(d), statistics.stdev(d) / len(d) ** .5)
n_new = sum(calls["new"][0].times[0].count(n) for n in calls["new"][0].classes)
print(f"{tree} {dev}: plain {plain:.1f} us; old {out['old'][0]:+.1f} ± {out['old'][1]:.1f} ({out['old'][0]/plain:+.2%}); "
      f"new {out['new'][0]:+.1f} ± {out['new'][1]:.1f} ({out['new'][0]/plain:+.2%}); new - old {out['new-old'][0]:+.1f} ± {out['new-old'][1]:.1f}; new steps timed {n_new}")
print(json.dumps(out))
