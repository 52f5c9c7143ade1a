#!/usr/bin/env python3
"""Inference loops that profile themselves, as their authors write it. No perfdoctor.

``--style``:

* ``decode``: a hand-written greedy generate loop (a small decoder with a KV cache kept as
  a list of ``(k, v)`` grown by ``torch.cat``): per generation a prefill forward (outside
  any marker), then per new token ``with record_function("decode_step"):`` around the
  forward, the argmax and the append; ``with profile(activities=[CPU]) as prof:`` around
  every generation, then ``prof.export_chrome_trace(PATH)``.
* ``eval``: the ImageNet example's ``validate()`` (``model.eval()``, ``torch.no_grad()``)
  over a ``DataLoader``, profiled with ``schedule(wait=1, warmup=1, active=3, repeat=2)``
  and ``tensorboard_trace_handler(DIR)``, ``prof.step()`` at each batch's end.

Each step (a decode token; an evaluation batch) is timed by ``time.perf_counter()``: for
``decode`` the marker's inside; for ``eval`` from the batch's fetch (after the previous
``prof.step()`` returned) to the call of its own ``prof.step()`` (see ``prof_train.py``).

Prints ``RESULT {json}``: ``traced_iterations`` (steps in the trace files), ``ms_per_step``
(their mean by the program's timer), ``ms_each``, ``traces``, ``per_trace`` (with
``span_ms``: see ``prof_train.py``; decode: the markers' insides).

    python prof_infer.py --style decode --out /tmp/inf
"""
import argparse
import json
import os
import time

import torch
import torch.nn as nn
from torch.profiler import ProfilerAction, ProfilerActivity, profile, record_function, schedule, tensorboard_trace_handler
from torch.utils.data import DataLoader, TensorDataset

p = argparse.ArgumentParser()
p.add_argument("--style", choices=["decode", "eval"], default="decode")
p.add_argument("--out", default="prof-infer-traces")
p.add_argument("--dim", type=int, default=64)
p.add_argument("--heads", type=int, default=4)
p.add_argument("--layers", type=int, default=2)
p.add_argument("--vocab", type=int, default=256)
p.add_argument("--prompt-len", type=int, default=8)
p.add_argument("--tokens", type=int, default=12)
p.add_argument("--generations", type=int, default=2)
p.add_argument("--batches", type=int, default=12)
p.add_argument("--batch", type=int, default=32)
p.add_argument("--width", type=int, default=256)
p.add_argument("--workers", type=int, default=0, help="eval: DataLoader(num_workers=N)")
p.add_argument("--decode-ms", type=float, default=0.0, help="eval: each sample's 'decode' in the Dataset (a sleep), ms")
p.add_argument("--threads", type=int, default=1)
args = p.parse_args()

torch.set_num_threads(args.threads)
torch.manual_seed(0)
os.makedirs(args.out, exist_ok=True)
ms_each, traced = [], []


class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, cache):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.h, d // self.h).transpose(1, 2) for z in (q, k, v))
        if cache is not None:
            k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=cache is None)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x)), (k, v)


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(args.vocab, args.dim)
        self.pos = nn.Embedding(args.prompt_len + args.tokens + 1, args.dim)
        self.blocks = nn.ModuleList(Block(args.dim, args.heads) for _ in range(args.layers))
        self.ln, self.head = nn.LayerNorm(args.dim), nn.Linear(args.dim, args.vocab, bias=False)

    def forward(self, idx, start, caches):
        x = self.emb(idx) + self.pos(torch.arange(start, start + idx.shape[1]))
        new = []
        for blk, c in zip(self.blocks, caches):
            x, kv = blk(x, c)
            new.append(kv)
        return self.head(self.ln(x[:, -1])), new


class Decoded(torch.utils.data.Dataset):
    """Each sample 'decoded' as an image dataset would (a fixed wait per sample)."""

    def __init__(self, ds, seconds):
        self.ds, self.seconds = ds, seconds

    def __len__(self):
        return len(self.ds)

    def __getitem__(self, i):
        time.sleep(self.seconds)
        return self.ds[i]


if args.style == "decode":
    model = GPT().eval()
    path = os.path.join(args.out, "decode.json")
    with torch.inference_mode(), profile(activities=[ProfilerActivity.CPU]) as prof:
        for g in range(args.generations):
            prompt = torch.randint(0, args.vocab, (1, args.prompt_len))
            logits, caches = model(prompt, 0, [None] * args.layers)  # prefill
            tok = logits.argmax(-1, keepdim=True)
            out = [tok]
            for i in range(args.tokens):
                t0 = time.perf_counter()
                with record_function("decode_step"):
                    logits, caches = model(tok, args.prompt_len + i, caches)
                    tok = logits.argmax(-1, keepdim=True)
                    out.append(tok)
                ms_each.append((time.perf_counter() - t0) * 1e3)
                traced.append(True)
            text = torch.cat(out, 1).tolist()
    prof.export_chrome_trace(path)
    runs = [[(ms, ms) for ms in ms_each]]
    steps_per = {"tokens_per_generation": args.tokens, "generations": args.generations}

else:  # eval
    model = nn.Sequential(nn.Linear(args.width, args.width), nn.ReLU(), nn.Linear(args.width, args.width), nn.ReLU(), nn.Linear(args.width, 10))
    ds = TensorDataset(torch.randn(args.batches * args.batch, args.width), torch.randint(0, 10, (args.batches * args.batch,)))
    if args.decode_ms:
        ds = Decoded(ds, args.decode_ms / 1e3)
    loader = DataLoader(ds, batch_size=args.batch, shuffle=False, num_workers=args.workers)
    sched = schedule(wait=1, warmup=1, active=3, repeat=2)
    tracing = {ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE}
    model.eval()
    correct = 0
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU], schedule=sched, on_trace_ready=tensorboard_trace_handler(args.out)) as prof:
        t0 = last = time.perf_counter()
        spans = []
        for i, (x, y) in enumerate(loader):
            action = sched(i)
            correct += (model(x).argmax(1) == y).sum().item()
            t1 = time.perf_counter()
            prof.step()
            ms_each.append((t1 - t0) * 1e3)  # the fetch and the batch, not prof.step() (see prof_train.py)
            spans.append((t1 - last) * 1e3)  # from the previous prof.step() call to this one
            last = t1
            traced.append(action in tracing)
            t0 = time.perf_counter()
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
    ms_each = mine
    steps_per = {"batches": args.batches}

files = sorted(os.listdir(args.out), key=lambda f: os.path.getmtime(os.path.join(args.out, f)))
print(f"{args.style}: {len(ms_each)} traced steps, {sum(ms_each) / max(len(ms_each), 1):.3f} ms each; traces: {files}")
print("RESULT " + json.dumps({
    "program": "prof_infer", "style": args.style, "step": "decode token" if args.style == "decode" else "evaluation batch",
    "traced_iterations": len(ms_each), "ms_per_step": sum(ms_each) / max(len(ms_each), 1), "ms_each": ms_each,
    "traces": files, **steps_per,
    "per_trace": [{"iterations": len(r), "ms_per_step": sum(m for m, _ in r) / len(r), "span_ms": sum(sp for _, sp in r)} for r in runs],
}))
