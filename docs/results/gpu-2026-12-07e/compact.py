"""Item 6 at a loop's cadence: the shipped narrowed wrapper against a compact one that keeps
the same facts (host start and end, thread at each edge, a run-queue read by the shipped rule,
the instance, call site, grad mode and input-window check, the GPU clock's edge at start and
end) but writes one tuple per edge with everything inline (no lane closures, no separate lists).
In one process, blocks of K forwards in random order (no synchronize inside a block, one after
it, untimed), each forward timed on the host; each state's mean minus plain's.
    python compact.py cuda|cpu vit_small|resnet50|vit_tiny ROUNDS K [out.json]"""
import json, random, statistics, sys, threading, time, types, weakref
import torch
sys.path.insert(0, "tests/programs/real"); sys.path.insert(0, "bench")
from image_infer import VisionTransformer, resnet50, vit_small
from light_pass import timer as bench_timer
from perfdoctor.record.bootstrap.clock import RunQueue, Timer
from perfdoctor.record.bootstrap.steps import ModuleSteps, _Depth, Instances, Sites, Windows, is_compiling
dev, tree, rounds, block = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
if dev == "cpu":
    torch.set_num_threads(1)
if tree == "vit_tiny":
    m, x = VisionTransformer(img_size=16, patch_size=16, embed_dim=16, depth=12, num_heads=2, num_classes=10), torch.randn(1, 3, 16, 16)
elif tree == "resnet50":
    m, x = resnet50(), torch.randn(1, 3, 224, 224)
else:
    m, x = vit_small(img_size=224), torch.randn(1, 3, 224, 224)
m, x = m.to(dev).eval(), x.to(dev)
cls, inner = type(m), torch.nn.Module.__call__
sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
with torch.inference_mode():
    m(x)
sync()
V = {}
for label, made in (("shipped", Timer), ("shipped host", lambda: bench_timer("host clock"))):
    steps = ModuleSteps(types.SimpleNamespace(timer=made()))
    with torch.inference_mode():
        for _ in range(ModuleSteps.SCOUT_CALLS + 2):
            m(x)
    assert not steps.scouting and steps.own
    V[label] = cls.__dict__["__call__"]
    del cls.__call__
    steps.uninstall()


def compact(events: bool):
    local, compiling = _Depth(), is_compiling(torch)
    inst, sites, wins = Instances(), Sites(), Windows(torch.Tensor)
    ordinals, add, site_of, site, frame, grad_enabled, window = inst.ordinals, inst.add, sites.ordinals, sites.of, sys._getframe, torch.is_grad_enabled, wins.of
    timer = Timer()
    clock_ = timer.clock or timer.gpu_clock() if events else None
    edge = clock_.edge if clock_ is not None else (lambda ns: ns)
    queue = RunQueue(); read = queue.read; every, gap = queue.EVERY_NS, queue.GAP_NS
    clock, ident_of = time.perf_counter_ns, threading.get_ident
    starts, ends, read_at = [], [], {}

    def __call__(module, *args, **kwargs):
        if local.depth or type(module) is not cls or compiling():
            return inner(module, *args, **kwargs)
        f = frame(1)
        grad = grad_enabled()
        now = clock()
        ident = ident_of()
        delay = None
        if now - read_at.get(ident, now - every) >= every or (ends and now - ends[-1][0] >= gap):
            read_at[ident] = now
            delay = read(ident)
        starts.append((now, ident, delay, edge(now), ordinals.get(id(module)) or add(module),
                       site_of.get((id(f.f_code), f.f_lasti)) or site(f), grad, window("s", args, grad)))
        local.depth = 1
        try:
            return inner(module, *args, **kwargs)
        finally:
            local.depth = 0
            now = clock()
            ends.append((now, edge(now), ident_of()))
    return __call__


V["compact host"] = compact(False)
if dev == "cuda":
    V["compact"] = compact(True)
states = ["plain", *V]


def state(s):
    if s == "plain":
        if "__call__" in cls.__dict__:
            del cls.__call__
    else:
        cls.__call__ = V[s]


t = {s: [] for s in states}
with torch.inference_mode():
    for _ in range(10):
        for s in states:
            state(s); m(x)
    sync()
    for r in range(rounds):
        for s in random.sample(states, len(states)):
            state(s)
            took = 0
            for _ in range(block):
                t0 = time.perf_counter_ns(); m(x); took += time.perf_counter_ns() - t0
            t[s].append(took / block)
            sync()
    state("plain")
plain = statistics.median(t["plain"]) / 1e3
out = {"device": dev, "tree": tree, "rounds": rounds, "block": block, "plain_us": plain, "states": {}}
print(f"{tree} {dev}, {rounds} rounds of {block}: plain {plain:.1f} us; each state - plain, mean ± se, median (us)")
for s in V:
    d = [(a - b) / 1e3 for a, b in zip(t[s], t["plain"])]
    mean, se, med = statistics.fmean(d), statistics.stdev(d) / len(d) ** .5, statistics.median(d)
    out["states"][s] = {"mean_us": mean, "stderr_us": se, "median_us": med}
    print(f"  {s:14} {mean:+7.1f} ± {se:4.1f}  median {med:+7.1f}  ({mean / plain:+.2%} ± {se / plain:.2%})")
if len(sys.argv) > 5:
    open(sys.argv[5], "w").write(json.dumps(out, indent=1))
