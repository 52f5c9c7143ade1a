"""In one process, forward by forward in random order: what each primitive of the light pass costs inside
a host-paced forward (ViT-small b1 on CUDA; ViT-tiny on the CPU). Each state is a __call__ on the model's class."""
import sys, time, random, statistics, types, json, os, threading
import torch
sys.path.insert(0, "tests/programs/real"); sys.path.insert(0, "scratch/old"); sys.path.insert(0, "bench")
from image_infer import VisionTransformer, vit_small
from perfdoctor.record.bootstrap.steps import ModuleSteps as New
from perfdoctor.record.bootstrap.clock import Timer as NewTimer
from perfdoctor_old.record.bootstrap.steps import ModuleSteps as Old
from perfdoctor_old.record.bootstrap.clock import Timer as OldTimer
from light_pass import timer as bench_timer
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
with torch.inference_mode():
    m(x); sync()
V = {}
def narrowed(label, Steps, T):
    steps = Steps(types.SimpleNamespace(timer=T))
    with torch.inference_mode():
        for _ in range(7):
            m(x)
    assert not steps.scouting and steps.own
    V[label] = cls.__dict__["__call__"]
    del cls.__call__
    steps.uninstall()
narrowed("old events", Old, OldTimer())
narrowed("new events", New, NewTimer())
narrowed("new host", New, bench_timer("host clock"))
def thin(module, *a, **k):
    return inner(module, *a, **k)
clock = time.perf_counter_ns
def clocks(module, *a, **k):
    clock()
    try: return inner(module, *a, **k)
    finally: clock()
fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
def pread1(module, *a, **k):
    os.pread(fd, 64, 0)
    return inner(module, *a, **k)
sink = []
def appends(module, *a, **k):
    i = threading.get_ident(); sink.append(i); sink.append(i); sink.append(i); sink.append(i)
    try: return inner(module, *a, **k)
    finally: sink.append(i); sink.append(i); sink.append(i)
V.update(pread1=pread1)
if dev == "cuda":
    from perfdoctor.record.bootstrap.clock import stream_ops
    cap = torch._C._cuda_isCurrentStreamCapturing
    stream, rec, query = stream_ops(torch)
    def queries(module, *a, **k):
        cap(); query(stream())
        try: return inner(module, *a, **k)
        finally: cap(); query(stream())
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
    def records(module, *a, **k):
        rec(ev[0], stream())
        try: return inner(module, *a, **k)
        finally: rec(ev[1], stream())
    def caps(module, *a, **k):
        cap()
        try: return inner(module, *a, **k)
        finally: cap()
    def queries_only(module, *a, **k):
        query(stream())
        try: return inner(module, *a, **k)
        finally: query(stream())
    def streams(module, *a, **k):
        stream()
        try: return inner(module, *a, **k)
        finally: stream()
    V.update(queries=queries, records=records, caps=caps, queries_only=queries_only, streams=streams)
    # the shipped edge without its capture check
    from perfdoctor.record.bootstrap import clock as pdclock
    def nocap_timer(delay):
        t = NewTimer(); t.run_queue.ok = delay
        def mark(host_ns):
            c = t.clock or t.gpu_clock()
            on = stream()
            if query(on): return host_ns
            e = c.pool.pop() if c.pool else torch.cuda.Event(enable_timing=True)
            rec(e, on); return e
        t.mark = mark
        return t
    narrowed("new no cap", New, nocap_timer(True))
    narrowed("new no cap no delay", New, nocap_timer(False))
    nd = NewTimer(); nd.run_queue.ok = False
    narrowed("new no delay", New, nd)
states = ["plain", *V]
def state(s):
    if s == "plain":
        if "__call__" in cls.__dict__: del cls.__call__
    else:
        cls.__call__ = V[s]
t = {s: [] for s in states}
with torch.inference_mode():
    for _ in range(20):
        for s in states: state(s); m(x)
    sync()
    for r in range(rounds):
        for s in random.sample(states, len(states)):
            state(s)
            t0 = time.perf_counter_ns(); m(x); t[s].append(time.perf_counter_ns() - t0)
            sync()  # each forward from an idle GPU, as the first of --alternate's pairs
        if r % 128 == 0:
            pass
    state("plain")
    sink.clear()
plain = statistics.median(t["plain"]) / 1e3
out = {"device": dev, "tree": tree, "rounds": rounds, "plain_us": plain, "states": {}}
print(f"{tree} {dev}, {rounds} rounds: plain {plain:.1f} us (median); each state - plain, mean ± se, median (us)")
for s in V:
    d = [(a - b) / 1e3 for a, b in zip(t[s], t["plain"])]
    mean, se, med = statistics.fmean(d), statistics.stdev(d) / len(d) ** .5, statistics.median(d)
    out["states"][s] = {"mean_us": mean, "stderr_us": se, "median_us": med}
    print(f"  {s:18} {mean:+7.1f} ± {se:4.1f}  median {med:+7.1f}  ({mean / plain:+.2%})")
if len(sys.argv) > 4:
    open(sys.argv[4], "w").write(json.dumps(out, indent=1))
