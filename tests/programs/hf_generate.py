"""Plain Hugging Face decode, as a user writes it (no perfdoctor import, no annotation).

A Llama with random weights (``--config tiny`` for the CPU tests, ``1b`` for the
Llama-3.2-1B shape on a GPU), one warm-up ``generate``, then ``--runs`` timed ``generate``
calls of ``--tokens`` new tokens each (greedy, no early stop). It prints its own speed,
measured around the timed calls (synchronised on a GPU):

    hf generate: 61.234 ms/token, 16.3 tokens/s (3 runs of 32 tokens)
    ms per run: 1963.101 1958.744 1955.020
    tokens generated: 104

``tokens generated`` counts every new token of every call, warm-up included: one model
forward per token, the step ``perfdoctor run`` must find on its own.
"""

import argparse
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

CONFIGS = {
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=256, max_position_embeddings=512),
    # Llama-3.2-1B's shape (random weights)
    "1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
               num_key_value_heads=8, vocab_size=128256, max_position_embeddings=4096, rope_theta=500000.0,
               tie_word_embeddings=True),
}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--config", choices=sorted(CONFIGS), default="tiny")
    p.add_argument("--tokens", type=int, default=16, help="new tokens per timed generate")
    p.add_argument("--warmup-tokens", type=int, default=4, help="new tokens of the warm-up generate")
    p.add_argument("--runs", type=int, default=2, help="timed generate calls")
    p.add_argument("--prompt-len", type=int, default=8)
    args = p.parse_args()
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    dtype = torch.bfloat16 if cuda else torch.float32
    torch.manual_seed(0)
    config = LlamaConfig(**CONFIGS[args.config], bos_token_id=1, eos_token_id=2, pad_token_id=0)
    torch.set_default_dtype(dtype)
    with device:
        model = LlamaForCausalLM(config)
    torch.set_default_dtype(torch.float32)
    model.eval()
    prompt = torch.randint(3, config.vocab_size, (1, args.prompt_len), device=device)
    mask = torch.ones_like(prompt)

    def generate(n: int) -> int:
        out = model.generate(input_ids=prompt, attention_mask=mask, max_new_tokens=n, min_new_tokens=n,
                             do_sample=False, pad_token_id=0)
        return out.shape[1] - prompt.shape[1]

    total = generate(args.warmup_tokens)
    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    timed, each = 0, []
    for _ in range(args.runs):
        start = time.perf_counter()
        timed += generate(args.tokens)
        if cuda:
            torch.cuda.synchronize()
        each.append((time.perf_counter() - start) * 1e3)
    seconds = time.perf_counter() - t0
    total += timed
    print(f"hf generate: {seconds / timed * 1e3:.3f} ms/token, {timed / seconds:.1f} tokens/s ({args.runs} runs of {args.tokens} tokens)")
    print("ms per run:", " ".join(f"{ms:.3f}" for ms in each))
    print(f"tokens generated: {total}")


if __name__ == "__main__":
    main()
