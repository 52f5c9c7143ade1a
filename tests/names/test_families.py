"""Kernel families and HTA classes (perfdoctor.names.families) on real kernel names.

Two sources of names: every kernel in every fixture (expectations from the test's own
substring table, written independently of the module's regexes), and a list of real
vendor kernel names (NCCL, RCCL, custom all-reduce, cuBLAS, CUTLASS, Tensile/hipBLASLt,
Composable Kernel, MIOpen, cuDNN, FlashAttention, Triton) as they appear in public
traces and docs.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from perfdoctor.names import families
from perfdoctor.pipeline import load_trace

FIX = Path(__file__).parents[1] / "fixtures"
TRACES = sorted((FIX / "wild").glob("*.kineto.json.gz")) + sorted(FIX.glob("*.kineto.json.gz")) + sorted(FIX.glob("*.nsys.sqlite.gz"))

# (substring, family) checked in order: the test's own reading of each fixture kernel name.
FIXTURE_TRUTH = [
    ("sdpa", "attention"),
    ("layer_norm", "norm"),
    ("GammaBeta", "norm"),
    ("softmax", "softmax"),
    ("nvjet", "gemm"),
    ("xmma_gemm", "gemm"),
    ("sgemm", "gemm"),
    ("splitKreduce", "gemm"),
    ("gemmSN", "gemm"),
    ("Memcpy", "memory"),
    ("Memset", "memory"),
    ("memcpy32_post", "memory"),
    ("Copy", "memory"),
    ("copy_kernel", "memory"),
    ("reduce_kernel", "reduction"),
    ("reduce_cuda_kernel", "reduction"),
    ("lean_reduction", "reduction"),
    ("DeviceScan", "reduction"),
    # k-means on the H100 (wild/h100-kmeans-*): cub's reduce and select (torch.nonzero's
    # stream compaction) sum or scan; the compaction's tile-state init, and bincount's
    # histogram (a scatter of counts), are none of the named families
    ("DeviceReduce", "reduction"),
    ("DeviceSelectSweep", "reduction"),
    ("DeviceCompactInit", "other"),
    ("kernelHistogram1D", "other"),
    ("indexFuncLargeIndex", "reduction"),  # index_add_: a ReduceAdd by index
    ("vectorized_gather_kernel", "elementwise"),  # an index gather, one element per output
    ("elementwise_kernel", "elementwise"),
    ("elementwise_grid_stride_kernel", "elementwise"),  # torch.randn fills (nsys spelling)
    ("indexSelect", "elementwise"),
    ("multi_tensor_apply", "elementwise"),
]

VENDOR_NAMES = [
    # communication (NCCL 2.19+, older NCCL, RCCL, custom all-reduce, symmetric memory)
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "communication", "communication"),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "communication", "communication"),
    ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL", "communication", "communication"),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "communication", "communication"),
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "communication", "communication"),
    ("ncclDevKernel_Generic_4(ncclDevKernelArgsStorage<4096ul>)", "communication", "communication"),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", "communication", "communication"),
    ("rcclGenericKernel", "communication", "communication"),
    ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals, vllm::Signal*, __nv_bfloat16*, int, int)", "communication", "communication"),
    ("void sglang::cross_device_reduce_1stage<__half, 8>(sglang::RankData*, sglang::RankSignals, sglang::Signal*, __half*, int, int)", "communication", "communication"),
    ("void c10d::symmetric_memory::multimem_all_reduce_kernel<c10::BFloat16, 16, 4>(c10::BFloat16*, unsigned long, unsigned int**, unsigned long, unsigned long)", "communication", "communication"),
    ("void flashinfer::trtllm_allreduce_fusion::allreduce_fusion_kernel_oneshot_lamport<__nv_bfloat16, 8>", "communication", "communication"),
    # attention
    ("void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t> >(Flash_fwd_params)", "attention", "compute"),
    ("void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, false, cutlass::half_t, Flash_kernel_traits<128, 64, 128, 4, cutlass::half_t> >, false, false, false, false, true, true, false, false>(flash::Flash_fwd_params)", "attention", "compute"),
    ("fmha_cutlassF_f16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::half_t, cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)", "attention", "compute"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0", "attention", "compute"),
    ("void vllm::paged_attention_v1_kernel<unsigned short, unsigned short, 128, 16, 128, (vllm::Fp8KVCacheDataType)0, false>", "attention", "compute"),
    ("ck_tile::FmhaFwdKernel<ck_tile::BlockFmhaPipelineQRKSVSAsync<ck_tile::BlockFmhaPipelineProblem<...>>>", "attention", "compute"),
    ("_fwd_kernel_stage1", "other", "compute"),
    # gemm: NVIDIA
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas", "gemm", "compute"),
    ("nvjet_sm90_tst_64x8_64x16_4x1_v_bz_NNT", "gemm", "compute"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8::Params)", "gemm", "compute"),
    ("void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false, cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, float> >", "gemm", "compute"),
    ("bmm_E4m3_E4m3E4m3_Fp32_t128x8x128u2_s6_et64x8_m64x8x32_cga1x1x1_16dp256b_TN_transOut_schedS_bN_sm100f", "gemm", "compute"),
    ("triton_tem_fused_addmm_0", "gemm", "compute"),
    ("triton_tem_fused_mm_3", "gemm", "compute"),
    ("_w8a8_block_fp8_matmul", "gemm", "compute"),
    ("fused_moe_kernel", "gemm", "compute"),
    # gemm: AMD
    ("Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x208x64_MI16x16x1_SN_LDSB1_AFC0", "gemm", "compute"),
    ("Cijk_Alik_Bljk_HHS_MT128x128x32_MI16x16x16x1", "gemm", "compute"),
    ("Custom_Cijk_Alik_Bljk_SB_MT64x128x16_MI32x32x2x1", "gemm", "compute"),
    ("void ck::kernel_gemm_xdl_cshuffle_v3<ck::GridwiseGemm_xdl_cshuffle_v3<ck::tensor_layout::gemm::RowMajor>, true, 2>", "gemm", "compute"),
    # conv
    ("sm80_xmma_fprop_implicit_gemm_indexed_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize64x64x64_stage4_warpsize2x2x1_g1_tensor16x8x16_kernel_cudnn", "conv", "compute"),
    ("void cudnn::cnn::conv2d_grouped_direct_kernel<false, true, false, false, 0, 0, int, float, float, float, float, float, float>", "conv", "compute"),
    ("MIOpenConvUni", "conv", "compute"),
    ("miopenSp3AsmConv_v21_1_3_gfx9_fp32_stride1", "conv", "compute"),
    ("igemm_fwd_gtcx_nhwc_fp16_bx0_ex1_bt128x128x32_wt32x32x8_ws2x1_wr2x2_ta1x8x2x1_1x4x1x64_tb1x8x2x1_1x4x1x64", "conv", "compute"),
    # norm / softmax / reduction / elementwise / memory
    ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1>", "norm", "compute"),
    ("MIOpenBatchNormFwdTrainSpatial", "norm", "compute"),
    ("void vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>", "norm", "compute"),
    ("void at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel<float, 4, at::native::templates::cuda::normal_and_transform<float, float>>", "elementwise", "compute"),
    ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0", "memory", "compute"),
    ("triton_per_fused__softmax_0", "softmax", "compute"),
    ("triton_poi_fused_add_mul_silu_2", "elementwise", "compute"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::ArgMaxOps<float>, unsigned int, long, 4> >", "reduction", "compute"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul> >", "elementwise", "compute"),
    ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)>", "memory", "compute"),
    ("memcpy32_post", "memory", "memory"),
    ("__amd_rocclr_copyBuffer", "memory", "compute"),
    ("__amd_rocclr_fillBufferAligned", "memory", "compute"),
]


@pytest.mark.parametrize("name,family,kclass", VENDOR_NAMES)
def test_vendor_names(name, family, kclass):
    assert families.family(name) == family
    assert families.kernel_class(name) == kclass


def test_activity_kinds_are_memory():
    assert families.family("Memcpy HtoD (Pageable -> Device)", "memcpy") == "memory"
    assert families.kernel_class("Memset (Device)", "memset") == "memory"


@pytest.mark.parametrize("trace", TRACES, ids=lambda p: p.name)
def test_every_fixture_kernel(trace):
    p = load_trace(trace)
    acts = p.activities
    out = families.of_activities(acts)
    assert out.index.equals(acts.index)
    for name, kind, fam, kclass in zip(acts["name"], acts["kind"], out["family"], out["kclass"]):
        if kind != "kernel":
            assert (fam, kclass) == ("memory", "memory")
            continue
        expected = next((f for sub, f in FIXTURE_TRUTH if sub in name), None)
        assert expected is not None, f"no test truth for {name[:120]}"
        assert fam == expected, name[:160]
        # No fixture runs a collective kernel (world size 1): nothing is communication.
        assert kclass == ("memory" if name.startswith("memcpy") else "compute"), name[:120]


def test_vectorised_over_unique_names():
    names = pd.Series(["nvjet_sm90_x"] * 1000 + ["ncclDevKernel_AllGather_RING_LL"] * 10 + [None], index=range(5, 1016))
    fam = families.families(names)
    assert fam.index.equals(names.index)
    assert fam.value_counts().to_dict() == {"gemm": 1000, "communication": 10, "other": 1}
    assert families.families(pd.Series([], dtype=object)).empty


def _family_by_re_i(name: str) -> str:
    """The family by the patterns as written (re.I), the way family() searched before it
    searched ASCII names lowered."""
    return next((fam for fam, pattern in families._PATTERNS if pattern.search(name)), "other")


@pytest.mark.parametrize("trace", TRACES, ids=lambda p: p.name)
def test_lowered_search_is_the_case_insensitive_one(trace):
    """family() searches an ASCII name lowered: on every fixture kernel name, the vendor
    names, their case swapped, and non-ASCII names (searched with re.I as written), the
    family is the case-insensitive patterns' own."""
    names = set(load_trace(trace).activities["name"].dropna()) | {n for n, _, _ in VENDOR_NAMES}
    names |= {n.swapcase() for n in names} | {"ſoftmax_kernel", "İndex_select", "Kelvin_gemm_K", "Ncclé_AllReduce"}
    for name in names:
        assert families.family.__wrapped__(name) == _family_by_re_i(name), name[:160]
