#!/usr/bin/env python3
"""Greedy decoding written by hand around a transformers model (no ``generate``), as
chat-server and tutorial code does it: a batch of prompts of different lengths, left-padded
with an attention mask, one prefill ``model(input_ids=..., attention_mask=...,
use_cache=True)``, then a ``while`` loop feeding back one token per sequence with
``past_key_values=out.past_key_values`` (a ``DynamicCache``) and the mask grown by one
column, finished sequences padded, and an early stop when every sequence has produced
``--eos`` (or ``--max-new-tokens``); the decoded ids streamed out with ``.tolist()`` each
token. ``LlamaForCausalLM(LlamaConfig(...))``, random weights, the EOS row of ``lm_head``
scaled up so that EOS comes at different lengths; ``torch.inference_mode()``.

Its own timer: ``time.perf_counter()`` per forward (the prefill and each decode forward,
from the previous one's end: the host work between them included); RESULT's
``ms_per_step`` the mean over every forward but the warm-up batch's, ``forwards_each`` per
batch (the prefill included).

    python hf_manual_decode.py                          # 1B-like shape, bf16, cuda
    python hf_manual_decode.py --device cpu --layers 2 --dim 64 --heads 4 --kv-heads 2 --ffn-dim 128 --vocab 256
"""
import argparse
import json
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def main():
    p = argparse.ArgumentParser(description="Greedy decode by hand with past_key_values and an EOS stop")
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--dim", type=int, default=2048)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--ffn-dim", type=int, default=8192)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--max-prompt", type=int, default=32)
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--batches", type=int, default=3, help="prompt batches after a warm-up one")
    p.add_argument("--eos", type=int, default=2)
    p.add_argument("--eos-boost", type=float, default=4.0, help="scale of the EOS row of lm_head (random weights)")
    p.add_argument("--device", default="cuda")
    args = p.parse_args()

    torch.manual_seed(0)
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    config = LlamaConfig(vocab_size=args.vocab, hidden_size=args.dim, intermediate_size=args.ffn_dim,
                         num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
                         max_position_embeddings=args.max_prompt + args.max_new_tokens + 8, eos_token_id=args.eos,
                         pad_token_id=0)
    model = LlamaForCausalLM(config).to(device=device, dtype=dtype).eval()
    with torch.no_grad():
        # random weights: make EOS likely enough that sequences end at different lengths
        model.lm_head.weight[args.eos] *= args.eos_boost
    pad = config.pad_token_id

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    def make_batch(seed):
        g = torch.Generator().manual_seed(seed)
        lengths = torch.randint(4, args.max_prompt + 1, (args.batch,), generator=g).tolist()
        longest = max(lengths)
        ids = torch.full((args.batch, longest), pad, dtype=torch.long)
        mask = torch.zeros(args.batch, longest, dtype=torch.long)
        for i, n in enumerate(lengths):  # left padding, as a padding_side="left" tokenizer returns
            ids[i, longest - n:] = torch.randint(3, args.vocab, (n,), generator=g)
            mask[i, longest - n:] = 1
        return ids.to(device), mask.to(device)

    forwards_each, ms_each, outputs = [], [], []
    with torch.inference_mode():
        for b in range(args.batches + 1):
            input_ids, attention_mask = make_batch(b)
            times = []
            sync()
            last = time.perf_counter()
            out = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=True)
            past = out.past_key_values
            next_tokens = out.logits[:, -1, :].argmax(-1)
            finished = torch.zeros(args.batch, dtype=torch.bool, device=device)
            generated = [[] for _ in range(args.batch)]
            new = 0
            while True:
                next_tokens = torch.where(finished, torch.full_like(next_tokens, pad), next_tokens)
                for i, (tok, done) in enumerate(zip(next_tokens.tolist(), finished.tolist())):  # stream the new tokens out
                    if not done:
                        generated[i].append(tok)
                finished |= next_tokens == args.eos
                new += 1
                sync()
                now = time.perf_counter()
                times.append((now - last) * 1e3)
                last = now
                if finished.all() or new >= args.max_new_tokens:
                    break
                attention_mask = torch.cat([attention_mask, attention_mask.new_ones(args.batch, 1)], dim=1)
                out = model(input_ids=next_tokens[:, None], attention_mask=attention_mask, past_key_values=past, use_cache=True)
                past = out.past_key_values
                next_tokens = out.logits[:, -1, :].argmax(-1)
            forwards_each.append(len(times))
            ms_each.append(times)
            outputs.append([len(g) for g in generated])
            print(f"batch {b}: {len(times)} forwards, new tokens per sequence {outputs[-1]}, "
                  f"{sum(times) / len(times):.2f} ms/forward")
    timed = [t for ts in ms_each[1:] for t in ts]
    ms = sum(timed) / len(timed)
    print("RESULT " + json.dumps({"program": "hf_manual_decode", "step": "one forward (the prefill or a decode token)",
                                  "ms_per_step": round(ms, 4), "ms_per_token": round(ms, 4), "forwards": len(timed),
                                  "warmup_forwards": forwards_each[0], "forwards_each": forwards_each,
                                  "new_tokens_each": outputs, "ms_each_batch": [round(sum(ts), 3) for ts in ms_each],
                                  "device": str(device)}))


if __name__ == "__main__":
    main()
