"""Matching kernels across GPU vendors: by family and operation when names cannot match.

Within one vendor, ``perfdoctor diff`` matches kernels by normalized name
(:func:`perfdoctor.names.kernels.match_keys`): a kernel that was renamed really is a change. Across
vendors the same work has different names: cuBLAS ``nvjet_sm90_tst_...`` is hipBLASLt /
Tensile ``Cijk_Alik_Bljk_...``, NCCL ``ncclDevKernel_AllReduce_Sum_f32_RING_LL`` is RCCL's
``ncclKernel_AllReduce_RING_LL_Sum_float``, cuDNN is MIOpen, FlashAttention is CK
``fmha_fwd``. ATen's own kernels (``at::native::elementwise_kernel``,
``reduce_kernel``, ...) keep their names on ROCm and still match by name.

:func:`op_key` gives each kernel a vendor-neutral key, ``family:op`` — the family of
:mod:`perfdoctor.names.families` and, where the name says it, the operation (``communication:
all_reduce``, ``gemm``, ``attention``). :func:`match_by_family` re-keys the kernels that
found no partner by name and merges those whose key exists on both sides; what is left has
no counterpart on the other vendor and is reported as such — never silently dropped.
"""

from __future__ import annotations

import re

import pandas as pd

from perfdoctor.names.families import family

_COLLECTIVES = (
    ("all_reduce", re.compile(r"all_?reduce|allreduce", re.I)),
    ("all_gather", re.compile(r"all_?gather|allgather", re.I)),
    ("reduce_scatter", re.compile(r"reduce_?scatter|reducescatter", re.I)),
    ("all_to_all", re.compile(r"all_?to_?all|alltoall", re.I)),
    ("broadcast", re.compile(r"broadcast|bcast", re.I)),
    ("send_recv", re.compile(r"sendrecv|send_recv|\bsend|\brecv", re.I)),
)
_BACKWARD = re.compile(r"backward|_bwd|bwd_|dgrad|wgrad|_grad", re.I)
FAMILY_MARK = " (by family)"  # suffix of a row merged by family across vendors


def op_key(name: str) -> str:
    """Vendor-neutral key of a kernel: ``family`` or ``family:op`` (collectives; forward
    and backward attention / conv / norm are told apart)."""
    fam = family(name, "kernel")
    if fam == "communication":
        for op, pattern in _COLLECTIVES:
            if pattern.search(name):
                return f"{fam}:{op}"
        return fam
    if fam in ("attention", "conv", "norm", "softmax") and _BACKWARD.search(name):
        return f"{fam}:backward"
    return fam


def match_by_family(before: pd.DataFrame, after: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, list[str], list[str]]:
    """Merge kernels that have no name partner into ``family:op`` rows where both sides have one.

    ``before`` / ``after``: kernel tables indexed by normalized name with ``count``,
    ``time_us`` and ``variants`` columns (:func:`perfdoctor.compare.kernels.kernel_table`). Returns the
    two re-keyed tables, the merged row names (``"gemm (by family)"``), and the names
    still without a counterpart (so the diff can say so).
    """
    common = set(before.index) & set(after.index)
    keys_b = {n: op_key(n) for n in before.index if n not in common}
    keys_a = {n: op_key(n) for n in after.index if n not in common}
    shared = set(keys_b.values()) & set(keys_a.values())

    def rekey(table: pd.DataFrame, keys: dict[str, str]) -> pd.DataFrame:
        index = [keys[n] + FAMILY_MARK if keys.get(n) in shared else n for n in table.index]
        return table.groupby(pd.Index(index, name=table.index.name), sort=False)[["count", "time_us", "variants"]].sum()

    merged = sorted(k + FAMILY_MARK for k in shared)
    unmatched = sorted(n for n, k in {**keys_b, **keys_a}.items() if k not in shared)
    return rekey(before, keys_b), rekey(after, keys_a), merged, unmatched
