#!/usr/bin/env python3
"""A training loop that profiles itself, the ways authors write it (the PyTorch profiler
recipe, the tensorboard plugin's tutorial, HF's and Lightning's profiler hooks). No
perfdoctor anywhere: the traces are the files the author's own profiler code writes.

``--style``:

* ``schedule``: ``with profile(schedule=schedule(wait=1, warmup=1, active=3, repeat=2),
  on_trace_ready=tensorboard_trace_handler(DIR)) as prof:`` around the loop, ``prof.step()``
  at each iteration's end: one trace file per cycle (``--repeat`` files), each holding
  ``--active`` ProfilerStep ranges.
* ``markers``: the same, with ``record_function("forward")`` / ``("backward")`` /
  ``("optimizer")`` nested in each iteration (the tensorboard tutorial's shape).
* ``marker``: one ``record_function("train_step")`` per iteration and no ``prof.step()``:
  ``with profile() as prof:`` around the whole loop, ``prof.export_chrome_trace(PATH)``.
* ``nested``: ``marker`` with ``markers``' forward/backward/optimizer ranges inside each
  ``train_step`` (four ranges of one count per iteration).
* ``legacy``: ``marker`` under the autograd profiler of old code,
  ``with torch.autograd.profiler.profile() as prof:``, ``prof.export_chrome_trace(PATH)``.
* ``full``: ``schedule`` with ``with_stack=True, record_shapes=True, profile_memory=True``
  (python frames, shapes and memory events: a bigger trace).
* ``hf``: HF-Trainer style: a ``TrainerCallback``-shaped object whose ``on_step_end``
  calls ``prof.step()`` (transformers' docs' recipe), driven by a Trainer-like loop
  (``on_step_begin``, ``--accum`` micro-batches per step (``training_step`` each), clip,
  ``optimizer.step()``, ``lr_scheduler.step()``, ``zero_grad()``, ``on_step_end``), the
  profiler's schedule ``wait=1, warmup=1, active=3`` and ``tensorboard_trace_handler``.
* ``export``: ``with profile(activities=[CPU]) as prof:`` around the whole loop, no
  schedule (so no ProfilerStep range at all), then ``prof.export_chrome_trace(PATH)``.
* ``lightning``: Lightning's ``PyTorchProfiler`` naming: ``record_function`` ranges
  ``[LightningModule]Model.training_step``, ``[Strategy]SingleDeviceStrategy.backward``,
  ``[LightningModule]Model.optimizer_step``, ``[Callback]...on_train_batch_end`` etc. per
  batch inside a ``run_training_batch`` range, a ``DataLoader`` fetch
  (``[_TrainingEpochLoop].train_dataloader_next``), ``prof.step()`` per batch, the
  profiler's default Lightning schedule (``wait=1, warmup=1, active=3``) and
  ``export_chrome_trace`` from its ``on_trace_ready``.
* ``lightning-export``: the same ranges, every batch profiled, no schedule and no
  ``prof.step()`` (``PyTorchProfiler`` without a schedule), one ``export_chrome_trace``.

The iterations inside the profiled window: each iteration's profiler action is read from
the schedule before it runs (``RECORD`` or ``RECORD_AND_SAVE`` = traced). Each iteration
is timed by ``time.perf_counter()``: ``ms_each`` its work, from the return of the previous
``prof.step()`` to the call of its own (inside ProfilerStep#N, which also holds the two
calls' ends: the range opens inside one ``prof.step()`` and closes inside the next);
``period_ms_each`` start to start, the ``prof.step()`` included (the trace's save too,
which the last active step's ``prof.step()`` writes: ``save_ms``). The two differ by the
profiler's own ``step()`` between two ProfilerStep ranges: ~0.07 ms, but once 4.2 ms (its
``schedule_fn`` frame stalled: preempted or collecting garbage), which no range holds.

Prints ``RESULT {json}``: ``traced_iterations`` (in the trace files), ``ms_per_step``
(their mean ``ms_each``), ``ms_each``, ``period_ms_each`` (traced, in order), ``traces``
(the files written, in order) and per trace file ``per_trace``: its iterations, their mean
``ms_each`` and ``span_ms``, their spans summed, each iteration's from the previous
iteration's ``prof.step()`` call to its own (each ProfilerStep#N range lies inside its span,
but for the first statement of the ``prof.step()`` that closes it).

    python prof_train.py --style schedule --out /tmp/tr
"""
import argparse
import json
import os
import time

import torch
import torch.nn as nn
from torch.profiler import ProfilerAction, ProfilerActivity, profile, record_function, schedule, tensorboard_trace_handler

p = argparse.ArgumentParser()
p.add_argument("--style", choices=["schedule", "markers", "marker", "full", "hf", "export", "lightning", "lightning-export", "nested", "legacy"], default="schedule")
p.add_argument("--out", default="prof-train-traces", help="the trace folder (tensorboard_trace_handler) or file's folder")
p.add_argument("--iters", type=int, default=12)
p.add_argument("--wait", type=int, default=1)
p.add_argument("--warmup", type=int, default=1)
p.add_argument("--active", type=int, default=3)
p.add_argument("--repeat", type=int, default=2)
p.add_argument("--width", type=int, default=256)
p.add_argument("--batch", type=int, default=64)
p.add_argument("--depth", type=int, default=3)
p.add_argument("--accum", type=int, default=2, help="hf: micro-batches per optimizer step")
p.add_argument("--gzip", action="store_true", help="tensorboard_trace_handler(use_gzip=True): .pt.trace.json.gz files")
p.add_argument("--stack", action="store_true", help="with_stack=True in the schedule and markers styles too")
p.add_argument("--threads", type=int, default=1)
args = p.parse_args()

torch.set_num_threads(args.threads)
torch.manual_seed(0)
layers = []
for _ in range(args.depth):
    layers += [nn.Linear(args.width, args.width), nn.ReLU()]
model = nn.Sequential(*layers, nn.Linear(args.width, 10))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0 / (1 + 0.01 * s))
data = [(torch.randn(args.batch, args.width), torch.randint(0, 10, (args.batch,))) for _ in range(8)]
os.makedirs(args.out, exist_ok=True)


def plain_iteration(i):
    x, y = data[i % len(data)]
    loss = nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss


def marked_iteration(i):
    x, y = data[i % len(data)]
    with record_function("forward"):
        loss = nn.functional.cross_entropy(model(x), y)
    with record_function("backward"):
        optimizer.zero_grad()
        loss.backward()
    with record_function("optimizer"):
        optimizer.step()
    return loss


ms_each, periods, traced, saves = [], [], [], []
starts, calls = [], []  # per iteration: its start, and its prof.step() call (its end where there is none)
sched = schedule(wait=args.wait, warmup=args.warmup, active=args.active, repeat=args.repeat)
tracing = {ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE}

if args.style in ("schedule", "markers", "full"):
    body = marked_iteration if args.style == "markers" else plain_iteration
    extra = dict(with_stack=True, record_shapes=True, profile_memory=True) if args.style == "full" else dict(with_stack=args.stack)
    with profile(activities=[ProfilerActivity.CPU], schedule=sched, on_trace_ready=tensorboard_trace_handler(args.out, use_gzip=args.gzip), **extra) as prof:
        for i in range(args.iters):
            action = sched(i)
            t0 = time.perf_counter()
            body(i)
            t1 = time.perf_counter()
            prof.step()
            t2 = time.perf_counter()
            if action == ProfilerAction.RECORD_AND_SAVE:
                saves.append(t2 - t1)  # the trace written inside this prof.step(): not the iteration's
            ms_each.append((t1 - t0) * 1e3)
            periods.append((t2 - t0) * 1e3)
            starts.append(t0)
            calls.append(t1)
            traced.append(action in tracing)

elif args.style == "hf":
    class ProfCallback:  # transformers.TrainerCallback's shape, as the HF docs' recipe writes it
        def __init__(self, prof):
            self.prof = prof

        def on_step_begin(self, args, state, control, **kwargs):
            pass

        def on_step_end(self, args, state, control, **kwargs):
            self.prof.step()

    class State:
        global_step = 0

    def training_step(x, y):  # Trainer.training_step: forward, loss / accumulation, backward
        model.train()
        loss = nn.functional.cross_entropy(model(x), y) / args.accum
        loss.backward()
        return loss.detach()

    with profile(activities=[ProfilerActivity.CPU], schedule=sched, on_trace_ready=tensorboard_trace_handler(args.out, use_gzip=args.gzip)) as prof:
        callbacks, state = [ProfCallback(prof)], State()
        it = iter(lambda: None, 1)  # an endless batch source
        for step in range(args.iters):
            action = sched(step)
            t0 = time.perf_counter()
            for cb in callbacks:
                cb.on_step_begin(args, state, None)
            tr_loss = torch.zeros(())
            for micro in range(args.accum):
                next(it)
                x, y = data[(step * args.accum + micro) % len(data)]
                tr_loss += training_step(x, y)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            model.zero_grad()
            state.global_step += 1
            t1 = time.perf_counter()
            for cb in callbacks:
                cb.on_step_end(args, state, None)
            t2 = time.perf_counter()
            if action == ProfilerAction.RECORD_AND_SAVE:
                saves.append(t2 - t1)
            ms_each.append((t1 - t0) * 1e3)
            periods.append((t2 - t0) * 1e3)
            starts.append(t0)
            calls.append(t1)
            traced.append(action in tracing)

elif args.style in ("export", "marker", "nested", "legacy"):
    path = os.path.join(args.out, f"{args.style}.json")
    legacy = args.style == "legacy"  # old code: torch.autograd.profiler.profile(), a train_step marker
    with (torch.autograd.profiler.profile() if legacy else profile(activities=[ProfilerActivity.CPU])) as prof:
        for i in range(args.iters):
            t0 = time.perf_counter()
            if args.style in ("marker", "nested", "legacy"):
                with record_function("train_step"):
                    (marked_iteration if args.style == "nested" else plain_iteration)(i)
            else:
                plain_iteration(i)
            t1 = time.perf_counter()
            ms_each.append((t1 - t0) * 1e3)
            periods.append(ms_each[-1])
            starts.append(t0)
            calls.append(t1)
            traced.append(True)
    prof.export_chrome_trace(path)

else:  # lightning
    class DataLoaderish:
        def __iter__(self):
            for i in range(args.iters):
                yield data[i % len(data)]

    def on_ready(prof):
        prof.export_chrome_trace(os.path.join(args.out, f"lightning.{len(os.listdir(args.out))}.pt.trace.json"))

    whole = args.style == "lightning-export"  # no schedule: every batch traced, no ProfilerStep range
    with profile(activities=[ProfilerActivity.CPU], **({} if whole else dict(schedule=sched, on_trace_ready=on_ready))) as prof:
        with record_function("[_TrainingEpochLoop].train_dataloader_iter"):
            batches = iter(DataLoaderish())
        for i in range(args.iters):
            action = sched(i)
            t0 = time.perf_counter()
            with record_function("[_TrainingEpochLoop].train_dataloader_next"):
                x, y = next(batches)
            with record_function("run_training_batch"):
                with record_function("[Callback]TQDMProgressBar.on_train_batch_start"):
                    pass
                with record_function("[LightningModule]Model.optimizer_step"):
                    with record_function("[Strategy]SingleDeviceStrategy.training_step"):
                        with record_function("[LightningModule]Model.training_step"):
                            loss = nn.functional.cross_entropy(model(x), y)
                    with record_function("[LightningModule]Model.optimizer_zero_grad"):
                        optimizer.zero_grad()
                    with record_function("[Strategy]SingleDeviceStrategy.backward"):
                        loss.backward()
                    optimizer.step()
                with record_function("[Callback]TQDMProgressBar.on_train_batch_end"):
                    loss.item()
            t1 = time.perf_counter()
            if not whole:
                prof.step()
            t2 = time.perf_counter()
            if action == ProfilerAction.RECORD_AND_SAVE and not whole:
                saves.append(t2 - t1)
            ms_each.append((t1 - t0) * 1e3)
            periods.append((t2 - t0) * 1e3)
            starts.append(t0)
            calls.append(t1)
            traced.append(whole or action in tracing)
    if whole:
        prof.export_chrome_trace(os.path.join(args.out, "lightning.pt.trace.json"))

files = sorted(os.listdir(args.out), key=lambda f: os.path.getmtime(os.path.join(args.out, f)))
mine = [ms for ms, t in zip(ms_each, traced) if t]
# an iteration's span: from the previous iteration's prof.step() call to its own (the whole
# previous prof.step() included: it holds the ProfilerStep range's start)
spans = [(c - (calls[k - 1] if k else starts[0])) * 1e3 for k, c in enumerate(calls)]
# per trace file: consecutive runs of traced iterations, in order (one file per cycle)
runs, cur = [], []
for ms, span, t in zip(ms_each, spans, traced):
    if t:
        cur.append((ms, span))
    elif cur:
        runs.append(cur)
        cur = []
if cur:
    runs.append(cur)
if args.style in ("export", "marker", "nested", "legacy", "lightning-export"):
    runs = [[r for run in runs for r in run]]
print(f"{args.style}: {len(mine)} traced iterations, {sum(mine) / max(len(mine), 1):.3f} ms each; traces: {files}")
print("RESULT " + json.dumps({
    "program": "prof_train", "style": args.style, "step": "training iteration",
    "iterations": args.iters, "traced_iterations": len(mine),
    "ms_per_step": sum(mine) / max(len(mine), 1), "ms_each": mine,
    "period_ms_each": [ms for ms, t in zip(periods, traced) if t],
    "traces": files,
    "per_trace": [{"iterations": len(r), "ms_per_step": sum(m for m, _ in r) / len(r), "span_ms": sum(sp for _, sp in r)} for r in runs],
    "save_ms": [s * 1e3 for s in saves],
}))
