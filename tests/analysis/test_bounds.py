"""What bounds each kernel class (perfdoctor.analysis.bounds): the FLOP and byte formulas
against hand counts, the shapes of a real CPU torch.profiler trace into them, kernels linked
to their launching ops and judged against the ceilings in a hand-made trace, and the real
traces with recorded shapes against sums taken straight from their raw events."""

from __future__ import annotations

import gzip
import json
import math
import os
from pathlib import Path

import pytest

from perfdoctor import pipeline
from perfdoctor.analysis import bounds
from perfdoctor.analysis.bounds import attention_flops, causal_pairs, conv_flops, conv_out, gemm_flops, op_cost
from perfdoctor.collectors import torch_profiler

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("PERFDOCTOR_TRACES", ROOT.parent / "shared" / "traces"))
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason=f"the shared traces ({SHARED}) are not here")
BF16, F32 = "c10::BFloat16", "float"


# --- formulas against hand counts ----------------------------------------------------------

def test_gemm_4096_cubed_bf16():
    c = op_cost("aten::mm", [[4096, 4096], [4096, 4096]], [BF16, BF16])
    assert c.flops == 2 * 4096**3 == 137_438_953_472
    assert c.bytes == 3 * 4096 * 4096 * 2  # A and B read, C written, 2 bytes each
    assert c.dtype == BF16


def test_addmm_linear_bmm_matmul():
    # addmm(bias[N], A[M,K], B[K,N]) in fp32: 2MNK; bytes: bias + A + B + C
    c = op_cost("aten::addmm", [[30], [10, 20], [20, 30], [], []], [F32, F32, F32, "Scalar", "Scalar"])
    assert c.flops == 2 * 10 * 30 * 20
    assert c.bytes == (30 + 10 * 20 + 20 * 30 + 10 * 30) * 4
    # linear(x[2,3,K], W[N,K], b[N]): M = 2·3 rows
    c = op_cost("aten::linear", [[2, 3, 64], [128, 64], [128]], [BF16] * 3)
    assert c.flops == 2 * 6 * 128 * 64
    assert c.bytes == (2 * 3 * 64 + 128 * 64 + 128 + 6 * 128) * 2
    assert op_cost("aten::bmm", [[8, 16, 32], [8, 32, 4]], [BF16] * 2).flops == 2 * 8 * 16 * 4 * 32
    # matmul broadcasts the batch: [5, M, K] @ [K, N]
    assert op_cost("aten::matmul", [[5, 16, 32], [32, 4]], [F32] * 2).flops == 2 * 5 * 16 * 4 * 32
    assert gemm_flops(3, 5, 7, batch=2) == 2 * 2 * 3 * 5 * 7


def test_conv_stride_padding_groups():
    conv = ["", "", "", "[2, 2]", "[3, 3]", "[1, 1]", "False", "[0, 0]", "1"]
    # ResNet-50's first convolution: 7x7/2, pad 3, 224 -> 112; 118.0 M multiply-adds (the
    # usual figure for conv1), i.e. 64 x 112 x 112 outputs of 3 x 7 x 7 terms each.
    c = op_cost("aten::convolution", [[1, 3, 224, 224], [64, 3, 7, 7], [], [], [], [], [], [], []], [BF16, BF16, ""] + [""] * 6, conv)
    assert conv_out(224, 7, 2, 3, 1) == 112
    assert c.flops == 2 * (64 * 112 * 112) * (3 * 7 * 7) == 236_027_904
    assert c.bytes == (3 * 224 * 224 + 64 * 3 * 7 * 7 + 64 * 112 * 112) * 2
    # Depthwise (groups = channels): each of 2 x 32 x 56 x 56 outputs is 1 x 3 x 3 terms.
    dw = ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "32"]
    c = op_cost("aten::convolution", [[2, 32, 56, 56], [32, 1, 3, 3]] + [[]] * 7, [F32, F32] + [""] * 7, dw)
    assert c.flops == 2 * (2 * 32 * 56 * 56) * 9 == 3_612_672
    # groups=4, stride 2: 64 x 14 x 14 outputs of 8 x 3 x 3 terms
    g4 = ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "4"]
    c = op_cost("aten::convolution", [[1, 32, 28, 28], [64, 8, 3, 3]] + [[]] * 7, [F32, F32] + [""] * 7, g4)
    assert c.flops == 2 * (64 * 14 * 14) * (8 * 9) == 1_806_336
    assert conv_flops(1, [14, 14], [64, 8, 3, 3]) == c.flops
    # cuDNN's op lists padding before stride; MIOpen's has the bias first
    cud = ["", "", "[1, 1]", "[2, 2]", "[1, 1]", "4", "False", "False", "True"]
    assert op_cost("aten::cudnn_convolution", [[1, 32, 28, 28], [64, 8, 3, 3]] + [[]] * 7, [F32, F32] + [""] * 7, cud).flops == c.flops
    mio = ["", "", "", "[1, 1]", "[2, 2]", "[1, 1]", "4", "False", "False"]
    assert op_cost("aten::miopen_convolution", [[1, 32, 28, 28], [64, 8, 3, 3]] + [[]] * 7, [F32, F32] + [""] * 7, mio).flops == c.flops
    # Without "Concrete Inputs" (older torch) the stride is unknown: not costed, never guessed
    assert op_cost("aten::convolution", [[1, 3, 224, 224], [64, 3, 7, 7]] + [[]] * 7, [F32, F32] + [""] * 7) is None


def test_attention_causal_and_not():
    # Non-causal: Q·Kᵀ and P·V, 2·L·L·D each per head: 4·B·H·L²·D
    q = [2, 8, 128, 64]
    sdpa = ["", "", "", "", "0.", "False", "", "False"]
    c = op_cost("aten::scaled_dot_product_attention", [q, q, q, [], [], [], [], []], [BF16] * 3 + [""] * 5, sdpa)
    assert c.flops == 4 * 2 * 8 * 128 * 128 * 64 == 67_108_864
    assert c.bytes == 4 * (2 * 8 * 128 * 64) * 2  # q, k, v read, out written
    # Causal, top-left as torch's is_causal: query i sees i + 1 keys: 1 + ... + 128 = 8256 pairs
    causal = sdpa[:5] + ["True"] + sdpa[6:]
    c = op_cost("aten::scaled_dot_product_attention", [q, q, q, [], [], [], [], []], [BF16] * 3 + [""] * 5, causal)
    assert c.flops == 2 * 2 * 8 * 8256 * (64 + 64) == 33_816_576
    # FlashAttention's own op is [batch, seq, heads, dim]; is_causal is its 9th argument
    flash = ["", "", "", "", "", "128", "128", "0.", "True", "False", "0.125"]
    bshd = [2, 128, 8, 64]
    assert op_cost("aten::_flash_attention_forward", [bshd, bshd, bshd] + [[]] * 8, [BF16] * 3 + [""] * 8, flash).flops == 33_816_576
    # Cross attention, Lq = 1 (decode) against 100 keys, head dims 64 and 32
    assert attention_flops(1, 4, 1, 100, 64, 32) == 2 * 4 * 100 * (64 + 32)


def test_causal_pairs_against_the_mask():
    torch = pytest.importorskip("torch")
    for lq, lk in ((1, 1), (4, 6), (6, 4), (128, 128), (3, 17)):
        assert causal_pairs(lq, lk) == int(torch.ones(lq, lk).tril().sum())


def test_generic_bytes():
    mb4 = 1024 * 1024 * 4
    assert op_cost("aten::add", [[1024, 1024], [1024, 1024], []], [F32, F32, "Scalar"]).bytes == 3 * mb4  # 2 read, 1 written
    assert op_cost("aten::add_", [[1024, 1024], [1024, 1024], []], [F32, F32, "Scalar"]).bytes == 3 * mb4  # in place: the first is written
    assert op_cost("aten::copy_", [[1024, 1024], [1024, 1024], []], [BF16, F32, "Scalar"]).bytes == mb4 + mb4 // 2  # src read, dst written
    assert op_cost("aten::sum", [[1024, 1024], [], [], []], [F32, "", "Scalar", ""]).bytes == mb4  # a reduction writes ~nothing
    assert op_cost("aten::add", [[8], [8]], [F32, F32]).flops is None  # elementwise FLOPs are not counted
    # embedding reads the rows it picks: 16 indices of a [1000, 64] table
    assert op_cost("aten::embedding", [[1000, 64], [16], [], [], []], [BF16, "long int", "Scalar", "Scalar", "Scalar"]).bytes == 16 * 8 + 2 * 16 * 64 * 2
    assert op_cost("aten::index", [[1000, 64], []], [F32, "TensorList"]) is None  # the indices decide: unknown


# --- a real CPU torch.profiler trace with record_shapes ------------------------------------

def test_shapes_of_a_real_cpu_trace(tmp_path: Path):
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    a, b = torch.randn(64, 32), torch.randn(32, 16)
    x, w = torch.randn(1, 4, 9, 9), torch.randn(6, 2, 3, 3)
    q = torch.randn(1, 2, 8, 4)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        torch.mm(a, b)
        torch.nn.functional.conv2d(x, w, stride=2, padding=1, groups=2)
        torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
    path = tmp_path / "cpu.json"
    prof.export_chrome_trace(str(path))
    ops = torch_profiler.load(path).ops
    costs = {r.name: op_cost(r.name, json.loads(r.dims), json.loads(r.types), json.loads(r.concrete) if r.concrete else [])
             for r in ops.itertuples() if r.name in ("aten::mm", "aten::convolution", "aten::scaled_dot_product_attention")}
    assert costs["aten::mm"].flops == 2 * 64 * 16 * 32
    assert costs["aten::mm"].bytes == (64 * 32 + 32 * 16 + 64 * 16) * 4
    # 9x9, 3x3/2 pad 1 -> 5x5; 6 x 5 x 5 outputs of (4 / 2 groups) x 3 x 3 terms
    assert costs["aten::convolution"].flops == 2 * (6 * 5 * 5) * (2 * 9) == 5400
    assert costs["aten::scaled_dot_product_attention"].flops == 2 * 1 * 2 * (8 * 9 // 2) * (4 + 4)


# --- kernels linked to their ops, judged against the ceilings: a hand-made trace -------------

def _x(cat, name, ts, dur, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1 if cat != "kernel" else 0, "tid": tid if cat != "kernel" else 7, "args": args}


def _trace(tmp_path: Path, device="NVIDIA H100 80GB HBM3") -> Path:
    n = 4096
    ev = [
        _x("user_annotation", "ProfilerStep#1", 0, 1000),
        _x("cpu_op", "aten::mm", 10, 20, **{"Input Dims": [[n, n], [n, n]], "Input type": [BF16, BF16]}),
        _x("cuda_runtime", "cudaLaunchKernel", 15, 5, correlation=1),
        _x("kernel", "sm90_xmma_gemm_bf16bf16_bf16f32", 100, 200, correlation=1, stream=7, device=0),
        _x("cpu_op", "aten::add", 40, 20, **{"Input Dims": [[n, n], [n, n], []], "Input type": [BF16, BF16, "Scalar"]}),
        _x("cuda_runtime", "cudaLaunchKernel", 45, 5, correlation=2),
        _x("kernel", "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>", 310, 50, correlation=2, stream=7, device=0),
        _x("cpu_op", "aten::native_layer_norm", 70, 20, **{"Input Dims": [[16, 1024], [1024], [1024], [], []], "Input type": [F32, F32, F32, "", "Scalar"]}),
        _x("cuda_runtime", "cudaLaunchKernel", 75, 5, correlation=3),
        _x("kernel", "void at::native::vectorized_layer_norm_kernel<float, float>", 400, 3, correlation=3, stream=7, device=0),
        # a launch after the op's last child ended: its op is the parent (aten::linear)
        _x("cpu_op", "aten::linear", 500, 50, **{"Input Dims": [[8, 1024], [4096, 1024], [4096]], "Input type": [BF16] * 3}),
        _x("cpu_op", "aten::t", 502, 2, **{"Input Dims": [[4096, 1024]], "Input type": [BF16]}),
        _x("cuda_runtime", "cudaLaunchKernel", 510, 5, correlation=4),
        _x("kernel", "nvjet_hsh_64x8_64x16_2x1_v_bz_TNT", 600, 20, correlation=4, stream=7, device=0),
    ]
    path = tmp_path / "hand.json"
    path.write_text(json.dumps({"deviceProperties": [{"name": device}], "traceEvents": ev}))
    return path


def test_hand_trace_linked_and_judged(tmp_path: Path):
    d = pipeline.diagnose(_trace(tmp_path))
    b = d.analysis.bounds
    assert b.peaks.bw_gbps == 3350 and b.peaks.tflops == 989 and b.peaks.bw_source.startswith("datasheet")
    gemm, elem, norm = b.of("gemm"), b.of("elementwise"), b.of("normalisation")
    flops = 2 * 4096**3 + 2 * 8 * 4096 * 1024  # aten::mm + aten::linear (the nvjet kernel's op)
    assert gemm.flops_per_step == flops
    assert gemm.tflops == pytest.approx(flops / 220e-6 / 1e12)
    gemm_bytes = 3 * 4096 * 4096 * 2 + (8 * 1024 + 4096 * 1024 + 4096 + 8 * 4096) * 2
    assert gemm.tbps == pytest.approx(gemm_bytes / 220e-6 / 1e12)
    assert gemm.bound == "compute" and gemm.util == pytest.approx(gemm.tflops / 989)
    # add: 2 read + 1 written, 32 MiB each, in 50 µs: 2.01 TB/s, 60 % of 3.35 TB/s
    assert elem.tbps == pytest.approx(3 * 4096 * 4096 * 2 / 50e-6 / 1e12)
    assert elem.bound == "memory" and elem.util == pytest.approx(elem.tbps / 3.35)
    # a 3 µs layer norm moving 136 KiB (41 ns of work at the ceiling), far from it: latency-bound
    assert norm.bound == "latency" and norm.median_us == 3 and norm.util == pytest.approx(norm.tbps / 3.35)  # of its roofline: bandwidth, no FLOPs
    assert norm.work_us == pytest.approx((16 * 1024 * 4 * 2 + 1024 * 4 * 2) / 3350 / 1e3)  # 136 KiB at 3.35 TB/s
    util, what = b.memory_bound_bw_util()
    assert util == pytest.approx(elem.util) and "elementwise" in what
    doc = d.analysis.to_json()["bounds"]
    json.dumps(doc, allow_nan=False)  # never NaN
    assert {c["part"] for c in doc["classes"]} == {"gemm", "elementwise", "normalisation"}


def test_the_dram_rule_reads_the_memory_bound_classes(tmp_path: Path):
    from perfdoctor.rules.signals import memory_bound_bw_util

    d = pipeline.diagnose(_trace(tmp_path))
    m = memory_bound_bw_util(d.analysis)
    assert m.source == "bounds" and m.value == pytest.approx(d.analysis.bounds.of("elementwise").util)
    gap = d.analysis.bounds.memory_bound_gap_ms(0.85)
    elem = d.analysis.bounds.of("elementwise")
    assert gap == pytest.approx(0.050 - 0.050 * elem.util / 0.85)  # its 50 µs less its bytes at 85 % of 3.35 TB/s


def test_no_ceilings_says_why(tmp_path: Path):
    b = pipeline.diagnose(_trace(tmp_path, device="Some Accelerator 9000")).analysis.bounds
    assert b.peaks.bw_gbps is None and b.peaks.bw_source.startswith("unavailable")
    assert all(c.bound is None and c.reason.startswith("unavailable") for c in b.classes)
    assert b.of("gemm").tflops is not None  # the achieved rates are still there
    assert b.memory_bound_bw_util()[0] is None


def test_calibration_beats_the_datasheet():
    p = bounds.peaks_of({"name": "NVIDIA H200", "measured_dram_bw_gbps": 4000.0, "measured_bf16_tflops": 700.0, "peak_dram_bw_gbps": 4800.0})
    assert (p.bw_gbps, p.tflops) == (4000.0, 700.0) and p.bw_source.startswith("calibrate") and p.tflops_source.startswith("calibrate")
    p = bounds.peaks_of({"name": "NVIDIA H200", "peak_dram_bw_gbps": 4800.0, "peak_source": "nvml"})
    assert p.bw_source.startswith("theoretical") and p.tflops_source == "datasheet: NVIDIA H200 SXM (dense bf16)"
    assert p.ridge == pytest.approx(989e12 / 4800e9)


# --- real traces with recorded shapes --------------------------------------------------------

def _raw_events(path: Path) -> list[dict]:
    with gzip.open(path) as f:
        return json.load(f)["traceEvents"]


@needs_shared
def test_qwen_h100_gemm_and_flash_flops_match_the_raw_ops():
    """tracelens/h100__Qwen (record_shapes with Concrete Inputs): the GEMM class's FLOPs are
    the sum of 2MNK over the step's aten::mm / addmm / bmm ops, the attention class's the
    causal FlashAttention count over its _flash_attention_forward ops, read from the JSON."""
    path = SHARED / "tracelens" / "h100__Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
    ev = _raw_events(path)
    step = next(e for e in ev if e.get("name", "").startswith("ProfilerStep#"))
    lo, hi = step["ts"], step["ts"] + step["dur"]
    gemm = attn = 0
    for e in ev:
        if e.get("cat") != "cpu_op" or not lo <= e["ts"] <= hi:
            continue
        d = e["args"].get("Input Dims")
        if e["name"] == "aten::mm":
            gemm += 2 * d[0][0] * d[0][1] * d[1][1]
        elif e["name"] == "aten::addmm":
            gemm += 2 * d[1][0] * d[1][1] * d[2][1]
        elif e["name"] == "aten::bmm":
            gemm += 2 * d[0][0] * d[0][1] * d[0][2] * d[1][2]
        elif e["name"] == "aten::_flash_attention_forward":
            b, seq, h, dim = d[0]
            assert e["args"]["Concrete Inputs"][8] == "True"
            attn += 2 * b * h * (seq * (seq + 1) // 2) * 2 * dim
    bnd = pipeline.diagnose(path).analysis.bounds
    assert bnd.steps == 1
    assert bnd.of("gemm").flops_per_step == gemm
    assert bnd.of("attention").flops_per_step == attn
    assert bnd.of("gemm").bound == "compute" and bnd.of("elementwise").bound == "memory"
    assert bnd.peaks.bw_source == "datasheet: NVIDIA H100 SXM"


@needs_shared
@pytest.mark.parametrize("name", [
    "tracelens/h100__Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz", "tracelens/mi300__resnet_act_checkpoint.json.gz",
    "tracelens/b200__eager_trace.json.gz", "wild/kineto__tb_resnet50_num_workers_4.pt.trace.json.gz",
    "hta/negative_queue_length_values_check__rank0.json.gz", "tracelens/h100__facebook_timesformer-base-finetuned-k400__1016002.json.gz",
])
def test_real_traces_with_shapes(name: str):
    """Every class of a real trace with Input Dims: finite numbers or an absent one with its
    reason, never NaN, and no class faster than IMPLAUSIBLE × the bandwidth ceiling judged."""
    a = pipeline.diagnose(SHARED / name).analysis
    b = a.bounds
    assert b.classes and not b.reason
    json.dumps(a.to_json()["bounds"], allow_nan=False)
    for c in b.classes:
        assert c.bound is not None or c.reason
        for v in (c.tbps, c.tflops, c.intensity, c.util):
            assert v is None or math.isfinite(v)
        if c.bound is not None and c.tbps is not None:
            assert c.tbps * 1e3 <= bounds.IMPLAUSIBLE * b.peaks.bw_gbps
