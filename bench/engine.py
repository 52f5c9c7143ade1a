"""Benchmark the bundled engine's decode variants and their peers: one run, one table.

    python bench/engine.py --json engine.json

Rows, all on the same config, weights, prompt and context:
  - every engine variant in `perfdoctor.engine.generate.VARIANTS` (eager, graph, ...);
  - `compile+graph`: the eager step under torch.compile (max-autotune, no cudagraphs)
    captured in a CUDA graph, the gpt-fast recipe;
  - `hf`: Hugging Face transformers' `LlamaForCausalLM.generate`, greedy;
  - `floor`: bytes per token / peak bandwidth, the time no batch-1 step can beat.
ms/token is the median over --repeats timed generations (after a warm-up one). GB/s is the
declared bytes per step (weights + K/V in use) over the step time. `match` is the fraction
of generated tokens equal to the eager variant's, `agrees for` the length of the common
prefix (bf16 rounding differences flip near-tied argmaxes, and the texts part). On a CPU it runs the tiny config, and
the rows that need CUDA say so.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch

from perfdoctor.engine.config import CONFIGS, BadInput, ModelConfig
from perfdoctor.engine.generate import Generation, Step, decode_bytes_per_step, generate, random_prompt
from perfdoctor.engine.graphs import GraphedStep
from perfdoctor.engine.variants import VARIANTS, StepFactory, eager_step
from perfdoctor.engine.measure import Speed, peak_dram_bandwidth
from perfdoctor.engine.model import Transformer
from perfdoctor.engine.weights import model_weights


def compiled_graph_step(model: Transformer, mode: str) -> Step:
    """The eager step compiled by torch.compile, then captured in a CUDA graph."""
    if model.embed.device.type != "cuda":
        raise BadInput("needs CUDA")
    return GraphedStep(torch.compile(eager_step(model), mode=mode, fullgraph=True))


def step_rows(compile_mode: str) -> dict[str, StepFactory]:
    """Every row timed through `generate`: the engine's variants, then the compile peer."""
    return {**VARIANTS, "compile+graph": functools.partial(compiled_graph_step, mode=compile_mode)}


def time_step(
    model: Transformer, factory: StepFactory, prompt: torch.Tensor, tokens: int, repeats: int
) -> tuple[float, Generation]:
    """Median decode seconds of `repeats` generations after a warm-up, and the tokens."""
    step = factory(model)
    generate(model, step, prompt, min(tokens, 8))  # warm-up: compile, autotune, capture
    runs = [generate(model, step, prompt, tokens) for _ in range(repeats)]
    return statistics.median(r.decode_s for r in runs), runs[-1]


def time_hf(
    config: ModelConfig,
    weights: dict[str, torch.Tensor],
    device: torch.device,
    dtype: torch.dtype,
    prompt: torch.Tensor,
    tokens: int,
    repeats: int,
) -> tuple[float, list[int]]:
    """Seconds per decode step of HF `generate`: (time for n tokens - time for 1) / (n - 1)."""
    from perfdoctor.engine.hf import hf_greedy, hf_model

    model = hf_model(config, weights, device, dtype)

    def timed(n: int) -> tuple[float, list[int]]:
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = hf_greedy(model, prompt, n)
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t0, out

    timed(2)  # warm-up
    per_step = []
    for _ in range(repeats):
        t_one, _ = timed(1)
        t_all, out = timed(tokens)
        per_step.append((t_all - t_one) / (tokens - 1))
    return statistics.median(per_step), out


def match(tokens: list[int], reference: list[int] | None) -> float | None:
    """Fraction of positions where `tokens` equals `reference` (over the shorter one)."""
    if not reference:
        return None
    n = min(len(tokens), len(reference))
    return sum(a == b for a, b in zip(tokens[:n], reference[:n])) / n


def agree(tokens: list[int], reference: list[int] | None) -> int | None:
    """How many leading tokens equal `reference`'s: after the first difference the two
    sequences continue from different text, so later matches mean little."""
    if not reference:
        return None
    n = 0
    while n < min(len(tokens), len(reference)) and tokens[n] == reference[n]:
        n += 1
    return n


def run(args: argparse.Namespace) -> dict:
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda" and not torch.cuda.is_available():
        raise BadInput("--device cuda, but CUDA is not available")
    config_name = args.config or ("llama-3.2-1b" if device.type == "cuda" else "tiny")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    ctx = args.ctx if args.ctx is not None else (2048 if device.type == "cuda" else 512)
    if args.prompt_len + args.tokens - 1 > ctx:
        raise BadInput(f"--ctx {ctx} is too small for --prompt-len {args.prompt_len} + --tokens {args.tokens}")
    if args.tokens < 2 or args.hf_tokens < 2 or args.repeats < 1:
        raise BadInput("--tokens and --hf-tokens must be at least 2, --repeats at least 1")
    rows_wanted = args.rows.split(",") if args.rows else None
    known = [*step_rows(args.compile_mode), "hf"]
    for name in rows_wanted or []:
        if name not in known:
            raise BadInput(f"unknown row {name!r} in --rows; choose from {', '.join(known)}")

    config, weights = model_weights(config_name, None, args.seed, device, dtype)
    prompt = random_prompt(config, args.prompt_len, args.seed)
    model = Transformer.from_hf_state_dict(config, weights, ctx)
    peak = peak_dram_bandwidth(device.index or 0) if device.type == "cuda" else None
    bytes_per_step = decode_bytes_per_step(model, args.prompt_len + args.tokens // 2)

    rows = []
    eager_tokens = None
    for name in known:
        if rows_wanted is not None and name not in rows_wanted:
            continue
        print(f"timing {name} ...", file=sys.stderr, flush=True)
        try:
            if name == "hf":
                seconds, tokens = time_hf(config, weights, device, dtype, prompt, args.hf_tokens, args.repeats)
                steps_bytes = decode_bytes_per_step(model, args.prompt_len + args.hf_tokens // 2)
                speed = Speed.of(seconds, 1, steps_bytes, peak)
            else:
                seconds, result = time_step(model, step_rows(args.compile_mode)[name], prompt, args.tokens, args.repeats)
                tokens = result.tokens
                speed = Speed.of(seconds, result.decode_steps, result.bytes_per_step, peak)
        except BadInput as e:
            rows.append({"name": name, "note": str(e)})
            continue
        if name == "eager":
            eager_tokens = tokens
        rows.append({"name": name, **asdict(speed), "match": match(tokens, eager_tokens),
                     "agree": agree(tokens, eager_tokens), "generated": len(tokens), "note": ""})
        print(f"  {name}: {speed.line()}", file=sys.stderr, flush=True)

    return {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "config": config.name,
        "dtype": str(dtype).removeprefix("torch."),
        "ctx": ctx,
        "prompt_len": args.prompt_len,
        "tokens": args.tokens,
        "hf_tokens": args.hf_tokens,
        "repeats": args.repeats,
        "torch": torch.__version__,
        "bytes_per_step": bytes_per_step,
        "peak_gb_per_s": None if peak is None else peak / 1e9,
        "floor_ms": None if peak is None else 1e3 * bytes_per_step / peak,
        "rows": rows,
    }


def table(report: dict) -> str:
    """The report as a Markdown table (pasteable into docs/performance.md)."""

    def fmt(value, spec: str) -> str:
        return "n/a" if value is None else format(value, spec)

    lines = [
        f"{report['config']} on {report['device']}, {report['dtype']}, batch 1, ctx {report['ctx']}, "
        f"prompt {report['prompt_len']}, {report['tokens']} tokens (hf: {report['hf_tokens']}), "
        f"median of {report['repeats']}, {report['bytes_per_step'] / 1e6:.1f} MB/token, torch {report['torch']}",
        "",
        "| variant | ms/token | tokens/s | GB/s | % of peak | match eager | agrees for |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report["rows"]:
        if r["note"]:
            lines.append(f"| {r['name']} | {r['note']} | | | | | |")
            continue
        lines.append(
            f"| {r['name']} | {r['ms_per_token']:.3f} | {r['tokens_per_s']:.1f} | {r['gb_per_s']:.1f} "
            f"| {fmt(r['pct_of_peak'], '.1f')} | {fmt(r['match'], '.0%')} | {fmt(r['agree'], 'd')}/{r['generated']} |"
        )
    floor = report["floor_ms"]
    if floor is None:
        lines.append("| floor | peak unknown | | | | | |")
    else:
        lines.append(f"| floor (bytes/token / {report['peak_gb_per_s']:.0f} GB/s) | {floor:.3f} | {1e3 / floor:.1f} | | 100.0 | | |")
    return "\n".join(lines)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(2)


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="bench/engine.py", description="Time every engine variant and its peers; print one table.")
    p.add_argument("--config", choices=sorted(CONFIGS), default=None, help="default llama-3.2-1b on cuda, tiny on cpu")
    p.add_argument("--device", choices=["cuda", "cpu"], default=None, help="default cuda when available")
    p.add_argument("--tokens", type=int, default=256, help="new tokens per timed generation (default 256)")
    p.add_argument("--hf-tokens", type=int, default=32, help="new tokens per HF generate (default 32; it is slow)")
    p.add_argument("--ctx", type=int, default=None, help="KV cache positions (default 2048 on cuda, 512 on cpu)")
    p.add_argument("--prompt-len", type=int, default=16, help="random prompt length (default 16)")
    p.add_argument("--repeats", type=int, default=3, help="timed generations per row; the median is reported (default 3)")
    p.add_argument("--rows", default=None, help="comma-separated subset of rows, e.g. eager,graph (default all)")
    p.add_argument("--compile-mode", default="max-autotune-no-cudagraphs", help="torch.compile mode of the compile+graph row")
    p.add_argument("--seed", type=int, default=0, help="seed of weights and prompt (default 0)")
    p.add_argument("--json", metavar="PATH", default=None, help="also write the results as JSON")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        report = run(args)
    except BadInput as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(table(report))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
