#!/usr/bin/env python3
"""Offline batch scoring of documents tokenized by a process pool, as scripts without a
DataLoader write it: ``multiprocessing.Pool.imap`` over the batches (pure-Python tokenizing,
which the GIL would serialize in threads: a regex split, lower-casing, hashed word and bigram
ids), then the PyTorch text classification tutorial's model (an ``nn.EmbeddingBag`` of
the ids, by offsets, and a linear head; an MLP here) in inference mode, the labels by ``.tolist()``. When the pool is the slower side, each batch
waits in ``imap``'s ``next()`` for its workers.

Its own timer: ``time.perf_counter()`` from one batch's end to the next's (the loop
iteration: the wait for the pool included); RESULT's ``ms_each``, ``ms_per_step`` (their
mean after ``--warmup``) and ``batches``.

    python pool_classify.py                              # 128 documents a batch, 4 workers, cuda
    python pool_classify.py --device cpu --batch 16 --workers 1 --batches 30
"""
import argparse
import json
import random
import re
import time
import zlib
from multiprocessing import Pool

import numpy as np
import torch
import torch.nn as nn

VOCAB = 1 << 18
WORD = re.compile(r"[a-z']+")
SYLLABLES = ["ka", "lo", "mi", "ren", "tas", "vel", "qu", "dor", "ith", "an", "ce", "bru"]


def document(seed, words):
    rng = random.Random(seed)
    return " ".join("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 4))).capitalize()
                    + rng.choice(["", "", ",", "."]) for _ in range(words))


def tokenize(text, max_len):
    tokens = WORD.findall(text.lower())
    ids = [zlib.crc32(t.encode()) % VOCAB for t in tokens]
    ids += [zlib.crc32(f"{a} {b}".encode()) % VOCAB for a, b in zip(tokens, tokens[1:])]
    return ids[:max_len]


def make_batch(job):
    first, size, words, max_len = job
    docs = [tokenize(document(first + i, words), max_len) for i in range(size)]
    offsets, flat = [], []
    for ids in docs:
        offsets.append(len(flat))
        flat.extend(ids)
    return np.array(flat, dtype=np.int64), np.array(offsets, dtype=np.int64)


class TextClassificationModel(nn.Module):
    def __init__(self, vocab_size, embed_dim, num_class):
        super().__init__()
        self.embedding = nn.EmbeddingBag(vocab_size, embed_dim, mode="mean")
        self.fc = nn.Sequential(nn.Linear(embed_dim, 256), nn.ReLU(), nn.Linear(256, num_class))

    def forward(self, text, offsets):
        return self.fc(self.embedding(text, offsets))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--words", type=int, default=300, help="words per document")
    p.add_argument("--max-len", type=int, default=512)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--batches", type=int, default=50)
    p.add_argument("--warmup", type=int, default=3)
    args = p.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = TextClassificationModel(VOCAB, 64, 20).to(device).eval()
    jobs = [(i * args.batch, args.batch, args.words, args.max_len) for i in range(args.batches)]
    ms_each, counts = [], [0] * 20
    with Pool(args.workers) as pool, torch.inference_mode():
        last = time.perf_counter()
        for flat, offsets in pool.imap(make_batch, jobs):
            logits = model(torch.from_numpy(flat).to(device), torch.from_numpy(offsets).to(device))
            for label in logits.argmax(1).tolist():
                counts[label] += 1
            now = time.perf_counter()
            ms_each.append((now - last) * 1e3)
            last = now
    steady = ms_each[args.warmup:]
    result = {"batches": len(ms_each), "ms_each": ms_each, "ms_per_step": sum(steady) / len(steady)}
    print(f"{len(ms_each)} batches, {result['ms_per_step']:.2f} ms per batch, most common label {counts.index(max(counts))}")
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
