"""Kernel families across vendors (NVIDIA, AMD, Triton), and HTA's kernel class.

``family(name, kind)`` buckets a GPU activity into one of :data:`FAMILIES`:

communication  NCCL / RCCL kernels (``ncclDevKernel_AllReduce_Sum_f32_RING_LL``,
               ``ncclKernel_AllGather_RING_LL_Sum_int8_t``), symmetric-memory and custom
               all-reduce kernels (``multimem_all_reduce_kernel``, vLLM
               ``cross_device_reduce_1stage``, ``one_shot_all_reduce``), all-gather /
               reduce-scatter / all-to-all kernels
attention      FlashAttention, ``fmha`` (cuDNN, CK tile), SDPA, paged attention
norm           layer/RMS/batch norm (cuDNN ``bn_fw``, MIOpen ``BatchNorm``)
softmax        softmax kernels (not inside attention)
conv           convolutions: cuDNN / MIOpen, implicit-GEMM ``fprop``/``dgrad``/``wgrad``
gemm           cuBLAS / cuBLASLt / CUTLASS ``*gemm*``, ``sm90_xmma*``, ``nvjet*``, GEMV,
               Tensile / hipBLASLt ``Cijk_*``, Composable Kernel ``ck::kernel_gemm*``,
               Blackwell ``bmm_*``, Triton matmul templates (``triton_tem_fused_mm``),
               grouped MoE GEMMs
memory         memcpy / memset activities and kernels, element-wise copies
               (``direct_copy_kernel``, ``CatArrayBatchedCopy``)
reduction      reductions, arg-max, top-k, sort
elementwise    element-wise kernels (ATen ``elementwise_kernel``, Triton ``triton_poi``), index/gather/scatter
other          everything else

Order matters: the first family whose pattern matches wins (``ncclDevKernel_AllReduce``
is communication, never reduction; ``flash_fwd`` is attention, never gemm;
``sm80_xmma_fprop_implicit_gemm`` is conv, never gemm).

``kernel_class`` is the three-way split HTA uses for its temporal and overlap analyses:
``communication`` (the communication family), ``memory`` (memcpy / memset activities and
the driver's memcpy/memset kernels) and ``compute`` (every other kernel; element-wise
copies are compute for HTA, though their family is "memory").

Everything is vectorised over unique (name, kind) pairs.
"""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np
import pandas as pd

from perfdoctor.names.codes import factorize

FAMILIES = ("communication", "attention", "norm", "softmax", "conv", "gemm", "memory", "reduction", "elementwise", "other")
CLASSES = ("compute", "communication", "memory")

_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "communication",
        re.compile(
            r"^nccl|^rccl|ncclDevKernel|ncclKernel|msccl|multimem_|cross_device_reduce|custom_?all_?reduce"
            r"|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|one_shot_|two_shot_|\bsendrecv|nvshmem",
            re.I,
        ),
    ),
    ("attention", re.compile(r"flash|fmha|sdpa|attention|\battn|_attn|attn_|paged_?att|mha_fwd|mha_bwd|xformers", re.I)),
    ("norm", re.compile(r"norm(?!al)|\bbn_|batchnorm|_bn_fw|_bn_bw|groupnorm|GammaBeta", re.I)),
    ("softmax", re.compile(r"softmax", re.I)),
    ("conv", re.compile(r"conv|fprop|dgrad|wgrad|miopen|winograd|implicit_?gemm|im2col|igemm_(?:fwd|bwd|wrw)", re.I)),
    (
        "gemm",
        re.compile(
            r"gemm|gemv|nvjet|cutlass|xmma|splitkreduce|matmul|wgmma|\bmma|^Cijk_|Cijk_|ck::kernel_gemm|kernel_gemm"
            r"|device_gemm|\bbmm_|^bmm|triton_tem_|triton_\w*_(?:add|b)?mm(?:_|\d|$)|fused_moe|grouped_mm|cublas",
            re.I,
        ),
    ),
    ("memory", re.compile(r"memcpy|memset|copy|fillBuffer|\bfill_?kernel", re.I)),
    ("reduction", re.compile(r"reduce|reduction|argmax|argmin|topk|sort|cumsum|DeviceScan|DeviceReduce|DeviceSelect", re.I)),
    (
        "elementwise",
        re.compile(r"elementwise|functor|pointwise|triton_poi|triton_per|triton_red|vectorized|unrolled|index|gather|scatter|cat_", re.I),
    ),
)
_MEMORY_CLASS = re.compile(r"^memcpy|^memset|\bmemcpy\d*_|\bmemset\d*_|^Memcpy|^Memset", re.I)


def _lowered(pattern: re.Pattern[str]) -> re.Pattern[str]:
    """``pattern`` for lowered ASCII text, without ``re.I``: the same matches on an ASCII
    name (its patterns are ASCII; an upper-case escape such as ``\\S`` would change
    meaning when lowered, so none may be written), 2-8x faster on the 1,000-5,000
    character templated names of real traces, where ``re.I`` scans every position."""
    if not pattern.pattern.isascii() or re.search(r"\\[A-Z]", pattern.pattern):
        raise ValueError(f"family pattern cannot be lowered: {pattern.pattern}")
    return re.compile(pattern.pattern.lower())


_LOWERED = tuple((fam, _lowered(pattern)) for fam, pattern in _PATTERNS)


@lru_cache(maxsize=16384)
def family(name: str, kind: str = "kernel") -> str:
    """The family of one GPU activity (memcpy / memset activities are "memory")."""
    if kind in ("memcpy", "memset"):
        return "memory"
    text = name if isinstance(name, str) else ""
    # An ASCII name (every real one) is searched lowered; any other with re.I as written,
    # whose Unicode case folding str.lower does not follow.
    patterns, text = (_LOWERED, text.lower()) if text.isascii() else (_PATTERNS, text)
    for fam, pattern in patterns:
        if pattern.search(text):
            return fam
    return "other"


# Log-softmax kernels: cross-entropy's, in a loss, never attention's (attention takes a
# plain softmax). ATen's warp softmax states it in its template arguments
# (softmax_warp_forward<in, out, acc, log2_elements, is_log_softmax, is_masked>), the block
# softmax in its epilogue (cunn_SoftMaxForward<..., LogSoftMaxForwardEpilogue>).
_LOG_SOFTMAX = re.compile(r"LogSoftMax|log_softmax|softmax_warp_\w+<[^,<>]+,[^,<>]+,[^,<>]+,\s*\d+,\s*true", re.I)


def is_log_softmax(name: str) -> bool:
    """A log-softmax kernel (a loss's), which the attention rules must not read as attention."""
    return isinstance(name, str) and _LOG_SOFTMAX.search(name) is not None


@lru_cache(maxsize=16384)
def kernel_class(name: str, kind: str = "kernel") -> str:
    """HTA's class: ``communication`` / ``memory`` / ``compute``."""
    if kind in ("memcpy", "memset"):
        return "memory"
    fam = family(name, kind)
    if fam == "communication":
        return "communication"
    if isinstance(name, str) and _MEMORY_CLASS.search(name):
        return "memory"
    return "compute"


def _pairs(names: pd.Series, kinds: pd.Series | None) -> tuple[np.ndarray, list[tuple[str, str]]]:
    """Codes of the distinct (name, kind) pairs (a missing name is "", a missing kind
    "kernel"), and the pairs: every family test runs once per pair."""
    name_codes, name_uniques = factorize(names)
    if kinds is None:
        kind_codes, kind_uniques = np.zeros(len(names), dtype=np.intp), np.array(["kernel"], dtype=object)
    else:
        kind_codes, kind_uniques = factorize(kinds)
    name_uniques = ["" if _missing(u) else u for u in name_uniques]
    kind_uniques = ["kernel" if _missing(u) else u for u in kind_uniques]
    width = max(len(kind_uniques), 1)
    codes, pairs = pd.factorize(name_codes.astype(np.int64) * width + kind_codes)
    return codes, [(name_uniques[p // width], kind_uniques[p % width]) for p in pairs.tolist()]


def _missing(value: object) -> bool:
    """What ``fillna`` fills: None, NaN, pd.NA, NaT."""
    return not isinstance(value, str) and pd.api.types.is_scalar(value) and bool(pd.isna(value))


def families(names: pd.Series, kinds: pd.Series | None = None) -> pd.Series:
    """:func:`family` of every row (``kinds`` defaults to "kernel"), aligned with ``names``."""
    codes, uniques = _pairs(names, kinds)
    per_unique = np.array([family(n, k) for n, k in uniques] or [], dtype=object)
    return pd.Series(per_unique[codes] if len(codes) else [], index=names.index, dtype=object)


def kernel_classes(names: pd.Series, kinds: pd.Series | None = None) -> pd.Series:
    """:func:`kernel_class` of every row, aligned with ``names``."""
    codes, uniques = _pairs(names, kinds)
    per_unique = np.array([kernel_class(n, k) for n, k in uniques] or [], dtype=object)
    return pd.Series(per_unique[codes] if len(codes) else [], index=names.index, dtype=object)


def of_activities(activities: pd.DataFrame) -> pd.DataFrame:
    """``family`` and ``kclass`` columns for ``profile.activities`` (same index)."""
    names, kinds = activities["name"], activities["kind"]
    return pd.DataFrame({"family": families(names, kinds), "kclass": kernel_classes(names, kinds)}, index=activities.index)
