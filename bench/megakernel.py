"""Time the megakernel step against fused on a GPU, several launch shapes, one table.

    python bench/megakernel.py [--tokens 256] [--repeats 3] [--shapes tuned,1-block-tasks,...] [--json out.json]

For each named shape (a `MegaShape`): the compiled kernel's registers and spills, then the
decode loop through the engine's `generate` (median of --repeats generations of --tokens
tokens, after a warm-up that captures the graph), and how long its free-running tokens
agree with fused's. Then one traced step of the first shape (`MegaKernels(trace=True)`:
every task stamps %globaltimer when it starts, when its inputs are ready, when it ends),
reduced to a per-stage split, summed over the layers:

  busy    from the stage's first input-ready to its last end (the stage's own window)
  wait    mean per task of start -> inputs ready (its weight loads were in flight then)
  work    mean per task of inputs ready -> end
  handoff from the previous stage's last end to this stage's first input-ready

and GB/s of the stage's weight bytes over its busy window. Stamps cost a little, so the
traced step is slower than the timed ones; the split is for where, not how much.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import asdict, replace
from pathlib import Path

import torch

from perfdoctor.engine.config import LLAMA_3_2_1B
from perfdoctor.engine.fused import fused_step
from perfdoctor.engine.generate import generate, random_prompt
from perfdoctor.engine.graphs import GraphedStep
from perfdoctor.engine.measure import Speed, peak_dram_bandwidth
from perfdoctor.engine.megakernel import TUNED, MegaKernels, MegaShape
from perfdoctor.engine.model import Transformer
from perfdoctor.engine.weights import random_hf_state_dict

STAGES = ("qkv", "attention", "o", "gate_up", "down")

# Shapes --shapes can name: the shipped one and the alternatives that explain it.
SHAPES: dict[str, MegaShape] = {
    "tuned": TUNED,
    # One 32 KB block per task, no double buffering: v1 of the H200 notes without its prefetch.
    "1-block-tasks": replace(TUNED, pairs=4, qkv_sub=1, o_rows=8, o_sub=1, gu_rows=4, gu_sub=1, down_rows=2,
                             down_sub=1, head_rows=8, head_sub=1),
    "2-block-tasks": replace(TUNED, qkv_sub=2, o_sub=2, gu_sub=2, down_sub=2, head_sub=4),
    "8-block-tasks": replace(TUNED, qkv_sub=8, o_sub=8, gu_sub=8, down_sub=8, head_sub=16),
    "16-warps-1/sm": replace(TUNED, num_warps=16, programs_per_sm=1),
}


def time_step(model: Transformer, step, prompt: torch.Tensor, tokens: int, repeats: int) -> tuple[float, list[int], int]:
    """Median decode seconds over `repeats` generations (after a warm-up), the last tokens
    and the decode steps per generation."""
    generate(model, step, prompt, min(tokens, 8))
    runs = [generate(model, step, prompt, tokens) for _ in range(repeats)]
    return statistics.median(r.decode_s for r in runs), runs[-1].tokens, runs[-1].decode_steps


def agree(tokens: list[int], reference: list[int]) -> int:
    """Length of the common prefix."""
    n = 0
    while n < min(len(tokens), len(reference)) and tokens[n] == reference[n]:
        n += 1
    return n


def stage_bytes(model: Transformer) -> dict[str, int]:
    """Weight bytes each stage reads per layer (attention: the K/V cache, counted elsewhere)."""
    layer = model.layers[0]
    size = model.embed.element_size()
    head = model.embed if model.lm_head is None else model.lm_head
    return {
        "qkv": layer.attn.wqkv.numel() * size, "attention": 0, "o": layer.attn.wo.numel() * size,
        "gate_up": layer.mlp.w13.numel() * size, "down": layer.mlp.w2.numel() * size, "head": head.numel() * size,
    }


def trace_split(trace: torch.Tensor, counts: dict[str, int], layers: int, nbytes: dict[str, int]) -> dict:
    """Per-stage split of one traced step (see the module docstring), in microseconds."""
    t = trace.cpu().double()
    t0 = t[:, 0].min()
    start, ready, end = (t[:, 0] - t0) / 1e3, (t[:, 1] - t0) / 1e3, (t[:, 2] - t0) / 1e3
    spans: list[tuple[str, int, int]] = []  # (stage, first task, last task + 1)
    i = 0
    for _ in range(layers):
        for s in STAGES:
            spans.append((s, i, i + counts[s]))
            i += counts[s]
    spans.append(("head", i, i + counts["head"]))
    out = {s: {"busy_us": 0.0, "wait_us": 0.0, "work_us": 0.0, "handoff_us": 0.0, "n": 0} for s in (*STAGES, "head")}
    prev_end = None
    for s, a, b in spans:
        o = out[s]
        o["busy_us"] += (end[a:b].max() - ready[a:b].min()).item()
        o["wait_us"] += (ready[a:b] - start[a:b]).mean().item()
        o["work_us"] += (end[a:b] - ready[a:b]).mean().item()
        if prev_end is not None:
            o["handoff_us"] += (ready[a:b].min() - prev_end).item()
        prev_end = end[a:b].max()
        o["n"] += 1
    for s, o in out.items():
        n = o.pop("n")
        o["wait_us"] /= n
        o["work_us"] /= n
        o["gb_per_s"] = nbytes[s] * n / (o["busy_us"] * 1e-6) / 1e9 if nbytes[s] else None
    return {"step_us": (end.max() - start.min()).item(), "stages": out}


def run(args: argparse.Namespace) -> dict:
    if not torch.cuda.is_available():
        print("error: bench/megakernel.py needs CUDA", file=sys.stderr)
        raise SystemExit(2)
    device, dtype = torch.device("cuda"), torch.bfloat16
    config = LLAMA_3_2_1B
    weights = random_hf_state_dict(config, args.seed, device, dtype)
    model = Transformer.from_hf_state_dict(config, weights, args.ctx)
    del weights
    prompt = random_prompt(config, args.prompt_len, args.seed)
    peak = peak_dram_bandwidth(0)
    rows = []

    print("timing fused ...", file=sys.stderr, flush=True)
    seconds, fused_tokens, steps = time_step(model, fused_step(model), prompt, args.tokens, args.repeats)
    from perfdoctor.engine.generate import decode_bytes_per_step

    per_step = decode_bytes_per_step(model, args.prompt_len + args.tokens // 2)
    rows.append({"name": "fused", **asdict(Speed.of(seconds, steps, per_step, peak)), "agree": len(fused_tokens)})
    torch.cuda.empty_cache()

    names = args.shapes.split(",")
    for name in names:
        if name not in SHAPES:
            print(f"error: unknown shape {name!r}; choose from {', '.join(SHAPES)}", file=sys.stderr)
            raise SystemExit(2)
    for name in names:
        print(f"timing megakernel {name} ...", file=sys.stderr, flush=True)
        shape = SHAPES[name]
        mk = MegaKernels(model, shape)
        try:
            seconds, tokens, steps = time_step(model, GraphedStep(mk), prompt, args.tokens, args.repeats)
        except Exception as e:  # noqa: BLE001 - one shape failing (resources) must not hide the others
            rows.append({"name": name, "note": f"{type(e).__name__}: {str(e)[:200]}", "shape": asdict(shape)})
            print(f"  {name}: {rows[-1]['note']}", file=sys.stderr, flush=True)
            continue
        k = mk.compiled
        speed = Speed.of(seconds, steps, per_step, peak)
        rows.append({
            "name": name, **asdict(speed), "agree": agree(tokens, fused_tokens), "shape": asdict(shape),
            "programs": mk.programs, "tasks": mk.counts["total"],
            "n_regs": getattr(k, "n_regs", None), "n_spills": getattr(k, "n_spills", None),
            "shared": getattr(getattr(k, "metadata", None), "shared", None),
        })
        print(f"  {name}: {speed.line()}  regs {rows[-1]['n_regs']} spills {rows[-1]['n_spills']}", file=sys.stderr, flush=True)
        del mk
        torch.cuda.empty_cache()

    print(f"tracing megakernel {names[0]} ...", file=sys.stderr, flush=True)
    mk = MegaKernels(model, SHAPES[names[0]], trace=True)
    generate(model, mk, prompt, 2)  # compile; the prefill leaves the cache at the prompt
    pos = torch.tensor([args.prompt_len + args.tokens // 2], device=device)
    token = torch.tensor([1], device=device)
    with torch.no_grad():
        for _ in range(3):  # the last of a few back-to-back steps: warm clocks, warm L2 state
            mk(token, pos)
    torch.cuda.synchronize()
    split = trace_split(mk.trace_buffer, mk.counts, config.layers, stage_bytes(model))
    return {"device": torch.cuda.get_device_name(0), "tokens": args.tokens, "ctx": args.ctx,
            "repeats": args.repeats, "bytes_per_step": per_step, "rows": rows, "trace": split,
            "trace_shape": names[0], "trace_pos": int(pos.item())}


def table(report: dict) -> str:
    lines = [
        f"{report['device']}, Llama-3.2-1B bf16, ctx {report['ctx']}, {report['tokens']} tokens, "
        f"median of {report['repeats']}, {report['bytes_per_step'] / 1e6:.1f} MB/token",
        "",
        "| variant | ms/token | tokens/s | % of peak | agrees with fused | programs | regs | spills |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report["rows"]:
        if "note" in r:
            lines.append(f"| megakernel {r['name']} | {r['note']} | | | | | | |")
            continue
        pct = "n/a" if r["pct_of_peak"] is None else f"{r['pct_of_peak']:.1f}"
        name = r["name"] if r["name"] == "fused" else f"megakernel {r['name']}"
        lines.append(
            f"| {name} | {r['ms_per_token']:.3f} | {r['tokens_per_s']:.1f} | {pct} | {r['agree']} "
            f"| {r.get('programs', '')} | {r.get('n_regs', '')} | {r.get('n_spills', '')} |"
        )
    tr = report["trace"]
    lines += [
        "",
        f"traced step ({report['trace_shape']}, position {report['trace_pos']}): {tr['step_us']:.1f} us; "
        "per stage, summed over layers (wait/work: mean per task):",
        "",
        "| stage | busy us | handoff us | wait us/task | work us/task | GB/s over busy |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for s, o in tr["stages"].items():
        gbs = "" if o["gb_per_s"] is None else f"{o['gb_per_s']:.0f}"
        lines.append(f"| {s} | {o['busy_us']:.1f} | {o['handoff_us']:.1f} | {o['wait_us']:.2f} | {o['work_us']:.2f} | {gbs} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench/megakernel.py", description="Megakernel vs fused on a GPU: speed per launch shape and a traced per-stage split.")
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--ctx", type=int, default=2048)
    p.add_argument("--prompt-len", type=int, default=16)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--shapes", default="tuned,1-block-tasks,2-block-tasks,8-block-tasks,16-warps-1/sm",
                   help=f"comma-separated, the first is traced; from {', '.join(SHAPES)}")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="PATH", default=None)
    args = p.parse_args(argv)
    report = run(args)
    print(table(report))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
