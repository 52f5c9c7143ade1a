#!/usr/bin/env python3
"""Text classification throughput of a BERT encoder with Hugging Face transformers (random
weights), tokenising on the host inside the timed loop, as a serving benchmark does: each
batch of raw strings goes through transformers' pure-Python ``BertTokenizer`` (WordPiece
over a vocabulary written to a temporary file, no download), then
``BertForSequenceClassification`` under ``torch.inference_mode()``, then ``argmax`` back on
the host.

Its own timer: ``time.perf_counter()`` (after ``torch.cuda.synchronize()``) around each
batch, tokenisation included, after ``--warmup`` batches.

    python bert_classify.py                                       # bert-base shape, batch 32, cuda
    python bert_classify.py --device cpu --layers 2 --dim 64 --heads 4 --batch 4 --seq 32 --batches 8
"""
import argparse
import json
import os
import random
import tempfile
import time

import torch
from transformers import BertConfig, BertForSequenceClassification, BertTokenizer

WORDS = ("the movie was great terrible boring plot actor acting scene ending film story character director "
         "music beautiful awful slow fast funny sad long short best worst love hate watch again never").split()


def make_tokenizer(vocab_size):
    """A WordPiece vocabulary: BERT's special tokens, the words, their ## pieces, filler."""
    pieces = [w[:k] for w in WORDS for k in range(2, len(w) + 1)] + ["##" + w[k:] for w in WORDS for k in range(1, len(w))]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + sorted(set(pieces)) + [c for c in "abcdefghijklmnopqrstuvwxyz.,!?"]
    vocab += [f"[unused{i}]" for i in range(max(0, vocab_size - len(vocab)))]
    d = tempfile.mkdtemp()
    path = os.path.join(d, "vocab.txt")
    with open(path, "w") as f:
        f.write("\n".join(vocab) + "\n")
    return BertTokenizer(vocab_file=path), len(vocab)


def review(rng, words):
    return " ".join(rng.choice(WORDS) for _ in range(words)) + rng.choice([".", "!", "?"])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--dim", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--vocab", type=int, default=30522)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seq", type=int, default=128, help="max_length (padding to it)")
    p.add_argument("--batches", type=int, default=20, help="timed batches")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--device", default="cuda")
    args = p.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)
    rng = random.Random(0)

    tokenizer, vocab_size = make_tokenizer(args.vocab)
    config = BertConfig(vocab_size=vocab_size, hidden_size=args.dim, num_hidden_layers=args.layers,
                        num_attention_heads=args.heads, intermediate_size=4 * args.dim, num_labels=2,
                        max_position_embeddings=max(512, args.seq))
    model = BertForSequenceClassification(config).to(device).eval()
    texts = [[review(rng, rng.randint(args.seq // 4, args.seq)) for _ in range(args.batch)]
             for _ in range(args.warmup + args.batches)]

    times, predicted = [], 0
    with torch.inference_mode():
        for i, batch in enumerate(texts):
            t0 = time.perf_counter()
            enc = tokenizer(batch, padding="max_length", truncation=True, max_length=args.seq, return_tensors="pt").to(device)
            logits = model(**enc).logits
            predicted += int((logits.argmax(-1) == 1).sum().item())
            if device.type == "cuda":
                torch.cuda.synchronize()
            if i >= args.warmup:
                times.append(time.perf_counter() - t0)
    ms = 1e3 * sum(times) / len(times)
    print(f"{len(times)} batches of {args.batch}: {ms:.2f} ms/batch, {1e3 * args.batch / ms:.1f} samples/s "
          f"({predicted} predicted positive)")
    print("RESULT " + json.dumps({"program": "bert_classify", "step": "batch (tokenisation included)", "ms_per_step": ms,
                                  "ms_per_batch": ms, "batches": len(times), "warmup_batches": args.warmup,
                                  "samples_per_s": 1e3 * args.batch / ms}))


if __name__ == "__main__":
    main()
