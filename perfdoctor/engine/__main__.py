"""`python -m perfdoctor.engine`: decode with the bundled engine and report its speed.

    python -m perfdoctor.engine --variant graph --tokens 256 --ctx 2048

With ``--tp N`` under ``torchrun --nproc-per-node N`` each rank holds 1/N of every layer
(``perfdoctor.engine.parallel``) and rank 0 prints. Loads (or draws) the weights, prefills a prompt, runs one short warm-up generation (which
also captures the CUDA graph), then a timed one, and prints ms/token, tokens/s and the
bandwidth achieved against the device's peak.
"""

from __future__ import annotations

import argparse
import sys
import textwrap

import torch

from perfdoctor.engine.config import CONFIGS, BadInput
from perfdoctor.engine.delay import with_delay
from perfdoctor.engine.generate import generate, random_prompt
from perfdoctor.engine.measure import Speed, peak_dram_bandwidth
from perfdoctor.engine.model import Transformer
from perfdoctor.engine.parallel import init_tp, tp_model
from perfdoctor.engine.variants import VARIANTS
from perfdoctor.engine.weights import load_tokenizer, model_weights

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad argument in one line, exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(2)


def parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m perfdoctor.engine",
        description="Greedy batch-1 decode with the bundled Llama engine; prints its speed.",
    )
    p.add_argument("--variant", choices=sorted(VARIANTS), default="eager", help="decode step implementation (default eager)")
    p.add_argument("--tokens", type=int, default=256, help="new tokens to generate (default 256)")
    p.add_argument("--ctx", type=int, default=2048, help="static KV cache positions (default 2048)")
    p.add_argument("--config", choices=sorted(CONFIGS), default=None, help="built-in model shapes with random weights (default llama-3.2-1b)")
    p.add_argument("--weights", metavar="DIR", default=None, help="Hugging Face folder: config.json + *.safetensors (+ tokenizer.json)")
    p.add_argument("--device", choices=["cuda", "cpu"], default=None, help="default cuda when available")
    p.add_argument("--dtype", choices=sorted(DTYPES), default=None, help="default bf16 on cuda, fp32 on cpu")
    p.add_argument("--prompt-len", type=int, default=16, help="random prompt length in tokens (default 16)")
    p.add_argument("--prompt", default=None, help="prompt text (needs tokenizer.json in --weights)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random weights and prompt (default 0)")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel ranks: run under torchrun --nproc-per-node N (NCCL on GPUs, gloo on CPU)")
    p.add_argument("--delay-us", type=float, default=0.0, metavar="US",
                   help="add a fixed GPU spin of about US microseconds to every decode step, inside the CUDA graph "
                   "for graph/fused: a known slowdown for testing gates (default 0: off)")
    return p


def run(args: argparse.Namespace) -> None:
    if args.config is not None and args.weights is not None:
        raise BadInput("--config and --weights exclude each other (the folder has its own config)")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise BadInput("--device cuda, but CUDA is not available")
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    rank = 0
    if args.tp < 1:
        raise BadInput("--tp must be at least 1")
    if args.tp > 1:
        if args.variant in ("fused", "fused-int8"):
            raise BadInput("--tp works with the eager and graph variants (the fused kernels assume one GPU's shapes)")
        rank, device = init_tp(args.tp, device.type)
    dtype = DTYPES[args.dtype or ("bf16" if device.type == "cuda" else "fp32")]
    if args.tokens < 2:
        raise BadInput("--tokens must be at least 2 (the first token comes from the prefill)")
    if args.delay_us < 0 or (args.delay_us and device.type != "cuda"):
        raise BadInput("--delay-us must be >= 0, and needs a CUDA device (the delay is a GPU kernel)")

    config, weights = model_weights(args.config or "llama-3.2-1b", args.weights, args.seed, device, dtype)
    tokenizer = load_tokenizer(args.weights)
    if args.prompt is not None:
        if tokenizer is None:
            raise BadInput("--prompt needs a tokenizer.json in the --weights folder")
        prompt = torch.tensor(tokenizer.encode(args.prompt).ids)
    else:
        prompt = random_prompt(config, args.prompt_len, args.seed)
    if prompt.shape[0] + args.tokens - 1 > args.ctx:
        raise BadInput(f"--ctx {args.ctx} is too small for a {prompt.shape[0]}-token prompt and {args.tokens} tokens")

    model = tp_model(config, weights, args.ctx, rank, args.tp) if args.tp > 1 else Transformer.from_hf_state_dict(config, weights, args.ctx)
    del weights
    step = VARIANTS[args.variant](model)
    if args.delay_us:
        step = with_delay(step, args.delay_us)
    generate(model, step, prompt, min(args.tokens, 8))  # warm-up (and graph capture)
    result = generate(model, step, prompt, args.tokens)

    peak = peak_dram_bandwidth(device.index or 0) if device.type == "cuda" else None
    speed = Speed.of(result.decode_s, result.decode_steps, result.bytes_per_step, peak)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    if rank != 0:  # every rank decodes the same tokens; one prints them
        return
    if args.tp > 1:
        name = f"{args.tp} x {name} (tensor parallel, per-rank bytes)"
    say(
        f"{config.name} {args.variant} on {name}, {str(dtype).removeprefix('torch.')}, ctx {args.ctx}, "
        f"prompt {prompt.shape[0]}, {args.tokens} tokens, {result.bytes_per_step / 1e6:.1f} MB/step"
    )
    say(f"decode: {speed.line()}")
    shown = result.tokens[:16]
    if tokenizer is not None:
        say(f"text: {tokenizer.decode(result.tokens)!r}")
    else:
        say(f"tokens: {' '.join(map(str, shown))}{' ...' if len(result.tokens) > len(shown) else ''}")


def say(line: str) -> None:
    """Print ``line`` in at most 80 columns (continuations indented): the engine's lines show
    through ``perfdoctor demo``, which is laid out for 80. Each line's first 80 columns keep
    what scripts read from it ("decode: X ms/token, Y tokens/s, Z GB/s (P % of the")."""
    print(textwrap.fill(line, width=80, subsequent_indent="  ", break_on_hyphens=False))


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        run(args)
    except BadInput as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
