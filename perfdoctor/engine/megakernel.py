"""The `megakernel` variant: a decode step as one persistent CUDA launch.

`fused` runs a step as 81 Triton kernels in one CUDA graph; every boundary costs a ramp
and a tail, and the small matrices never reach full bandwidth. Here one CTA per SM stays
resident for the whole step: a producer warp streams the CTA's weight tiles with Hopper
bulk copies into a ring of shared-memory stages, running ahead through stage and layer
boundaries (weights do not depend on activations), and consumer warps compute from shared
memory, synchronising with the other CTAs through tags stored with the activations (and
one done counter per layer; `kernels/megakernel.cu` explains the schedule, the ordering
and the rounding).

The kernel is CUDA C++ built with nvcc into a cubin (`perfdoctor.engine.cubin`, cached)
and launched through the driver API on PyTorch's stream: one kernel node per step, which
`MegaStep` captures in a CUDA graph on the caller's token and position buffers and replays
at every position (the kernel reads both through pointers and zeroes its own counters at
the end). It needs an sm_90 GPU (Hopper: the bulk-copy engine), bf16 weights, and the
model's tensors in place.

`plan` is the tile schedule in Python: the host sizes and checks everything with it and
passes its rows per tile to the kernel, and the CPU tests check its invariants.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from perfdoctor.engine.config import BadInput, ModelConfig
from perfdoctor.engine.model import Transformer

SOURCE = Path(__file__).parent / "kernels" / "megakernel.cu"
STAGES = ("qkv", "attention", "o", "gate_up", "down")  # per layer, in order; then "head"
WEIGHT_STAGES = ("qkv", "o", "gate_up", "down", "head")  # the kernel's Params.rows order
COUNTER_STRIDE = 32  # int32 between done counters (CSTRIDE in the kernel)
TRACE_WORDS = 8  # int64 per CTA and stage in the trace buffer (TRACE_WORDS in the kernel)
MAXK = 8192  # widest input vector the kernel holds per thread (MAXK)
MAXD = 128  # widest head (MAXD)
HEAD_DIMS = (16, 32, 64, 128)  # the head sizes attention<D> is built for
BLOCK_S = 64  # attention positions per chunk, one ring slot of K and V (BLOCK_S)
GMAX = 4  # query heads per KV head at most (GMAX)
SMAX = 13  # position splits of a KV head's chunks at most (SMAX)
PART_CHUNKS = 256  # 16-byte chunks of one warp's part of a row at most (32 lanes x XCH)
ARCH = (9, 0)  # sm_90, Hopper: the kernel is built on its bulk copies and mbarriers


def unsupported_gpu(device: torch.device | int | None = None) -> str | None:
    """Why the megakernel cannot run on ``device`` (default: the current CUDA device), as
    "needs ...", or None when it can. ``perfdoctor demo`` asks before it profiles the
    variant, to skip it with one line instead of a failed run."""
    if not torch.cuda.is_available():
        return "needs CUDA, which this torch does not have"
    major, minor = torch.cuda.get_device_capability(device)
    if (major, minor) != ARCH:
        return f"needs a Hopper GPU (sm_90), this one is sm_{major}{minor}"
    return None


@dataclass(frozen=True)
class MegaShape:
    """The kernel's compile-time shape: tile_bytes per ring stage (one bulk copy), `stages`
    of them per CTA, consumer_warps (plus one producer warp). A tile is R rows, the largest
    divisor of consumer_warps whose rows fit tile_bytes, and each warp owns one part of one
    row (consumer_warps / R parts): 8 rows of 4 KB for the 2048-wide matrices of
    Llama-3.2-1B, 2 rows of 16 KB (4 warps each) for down.

    `in_flight`: bulk copies outstanding per producer at most (0: up to `stages`; 2
    measured 1-2 % faster once the consumers outran DRAM). `tiles_per_step`: tiles a
    consumer warp takes per step of its loop (1: one at a time; 2: two tiles' loads, FMAs
    and shuffles interleave, which spills and measured 1.6 % slower). `flags`: every stage
    boundary but gate/up -> down synchronises on tags stored with its data instead of done
    counters (q/k/v, the attention output, the residual stream and the O / down outputs
    become 32-bit words: tag << 16 | bf16; no release fence, no counter poll).

    (Knobs measured no better and removed in v4, with their code: an L2 prefetch ahead of
    the ring, always or only while it was full; a nanosleep between counter polls; the
    tile-loop timing probes; tags on gate/up's output too; a nanosleep in the tag spins.
    docs/kernels-notes.md has their rows.)

    `attn_split`: cached 64-position chunks per attention split, the target: a KV head's
    chunks are cut into S = min(SMAX, ctas / kv_heads, ceil(chunks / attn_split)) splits,
    each a task of its own CTA (`attention_tasks`). `attn_split_after`: S = 1 (v4.7's
    per-head owners, no merge) while a KV head has at most this many chunks; 0 splits
    from the first chunk the target allows (v4.8/v4.9). Both are run-time parameters (the
    same cubin).
    """

    tile_bytes: int = 32768
    stages: int = 6
    consumer_warps: int = 8
    in_flight: int = 2  # bulk copies outstanding per producer at most; 0: up to `stages`
    tiles_per_step: int = 1
    flags: bool = True  # run 24: 0.711 ms against 0.783 with counters
    attn_split: int = 3  # with attn_split_after 16: S = 6 at 1,024-1,151 positions, 13 from 2,304
    # v4.10: S = 1 up to 16 chunks (1,023 positions). v4.9's run: the split lost below ~1,000
    # positions (S = 2 at 192-272: ~45 us a step), tied at 1,000 (0.800 ms both), won at 4,000
    attn_split_after: int = 16

    def defines(self, head_dim: int) -> dict[str, int]:
        """The kernel's -D defines for a model of `head_dim` (one attention<D> is built)."""
        return {"TILE_BYTES": self.tile_bytes, "NSTAGE": self.stages, "CWARPS": self.consumer_warps,
                "IN_FLIGHT": self.in_flight or self.stages, "TPI": self.tiles_per_step, "HEAD_DIM": head_dim,
                "FLAGS": int(self.flags)}

    @property
    def threads(self) -> int:
        return 32 * (self.consumer_warps + 1)

    @property
    def ring_bytes(self) -> int:
        return self.tile_bytes * self.stages


TUNED = MegaShape()  # bench/megakernel.py's table says why


@dataclass(frozen=True)
class AttnTask:
    """One attention task of a step: query heads [h0, h0 + heads) of KV head `kv`'s group
    (all of them when splits > 1, one when splits == 1) over its cached chunks [c0, c1) (64
    positions each; the last chunk of the last split holds this step's position), split `j`
    of `splits`, on CTA `cta`. Split 0's CTA merges the others' partials when splits > 1;
    the last split of the group's first head appends the step's K/V row."""

    cta: int
    kv: int
    h0: int
    heads: int
    j: int
    splits: int
    c0: int
    c1: int


def attention_splits(pos: int, ctas: int, kv_heads: int, attn_split: int, attn_split_after: int) -> int:
    """S, the position splits of each KV head's chunks at position `pos` (the kernel's
    attn_task): 1 while the n = pos // 64 + 1 chunks are at most `attn_split_after`, else
    min(SMAX, ctas // kv_heads, ceil(n / attn_split)) (at least 1)."""
    n = pos // BLOCK_S + 1
    if n <= attn_split_after:
        return 1
    smax = max(1, min(SMAX, ctas // kv_heads))
    return max(1, min(smax, -(-n // attn_split)))


def attention_tasks(pos: int, ctas: int, q_heads: int, kv_heads: int, attn_split: int,
                    attn_split_after: int) -> list[AttnTask]:
    """The attention tasks of a step at position `pos`, as the kernel's `attn_task` deals
    them: with S = 1 one task per query head (v4.7's owners: CTA floor(hq G / q_heads)),
    with S > 1 task t = kv S + j (the whole group) on CTA floor(t G / T), T = kv_heads S <=
    G; split j holds the chunks [j n / S, (j + 1) n / S) of the n = pos // 64 + 1. Computed
    per CTA, as the kernel does (CTA b: task ceil(b T / G) if below ceil((b + 1) T / G)), so
    a test can hold it against the dealing it describes."""
    n = pos // BLOCK_S + 1
    S = attention_splits(pos, ctas, kv_heads, attn_split, attn_split_after)
    group = q_heads // kv_heads
    HS = group if S == 1 else 1  # head subsets per KV head
    gh = group // HS
    T = kv_heads * HS * S
    out = []
    for b in range(ctas):
        t = -(-b * T // ctas)
        if t < -(-(b + 1) * T // ctas):
            j = t % S
            out.append(AttnTask(b, t // (HS * S), t // S % HS * gh, gh, j, S, j * n // S, (j + 1) * n // S))
    return out


@dataclass(frozen=True)
class WeightStage:
    """One weight stage of a layer (or the head): an [rows, cols] row-major bf16 matrix cut
    into tiles of `rows_per_tile` consecutive rows; CTA b of G takes tiles b, b + G, ...
    `paired` (gate/up, [gate; up]): a tile is rows_per_tile / 2 gate rows and the same up
    rows, so that one CTA holds both dot products of each SwiGLU product it writes."""

    name: str
    rows: int
    cols: int
    rows_per_tile: int
    paired: bool = False

    @property
    def tiles(self) -> int:
        return -(-self.rows // self.rows_per_tile)

    def tile_bytes(self, t: int) -> int:
        return min(self.rows_per_tile, self.rows - t * self.rows_per_tile) * self.cols * 2

    def tiles_of(self, cta: int, ctas: int) -> range:
        return range(cta, self.tiles, ctas)

    def rows_of(self, t: int) -> list[range]:
        """The matrix rows tile t holds, in ring order (one bulk copy per range)."""
        n = self.tile_bytes(t) // (2 * self.cols)
        if not self.paired:
            return [range(t * self.rows_per_tile, t * self.rows_per_tile + n)]
        half, start = self.rows // 2, t * self.rows_per_tile // 2
        return [range(start, start + n // 2), range(half + start, half + start + n // 2)]


def plan(config: ModelConfig, shape: MegaShape = TUNED) -> dict[str, WeightStage]:
    """The weight stages of a step for `config` under `shape`, checked against the kernel's
    limits (BadInput naming the first one a config breaks)."""
    c = config
    mats = {
        "qkv": ((c.q_heads + 2 * c.kv_heads) * c.head_dim, c.hidden),
        "o": (c.hidden, c.q_heads * c.head_dim),
        "gate_up": (2 * c.intermediate, c.hidden),
        "down": (c.hidden, c.intermediate),
        "head": (c.vocab_size, c.hidden),
    }
    if c.head_dim not in HEAD_DIMS or c.q_heads % c.kv_heads or c.q_heads // c.kv_heads > GMAX:
        raise BadInput(f"megakernel: head_dim must be one of {', '.join(map(str, HEAD_DIMS))} (got {c.head_dim}), "
                       f"q_heads a multiple of kv_heads, at most {GMAX} query heads per KV head")
    if shape.attn_split < 1:
        raise BadInput(f"megakernel: attn_split must be at least 1 chunk, got {shape.attn_split}")
    if not 0 <= shape.attn_split_after < 2**31:
        raise BadInput(f"megakernel: attn_split_after must be 0 to 2**31 - 1 chunks, got {shape.attn_split_after}")
    out = {}
    for name, (rows, cols) in mats.items():
        if cols % 8 or cols > MAXK:
            raise BadInput(f"megakernel: the {name} matrix has {cols} columns; it needs a multiple of 8 up to {MAXK} "
                           "(16-byte rows for the bulk copies, one register chunk set per thread)")
        if 2 * cols > shape.tile_bytes:
            raise BadInput(f"megakernel: a {name} row ({2 * cols} bytes) is wider than a tile ({shape.tile_bytes})")
        w = shape.consumer_warps
        r = max(d for d in range(1, w + 1) if w % d == 0 and d * 2 * cols <= shape.tile_bytes)
        if -(-cols // 8 // (w // r)) > PART_CHUNKS:
            raise BadInput(f"megakernel: a warp's part of a {name} row ({cols} columns over {w // r} warps) "
                           f"exceeds {PART_CHUNKS * 8} columns; use more consumer warps or larger tiles")
        out[name] = WeightStage(name, rows, cols, r, paired=name == "gate_up")
    if out["gate_up"].rows_per_tile % 2:
        raise BadInput(f"megakernel: a gate/up tile holds {out['gate_up'].rows_per_tile} rows; it needs gate and up rows "
                       "in pairs (an even number: use more consumer warps or larger tiles)")
    if 2 * BLOCK_S * c.head_dim * 2 > shape.tile_bytes:
        raise BadInput(f"megakernel: a {BLOCK_S}-position K/V chunk ({4 * BLOCK_S * c.head_dim} bytes) "
                       f"is larger than a tile ({shape.tile_bytes})")
    return out


class _Params(ctypes.Structure):
    """The kernel's `Params`, field for field (see kernels/megakernel.cu)."""

    _fields_ = [
        *[(n, ctypes.c_void_p) for n in (
            "table", "embed", "cos", "sin", "token", "pos", "hbuf", "y", "qkv", "attn", "gu", "logits",
            "part_val", "part_idx", "next_token", "counters", "trace", "epoch", "apart")],
        *[(n, ctypes.c_int) for n in ("L", "K", "NQ", "NKV", "D", "I", "V")],
        ("rows", ctypes.c_int * 5),
        ("stride_head", ctypes.c_longlong), ("stride_pos", ctypes.c_longlong),
        ("eps", ctypes.c_float), ("scale", ctypes.c_float), ("round_twice", ctypes.c_int),
        ("attn_split", ctypes.c_int), ("attn_split_after", ctypes.c_int),
    ]


class MegaKernels:
    """The megakernel decode step, `(token [1], pos [1]) -> next token [1]`, without a graph.

    Owns the activation buffers, the pointer table, the argmax partials, the done counters
    (zero between steps: `counter_values()`) and, with `trace=True`, a `[CTAs, stages, 8]`
    int64 buffer (`trace_buffer`: per CTA and stage, %globaltimer ns at the stage's start,
    when its inputs were ready (0: no work there), at its end, the SM id, then the detail
    of TRACE_WORDS in the kernel: previous stage seen complete, ring-wait cycles, last
    store issued, cycles from ready to last store). `logits` holds
    the last step's logits; `kernel` the loaded function (registers, spills).
    """

    def __init__(self, model: Transformer, shape: MegaShape = TUNED, trace: bool = False) -> None:
        from perfdoctor.engine.cubin import CudaKernel, build_cubin
        from perfdoctor.engine.fused import rms_norm_rounds_twice

        c = model.config
        device, dtype = model.embed.device, model.embed.dtype
        if device.type != "cuda":
            raise BadInput("the megakernel variant needs a CUDA device")
        why = unsupported_gpu(device)
        if why is not None:
            raise BadInput(f"the megakernel variant {why}")
        if dtype != torch.bfloat16:
            raise BadInput(f"the megakernel variant needs bf16 weights, not {dtype}")
        self.model, self.shape, self.stages = model, shape, plan(c, shape)
        act = {"device": device, "dtype": dtype}
        # With flags, these are tagged 32-bit words, zero (no tag) at first.
        tagged = {"device": device, "dtype": torch.int32} if shape.flags else act
        self.hbuf = torch.zeros(2, c.hidden, **tagged)  # the residual stream, alternating halves
        self.y = torch.zeros(c.hidden, **tagged)  # the O / down projection before its residual add
        self.qkv = torch.zeros((c.q_heads + 2 * c.kv_heads) * c.head_dim, **tagged)
        self.attn = torch.zeros(c.q_heads * c.head_dim, **tagged)
        self.epoch = torch.zeros(1, dtype=torch.int32, device=device)  # launches mod 65535 (the tags' step part)
        # attention partials (lse, o[head_dim]) per query head and split: 64-bit tagged words
        self.apart = torch.zeros(c.q_heads * SMAX * (c.head_dim + 1), dtype=torch.int64, device=device)
        self.gu = torch.zeros(c.intermediate, **act)  # silu(gate) * up, down's input
        self.logits = torch.empty(c.vocab_size, **act)
        self.next_token = torch.zeros(1, dtype=torch.long, device=device)
        half = c.head_dim // 2
        self.cos = model.rope_cos[:, :half].contiguous()
        self.sin = model.rope_sin[:, :half].contiguous()

        caches = [t for layer in model.layers for t in (layer.attn.k_cache, layer.attn.v_cache)]
        if any(t.stride() != caches[0].stride() or t.stride(-1) != 1 or t.stride(-2) != c.head_dim for t in caches):
            raise BadInput("megakernel: every layer's K/V cache must be [kv_heads, ctx, head_dim], contiguous rows")
        head = model.embed if model.lm_head is None else model.lm_head
        rows = []
        for layer in model.layers:
            a, m = layer.attn, layer.mlp
            rows.append([layer.attn_norm.weight, a.wqkv, a.k_cache, a.v_cache, a.wo, layer.mlp_norm.weight, m.w13, m.w2])
        rows.append([model.norm.weight, head] + [head] * 6)  # the kernel reads the first two
        for t in [model.embed, self.cos, self.sin] + [t for r in rows for t in r]:
            if t.dtype != dtype or t.device != device or not t.is_contiguous() or t.data_ptr() % 16:
                raise BadInput(f"megakernel: every weight and cache must be contiguous {dtype} on {device}, 16-byte aligned")
        self.table = torch.tensor([[t.data_ptr() for t in r] for r in rows], dtype=torch.int64, device=device)

        props = torch.cuda.get_device_properties(device)
        self.ctas = props.multi_processor_count
        if self.ctas < c.q_heads:  # one attention task per CTA at most (a query head's at short context)
            raise BadInput(f"megakernel: {c.q_heads} query heads need as many CTAs, this GPU has {self.ctas} SMs")
        self.part_val = torch.empty(self.ctas, dtype=torch.float32, device=device)
        self.part_idx = torch.empty(self.ctas, dtype=torch.int32, device=device)
        self.counters = torch.zeros((5 * c.layers + 1) * COUNTER_STRIDE, dtype=torch.int32, device=device)
        self.trace_buffer = (torch.zeros(self.ctas, 5 * c.layers + 1, TRACE_WORDS, dtype=torch.int64, device=device)
                             if trace else None)
        self.kernel = CudaKernel(build_cubin(SOURCE, shape.defines(c.head_dim)), "megakernel", shape.ring_bytes)
        # Every CTA waits for all the others: the grid must be resident at once.
        if self.kernel.blocks_per_sm(shape.threads, shape.ring_bytes) < 1:
            raise BadInput(f"megakernel: a {shape.ring_bytes}-byte ring does not fit one CTA per SM")
        k_cache = caches[0]
        self.params = _Params(
            table=self.table.data_ptr(), embed=model.embed.data_ptr(), cos=self.cos.data_ptr(), sin=self.sin.data_ptr(),
            hbuf=self.hbuf.data_ptr(), y=self.y.data_ptr(), qkv=self.qkv.data_ptr(), attn=self.attn.data_ptr(), gu=self.gu.data_ptr(),
            logits=self.logits.data_ptr(), part_val=self.part_val.data_ptr(), part_idx=self.part_idx.data_ptr(),
            next_token=self.next_token.data_ptr(), counters=self.counters.data_ptr(),
            trace=self.trace_buffer.data_ptr() if trace else None, epoch=self.epoch.data_ptr(), apart=self.apart.data_ptr(),
            L=c.layers, K=c.hidden, NQ=c.q_heads, NKV=c.kv_heads, D=c.head_dim, I=c.intermediate, V=c.vocab_size,
            rows=(ctypes.c_int * 5)(*[self.stages[s].rows_per_tile for s in WEIGHT_STAGES]),
            stride_head=k_cache.stride(0), stride_pos=k_cache.stride(1),
            eps=c.rms_eps, scale=c.head_dim**-0.5, round_twice=int(rms_norm_rounds_twice(device, dtype)),
            attn_split=shape.attn_split, attn_split_after=shape.attn_split_after,
        )

    def counter_values(self) -> list[int]:
        """The done counters (all zero between steps: the kernel resets them)."""
        return self.counters[::COUNTER_STRIDE].tolist()

    def __call__(self, token: Tensor, pos: Tensor) -> Tensor:
        token = token if token.dtype == torch.long else token.long()
        pos = pos if pos.dtype == torch.long else pos.long()
        self.params.token, self.params.pos = token.data_ptr(), pos.data_ptr()
        self._keep = (token, pos)  # alive until the launch has read them
        self.kernel.launch(self.ctas, self.shape.threads, self.shape.ring_bytes, self.params)
        return self.next_token


class MegaStep:
    """The megakernel step replayed from CUDA graphs that read the token and the position
    where the caller keeps them: nothing is copied around the kernel node.

    `graphs.GraphedStep` copies both inputs into static buffers before each replay: two
    small device copies per step, serialised with the kernel on the stream. The kernel reads
    the token and position through pointers, so a graph captured on the caller's own
    tensors needs no copy. `generate` passes one position tensor (advanced in place) and,
    from the second step on, the kernel's own output as the token: the kernel reads the
    token at its start and writes the next one at its end, after every CTA has read it.
    One graph per (token, position) pair of buffers, kept with the two tensors (alive as
    long as a graph may read them); a caller that passes new tensors at every step gets a
    capture per step (correct, slower), the cache emptied past MAX_GRAPHS entries.
    `step`: the `MegaKernels` (its logits, counters).
    """

    MAX_GRAPHS = 4

    def __init__(self, kernels: MegaKernels) -> None:
        self.step = kernels
        self.graphs: dict[tuple[int, int], tuple[torch.cuda.CUDAGraph, Tensor, Tensor]] = {}

    def __call__(self, token: Tensor, pos: Tensor) -> Tensor:
        token = token if token.dtype == torch.long else token.long()
        pos = pos if pos.dtype == torch.long else pos.long()
        key = (token.data_ptr(), pos.data_ptr())
        entry = self.graphs.get(key)
        if entry is None:
            if len(self.graphs) >= self.MAX_GRAPHS:
                self.graphs.clear()
            graph = torch.cuda.CUDAGraph()  # the kernel needs no warm-up: nothing in it is lazy
            with torch.cuda.graph(graph):
                self.step(token, pos)
            entry = self.graphs[key] = (graph, token, pos)
        entry[0].replay()
        return self.step.next_token


def megakernel_step(model: Transformer):  # -> generate.Step
    """The megakernel step, in CUDA graphs on the caller's buffers (the `megakernel`
    variant's factory)."""
    if model.embed.device.type != "cuda":
        raise BadInput("the megakernel variant needs a CUDA device (it is a CUDA kernel for Hopper GPUs)")
    return MegaStep(MegaKernels(model))
