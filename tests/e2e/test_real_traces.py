"""Every trace of the shared corpus (/work/shared/traces, README there): written by other
people on other machines, every one valid. Each is read and analysed (no valid trace
refused, no traceback), except the formats perfdoctor does not read, which are refused by
name in one line with exit 2. The README's reading rows are checked against numbers
computed here by hand from the raw JSON.

Skipped when the corpus is absent (it lives beside the repository, in ``../shared``).
"""

from __future__ import annotations

import gzip
import json
import math
from decimal import Decimal
from pathlib import Path

import pytest

from conftest import SHARED_TRACES, run_cli_inprocess

ROOT = Path(__file__).resolve().parents[2]
TRACES = SHARED_TRACES

pytestmark = pytest.mark.skipif(not TRACES.is_dir(), reason=f"the shared trace corpus is absent ({TRACES})")

# Valid traces of a format perfdoctor does not read: refused by name (what the line must say).
NOT_READ = {
    "tracelens__rocprof_908_results.json.gz": "rocprofiler-sdk JSON",
    "cupti_profiler__benchmark_result_924719_1679055439_trace.json.gz": "cuda_profiler_range",
    "llmservbench__sglang_llama_profile.nsys-rep": "needs nsys",
    "llmservbench__tgi_llama_profile.nsys-rep": "needs nsys",
}


# Valid traces read with a warning naming device work perfdoctor does not read (its metrics
# say why they are unmeasured: tests/e2e/test_wild_wiring.py).
WARNED = {"mtia_inference_trace__mtia_inference_rank_0.json.gz": "not read: 2136 MTIA device events"}


def corpus() -> list[Path]:
    if not TRACES.is_dir():
        return []
    return sorted(p for p in TRACES.rglob("*") if p.is_file() and p.name != "README.md")


def _name(p: Path) -> str:
    return str(p.relative_to(TRACES))


@pytest.mark.parametrize("trace", corpus(), ids=_name)
def test_every_valid_trace_is_read_and_analysed(trace: Path) -> None:
    from perfdoctor.errors import UsageError
    from perfdoctor.pipeline import diagnose

    if trace.name in NOT_READ:
        if trace.suffix == ".nsys-rep" and _nsys_present():
            pytest.skip("nsys is installed here: the .nsys-rep is exported, not refused")
        with pytest.raises(UsageError, match=NOT_READ[trace.name]):
            diagnose(trace, rules=None, warnings=False)
        return
    d = diagnose(trace, warnings=False)
    assert d.findings is not None
    if trace.name in WARNED:
        assert any(WARNED[trace.name] in w for w in d.profile.origin.warnings), d.profile.origin.warnings
    m = d.analysis.metrics
    assert "gpu_idle_ratio" in m and "steps" in m, sorted(m)
    idle = m["gpu_idle_ratio"]
    if idle.value is None:  # unmeasured must say why (a CPU-only trace; steps that launched nothing)
        assert idle.reason, idle
    else:
        assert 0 <= idle.value <= 1, idle


def _nsys_present() -> bool:
    from perfdoctor.collectors.tools import find_tool

    return find_tool("nsys") is not None


@pytest.mark.parametrize("trace", [t for t in corpus() if t.name in NOT_READ], ids=_name)
def test_a_format_not_read_is_one_named_line_and_exit_2(trace: Path) -> None:
    if trace.suffix == ".nsys-rep" and _nsys_present():
        pytest.skip("nsys is installed here: the .nsys-rep is exported, not refused")
    done = run_cli_inprocess("analyze", trace)
    assert done.returncode == 2, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and NOT_READ[trace.name] in lines[0], done.stderr
    assert "Traceback" not in done.stderr


# --------------------------------------------------------------------------- by hand

ACTIVITY_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "Runtime", "runtime", "Driver"}
LAUNCHES = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchCooperativeKernel", "cudaGraphLaunch", "cuGraphLaunch")


def by_hand(path: Path) -> tuple[int, float, float]:
    """(steps, GPU idle ratio, launches per step) from the raw JSON, in plain Python: the
    steps are the ProfilerStep#N ranges; a runtime call belongs to the step whose range
    holds its start; a step's GPU window spans the activities sharing its calls' correlation
    ids (kernel launches, copies, memsets); idle is 1 − |∪ activities ∩ S| / |S| over S, first to last step window."""
    with gzip.open(path) if path.suffix == ".gz" else open(path, "rb") as f:
        doc = json.load(f, parse_float=Decimal)  # exact: epoch µs with ns fractions exceed float64's precision
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    steps = sorted(
        (e["ts"], e["ts"] + e["dur"]) for e in events
        if e.get("cat") in ("cpu_op", "user_annotation") and e["name"].startswith("ProfilerStep#")
    )
    gpu = [(e["ts"], e["ts"] + e["dur"], (e.get("args") or {}).get("correlation")) for e in events if e.get("cat") in ACTIVITY_CATS]
    calls = [e for e in events if e.get("cat") in RUNTIME_CATS]
    by_corr: dict[object, list[tuple[float, float]]] = {}
    for s, t, c in gpu:
        by_corr.setdefault(c, []).append((s, t))
    n_launches, windows = 0, []
    for lo, hi in steps:
        inside = [e for e in calls if lo <= e["ts"] <= hi]
        n_launches += sum(e["name"].startswith(LAUNCHES) for e in inside)
        work = [w for e in inside for w in by_corr.get((e.get("args") or {}).get("correlation"), [])]  # kernels, copies, memsets
        if work:
            windows.append((min(s for s, _ in work), max(t for _, t in work)))
    span_lo, span_hi = min(s for s, _ in windows), max(t for _, t in windows)
    busy, reach = Decimal(0), span_lo
    for s, t, _ in sorted(gpu):
        s, t = max(s, reach), min(t, span_hi)
        if t > s:
            busy, reach = busy + t - s, t
    return len(steps), float(1 - busy / (span_hi - span_lo)), n_launches / len(steps)


# The README's rows (epoch-µs traces, refused before): steps, idle %, launches per step.
README_ROWS = {
    "hta/ns_resolution_trace__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz": (5, 1.58, 870),
    "hta/nccl_parser_config__nccl_data.json.gz": (3, 76.16, 900),
    "hta/timeline_analysis__sampled_rank-0.json.gz": (2, 55.21, 577),
    "hta/negative_queue_length_values_check__rank0.json.gz": (5, 64.33, 1062),
}


@pytest.mark.parametrize("name", sorted(README_ROWS))
def test_the_readme_rows_match_a_count_by_hand(name: str) -> None:
    from perfdoctor.pipeline import diagnose

    path = TRACES / name
    steps, idle, launches = by_hand(path)
    assert (steps, round(idle * 100, 2), round(launches)) == README_ROWS[name]  # the hand count agrees with the README
    m = diagnose(path, rules=None, warnings=False).analysis.metrics
    assert m["steps"].value == steps
    # 1e-6: perfdoctor parses ts as float64, which holds epoch µs to 0.25 µs (1e-7 of the ratio here)
    assert math.isclose(m["gpu_idle_ratio"].value, idle, abs_tol=1e-6), (m["gpu_idle_ratio"].value, idle)
    assert m["launches_per_step"].value == launches


def test_an_epoch_trace_keeps_its_origin_and_nanoseconds() -> None:
    """hta/ns_resolution_trace writes ns fractions on epoch µs: rebased, they survive."""
    from perfdoctor.pipeline import load_trace

    path = TRACES / "hta/ns_resolution_trace__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
    with gzip.open(path) as f:
        raw = json.load(f)["traceEvents"]
    first = next(e["ts"] for e in raw if "ts" in e)
    p = load_trace(path)
    origin = p.origin.time_origin_ns
    assert origin == int(first) * 1000
    kernels = sorted(e["ts"] for e in raw if e.get("ph") == "X" and e.get("cat") == "kernel")
    want = (kernels[0] - int(first)) * 1000  # ns after the origin
    assert abs(int(p.activities["start_ns"].min()) - want) <= 250  # float64 holds epoch µs to 0.25 µs


def test_a_damaged_real_trace_is_read_and_the_cli_exits_0() -> None:
    done = run_cli_inprocess("analyze", TRACES / "hta/triton_example__triton_example.json.gz")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr


def test_forked_decoders_share_the_epoch_origin() -> None:
    """Decoded in parallel spans, an epoch trace gives the Profile one process gives."""
    from perfdoctor.collectors import torch_profiler

    path = TRACES / "hta/negative_queue_length_values_check__rank0.json.gz"
    one, two = torch_profiler.load(path, processes=1), torch_profiler.load(path, processes=2)
    assert one.origin.time_origin_ns == two.origin.time_origin_ns > 0
    for table in ("activities", "calls", "ranges"):
        assert getattr(one, table).equals(getattr(two, table)), table
