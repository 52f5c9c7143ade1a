"""Item 6, taken apart on the shipped narrowed wrapper: in one process, forward by forward in
random order, a synchronize after each forward outside the timed span, each state a __call__ on
the model's class. "shipped host" is ModuleSteps.timed_call with the bench's no-event Timer;
"lane" to "+window" rebuild it piece by piece (the same lane, the same Instances, Sites,
Windows objects), so each step's difference is what that piece costs inside the forward.
    python parts.py cuda|cpu vit_small|vit_tiny ROUNDS [out.json]"""
import sys, time, random, statistics, types, json
import torch
sys.path.insert(0, "tests/programs/real"); sys.path.insert(0, "bench")
from image_infer import VisionTransformer, vit_small
from perfdoctor.record.bootstrap.steps import ModuleSteps, is_compiling, _Depth, Instances, Sites, Windows
from light_pass import timer as bench_timer
from perfdoctor.record.bootstrap.clock import StepTimes
dev, tree, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
if dev == "cpu":
    torch.set_num_threads(1)
if tree == "vit_tiny":
    m, x = VisionTransformer(img_size=16, patch_size=16, embed_dim=16, depth=12, num_heads=2, num_classes=10), torch.randn(1, 3, 16, 16)
else:
    m, x = vit_small(img_size=224), torch.randn(1, 3, 224, 224)
m, x = m.to(dev).eval(), x.to(dev)
cls = type(m)
inner = torch.nn.Module.__call__
sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
V = {}
for label, kind in (("shipped events", "events"), ("shipped host", "host clock")):
    steps = ModuleSteps(types.SimpleNamespace(timer=bench_timer(kind)))
    with torch.inference_mode():
        for _ in range(ModuleSteps.SCOUT_CALLS + 2):
            m(x)
    assert not steps.scouting and steps.own
    V[label] = cls.__dict__["__call__"]
    del cls.__call__
    steps.uninstall()


def build(instance, site, grad, window, check=True):
    times = StepTimes(bench_timer("host clock"))
    start, end = times.lane("step")
    local, compiling = _Depth(), is_compiling(torch)
    inst, sites, wins = Instances(), Sites(), Windows(torch.Tensor)
    ordinals, add, of, frame, gen, wof = inst.ordinals, inst.add, sites.of, sys._getframe, torch.is_grad_enabled, wins.of
    called, sited, graded, windowed = [], [], [], []

    def __call__(module, *args, **kwargs):
        if check and (local.depth or type(module) is not cls or compiling()):
            return inner(module, *args, **kwargs)
        if instance:
            called.append(ordinals.get(id(module)) or add(module))
        if site:
            sited.append(of(frame(1)))
        if grad:
            graded.append(gen())
        if window:
            windowed.append(wof("step", args, graded[-1]))
        start()
        local.depth = 1
        try:
            return inner(module, *args, **kwargs)
        finally:
            local.depth = 0
            end()
    return __call__


V["lane"] = build(False, False, False, False, check=False)
V["+checks"] = build(False, False, False, False)
V["+instance"] = build(True, False, False, False)
V["+site"] = build(True, True, False, False)
V["+grad"] = build(True, True, True, False)
V["+window"] = build(True, True, True, True)
states = ["plain", *V]


def state(s):
    if s == "plain":
        if "__call__" in cls.__dict__:
            del cls.__call__
    else:
        cls.__call__ = V[s]


t = {s: [] for s in states}
with torch.inference_mode():
    for _ in range(20):
        for s in states:
            state(s); m(x)
    sync()
    for r in range(rounds):
        for s in random.sample(states, len(states)):
            state(s)
            t0 = time.perf_counter_ns(); m(x); t[s].append(time.perf_counter_ns() - t0)
            sync()
    state("plain")
plain = statistics.median(t["plain"]) / 1e3
out = {"device": dev, "tree": tree, "rounds": rounds, "plain_us": plain, "states": {}}
print(f"{tree} {dev}, {rounds} rounds: plain {plain:.1f} us (median); each state - plain, mean ± se, median (us)")
for s in V:
    d = [(a - b) / 1e3 for a, b in zip(t[s], t["plain"])]
    mean, se, med = statistics.fmean(d), statistics.stdev(d) / len(d) ** .5, statistics.median(d)
    out["states"][s] = {"mean_us": mean, "stderr_us": se, "median_us": med}
    print(f"  {s:16} {mean:+7.1f} ± {se:4.1f}  median {med:+7.1f}  ({mean / plain:+.2%})")
if len(sys.argv) > 4:
    open(sys.argv[4], "w").write(json.dumps(out, indent=1))
