"""Record small real Kineto traces of the workload kinds perfdoctor meets in the wild
(issue 20), on a CUDA GPU. Each scenario runs in its own process and writes
OUTDIR/h200-<name>.kineto.json.gz plus OUTDIR/<name>.facts.json (what the program knows
about itself: steps, kernels it launched from which thread, all-reduces, tokens).

    python3 scripts/record_wild_traces.py OUTDIR [NAME ...]

Scenarios:
  train          forward, backward (autograd thread), AdamW step; ProfilerStep#N
  train-ddp      the same under DistributedDataParallel, NCCL, world size 1
  compiled       torch.compile'd MLP inference (Triton kernels), record_function steps
  threads        each step launches work from the main thread and from a worker thread
  allreduce      NCCL all-reduce inside the step, sync then compute ("serial") and on a
                 side stream overlapped with compute ("overlap"), world size 1
  serve-eager    a decode server loop marking steps the way vLLM / SGLang do
  serve-graph    the same with the decode step replayed from a CUDA graph
  capture        a trace that records the CUDA-graph capture itself
  hf-unannotated an unmodified Hugging Face generate (1B Llama shape, random weights), no
                 step markers at all: 1 warm-up call, then 6 new tokens traced
  host-preprocess each step resizes an image on the host (scipy.ndimage.zoom in a user
                 function ``preprocess``), copies it to the GPU and runs an MLP; with_stack=True
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

SCENARIOS = ["hf-unannotated", "train", "train-ddp", "compiled", "threads", "allreduce", "serve-eager", "serve-graph", "capture", "host-preprocess"]


def profiler(**kw):
    from torch.profiler import ProfilerActivity, profile

    return profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], **kw)


def mlp(width=1024, depth=4):
    import torch

    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.LayerNorm(width), torch.nn.GELU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(width, 10)).cuda()


def train(ddp: bool) -> dict:
    import torch
    import torch.distributed as dist
    from torch.profiler import schedule

    model = mlp()
    if ddp:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29533")
        dist.init_process_group("nccl", rank=0, world_size=1)
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[0], bucket_cap_mb=1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(256, 1024, device="cuda")
    y = torch.randint(0, 10, (256,), device="cuda")
    with profiler(schedule=schedule(wait=1, warmup=1, active=4)) as prof:
        for _ in range(6):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            prof.step()
    torch.cuda.synchronize()
    if ddp:
        dist.destroy_process_group()
    return prof, {"steps_traced": 4, "workload": "training", "ddp": ddp}


def compiled() -> dict:
    import torch

    model = torch.compile(mlp().eval())
    x = torch.randn(8, 1024, device="cuda")
    with torch.no_grad():
        for _ in range(3):
            model(x)
        torch.cuda.synchronize()
        with profiler() as prof:
            for _ in range(5):
                with torch.profiler.record_function("infer_step"):
                    model(x)
            torch.cuda.synchronize()
    return prof, {"steps": 5, "step": "infer_step", "workload": "inference"}


def threads() -> dict:
    import torch

    a = torch.randn(2048, 2048, device="cuda")
    side = torch.cuda.Stream()
    per_step = {"main": 0, "worker": 0}

    def worker_work(done: threading.Event) -> None:
        with torch.cuda.stream(side):
            for _ in range(3):
                torch.mm(a, a)
        per_step["worker"] = 3
        done.set()

    for _ in range(2):
        torch.mm(a, a)
    torch.cuda.synchronize()
    with profiler() as prof:
        for _ in range(5):
            with torch.profiler.record_function("step"):
                done = threading.Event()
                t = threading.Thread(target=worker_work, args=(done,))
                t.start()
                for _ in range(4):
                    torch.relu(torch.mm(a, a))
                per_step["main"] = 8
                t.join()
                torch.cuda.synchronize()
    return prof, {"steps": 5, "step": "step", "kernels_per_step_main_thread": 8, "kernels_per_step_worker_thread": 3}


def allreduce() -> dict:
    import torch
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29534")
    dist.init_process_group("nccl", rank=0, world_size=1)
    grads = [torch.randn(4 * 1024 * 1024, device="cuda") for _ in range(4)]
    a = torch.randn(4096, 4096, device="cuda")
    side = torch.cuda.Stream()
    for g in grads:
        dist.all_reduce(g)
    torch.cuda.synchronize()
    with profiler() as prof:
        for _ in range(4):
            with torch.profiler.record_function("serial_step"):
                for g in grads:
                    dist.all_reduce(g)
                for _ in range(4):
                    torch.mm(a, a)
                torch.cuda.synchronize()
        for _ in range(4):
            with torch.profiler.record_function("overlap_step"):
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    for g in grads:
                        dist.all_reduce(g)
                for _ in range(4):
                    torch.mm(a, a)
                torch.cuda.current_stream().wait_stream(side)
                torch.cuda.synchronize()
    dist.destroy_process_group()
    return prof, {"steps": {"serial_step": 4, "overlap_step": 4}, "allreduces_per_step": 4}


class TinyDecoder:
    """A decode step of a small transformer-like stack (matmuls + softmax), batch B."""

    def __init__(self, batch: int, width: int = 1024, layers: int = 8):
        import torch

        self.w = [torch.randn(width, width, device="cuda", dtype=torch.bfloat16) / 32 for _ in range(layers)]
        self.x = torch.randn(batch, width, device="cuda", dtype=torch.bfloat16)

    def __call__(self, x):
        import torch

        for w in self.w:
            x = torch.softmax(x @ w, dim=-1) + x
        return x


def serve(graph: bool) -> dict:
    import torch

    batch = 32
    dec = TinyDecoder(batch)
    prefill = TinyDecoder(512)
    step = dec
    if graph:
        static = dec.x.clone()
        for _ in range(2):
            dec(static)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = dec(static)

        def step(x):
            static.copy_(x)
            g.replay()
            return out

    x = dec.x
    for _ in range(2):
        step(x)
        prefill(prefill.x)
    torch.cuda.synchronize()
    names = []
    with profiler() as prof:
        for i in range(12):
            if i % 6 == 0:
                name = f"step[PREFILL bs=4 tokens=512]"
                with torch.profiler.record_function(name):
                    prefill(prefill.x)
                    torch.cuda.synchronize()
            else:
                # SGLang's and vLLM's step names, alternating so both shapes are recorded.
                name = f"step[DECODE bs={batch}]" if i < 6 else f"execute_context_0(0)_generation_{batch}({batch})"
                with torch.profiler.record_function(name):
                    x = step(x)
                    x.sum().item()  # the scheduler reads the sampled tokens back
            names.append(name)
    return prof, {"steps": names, "batch": batch, "graph": graph}


def capture() -> dict:
    import torch

    dec = TinyDecoder(1)
    static = dec.x.clone()
    for _ in range(2):
        dec(static)
    torch.cuda.synchronize()
    with profiler() as prof:
        g = torch.cuda.CUDAGraph()
        with torch.profiler.record_function("capture_decode_graph"):
            with torch.cuda.graph(g):
                dec(static)
        torch.cuda.synchronize()
    return prof, {"capture": True, "kernels_in_graph": 8 * 4}


def hf_unannotated() -> dict:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
        num_attention_heads=32, num_key_value_heads=8, rope_theta=500000.0, tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM(config).to(torch.bfloat16).eval()
    prompt = torch.randint(0, config.vocab_size, (1, 16), device="cuda")
    kwargs = dict(do_sample=False, pad_token_id=0, eos_token_id=None)
    model.generate(prompt, max_new_tokens=4, min_new_tokens=4, **kwargs)
    torch.cuda.synchronize()
    with profiler() as prof:
        out = model.generate(prompt, max_new_tokens=6, min_new_tokens=6, **kwargs)
        torch.cuda.synchronize()
    return prof, {"new_tokens": int(out.shape[1] - prompt.shape[1]), "forward_calls": 6, "workload": "inference", "markers": "none"}


def preprocess(raw):
    """Host preprocessing as image pipelines do it: resize with scipy on the CPU."""
    from scipy import ndimage

    return ndimage.zoom(raw, (2.0, 2.0, 1.0), order=1)


def host_preprocess() -> dict:
    import numpy as np
    import torch

    model = mlp(width=1536, depth=4)
    rng = np.random.default_rng(0)
    raw = rng.random((256, 256, 3), dtype=np.float32)
    for _ in range(2):  # warm-up: scipy, cuBLAS, the allocator
        x = torch.from_numpy(preprocess(raw).reshape(-1, 1536)[:1024].copy()).cuda()
        model(x).sum().item()
    times = []
    with profiler(with_stack=True) as prof:
        for _ in range(6):
            with torch.profiler.record_function("infer_step"):
                t = time.perf_counter()
                img = preprocess(raw)
                times.append((time.perf_counter() - t) * 1e3)
                x = torch.from_numpy(img.reshape(-1, 1536)[:1024].copy()).pin_memory().cuda(non_blocking=True)
                model(x).sum().item()  # the result read back each step
    times.sort()
    return prof, {"step": "infer_step", "steps": 6, "preprocess_ms_median": times[len(times) // 2], "preprocess_function": "preprocess"}


def one(name: str, out: Path) -> None:
    fn = {
        "train": lambda: train(False), "train-ddp": lambda: train(True), "compiled": compiled,
        "threads": threads, "allreduce": allreduce, "serve-eager": lambda: serve(False),
        "serve-graph": lambda: serve(True), "capture": capture, "hf-unannotated": hf_unannotated,
        "host-preprocess": host_preprocess,
    }[name]
    prof, facts = fn()
    raw = out / f"{name}.json"
    prof.export_chrome_trace(str(raw))
    with open(raw, "rb") as f, gzip.GzipFile(out / f"h200-{name}.kineto.json.gz", "wb", compresslevel=9, mtime=0) as z:
        z.write(f.read())
    raw.unlink()
    import torch

    facts.update(device=torch.cuda.get_device_name(), torch=torch.__version__)
    (out / f"{name}.facts.json").write_text(json.dumps(facts, indent=1))


def main() -> None:
    if len(sys.argv) >= 2 and sys.argv[1] == "--one":
        one(sys.argv[2], Path(sys.argv[3]))
        return
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for name in sys.argv[2:] or SCENARIOS:
        t = time.time()
        done = subprocess.run([sys.executable, __file__, "--one", name, str(out)], capture_output=True, text=True, timeout=300)
        size = (out / f"h200-{name}.kineto.json.gz").stat().st_size if (out / f"h200-{name}.kineto.json.gz").exists() else 0
        print(f"{name}: exit {done.returncode} in {time.time() - t:.1f}s, {size / 1e3:.0f} kB")
        if done.returncode:
            print(done.stderr[-1500:])


if __name__ == "__main__":
    main()
