"""Per-kernel timing of the fused decode step on a GPU, then the whole step.

    python bench/kernels.py [--int8] [--tune] [--tokens 256] [--ctx 2048]

For each fused kernel at Llama-3.2-1B's shapes: microseconds per call, achieved GB/s (the
bytes it must move / time) and % of the device's peak DRAM bandwidth. A kernel is timed as
a CUDA graph that runs it once per layer over the model's 16 different weight matrices, so
every weight byte comes from DRAM (one matrix would sit in the 60 MB L2 after the first
call) and the in-graph launch gaps count, as they do in the fused step. `--tune` times a
few block shapes per kernel and marks the fastest. `--int8` times the kernels of the
`fused-int8` variant instead (int8 weights with row scales, `fused.TUNED_INT8`).

Then the decode loop of the `eager`, `graph`, `fused` and `fused-int8` variants through the
engine's `generate` (median of several runs), and the fused (or fused-int8) step replayed at
the last position of the cache, where attention reads the whole context.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable

import torch

from perfdoctor.engine.config import LLAMA_3_2_1B
from perfdoctor.engine.fused import TUNED, TUNED_INT8, FusedKernels
from perfdoctor.engine.generate import decode_bytes_per_step, generate, random_prompt
from perfdoctor.engine.variants import VARIANTS
from perfdoctor.engine.measure import Speed, peak_dram_bandwidth
from perfdoctor.engine.model import Transformer
from perfdoctor.engine.weights import random_hf_state_dict


def time_graph(launch: Callable[[], None], calls: int, replays: int = 20) -> float:
    """Microseconds per call of `launch` (which makes `calls` kernel calls), replayed in a graph."""
    launch()  # compile, outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        launch()
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(3):
        start.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / (replays * calls))
    return statistics.median(times)


# Alternatives `--tune` times besides fused.TUNED (which is always timed first).
CANDIDATES: dict[str, list[dict[str, int]]] = {
    "norm_qkv_rope": [{"pairs": p, "block_k": bk, "num_stages": st} for p, bk, st in
                      ((8, 256, 3), (4, 512, 4), (8, 256, 4), (4, 256, 4), (2, 256, 3))],
    "decode_attention": [{"block_s": bs, "num_warps": nw} for bs, nw in ((32, 4), (128, 8), (64, 8), (128, 4))],
    "o_proj": [{"block_n": bn, "block_k": bk, "num_stages": st} for bn, bk, st in
               ((8, 512, 3), (4, 256, 4), (2, 512, 3), (8, 256, 3), (4, 512, 4))],
    "norm_gate_up": [{"block_n": bn, "block_k": bk, "num_stages": st, "num_warps": nw} for bn, bk, st, nw in
                     ((8, 512, 3, 4), (16, 256, 4, 4), (16, 512, 3, 8), (32, 256, 3, 8), (32, 128, 3, 4), (16, 256, 3, 8))],
    "down_proj": [{"block_n": bn, "block_k": bk, "num_stages": st, "num_warps": nw} for bn, bk, st, nw in
                  ((8, 512, 3, 4), (4, 512, 5, 4), (4, 1024, 3, 8), (8, 512, 4, 8), (2, 512, 4, 4), (4, 256, 6, 4))],
    "norm_lm_head_argmax": [{"block_n": bn, "block_k": bk, "num_stages": st, "num_warps": nw} for bn, bk, st, nw in
                            ((16, 512, 3, 4), (32, 256, 4, 4), (64, 128, 3, 4), (32, 512, 3, 8), (64, 256, 3, 8))],
}


# The same for `--int8`, besides fused.TUNED_INT8: block_k doubled with TUNED's stages
# (twice the accumulator), and a few of the bf16 alternatives' shapes.
CANDIDATES_INT8: dict[str, list[dict[str, int]]] = {
    "norm_qkv_rope": [{"pairs": p, "block_k": bk, "num_stages": st} for p, bk, st in
                      ((4, 512, 3), (4, 512, 4), (8, 256, 5), (4, 256, 7))],
    "decode_attention": CANDIDATES["decode_attention"],
    "o_proj": [{"block_n": bn, "block_k": bk, "num_stages": st} for bn, bk, st in
               ((4, 1024, 3), (8, 512, 5), (4, 512, 3), (2, 1024, 3))],
    "norm_gate_up": [{"block_n": bn, "block_k": bk, "num_stages": st, "num_warps": nw} for bn, bk, st, nw in
                     ((16, 512, 3, 8), (8, 512, 5, 4), (16, 256, 7, 4), (32, 256, 5, 8), (16, 256, 4, 4))],
    "down_proj": [{"block_n": bn, "block_k": bk, "num_stages": st, "num_warps": nw} for bn, bk, st, nw in
                  ((4, 1024, 4, 4), (4, 1024, 5, 4), (8, 512, 7, 8), (4, 2048, 3, 8), (2, 1024, 5, 4))],
    "norm_lm_head_argmax": [{"block_n": bn, "block_k": bk, "num_stages": st, "num_warps": nw} for bn, bk, st, nw in
                            ((32, 512, 3, 8), (16, 512, 5, 4), (32, 256, 7, 4), (64, 256, 5, 8), (32, 256, 4, 4))],
}


def kernel_table(k: FusedKernels, pos_value: int, tune: bool, peak: float, int8: bool = False) -> list[tuple]:
    """Rows (kernel, config, us, GB/s, % of peak, is-default) for every kernel at pos_value."""
    from perfdoctor.engine.kernels.decode_attention import (
        attention_workspace,
        decode_attention,
    )
    from perfdoctor.engine.kernels.gemv_residual import gemv_residual
    from perfdoctor.engine.kernels.norm_gate_up import norm_gate_up
    from perfdoctor.engine.kernels.norm_lm_head_argmax import (
        argmax_workspace,
        norm_lm_head_argmax,
    )
    from perfdoctor.engine.kernels.norm_qkv_rope import norm_qkv_rope

    m, c = k.model, k.model.config
    w_head, s_head = k.lm_head
    pos = torch.tensor([pos_value], device="cuda")
    token = torch.tensor([1], device="cuda")
    norm = {"eps": c.rms_eps, "round_twice": k.round_twice}
    group = c.q_heads // c.kv_heads

    def attention(cfg: dict) -> Callable[[], None]:
        cfg = dict(cfg)
        ws = attention_workspace(c.kv_heads, group, c.head_dim, m.ctx, "cuda", block_s=cfg.pop("block_s"))
        return lambda: [decode_attention(k.q, l.attn.k_cache, l.attn.v_cache, pos, k.attn, ws, **cfg) for l in m.layers]

    def lm_head(cfg: dict) -> Callable[[], None]:
        cfg = dict(cfg)
        ws = argmax_workspace(c.vocab_size, "cuda", block_n=cfg.pop("block_n"))
        return lambda: norm_lm_head_argmax(k.h, m.norm.weight, w_head, k.logits, token, ws, scale=s_head, **norm, **cfg)

    def nbytes(weights: tuple[torch.Tensor, torch.Tensor | None]) -> int:
        w, scale = weights
        return w.numel() * w.element_size() + (0 if scale is None else scale.numel() * scale.element_size())

    # name -> (weight bytes per call, calls per step, cfg -> launcher of one step's calls)
    kinds: dict[str, tuple[int, int, Callable[[dict], Callable[[], None]]]] = {
        "norm_qkv_rope": (nbytes(k.qkv[0]), c.layers, lambda cfg: lambda: [
            norm_qkv_rope(k.h, l.attn_norm.weight, k.qkv[i][0], k.cos, k.sin, pos, k.q, l.attn.k_cache,
                          l.attn.v_cache, q_heads=c.q_heads, kv_heads=c.kv_heads, scale=k.qkv[i][1], **norm, **cfg)
            for i, l in enumerate(m.layers)]),
        "decode_attention": (2 * c.kv_heads * (pos_value + 1) * c.head_dim * 2, c.layers, attention),
        "o_proj": (nbytes(k.o[0]), c.layers, lambda cfg: lambda: [
            gemv_residual(k.attn, w, k.h, scale=s, **cfg) for w, s in k.o]),
        "norm_gate_up": (nbytes(k.gate[0]) + nbytes(k.up[0]), c.layers, lambda cfg: lambda: [
            norm_gate_up(k.h, l.mlp_norm.weight, k.gate[i][0], k.up[i][0], k.act,
                         scale_gate=k.gate[i][1], scale_up=k.up[i][1], **norm, **cfg)
            for i, l in enumerate(m.layers)]),
        "down_proj": (nbytes(k.down[0]), c.layers, lambda cfg: lambda: [
            gemv_residual(k.act, w, k.h, scale=s, **cfg) for w, s in k.down]),
        "norm_lm_head_argmax": (nbytes(k.lm_head), 1, lm_head),
    }
    tuned, candidates = (TUNED_INT8, CANDIDATES_INT8) if int8 else (TUNED, CANDIDATES)
    rows = []
    for name, (nbytes_call, calls, make) in kinds.items():
        cfgs = [tuned[name]] + ([x for x in candidates[name] if x != tuned[name]] if tune else [])
        for i, cfg in enumerate(cfgs):
            us = time_graph(make(cfg), calls)
            shown = " ".join(f"{a}={b}" for a, b in cfg.items())
            rows.append((name, shown, us, nbytes_call / us / 1e3, 100 * nbytes_call / (us * 1e-6) / peak, i == 0, calls))
    return rows


def variant_speeds(model: Transformer, tokens: int, peak: float, runs: int = 3) -> list[tuple]:
    prompt = random_prompt(model.config, 16, 0)
    out = []
    for name in ("eager", "graph", "fused", "fused-int8"):
        step = VARIANTS[name](model)
        with torch.inference_mode():
            generate(model, step, prompt, 8)  # warm-up and capture
            results = [generate(model, step, prompt, tokens) for _ in range(runs)]
        r = sorted(results, key=lambda g: g.decode_s)[len(results) // 2]
        s = Speed.of(r.decode_s, r.decode_steps, r.bytes_per_step, peak)
        out.append((name, s.ms_per_token, s.tokens_per_s, s.gb_per_s, s.pct_of_peak))
    floor_ms = 1e3 * decode_bytes_per_step(model, 16 + tokens // 2) / peak  # the model's (bf16) bytes
    out.append(("floor (bf16 bytes / peak)", floor_ms, 1e3 / floor_ms, peak / 1e9, 100.0))
    return out


def full_context_step(model: Transformer, peak: float, int8: bool) -> tuple[float, float]:
    """ms of one fused (or fused-int8) graph replay with the whole cache in use (position ctx - 1)."""
    from perfdoctor.engine.graphs import GraphedStep

    step = GraphedStep(FusedKernels(model, int8=int8))
    token = torch.tensor([1], device="cuda")
    pos = torch.tensor([model.ctx - 1], device="cuda")
    with torch.inference_mode():
        step(token, pos)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(50):
            step.graph.replay()
        end.record()
        end.synchronize()
    ms = start.elapsed_time(end) / 50
    nbytes = step.weight_bytes + model.config.kv_bytes_per_position(2) * model.ctx
    return ms, 100 * nbytes / (ms * 1e-3) / peak


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tune", action="store_true", help="time several block shapes per kernel")
    p.add_argument("--int8", action="store_true", help="the fused-int8 variant's kernels (int8 weights)")
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--ctx", type=int, default=2048)
    args = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("error: bench/kernels.py needs a CUDA GPU")
    peak = peak_dram_bandwidth(0) or 4814e9
    config = LLAMA_3_2_1B
    weights = random_hf_state_dict(config, 0, "cuda", torch.bfloat16)
    model = Transformer.from_hf_state_dict(config, weights, args.ctx)
    del weights
    print(f"{torch.cuda.get_device_name()}, peak {peak / 1e9:.0f} GB/s")

    # The benchmark's mid-generation position (short context), then the full cache.
    for pos_value in sorted({16 + args.tokens // 2, args.ctx - 1}):
        with torch.inference_mode():
            k = FusedKernels(model, int8=args.int8)
            rows = kernel_table(k, pos_value, args.tune and pos_value == args.ctx - 1, peak, args.int8)
        print(f"\nper kernel at position {pos_value} (x{config.layers} layers except the LM head)")
        print(f"{'kernel':22s} {'config':48s} {'us':>8s} {'GB/s':>7s} {'% peak':>7s}")
        best: dict[str, float] = {}
        for name, cfg, us, gbs, pct, default, calls in rows:
            best[name] = min(best.get(name, us), us)
        for name, cfg, us, gbs, pct, default, calls in rows:
            mark = ("*" if default else " ") + ("<" if us == best[name] else " ")
            print(f"{name:22s} {cfg:48s} {us:8.2f} {gbs:7.0f} {pct:6.1f}% {mark}")
        per_step = sum(us * calls for _, _, us, _, _, default, calls in rows if default)
        tuned = "fused.TUNED_INT8, used by the fused-int8 step" if args.int8 else "fused.TUNED, used by the fused step"
        print(f"(* = {tuned}; < = fastest; * rows sum to {per_step / 1e3:.3f} ms/step)")

    ms, pct = full_context_step(model, peak, args.int8)
    print(f"\n{'fused-int8' if args.int8 else 'fused'} step replayed at position {args.ctx - 1} (full cache): {ms:.3f} ms, {pct:.1f} % of peak")
    print(f"\ndecode loop, {args.tokens} tokens from a 16-token prompt, ctx {args.ctx}, median of 3")
    print(f"{'variant':22s} {'ms/token':>9s} {'tokens/s':>9s} {'GB/s':>7s} {'% peak':>7s}")
    for name, ms, tps, gbs, pct in variant_speeds(model, args.tokens, peak):
        print(f"{name:22s} {ms:9.3f} {tps:9.1f} {gbs:7.0f} {pct:6.1f}%")


if __name__ == "__main__":
    main()
