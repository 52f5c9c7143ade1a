#!/usr/bin/env python3
"""Training with PyTorch Lightning itself, as its docs' "LightningModule in 15 minutes" write
it: a ``LightningModule`` (``training_step`` returning the loss, ``validation_step`` logging
with ``self.log``, ``configure_optimizers`` returning an AdamW and a step-wise
``OneCycleLR``), ``DataLoader``s over a synthetic classification set, then
``L.Trainer(max_epochs=..., val_check_interval=..., ...).fit(model, train_loader,
val_loader)``: Lightning's sanity check (2 validation batches) before training, a validation
pass every ``--val-every`` training batches. ``--accum``: ``accumulate_grad_batches``;
``--precision bf16-mixed``: autocast. No perfdoctor. Needs ``lightning``.

``--profile DIR``: Lightning's own profiler, as its docs' "Find bottlenecks in your code"
write it, ``L.Trainer(..., profiler=PyTorchProfiler(dirpath=DIR, filename="fit"))``
(``--profile-steps N``: with ``schedule=torch.profiler.schedule(wait=1, warmup=1,
active=N)``; 0, Lightning's default schedule). It writes a trace per loop into DIR
(``fit-fit-[Strategy]SingleDeviceStrategy.training_step.<id>.pt.trace.json``, and one for
``validation_step``): ``[pl][profile]<hook>`` ranges around each hook, ``[pl][module]`` ranges
around each module's forward, and a ``ProfilerStep#N`` per ``training_step`` and per
``validation_step``, stepped at each one's end.

Its own timer, a ``Callback`` as users write one: each training batch from
``on_train_batch_start`` to ``on_train_batch_end`` (``ms_each``: the batch's fetch and
Lightning's loop between batches are outside it), and its span, from its start to the next
batch's start, or to the validation, the epoch's end or the training's end after it (``span_each``: the
training's time, validations left out; ``ms_per_step`` their mean per optimizer step, its
``--accum`` batches, the first step left out).

    python lightning_fit.py                      # the accelerator Lightning finds (CUDA)
    python lightning_fit.py --accelerator cpu --width 256 --samples 2048 --batch 64 --val-every 8
"""
import argparse
import json
import os
import tempfile
import time

import lightning as L
from lightning.pytorch.profilers import PyTorchProfiler
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Classifier(L.LightningModule):
    def __init__(self, features, width, classes, lr, total_steps):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(features, width), nn.GELU(), nn.LayerNorm(width), nn.Linear(width, width), nn.GELU(),
                                 nn.Linear(width, classes))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(-1) == y).float().mean())

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=0.01)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=self.hparams.lr, total_steps=self.hparams.total_steps)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


class BatchTimer(L.Callback):
    """Each training batch's hooks (``ms``), and its span (``span``): from its start to the
    next batch's, or to the validation or the training's end after it (the training's time,
    validations left out: a progress bar's it/s)."""

    def __init__(self, sync):
        self.sync, self.ms, self.span, self.t0 = sync, [], [], None

    def _close(self):
        if self.t0 is not None:
            self.span.append((time.perf_counter() - self.t0) * 1e3)
            self.t0 = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self._close()
        self.t0 = self.begun = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self.sync:
            torch.cuda.synchronize()
        self.ms.append((time.perf_counter() - self.begun) * 1e3)

    def on_validation_start(self, trainer, pl_module):
        self._close()

    def on_train_epoch_end(self, trainer, pl_module):
        self._close()  # before ModelCheckpoint's (Lightning runs checkpoint callbacks last)

    def on_train_end(self, trainer, pl_module):
        self._close()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--accelerator", default="auto")
    p.add_argument("--precision", default="32-true", help="Lightning's precision: 32-true, bf16-mixed, 16-mixed")
    p.add_argument("--features", type=int, default=512)
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--classes", type=int, default=100)
    p.add_argument("--samples", type=int, default=65536)
    p.add_argument("--val-samples", type=int, default=4096)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--val-every", type=int, default=64, help="val_check_interval, in training batches (0: no validation loader)")
    p.add_argument("--accum", type=int, default=1, help="accumulate_grad_batches")
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--profile", metavar="DIR", help="Lightning's PyTorchProfiler, its traces written to DIR")
    p.add_argument("--profile-steps", type=int, default=0, help="the profiler schedule's active steps (0: Lightning's default)")
    p.add_argument("--defaults", action="store_true",
                   help="Lightning's own defaults: a logger, a checkpoint per validation or epoch, the progress bar, the summary")
    args = p.parse_args()
    L.seed_everything(0, verbose=False)

    g = torch.Generator().manual_seed(0)
    centers = torch.randn(args.classes, args.features, generator=g)

    def dataset(n):
        y = torch.randint(0, args.classes, (n,), generator=g)
        return TensorDataset(centers[y] + torch.randn(n, args.features, generator=g), y)

    train = DataLoader(dataset(args.samples), batch_size=args.batch, shuffle=True, num_workers=args.workers)
    val = DataLoader(dataset(args.val_samples), batch_size=args.batch, num_workers=args.workers)
    steps = args.epochs * -(-len(train) // args.accum)
    model = Classifier(args.features, args.width, args.classes, 1e-3, steps)
    timer = BatchTimer(sync=torch.cuda.is_available() and args.accelerator != "cpu")
    quiet = {} if args.defaults else dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    if args.profile:
        schedule = torch.profiler.schedule(wait=1, warmup=1, active=args.profile_steps) if args.profile_steps else None
        quiet["profiler"] = PyTorchProfiler(dirpath=args.profile, filename="fit", schedule=schedule)
    trainer = L.Trainer(max_epochs=args.epochs, accelerator=args.accelerator, devices=1, precision=args.precision,
                        val_check_interval=args.val_every or None, accumulate_grad_batches=args.accum, callbacks=[timer],
                        default_root_dir=os.path.join(tempfile.gettempdir(), "lightning-fit"), **quiet)
    t0 = time.perf_counter()
    trainer.fit(model, train, val if args.val_every else None)
    wall = time.perf_counter() - t0
    span = timer.span[1:]  # the first batch's allocations left out
    # per optimizer step: its accumulate_grad_batches batches' spans (the first step left out)
    steps = [sum(timer.span[i:i + args.accum]) for i in range(0, len(timer.span), args.accum)][1:]
    print(f"{len(timer.ms)} training batches, {trainer.global_step} optimizer steps, {sum(span) / len(span):.2f} ms per "
          f"batch ({1e3 * len(span) / sum(span):.1f} it/s); fit {wall:.1f} s")
    print("RESULT " + json.dumps({"program": "lightning_fit", "step": "training batch" if args.accum == 1 else "optimizer step",
                                  "batches": len(timer.ms), "optimizer_steps": trainer.global_step, "accum": args.accum,
                                  "ms_each": timer.ms, "span_each": timer.span, "ms_per_step": sum(steps) / len(steps),
                                  "ms_per_batch": sum(span) / len(span), "fit_s": wall}))


if __name__ == "__main__":
    main()
