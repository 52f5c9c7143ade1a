"""Kernel names a person can read, and the family each kernel belongs to.

A CUDA kernel name from a tracer is a demangled C++ signature:
``void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<
at::native::BinaryFunctor<..., at::native::binary_internal::MulFunctor<float> > > >(...)``.
What a performance engineer wants to see is "elementwise_kernel · MulFunctor": the
template skeleton without its parameters, plus the operation hidden in the template
arguments. :func:`short_name` produces that; :func:`family` buckets kernels into the
groups the report's "time by kernel family" chart shows.
"""

from __future__ import annotations

import re
from functools import lru_cache

# Identifiers inside template arguments that name the actual operation: functors
# (MulFunctor, CUDAFunctor_add), reduction ops (MeanOps) and ATen's per-op kernels
# (rsqrt_kernel_cuda, index_copy_kernel_impl, silu_kernel).
_OP_HINT = re.compile(r"\b([A-Za-z]\w*?(?:Functor(?:OnSelf)?(?:_\w+)?|Ops|_kernel_cuda|_kernel_impl|_kernel))\b")
# Wrappers that say nothing about the operation: skip them when picking the hint.
_GENERIC_HINTS = {"BinaryFunctor", "gpu_kernel_impl", "gpu_kernel_impl_nocast", "gpu_index_kernel"}

FAMILIES: tuple[tuple[str, re.Pattern[str]], ...] = (
    # Order matters: the first match wins ("flash" kernels are attention, not gemm).
    ("attention", re.compile(r"flash|fmha|sdpa|attention|attn|paged", re.I)),
    ("gemm", re.compile(r"gemm|nvjet|cutlass|xmma|splitkreduce|matmul|wgmma|\bmma", re.I)),
    ("norm", re.compile(r"norm", re.I)),
    ("softmax", re.compile(r"softmax", re.I)),
    ("reduction", re.compile(r"reduce|reduction|argmax|topk|sort", re.I)),
    ("copy / cast / index", re.compile(r"copy|cat|index|gather|scatter|fill|transpose|permute", re.I)),
    ("elementwise", re.compile(r"elementwise|functor|pointwise|triton_poi", re.I)),
)


def _strip_params(name: str) -> str:
    """Drop ``void`` and the parameter list: the first ``(`` outside any template brackets."""
    name = name.strip()
    if name.startswith("void "):
        name = name[5:]
    # Demanglers spell an anonymous namespace two ways (c++filt / nsys): drop both.
    name = name.replace("(anonymous namespace)::", "").replace("<unnamed>::", "")
    depth = 0
    for i, ch in enumerate(name):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif ch == "(" and depth == 0 and i > 0:
            return name[:i]
    return name


@lru_cache(maxsize=4096)
def short_name(name: str) -> str:
    """A readable, stable label for a kernel name (used to group repeats)."""
    if not isinstance(name, str) or not name:
        return "<unnamed>"
    sig = _strip_params(name)
    head, _, args = sig.partition("<")
    base = head.rsplit("::", 1)[-1].strip() or head.strip()
    hints = [h for h in _OP_HINT.findall(args) if h not in _GENERIC_HINTS and h != base]
    label = f"{base} · {hints[-1]}" if hints else base
    return label if len(label) <= 90 else label[:87] + "..."


@lru_cache(maxsize=4096)
def family(name: str, kind: str = "kernel") -> str:
    """The family of one GPU activity: memcpy / memset by kind, kernels by name."""
    if kind != "kernel":
        return kind
    for fam, pattern in FAMILIES:
        if pattern.search(name or ""):
            return fam
    return "other"


# GEMM kernel names that state their precision. A name with a low-precision input type is
# low precision even when it also names an fp32 accumulator (``gemm_bf16bf16_bf16f32_f32``).
# cuBLAS "nvjet" kernels and many CUTLASS names carry none: those are "unknown", never
# counted either way.
_LOWP_GEMM = re.compile(r"bf16|f16|fp16|hgemm|h\d{3,4}gemm|e4m3|e5m2|fp8|int8|imma", re.I)
_FP32_GEMM = re.compile(r"sgemm|s\d{3,4}gemm|tf32|f32f32|fp32|_f32_", re.I)


def gemm_precision(name: str) -> str:
    """``"fp32"``, ``"low"`` (fp16/bf16/fp8/int8 inputs) or ``"unknown"`` from a GEMM kernel's name."""
    if _LOWP_GEMM.search(name or ""):
        return "low"
    if _FP32_GEMM.search(name or ""):
        return "fp32"
    return "unknown"
