"""Assisted (speculative) greedy decoding of a Llama with Hugging Face transformers (random weights).

The Hugging Face docs' recipe: ``model.generate(input_ids, assistant_model=assistant,
max_new_tokens=N, do_sample=False)``, target and draft both LlamaForCausalLM, the draft
with fewer layers. Each iteration of generate's assisted loop runs the draft a few times
(its own generate: --draft-tokens candidate tokens) and the target once over the
candidates; the target keeps those it agrees with and adds one of its own.

The draft is the target's first --draft-layers layers with its embedding and head (a
layer-skip draft): built from random weights alone the two models would never agree and
every iteration would yield one token. Sharing, they agree now and then, so the target
runs fewer forwards than there are tokens.

The program counts each model's forwards with a forward pre-hook and prints them with its
own timings: one warm-up generate, then --generations timed ones.

    python hf_assisted.py                                    # 1B target, 2-layer draft, bf16 on cuda
    python hf_assisted.py --device cpu --layers 4 --draft-layers 1 --dim 64 --heads 4 --kv-heads 2 \
        --ffn-dim 128 --vocab 256 --tokens 16 --generations 2 --draft-tokens 4 --confidence 0  # CPU smoke test
"""
import argparse
import json
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--draft-layers", type=int, default=2, help="the draft: the target's first layers")
    p.add_argument("--dim", type=int, default=2048)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--ffn-dim", type=int, default=8192)
    p.add_argument("--vocab", type=int, default=128256)
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--tokens", type=int, default=128, help="max_new_tokens")
    p.add_argument("--generations", type=int, default=3)
    p.add_argument("--draft-tokens", type=int, default=None,
                   help="the draft's num_assistant_tokens (default: transformers', 20)")
    p.add_argument("--confidence", type=float, default=None,
                   help="the draft's assistant_confidence_threshold: it stops drafting below it "
                        "(default: transformers', 0.4; 0 drafts --draft-tokens every iteration)")
    p.add_argument("--dtype", choices=["bfloat16", "float16", "float32"], default=None,
                   help="default: bfloat16 on cuda, float32 on cpu")
    p.add_argument("--device", default="cuda")
    return p.parse_args()


def llama(args, layers):
    return LlamaConfig(
        hidden_size=args.dim,
        intermediate_size=args.ffn_dim,
        num_hidden_layers=layers,
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


def main():
    args = parse_args()
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype) if args.dtype else (torch.bfloat16 if device.type == "cuda" else torch.float32)
    torch.manual_seed(0)

    t0 = time.perf_counter()
    with device:
        target = LlamaForCausalLM(llama(args, args.layers))
        draft = LlamaForCausalLM(llama(args, args.draft_layers))
    # the draft's layers are named as the target's first ones: its whole state dict is in the target's
    draft.load_state_dict({k: v for k, v in target.state_dict().items() if k in draft.state_dict()})
    target, draft = target.to(dtype).eval(), draft.to(dtype).eval()
    if args.draft_tokens is not None:
        draft.generation_config.num_assistant_tokens = args.draft_tokens
    if args.confidence is not None:
        draft.generation_config.assistant_confidence_threshold = args.confidence
    sizes = [sum(p.numel() for p in m.parameters()) / 1e9 for m in (target, draft)]
    print(f"target: {sizes[0]:.3f} B parameters, draft: {sizes[1]:.3f} B, {dtype}, {device} "
          f"(built in {time.perf_counter() - t0:.1f} s)")

    forwards = {"target": 0, "draft": 0}
    for role, model in (("target", target), ("draft", draft)):
        model.register_forward_pre_hook(lambda module, inputs, role=role: forwards.__setitem__(role, forwards[role] + 1))

    input_ids = torch.randint(3, target.config.vocab_size, (1, args.prompt_len), device=device)
    attention_mask = torch.ones_like(input_ids)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    def run():
        out = target.generate(input_ids=input_ids, attention_mask=attention_mask, assistant_model=draft,
                              max_new_tokens=args.tokens, min_new_tokens=args.tokens, do_sample=False, pad_token_id=0)
        return out.shape[1] - input_ids.shape[1]

    with torch.no_grad():
        run()  # warm-up
        sync()
        warmup = dict(forwards)
        times, new_tokens, each = [], 0, []
        for i in range(args.generations):
            before = dict(forwards)
            t0 = time.perf_counter()
            n = run()
            sync()
            dt = time.perf_counter() - t0
            times.append(dt)
            new_tokens += n
            each.append({role: forwards[role] - before[role] for role in forwards})
            print(f"generate {i + 1}: {n} new tokens in {dt:.3f} s, {n / dt:.1f} tokens/s, "
                  f"{each[-1]['target']} target and {each[-1]['draft']} draft forwards")

    total = sum(times)
    iterations = sum(e["target"] for e in each)  # one target forward per iteration of the assisted loop
    ms, ms_token = total / iterations * 1e3, total / new_tokens * 1e3
    print(f"average: {ms:.3f} ms/iteration, {ms_token:.3f} ms/token, {new_tokens / iterations:.2f} tokens/iteration")
    print("RESULT " + json.dumps({
        "program": "hf_assisted", "step": "assisted iteration (draft forwards, one target forward)",
        "ms_per_step": round(ms, 4), "ms_per_token": round(ms_token, 4), "tokens_per_s": round(new_tokens / total, 2),
        "tokens": new_tokens, "target_forwards": iterations, "draft_forwards": sum(e["draft"] for e in each),
        "warmup_forwards": warmup, "forwards_each": each, "ms_each": [round(t * 1e3, 4) for t in times],
        "device": str(device)}))


if __name__ == "__main__":
    main()
