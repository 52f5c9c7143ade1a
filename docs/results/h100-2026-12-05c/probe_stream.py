# hf_stream probe (2026-12-05, H100): HF generate on the main thread vs in a threading.Thread, with and without a
# TextIteratorStreamer. Run from the repository root on a CUDA machine: python3 docs/results/h100-2026-12-05c/probe_stream.py
import sys, time, threading, torch
sys.path.insert(0, "tests/programs/real")
from bert_classify import make_tokenizer
from transformers import LlamaConfig, LlamaForCausalLM, TextIteratorStreamer
tok, vocab = make_tokenizer(32000)
cfg = LlamaConfig(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                  vocab_size=vocab, pad_token_id=tok.pad_token_id, eos_token_id=tok.sep_token_id)
model = LlamaForCausalLM(cfg).to("cuda", torch.bfloat16).eval()
inputs = tok("how fast is this model today", return_tensors="pt", return_token_type_ids=False).to("cuda")
N = 48
def gen(streamer=None):
    model.generate(**inputs, max_new_tokens=N, min_new_tokens=N, do_sample=False, streamer=streamer)
def timed(label, fn):
    fn(); torch.cuda.synchronize()
    t = time.perf_counter(); fn(); torch.cuda.synchronize()
    print(f"{label}: {(time.perf_counter() - t) * 1e3 / N:.2f} ms/token", flush=True)
def in_thread(streamer_too, consume):
    def run():
        s = TextIteratorStreamer(tok, skip_prompt=True, skip_special_tokens=True) if streamer_too else None
        th = threading.Thread(target=gen, kwargs={"streamer": s}); th.start()
        if s is not None and consume:
            for _ in s: pass
        th.join()
    return run
timed("main thread, no streamer", lambda: gen())
timed("thread, streamer not consumed", in_thread(True, False))
timed("thread, no streamer", in_thread(False, False))
timed("thread, streamer consumed by main", in_thread(True, True))
print("switchinterval", sys.getswitchinterval(), "python", sys.version.split()[0])
