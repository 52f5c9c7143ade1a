#!/usr/bin/env python3
"""Batch inference with a Hugging Face ``pipeline``: ``pipeline("text-classification",
model=..., tokenizer=..., device=...)`` over a list of raw strings with ``batch_size``, as
the transformers docs' "Pipeline batching" section writes it (``for out in pipe(texts,
batch_size=8, truncation=True)``). The model is ``BertForSequenceClassification(BertConfig(...))``
with random weights and the pure-Python ``BertTokenizer`` over a vocabulary written to a
temporary file (no download). The pipeline tokenises each string, batches them with its own
DataLoader (padding collate), runs the model per batch and post-processes each item
(softmax, label). One warm-up pass over the list, then ``--passes`` timed passes;
``--feature-extraction``: ``pipeline("feature-extraction")`` over a ``BertModel`` instead;
``--generate N``: ``pipeline("text-generation")`` over a ``GPT2LMHeadModel``, N new tokens
per text greedily (``max_new_tokens=N, do_sample=False``), timed per token too (a
``LogitsProcessor`` noting each decoding step, RESULT's ``token_ms``).
The program's own number: a pass's time over its batches.

    python hf_pipeline.py                                   # bert-base shape, cuda
    python hf_pipeline.py --device cpu --layers 2 --dim 64 --heads 4 --texts 64 --batch-size 8   # CPU
"""
import argparse
import json
import math
import os
import random
import tempfile
import time

import torch
from transformers import (BertConfig, BertForSequenceClassification, BertModel, BertTokenizer, GPT2Config, GPT2LMHeadModel,
                          LogitsProcessor, LogitsProcessorList, pipeline)

WORDS = ("the movie was great terrible boring plot actor acting scene ending film story character director "
         "music beautiful awful slow fast funny sad long short best worst love hate watch again never").split()


def make_tokenizer():
    pieces = [w[:k] for w in WORDS for k in range(2, len(w) + 1)] + ["##" + w[k:] for w in WORDS for k in range(1, len(w))]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + sorted(set(pieces)) + [c for c in "abcdefghijklmnopqrstuvwxyz.,!?"]
    path = os.path.join(tempfile.mkdtemp(), "vocab.txt")
    with open(path, "w") as f:
        f.write("\n".join(vocab) + "\n")
    return BertTokenizer(vocab_file=path), len(vocab)


def main():
    p = argparse.ArgumentParser(description="HF pipeline batch inference")
    p.add_argument("--device", default="cuda")
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--dim", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--texts", type=int, default=512)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-words", type=int, default=100)
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--feature-extraction", action="store_true")
    p.add_argument("--generate", type=int, default=0, help="text generation: new tokens per text")
    args = p.parse_args()
    torch.manual_seed(0)
    rng = random.Random(0)
    tokenizer, vocab = make_tokenizer()
    config = BertConfig(vocab_size=vocab, hidden_size=args.dim, num_hidden_layers=args.layers, num_attention_heads=args.heads,
                        intermediate_size=4 * args.dim, num_labels=2)
    stamps: list[float] = []  # each decoding step's time (--generate)

    class TokenTimer(LogitsProcessor):
        def __call__(self, input_ids, scores):
            stamps.append(time.perf_counter())
            return scores

    kwargs = {"truncation": True}
    if args.generate:
        model, task = GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_embd=args.dim, n_layer=args.layers, n_head=args.heads,
                                                 pad_token_id=0, eos_token_id=3, bos_token_id=2)).eval(), "text-generation"
        kwargs = {"max_new_tokens": args.generate, "do_sample": False, "min_new_tokens": args.generate,
                  "logits_processor": LogitsProcessorList([TokenTimer()])}
    elif args.feature_extraction:
        model, task = BertModel(config).eval(), "feature-extraction"
    else:
        model, task = BertForSequenceClassification(config).eval(), "text-classification"
    pipe = pipeline(task, model=model, tokenizer=tokenizer, device=torch.device(args.device))
    texts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, args.max_words))) + "." for _ in range(args.texts)]
    batches = math.ceil(args.texts / args.batch_size)

    def one_pass():
        outs = []
        for out in pipe(texts, batch_size=args.batch_size, **kwargs):
            outs.append(out)
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        return outs

    one_pass()  # warm-up
    stamps.clear()
    times = []
    for i in range(args.passes):
        t0 = time.perf_counter()
        outs = one_pass()
        dt = time.perf_counter() - t0
        times.append(dt)
        print(f"pass {i + 1}: {len(outs)} texts in {dt:.3f} s, {len(outs) / dt:.1f} texts/s")
    ms = sum(times) / (batches * args.passes) * 1e3
    print(f"{ms:.3f} ms/batch")
    print("RESULT " + json.dumps({"program": "hf_pipeline", "task": task, "step": "one batch (tokenise, forward, post-process)",
                                  "batches_per_pass": batches, "passes": args.passes, "ms_per_step": ms, "ms_per_batch": ms,
                                  "ms_each_pass": [t * 1e3 for t in times],
                                  # per generate call: the intervals between its decoding steps (its first, with the prefill, left out)
                                  "token_ms": [(b - a) * 1e3 for g in range(len(stamps) // max(args.generate, 1))
                                               for a, b in zip(stamps[g * args.generate:(g + 1) * args.generate][:-1],
                                                               stamps[g * args.generate + 1:(g + 1) * args.generate])],
                                  "tokens": len(stamps)}))


if __name__ == "__main__":
    main()
