"""Record real step series on a GPU: per step host start, GPU start and GPU end (host clock,
ns), beside the program's own timer, for the step-time tests (tests/fixtures/series/).

    python3 scripts/record_series.py OUTDIR

Programs recorded, each in its own process:
* the reference engine (`python -m perfdoctor.engine`), variants eager, graph and fused at
  48 and 256 tokens: the step is its `decode_step` range; its own timer is the "decode:
  X ms/token" line;
* an unmodified Hugging Face `generate` (1B Llama shape, random weights, a warm-up call then
  three timed calls, printing its own ms/token): the step is one `forward` of the model.

The timing is done the way perfdoctor's light pass does it (CUDA events at the step's start
and end, no synchronisation added, put on the host clock through a reference event), but by
this script alone, so the series does not depend on perfdoctor's own code.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


class Recorder:
    """Host start + CUDA events at the start and end of each step."""

    def __init__(self) -> None:
        import torch

        self.torch = torch
        self.ref = None
        self.t0 = 0
        self.rows: list[tuple[int, object, object]] = []

    def _clock(self) -> None:
        torch = self.torch
        self.ref = torch.cuda.Event(enable_timing=True)
        self.ref.record()  # the first record creates the event: before t0 is read
        torch.cuda.synchronize()
        self.t0 = time.perf_counter_ns()
        self.ref.record()

    @contextlib.contextmanager
    def step(self):
        if self.ref is None:
            self._clock()
        host = time.perf_counter_ns()
        start = self.torch.cuda.Event(enable_timing=True)
        start.record()
        try:
            yield
        finally:
            end = self.torch.cuda.Event(enable_timing=True)
            end.record()
            self.rows.append((host, start, end))

    def series(self) -> dict[str, list[int]]:
        self.torch.cuda.synchronize()
        ns = lambda e: self.t0 + int(self.ref.elapsed_time(e) * 1e6)  # noqa: E731
        return {
            "host_start_ns": [h for h, _, _ in self.rows],
            "gpu_start_ns": [ns(s) for _, s, _ in self.rows],
            "gpu_end_ns": [ns(e) for _, _, e in self.rows],
        }


def engine(variant: str, tokens: int) -> dict:
    import perfdoctor.engine.__main__ as cli
    import perfdoctor.engine.generate as gen

    rec = Recorder()
    original = gen.region

    @contextlib.contextmanager
    def timed(name, **declared):
        with original(name, **declared), rec.step():
            yield

    gen.region = timed
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main(["--variant", variant, "--tokens", str(tokens)])
    text = out.getvalue()
    print(text, file=sys.stderr)
    own = re.search(r"([\d.]+) ms/token", text)
    gbps = re.search(r"([\d.]+) GB/s", text)
    return {
        "program": f"python -m perfdoctor.engine --variant {variant} --tokens {tokens}",
        "exit": code,
        "own_ms_per_step": float(own.group(1)) if own else None,
        "own_gbps": float(gbps.group(1)) if gbps else None,
        "own_output": text,
        "own_timer": "the timed generate() call's decode loop (CUDA events), after a warm-up generate of 8 tokens",
        **rec.series(),
    }


def hf(timed_calls: int = 3, new_tokens: int = 32) -> dict:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
        num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=4096,
        rope_theta=500000.0, tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM(config).to(torch.bfloat16).eval()
    rec = Recorder()
    cls = type(model)
    forward = cls.forward

    def timed_forward(self, *args, **kwargs):
        with rec.step():
            return forward(self, *args, **kwargs)

    cls.forward = timed_forward
    prompt = torch.randint(0, config.vocab_size, (1, 16), device="cuda")
    kwargs = dict(do_sample=False, pad_token_id=0, eos_token_id=None)
    model.generate(prompt, max_new_tokens=8, min_new_tokens=8, **kwargs)  # warm-up
    own = []
    marks = []
    for _ in range(timed_calls):
        torch.cuda.synchronize()
        marks.append(len(rec.rows))
        t0 = time.perf_counter()
        out = model.generate(prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens, **kwargs)
        torch.cuda.synchronize()
        own.append((time.perf_counter() - t0) * 1e3 / (out.shape[1] - prompt.shape[1]))
    own.sort()
    return {
        "program": f"HF transformers LlamaForCausalLM.generate, 1B shape, random bf16 weights, warm-up 8 tokens then {timed_calls} x {new_tokens} new tokens",
        "own_ms_per_step": own[len(own) // 2],
        "own_ms_per_step_calls": own,
        "own_timer": "wall time of each timed generate() call (synchronised) / new tokens; median of the calls",
        "timed_call_first_step": marks,
        **rec.series(),
    }


def main() -> None:
    if len(sys.argv) == 3:  # one recording, in this process
        kind, outfile = sys.argv[1], Path(sys.argv[2])
        if kind == "hf":
            data = hf()
        else:
            variant, tokens = kind.split(":")
            data = engine(variant, int(tokens))
        import torch

        data["device"] = torch.cuda.get_device_name()
        data["torch"] = torch.__version__
        outfile.write_text(json.dumps(data))
        return
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    jobs = [f"{v}:{t}" for v in ("eager", "graph", "fused") for t in (48, 256)] + ["hf"]
    for job in jobs:
        name = job.replace(":", "-")
        t = time.time()
        done = subprocess.run([sys.executable, __file__, job, str(out / f"{name}.json")], capture_output=True, text=True)
        print(f"{job}: exit {done.returncode} in {time.time() - t:.1f}s")
        if done.returncode:
            print(done.stderr[-2000:])
        else:
            d = json.loads((out / f"{name}.json").read_text())
            print(f"   own {d['own_ms_per_step']} ms/step, {len(d['host_start_ns'])} steps")


if __name__ == "__main__":
    main()
