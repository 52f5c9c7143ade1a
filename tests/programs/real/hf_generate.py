"""Greedy decoding speed of a Llama with Hugging Face transformers (random weights).

Builds LlamaForCausalLM from a LlamaConfig (Llama-3.2-1B's shape by default, no download),
runs one warm-up generate (as long as the timed ones unless --warmup-tokens says otherwise),
then --generations timed model.generate(max_new_tokens=N, do_sample=False) calls and prints
the speed of each and their average.

A shorter warm-up (--warmup-tokens 8) leaves the first timed call slower: it reaches context
lengths the warm-up never did (on the H200 ~60 ms/token against 14-20 for the later calls;
19 against 1.7 ms on a CPU), and the average holds both.

    python hf_generate.py                                   # 1B shape, bf16 on cuda
    python hf_generate.py --device cpu --layers 2 --dim 64 --heads 4 --kv-heads 2 \
        --ffn-dim 128 --vocab 256 --tokens 8 --generations 2  # CPU smoke test
"""
import argparse
import json
import time

import torch
from transformers import CompileConfig, LlamaConfig, LlamaForCausalLM


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--dim", type=int, default=2048)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--ffn-dim", type=int, default=8192)
    p.add_argument("--vocab", type=int, default=128256)
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--tokens", type=int, default=128, help="max_new_tokens")
    p.add_argument("--warmup-tokens", type=int, default=None, help="new tokens of the warm-up generate (default: --tokens)")
    p.add_argument("--generations", type=int, default=3)
    p.add_argument("--dtype", choices=["bfloat16", "float16", "float32"], default=None,
                   help="default: bfloat16 on cuda, float32 on cpu")
    p.add_argument("--compile", action="store_true",
                   help="the transformers 4 docs' recipe: a static KV cache and model.forward = torch.compile(model.forward, "
                        "mode='reduce-overhead', fullgraph=True), generate's own compilation turned off (dies on "
                        "transformers 5.17 on CUDA: see below)")
    p.add_argument("--auto-compile", action="store_true",
                   help="transformers 5's way: a static KV cache only; generate compiles the forward of its decode steps "
                        "(on CUDA by itself; on a CPU a CompileConfig asks for it)")
    p.add_argument("--compile-backend", default="inductor", help="--auto-compile on a CPU: torch.compile's backend")
    p.add_argument("--device", default="cuda")
    return p.parse_args()


def main():
    args = parse_args()
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype) if args.dtype else (torch.bfloat16 if device.type == "cuda" else torch.float32)
    torch.manual_seed(0)

    config = LlamaConfig(
        hidden_size=args.dim,
        intermediate_size=args.ffn_dim,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        vocab_size=args.vocab,
        max_position_embeddings=max(4096, args.prompt_len + args.tokens),
        rope_theta=500000.0,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    t0 = time.perf_counter()
    with device:
        model = LlamaForCausalLM(config)
    model = model.to(dtype).eval()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params / 1e9:.2f} B parameters, {dtype}, {device} (built in {time.perf_counter() - t0:.1f} s)")
    if args.compile or args.auto_compile:
        model.generation_config.cache_implementation = "static"
    if args.compile:
        model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
        # On CUDA, transformers 5 also compiles the forward inside generate when the cache
        # is static: off, or the two compilations stack. Even so the recipe dies on
        # transformers 5.17 on the H200 ("accessing tensor output of CUDAGraphs that has been
        # overwritten by a subsequent run", in the static cache's index_copy_): transformers 5
        # creates the static cache's tensors lazily, inside the first compiled forward
        # (its prefill), so they are CUDA-graph outputs. --auto-compile is the way there.
        model.generation_config.disable_compile = True
    if args.auto_compile and device.type != "cuda":
        # generate compiles on CUDA, XPU and TPU only; this private flag asks for it anywhere
        compile_config = CompileConfig(backend=args.compile_backend)
        compile_config._compile_all_devices = True
        model.generation_config.compile_config = compile_config

    input_ids = torch.randint(3, config.vocab_size, (args.batch, args.prompt_len), device=device)
    attention_mask = torch.ones_like(input_ids)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    def run(n):
        out = model.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=n,
                             min_new_tokens=n, do_sample=False, pad_token_id=0)
        return out.shape[1] - input_ids.shape[1]

    with torch.no_grad():
        run(args.tokens if args.warmup_tokens is None else args.warmup_tokens)  # warm-up
        sync()
        times, new_tokens = [], 0
        for i in range(args.generations):
            t0 = time.perf_counter()
            n = run(args.tokens)
            sync()
            dt = time.perf_counter() - t0
            times.append(dt)
            new_tokens += n
            print(f"generate {i + 1}: {n} new tokens in {dt:.3f} s, {n * args.batch / dt:.1f} tokens/s")

    total = sum(times)
    ms = total / new_tokens * 1e3
    tps = new_tokens * args.batch / total
    print(f"average: {ms:.3f} ms/token, {tps:.1f} tokens/s")
    print("RESULT " + json.dumps({"program": "hf_generate", "step": "decode token (one forward)", "ms_per_step": round(ms, 4),
                                  "ms_per_token": round(ms, 4), "tokens_per_s": round(tps, 2), "tokens": new_tokens,
                                  "ms_per_token_each": [round(t / args.tokens * 1e3, 4) for t in times],
                                  "batch": args.batch, "device": str(device)}))


if __name__ == "__main__":
    main()
