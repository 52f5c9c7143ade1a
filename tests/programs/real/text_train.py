#!/usr/bin/env python3
"""Training a text classifier on variable-length sequences, as NLP scripts write it: a
``Dataset`` of token-id lists of random lengths, a ``DataLoader`` with a ``collate_fn``
that pads the batch (``pad_sequence``) and builds the lengths and the mask,
``pin_memory=True`` (on a CUDA machine), ``.to(device, non_blocking=True)`` copies, a
small Transformer encoder, AdamW, ``optimizer.zero_grad()`` first; ``--prefetcher``: NVIDIA
Apex's ImageNet example's ``data_prefetcher`` (the next batch's copy issued on a side
``torch.cuda.Stream`` at the end of ``next()``, ``while batch is not None``), on a CPU
without the stream (its fallback). An ``AverageMeter``-style mean of batch times after
``--warmup`` batches per epoch; ``--epochs`` passes.

    python text_train.py                       # CUDA
    python text_train.py --device cpu --dim 64 --layers 1 --samples 256 --batch 16 --max-len 64   # CPU
"""
import argparse
import json
import random
import time

import torch
import torch.nn as nn
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader, Dataset


class Reviews(Dataset):
    def __init__(self, n, vocab, max_len, seed=0):
        rng = random.Random(seed)
        self.items = [([rng.randrange(1, vocab) for _ in range(rng.randint(8, max_len))], rng.randrange(2)) for _ in range(n)]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        ids, label = self.items[i]
        return torch.tensor(ids), label


def collate(batch):
    ids, labels = zip(*batch)
    lengths = torch.tensor([len(x) for x in ids])
    padded = pad_sequence(ids, batch_first=True, padding_value=0)
    mask = torch.arange(padded.size(1))[None, :] >= lengths[:, None]  # True = padding
    return padded, mask, torch.tensor(labels)


class Classifier(nn.Module):
    def __init__(self, vocab, dim, heads, layers, max_len):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim, padding_idx=0)
        self.pos = nn.Embedding(max_len, dim)
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, batch_first=True, dropout=0.1)
        self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(dim, 2)

    def forward(self, ids, mask):
        x = self.emb(ids) + self.pos(torch.arange(ids.size(1), device=ids.device))
        h = self.enc(x, src_key_padding_mask=mask)
        keep = (~mask).unsqueeze(-1).float()
        return self.head((h * keep).sum(1) / keep.sum(1))


class data_prefetcher:
    """Apex's examples/imagenet/main_amp.py prefetcher, with its CPU fallback."""

    def __init__(self, loader, device):
        self.loader = iter(loader)
        self.device = device
        self.stream = torch.cuda.Stream() if device.type == "cuda" else None
        self.preload()

    def preload(self):
        try:
            self.next_ids, self.next_mask, self.next_labels = next(self.loader)
        except StopIteration:
            self.next_ids = self.next_mask = self.next_labels = None
            return
        if self.stream is not None:
            with torch.cuda.stream(self.stream):
                self.next_ids = self.next_ids.to(self.device, non_blocking=True)
                self.next_mask = self.next_mask.to(self.device, non_blocking=True)
                self.next_labels = self.next_labels.to(self.device, non_blocking=True)

    def next(self):
        if self.stream is not None:
            torch.cuda.current_stream().wait_stream(self.stream)
        ids, mask, labels = self.next_ids, self.next_mask, self.next_labels
        self.preload()
        return ids, mask, labels


def main():
    p = argparse.ArgumentParser(description="variable-length text classification training")
    p.add_argument("--device", default="cuda")
    p.add_argument("--vocab", type=int, default=30000)
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--samples", type=int, default=4096)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--max-len", type=int, default=256)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--num-workers", type=int, default=0)
    p.add_argument("--prefetcher", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    loader = DataLoader(Reviews(args.samples, args.vocab, args.max_len), batch_size=args.batch, shuffle=True,
                        collate_fn=collate, pin_memory=cuda, num_workers=args.num_workers)
    model = Classifier(args.vocab, args.dim, args.heads, args.layers, args.max_len).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    crit = nn.CrossEntropyLoss()

    def train_batch(ids, mask, labels):
        opt.zero_grad()
        loss = crit(model(ids, mask), labels)
        loss.backward()
        opt.step()
        return loss

    each, kept = [], []
    for epoch in range(args.epochs):
        model.train()
        end = time.perf_counter()
        i = 0
        if args.prefetcher:
            pf = data_prefetcher(loader, dev)
            ids, mask, labels = pf.next()
            while ids is not None:
                loss = train_batch(ids, mask, labels)
                if cuda:
                    torch.cuda.synchronize()
                dt = time.perf_counter() - end
                each.append(dt)
                if i >= args.warmup:
                    kept.append(dt)
                i += 1
                end = time.perf_counter()
                ids, mask, labels = pf.next()
        else:
            for ids, mask, labels in loader:
                ids, mask, labels = (t.to(dev, non_blocking=True) for t in (ids, mask, labels))
                loss = train_batch(ids, mask, labels)
                if cuda:
                    torch.cuda.synchronize()
                dt = time.perf_counter() - end
                each.append(dt)
                if i >= args.warmup:
                    kept.append(dt)
                i += 1
                end = time.perf_counter()
        print(f"epoch {epoch}: loss {loss.item():.4f}, {sum(kept[-(i - args.warmup):]) / max(1, i - args.warmup) * 1e3:.3f} ms/batch")
    ms = sum(kept) / len(kept) * 1e3
    print("RESULT " + json.dumps({"program": "text_train", "step": "one training batch (its fetch included)", "prefetcher": args.prefetcher,
                                  "batches": len(each), "per_epoch": len(each) // args.epochs, "warmup": args.warmup,
                                  "ms_per_step": ms, "ms_per_iter": ms, "ms_each": [t * 1e3 for t in each]}))


if __name__ == "__main__":
    main()
