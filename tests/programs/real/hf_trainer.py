#!/usr/bin/env python3
"""Fine-tuning with transformers' ``Trainer``, as its text-classification docs write it:
``BertForSequenceClassification(BertConfig(...))`` (random weights), a tokenised dataset of
reviews (a WordPiece ``BertTokenizer`` over a vocabulary written to a temporary file, no
download), ``DataCollatorWithPadding``, ``TrainingArguments`` with
``gradient_accumulation_steps``, ``eval_strategy="steps"`` (an evaluation over its own
dataset every ``--eval-steps`` optimizer steps; 0: none, the Trainer's default
``eval_strategy="no"``) and ``compute_metrics``, then ``trainer.train()``. No profiler, no perfdoctor. Needs ``accelerate`` (the Trainer does).

Its own timer, a ``TrainerCallback`` as users write one: each optimizer step from
``on_step_begin`` to ``on_step_end`` (its micro-batches: the fetch of the first is before
``on_step_begin``, so the ms are the step's work), and the Trainer's own
``train_runtime`` / ``train_steps_per_second``.

    python hf_trainer.py                                # CUDA (bf16), bert-base shape
    python hf_trainer.py --device cpu --layers 2 --dim 64 --heads 4 --samples 96 --batch 8 --accum 2
"""
import argparse
import json
import os
import random
import sys
import tempfile
import time

import torch
from transformers import (BertConfig, BertForSequenceClassification, DataCollatorWithPadding, Trainer, TrainerCallback,
                          TrainingArguments)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bert_classify import make_tokenizer, review  # noqa: E402  (the tokenizer and texts of the inference benchmark)


class Reviews(torch.utils.data.Dataset):
    def __init__(self, tokenizer, n, seed, max_words):
        rng = random.Random(seed)
        texts = [review(rng, rng.randint(4, max_words)) for _ in range(n)]
        self.enc = tokenizer(texts, truncation=True, max_length=128)
        self.labels = [rng.randint(0, 1) for _ in range(n)]

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return {"input_ids": self.enc["input_ids"][i], "attention_mask": self.enc["attention_mask"][i], "labels": self.labels[i]}


def compute_metrics(pred):
    return {"accuracy": float((pred.predictions.argmax(-1) == pred.label_ids).mean())}


class StepTimer(TrainerCallback):
    def __init__(self):
        self.ms, self.t0 = [], None

    def on_step_begin(self, args, state, control, **kwargs):
        self.t0 = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        if torch.cuda.is_available() and not args.use_cpu:
            torch.cuda.synchronize()
        self.ms.append((time.perf_counter() - self.t0) * 1e3)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", help="cuda, or cpu (TrainingArguments(use_cpu=True))")
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--dim", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--vocab", type=int, default=30522)
    p.add_argument("--samples", type=int, default=2048)
    p.add_argument("--eval-samples", type=int, default=256)
    p.add_argument("--max-words", type=int, default=60)
    p.add_argument("--batch", type=int, default=32, help="per_device_train_batch_size (and eval)")
    p.add_argument("--accum", type=int, default=2, help="gradient_accumulation_steps")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--eval-steps", type=int, default=10, help="0: no evaluation (eval_strategy='no')")
    p.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "hf-trainer-out"))
    args = p.parse_args()
    torch.manual_seed(0)
    cpu = args.device == "cpu"

    tokenizer, vocab = make_tokenizer(args.vocab)
    model = BertForSequenceClassification(BertConfig(vocab_size=vocab, hidden_size=args.dim, num_hidden_layers=args.layers,
                                                     num_attention_heads=args.heads, intermediate_size=4 * args.dim,
                                                     num_labels=2))
    targs = TrainingArguments(output_dir=args.out, use_cpu=cpu, bf16=not cpu, per_device_train_batch_size=args.batch,
                              per_device_eval_batch_size=args.batch, gradient_accumulation_steps=args.accum,
                              num_train_epochs=args.epochs, learning_rate=2e-5, weight_decay=0.01,
                              eval_strategy="steps" if args.eval_steps else "no", eval_steps=args.eval_steps or None,
                              logging_steps=args.eval_steps or 500, save_strategy="no", report_to=[],
                              disable_tqdm=True)
    timer = StepTimer()
    trainer = Trainer(model=model, args=targs, train_dataset=Reviews(tokenizer, args.samples, 0, args.max_words),
                      eval_dataset=Reviews(tokenizer, args.eval_samples, 1, args.max_words) if args.eval_steps else None,
                      data_collator=DataCollatorWithPadding(tokenizer), compute_metrics=compute_metrics if args.eval_steps else None,
                      callbacks=[timer])
    out = trainer.train()
    print(out.metrics)
    ms = timer.ms[1:]  # the first step's allocations left out
    print("RESULT " + json.dumps({"program": "hf_trainer", "step": "optimizer step", "optimizer_steps": out.global_step,
                                  "accum": args.accum, "ms_each": timer.ms, "ms_per_step": sum(ms) / len(ms),
                                  "train_runtime_s": out.metrics["train_runtime"],
                                  "train_steps_per_second": out.metrics["train_steps_per_second"]}))


if __name__ == "__main__":
    main()
