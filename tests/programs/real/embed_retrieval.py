#!/usr/bin/env python3
"""A batch embedding / retrieval job, as sentence-transformers users and RAG pipelines write
one by hand: queries of different lengths (token ids), sorted by length and cut into
batches, each batch padded to its longest query with an attention mask, encoded by a
small transformer encoder (``nn.TransformerEncoder``, ``src_key_padding_mask``), mean-pooled
over the real tokens and L2-normalised; then the batch's similarity to a fixed corpus of
embeddings (``q @ corpus.T``) and ``topk`` per query, the hits brought back with
``.tolist()``. ``torch.inference_mode()``; every batch timed (``synchronize`` +
``perf_counter``); the first ``--warmup`` batches are left out.

    python embed_retrieval.py                               # CUDA
    python embed_retrieval.py --device cpu --dim 64 --layers 2 --corpus 2000
"""
import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Encoder(nn.Module):
    def __init__(self, vocab, dim, heads, layers, max_len):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, dim, padding_idx=0), nn.Embedding(max_len, dim)
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, batch_first=True, norm_first=False)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

    def forward(self, ids, mask):
        x = self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
        h = self.encoder(x, src_key_padding_mask=~mask)
        m = mask.unsqueeze(-1).to(h.dtype)
        return F.normalize((h * m).sum(1) / m.sum(1).clamp(min=1), dim=-1)


def pad(batch, device):
    longest = max(len(q) for q in batch)
    ids = torch.zeros(len(batch), longest, dtype=torch.long)
    mask = torch.zeros(len(batch), longest, dtype=torch.bool)
    for i, q in enumerate(batch):
        ids[i, : len(q)] = torch.tensor(q)
        mask[i, : len(q)] = True
    return ids.to(device), mask.to(device)


def sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def main():
    p = argparse.ArgumentParser(description="embedding + top-k retrieval over variable-length batches")
    p.add_argument("--device", default="cuda")
    p.add_argument("--vocab", type=int, default=30000)
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--queries", type=int, default=2048)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--min-len", type=int, default=8)
    p.add_argument("--max-len", type=int, default=128)
    p.add_argument("--corpus", type=int, default=100000)
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    args = p.parse_args()

    torch.manual_seed(0)
    model = Encoder(args.vocab, args.dim, args.heads, args.layers, args.max_len).to(args.device).eval()
    corpus = F.normalize(torch.randn(args.corpus, args.dim, device=args.device), dim=-1)
    g = torch.Generator().manual_seed(0)
    lens = torch.randint(args.min_len, args.max_len + 1, (args.queries,), generator=g).tolist()
    queries = [torch.randint(1, args.vocab, (n,), generator=g).tolist() for n in lens]
    queries.sort(key=len, reverse=True)  # length-sorted batches: less padding
    batches = [queries[i : i + args.batch] for i in range(0, len(queries), args.batch)]

    hits, ms_each = [], []
    with torch.inference_mode():
        for i, batch in enumerate(batches):
            sync(args.device)
            t0 = time.perf_counter()
            ids, mask = pad(batch, args.device)
            emb = model(ids, mask)
            scores, idx = (emb @ corpus.T).topk(args.k, dim=-1)
            hits += idx.tolist()
            sync(args.device)
            ms_each.append((time.perf_counter() - t0) * 1e3)
    timed = ms_each[args.warmup :]
    ms = sum(timed) / len(timed)
    print(f"{len(batches)} batches ({args.queries} queries, lengths {args.min_len}-{args.max_len}), "
          f"{ms:.2f} ms/batch after {args.warmup} warm-up, {len(hits)} hit lists")
    print("RESULT " + json.dumps({"program": "embed_retrieval", "step": "one batch: pad, encode, similarity, top-k",
                                  "batches": len(batches), "warmup": args.warmup, "ms_each": ms_each,
                                  "ms_per_step": ms, "ms_per_batch": ms,
                                  "queries_per_s": sum(len(b) for b in batches[args.warmup:]) / sum(timed) * 1e3}))


if __name__ == "__main__":
    main()
