#!/usr/bin/env python3
"""A chat app's streaming reply, as the transformers docs' "Streaming" section and every Gradio
chatbot write it: ``model.generate(**inputs, streamer=TextIteratorStreamer(tokenizer,
skip_prompt=True), max_new_tokens=N)`` started in a ``threading.Thread``, the main thread
iterating the streamer and printing each piece of text as it comes. The model is
``LlamaForCausalLM(LlamaConfig(...))`` (random weights, no download), the tokenizer a WordPiece
vocabulary written here (bert_classify.py's); ``min_new_tokens`` keeps every reply at N.

Its own timer: the main thread notes the time each piece of text arrives (the streamer puts
one per token whose text is complete), as a chat UI's tokens/s does; RESULT's ``ms_per_token``
is the mean gap between pieces after the first of each reply (the first waits for the
prefill), ``ms_per_step`` the same, and ``reply_s`` each reply's wall time.

    python hf_stream.py                                       # 1B shape, bf16, CUDA
    python hf_stream.py --device cpu --layers 2 --dim 64 --heads 4 --kv-heads 2 --ffn-dim 128 --tokens 32 --replies 3
"""
import argparse
import json
import os
import sys
import time
from threading import Thread

import torch
from transformers import LlamaConfig, LlamaForCausalLM, TextIteratorStreamer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bert_classify import make_tokenizer  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--dim", type=int, default=2048)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--ffn-dim", type=int, default=8192)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--tokens", type=int, default=128, help="max_new_tokens (and min_new_tokens)")
    p.add_argument("--replies", type=int, default=4, help="chat turns, the first a warm-up")
    args = p.parse_args()
    torch.manual_seed(0)
    dtype = torch.bfloat16 if args.device.startswith("cuda") else torch.float32
    tokenizer, vocab = make_tokenizer(args.vocab)
    config = LlamaConfig(hidden_size=args.dim, intermediate_size=args.ffn_dim, num_hidden_layers=args.layers,
                         num_attention_heads=args.heads, num_key_value_heads=args.kv_heads, vocab_size=vocab,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.sep_token_id)
    model = LlamaForCausalLM(config).to(args.device, dtype).eval()

    prompts = ["how fast is this model today", "tell me a story about a good movie", "what is the best plot", "why"]
    gaps, reply_s = [], []
    for turn in range(args.replies):
        inputs = tokenizer(prompts[turn % len(prompts)], return_tensors="pt", return_token_type_ids=False).to(args.device)
        streamer = TextIteratorStreamer(tokenizer, skip_prompt=True, skip_special_tokens=True)
        kwargs = dict(**inputs, streamer=streamer, max_new_tokens=args.tokens, min_new_tokens=args.tokens, do_sample=False)
        t0 = time.perf_counter()
        thread = Thread(target=model.generate, kwargs=kwargs)
        thread.start()
        arrived, text = [], ""
        for piece in streamer:
            arrived.append(time.perf_counter())
            text += piece
        thread.join()
        reply_s.append(time.perf_counter() - t0)
        if turn:  # the first reply warms up
            gaps += [(b - a) * 1e3 for a, b in zip(arrived[1:], arrived[2:])]
        print(f"reply {turn}: {len(arrived)} pieces, {reply_s[-1]:.2f} s: {text[:60]!r}")
    ms = sum(gaps) / len(gaps)
    print("RESULT " + json.dumps({"program": "hf_stream", "ms_per_token": ms, "ms_per_step": ms, "tokens_per_s": 1e3 / ms,
                                  "reply_s": reply_s, "tokens": args.tokens, "replies": args.replies}))


if __name__ == "__main__":
    main()
