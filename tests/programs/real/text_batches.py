#!/usr/bin/env python3
"""Text classified in batches as transformers' ``pipeline(..., batch_size=8, num_workers=2)``
feeds its model: a Dataset of texts, a DataLoader with worker processes whose collate returns
the batch's raw strings (a pipeline tokenises in the main process), then the model over the
batch. Each fetch carries ~200 strings a sample, which a worker pickles and this process
unpickles. ``--sample-ms``: each sample's cost in the worker (0: the workers keep ahead).
The program's own timers: each fetch, and inside it the time waiting for a worker's batch
(a ``multiprocessing`` queue's poll, timed by wrapping it: RESULT's ``wait_ms``).

    python text_batches.py --batches 60 --sample-ms 0
"""
import argparse
import json
import multiprocessing.connection as mp_connection
import time

import torch
from torch.utils.data import DataLoader, Dataset

waited = [0.0]
poll = mp_connection._ConnectionBase.poll


def timed_poll(connection, timeout=0.0):
    t = time.perf_counter()
    try:
        return poll(connection, timeout)
    finally:
        waited[0] += (time.perf_counter() - t) * 1e3


class Texts(Dataset):
    def __init__(self, n, sample_ms):
        self.n, self.sample_ms = n, sample_ms

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.sample_ms:
            time.sleep(self.sample_ms / 1e3)  # reading and cleaning one document
        return {"text": [f"token{i}_{j}" for j in range(200)], "label": i % 2}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batches", type=int, default=60)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--sample-ms", type=float, default=0.0)
    p.add_argument("--num-workers", type=int, default=2)
    a = p.parse_args()
    mp_connection._ConnectionBase.poll = timed_poll
    loader = DataLoader(Texts(a.batches * a.batch_size, a.sample_ms), batch_size=a.batch_size, num_workers=a.num_workers,
                        collate_fn=lambda samples: samples)
    model = torch.nn.Sequential(torch.nn.EmbeddingBag(1000, 64), torch.nn.Linear(64, 2))
    fetch_ms, wait_ms = [], []
    it = iter(loader)
    with torch.no_grad():
        while True:
            t, w = time.perf_counter(), waited[0]
            try:
                batch = next(it)
            except StopIteration:
                break
            fetch_ms.append((time.perf_counter() - t) * 1e3)
            wait_ms.append(waited[0] - w)
            ids = torch.tensor([[hash(word) % 1000 for word in sample["text"]] for sample in batch])  # the pipeline's tokenising
            model(ids).argmax(-1)
    print("RESULT " + json.dumps({"program": "text_batches", "steps": len(fetch_ms), "fetch_ms": fetch_ms, "wait_ms": wait_ms}))


if __name__ == "__main__":
    main()
