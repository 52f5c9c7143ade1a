"""Issue 20, item 12: what the host did while the GPU had nothing to do, and the call site
of every synchronizing call — synchronous copies included.

None of the recorded fixtures has Python stacks (``with_stack=True``), so the traces here
are the real H200 serving trace (tests/fixtures/wild/h200-serve-eager) with Python frames
ADDED on the step's thread in stated places (``with_frames``), as Kineto writes them
(``python_function`` events). The H200 recording with real stacks is
``scripts/record_wild_traces.py host-preprocess`` and its gpu-marked test at the end.
Truths come from the raw JSON, never from the module under test.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from perfdoctor.pipeline import load_trace
from perfdoctor.reports.common import finding_reason
from perfdoctor.reports.estimates import formula
from perfdoctor.analysis.hostgaps import BUSY_SHARE, MIN_GAP_US, busy_summary, gap_hosts, not_working_ns
from perfdoctor.analysis.metrics import analyze
from perfdoctor.rules.engine import evaluate, load_rules
from perfdoctor.rules.evidence import host_in_gaps, sync_calls

WILD = Path(__file__).parents[1] / "fixtures" / "wild"
SERVE = WILD / "h200-serve-eager.kineto.json.gz"
LAUNCH = re.compile(r"^(cudaLaunchKernel|cudaLaunchKernelExC|cuLaunchKernel|cuLaunchKernelEx|cudaGraphLaunch)$")
PREPROCESS = "serve.py(88): preprocess"
ZOOM = "/usr/lib/python3/dist-packages/scipy/ndimage/_interpolation.py(812): zoom"
TORCH_FRAME = "torch/utils/_device.py(103): __torch_function__"  # the frame issue 20 saw named as the call site
READ_BACK = "serve.py(97): read_tokens"


def _doc(path: Path) -> dict:
    return json.loads(gzip.decompress(path.read_bytes()))


def _frame(name: str, ts: float, dur: float, pid: int, tid: int) -> dict:
    return {"ph": "X", "cat": "python_function", "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": {}}


def _longest_gap_with_late_launch(doc: dict) -> tuple[dict, float, float, float]:
    """Step 1 (the first decode) of the serving trace: its host range, and the GPU gap in it
    that is longest — by a plain scan: GPU activities of the launches inside the step,
    sorted, the largest hole between one's end and the next one's start — and the first
    launch call inside that gap."""
    x = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    step = sorted((e for e in x if e.get("cat") == "user_annotation"), key=lambda e: e["ts"])[1]
    lo, hi = step["ts"], step["ts"] + step["dur"]
    corr = {e["args"]["correlation"] for e in x if e.get("cat") == "cuda_runtime" and lo <= e["ts"] <= hi}
    gpu = sorted((e["ts"], e["ts"] + e["dur"]) for e in x if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and e["args"].get("correlation") in corr)
    best, reach = (0.0, 0.0, 0.0), gpu[0][1]
    for s, end in gpu[1:]:
        if s - reach > best[0]:
            best = (s - reach, reach, s)
        reach = max(reach, end)
    _, g_lo, g_hi = best
    first_launch = min(e["ts"] for e in x if e.get("cat") == "cuda_runtime" and LAUNCH.match(e["name"]) and g_lo <= e["ts"] < g_hi)
    return step, g_lo, g_hi, first_launch


def with_frames(dst: Path) -> tuple[Path, dict]:
    """ADDED FRAMES: the serving trace with, in its first decode step, ``handle_step`` over
    the whole step, ``preprocess`` (with scipy's ``zoom`` and a torch frame inside it) from
    the start of the step's longest GPU gap until 0.3 ms before the launch that ends it, and
    ``read_tokens`` around the step's ``cudaStreamSynchronize``; one ``cudaMemcpyAsync`` of
    a later step renamed to the synchronous ``cudaMemcpy`` inside a ``load_weights_sync``
    frame."""
    doc = _doc(SERVE)
    step, g_lo, g_hi, first_launch = _longest_gap_with_late_launch(doc)
    pid, tid = step["pid"], step["tid"]
    pre_end = first_launch - 300.0
    frames = [
        _frame("serve.py(150): handle_step", step["ts"], step["dur"], pid, tid),
        _frame(PREPROCESS, g_lo, pre_end - g_lo, pid, tid),
        _frame(ZOOM, g_lo + 5.0, pre_end - g_lo - 10.0, pid, tid),
        _frame(TORCH_FRAME, g_lo + 10.0, 50.0, pid, tid),
    ]
    x = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    sync = next(e for e in x if e["name"] == "cudaStreamSynchronize" and step["ts"] <= e["ts"] <= step["ts"] + step["dur"])
    frames.append(_frame(READ_BACK, sync["ts"] - 30.0, sync["dur"] + 60.0, pid, tid))
    later = sorted((e for e in x if e.get("cat") == "user_annotation"), key=lambda e: e["ts"])[3]
    copy = next(e for e in x if e["name"] == "cudaMemcpyAsync" and later["ts"] <= e["ts"] <= later["ts"] + later["dur"])
    copy["name"] = "cudaMemcpy"
    frames.append(_frame("serve.py(60): load_weights_sync", copy["ts"] - 5.0, copy["dur"] + 10.0, pid, tid))
    doc["traceEvents"] += frames
    dst.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return dst, {"gap": (g_lo, g_hi), "first_launch": first_launch, "pre_end": pre_end}


@pytest.fixture(scope="module")
def framed(tmp_path_factory):
    path, truth = with_frames(tmp_path_factory.mktemp("frames") / "serve-stacks.kineto.json.gz")
    a = analyze(load_trace(path))
    return a, evaluate(load_rules(), a), truth


def test_a_busy_gap_names_the_users_call_site_not_a_library_frame(framed):
    a, _, truth = framed
    h = gap_hosts(a)
    g_lo, g_hi = truth["gap"]
    row = h.iloc[(h["start_ns"] - round(g_lo * 1e3)).abs().argmin()]
    assert row["length_ns"] == pytest.approx((g_hi - g_lo) * 1e3, abs=2)  # the same gap the raw scan found
    assert row["host"] == "busy" and row["where"] == "between GPU work"
    assert row["site"] == PREPROCESS  # not scipy's zoom, not torch/utils/_device.py, not the enclosing handle_step
    # busy: from the gap's start to the first launch in it, less time inside CUDA calls (none there)
    assert row["busy_ns"] == pytest.approx((truth["first_launch"] - g_lo) * 1e3, abs=2)
    assert row["busy_ns"] >= BUSY_SHARE * row["length_ns"]
    # intervals without frames stay "unknown" or "short", never "busy"
    assert set(h[h["site"] == ""]["host"]) <= {"unknown", "short", "launching"}
    assert (h[h["host"] == "short"]["length_ns"] < MIN_GAP_US * 1e3).all()


def test_summary_rule_estimate_and_evidence_name_it(framed):
    a, findings, truth = framed
    h = gap_hosts(a)
    b = busy_summary(a)
    busy = h[h["host"] == "busy"]["busy_ns"].sum()
    assert b.ratio == pytest.approx(busy / h["length_ns"].sum())
    assert b.sites[0][0] == PREPROCESS
    f = next(f for f in findings if f.rule_id == "host-busy-in-gaps")
    assert f.value == pytest.approx(b.ratio)
    assert b.ratio >= 0.25 and f.status == "fail"  # 13 of the steps' 27.7 ms of idle time
    # one of 12 steps has the preprocessing: the median per step is 0, and never beyond the step's non-working time
    per_step = h[h["host"] == "busy"].groupby("step")["busy_ns"].sum()
    assert per_step.index.tolist() == [1]
    assert b.ms_per_step == 0.0 <= float(not_working_ns(a)[1])
    ev = host_in_gaps(a)
    assert ev.rows[0][0] == 1 and ev.rows[0][-1] == PREPROCESS
    assert PREPROCESS in formula(f.estimate)  # the finding names the call site, not generic advice
    assert any(e.kind == "host_in_gaps" and e.rows[0][-1] == PREPROCESS for e in f.evidence)


def test_sync_calls_and_synchronous_copies_carry_their_call_site(framed):
    a, _, _ = framed
    ev = sync_calls(a)
    rows = {r[0]: r for r in ev.rows}
    assert READ_BACK in rows["cudaStreamSynchronize"][-1]
    assert rows["cudaMemcpy"][-1] == "serve.py(60): load_weights_sync ×1"  # a synchronous copy is a sync, with its line
    assert "torch/utils/_device.py" not in " ".join(str(r[-1]) for r in ev.rows)


def test_without_stacks_the_rule_says_how_to_get_them():
    a = analyze(load_trace(SERVE))
    f = next(f for f in evaluate(load_rules(), a) if f.rule_id == "host-busy-in-gaps")
    assert f.status == "not_evaluated" and "with_stack=True" in finding_reason(f)


def check_preprocessing_is_named(trace: Path, facts: dict) -> None:
    """The recording of scripts/record_wild_traces.py host-preprocess (each step resizes an
    image with scipy.ndimage.zoom on the host, then runs GPU work; with_stack=True): the
    analysis names the user's preprocessing call site (not scipy's or the standard
    library's frames under it), fails the rule, and estimates about the preprocessing time
    without exceeding the step's non-GPU time."""
    a = analyze(load_trace(trace))
    assert a.steps.name == facts["step"] and a.steps.count == facts["steps"]
    b = busy_summary(a)
    assert b.sites and "record_wild_traces.py(" in b.sites[0][0] and b.sites[0][0].endswith(": " + facts["preprocess_function"]), b.sites
    f = next(f for f in evaluate(load_rules(), a) if f.rule_id == "host-busy-in-gaps")
    assert f.status == "fail" and f.recovered_ms > 0.5 * facts["preprocess_ms_median"], (f.value, formula(f.estimate))
    assert f.recovered_ms <= float(not_working_ns(a).max()) / 1e6


def test_recorded_h200_preprocessing_is_named():
    """The H200 recording of 2026-12-01 (tests/fixtures/wild/h200-host-preprocess): its
    Python frames are spelled as the torch profiler writes them, relative to sys.path
    ("scipy/ndimage/_interpolation.py(763): zoom", "typing.py(...)", the script bare)."""
    check_preprocessing_is_named(WILD / "h200-host-preprocess.kineto.json.gz", json.loads((WILD / "host-preprocess.facts.json").read_text()))


@pytest.mark.gpu
def test_h200_host_preprocessing_is_named(tmp_path):
    """On a CUDA GPU: record scripts/record_wild_traces.py host-preprocess afresh and check it
    as the shipped recording is checked."""
    import subprocess
    import sys

    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    script = Path(__file__).parents[2] / "scripts" / "record_wild_traces.py"
    done = subprocess.run([sys.executable, str(script), str(tmp_path), "host-preprocess"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    facts = json.loads((tmp_path / "host-preprocess.facts.json").read_text())
    check_preprocessing_is_named(tmp_path / "h200-host-preprocess.kineto.json.gz", facts)


def test_covered_length_is_the_union_inside_each_window() -> None:
    # Intervals.covered answers many windows at once from prefix sums; the truth is a
    # brute-force scan of each nanosecond of a small random case.
    import numpy as np
    import pandas as pd

    from perfdoctor.analysis.hostgaps import Intervals

    rng = np.random.default_rng(7)
    start = rng.integers(0, 200, 40)
    end = start + rng.integers(0, 30, 40)
    t = Intervals(pd.DataFrame({"start_ns": start, "end_ns": end, "name": [f"c{i}" for i in range(40)]}))
    lo = rng.integers(-10, 240, 50)
    hi = lo + rng.integers(0, 60, 50)
    busy = np.zeros(300, dtype=bool)
    for s, e in zip(start, end):
        busy[s:e] = True
    truth = [int(busy[max(a, 0):max(b, 0)].sum()) for a, b in zip(lo, hi)]
    assert t.covered(lo, hi).tolist() == truth
    for a, b in zip(lo, hi):  # the intervals meeting each window, by a direct test
        assert sorted(t.row[t.overlapping(int(a), int(b))].tolist()) == [i for i in range(40) if start[i] < b and end[i] > a]


def test_gap_hosts_runs_once_per_analysis(monkeypatch, tmp_path) -> None:
    # the host-busy signal, its estimate and its evidence all read it: once, not per reader
    from perfdoctor.analysis import hostgaps

    calls = []
    real = hostgaps._gap_hosts
    monkeypatch.setattr(hostgaps, "_gap_hosts", lambda a: calls.append(1) or real(a))
    path, _ = with_frames(tmp_path / "serve-stacks.kineto.json.gz")
    a = analyze(load_trace(path))
    found = evaluate(load_rules(), a)
    assert any(f.rule_id == "host-busy" for f in found) or host_in_gaps(a).rows
    assert len(calls) == 1


def test_a_cpu_only_trace_has_no_gpu_idle_time_to_explain() -> None:
    """No GPU ran: the reason is that (a GPU reason, so the reports count the rule among the
    checks of GPU work), not the advice to record Python stacks."""
    from conftest import FIXTURES
    from perfdoctor.reports.common import about_gpu

    b = busy_summary(analyze(load_trace(FIXTURES / "cpu-mlp-5steps.kineto.json.gz")))
    assert b.ratio is None and "no GPU ran" in b.reason and about_gpu(b.reason) and "with_stack" not in b.reason
