#!/usr/bin/env python3
"""An iteration-based training loop as OpenMMLab's runners drive one (mmengine's
``IterBasedTrainLoop``): ``max_iters`` iterations drawn from an endless iterator over a finite
DataLoader (mmengine's ``_InfiniteDataloaderIterator``), which, when the loader's pass ends,
sleeps (``time.sleep(2)``, "prevent possible deadlock during epoch transition"; ``--pause``
here) and starts the loader again. The loop's own timer is IterTimerHook's: each iteration,
its fetch included; RESULT's ``restart_ms``: each epoch change, as the iterator times it.

    python iter_train.py                       # 120 iterations over 20 batches a pass, 2 s at each epoch change
    python iter_train.py --pause 0.3 --device cuda
"""
import argparse
import json
import time

import torch
from torch.utils.data import DataLoader, TensorDataset


class InfiniteDataloaderIterator:
    """mmengine's: an endless iterator that starts its DataLoader again at each pass's end."""

    def __init__(self, loader, pause):
        self.loader, self.pause, self.epoch = loader, pause, 0
        self.iterator = iter(loader)
        self.restart_ms = []

    def __iter__(self):
        return self

    def __next__(self):
        try:
            return next(self.iterator)
        except StopIteration:
            t = time.perf_counter()
            self.epoch += 1
            time.sleep(self.pause)  # mmengine: prevent possible deadlock during epoch transition
            self.iterator = iter(self.loader)
            self.restart_ms.append((time.perf_counter() - t) * 1e3)
            return next(self.iterator)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--max-iters", type=int, default=120)
    p.add_argument("--batches", type=int, default=20, help="batches in one pass of the loader")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--pause", type=float, default=2.0, help="seconds slept at each epoch change (mmengine: 2)")
    a = p.parse_args()
    torch.manual_seed(0)
    n = a.batches * a.batch_size
    data = TensorDataset(torch.randn(n, 64), torch.randint(0, 10, (n,)))
    loader = DataLoader(data, batch_size=a.batch_size, shuffle=True)
    model = torch.nn.Sequential(torch.nn.Linear(64, a.width), torch.nn.ReLU(), torch.nn.Linear(a.width, 10)).to(a.device)
    optim = torch.optim.SGD(model.parameters(), lr=0.01)
    it = InfiniteDataloaderIterator(loader, a.pause)
    sync = torch.cuda.synchronize if a.device.startswith("cuda") else (lambda: None)
    ms_each = []
    for i in range(a.max_iters):
        t = time.perf_counter()
        x, y = (v.to(a.device) for v in next(it))
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optim.zero_grad()
        loss.backward()
        optim.step()
        sync()
        ms_each.append((time.perf_counter() - t) * 1e3)
        if (i + 1) % 50 == 0:
            print(f"Iter(train) [{i + 1}/{a.max_iters}]  time: {sum(ms_each[-50:]) / 50 / 1e3:.4f}  loss: {loss.item():.4f}")
    print("RESULT " + json.dumps({"program": "iter_train", "steps": a.max_iters, "ms_each": ms_each,
                                  "ms_per_iter": sum(ms_each) / len(ms_each), "epochs": it.epoch, "restart_ms": it.restart_ms}))


if __name__ == "__main__":
    main()
