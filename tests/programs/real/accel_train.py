#!/usr/bin/env python3
"""Fine-tuning loop in the shape of transformers' ``run_glue_no_trainer.py`` (Hugging Face
``accelerate``): ``model, optimizer, train_dataloader, eval_dataloader, lr_scheduler =
accelerator.prepare(...)``, per batch ``with accelerator.accumulate(model):`` the forward
(``outputs = model(**batch)``, ``outputs.loss``), ``accelerator.backward(loss)``,
``accelerator.clip_grad_norm_`` when ``accelerator.sync_gradients``, then ``optimizer.step()``,
``lr_scheduler.step()``, ``optimizer.zero_grad()`` called on EVERY batch — the prepared
optimizer and scheduler do nothing on the batches that only accumulate, as accelerate's do;
``completed_steps`` counts optimizer steps (what the Trainer calls ``global_step``); after
each epoch an evaluation over ``eval_dataloader`` under ``torch.no_grad()``.
``transformers.BertForSequenceClassification(BertConfig(...))``, random token ids of random
lengths padded per batch by a collate function (``DataCollatorWithPadding``'s output),
AdamW, ``get_scheduler("linear", ...)``.

accelerate's own ``Accelerator`` (needs ``accelerate``): its ``AcceleratedOptimizer.step`` /
``zero_grad`` act only when gradients sync; ``backward`` divides the loss by
``gradient_accumulation_steps``; the prepared DataLoader (``DataLoaderShard``) fetches one
batch ahead to know the last one, where gradients sync whatever the count.

Its own timer: ``time.perf_counter()`` at each optimizer step's end (``completed_steps``
incremented), each step from the previous one's end (an epoch's first from the epoch's
start), the evaluation timed apart; ``ms_per_step`` the mean after the first step.

    python accel_train.py                          # bert-base-sized, batch 32, accumulation 4, cuda
    python accel_train.py --device cpu --layers 2 --dim 64 --heads 4 --batch-size 8 --samples 80 --accum 4
"""
import argparse
import json
import math
import random
import time

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader, Dataset
from transformers import BertConfig, BertForSequenceClassification, get_scheduler


# --- the script ---

class RandomTextDataset(Dataset):
    """Tokenised sentences (random ids, random lengths) and labels, as ``dataset.map(tokenize)`` leaves them."""

    def __init__(self, n, vocab, max_len, num_labels, seed):
        rng = random.Random(seed)
        self.items = []
        for _ in range(n):
            length = rng.randint(8, max_len)
            ids = [101] + [rng.randrange(1000, vocab) for _ in range(length - 2)] + [102]
            self.items.append({"input_ids": ids, "labels": rng.randrange(num_labels)})

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def collate(features):
    # DataCollatorWithPadding: pad to the batch's longest, an attention mask
    longest = max(len(f["input_ids"]) for f in features)
    ids = torch.zeros(len(features), longest, dtype=torch.long)
    mask = torch.zeros(len(features), longest, dtype=torch.long)
    for i, f in enumerate(features):
        ids[i, :len(f["input_ids"])] = torch.tensor(f["input_ids"])
        mask[i, :len(f["input_ids"])] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": torch.tensor([f["labels"] for f in features])}


def main():
    p = argparse.ArgumentParser(description="Finetune a transformers model on a text classification task (accelerate-style)")
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--dim", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--vocab", type=int, default=30522)
    p.add_argument("--max-len", type=int, default=128)
    p.add_argument("--samples", type=int, default=2048)
    p.add_argument("--eval-samples", type=int, default=256)
    p.add_argument("--batch-size", "--per_device_train_batch_size", type=int, default=32)
    p.add_argument("--accum", "--gradient_accumulation_steps", type=int, default=4)
    p.add_argument("--epochs", "--num_train_epochs", type=int, default=2)
    p.add_argument("--lr", "--learning_rate", type=float, default=5e-5)
    p.add_argument("--warmup-steps", type=int, default=0)
    p.add_argument("--max-grad-norm", type=float, default=1.0)
    p.add_argument("--device", default=None, help="cpu: Accelerator(cpu=True); else the device accelerate finds")
    args = p.parse_args()

    torch.manual_seed(42)
    accelerator = Accelerator(gradient_accumulation_steps=args.accum, cpu=args.device == "cpu")
    config = BertConfig(vocab_size=args.vocab, hidden_size=args.dim, num_hidden_layers=args.layers,
                        num_attention_heads=args.heads, intermediate_size=4 * args.dim,
                        max_position_embeddings=max(512, args.max_len), num_labels=2)
    model = BertForSequenceClassification(config)
    train_dataset = RandomTextDataset(args.samples, args.vocab, args.max_len, 2, seed=0)
    eval_dataset = RandomTextDataset(args.eval_samples, args.vocab, args.max_len, 2, seed=1)
    train_dataloader = DataLoader(train_dataset, shuffle=True, collate_fn=collate, batch_size=args.batch_size)
    eval_dataloader = DataLoader(eval_dataset, collate_fn=collate, batch_size=args.batch_size)

    no_decay = ["bias", "LayerNorm.weight"]
    optimizer_grouped_parameters = [
        {"params": [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)], "weight_decay": 0.01},
        {"params": [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(optimizer_grouped_parameters, lr=args.lr)
    num_update_steps_per_epoch = math.ceil(len(train_dataloader) / args.accum)
    max_train_steps = args.epochs * num_update_steps_per_epoch
    lr_scheduler = get_scheduler("linear", optimizer=optimizer, num_warmup_steps=args.warmup_steps,
                                 num_training_steps=max_train_steps)
    model, optimizer, train_dataloader, eval_dataloader, lr_scheduler = accelerator.prepare(
        model, optimizer, train_dataloader, eval_dataloader, lr_scheduler)

    accelerator.print(f"***** Running training *****  examples {len(train_dataset)}, epochs {args.epochs}, "
                      f"batch {args.batch_size}, accumulation {args.accum}, optimization steps {max_train_steps}")
    completed_steps = micro_batches = 0
    ms_each, eval_batches = [], 0
    for epoch in range(args.epochs):
        model.train()
        total_loss = 0.0
        accelerator.wait_for_everyone()
        last = time.perf_counter()
        for step, batch in enumerate(train_dataloader):
            with accelerator.accumulate(model):
                outputs = model(**batch)
                loss = outputs.loss
                total_loss += loss.detach().float()
                accelerator.backward(loss)
                if accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(model.parameters(), args.max_grad_norm)
                optimizer.step()
                lr_scheduler.step()
                optimizer.zero_grad()
            micro_batches += 1
            # Checks if the accelerator has performed an optimization step behind the scenes
            if accelerator.sync_gradients:
                completed_steps += 1
                accelerator.wait_for_everyone()
                now = time.perf_counter()
                ms_each.append((now - last) * 1e3)
                last = now

        model.eval()
        correct = seen = 0
        for step, batch in enumerate(eval_dataloader):
            with torch.no_grad():
                outputs = model(**batch)
            predictions = outputs.logits.argmax(dim=-1)
            correct += (predictions == batch["labels"]).sum().item()
            seen += len(predictions)
            eval_batches += 1
        accelerator.print(f"epoch {epoch}: accuracy {correct / seen:.4f}, train_loss {total_loss.item() / (step + 1):.4f}, "
                          f"lr {lr_scheduler.get_last_lr()[0]:.2e}, step {completed_steps}")

    ms_per_step = sum(ms_each[1:]) / max(len(ms_each) - 1, 1)
    accelerator.print(f"train: {ms_per_step:.2f} ms per optimization step over {completed_steps} steps "
                      f"({micro_batches} batches)")
    print("RESULT " + json.dumps({"program": "accel_train", "step": "optimizer step (gradient accumulation)",
                                  "ms_per_step": round(ms_per_step, 4), "optimizer_steps": completed_steps,
                                  "micro_batches": micro_batches, "eval_batches": eval_batches, "accum": args.accum,
                                  "ms_per_micro_batch": round(sum(ms_each) / micro_batches, 4),
                                  "ms_each": [round(m, 4) for m in ms_each], "device": str(accelerator.device),
                                  "mixed_precision": accelerator.mixed_precision}), flush=True)


if __name__ == "__main__":
    main()
