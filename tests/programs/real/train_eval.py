#!/usr/bin/env python3
"""The main loop of PyTorch's ImageNet example: ``for epoch: train(...); validate(...)``, each
over its own DataLoader, timed by an ``AverageMeter`` of batch times (``end =
time.time()`` at each iteration's end). An MLP on synthetic features, so it runs anywhere;
``--max-iters N`` ends each training epoch after N batches (``if i == N: break``), as
benchmark scripts do. ``--sanity-val N`` validates N batches before training, as Lightning's
``Trainer.fit`` does (its sanity check, ``num_sanity_val_steps=2``): that loop stops after N
batches, so its loader never raises StopIteration. ``--accum-steps K``: gradient accumulation as
PyTorch's AMP recipe writes it (loss / K, backward every batch, step and zero_grad every K-th
batch of an epoch); ``step_time`` times each optimizer step from the previous one's end (not an
epoch's first: it follows the epoch's first batches, not a step).

    python train_eval.py                          # 3 epochs of 32 batches, 8 validation batches each
    python train_eval.py --max-iters 10 --device cuda
"""
import argparse
import json
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class AverageMeter:
    def __init__(self):
        self.sum, self.count, self.first = 0.0, 0, None
        self.each = []  # every value, for RESULT

    def update(self, val, n=1):
        if self.first is None:
            self.first = val  # the run's first batch: CUDA start-up and the loader's first fetch
        self.sum += val * n
        self.count += n
        self.each.append(val)

    @property
    def avg(self):
        return self.sum / max(self.count, 1)


def train(loader, model, criterion, optimizer, epoch, args, batch_time, step_time, group_time):
    model.train()
    end = stepped = time.time()
    steps = group = 0
    for i, (x, y) in enumerate(loader):
        if i == args.max_iters:
            break
        x, y = x.to(args.device, non_blocking=True), y.to(args.device, non_blocking=True)
        loss = criterion(model(x), y)
        if args.accum_steps == 1:
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        else:
            (loss / args.accum_steps).backward()
            if (i + 1) % args.accum_steps == 0:
                optimizer.step()
                optimizer.zero_grad()
        if args.device != "cpu":
            torch.cuda.synchronize()
        batch_time.update(time.time() - end)
        group += time.time() - end
        end = time.time()
        if (i + 1) % args.accum_steps == 0:
            group_time.update(group)
            group = 0
            if steps:
                step_time.update(end - stepped)
            steps, stepped = steps + 1, end
        if i % args.print_freq == 0:
            print(f"Epoch: [{epoch}][{i}/{len(loader)}]\tTime {batch_time.avg:.4f}\tLoss {loss.item():.4f}")
    return steps


def validate(loader, model, args, batches=None):
    model.eval()
    correct = seen = 0
    with torch.no_grad():
        for i, (x, y) in enumerate(loader):
            correct += (model(x.to(args.device)).argmax(1) == y.to(args.device)).sum().item()
            seen += len(y)
            if i + 1 == batches:
                break
    return 100.0 * correct / max(seen, 1)


def main():
    p = argparse.ArgumentParser(description="ImageNet-example training loop with validation (synthetic data)")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batches", type=int, default=32, help="training batches per epoch")
    p.add_argument("--val-batches", type=int, default=8)
    p.add_argument("--max-iters", type=int, default=-1, help="end each training epoch after this many batches")
    p.add_argument("--sanity-val", type=int, default=0, help="validation batches before training (Lightning's sanity check)")
    p.add_argument("--accum-steps", type=int, default=1, help="batches per optimizer step (gradient accumulation)")
    p.add_argument("--batch-size", "-b", type=int, default=64)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--print-freq", type=int, default=10)
    p.add_argument("--device", default="cpu")
    args = p.parse_args()
    if args.accum_steps < 1:
        p.error("--accum-steps must be at least 1")

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, args.width), nn.ReLU(), nn.Linear(args.width, args.width), nn.ReLU(),
                          nn.Linear(args.width, 10)).to(args.device)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def data(batches):
        n = batches * args.batch_size
        return TensorDataset(torch.randn(n, 256), torch.randint(0, 10, (n,)))

    train_loader = DataLoader(data(args.batches), batch_size=args.batch_size, shuffle=True)
    val_loader = DataLoader(data(args.val_batches), batch_size=args.batch_size)
    batch_time, step_time, group_time = AverageMeter(), AverageMeter(), AverageMeter()
    if args.sanity_val:
        print(f" * sanity check Acc@1 {validate(val_loader, model, args, batches=args.sanity_val):.3f}")
    optimizer_steps = 0
    for epoch in range(args.epochs):
        optimizer_steps += train(train_loader, model, criterion, optimizer, epoch, args, batch_time, step_time, group_time)
        print(f" * Acc@1 {validate(val_loader, model, args):.3f}")
    print(f"Train: {batch_time.avg * 1e3:.3f} ms/iter over {batch_time.count} iterations")
    after_first = (batch_time.sum - (batch_time.first or 0.0)) / max(batch_time.count - 1, 1) * 1e3
    # with accumulation the step is the optimizer's: the batch times of each group summed (its
    # batches, as an epoch's first holds none of the previous epoch), the first group left out
    groups_after_first = (group_time.sum - (group_time.first or 0.0)) / max(group_time.count - 1, 1) * 1e3
    # ms_per_step (what scripts/real-programs-check compares; with accumulation per optimizer
    # step, its group of batches) leaves out the first batch, as
    # every other program there leaves out its warm-up: on the H200 it is 170-270 ms of CUDA
    # start-up, 0.9-1.6 ms on the mean of 192 batches of ~3 ms. ms_per_iter is the meter's own.
    print("RESULT " + json.dumps({"program": "train_eval", "step": "training iteration", "iters": batch_time.count,
                                  "ms_per_iter": batch_time.avg * 1e3, "ms_per_step": after_first if args.accum_steps == 1 else groups_after_first,
                                  "ms_first_iter": (batch_time.first or 0.0) * 1e3,
                                  "ms_per_iter_after_first": after_first, "epochs": args.epochs,
                                  "accum_steps": args.accum_steps, "optimizer_steps": optimizer_steps,
                                  "ms_per_optimizer_step": step_time.avg * 1e3,
                                  "ms_each_iter": [v * 1e3 for v in batch_time.each]}))


if __name__ == "__main__":
    main()
