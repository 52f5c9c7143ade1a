"""Greedy decoding speed of a mixture-of-experts model with Hugging Face transformers
(random weights): MixtralForCausalLM from a MixtralConfig (8 experts, 2 per token; a
small Mixtral's shape by default, no download), one warm-up generate, then --generations
timed model.generate(max_new_tokens=N, do_sample=False) calls, each printed with its
speed, and their average. The router picks the experts per token, so the work per token
depends on the data (transformers' own MoE block, as the model card runs it).

    python moe_generate.py                                   # bf16 on cuda
    python moe_generate.py --device cpu --layers 2 --dim 64 --heads 4 --kv-heads 2 \
        --ffn-dim 128 --vocab 256 --tokens 8 --generations 2  # CPU smoke test
"""
import argparse
import json
import time

import torch
from transformers import MixtralConfig, MixtralForCausalLM


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--dim", type=int, default=1024)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--ffn-dim", type=int, default=3584)
    p.add_argument("--experts", type=int, default=8)
    p.add_argument("--experts-per-token", type=int, default=2)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--tokens", type=int, default=64, help="max_new_tokens")
    p.add_argument("--generations", type=int, default=3)
    p.add_argument("--device", default="cuda")
    return p.parse_args()


def main():
    args = parse_args()
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    torch.manual_seed(0)
    config = MixtralConfig(
        hidden_size=args.dim, intermediate_size=args.ffn_dim, num_hidden_layers=args.layers,
        num_attention_heads=args.heads, num_key_value_heads=args.kv_heads, vocab_size=args.vocab,
        num_local_experts=args.experts, num_experts_per_tok=args.experts_per_token,
        max_position_embeddings=max(4096, args.prompt_len + args.tokens), bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )
    with device:
        model = MixtralForCausalLM(config)
    model = model.to(dtype).eval()
    print(f"model: {sum(p.numel() for p in model.parameters()) / 1e9:.2f} B parameters, {dtype}, {device}")
    input_ids = torch.randint(3, config.vocab_size, (args.batch, args.prompt_len), device=device)
    attention_mask = torch.ones_like(input_ids)

    def run(n):
        out = model.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=n,
                             min_new_tokens=n, do_sample=False, pad_token_id=0)
        if device.type == "cuda":
            torch.cuda.synchronize()
        return out.shape[1] - input_ids.shape[1]

    with torch.no_grad():
        run(args.tokens)  # warm-up
        times, new_tokens = [], 0
        for i in range(args.generations):
            t0 = time.perf_counter()
            n = run(args.tokens)
            dt = time.perf_counter() - t0
            times.append(dt)
            new_tokens += n
            print(f"generate {i + 1}: {n} new tokens in {dt:.3f} s, {n * args.batch / dt:.1f} tokens/s")
    ms = sum(times) / new_tokens * 1e3
    tps = new_tokens * args.batch / sum(times)
    print(f"average: {ms:.3f} ms/token, {tps:.1f} tokens/s")
    print("RESULT " + json.dumps({"program": "moe_generate", "step": "decode token (one forward)", "ms_per_step": round(ms, 4),
                                  "ms_per_token": round(ms, 4), "tokens_per_s": round(tps, 2), "tokens": new_tokens,
                                  "batch": args.batch, "device": str(device)}))


if __name__ == "__main__":
    main()
