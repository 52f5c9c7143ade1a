#!/usr/bin/env python3
"""transformers' ``Trainer`` profiled the way its users do (the recipe of the HF forum and
docs): a ``TrainerCallback`` whose ``on_step_end`` calls ``prof.step()``, added to the
trainer inside ``with torch.profiler.profile(schedule=..., on_trace_ready=
tensorboard_trace_handler(DIR)) as prof: trainer.train()``. CPU (``use_cpu=True``), a small
MLP returning ``{"loss": ...}``, ``gradient_accumulation_steps`` micro-batches per optimizer
step. Needs ``accelerate`` (the Trainer does). No perfdoctor.

Each optimizer step is timed by a second callback around the profiler's: ``ms_each`` from the
return of the previous ``prof.step()`` to the call of its own (the work a ProfilerStep#N
range holds, see ``prof_train.py``), for the steps whose profiler action was ``RECORD`` or
``RECORD_AND_SAVE``.

Prints ``RESULT {json}``: ``traced_iterations``, ``ms_per_step``, ``ms_each``, ``traces``,
``per_trace`` (with ``span_ms``, as ``prof_train.py``), ``optimizer_steps``, ``accum``.

    python hf_trainer_prof.py --out /tmp/hf --max-steps 10
"""
import argparse
import json
import os
import time

import torch
import torch.nn as nn
from torch.profiler import ProfilerAction, ProfilerActivity, profile, schedule, tensorboard_trace_handler
from transformers import Trainer, TrainerCallback, TrainingArguments

p = argparse.ArgumentParser()
p.add_argument("--out", default="hf-training-trainer")
p.add_argument("--max-steps", type=int, default=10)
p.add_argument("--accum", type=int, default=2)
p.add_argument("--batch", type=int, default=32)
p.add_argument("--width", type=int, default=256)
p.add_argument("--threads", type=int, default=1)
args = p.parse_args()
torch.set_num_threads(args.threads)
torch.manual_seed(0)


class MLP(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10))

    def forward(self, x, labels=None):
        logits = self.net(x)
        return {"loss": nn.functional.cross_entropy(logits, labels), "logits": logits}


n = args.max_steps * args.accum * args.batch
data = [{"x": torch.randn(args.width), "labels": int(i % 10)} for i in range(n)]
targs = TrainingArguments(output_dir=os.path.join(args.out, "..", "hf-out"), use_cpu=True, report_to=[], max_steps=args.max_steps,
                          per_device_train_batch_size=args.batch, gradient_accumulation_steps=args.accum, logging_steps=1000,
                          save_strategy="no", dataloader_num_workers=0, disable_tqdm=True)
trainer = Trainer(model=MLP(args.width), args=targs, train_dataset=data)

sched = schedule(wait=1, warmup=1, active=3, repeat=2)
tracing = {ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE}
ms_each, spans, traced = [], [], []


class ProfCallback(TrainerCallback):  # the recipe's callback
    def __init__(self, prof):
        self.prof = prof

    def on_step_end(self, args, state, control, **kwargs):
        self.prof.step()


class Timer(ProfCallback):  # the program's own timer around the recipe's prof.step()
    t0 = None

    def on_train_begin(self, args, state, control, **kwargs):
        self.t0 = self.last = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        t1 = time.perf_counter()
        action = sched(self.prof.step_num)
        super().on_step_end(args, state, control, **kwargs)
        ms_each.append((t1 - self.t0) * 1e3)  # the first also holds the trainer's set-up: not traced
        spans.append((t1 - self.last) * 1e3)  # from the previous prof.step() call to this one
        self.last = t1
        traced.append(action in tracing)
        self.t0 = time.perf_counter()


os.makedirs(args.out, exist_ok=True)
with profile(activities=[ProfilerActivity.CPU], schedule=sched, on_trace_ready=tensorboard_trace_handler(args.out)) as prof:
    trainer.add_callback(Timer(prof=prof))
    trainer.train()

files = sorted(os.listdir(args.out), key=lambda f: os.path.getmtime(os.path.join(args.out, f)))
mine = [ms for ms, t in zip(ms_each, traced) if t]
runs, cur = [], []
for ms, span, t in zip(ms_each, spans, traced):
    if t:
        cur.append((ms, span))
    elif cur:
        runs.append(cur)
        cur = []
if cur:
    runs.append(cur)
print(f"hf trainer: {len(ms_each)} optimizer steps, {len(mine)} traced, {sum(mine) / max(len(mine), 1):.3f} ms each; traces: {files}")
print("RESULT " + json.dumps({
    "program": "hf_trainer_prof", "step": "optimizer step", "optimizer_steps": len(ms_each), "accum": args.accum,
    "traced_iterations": len(mine), "ms_per_step": sum(mine) / max(len(mine), 1), "ms_each": mine,
    "traces": files,
    "per_trace": [{"iterations": len(r), "ms_per_step": sum(m for m, _ in r) / len(r), "span_ms": sum(sp for _, sp in r)} for r in runs],
}))
