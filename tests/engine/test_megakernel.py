"""The megakernel variant: its tile plan (CPU), its refusal without a GPU, and on a Hopper GPU
single steps against the eager model at tiny, odd and Llama-3.2-1B shapes (NaN-poisoned
outputs and cache rows first), a ring that wraps many times, and bit-identical replays.

The end-to-end teacher-forced comparison with eager and fused is in test_kernels.py
(`test_kernels_match_eager_*[megakernel]`).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from perfdoctor.engine.config import LLAMA_3_2_1B, TINY, BadInput, ModelConfig, RopeScaling
from perfdoctor.engine.megakernel import BLOCK_S, GMAX, SMAX, TUNED, MegaShape, attention_splits, attention_tasks, plan

CUDA = torch.cuda.is_available()
HOPPER = CUDA and torch.cuda.get_device_capability() == (9, 0)
needs_hopper = pytest.mark.skipif(not HOPPER, reason="the megakernel needs a Hopper GPU (sm_90)")
DEVICE = "cuda" if CUDA else "cpu"


def _odd_config() -> ModelConfig:
    # Nothing a power of two but head_dim: a GQA group of 3, row counts no tile divides
    # (qkv 160, gate/up 112, head 250 rows), 80-byte rows (a multiple of 16, as bulk copies need).
    return ModelConfig(
        name="odd", vocab_size=250, hidden=40, layers=2, q_heads=6, kv_heads=2, head_dim=16,
        intermediate=56, rope_scaling=RopeScaling(original_max_position=16), max_position=2048,
    )


# ---- the plan, on any machine --------------------------------------------------------------


@pytest.mark.parametrize("config", [LLAMA_3_2_1B, TINY, _odd_config()], ids=lambda c: c.name)
@pytest.mark.parametrize("shape", [TUNED, MegaShape(tile_bytes=4096, stages=2), MegaShape(consumer_warps=12)],
                         ids=["tuned", "small", "12-warps"])
def test_plan_covers_every_row_once(config, shape):
    """Each stage's tiles, dealt round-robin to 132 CTAs, cover every row exactly once, each
    tile one bulk copy (a multiple of 16 bytes, at most a ring stage)."""
    if 2 * config.intermediate > shape.tile_bytes:
        with pytest.raises(BadInput, match="wider than a tile"):
            plan(config, shape)
        return
    for st in plan(config, shape).values():
        covered = torch.zeros(st.rows, dtype=torch.int32)
        for cta in range(132):
            for t in st.tiles_of(cta, 132):
                nbytes = st.tile_bytes(t)
                assert 0 < nbytes <= shape.tile_bytes and nbytes % 16 == 0
                ranges = st.rows_of(t)
                assert sum(len(r) for r in ranges) * 2 * st.cols == nbytes
                for r in ranges:
                    covered[r.start : r.stop] += 1
                if st.paired:  # gate row i with up row i: the products a tile's warps write
                    gate, up = ranges
                    assert [i + st.rows // 2 for i in gate] == list(up)
        assert covered.eq(1).all(), st.name


def test_plan_of_llama_1b():
    """32 KB tiles: 8 rows of the 2048-wide matrices (a warp a row), 2 of the 8192-wide down
    projection (4 warps a row); the tile counts the notes' per-CTA balance is computed from."""
    p = plan(LLAMA_3_2_1B)
    assert {k: (v.rows_per_tile, v.tiles) for k, v in p.items()} == {
        "qkv": (8, 384), "o": (8, 256), "gate_up": (8, 2048), "down": (2, 1024), "head": (8, 16032),
    }
    assert sum(v.rows * v.cols * 2 for k, v in p.items() if k != "head") * 16 + p["head"].rows * 2048 * 2 == 2_471_493_632


def test_plan_refuses_what_the_kernel_cannot_copy():
    odd = replace(_odd_config(), hidden=36)  # 72-byte rows: not a multiple of 16
    with pytest.raises(BadInput, match="multiple of 8"):
        plan(odd)
    with pytest.raises(BadInput, match="head_dim"):
        plan(replace(_odd_config(), head_dim=12))
    with pytest.raises(BadInput, match="head_dim must be one of 16, 32, 64, 128"):  # attention<D> is built for these
        plan(replace(_odd_config(), head_dim=80))
    with pytest.raises(BadInput, match=f"at most {GMAX} query heads per KV head"):  # the attention scratch's size
        plan(replace(_odd_config(), q_heads=10, kv_heads=2))
    with pytest.raises(BadInput, match="attn_split"):
        plan(_odd_config(), MegaShape(attn_split=0))
    with pytest.raises(BadInput, match="attn_split_after"):  # a C int in the kernel's Params
        plan(_odd_config(), MegaShape(attn_split_after=-1))


# ---- attention tasks (v4.8): the dealing and the split-and-merge arithmetic ------------------


@pytest.mark.parametrize("heads", [(32, 8), (6, 2), (4, 1), (3, 3)], ids=lambda h: f"{h[0]}q{h[1]}kv")
@pytest.mark.parametrize("attn_split_after", [0, 16])
@pytest.mark.parametrize("attn_split", [1, 2, 3, 4, 100])
@pytest.mark.parametrize("pos", [0, 1, 63, 64, 65, 127, 128, 144, 191, 192, 1000, 1023, 1024, 2047, 4000, 8191])
def test_attention_tasks_cover_every_chunk_once(pos, attn_split, attn_split_after, heads):
    """At every position the kernel's per-CTA dealing gives each (query head, split) to
    exactly one CTA, at most one task per CTA, and each KV head's splits cover its n = pos //
    64 + 1 chunks in order, none empty; S is within [1, min(13, G / NKV, n)], 1 while n <=
    attn_split_after. With S = 1 a task is one query head on v4.7's owner CTA, floor(hq G /
    NQ); with S > 1 the group."""
    ctas, (q_heads, kv_heads) = 132, heads
    group = q_heads // kv_heads
    tasks = attention_tasks(pos, ctas, q_heads, kv_heads, attn_split, attn_split_after)
    n = pos // BLOCK_S + 1
    S = attention_splits(pos, ctas, kv_heads, attn_split, attn_split_after)
    assert 1 <= S <= min(SMAX, ctas // kv_heads, n)
    assert S == (1 if n <= attn_split_after else min(SMAX, ctas // kv_heads, -(-n // attn_split)))
    assert len({t.cta for t in tasks}) == len(tasks) == kv_heads * S * (group if S == 1 else 1)
    covered = sorted((t.kv * group + h, t.j) for t in tasks for h in range(t.h0, t.h0 + t.heads))
    assert covered == [(hq, j) for hq in range(q_heads) for j in range(S)]
    assert all(t.heads == (1 if S == 1 else group) for t in tasks)
    if S == 1:
        assert sorted((t.cta, t.kv * group + t.h0) for t in tasks) == [(hq * ctas // q_heads, hq) for hq in range(q_heads)]
    for kv in range(kv_heads):
        for h0 in {t.h0 for t in tasks if t.kv == kv}:
            mine = sorted((t for t in tasks if t.kv == kv and t.h0 == h0), key=lambda t: t.j)
            assert mine[0].c0 == 0 and mine[-1].c1 == n
            assert all(a.c1 == b.c0 for a, b in zip(mine, mine[1:]))
            assert all(t.c1 > t.c0 and t.splits == S for t in mine)
            # the last split holds pos (its h0 == 0 task appends the K/V row); split 0 merges
            assert mine[-1].c0 * BLOCK_S <= pos < mine[-1].c1 * BLOCK_S
        assert sum(t.j == S - 1 and t.h0 == 0 for t in tasks if t.kv == kv) == 1  # one appender per KV head


def test_attention_splits_of_llama_1b():
    """What the v4.10 prediction assumes for Llama-3.2-1B on 132 SMs (8 KV heads), tuned:
    v4.7's 32 per-head owners (no merge) up to 16 chunks (1,023 positions), then 6 splits of
    <= 3 chunks at 1,024, 13 of <= 5 chunks at 4,000; and v4.9's rule (attn_split_after 0,
    the bench's `v4.9` shape): 2 splits from 192 positions, 6 at 1,000."""
    split, after = TUNED.attn_split, TUNED.attn_split_after
    assert after == 16
    at = (16, 144, 191, 192, 272, 1000, 1023, 1024, 1151, 1152, 2303, 2304, 4000)
    assert [attention_splits(p, 132, 8, split, after) for p in at] == [1, 1, 1, 1, 1, 1, 1, 6, 6, 7, 12, 13, 13]
    assert [attention_splits(p, 132, 8, split, 0) for p in at] == [1, 1, 1, 2, 2, 6, 6, 6, 6, 7, 12, 13, 13]
    for pos, after, tasks, most in ((144, 16, 32, 3), (1000, 16, 32, 16), (1024, 16, 48, 3), (4000, 16, 104, 5),
                                    (272, 0, 16, 3), (1000, 0, 48, 3)):
        got = attention_tasks(pos, 132, 32, 8, split, after)
        assert (len(got), max(t.c1 - t.c0 for t in got)) == (tasks, most)


@pytest.mark.parametrize("attn_split", [1, 3, 8])
@pytest.mark.parametrize("attn_split_after", [1, 5, 16, 40])
def test_attention_splits_only_after_the_threshold(attn_split, attn_split_after):
    """v4.10's rule against v4.9's at every chunk count up to 8,192 positions: S = 1 while
    the n chunks are at most attn_split_after, and v4.9's S (attn_split_after 0) beyond; the
    tasks beyond the threshold are v4.9's exactly, those below v4.7's owners."""
    for pos in range(0, 8192, BLOCK_S):
        n = pos // BLOCK_S + 1
        old, new = (attention_splits(pos, 132, 8, attn_split, a) for a in (0, attn_split_after))
        assert new == (1 if n <= attn_split_after else old), (pos, n)
        tasks = attention_tasks(pos, 132, 32, 8, attn_split, attn_split_after)
        if n > attn_split_after:
            assert tasks == attention_tasks(pos, 132, 32, 8, attn_split, 0)
        else:
            assert tasks == attention_tasks(pos, 132, 32, 8, 1 << 20, 0)  # no-split's dealing


def test_params_mirror_the_kernels_struct():
    """_Params must be the kernel's `struct Params` field for field (names, order, kinds):
    a field out of place would hand the kernel another word (attn_split_after read as
    something else would still run correctly, with a rule nobody chose)."""
    import ctypes
    import re

    from perfdoctor.engine.megakernel import SOURCE, _Params

    body = re.search(r"struct Params \{[^\n]*\n(.*?)\n\};", SOURCE.read_text(), re.S).group(1)
    body = re.sub(r"//[^\n]*", "", body)
    fields = []
    for decl in filter(None, (d.strip() for d in body.split(";"))):
        ctype, names = re.match(r"((?:const\s+)?(?:unsigned long long|long long|unsigned|int|float|bf16)\s*\*?)\s*(.*)", decl).groups()
        for name in (x.strip() for x in names.split(",")):
            m = re.fullmatch(r"(\w+)(?:\[(\d+)\])?", name)
            kind = "ptr" if "*" in ctype else ctype.replace("const", "").strip()
            fields.append((m.group(1), kind, int(m.group(2) or 1)))
    kinds = {ctypes.c_void_p: "ptr", ctypes.c_int: "int", ctypes.c_longlong: "long long", ctypes.c_float: "float"}
    mine = []
    for name, t in _Params._fields_:
        count = getattr(t, "_length_", 1)
        mine.append((name, kinds[getattr(t, "_type_", t) if count > 1 else t], count))
    assert mine == fields
    assert fields[-2:] == [("attn_split", "int", 1), ("attn_split_after", "int", 1)]


def _bf(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.bfloat16).float()


def _quarter(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, s0: int, s1: int):
    """One 16-position quarter as the kernel computes it: (max, unrounded sum, acc)."""
    sc = _bf(k[s0:s1] @ q)
    m = sc.max()
    e = torch.exp(sc - m)
    return m, e.sum(), _bf(e) @ v[s0:s1]


def _merge(run, part):
    """(m, l, acc) runs merged as the kernel does (a -inf run contributes nothing)."""
    (m, l, acc), (pm, pl, pacc) = run, part
    if pm == -float("inf"):
        return run
    new_m = torch.maximum(m, pm)
    a, b = torch.exp(m - new_m), torch.exp(pm - new_m)
    return new_m, l * a + b * pl, acc * a + b * pacc


def _owner_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, warps: int = 8) -> torch.Tensor:
    """The kernel at S = 1 (v4.7's per-head owner): quarter qq of chunk ch on warp (4 ch +
    qq) % warps, each warp's run over its quarters, the warps merged in order."""
    length, D = k.shape
    out = []
    for h in range(q.shape[0]):
        runs = [(torch.tensor(-float("inf")), torch.tensor(0.0), torch.zeros(D)) for _ in range(warps)]
        for ch in range(-(-length // BLOCK_S)):
            for w in range(warps):
                qq = (w - 4 * ch) % warps
                s0 = ch * BLOCK_S + qq * (BLOCK_S // 4)
                if qq < 4 and s0 < length:
                    runs[w] = _merge(runs[w], _quarter(q[h], k, v, s0, min(s0 + BLOCK_S // 4, length)))
        m, l, acc = (torch.tensor(-float("inf")), torch.tensor(0.0), torch.zeros(D))
        for r in runs:
            m, l, acc = _merge((m, l, acc), r)
        out.append(acc / l)
    return torch.stack(out)


def _kernel_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, splits: list[tuple[int, int]]) -> torch.Tensor:
    """The kernel's arithmetic for one KV group (q [group, D] already scaled and rounded;
    k, v [length, D] bf16 values in fp32), in fp32: each 16-position quarter softmaxed on its
    own maximum (scores and probabilities rounded to bf16, l summed unrounded), an item (head,
    quarter) carried over its task's chunks, the quarters merged in order, then the splits
    (1.. as lse = m + log l, o = acc / l) merged into split 0's (m, l, acc) in order."""
    length, D = k.shape
    quarter = BLOCK_S // 4
    out = []
    for h in range(q.shape[0]):
        parts = []
        for c0, c1 in splits:
            runs = []
            for qq in range(4):
                m_run, l_run, acc_run = torch.tensor(-float("inf")), torch.tensor(0.0), torch.zeros(D)
                for ch in range(c0, c1):
                    s0 = ch * BLOCK_S + qq * quarter
                    if s0 >= length:
                        continue
                    s1 = min(s0 + quarter, length)
                    sc = _bf(k[s0:s1] @ q[h])
                    m = sc.max()
                    e = torch.exp(sc - m)
                    l, acc = e.sum(), _bf(e) @ v[s0:s1]
                    new_m = torch.maximum(m_run, m)
                    w, alpha = torch.exp(m - new_m), torch.exp(m_run - new_m)
                    l_run, acc_run, m_run = l_run * alpha + w * l, acc_run * alpha + w * acc, new_m
                runs.append((m_run, l_run, acc_run))
            m, l, acc = torch.tensor(-float("inf")), torch.tensor(0.0), torch.zeros(D)
            for rm, rl, racc in runs:
                if rm == -float("inf"):
                    continue
                new_m = torch.maximum(m, rm)
                a, b = torch.exp(m - new_m), torch.exp(rm - new_m)
                l, acc, m = l * a + b * rl, acc * a + b * racc, new_m
            parts.append((m, l, acc))
        m, l, acc = parts[0]
        for pm, pl, pacc in parts[1:]:
            lse, o = pm + torch.log(pl), pacc / pl
            new_m = torch.maximum(m, lse)
            a, b = torch.exp(m - new_m), torch.exp(lse - new_m)
            l, acc, m = l * a + b, acc * a + b * o, new_m
        out.append(acc / l)
    return torch.stack(out)


@pytest.mark.parametrize("pos", [0, 1, 63, 64, 65, 1000, 4000])
def test_split_attention_matches_unsplit(pos):
    """The split-and-merge arithmetic of the grouped tasks, at the splits the kernel deals
    (Llama-3.2-1B's heads, 132 CTAs, attn_split 1 and 3 from the first chunk), against softmax
    attention in fp64 (within the bf16 rounding of scores and probabilities), against the
    same arithmetic in one split, and against the S = 1 path (v4.7's per-head owner, its
    warps' rotating runs): all only re-associate fp32 sums of the same bf16-rounded
    probabilities, so the outputs agree to fp32 rounding, far below a bf16 ulp."""
    gen = torch.Generator().manual_seed(pos)
    D, group, length = 64, 4, pos + 1
    q = _bf(torch.randn(group, D, generator=gen) * D**-0.5 * 2)
    k, v = _bf(torch.randn(length, D, generator=gen)), _bf(torch.randn(length, D, generator=gen))
    n = pos // BLOCK_S + 1
    exact = torch.softmax(q.double() @ k.double().T, dim=-1) @ v.double()
    one = _kernel_attention(q, k, v, [(0, n)])
    assert (one.double() - exact).abs().max() < 2e-2 * exact.abs().max() + 1e-3
    owner = _owner_attention(q, k, v)
    torch.testing.assert_close(owner, one, rtol=1e-5, atol=1e-6)
    assert (_bf(owner) != _bf(one)).float().mean() <= 0.02
    for split in (1, TUNED.attn_split):
        tasks = sorted((t for t in attention_tasks(pos, 132, 32, 8, split, 0) if t.kv == 0 and t.h0 == 0), key=lambda t: t.j)
        got = _kernel_attention(q, k, v, [(t.c0, t.c1) for t in tasks])
        assert len(tasks) == attention_splits(pos, 132, 8, split, 0)
        torch.testing.assert_close(got, one, rtol=1e-5, atol=1e-6)
        # rounded to bf16 as the kernel stores it: equal but where fp32 sits on a boundary
        assert (_bf(got) != _bf(one)).float().mean() <= 0.02


def test_partial_words_carry_tag_and_fp32():
    """A partial is a 64-bit word tag << 32 | fp32 bits: the tag is the high half whatever
    the value's sign (zero-extended, not sign-extended), the value comes back bit for bit, and
    the poison the GPU test writes (tag 0, a NaN) never carries a tag a reader waits for
    (tags are 1..65535)."""
    import struct

    def word(tag: int, x: float) -> int:
        return tag << 32 | struct.unpack("<I", struct.pack("<f", x))[0]

    for tag in (1, 2, 65535):
        for x in (-3.5, -0.0, 2.0**-100, 7.25, float("-inf")):
            w = word(tag, x)
            assert w >> 32 == tag and w < 1 << 48
            assert struct.unpack("<f", struct.pack("<I", w & 0xFFFFFFFF))[0] == x
    assert 0x7FC00000 >> 32 == 0


def test_cubins_live_in_perfdoctors_cache_folder(tmp_path, monkeypatch):
    """The cubin cache is under the same folder as the calibrations (XDG_CACHE_HOME), unless
    PERFDOCTOR_CACHE names another."""
    from perfdoctor.record import calibrate
    from perfdoctor.engine.cubin import cubin_dir

    monkeypatch.delenv("PERFDOCTOR_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cubin_dir() == tmp_path / "xdg" / "perfdoctor" / "cubin"
    assert cubin_dir().parent == calibrate.cache_path().parent
    monkeypatch.setenv("PERFDOCTOR_CACHE", str(tmp_path / "mine"))
    assert cubin_dir() == tmp_path / "mine" / "cubin"


def test_cli_without_cuda_says_why(capsys):
    if CUDA:
        pytest.skip("this machine has CUDA: the refusal is for machines without")
    from perfdoctor.engine.__main__ import main

    assert main(["--variant", "megakernel", "--config", "tiny", "--tokens", "4"]) == 2
    err = capsys.readouterr().err
    assert "megakernel variant needs a CUDA device" in err and "Traceback" not in err


# ---- the kernel, on a Hopper GPU -------------------------------------------------------------


def _step_tol(ref: torch.Tensor) -> dict[str, float]:
    """bf16 chains a dozen rounding points per layer, and one flipped early moves a later
    value by a few % of the largest (seen on the odd config: 0.114 of 3.6 in a logit); an
    indexing or ordering bug is off by O(1)."""
    return {"rtol": 2e-2, "atol": 6e-2 * max(ref.abs().max().item(), 1e-3)}


MEGA_CASES = [
    pytest.param("tiny", 64, TUNED, id="tiny"),
    pytest.param("odd", 200, TUNED, id="odd"),  # 200 positions: 4 attention chunks, the last partial (S = 1 at 199)
    pytest.param("odd", 200, MegaShape(attn_split_after=0), id="odd-v4.9"),  # v4.9's rule: 2 splits at 199
    # tuned's first split: 17 chunks at position 1024, 6 splits (n > attn_split_after = 16)
    pytest.param("odd", 1025, TUNED, id="odd-first-split"),
    # one chunk per split from the first chunk: at position 256 five splits (one merge batch
    # of 4), the last holding only pos
    pytest.param("odd", 257, MegaShape(attn_split=1, attn_split_after=0), id="odd-split-1"),
    # 13 splits of 4 KB ring slots at position 2047 (two merge batches), the ring wrapping
    pytest.param("odd", 2048, MegaShape(tile_bytes=4096, stages=2, attn_split=1), id="odd-split-1-small-ring"),
    # 4 KB tiles (one K/V chunk of head_dim 16) in a 2-stage ring: the ring wraps every
    # other tile, through weights and K/V chunks, with partial last tiles
    pytest.param("odd", 200, MegaShape(tile_bytes=4096, stages=2), id="odd-small-ring"),
    pytest.param("odd", 200, MegaShape(tile_bytes=4096, stages=3, in_flight=1), id="odd-in-flight-1"),
    # two tiles per consumer step, the whole ring in flight
    pytest.param("odd", 200, MegaShape(tiles_per_step=2, in_flight=0), id="odd-2-tiles-per-step"),
    pytest.param("llama-3.2-1b", 2048, MegaShape(tiles_per_step=2), id="llama-1b-2-tiles-per-step", marks=pytest.mark.gpu),
    # done counters on the attention path too (flags=False: plain bf16 q/k/v and attention output)
    pytest.param("tiny", 64, MegaShape(flags=False), id="tiny-counters"),
    pytest.param("odd", 200, MegaShape(tile_bytes=4096, stages=2, flags=False), id="odd-small-ring-counters"),
    pytest.param("llama-3.2-1b", 2048, MegaShape(flags=False), id="llama-1b-counters", marks=pytest.mark.gpu),
    pytest.param("odd", 200, MegaShape(flags=False), id="odd-counters"),
    # 12 consumer warps: 6-row tiles (24 KB of a 32 KB slot), 3 warps per scheduler
    pytest.param("odd", 200, MegaShape(consumer_warps=12), id="odd-12-warps"),
    pytest.param("llama-3.2-1b", 2048, MegaShape(consumer_warps=12), id="llama-1b-12-warps", marks=pytest.mark.gpu),
    pytest.param("llama-3.2-1b", 2048, TUNED, id="llama-1b", marks=pytest.mark.gpu),
]


def _poison(buf: torch.Tensor) -> None:
    """NaN in every bf16 buffer; in a tagged (int32) one, words of tag 0 (never a valid tag:
    a reader that accepted one would see NaN) holding a bf16 NaN; in the attention partials
    (int64), tag 0 and an fp32 NaN."""
    if buf.dtype == torch.int32:
        buf.fill_(0x7FC0)
    elif buf.dtype == torch.int64:
        buf.fill_(0x7FC00000)
    else:
        buf.fill_(float("nan"))


@needs_hopper
@pytest.mark.parametrize("config_name,ctx,shape", MEGA_CASES)
def test_megakernel_step(config_name, ctx, shape):
    """Single steps at several positions against the eager model on the same weights: the
    logits (NaN-poisoned buffers and cache row first; last, a step over the previous one's
    buffers), the token (argmax of its own logits), the K/V rows it appends; the done
    counters are zero again after every step."""
    from perfdoctor.engine.config import named_config
    from perfdoctor.engine.megakernel import MegaKernels
    from perfdoctor.engine.model import Transformer
    from perfdoctor.engine.weights import random_hf_state_dict

    torch.manual_seed(0)
    config = _odd_config() if config_name == "odd" else named_config(config_name)
    weights = random_hf_state_dict(config, seed=1, device=DEVICE, dtype=torch.bfloat16)
    model = Transformer.from_hf_state_dict(config, weights, ctx)
    mine = Transformer.from_hf_state_dict(config, weights, ctx)
    mk = MegaKernels(mine, shape)
    P = 5
    prompt = torch.randint(config.vocab_size, (P,), device=DEVICE)
    with torch.inference_mode():
        model(prompt, torch.arange(P, device=DEVICE))
        mine(prompt, torch.arange(P, device=DEVICE))
        # ctx - 1 fills the whole cache (many chunks); the last step repeats that position with
        # another token and no poison: every buffer then holds the previous launch's words,
        # which (tagged) a reader must not take for this launch's
        for i, pos_value in enumerate((P, P + 1, ctx - 1, ctx - 1)):
            token = torch.randint(config.vocab_size, (1,), device=DEVICE)
            pos = torch.tensor([pos_value], device=DEVICE)
            if i < 3:
                for buf in (mk.hbuf, mk.y, mk.qkv, mk.attn, mk.gu, mk.logits, mk.apart):
                    _poison(buf)
                for layer in mine.layers:
                    layer.attn.k_cache[:, pos_value] = float("nan")
                    layer.attn.v_cache[:, pos_value] = float("nan")
            mk.next_token.fill_(-1)
            got = mk(token, pos).item()
            want = model(token, pos)[0].float()
            logits = mk.logits.float()
            assert not logits.isnan().any(), "a logit was not written (or a NaN leaked in)"
            torch.testing.assert_close(logits, want, **_step_tol(want))
            assert got == torch.argmax(logits).item(), "token is not the argmax of the kernel's logits"
            for a, b in zip(mine.layers, model.layers):
                for mk_cache, ref_cache in ((a.attn.k_cache, b.attn.k_cache), (a.attn.v_cache, b.attn.v_cache)):
                    row = mk_cache[:, pos_value].float()
                    assert not row.isnan().any(), "K/V row not appended"
                    torch.testing.assert_close(row, ref_cache[:, pos_value].float(), **_step_tol(ref_cache.float()))
            assert mk.counter_values() == [0] * (5 * config.layers + 1), "counters not reset for the next step"


@pytest.mark.gpu
@needs_hopper
@pytest.mark.parametrize("shape", [TUNED, MegaShape(flags=False)], ids=["tuned", "counters"])
def test_megakernel_replays_identically(shape):
    """A race (a read before its producer's write is visible) shows as outputs that change
    between runs on the same input; the kernel's arithmetic order is fixed, so 50 replays of
    the captured step at one position must give bit-identical logits. Positions 300 (S = 1,
    the per-head owners) and 1100 (18 chunks: 6 splits and their merge)."""
    from perfdoctor.engine.megakernel import MegaKernels, MegaStep
    from perfdoctor.engine.model import Transformer
    from perfdoctor.engine.weights import model_weights

    config, weights = model_weights("llama-3.2-1b", None, 0, DEVICE, torch.bfloat16)
    model = Transformer.from_hf_state_dict(config, weights, 2048)
    mk = MegaKernels(model, shape)
    step = MegaStep(mk)
    for at in (300, 1100):
        token, pos = torch.tensor([17], device=DEVICE), torch.tensor([at], device=DEVICE)
        with torch.inference_mode():
            step(token, pos)
            first = mk.logits.clone()
            tokens = set()
            for _ in range(50):
                tokens.add(step(token, pos).item())
                assert torch.equal(mk.logits, first), f"logits changed between replays at position {at}: a race"
        assert len(tokens) == 1


@needs_hopper
def test_kernel_deals_attention_as_attention_tasks():
    """The kernel's attn_task and its mirror attention_tasks agree: in a traced step the CTAs
    that stamp attention work (inputs-ready non-zero) are the mirror's, in every layer, on
    both sides of tuned's threshold (16 chunks: 1023 S = 1, 1024 S = 6) and under v4.9's
    rule (attn_split_after 0: 1023 already split)."""
    from perfdoctor.engine.megakernel import MegaKernels
    from perfdoctor.engine.model import Transformer
    from perfdoctor.engine.weights import random_hf_state_dict

    config = _odd_config()
    model = Transformer.from_hf_state_dict(config, random_hf_state_dict(config, seed=1, device=DEVICE, dtype=torch.bfloat16),
                                           1100)
    seen = {}
    for shape in (TUNED, MegaShape(attn_split_after=0)):
        mk = MegaKernels(model, shape, trace=True)
        for at in (1023, 1024):
            mk.trace_buffer.zero_()
            with torch.inference_mode():
                mk(torch.tensor([3], device=DEVICE), torch.tensor([at], device=DEVICE))
            torch.cuda.synchronize()
            want = {t.cta for t in attention_tasks(at, mk.ctas, config.q_heads, config.kv_heads, shape.attn_split,
                                                    shape.attn_split_after)}
            for layer in range(config.layers):
                got = set(torch.nonzero(mk.trace_buffer[:, 5 * layer + 1, 1]).flatten().tolist())
                assert got == want, (shape.attn_split_after, at, layer)
            seen[shape.attn_split_after, at] = len(want)
        del mk
    # S = 1: one task per query head; S = 6 (17 or 16 chunks, 3 per split): one per (KV head, split)
    assert seen == {(16, 1023): 6, (16, 1024): 12, (0, 1023): 12, (0, 1024): 12}


def test_trace_detail_split_by_hand():
    """bench/megakernel.py's detail columns on a made-up 8-word trace (1 layer, 1 CTA), in
    ns: every stage g starts at g us, sees the previous stage complete 0.1 us later, has
    its inputs 0.3 us in (attention: ready at 0.3, q/k/v loaded at 0.4), issues its last
    store at 0.7 and ends at 0.8 us, having waited for ring slots a quarter of the 400
    cycles from ready to last store."""
    import importlib.util
    from pathlib import Path

    from perfdoctor.engine.megakernel import TRACE_WORDS

    spec = importlib.util.spec_from_file_location("bench_mega", Path(__file__).parents[2] / "bench" / "megakernel.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    trace = torch.zeros(1, 6, TRACE_WORDS, dtype=torch.int64)
    for g in range(6):
        t0 = 1_000_000 + g * 1000
        seen = t0 + (400 if g == 1 else 100)
        trace[0, g] = torch.tensor([t0, t0 + 300, t0 + 800, 7, seen, 100, t0 + 700, 400])
    st = bench.trace_split(trace, 1, dict.fromkeys(("qkv", "o", "gate_up", "down", "head"), 1000) | {"attention": 0})["stages"]
    qkv, attn, o = st["qkv"], st["attention"], st["o"]
    assert qkv["seen_us"] == 0.0  # no stage before it
    assert (qkv["poll_us"], qkv["loader_us"]) == pytest.approx((0.1, 0.2))
    assert (qkv["ring_us"], qkv["compute_us"], qkv["release_us"]) == pytest.approx((0.1, 0.3, 0.1))
    # attention has no loader: "seen" is its first ready after the QKV stage's end (1.3 - 0.8),
    # "poll" the q/k/v load (0.4 - 0.3)
    assert (attn["seen_us"], attn["poll_us"], attn["loader_us"]) == pytest.approx((0.5, 0.1, 0.0))
    assert o["seen_us"] == pytest.approx(2.1 - 1.8)
    assert "| stage | seen us (sum)" in bench.table({
        "device": "x", "ctx": 1, "tokens": 1, "repeats": 1, "bytes_per_step": 1e6, "rows": [],
        "trace": bench.trace_split(trace, 1, dict.fromkeys(bench.STAGES + ("head",), 0)), "trace_shape": "tuned", "trace_pos": 1})


def test_tuned_kernel_builds_offline_without_spills():
    """Where nvcc is installed (no GPU needed): the tuned kernel for Llama-3.2-1B's head_dim
    builds for sm_90a without spills (a spill costs every stage; the 288-thread CTA caps ptxas
    at 168 registers), and its static shared memory plus the ring fits the 227 KB an H200 CTA
    may have."""
    import re
    import subprocess

    from perfdoctor.engine.cubin import find_nvcc
    from perfdoctor.engine.megakernel import SOURCE

    try:
        nvcc = find_nvcc()
    except BadInput:
        pytest.skip("no nvcc here")
    flags = [f"-D{k}={v}" for k, v in sorted(TUNED.defines(LLAMA_3_2_1B.head_dim).items())]
    done = subprocess.run([nvcc, "-gencode=arch=compute_90a,code=sm_90a", "-cubin", "-O3", *flags, "-Xptxas", "-v",
                           "-o", "/dev/null", str(SOURCE)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", done.stderr)
    smem = re.search(r"(\d+) bytes smem", done.stderr)
    assert spills and spills.groups() == ("0", "0"), done.stderr[-600:]
    assert smem and int(smem.group(1)) + TUNED.ring_bytes <= 227 * 1024, done.stderr[-600:]


def test_context_sweep_table():
    """bench/megakernel.py's context sweep (issue 31) as a table: ms per filled position with
    the excess over the bytes model, p50/p99 of single steps; percentile on a known list."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("bench_mega", Path(__file__).parents[2] / "bench" / "megakernel.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    xs = [float(i) for i in range(1, 101)]
    assert (bench.percentile(xs, 50), bench.percentile(xs, 99), bench.percentile(xs, 100)) == (51.0, 99.0, 100.0)
    assert {"split-1", "split-2", "split-8", "no-split"} <= set(bench.SHAPES)
    trace = torch.zeros(1, 6, 4, dtype=torch.int64)
    for g in range(6):
        trace[0, g] = torch.tensor([1000 * g + 1, 1000 * g + 300, 1000 * g + 800, 0])
    report = {
        "device": "x", "ctx": 1, "tokens": 1, "repeats": 1, "bytes_per_step": 1e6, "rows": [], "trace_shape": "tuned",
        "trace_pos": 1, "trace": bench.trace_split(trace, 1, dict.fromkeys(bench.STAGES + ("head",), 0)),
        "sweeps": {"tuned": {
            "positions": [{"pos": 144, "ms": 0.7, "bytes": 100, "over_bytes_pct": 0.0},
                          {"pos": 4000, "ms": 0.75, "bytes": 105, "over_bytes_pct": 2.04}],
            "long": {"tokens": 1024, "start": 16, "p50_ms": 0.71, "p99_ms": 0.74, "p99_over_p50": 1.042, "max_ms": 0.8,
                     "first100_ms": 0.7, "last100_ms": 0.72}}},
    }
    text = bench.table(report)
    assert "context sweep (issue 31)" in text
    assert "| tuned | 144: 0.700 (+0.0), 4000: 0.750 (+2.0) | 0.710 | 0.740 | 1.042 | 0.800 | 0.700 | 0.720 |" in text


@needs_hopper
def test_megastep_reads_the_callers_buffers():
    """MegaStep replays graphs captured on the caller's own token and position tensors (no
    copies in): a generation through it gives the tokens of one through GraphedStep (which
    copies both into static buffers), and a caller that passes new tensors at every step,
    more than MAX_GRAPHS of them, gets the same tokens again."""
    from perfdoctor.engine.generate import generate, random_prompt
    from perfdoctor.engine.graphs import GraphedStep
    from perfdoctor.engine.megakernel import MegaKernels, MegaStep
    from perfdoctor.engine.model import Transformer
    from perfdoctor.engine.weights import model_weights

    config, weights = model_weights("tiny", None, 0, DEVICE, torch.bfloat16)
    models = [Transformer.from_hf_state_dict(config, weights, 64) for _ in range(3)]
    prompt = random_prompt(config, 5, 0)
    P, n = prompt.shape[0], 24
    with torch.inference_mode():
        want = generate(models[0], GraphedStep(MegaKernels(models[0])), prompt, n).tokens
        assert generate(models[1], MegaStep(MegaKernels(models[1])), prompt, n).tokens == want
        step = MegaStep(MegaKernels(models[2]))
        models[2](prompt.to(DEVICE), torch.arange(P, device=DEVICE))  # the prefill fills its cache
        got = [want[0]]
        for i in range(1, n):
            got.append(step(torch.tensor([got[-1]], device=DEVICE), torch.tensor([P + i - 1], device=DEVICE)).item())
        assert len(step.graphs) <= MegaStep.MAX_GRAPHS
    assert got == want

