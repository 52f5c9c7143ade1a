"""Kernel names: one key to match kernels across runs, one label and family to show them.

Two questions, two functions, one module:

* :func:`match_key` — which kernels of two runs are "the same kernel" (``perfdoctor diff``):
  template arguments, argument lists, Triton specialisation and hex suffixes removed, so
  a recompiled ``triton_poi_fused_add_7`` matches ``triton_poi_fused_add_11``;
* :func:`label` and :func:`family` — what a person reads in a report.

A CUDA kernel name from a tracer is a demangled C++ signature:
``void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<
at::native::BinaryFunctor<..., at::native::binary_internal::MulFunctor<float> > > >(...)``.
What a performance engineer wants to see is "elementwise_kernel · MulFunctor": the
template skeleton without its parameters, plus the operation hidden in the template
arguments. :func:`label` produces that; :func:`family` buckets kernels into the
groups the report's "time by kernel family" chart shows.
"""

from __future__ import annotations

import re
from functools import lru_cache
import pandas as pd

from perfdoctor.names import families
from perfdoctor.names.codes import per_name

# Identifiers inside template arguments that name the actual operation: functors
# (MulFunctor, CUDAFunctor_add), reduction ops (MeanOps) and ATen's per-op kernels
# (rsqrt_kernel_cuda, index_copy_kernel_impl, silu_kernel).
_OP_HINT = re.compile(r"\b([A-Za-z]\w*?(?:Functor(?:OnSelf)?(?:_\w+)?|Ops|_kernel_cuda|_kernel_impl|_kernel))\b")
# Wrappers that say nothing about the operation: skip them when picking the hint.
_GENERIC_HINTS = {"BinaryFunctor", "gpu_kernel_impl", "gpu_kernel_impl_nocast", "gpu_index_kernel"}


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
def label(name: str) -> str:
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
    """The family of one GPU activity, across vendors: one policy, :func:`perfdoctor.names.families.family`."""
    return families.family(name, kind)


# GEMM kernel names that state their precision. A name with a low-precision input type is
# low precision even when it also names an fp32 accumulator (``gemm_bf16bf16_bf16f32_f32``).
# cuBLAS "nvjet" kernels and many CUTLASS names carry none: those are "unknown", never
# counted either way.
_LOWP_GEMM = re.compile(r"bf16|f16|fp16|hgemm|h\d{3,4}gemm|e4m3|e5m2|fp8|int8|imma", re.I)
_FP32_GEMM = re.compile(r"sgemm|s\d{3,4}gemm|tf32|f32f32|fp32|_f32_", re.I)


@lru_cache(maxsize=4096)
def gemm_precision(name: str) -> str:
    """``"fp32"``, ``"low"`` (fp16/bf16/fp8/int8 inputs) or ``"unknown"`` from a GEMM kernel's name."""
    if _LOWP_GEMM.search(name or ""):
        return "low"
    if _FP32_GEMM.search(name or ""):
        return "fp32"
    return "unknown"


def labels(names: pd.Series) -> pd.Series:
    """:func:`label` of a column, computed once per distinct name."""
    return per_name(names, label)


# --- matching kernels across runs -------------------------------------------------------

_TRITON_SPECIALIZATION = re.compile(r"(?:_\d+[cde]*)+$")  # _0d1d2de, _7, _0_1
_HEX_SUFFIX = re.compile(r"_(?:0x)?[0-9a-f]{8,}$", re.IGNORECASE)  # _0x7f3a91c0, _a1b2c3d4e5f6


def _strip_brackets(name: str) -> str:
    """Remove every ``<...>`` and ``(...)`` group, nested, keeping the text outside them.

    ``operator<`` / ``operator()`` / ``operator->`` are names, not brackets: they are
    protected before the scan. An unbalanced closer is kept as text (a trace is untrusted
    input and may be truncated).
    """
    protected = (
        # Kineto (c++filt) writes "(anonymous namespace)", nsys "<unnamed>": one namespace
        name.replace("(anonymous namespace)", "{anonymous}")
        .replace("<unnamed>", "{anonymous}")
        .replace("operator()", "operator{call}")
        .replace("operator<<", "operator{shl}")
        .replace("operator>>", "operator{shr}")
        .replace("operator<=", "operator{le}")
        .replace("operator>=", "operator{ge}")
        .replace("operator<", "operator{lt}")
        .replace("operator>", "operator{gt}")
        .replace("->", "{arrow}")
    )
    out: list[str] = []
    stack: list[str] = []
    pairs = {"<": ">", "(": ")"}
    for ch in protected:
        if ch in pairs:
            stack.append(pairs[ch])
        elif stack and ch == stack[-1]:
            stack.pop()
        elif not stack:
            out.append(ch)
    return "".join(out)


def match_key(name: str) -> str:
    """The part of a kernel name that survives recompilation and re-launch.

    ``void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>,
    std::array<char*, 1ul> >(int, ...)`` → ``at::native::vectorized_elementwise_kernel``;
    ``triton_poi_fused_add_mul_0`` → ``triton_poi_fused_add_mul``;
    ``triton__0d1d2d3de`` → ``triton_``; ``kernel_0x7f3a91c0`` → ``kernel``.

    Dropping template arguments merges instantiations of one template (e.g. every
    elementwise functor) into one row: that is the price of matching across builds, and the
    row counts how many distinct raw names it holds.
    """
    text = _strip_brackets(name.strip())
    text = re.sub(r"^(?:void|__global__)\s+", "", text.strip())
    text = re.sub(r"\s+", " ", text).strip()
    previous = None
    while previous != text:  # suffixes can stack: kernel_0x1a2b3c4d_3
        previous = text
        text = _HEX_SUFFIX.sub("", text)
        text = _TRITON_SPECIALIZATION.sub("", text)
    return text or name.strip()


def match_keys(names: pd.Series) -> pd.Series:
    """:func:`match_key` of a column, computed once per distinct name."""
    return per_name(names, match_key)
