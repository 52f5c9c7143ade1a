# Speculative decoding in the style of pytorch-labs/gpt-fast (generate.py's
# speculative_decode), random weights: a draft Transformer proposes --speculate-k tokens one
# decode_one_token call at a time, then the target verifies all k + 1 in one
# model_forward call; accepted tokens by the draft/target probability ratio, as gpt-fast
# samples them. Model, KV cache and sampling from compiled_decode.py (gpt-fast's model.py and
# generate.py). With --compile (gpt-fast's flag):
#     decode_one_token = torch.compile(decode_one_token, mode="reduce-overhead", fullgraph=True)
#     model_forward = torch.compile(model_forward, mode="reduce-overhead", fullgraph=True)
# (--compile-backend eager: a quick CPU smoke test of the same calls). The draft is the
# target's first --draft-layers layers, so that it agrees now and then.
#
# Its own timer: torch.cuda.synchronize() + time.perf_counter() around each speculative
# iteration (the draft's k tokens, the verify, the acceptance), after one warm-up generation.
#
#   python spec_decode.py                                     # Llama-3.2-1B target, 2-layer draft, cuda
#   python spec_decode.py --layers 4 --draft-layers 1 --dim 64 --heads 4 --kv-heads 2 --vocab 256 \
#       --tokens 32 --generations 2 --speculate-k 4 --device cpu [--compile --compile-backend eager]
import argparse
import json
import time

import torch

import compiled_decode
from compiled_decode import ModelArgs, Transformer, device_sync, logits_to_probs, multinomial_sample_one_no_sync


def model_forward(model, x, input_pos):
    return model(x, input_pos)


def speculative_decode(model, draft_model, cur_token, input_pos, speculate_k=8, **sampling_kwargs):
    device = cur_token.device
    orig_input_pos = torch.tensor([input_pos], dtype=torch.int64, device=device)
    draft_tokens, draft_probs = compiled_decode.decode_n_tokens(draft_model, cur_token.view(1, -1), orig_input_pos.clone(),
                                                                speculate_k, **sampling_kwargs)
    draft_tokens = torch.cat(draft_tokens)
    # the target verifies the draft's k tokens (and samples one more) in one forward
    target_logits = model_forward(model, torch.cat([cur_token.view(1), draft_tokens]).view(1, -1),
                                  torch.arange(input_pos, input_pos + speculate_k + 1, device=device))
    target_probs = logits_to_probs(target_logits[0], **sampling_kwargs)
    draft_probs = torch.stack(draft_probs)
    p = draft_probs[torch.arange(0, speculate_k, device=device), draft_tokens]
    q = target_probs[torch.arange(0, speculate_k, device=device), draft_tokens]
    accept_draft_prob = torch.minimum(torch.ones(()), q[:speculate_k] / p)
    rejected_locations = (torch.rand_like(accept_draft_prob) > accept_draft_prob).nonzero()
    if rejected_locations.shape[0] == 0:  # every draft token accepted
        last_token = multinomial_sample_one_no_sync(target_probs[-1])
        model_forward(draft_model, draft_tokens[-1].view(1, -1), orig_input_pos + speculate_k)  # fill the draft's cache
        return torch.cat([draft_tokens, last_token])
    accept_length = rejected_locations[0].item()
    new = target_probs[accept_length] - draft_probs[accept_length]
    new = torch.where(new > 0, new, 0.0)
    next_token = multinomial_sample_one_no_sync(new / new.sum())
    return torch.cat([draft_tokens[:accept_length], next_token])


@torch.no_grad()
def generate(model, draft_model, prompt, max_new_tokens, speculate_k, device, iter_times, **sampling_kwargs):
    """Returns (sequence, accepted tokens per iteration)."""
    T = prompt.size(0)
    T_new = T + max_new_tokens
    with torch.device(device):
        model.setup_caches(max_batch_size=1, max_seq_length=T_new + speculate_k + 1)
        draft_model.setup_caches(max_batch_size=1, max_seq_length=T_new + speculate_k + 1)
    seq = torch.empty(T_new, dtype=prompt.dtype, device=device)
    seq[:T] = prompt
    input_pos = torch.arange(0, T, device=device)
    next_token = compiled_decode.prefill(model, prompt.view(1, -1), input_pos, **sampling_kwargs).clone()
    compiled_decode.prefill(draft_model, prompt.view(1, -1), input_pos, **sampling_kwargs)
    seq[T] = next_token
    input_pos, accepted = T, []
    while input_pos < T_new - 1:
        device_sync(device)
        t0 = time.perf_counter()
        cur_token = next_token.view(())
        next_tokens = speculative_decode(model, draft_model, cur_token, input_pos, speculate_k, **sampling_kwargs)
        num_added = min(T_new - input_pos - 1, len(next_tokens))
        seq[input_pos + 1 : input_pos + num_added + 1] = next_tokens[:num_added]
        input_pos = input_pos + num_added
        next_token = next_tokens[-1]
        device_sync(device)
        iter_times.append(time.perf_counter() - t0)
        accepted.append(len(next_tokens) - 1)
    return seq, accepted


def main():
    parser = argparse.ArgumentParser(description="gpt-fast style speculative decoding (random weights)")
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--draft-layers", type=int, default=2)
    parser.add_argument("--dim", type=int, default=2048)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=128256)
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=200, help="max_new_tokens per generation")
    parser.add_argument("--generations", type=int, default=3, help="timed generations, after one warm-up")
    parser.add_argument("--speculate-k", type=int, default=5)
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--top-k", type=int, default=200)
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--compile-backend", default="inductor")
    parser.add_argument("--device", type=str, default="cuda")
    args = parser.parse_args()

    device = args.device
    precision = torch.bfloat16 if "cuda" in device else torch.float32
    torch.manual_seed(1234)
    config = ModelArgs(block_size=max(2048, args.prompt_len + args.tokens + args.speculate_k + 1), vocab_size=args.vocab,
                       n_layer=args.layers, n_head=args.heads, dim=args.dim, intermediate_size=4 * args.dim,
                       n_local_heads=args.kv_heads, head_dim=args.dim // args.heads)
    with torch.device("meta"):
        model = Transformer(config)
    model = model.to_empty(device=device)
    for p in model.parameters():  # random weights: no checkpoint here
        torch.nn.init.normal_(p, std=0.02) if p.dim() > 1 else torch.nn.init.ones_(p)
    model = model.to(dtype=precision).eval()
    draft_config = ModelArgs(**{**config.__dict__, "n_layer": args.draft_layers})
    with torch.device("meta"):
        draft_model = Transformer(draft_config)
    draft_model = draft_model.to_empty(device=device)
    draft_model.load_state_dict(model.state_dict(), strict=False)  # the target's first layers, embedding and head
    draft_model = draft_model.to(dtype=precision).eval()

    global model_forward
    if args.compile:
        mode = "reduce-overhead" if args.compile_backend == "inductor" else None
        compiled_decode.decode_one_token = torch.compile(compiled_decode.decode_one_token, mode=mode, fullgraph=True,
                                                         backend=args.compile_backend)
        model_forward = torch.compile(model_forward, mode=mode, fullgraph=True, backend=args.compile_backend)

    prompt = torch.randint(0, args.vocab, (args.prompt_len,), dtype=torch.int, device=device)
    sampling = {"temperature": args.temperature, "top_k": args.top_k}
    warmup = []
    generate(model, draft_model, prompt, args.tokens, args.speculate_k, device, warmup, **sampling)  # warm-up (compiles)
    iter_times, accepted, tokens = [], [], 0
    for i in range(args.generations):
        t0 = time.perf_counter()
        y, acc = generate(model, draft_model, prompt, args.tokens, args.speculate_k, device, iter_times, **sampling)
        device_sync(device)
        t = time.perf_counter() - t0
        accepted += acc
        tokens += y.size(0) - prompt.size(0) - 1
        print(f"Time for inference {i + 1}: {t:.02f} sec total, {(y.size(0) - prompt.size(0)) / t:.02f} tokens/sec, "
              f"{len(acc)} iterations, mean accepted {sum(acc) / len(acc):.2f}")
    ms = 1e3 * sum(iter_times) / len(iter_times)
    print(f"Speculative iterations: {ms:.3f} ms each, {tokens / sum(iter_times):.1f} tokens/s")
    print("RESULT " + json.dumps({"program": "spec_decode", "step": "speculative iteration (k drafts + one verify)",
                                  "ms_per_step": ms, "iters": len(iter_times), "tokens": tokens,
                                  "ms_per_token": 1e3 * sum(iter_times) / tokens, "speculate_k": args.speculate_k,
                                  "mean_accepted": sum(accepted) / len(accepted), "compile": args.compile,
                                  "warmup_iters": len(warmup),
                                  "all_accepted": accepted.count(args.speculate_k)}))


if __name__ == "__main__":
    main()
