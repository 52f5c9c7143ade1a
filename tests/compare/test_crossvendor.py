"""Issue 20, item 13: a diff across GPU vendors matches kernels by family and op, says which
names could not be matched, and a metric one side's tracer cannot give is absent there —
never 0, never "fixed".

The AMD side is a real H200 trace RENAMED the way a ROCm Kineto trace spells things
(``amd_renamed`` below): the device name, HIP API names (``hipLaunchKernel``,
``hipMemcpyAsync``, ``hipStreamSynchronize``, ... as tests/names/test_api.py crafts them),
Tensile ``Cijk_*`` GEMM names for the cuBLAS ones, and copies named as ROCm's tracer names
them (``Memcpy HtoD (Host -> Device)``: no pageable / pinned). ATen's own kernels keep
their names, as they do on ROCm. Truths come from the raw JSON in this file.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from conftest import FIXTURES
from perfdoctor.compare.diff import diff_runs
from perfdoctor.pipeline import diagnose
from perfdoctor.reports.diff_report import kernel_summary, lead_lines, reason, render_markdown, verdict

EAGER = FIXTURES / "h200-decode-eager-5steps.kineto.json.gz"
PAGEABLE = FIXTURES / "h200-pageable-sync-10steps.kineto.json.gz"
NV_GEMM = re.compile(r"^nvjet_|splitKreduce|^sm\d+_xmma_gemm|gemm", re.I)
HIP_CALLS = {
    "cudaLaunchKernel": "hipLaunchKernel",
    "cudaLaunchKernelExC": "hipExtLaunchKernel",
    "cuLaunchKernel": "hipModuleLaunchKernel",
    "cuLaunchKernelEx": "hipExtModuleLaunchKernel",
    "cudaMemcpyAsync": "hipMemcpyAsync",
    "cudaMemsetAsync": "hipMemsetAsync",
    "cudaStreamSynchronize": "hipStreamSynchronize",
    "cudaDeviceSynchronize": "hipDeviceSynchronize",
    "cudaStreamIsCapturing": "hipStreamIsCapturing",
}


def amd_renamed(src: Path, dst: Path, extra: dict[str, str] | None = None) -> Path:
    """RENAMED: ``src`` spelled as a ROCm trace of an MI300X (see the module docstring).
    ``extra``: kernel-name substring → new name, for kernels a test renames on top."""
    doc = json.loads(gzip.decompress(src.read_bytes()))
    for props in doc.get("deviceProperties", []):
        props["name"] = "AMD Instinct MI300X"
    for key in ("cuda_driver_version", "cuda_runtime_version", "cupti_version"):
        doc.pop(key, None)
    tensile: dict[str, str] = {}
    for e in doc["traceEvents"]:
        if e.get("ph") != "X":
            continue
        if e.get("cat") in ("cuda_runtime", "cuda_driver"):
            e["name"] = HIP_CALLS.get(e["name"], e["name"])
        elif e.get("cat") == "kernel":
            if NV_GEMM.search(e["name"]):
                # one Tensile solution per cuBLAS kernel, as hipBLASLt would pick
                letters = "ABCDEFGHIJKLMNOP"[len(tensile) % 16]
                e["name"] = tensile.setdefault(e["name"], f"Cijk_Alik_Bljk_BBS_BH_MT64x{letters}_MI16x16x16x1_SN_LDSB0")
            for part, new in (extra or {}).items():
                if part in e["name"]:
                    e["name"] = new
        elif e.get("cat") == "gpu_memcpy":
            e["name"] = re.sub(r"\((Pageable|Pinned) -> Device\)", "(Host -> Device)", e["name"])
            e["name"] = re.sub(r"\(Device -> (Pageable|Pinned)\)", "(Device -> Host)", e["name"])
    dst.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return dst


def _gemms_per_step(path: Path, pattern: re.Pattern[str]) -> float:
    doc = json.loads(gzip.decompress(path.read_bytes()))
    x = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in x if e.get("cat") == "user_annotation" and e["name"] == "decode_step"]
    corr = {e["args"]["correlation"] for e in x if e.get("cat") in ("cuda_runtime", "cuda_driver") and any(a <= e["ts"] <= b for a, b in steps)}
    return sum(1 for e in x if e.get("cat") == "kernel" and pattern.search(e["name"]) and e["args"]["correlation"] in corr) / len(steps)


@pytest.fixture(scope="module")
def amd_eager(tmp_path_factory) -> Path:
    return amd_renamed(EAGER, tmp_path_factory.mktemp("amd") / "mi300x-eager.kineto.json.gz")


def test_gemms_match_by_family_across_vendors(amd_eager):
    nv, amd = diagnose(EAGER, rules=None), diagnose(amd_eager, rules=None)
    assert amd.analysis.value("launches_per_step") == nv.analysis.value("launches_per_step") == 863  # HIP launches read
    d = diff_runs(nv, amd)
    assert {m.field for m in d.blocking} == {"vendor", "gpu"}
    assert (d.facts_before["vendor"], d.facts_after["vendor"]) == ("NVIDIA", "AMD")
    assert verdict(d).startswith("no verdict — not comparable: vendor: before NVIDIA, after AMD")
    k = d.kernels
    assert k.vendors == ("NVIDIA", "AMD")
    assert k.matched_by_family == ["gemm (by family)"] and k.unmatched == []
    row = next(r for r in k.rows if r.name == "gemm (by family)")
    assert row.status == "matched by family"
    expected = _gemms_per_step(EAGER, NV_GEMM)
    assert expected == 113  # 16 + 16 + 1 + 16 + 16 + 32 nvjet GEMMs and 16 split-K reductions
    assert row.count_before == row.count_after == expected == _gemms_per_step(amd_eager, re.compile(r"^Cijk_"))
    assert row.variants_before == 7 and row.variants_after == 7  # seven cuBLAS kernels, seven Tensile names
    assert not k.appeared and not k.vanished  # ATen kernels keep their names on ROCm
    assert {r.status for r in k.rows} == {"matched", "matched by family"}
    assert "NVIDIA → AMD: kernel names differ across vendors, 1 families matched by family and op" in kernel_summary(k)
    assert lead_lines(d) == []  # the same work per step on both sides
    assert "gemm (by family)" in render_markdown(d)


def test_names_that_cannot_be_matched_are_said(tmp_path):
    """On top: the softmax runs as a Composable-Kernel tile kernel whose name states no op
    (``ck_tile::kentry``): it has no counterpart, and the diff lists both names."""
    amd = amd_renamed(EAGER, tmp_path / "mi300x-ck.kineto.json.gz", {"softmax_warp_forward": "void ck_tile::kentry<64, 1, ck_tile::Kernel>(ck_tile::Args)"})
    d = diff_runs(diagnose(EAGER, rules=None), diagnose(amd, rules=None))
    k = d.kernels
    assert k.unmatched == ["ck_tile::kentry", "{anonymous}::softmax_warp_forward"]
    assert [r.name for r in k.vanished] == ["{anonymous}::softmax_warp_forward"]
    assert [r.name for r in k.appeared] == ["ck_tile::kentry"]
    assert "2 kernel names could not be matched" in kernel_summary(k)


def test_a_metric_rocm_cannot_give_is_absent_and_never_fixed(tmp_path):
    amd_path = amd_renamed(PAGEABLE, tmp_path / "mi300x-pageable.kineto.json.gz")
    nv, amd = diagnose(PAGEABLE), diagnose(amd_path)
    doc = json.loads(gzip.decompress(PAGEABLE.read_bytes()))
    pageable = sum(e["args"]["bytes"] for e in doc["traceEvents"] if e.get("cat") == "gpu_memcpy" and "Pageable" in e["name"])
    assert nv.analysis.value("pageable_memcpy_bytes") == pageable == 10 * 4 * 2**20
    m = amd.analysis.metrics["pageable_memcpy_bytes"]
    assert m.value is None and "pageable or pinned" in m.reason and "ROCm" in m.reason
    assert amd.analysis.value("sync_calls_per_step") == nv.analysis.value("sync_calls_per_step") == 3  # hipStreamSynchronize
    d = diff_runs(nv, amd)
    row = d.metric("pageable_memcpy_bytes")
    assert row.status == "removed" and row.after is None and row.verdict is None
    assert row.reason.side == "after" and "ROCm" in reason(row.reason)
    f = d.findings
    assert "pageable-copies" not in f.fixed and "pageable-copies" in f.unknown
    nv_status = {x.rule_id: x.status for x in nv.findings}["pageable-copies"]
    amd_status = {x.rule_id: x.status for x in amd.findings}["pageable-copies"]
    assert (nv_status, amd_status) == ("fail", "not_evaluated")
