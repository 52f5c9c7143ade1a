"""Time the megakernel step against fused on a GPU, several kernel shapes, one table.

    python bench/megakernel.py [--tokens 256] [--repeats 3] [--shapes tuned,4x32KB,...] [--json out.json]
                               [--positions 144,1000,4000] [--long-tokens 1024] [--sweep-shapes tuned,...]

For each named shape (a `MegaShape`: ring stages x tile bytes, consumer warps): the built
kernel's registers and local memory, then the decode loop through the engine's `generate`
(median of --repeats generations of --tokens tokens, after a warm-up that captures the
graph), and how long its free-running tokens agree with fused's. Then one traced step of
the first shape (`MegaKernels(trace=True)`: every CTA stamps %globaltimer at each stage's
start, when its inputs were ready, at its end), reduced to a per-stage split, summed over
the layers, over the CTAs that had work in the stage:

  busy    from the stage's first input-ready to its last end (the stage's own window)
  wait    mean per CTA of start -> inputs ready (its ring was filling meanwhile)
  work    mean per CTA of inputs ready -> end
  handoff from the previous stage's last end to this stage's first input-ready

and GB/s of the stage's weight bytes over its busy window. The weights stream ahead of
the stages, so a stage's busy window can be shorter than its bytes over DRAM bandwidth.
A second table takes `work` apart (the kernel's TRACE_WORDS detail, means per CTA):

  seen     last release of the previous stage (its latest end) -> the first CTA to see it
  poll     start -> the previous stage seen complete (attention: to q/k/v loaded, from ready)
  loader   seen -> inputs ready (the input vector through shared memory; attention: 0)
  ring     ready -> last store, waiting for ring slots to land (DRAM not keeping up)
  compute  ready -> last store, the rest
  release  last store -> end (block sync, the release fence)

Last, the context sweep (issue 31) of each --sweep-shapes shape (default: the first of
--shapes), the model's cache reallocated to max(--positions) + 64 positions of random K/V
(timing only: the K/V values do not change the work): the median ms per step over 64
steps starting at each filled position of --positions, against what the extra K/V bytes
would cost at the first position's rate (`over bytes %`: ms(N) / (ms(N0) bytes(N) /
bytes(N0)) - 1; issue 31's goal: <= 3 %), then --long-tokens steps from position 16 (the
prompt) one by one: p50, p99, p99 / p50 (goal <= 1.05), the means of the first and last 100.
Per-step times are CUDA events recorded between graph replays (no synchronisation in the
loop).
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
from perfdoctor.engine.megakernel import STAGES, TRACE_WORDS, TUNED, MegaKernels, MegaShape, MegaStep
from perfdoctor.engine.model import Transformer
from perfdoctor.engine.weights import random_hf_state_dict

# Shapes --shapes can name: the shipped one and the alternatives that explain it.
SHAPES: dict[str, MegaShape] = {
    "tuned": TUNED,  # 6 x 32 KB ring, 8 consumer warps, 2 copies in flight, 1 tile per step, flags
    "flags": replace(TUNED, flags=True),  # the attention path on tags in its data (no counters)
    "no-flags": replace(TUNED, flags=False),
    "graphed-step": TUNED,  # timed through graphs.GraphedStep (copies the token and position in)
    "in-flight-6": replace(TUNED, in_flight=0),  # up to the whole ring outstanding
    "in-flight-4": replace(TUNED, in_flight=4),
    "in-flight-3": replace(TUNED, in_flight=3),
    "in-flight-1": replace(TUNED, in_flight=1),
    "12-warps": replace(TUNED, consumer_warps=12),  # 3 warps per scheduler, 6-row (24 KB) tiles
    "2-tiles-per-step": replace(TUNED, tiles_per_step=2),  # two tiles' chains interleaved
    "4x32KB": replace(TUNED, stages=4),
    "12x16KB": replace(TUNED, tile_bytes=16384, stages=12),  # twice the tiles, 4 rows each
    "16-warps": replace(TUNED, consumer_warps=16),  # 2 warps per row
    "16-warps-3x64KB": replace(TUNED, tile_bytes=65536, stages=3, consumer_warps=16),  # 16 rows
    "4-warps-12x16KB": replace(TUNED, tile_bytes=16384, stages=12, consumer_warps=4),
    # v4.8 attention splits (chunks per split; tuned 3): most tasks, more merges / fewer. They
    # split from the first chunk their target allows (attn_split_after 0), as when measured
    # in v4.8, so that they show the split's cost at short context too
    "split-1": replace(TUNED, attn_split=1, attn_split_after=0),
    "split-2": replace(TUNED, attn_split=2, attn_split_after=0),
    "split-8": replace(TUNED, attn_split=8, attn_split_after=0),
    "no-split": replace(TUNED, attn_split=1 << 20),  # S = 1 at every position: v4.7's per-head owners (the A/B)
    "v4.9": replace(TUNED, attn_split_after=0),  # v4.9's tuned: S = 2 from 192 positions (tuned splits from 1,024)
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


# The detail columns of trace_split (see the module docstring): sums over layers, "seen"
# of the stage's first CTA, the others means per CTA.
DETAIL = ("seen_us", "poll_us", "loader_us", "ring_us", "compute_us", "release_us")


def trace_split(trace: torch.Tensor, layers: int, nbytes: dict[str, int]) -> dict:
    """Per-stage split of one traced step `[CTAs, 5 * layers + 1, words]` (see the module
    docstring), in microseconds; a CTA's inputs-ready stamp is 0 where it had no work. With
    the kernel's TRACE_WORDS (8) words per stamp the DETAIL columns too; with the first 4
    (start, ready, end, SM) only the stage windows."""
    t = trace.cpu().double()
    detailed = t.shape[2] >= TRACE_WORDS
    t0 = t[:, :, 0].min()
    names = [*STAGES * layers, "head"]
    keys = ("busy_us", "wait_us", "work_us", "handoff_us", *(DETAIL if detailed else ()))
    out = {s: {**dict.fromkeys(keys, 0.0), "n": 0} for s in (*STAGES, "head")}
    prev_end = None
    for g, s in enumerate(names):
        worked = t[:, g, 1] > 0
        start, ready, end = ((t[worked, g, i] - t0) / 1e3 for i in range(3))
        o = out[s]
        o["busy_us"] += (end.max() - ready.min()).item()
        o["wait_us"] += (ready - start).mean().item()
        o["work_us"] += (end - ready).mean().item()
        if prev_end is not None:
            o["handoff_us"] += (ready.min() - prev_end).item()
        if detailed:
            seen, stored = ((t[worked, g, i] - t0) / 1e3 for i in (4, 6))
            ring = t[worked, g, 5] / t[worked, g, 7].clamp(min=1) * (stored - ready)  # cycles -> us
            attention = s == "attention"
            if prev_end is not None:
                o["seen_us"] += ((ready if attention else seen).min() - prev_end).item()
            o["poll_us"] += ((seen - ready) if attention else (seen - start)).mean().item()
            o["loader_us"] += 0.0 if attention else (ready - seen).mean().item()
            o["ring_us"] += ring.mean().item()
            o["compute_us"] += (stored - ready - ring).mean().item()
            o["release_us"] += (end - stored).mean().item()
        prev_end = end.max()
        o["n"] += 1
    for s, o in out.items():
        n = o.pop("n")
        for k in ("wait_us", "work_us", *DETAIL[1:]):
            if k in o:
                o[k] /= n
        o["gb_per_s"] = nbytes[s] * n / (o["busy_us"] * 1e-6) / 1e9 if nbytes[s] else None
    return {"step_us": ((t[:, :, 2].max() - t0) / 1e3).item(), "stages": out}


SWEEP_STEPS = 64  # steps timed from each filled position


def step_times(step, token: torch.Tensor, pos: torch.Tensor, start: int, n: int) -> list[float]:
    """Milliseconds of each of `n` steps from position `start` (pos advanced in place on the
    device, the token fixed), by CUDA events between the steps, after 8 warm-up steps."""
    for _ in range(8):
        pos.fill_(start)
        step(token, pos)
    pos.fill_(start)
    events = [torch.cuda.Event(enable_timing=True) for _ in range(n + 1)]
    events[0].record()
    for i in range(n):
        step(token, pos)
        pos += 1
        events[i + 1].record()
    torch.cuda.synchronize()
    return [a.elapsed_time(b) for a, b in zip(events, events[1:])]


def percentile(xs: list[float], q: float) -> float:
    ys = sorted(xs)
    return ys[min(len(ys) - 1, max(0, round(q / 100 * (len(ys) - 1))))]


def sweep(model: Transformer, shape: MegaShape, positions: list[int], long_tokens: int, prompt_len: int) -> dict:
    """The context sweep of one shape (see the module docstring)."""
    mk = MegaKernels(model, shape)
    step = MegaStep(mk)
    device = model.embed.device
    token, pos = torch.tensor([1], device=device), torch.tensor([0], device=device)
    kv = model.config.kv_bytes_per_position(model.embed.element_size())
    weights = model.weight_bytes_per_token()
    out: dict = {"positions": []}
    with torch.no_grad():
        for n in positions:
            ms = statistics.median(step_times(step, token, pos, n, SWEEP_STEPS))
            out["positions"].append({"pos": n, "ms": ms, "bytes": weights + kv * (n + SWEEP_STEPS // 2)})
        base = out["positions"][0] if out["positions"] else None
        for r in out["positions"]:
            r["over_bytes_pct"] = 100 * (r["ms"] / (base["ms"] * r["bytes"] / base["bytes"]) - 1)
        if long_tokens:
            t = step_times(step, token, pos, prompt_len, long_tokens)
            p50, p99 = percentile(t, 50), percentile(t, 99)
            out["long"] = {"tokens": long_tokens, "start": prompt_len, "p50_ms": p50, "p99_ms": p99,
                           "p99_over_p50": p99 / p50, "max_ms": max(t), "first100_ms": statistics.mean(t[:100]),
                           "last100_ms": statistics.mean(t[-100:])}
    del step, mk
    torch.cuda.empty_cache()
    return out


def run(args: argparse.Namespace) -> dict:
    if not torch.cuda.is_available():
        print("error: bench/megakernel.py needs CUDA", file=sys.stderr)
        raise SystemExit(2)
    device, dtype = torch.device("cuda"), torch.bfloat16
    config = LLAMA_3_2_1B
    weights = random_hf_state_dict(config, args.seed, device, dtype)
    model = Transformer.from_hf_state_dict(config, weights, args.ctx)
    positions = [int(x) for x in args.positions.split(",") if x]
    sweep_ctx = max([*positions, args.prompt_len + args.long_tokens]) + SWEEP_STEPS + 16
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
        try:
            mk = MegaKernels(model, shape)
            wrap = GraphedStep if name == "graphed-step" else MegaStep
            seconds, tokens, steps = time_step(model, wrap(mk), prompt, args.tokens, args.repeats)
        except Exception as e:  # noqa: BLE001 - one shape failing (resources) must not hide the others
            rows.append({"name": name, "note": f"{type(e).__name__}: {str(e)[:200]}", "shape": asdict(shape)})
            print(f"  {name}: {rows[-1]['note']}", file=sys.stderr, flush=True)
            continue
        k = mk.kernel
        speed = Speed.of(seconds, steps, per_step, peak)
        rows.append({
            "name": name, **asdict(speed), "agree": agree(tokens, fused_tokens), "shape": asdict(shape),
            "ctas": mk.ctas, "threads": shape.threads, "ring_kb": shape.ring_bytes // 1024,
            "n_regs": k.registers, "local_bytes": k.local_bytes, "static_shared": k.static_shared,
        })
        print(f"  {name}: {speed.line()}  regs {k.registers} local {k.local_bytes} B", file=sys.stderr, flush=True)
        del mk
        torch.cuda.empty_cache()

    print(f"tracing megakernel {names[0]} ...", file=sys.stderr, flush=True)
    mk = MegaKernels(model, SHAPES[names[0]], trace=True)
    generate(model, mk, prompt, 2)  # the prefill leaves the cache at the prompt
    pos = torch.tensor([args.prompt_len + args.tokens // 2], device=device)
    token = torch.tensor([1], device=device)
    with torch.no_grad():
        for _ in range(3):  # the last of a few back-to-back steps: warm clocks, warm L2 state
            mk.trace_buffer.zero_()
            mk(token, pos)
    torch.cuda.synchronize()
    split = trace_split(mk.trace_buffer, config.layers, stage_bytes(model))
    if args.json:  # the raw stamps too, for a look at single CTAs
        torch.save(mk.trace_buffer.cpu(), Path(args.json).with_suffix(".trace.pt"))
    del mk
    sweeps = {}
    if positions or args.long_tokens:
        model.setup_cache(sweep_ctx)  # a longer cache (the kernels built below take its pointers)
        gen = torch.Generator(device=device).manual_seed(args.seed)
        for layer in model.layers:  # random K/V in every cached row (the work does not depend on them)
            for cache in (layer.attn.k_cache, layer.attn.v_cache):
                cache.copy_(torch.randn(cache.shape, generator=gen, device=device, dtype=torch.float32).to(cache.dtype))
        for name in (args.sweep_shapes or names[0]).split(","):
            if name not in SHAPES:
                print(f"error: unknown sweep shape {name!r}", file=sys.stderr)
                raise SystemExit(2)
            print(f"context sweep megakernel {name} ...", file=sys.stderr, flush=True)
            sweeps[name] = sweep(model, SHAPES[name], positions, args.long_tokens, args.prompt_len)
    return {"device": torch.cuda.get_device_name(0), "tokens": args.tokens, "ctx": args.ctx,
            "repeats": args.repeats, "bytes_per_step": per_step, "rows": rows, "trace": split,
            "trace_shape": names[0], "trace_pos": int(pos.item()), "sweeps": sweeps}


def table(report: dict) -> str:
    lines = [
        f"{report['device']}, Llama-3.2-1B bf16, ctx {report['ctx']}, {report['tokens']} tokens, "
        f"median of {report['repeats']}, {report['bytes_per_step'] / 1e6:.1f} MB/token",
        "",
        "| variant | ms/token | tokens/s | % of peak | agrees with fused | ring KB | threads | regs | local B |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report["rows"]:
        if "note" in r:
            lines.append(f"| megakernel {r['name']} | {r['note']} | | | | | | | |")
            continue
        pct = "n/a" if r["pct_of_peak"] is None else f"{r['pct_of_peak']:.1f}"
        name = r["name"] if r["name"] == "fused" else f"megakernel {r['name']}"
        lines.append(
            f"| {name} | {r['ms_per_token']:.3f} | {r['tokens_per_s']:.1f} | {pct} | {r['agree']} "
            f"| {r.get('ring_kb', '')} | {r.get('threads', '')} | {r.get('n_regs', '')} | {r.get('local_bytes', '')} |"
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
    if all(k in o for o in tr["stages"].values() for k in DETAIL):
        lines += ["", "| stage | seen us (sum) | poll us/task | loader | ring | compute | release |", "|---|---:|---:|---:|---:|---:|---:|"]
        for s, o in tr["stages"].items():
            lines.append(f"| {s} | " + " | ".join(f"{o[k]:.2f}" for k in DETAIL) + " |")
    sweeps = report.get("sweeps") or {}
    if sweeps:
        lines += ["", f"context sweep (issue 31): median ms/step over {SWEEP_STEPS} steps from each filled position; "
                  "over bytes: against the first position's ms scaled by the step's bytes (goal <= 3 %); "
                  "p50/p99 of single steps from the prompt (goal p99/p50 <= 1.05)", "",
                  "| shape | ms at position (over bytes %) | p50 ms | p99 ms | p99/p50 | max ms | first 100 | last 100 |",
                  "|---|---|---:|---:|---:|---:|---:|---:|"]
        for name, sw in sweeps.items():
            at = ", ".join(f"{r['pos']}: {r['ms']:.3f} ({r['over_bytes_pct']:+.1f})" for r in sw["positions"])
            lg = sw.get("long")
            tail = (f"{lg['p50_ms']:.3f} | {lg['p99_ms']:.3f} | {lg['p99_over_p50']:.3f} | {lg['max_ms']:.3f} "
                    f"| {lg['first100_ms']:.3f} | {lg['last100_ms']:.3f}") if lg else "| | | | |"
            lines.append(f"| {name} | {at} | {tail} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench/megakernel.py", description="Megakernel vs fused on a GPU: speed per launch shape and a traced per-stage split.")
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--ctx", type=int, default=2048)
    p.add_argument("--prompt-len", type=int, default=16)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--shapes", default=",".join(SHAPES),
                   help=f"comma-separated, the first is traced; from {', '.join(SHAPES)}")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--positions", default="144,1000,4000",
                   help="filled positions of the context sweep (comma-separated; empty: none)")
    p.add_argument("--long-tokens", type=int, default=1024, help="single steps timed from the prompt for p50/p99 (0: none)")
    p.add_argument("--sweep-shapes", default="", help="shapes of the context sweep (default: the first of --shapes)")
    p.add_argument("--json", metavar="PATH", default=None)
    args = p.parse_args(argv)
    report = run(args)
    print(table(report))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
