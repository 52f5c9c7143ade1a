"""Issue 20, item 8: a diff of windows that are not alike says "not comparable" before any
verdict, gives none, and the gate refuses to judge; kernel and copy count changes lead.

Every trace here is a real H200 trace (tests/fixtures) or a CROPPED / EDITED copy of one,
edited in one stated way by the helpers below. Truths (coverage, counts) are computed from
the raw trace JSON in this file, never by the module under test.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from conftest import FIXTURES, run_cli_inprocess
from perfdoctor.compare.diff import diff_runs
from perfdoctor.pipeline import diagnose
from perfdoctor.compare.gate import evaluate_gate, parse_budget
from perfdoctor.reports.diff_report import document, lead_lines, mismatch_why, render_markdown, verdict
from perfdoctor.text import count

WILD = FIXTURES / "wild"
GRAPH = FIXTURES / "h200-decode-graph-10steps.kineto.json.gz"
STEP = "decode_step"
GPU = ("kernel", "gpu_memcpy", "gpu_memset")
CALLS = ("cuda_runtime", "cuda_driver")
EMBEDDING = "void at::native::(anonymous namespace)::indexSelectSmallIndex"  # once per decode step, 2.4-2.9 µs


# --------------------------------------------------------------------------- crafting


def _load(path: Path) -> dict:
    return json.loads(gzip.decompress(Path(path).read_bytes()))


def _save(doc: dict, path: Path) -> Path:
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path


def _x(doc: dict) -> list[dict]:
    return [e for e in doc["traceEvents"] if e.get("ph") == "X"]


def _steps(doc: dict, step: str = STEP) -> tuple[list[tuple[float, float]], dict[int, int]]:
    """The step ranges (µs), and which step each launch correlation id belongs to (its call
    starts inside the range, any thread)."""
    ranges = sorted((e["ts"], e["ts"] + e["dur"]) for e in _x(doc) if e.get("cat") == "user_annotation" and e["name"] == step)
    owner = {}
    for e in _x(doc):
        if e.get("cat") in CALLS:
            for i, (a, b) in enumerate(ranges):
                if a <= e["ts"] <= b:
                    owner[e["args"]["correlation"]] = i
    return ranges, owner


def keep_steps(src: Path, dst: Path, keep: set[int]) -> Path:
    """CROPPED: the trace with every host and GPU event of the steps not in ``keep`` cut out
    (what a profiler window that skipped steps records, e.g. a schedule with ``repeat``)."""
    doc = _load(src)
    ranges, owner = _steps(doc)
    cut = [w for i, w in enumerate(ranges) if i not in keep]
    out = []
    for e in doc["traceEvents"]:
        if e.get("ph") == "X":
            if e.get("cat") in GPU:
                i = owner.get((e.get("args") or {}).get("correlation"), -1)
                if i >= 0 and i not in keep:
                    continue
            elif any(a <= e["ts"] <= b for a, b in cut):
                continue
        out.append(e)
    doc["traceEvents"] = out
    return _save(doc, dst)


def without_kernel(src: Path, dst: Path, prefix: str) -> Path:
    """EDITED: the first kernel per step whose name starts with ``prefix`` removed (the
    change under review: one small kernel fewer per step)."""
    doc = _load(src)
    _, owner = _steps(doc)
    seen, out = set(), []
    for e in sorted(doc["traceEvents"], key=lambda e: e.get("ts", 0)):
        if e.get("ph") == "X" and e.get("cat") == "kernel" and e["name"].startswith(prefix):
            i = owner.get(e["args"]["correlation"], -1)
            if i >= 0 and i not in seen:
                seen.add(i)
                continue
        out.append(e)
    doc["traceEvents"] = out
    return _save(doc, dst)


def edited_header(src: Path, dst: Path, **keys) -> Path:
    """EDITED: trace header keys replaced (``distributedInfo``), events untouched."""
    doc = _load(src)
    doc.update(keys)
    return _save(doc, dst)


def raw_coverage(path: Path) -> float:
    """Fraction of the profiled span S (first to last GPU activity of the steps) inside the
    steps' windows (host start to the later of host end and GPU end), by a plain scan."""
    doc = _load(path)
    ranges, owner = _steps(doc)
    windows = []
    for i, (a, b) in enumerate(ranges):
        gpu = [(e["ts"], e["ts"] + e["dur"]) for e in _x(doc) if e.get("cat") in GPU and owner.get(e["args"].get("correlation")) == i]
        windows.append((a, max(b, max(end for _, end in gpu)), min(s for s, _ in gpu), max(end for _, end in gpu)))
    lo, hi = min(w[2] for w in windows), max(w[3] for w in windows)
    covered, reach = 0.0, lo
    for a, b, _, _ in sorted(windows):
        a, b = max(a, reach, lo), min(b, hi)
        if b > a:
            covered += b - a
            reach = b
    return covered / (hi - lo)


def kernels_per_step(path: Path, pattern: str) -> float:
    doc = _load(path)
    ranges, owner = _steps(doc)
    n = sum(1 for e in _x(doc) if e.get("cat") == "kernel" and re.search(pattern, e["name"]) and e["args"].get("correlation") in owner)
    return n / len(ranges)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """Before: the graph decode trace with only its first and last step kept (8 steps cut
    out of the window). After: the full trace with one 2.5 µs embedding kernel per step
    removed. On main this diff read "gpu_idle_ratio 0.889 → 0.449 better, kernel_time_ratio
    +398 % better, steps_per_s +800 % better", with no comparability warning."""
    d = tmp_path_factory.mktemp("window")
    before = keep_steps(GRAPH, d / "two-steps.kineto.json.gz", {0, 9})
    after = without_kernel(GRAPH, d / "no-embedding.kineto.json.gz", EMBEDDING)
    contiguous = keep_steps(GRAPH, d / "five-steps.kineto.json.gz", {2, 3, 4, 5, 6})
    return {"before": before, "after": after, "contiguous": contiguous, "dir": d}


# --------------------------------------------------------------------------- the window


def test_cut_out_window_is_not_comparable_and_the_kernel_change_leads(pair):
    before, after = diagnose(pair["before"], rules=None), diagnose(pair["after"], rules=None)
    d = diff_runs(before, after)
    assert d.facts_before["step_coverage"] == pytest.approx(raw_coverage(pair["before"]), abs=2e-3)
    assert d.facts_after["step_coverage"] == pytest.approx(raw_coverage(pair["after"]), abs=2e-3)
    assert raw_coverage(pair["before"]) < 0.3 and raw_coverage(pair["after"]) > 0.95
    assert d.facts_before["steps"] == 2 and d.facts_after["steps"] == 10
    # the span's ratios (and the completion rate across the hole) are not compared; the
    # per-step samples are, and the whole diff is not refused
    assert not d.blocking and [m.field for m in d.scoped] == ["step_coverage"]
    span = ["gpu_idle_ratio", "kernel_time_ratio", "memcpy_time_ratio", "memory_bubble_ratio", "steps_per_s", "tokens_per_s"]
    assert list(d.not_comparable_metrics) == span
    assert all(d.metric(k).verdict == "not comparable" for k in span)
    assert d.metric("kernels_per_step").verdict != "not comparable"
    assert d.metric("gpu_idle_ratio").before > 0.85 > 0.5 > d.metric("gpu_idle_ratio").after  # the artefact, still shown
    # what really changed leads: one embedding kernel fewer per step
    k_before = kernels_per_step(pair["before"], "indexSelectSmallIndex")
    k_after = kernels_per_step(pair["after"], "indexSelectSmallIndex")
    assert k_before - k_after == 1
    assert lead_lines(d)[0].startswith("-1 kernel `at::native::{anonymous}::indexSelectSmallIndex` per step (")
    assert len(lead_lines(d)) == 1  # nothing else changed in counts
    doc = document(d)
    assert doc["not_comparable"] is None and list(doc["not_comparable_metrics"]) == span
    assert doc["not_comparable_metrics"]["gpu_idle_ratio"].startswith("step_coverage differs: before 16.")
    assert doc["lead"] == lead_lines(d)
    assert [(m["blocking"], list(m["metrics"])) for m in doc["mismatches"]] == [(False, span)]
    md = render_markdown(d)
    assert md.index("**not comparable: gpu_idle_ratio, kernel_time_ratio") < md.index("What changed") < md.index("step latency:") < md.index("### Metrics")
    assert "improved" not in md
    for k in span:  # the rows the artefact used to call better now say why not
        assert next(line for line in md.splitlines() if line.startswith(f"| `{k}` |")).endswith("| not comparable |")


def test_a_window_of_whole_steps_is_comparable(pair):
    """Five contiguous steps against ten: a shorter window, not a different one."""
    d = diff_runs(diagnose(pair["contiguous"], rules=None), diagnose(pair["after"], rules=None))
    assert raw_coverage(pair["contiguous"]) > 0.95
    assert not d.blocking and d.not_comparable() is None
    assert not verdict(d).startswith("no verdict")
    assert lead_lines(d)[0].startswith("-1 kernel `at::native::{anonymous}::indexSelectSmallIndex` per step (")


def test_diff_command_says_not_comparable_first(pair):
    js = pair["dir"] / "diff.json"
    md = pair["dir"] / "diff.md"
    r = run_cli_inprocess("diff", pair["before"], pair["after"], "--no-rules", "--json", js, "--md", md)
    assert r.returncode == 0, r.stderr  # diff reports; gate judges
    out = r.stdout
    assert "not comparable" in out and out.index("not comparable") < out.index("what changed: -1 kernel") < out.index("step latency")
    assert "gpu_idle_ratio" in json.loads(js.read_text())["not_comparable_metrics"]
    assert "> **not comparable: gpu_idle_ratio" in md.read_text()


def test_gate_refuses_a_verdict_on_incomparable_runs(pair):
    js = pair["dir"] / "gate.json"
    r = run_cli_inprocess(
        "gate", pair["after"], "--baseline", pair["before"], "--fail-on", "gpu_idle_ratio:+0.05",
        "--fail-on", "steps_per_s:-5%", "--json", js,
    )
    # both budgets are on span metrics: neither is judged, so the gate gives no verdict
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr.startswith("error: no verdict: the baseline is not comparable: step_coverage differs") and "Traceback" not in r.stderr
    doc = json.loads(js.read_text())
    assert doc["exit_code"] == 2 and doc["refused"].startswith("not comparable") and doc["passed"] is False
    assert {c["status"] for c in doc["checks"]} == {"skip"}
    assert all(c["message"].startswith("not comparable: step_coverage differs") for c in doc["checks"])
    assert "NO VERDICT" in r.stdout
    # a per-step budget is still judged against that baseline
    mixed = evaluate_gate(diagnose(pair["after"], rules=None), diagnose(pair["before"], rules=None), [parse_budget("steps_per_s:-5%"), parse_budget("kernels_per_step:+0")])
    assert mixed.refused is None and [c.status for c in mixed.checks] == ["skip", "pass"]
    from perfdoctor.reports.gate_report import github_annotations, junit_xml, summary_markdown

    refused = evaluate_gate(diagnose(pair["after"], rules=None), diagnose(pair["before"], rules=None), [parse_budget("steps_per_s:-5%")])
    assert refused.exit_code == 2 and not refused.passed
    assert summary_markdown(refused).startswith("## ❌ perfdoctor gate: NO VERDICT (not comparable: step_coverage differs")
    assert 'skipped="1"' in junit_xml(refused) and 'failures="0"' in junit_xml(refused)
    assert github_annotations(refused)[0].startswith("::warning") and "not comparable" in github_annotations(refused)[0]
    # and a comparable baseline is judged as before
    ok = evaluate_gate(diagnose(pair["after"], rules=None), diagnose(pair["contiguous"], rules=None), [parse_budget("launches_per_step:+0")])
    assert ok.refused is None and ok.exit_code == 0


# --------------------------------------------------------------------------- other facts


def test_gate_refuses_a_baseline_of_another_world_size(tmp_path):
    src = WILD / "h200-train-ddp.kineto.json.gz"
    info = _load(src)["distributedInfo"]
    eight = edited_header(src, tmp_path / "ws8.kineto.json.gz", distributedInfo=dict(info, world_size=8))
    r = run_cli_inprocess("gate", eight, "--baseline", src, "--fail-on", "kernels_per_step:+0", "--rules", "seed", "--min-severity", "critical")
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr.startswith("error: no verdict: the baseline is not comparable: world_size: before 1, after 8")
    assert "NO VERDICT" in r.stdout


def test_world_size_mismatch_is_not_comparable(tmp_path):
    src = WILD / "h200-train-ddp.kineto.json.gz"
    info = _load(src)["distributedInfo"]
    assert info["world_size"] == 1
    eight = edited_header(src, tmp_path / "ws8.kineto.json.gz", distributedInfo=dict(info, world_size=8, rank=3))
    d = diff_runs(diagnose(src, rules=None), diagnose(eight, rules=None))
    assert [(m.field, m.before, m.after) for m in d.blocking] == [("world_size", 1, 8)]
    assert verdict(d).startswith("no verdict — not comparable: world_size: before 1, after 8")
    # a trace with no distributedInfo was not distributed: world size 1, comparable with the DDP trace's
    assert diagnose(WILD / "h200-train.kineto.json.gz", rules=None).analysis.profile.origin.distributed == {}
    same = diff_runs(diagnose(WILD / "h200-train.kineto.json.gz", rules=None), diagnose(src, rules=None))
    assert "world_size" not in {m.field for m in same.mismatches}


def test_workload_kind_mismatch_and_the_override():
    train = WILD / "h200-train.kineto.json.gz"
    d = diff_runs(diagnose(train, rules=None), diagnose(train, workload="inference", rules=None))
    assert [(m.field, m.before, m.after) for m in d.blocking] == [("workload", "training", "inference")]
    assert "--workload" in mismatch_why(d.blocking[0])
    both = diff_runs(diagnose(train, workload="inference", rules=None), diagnose(train, workload="inference", rules=None))
    assert not both.blocking and both.facts_before["workload"] == "inference"


def test_diff_and_gate_take_workload(tmp_path):
    train = WILD / "h200-train.kineto.json.gz"
    js = tmp_path / "d.json"
    r = run_cli_inprocess("diff", train, train, "--workload", "inference", "--no-rules", "--json", js)
    assert r.returncode == 0, r.stderr
    facts = json.loads(js.read_text())["facts"]
    assert facts["before"]["workload"] == facts["after"]["workload"] == "inference"
    gj = tmp_path / "g.json"
    r = run_cli_inprocess("gate", train, "--rules", "seed", "--min-severity", "critical", "--workload", "inference", "--json", gj)
    assert r.returncode in (0, 1), r.stderr
    checks = {c["name"]: c for c in json.loads(gj.read_text())["checks"]}
    # inference-only rules are evaluated now, training-only ones are not applicable
    assert checks["rule gradient-bucketing"]["message"].startswith("not evaluated: not applicable: training-only rule")
    assert not checks["rule p99-latency"]["message"].startswith("not evaluated: not applicable")
    bad = run_cli_inprocess("gate", train, "--rules", "seed", "--workload", "serving")
    assert bad.returncode == 2 and bad.stderr.startswith("error: ") and "serving" in bad.stderr


def test_whole_trace_window_against_steps_is_not_comparable():
    """A trace in which no step was found (every ratio over the whole file) against one with
    steps: the step kind differs, and the diff says to pass --step."""
    from test_diff import _no_steps_run

    no_steps = _no_steps_run()
    with_steps = diagnose(FIXTURES / "h200-matmul-20steps.nsys.sqlite.gz", rules=None)
    d = diff_runs(no_steps, with_steps)
    assert ("step_kind", "whole trace", "automatic") in [(m.field, m.before, m.after) for m in d.blocking]
    assert "--step" in next(mismatch_why(m) for m in d.blocking if m.field == "step_kind")


def test_copies_lead_when_they_changed():
    """Real pair: the serving loop eager vs CUDA-graph replayed; the graph variant copies each
    step's input into the graph's static buffer (a device-to-device copy per decode step)."""
    eager, graph = WILD / "h200-serve-eager.kineto.json.gz", WILD / "h200-serve-graph.kineto.json.gz"
    d = diff_runs(diagnose(eager, rules=None), diagnose(graph, rules=None))
    assert not d.blocking

    def dtod_per_step(path: Path) -> float:
        doc = _load(path)
        n = sum(1 for e in _x(doc) if e.get("cat") == "gpu_memcpy" and e["name"].startswith("Memcpy DtoD"))
        return n / d.facts_before["steps"]

    change = dtod_per_step(graph) - dtod_per_step(eager)
    assert change > 0.5
    line = next(line for line in lead_lines(d) if "device-to-device" in line)
    assert line.startswith(f"{count(change, signed=True)} device-to-device copy per step (+")  # +0.833
    row = next(c for c in d.copies if c.label == "device-to-device copies")
    assert row.count_change == pytest.approx(change)


def test_real_pairs_stay_comparable():
    """Eager vs graph, two runs of one program, and nsys vs Kineto of one run: same window kind."""
    pairs = [
        (FIXTURES / "h200-decode-eager-5steps.kineto.json.gz", GRAPH),
        (GRAPH, FIXTURES / "h200-decode-graph-10steps-rerun.kineto.json.gz"),
        (FIXTURES / "h200-decode-eager-5steps.nsys.sqlite.gz", FIXTURES / "h200-decode-eager-5steps.kineto.json.gz"),
        (WILD / "h200-train.kineto.json.gz", WILD / "h200-train-ddp.kineto.json.gz"),
    ]
    for b, a in pairs:
        d = diff_runs(diagnose(b, rules=None), diagnose(a, rules=None))
        assert not d.blocking, (b.name, a.name, d.blocking)
    # nsys and Kineto of the same eager run: every kernel matches by name (both spellings of
    # the anonymous namespace), so nothing leads
    same = diff_runs(diagnose(pairs[2][0], rules=None), diagnose(pairs[2][1], rules=None))
    assert not same.kernels.appeared and not same.kernels.vanished and lead_lines(same) == []
