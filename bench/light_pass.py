"""How faithful is `perfdoctor run`'s light pass? One run, one table.

    python bench/light_pass.py [--trials 5] [--steps 200] [--json light_pass.json]

The program is tests/programs/gpu_decode.py, which times its own steps (perf_counter around
each step, after its synchronize). For each size (GPU-bound "gpu", DRAM-heavy but host-paced
"big", launch-bound "small") and trial, in a shuffled order so drift hits every mode alike, three processes:
  - `alone`: the program with no perfdoctor at all;
  - `light`: `perfdoctor run --collect torch` (without nvml selected the light pass has no
    NVML sampler beside it);
  - `light+nvml`: `perfdoctor run --collect nvml` (the light pass samples NVML and GPM, as
    it does in a default run since issue 19).
Per process the median step time after --warmup steps: the light pass's own measurement and
the program's own timer in the same process. The table gives the median over trials and the
range, and each ratio against `alone`, so the light pass's error (light vs same process) and
its perturbation of the program (same process vs alone) show separately.

Every process is pinned to the GPU's local CPUs (NVML's CPU affinity; `--no-pin` to skip), so
on a two-socket host no process launches from the far socket. That is not all the noise: on
the H200 test machine (one NUMA node) two processes of the same host-paced loop, no
perfdoctor in either, differed by up to 1.65x. Only the GPU-bound size gives a step time that
is the same from process to process, so only there does light vs alone measure what the light
pass costs the program; light vs own timer (same process) measures its accuracy everywhere.
Needs a CUDA GPU and NVML.

The module-call step (issue 29 item 6: the light pass slowed ResNet-50 at batch 1 by 48 % on
the H200), CPU or GPU, no NVML:

    python bench/light_pass.py --calls [--device cpu]     # per module call, in one process
    python bench/light_pass.py --alternate 2000 [--device cpu] [--trees vit_small]
    python bench/light_pass.py --edges 2000 [--device cpu]
    python bench/light_pass.py --program [--device cpu] [--pairs 20]

`--calls`: tests/programs/real/image_infer.py's models (ResNet-50, ViT-small; tiny inputs
on the CPU) and a 211-module tree of no-op modules, each run in rounds, in one process,
plain / under the light pass's real ModuleSteps kept scouting (the wrapper before issue 29:
every module call through perfdoctor) / under ModuleSteps after its scout (only the step's
class through perfdoctor) / the same without CUDA events ("host clock": the wrapper alone; its
difference from narrowed is what the step's events cost). On CUDA it first times the event
operations: a record into a new event, into a pooled one, a settle. One process and interleaved rounds, so what differs between
processes (±25 % on the H200 for host-paced programs) cancels; the table gives ns per module
step over plain (and as a share of plain), the median over rounds of each round's difference.
`--alternate PAIRS`: the shipped light pass against plain forward by forward, in one process
(``alternating_costs`` says why; `--block K`: K forwards each way, at a loop's cadence): the mean difference per step ± its standard error, which
resolves tenths of a percent in a few thousand forwards where rounds seconds apart did not.
`--edges STEPS`: where a synchronous loop's own timer and the light pass's span part
(``edge_costs``): the timer's start to the span's start, the span's end to the timer's end.
`--program`: image_infer.py at batch 1 alone and under `perfdoctor run --collect nvml` (the
light pass only), in pairs taken back to back (alone then light, light then alone in turn, so
drift hits both alike); the ratio of the program's own ms/step per pair, median and quartiles
over pairs.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "tests" / "programs" / "gpu_decode.py"
MODES = {"alone": None, "light": "torch", "light+nvml": "nvml"}
SIZES = ("gpu", "big", "small")  # tests/programs/gpu_decode.py --size


def one_process(mode: str, size: str, steps: int, warmup: int, work: Path) -> dict[str, float]:
    """Median step ms of one process: the program's own timer, and the light pass's when run under perfdoctor."""
    timings = work / f"{mode}-{size}-{random.random():.9f}.jsonl"
    program = [str(PROGRAM), "--size", size, "--steps", str(steps), "--timings", str(timings)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    collect = MODES[mode]
    if collect is None:
        cmd = [sys.executable, *program]
    else:
        out = work / "runs"
        cmd = [sys.executable, "-m", "perfdoctor.record.run", "--quiet", "--out", str(out), "--collect", collect,
               "--warmup", str(warmup), "--steps", "0", *program]
    subprocess.run(cmd, check=True, env=env, timeout=300, capture_output=True)
    own = json.loads(timings.read_text().splitlines()[0])["step_ms"][warmup:]  # the first line: the light pass's run
    row = {"own_ms": statistics.median(own)}
    if collect is not None:
        bundle = sorted(out.iterdir(), key=lambda p: p.stat().st_mtime)[-1]
        light = json.loads((bundle / "manifest.json").read_text())["light_pass"]
        row["light_ms"] = statistics.median(light["step_latency_ms"])
        row["nvml_sampled"] = light["nvml_sampled"]
    return row


REAL = ROOT / "tests" / "programs" / "real"


# plain: no perfdoctor; scouting: every module call through the wrapper (the code before
# issue 29); narrowed: as shipped; host clock: narrowed, its steps timed without CUDA events.
CALL_MODES = ("plain", "scouting", "narrowed", "host clock")


TREES = ("noop tree", "resnet50", "vit_small")  # call_models' labels


def call_models(device: str, only: list[str]) -> dict:
    """The --calls / --alternate module trees, by label: (model on `device`, input)."""
    import torch

    sys.path.insert(0, str(REAL))
    from image_infer import resnet50, vit_small

    class Noop(torch.nn.Module):
        def forward(self, x):
            return x

    class Tree(torch.nn.Module):  # 1 + 10 + 200 modules: the depths of a real model
        def __init__(self) -> None:
            super().__init__()
            self.parts = torch.nn.ModuleList(torch.nn.Sequential(*(Noop() for _ in range(20))) for _ in range(10))

        def forward(self, x):
            for part in self.parts:
                x = part(x)
            return x

    size = 224 if device == "cuda" else 32
    if device == "cpu":
        torch.set_num_threads(1)  # a host-paced program: one thread, as a GPU program's host side
    models = {TREES[0]: (Tree(), torch.zeros(1)),
              "resnet50": (resnet50(), torch.randn(1, 3, size, size)),
              "vit_small": (vit_small(img_size=size), torch.randn(1, 3, size, size))}
    return {k: (m.to(device).eval(), x.to(device)) for k, (m, x) in models.items() if k in only}


def device_sync(device: str):
    """``torch.cuda.synchronize`` on a GPU, nothing on the CPU (each timed forward ends on it)."""
    import torch

    return torch.cuda.synchronize if device == "cuda" else (lambda: None)


def timer(kind: str):
    """A light-pass Timer: "events" (as shipped: a CUDA event at each step's start and end,
    unless the stream is idle there, on one step in SPARSE_EVERY once the lags are steady),
    "dense" (the same on every step: the Timer before 2026-12-07, session 37), "busy end" (an event at every end: the Timer of
    2026-12-02 21:30 UTC to 2026-12-03 09:30 UTC), "two events" (an event at both edges,
    always: the Timer before that), "end event" (the host time at the start, an event at the
    end), "host clock" (no events: what the bookkeeping costs alone), "methods" (the shipped
    edge through a method per operation, as the Timer before 2026-12-04). A kind ending in
    " no delay" is that Timer without the run-queue read at each start (RunQueue's
    ``pread``: 0.89 us alone on the H200, more inside a forward that has evicted its path)."""
    from perfdoctor.record.bootstrap.clock import Timer

    delay = not kind.endswith(" no delay")
    kind = kind.removesuffix(" no delay")

    made = Timer()
    made.sampling = kind == "events"  # the others measure each step as their Timer did
    if kind not in ("events", "dense"):
        def mark(host_ns: int):  # Timer.mark, the shipped edge included, replaced
            start = sys._getframe(1).f_code.co_name == "start"  # StepTimes.start or .end (~0.1 us)
            if kind == "host clock" or (kind == "end event" and start):
                return host_ns
            always = kind in ("two events", "end event") or (kind == "busy end" and not start)
            clock = made.clock or made.gpu_clock()
            if clock is None:
                return host_ns
            if kind == "methods":  # the shipped edge through GpuClock's methods, as before 2026-12-04
                return "captured" if clock.capturing() else host_ns if clock.idle() else clock.mark()
            if always and not clock.capturing():
                return clock.mark()
            return clock.edge(host_ns)

        made.mark = mark
    made.run_queue.ok = delay
    return made


def module_call_costs(device: str, rounds: int, only: list[str]) -> list[dict]:
    """ns per module call over plain, scouting and narrowed, per model (see the docstring)."""
    import types

    import torch

    from perfdoctor.record.bootstrap.steps import ModuleSteps

    sync = device_sync(device)
    out = []
    with torch.inference_mode():
        for label, (model, x) in call_models(device, only).items():
            calls = [0]
            counting = torch.nn.Module.__call__

            def count(module, *args, **kwargs):
                calls[0] += 1
                return counting(module, *args, **kwargs)

            torch.nn.Module.__call__ = count
            model(x)
            torch.nn.Module.__call__ = counting
            reps = max(3, int(0.2e9 / max(timed(model, x, 3, sync), 1)))  # ~0.2 s per measurement
            per_round: dict[str, list[float]] = {mode: [] for mode in CALL_MODES}
            for _ in range(rounds):
                for mode in random.sample(list(per_round), len(per_round)):
                    steps = None if mode == "plain" else ModuleSteps(types.SimpleNamespace(timer=timer("host clock" if mode == "host clock" else "events")))
                    if mode == "scouting":
                        steps.scouting = False  # never narrows: every call through the wrapper
                    for _ in range(ModuleSteps.SCOUT_CALLS + 1):  # past the scout (or the same calls plain)
                        model(x)
                    sync()
                    per_round[mode].append(timed(model, x, reps, sync))
                    if steps is not None:
                        steps.uninstall()
            row = {"model": label, "device": device, "module_calls": calls[0], "rounds": rounds, "reps": reps,
                   "plain_us": statistics.median(per_round["plain"]) / 1e3}
            for mode in CALL_MODES[1:]:
                diffs = sorted((a - b) / calls[0] for a, b in zip(per_round[mode], per_round["plain"]))
                q = statistics.quantiles(diffs, n=4) if len(diffs) > 1 else [diffs[0]] * 3
                row[mode] = {"ns_per_call": statistics.median(diffs), "q1": q[0], "q3": q[2],
                             "us_per_step": statistics.median(diffs) * calls[0] / 1e3,
                             "stderr_us_per_step": statistics.stdev(diffs) * calls[0] / 1e3 / len(diffs) ** 0.5 if len(diffs) > 1 else None}
            out.append(row)
            print(json.dumps(row), flush=True)
    return out


# --edges' Timers (see timer())
EDGE_KINDS = ("events", "busy end", "two events", "end event", "host clock")

# --alternate's variants: (label, a synchronize after each forward, the Timer's kind)
ALTERNATE = (("events+sync", True, "events"), ("events", False, "events"), ("dense", False, "dense"), ("busy end", False, "busy end"),
             ("two events", False, "two events"),
             ("end event", False, "end event"), ("host clock", False, "host clock"),
             ("no delay", False, "events no delay"), ("host no delay", False, "host clock no delay"),
             ("methods", False, "methods"))


def measured_share(times) -> float | None:
    """The share of ``times``' step ends whose GPU end was measured, not read between samples."""
    from perfdoctor.record.bootstrap.clock import UNSAMPLED

    ends = [m for marks in times.gpu_end.values() for m in marks]
    return sum(m is not UNSAMPLED for m in ends) / len(ends) if ends else None


def lag_spread(times) -> dict:
    """The GPU edges' lags behind their host times over ``times``' measured steps, in us (5th,
    50th and 95th percentile), and the median time between two host starts in a row: what
    StepTimes.settle weighs (clock.steady_lags), for seeing why a lane did or did not sample."""
    out = {}
    for name, s in (times.series()[0] or {}).items():
        measured = s.get("gpu_measured") or [True] * len(s["gpu_end_ns"])
        for edge, gpu, host in (("end", s["gpu_end_ns"], s["host_end_ns"]), ("start", s["gpu_start_ns"] or [], s["host_start_ns"])):
            lags = sorted((g - h) / 1e3 for g, h, m in zip(gpu, host, measured) if m)
            if len(lags) > 1:
                out[f"{edge}_lag_us"] = [round(lags[round(q * (len(lags) - 1))], 1) for q in (0.05, 0.5, 0.95)]
        starts = s["host_start_ns"]
        out["period_us"] = statistics.median(b - a for a, b in zip(starts, starts[1:])) / 1e3 if len(starts) > 2 else None
        break  # the step class's series (one per model)
    return out


def alternating_costs(device: str, pairs: int, only: list[str], variants: list[str] | None = None,
                      block: int = 1) -> list[dict]:
    """The light pass's cost per step, forward by forward: the shipped ModuleSteps scouts and
    narrows once per variant; then each pair of forwards runs one plain (the step class's own
    ``__call__`` taken away: torch's path) and one through the narrowed wrapper, in a random
    order, each timed on the host.

    Why forward by forward: a host-paced program on the H200 changes speed within a second
    (0.2 s measurements differed by 8-18 % from round to round, run 5), so differences of
    measurements seconds apart needed thousands of rounds to resolve 1 %. Two forwards a
    millisecond apart share the regime; the toggle (a class attribute set or deleted, the
    same in both directions) is outside the timed span. The mean difference counts the
    settle every Timer.SETTLE_EVERY steps.

    Variants (ALTERNATE): "events+sync" times each forward to a synchronize after it, from an
    idle GPU (all of the step's cost shows, also what a program that runs ahead of the GPU
    hides: an upper bound); the others time the forward's host side as image_infer.py's loop
    runs it (no synchronize inside; one after each pair, untimed), with the shipped Timer
    (its share of step ends measured: ``ends_measured``), the same measuring every step ("dense"),
    with an event at the start too (the Timer before the idle-stream start), with an event at
    the end only, and with no events (the wrapper's bookkeeping alone); "no delay" and "host no
    delay" are the shipped Timer and the no-event one without the run-queue read; "methods"
    the shipped edge through GpuClock's methods (the Timer before 2026-12-04).

    ``block``: each side of a pair is K forwards in a row, timed as their mean. With K = 1 every
    light forward follows a plain one, a gap the run-queue read counts as a pause
    (RunQueue.GAP_NS), so each reads the thread's schedstat; a program's loop of back-to-back
    forwards reads one every RunQueue.EVERY_NS (one ViT-small b1 forward of ~2.3 ms in three). K = 4
    reads two forwards in four (the first after the gap), near the program's cadence; K = 1 bounds
    the cost above."""
    import types

    import torch

    from perfdoctor.record.bootstrap.steps import ModuleSteps

    gpu_sync = device_sync(device)
    out = []
    with torch.inference_mode():
        for label, (model, x) in call_models(device, only).items():
            for variant, sync_each, kind in (v for v in ALTERNATE if variants is None or v[0] in variants):
                steps = ModuleSteps(types.SimpleNamespace(timer=timer(kind)))
                for _ in range(ModuleSteps.SCOUT_CALLS + 1):
                    model(x)
                if steps.scouting or not steps.own:
                    raise SystemExit(f"{label}: the light pass did not narrow to a step class")
                own = [(cls, ours) for cls, mine, ours in steps.own if mine is None]
                if len(own) != len(steps.own):
                    raise SystemExit(f"{label}: a step class has a __call__ of its own; not toggled here")

                def light(on: bool) -> None:
                    for cls, ours in own:
                        if on:
                            cls.__call__ = ours
                        elif "__call__" in cls.__dict__:
                            del cls.__call__

                for _ in range(20):  # both paths warm
                    for on in (False, True):
                        light(on)
                        model(x)
                gpu_sync()
                times: dict[bool, list[int]] = {False: [], True: []}
                for _ in range(pairs):
                    for on in random.sample((False, True), 2):
                        light(on)
                        took = 0
                        for _ in range(block):
                            t0 = time.perf_counter_ns()
                            model(x)
                            if sync_each:
                                gpu_sync()
                            took += time.perf_counter_ns() - t0
                        times[on].append(took // block)
                    if not sync_each:
                        gpu_sync()
                light(False)
                steps.uninstall()
                diffs = [(a - b) / 1e3 for a, b in zip(times[True], times[False])]
                plain = statistics.median(times[False]) / 1e3
                mean, sd = statistics.fmean(diffs), statistics.stdev(diffs)
                row = {"model": label, "variant": variant, "device": device, "pairs": pairs, "block": block, "plain_us": plain,
                       "steps_timed": sum(steps.times[0].count(n) for n in steps.classes),
                       "ends_measured": measured_share(steps.times[0]), **lag_spread(steps.times[0]),
                       "mean_us": mean, "stderr_us": sd / len(diffs) ** 0.5, "median_us": statistics.median(diffs),
                       "mean_share": mean / plain, "stderr_share": sd / len(diffs) ** 0.5 / plain}
                out.append(row)
                print(json.dumps(row), flush=True)
    return out


def edge_costs(device: str, steps: int) -> dict:
    """Where a synchronous step's own timer and the light pass's span part: the program's
    ``perf_counter`` pair around ``perfdoctor.region`` (one small kernel and a synchronize
    inside, as tests/programs/gpu_decode.py does), against a real light-pass Session's span
    for the same step (its host start to its end event on the host clock). Medians in us of
    ``before`` (the timer's start to the span's start: the region's entry and the session's
    bookkeeping ahead of the clock), ``after`` (the span's end to the timer's end: the end
    event's landing relative to the host, the bookkeeping after it, the region's exit) and
    the same step with no session at all."""
    import torch

    from perfdoctor import api
    from perfdoctor.bundle.protocol import PassConfig
    from perfdoctor.record.bootstrap.clock import StepTimes
    from perfdoctor.record.bootstrap.session import Session

    x = torch.zeros(1024, device=device)
    sync = device_sync(device)

    def run(n: int) -> list[tuple[int, int]]:
        out = []
        for _ in range(n):
            t0 = time.perf_counter_ns()
            with api.region("edge_step", tokens=1):
                x.add_(1)
                sync()
            out.append((t0, time.perf_counter_ns()))
        return out

    med = lambda v: statistics.median(v) / 1e3  # noqa: E731
    run(50)
    out = {"device": device, "steps": steps, "alone_us": med([b - a for a, b in run(steps)])}
    for kind in EDGE_KINDS:
        session = Session(PassConfig(pass_="light"))
        session.timer = timer(kind)
        session.times = StepTimes(session.timer)
        api.subscribe(session)
        try:
            run(50)
            timed = run(steps)
        finally:
            api._listeners.remove(session)
        series = session.times.series()[0]["edge_step"]
        host, end = series["host_start_ns"][-steps:], series["gpu_end_ns"][-steps:]
        out[kind] = {"own_us": med([b - a for a, b in timed]), "span_us": med([e - h for h, e in zip(host, end)]),
                     "before_us": med([h - a for (a, _), h in zip(timed, host)]),
                     "after_us": med([b - e for (_, b), e in zip(timed, end)])}
    return out


def event_costs(n: int = 2000) -> dict[str, float]:
    """us per light-pass event operation on the current CUDA stream: a record into a new
    event (torch creates the CUDA event then), a record into a pooled one, settling a
    completed one (the query and elapsed time of GpuClock.settle), the capture check each
    mark makes, the idle-stream query each step's start makes, and a record right after
    kernel launches (a step's end event)."""
    import torch

    from perfdoctor.record.bootstrap.clock import GpuClock

    torch.zeros(1, device="cuda")
    clock = GpuClock(torch)
    out = {}
    t0 = time.perf_counter_ns()
    fresh = []
    for _ in range(n):
        event = torch.cuda.Event(enable_timing=True)
        clock.record(event)
        fresh.append(event)
    out["record_new_us"] = (time.perf_counter_ns() - t0) / n / 1e3
    t0 = time.perf_counter_ns()
    for event in fresh:
        clock.record(event)
    out["record_pooled_us"] = (time.perf_counter_ns() - t0) / n / 1e3
    torch.cuda.synchronize()
    marks = list(fresh)
    t0 = time.perf_counter_ns()
    clock.settle(marks, 0)
    out["settle_us"] = (time.perf_counter_ns() - t0) / n / 1e3
    t0 = time.perf_counter_ns()
    for _ in range(n):
        clock.capturing()
    out["capture_check_us"] = (time.perf_counter_ns() - t0) / n / 1e3
    t0 = time.perf_counter_ns()
    for _ in range(n):
        clock.idle()
    out["idle_query_us"] = (time.perf_counter_ns() - t0) / n / 1e3
    # A record behind queued work, as a step's end event lands behind its kernels: each
    # record after 20 small launches, timed alone (the launches are not).
    x, spent = torch.zeros(1024, device="cuda"), 0
    for event in fresh[: n // 10]:
        for _ in range(20):
            x.add_(1)
        t0 = time.perf_counter_ns()
        clock.record(event)
        spent += time.perf_counter_ns() - t0
    torch.cuda.synchronize()
    out["record_behind_launches_us"] = spent / (n // 10) / 1e3
    return out


def timed(model, x, reps: int, sync) -> float:
    """ns per forward over reps forwards."""
    t0 = time.perf_counter_ns()
    for _ in range(reps):
        model(x)
    sync()
    return (time.perf_counter_ns() - t0) / reps


def program_pairs(device: str, pairs: int, model: str, work: Path) -> dict:
    """image_infer.py alone vs under the light pass, in pairs: own ms/step, per-pair ratio."""
    size = "224" if device == "cuda" else "64"
    program = [str(REAL / "image_infer.py"), "--device", device, "--model", model, "--batch", "1",
               "--img-size", size, "--warmup", "10", "--iters", "100" if device == "cuda" else "30"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    if device == "cpu":
        env["OMP_NUM_THREADS"] = "1"  # host-paced: one thread, as a GPU program's host side

    def own_ms(light: bool) -> float:
        cmd = [sys.executable, *program]
        if light:
            cmd = [sys.executable, "-m", "perfdoctor.record.run", "--quiet", "--out", str(work / "runs"),
                   "--collect", "nvml", *program]  # the light pass only; NVML is sampled in perfdoctor's process
        done = subprocess.run(cmd, check=True, env=env, timeout=600, capture_output=True, text=True)
        # One RESULT: alone, or the light pass's run (no traced pass with --collect nvml).
        line = next(ln for ln in done.stdout.splitlines() if ln.startswith("RESULT "))
        return json.loads(line.removeprefix("RESULT "))["ms_per_step"]

    rows = []
    for i in range(pairs):
        order = (False, True) if i % 2 == 0 else (True, False)
        ms = {light: own_ms(light) for light in order}
        rows.append({"alone_ms": ms[False], "light_ms": ms[True], "ratio": ms[True] / ms[False]})
        print(json.dumps(rows[-1]), flush=True)
    ratios = sorted(r["ratio"] for r in rows)
    q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    return {"model": model, "device": device, "pairs": rows, "ratio_median": statistics.median(ratios),
            "ratio_q1": q[0], "ratio_q3": q[2], "command": program}


def module_main(args: argparse.Namespace) -> None:
    report: dict = {"args": {k: str(v) for k, v in vars(args).items()}}
    if args.device == "cuda" and (args.calls or args.edges):
        report["events"] = event_costs()
        print("CUDA events, us each: " + ", ".join(f"{k} {v:.2f}" for k, v in report["events"].items()))
    if args.calls:
        report["calls"] = module_call_costs(args.device, args.rounds, args.trees.split(","))
        print(f"\n{'model':11}{'calls':>6}{'plain us':>10}" + "".join(f"{m + ' us/step':>24}" for m in CALL_MODES[1:]))
        for r in report["calls"]:
            cell = lambda m: f"{r[m]['us_per_step']:+.1f} ({r[m]['us_per_step'] / r['plain_us']:+.1%})"  # noqa: E731
            print(f"{r['model']:11}{r['module_calls']:>6}{r['plain_us']:>10.1f}" + "".join(f"{cell(m):>24}" for m in CALL_MODES[1:]))
    if args.edges:
        report["edges"] = e = edge_costs(args.device, args.edges)
        print(f"edges, us per step (median of {e['steps']}): alone {e['alone_us']:.1f}")
        for kind in EDGE_KINDS:
            k = e[kind]
            print(f"  light pass, {kind:10}: own timer {k['own_us']:.1f} (+{k['own_us'] - e['alone_us']:.1f}), span {k['span_us']:.1f}; "
                  f"timer start -> span start {k['before_us']:.1f}, span end -> timer end {k['after_us']:.1f}")
    if args.alternate:
        report["alternate"] = alternating_costs(args.device, args.alternate, args.trees.split(","),
                                                args.variants.split(",") if args.variants else None, args.block)
        print(f"\n{'model':11}{'variant':14}{'pairs':>7}{'block':>6}{'plain us':>10}{'light - plain, mean us/step':>32}{'median':>9}")
        for r in report["alternate"]:
            cost = f"{r['mean_us']:+.1f} ± {r['stderr_us']:.1f} ({r['mean_share']:+.2%} ± {r['stderr_share']:.2%})"
            print(f"{r['model']:11}{r['variant']:14}{r['pairs']:>7}{r['block']:>6}{r['plain_us']:>10.1f}{cost:>32}{r['median_us']:>+9.1f}")
    if args.program:
        with tempfile.TemporaryDirectory() as tmp:
            report["program"] = [program_pairs(args.device, args.pairs, m, Path(tmp)) for m in args.models.split(",")]
        for r in report["program"]:
            print(f"{r['model']}: light/alone, program's own timer, median of {len(r['pairs'])} pairs "
                  f"{r['ratio_median'] - 1:+.1%} [quartiles {r['ratio_q1'] - 1:+.1%}, {r['ratio_q3'] - 1:+.1%}]")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", action="store_true", help="the module-call step's cost per call, in one process")
    p.add_argument("--alternate", type=int, default=0, metavar="PAIRS",
                   help="the light pass's cost per step, plain and narrowed forwards alternating (PAIRS pairs)")
    p.add_argument("--edges", type=int, default=0, metavar="STEPS",
                   help="a synchronous step's own timer against the light pass's span: where they part")
    p.add_argument("--block", type=int, default=1, metavar="K",
                   help="--alternate: K forwards in a row each way (the light pass's reads at a loop's cadence), timed as their mean")
    p.add_argument("--variants", default="", help=f"--alternate: which of {', '.join(v[0] for v in ALTERNATE)} (default: all)")
    p.add_argument("--program", action="store_true", help="image_infer.py at batch 1, alone vs light pass, in pairs")
    p.add_argument("--device", default="cuda", help="--calls / --program: cuda or cpu")
    p.add_argument("--rounds", type=int, default=15, help="--calls: interleaved rounds")
    p.add_argument("--trees", default=",".join(TREES), help=f"--calls / --alternate: which of {', '.join(TREES)}")
    p.add_argument("--pairs", type=int, default=20, help="--program: process pairs")
    p.add_argument("--models", default="resnet50,vit_small", help="--program: image_infer.py --model values")
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--sizes", default=",".join(SIZES), help=f"comma-separated from {','.join(SIZES)}")
    p.add_argument("--modes", default=",".join(MODES), help=f"comma-separated from {','.join(MODES)} (alone is always run)")
    p.add_argument("--no-pin", dest="pin", action="store_false", help="leave the processes where the OS puts them")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    unknown = set(args.variants.split(",") if args.variants else ()) - {v[0] for v in ALTERNATE}
    if unknown:
        p.error(f"--variants: unknown {', '.join(sorted(unknown))} (known: {', '.join(v[0] for v in ALTERNATE)})")
    unknown = set(args.trees.split(",")) - set(TREES)
    if unknown:
        p.error(f"--trees: unknown {', '.join(sorted(unknown))} (known: {', '.join(TREES)})")
    if args.calls or args.alternate or args.edges or args.program:
        module_main(args)
        return
    modes = ["alone", *(m for m in args.modes.split(",") if m in MODES and m != "alone")]
    sizes = [z for z in args.sizes.split(",") if z in SIZES]
    pinned = None
    if args.pin:
        from perfdoctor.collectors.nvml import local_cpus

        pinned = sorted(local_cpus())
        os.sched_setaffinity(0, pinned)  # the children (perfdoctor, the program) inherit it
        print(f"pinned to the GPU's local CPUs: {pinned}")
    random.seed(0)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        for trial in range(args.trials):
            jobs = [(m, z) for m in modes for z in sizes]
            random.shuffle(jobs)
            for mode, size in jobs:
                row = one_process(mode, size, args.steps, args.warmup, Path(tmp))
                rows.append({"trial": trial, "mode": mode, "size": size, **row})
                print(f"trial {trial} {size:5} {mode:10} " + " ".join(f"{k}={v:.4f}" for k, v in row.items() if isinstance(v, float)), flush=True)
    table = summarize(rows, modes, sizes)
    print()
    print(f"{'size':6}{'mode':12}{'light ms':>20}{'own timer ms':>20}{'light/own':>11}{'own/alone':>11}{'light/alone':>12}")
    for t in table:
        rng = lambda k: f"{t[k]:.3f} [{t[k + '_min']:.3f}-{t[k + '_max']:.3f}]" if t.get(k) is not None else "-"  # noqa: E731
        ratio = lambda v: f"{v - 1:+.1%}" if v is not None else "-"  # noqa: E731
        print(f"{t['size']:6}{t['mode']:12}{rng('light_ms'):>20}{rng('own_ms'):>20}{ratio(t['light_vs_own']):>11}"
              f"{ratio(t['own_vs_alone']):>11}{ratio(t['light_vs_alone']):>12}")
    if args.json:
        meta = vars(args) | {"json": str(args.json), "pinned_cpus": pinned}
        args.json.write_text(json.dumps({"rows": rows, "table": table, "args": meta}, indent=1))


def summarize(rows: list[dict], modes: list[str], sizes: list[str]) -> list[dict]:
    """Per size and mode: the median over trials of each per-process median, its range, and the ratios."""
    out = []
    for size in sizes:
        alone = statistics.median(r["own_ms"] for r in rows if r["size"] == size and r["mode"] == "alone")
        for mode in modes:
            sel = [r for r in rows if r["size"] == size and r["mode"] == mode]
            t: dict = {"size": size, "mode": mode, "trials": len(sel)}
            for key in ("light_ms", "own_ms"):
                vals = [r[key] for r in sel if key in r]
                if vals:
                    t |= {key: statistics.median(vals), key + "_min": min(vals), key + "_max": max(vals)}
            t["light_vs_own"] = t["light_ms"] / t["own_ms"] if "light_ms" in t else None
            t["own_vs_alone"] = t["own_ms"] / alone
            t["light_vs_alone"] = t["light_ms"] / alone if "light_ms" in t else None
            out.append(t)
    return out


if __name__ == "__main__":
    main()
