"""Batched generation with Hugging Face transformers: beam search or top-k sampling over a
batch of prompts of different lengths, left-padded with an attention mask (what a
tokenizer with ``padding_side="left"`` returns), random weights.

Builds LlamaForCausalLM from a LlamaConfig (no download), makes ``--batch`` prompts of
random lengths between ``--min-prompt`` and ``--max-prompt`` tokens, pads them on the left,
runs one warm-up generate then ``--generations`` timed ones: ``--mode beam``
(``num_beams=4, early_stopping=True, length_penalty=1.0``) or ``--mode sample``
(``do_sample=True, top_k=50, temperature=0.8``); an EOS token (``--eos``) ends sequences at
different lengths. A forward pre-hook counts the model's forwards (RESULT's ``forwards``:
one per generated position, the prefill included), and the speed is printed per forward
and per generated token.

    python hf_beam.py                                   # CUDA, 1B-ish shape, bf16
    python hf_beam.py --device cpu --layers 2 --dim 64 --heads 4 --kv-heads 2 \
        --ffn-dim 128 --vocab 256 --tokens 16 --generations 2    # CPU
"""
import argparse
import json
import random
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=["beam", "sample"], default="beam")
    p.add_argument("--beams", type=int, default=4)
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--dim", type=int, default=2048)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--ffn-dim", type=int, default=8192)
    p.add_argument("--vocab", type=int, default=128256)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--min-prompt", type=int, default=8)
    p.add_argument("--max-prompt", type=int, default=48)
    p.add_argument("--tokens", type=int, default=64, help="max_new_tokens")
    p.add_argument("--eos", type=int, default=2)
    p.add_argument("--generations", type=int, default=3)
    p.add_argument("--device", default="cuda")
    return p.parse_args()


def main():
    args = parse_args()
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    torch.manual_seed(0)
    rng = random.Random(0)
    config = LlamaConfig(hidden_size=args.dim, intermediate_size=args.ffn_dim, num_hidden_layers=args.layers,
                         num_attention_heads=args.heads, num_key_value_heads=args.kv_heads, vocab_size=args.vocab,
                         max_position_embeddings=max(4096, args.max_prompt + args.tokens), tie_word_embeddings=True,
                         bos_token_id=1, eos_token_id=args.eos, pad_token_id=0)
    with device:
        model = LlamaForCausalLM(config)
    model = model.to(dtype).eval()

    forwards = [0]
    model.register_forward_pre_hook(lambda m, a: forwards.__setitem__(0, forwards[0] + 1))

    # what tokenizer(prompts, padding=True, padding_side="left", return_tensors="pt") gives
    prompts = [[1] + [rng.randrange(3, args.vocab) for _ in range(rng.randint(args.min_prompt, args.max_prompt) - 1)]
               for _ in range(args.batch)]
    width = max(map(len, prompts))
    input_ids = torch.tensor([[0] * (width - len(q)) + q for q in prompts], device=device)
    attention_mask = torch.tensor([[0] * (width - len(q)) + [1] * len(q) for q in prompts], device=device)
    if args.mode == "beam":
        kwargs = dict(num_beams=args.beams, early_stopping=True, length_penalty=1.0, do_sample=False)
    else:
        kwargs = dict(do_sample=True, top_k=50, temperature=0.8)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    def run():
        out = model.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=args.tokens,
                             pad_token_id=0, eos_token_id=args.eos, **kwargs)
        return out

    with torch.no_grad():
        run()  # warm-up
        sync()
        warm = forwards[0]
        times, spans_ns, fwd_each, new_tokens = [], [], [], 0
        for i in range(args.generations):
            f0 = forwards[0]
            t0 = time.perf_counter_ns()
            out = run()
            sync()
            t1 = time.perf_counter_ns()
            dt = (t1 - t0) / 1e9
            times.append(dt)
            spans_ns.append((t0, t1))
            fwd_each.append(forwards[0] - f0)
            gen = out[:, width:]
            n = int(((gen != 0) & (gen != args.eos)).sum()) + int((gen == args.eos).any(1).sum())
            new_tokens += n
            print(f"generate {i + 1}: {fwd_each[-1]} forwards, {n} new tokens in {dt:.3f} s, {n / dt:.1f} tokens/s")

    ms = sum(times) / sum(fwd_each) * 1e3
    print(f"average: {ms:.3f} ms/forward, {new_tokens / sum(times):.1f} tokens/s")
    print("RESULT " + json.dumps({"program": "hf_beam", "mode": args.mode, "step": "one forward (a generated position, the prefill included)",
                                  "ms_per_step": ms, "ms_per_forward": ms, "tokens_per_s": new_tokens / sum(times),
                                  "warmup_forwards": warm, "forwards": sum(fwd_each), "forwards_each": fwd_each,
                                  "ms_each_generate": [t * 1e3 for t in times], "perf_counter_ns_each_generate": spans_ns,
                                  "batch": args.batch}))


if __name__ == "__main__":
    main()
