"""Issue 20, phase 2: the wild-trace modules wired into steps, metrics, rules and reports,
checked on the real H200 fixtures in tests/fixtures/wild/ (facts in ``*.facts.json``).

Truths come from the facts files or from a plain scan of the raw trace JSON in this file,
never from the module under test.
"""

from __future__ import annotations

import gzip
import json
import re
import tomllib
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

from perfdoctor.pipeline import load_trace
from perfdoctor.reports.common import estimate_reason, finding_reason
from perfdoctor.reports.estimates import NO_FORMULA, formula
from perfdoctor.reports.json import finding_json
from perfdoctor.analysis.metrics import analyze
from perfdoctor.rules.engine import evaluate, load_rules
from perfdoctor.text import count
from tests.rules.test_rules import GRAPH_ADVICE  # what "use CUDA graphs" looks like in a remediation

WILD = Path(__file__).parents[1] / "fixtures" / "wild"
SEED_PACK = Path(__file__).parents[2] / "perfdoctor" / "rules" / "packs" / "seed.toml"
FIX = Path(__file__).parents[1] / "fixtures"
LAUNCH = re.compile(r"^(cudaLaunchKernel|cudaLaunchKernelExC|cuLaunchKernel|cuLaunchKernelEx|cudaGraphLaunch)(_v\d+)?$")
DECODE_ADVICE = re.compile(r"decode|KV cache|KV-cache|kv_cache|continuous batching|dynamic batching|batch 1\b|megakernel", re.I)
BUCKET_ADVICE = re.compile(r"bucket_cap_mb|gradient bucket|no_sync", re.I)
WILD_TRACES = sorted(p.name for p in WILD.glob("*.kineto.json.gz"))
ALL_TRACES = [WILD / n for n in WILD_TRACES] + sorted(FIX.glob("*.kineto.json.gz"))


@lru_cache(maxsize=None)
def _analysis(path: str, workload: str | None = None):
    a = analyze(load_trace(path), workload=workload)
    return a, evaluate(load_rules(), a)


def _raw(path: Path) -> list[dict]:
    return [e for e in json.loads(gzip.decompress(path.read_bytes()))["traceEvents"] if e.get("ph") == "X"]


def _launches_in_steps(path: Path, step_re: str) -> list[int]:
    """Launch calls (any thread) whose start lies in each step range, by a plain scan."""
    x = _raw(path)
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in x if e.get("cat") == "user_annotation" and re.fullmatch(step_re, e["name"]))
    calls = [e["ts"] for e in x if e.get("cat") in ("cuda_runtime", "cuda_driver") and LAUNCH.match(e["name"])]
    return [sum(1 for t in calls if s <= t <= end) for s, end in steps]


def _advice(findings) -> str:
    """The advice text of the failing and advisory findings, without the names of the sources
    their steps cite ("low-latency MegaKernel tutorial, §4.2.2" is a citation, not advice)."""
    out = []
    for f in findings:
        if f.status in ("fail", "advisory") and f.remediation is not None:
            out.append(f.title + "\n" + "\n".join(f.remediation.steps) + "\n" + f.remediation.snippet)
    text = "\n".join(out)
    for source in tomllib.loads(SEED_PACK.read_text())["source"]:
        text = text.replace(source.get("short", source["title"]), "")
    return text


# --- steps and ownership ---------------------------------------------------------------------

def test_threads_eleven_kernels_per_step():
    facts = json.loads((WILD / "threads.facts.json").read_text())
    per_step = facts["kernels_per_step_main_thread"] + facts["kernels_per_step_worker_thread"]
    a, _ = _analysis(str(WILD / "h200-threads.kineto.json.gz"))
    assert a.steps.name == facts["step"] and a.steps.count == facts["steps"]
    assert a.steps.table["kernels"].tolist() == [per_step] * facts["steps"]
    assert a.value("kernels_per_step") == per_step
    assert a.value("launches_per_step") == per_step
    # the timeline's step table reads the same ownership
    assert a.timeline.steps["kernels"].tolist() == [per_step] * facts["steps"]


@pytest.mark.parametrize("name", ["h200-train", "h200-train-ddp"])
def test_training_launches_from_the_autograd_thread_count(name):
    path = WILD / f"{name}.kineto.json.gz"
    truth = _launches_in_steps(path, r"ProfilerStep#\d+")
    a, _ = _analysis(str(path))
    assert a.steps.table["launches"].tolist() == truth
    assert (a.steps.table["launches_other_threads"] > 0).all()  # backward runs on pt_autograd
    assert a.value("launches_per_step") == pytest.approx(sum(truth) / len(truth))


# --- workload and rule applicability --------------------------------------------------------------

@pytest.mark.parametrize("name", ["h200-train", "h200-train-ddp"])
def test_training_gets_no_inference_advice(name):
    a, findings = _analysis(str(WILD / f"{name}.kineto.json.gz"))
    assert a.workload.kind == "training"
    by_id = {f.rule_id: f for f in findings}
    for rid in ("p99-latency", "batching", "launches-per-step", "launch-rate", "queue-delay", "small-collectives"):
        assert by_id[rid].status == "not_evaluated", rid
        assert finding_reason(by_id[rid]).startswith("not applicable: inference-only rule; this trace is training"), finding_reason(by_id[rid])
    assert not DECODE_ADVICE.search(_advice(findings)), DECODE_ADVICE.search(_advice(findings))
    assert any("training" in f.context for f in findings if f.status == "fail")


@pytest.mark.parametrize("name", ["h200-serve-eager", "h200-serve-graph", "h200-compiled", "h200-threads", "h200-hf-unannotated"])
def test_inference_gets_no_gradient_bucketing_advice(name):
    a, findings = _analysis(str(WILD / f"{name}.kineto.json.gz"))
    assert a.workload.kind == "inference"
    f = next(f for f in findings if f.rule_id == "gradient-bucketing")
    assert f.status == "not_evaluated" and finding_reason(f).startswith("not applicable: training-only rule; this trace is inference")
    assert not BUCKET_ADVICE.search(_advice(findings))


def test_workload_override():
    a, findings = _analysis(str(WILD / "h200-threads.kineto.json.gz"), "training")
    assert a.workload.kind == "training" and "--workload" in a.workload.text
    assert finding_reason(next(f for f in findings if f.rule_id == "p99-latency")).startswith("not applicable")
    with pytest.raises(Exception):
        analyze(load_trace(WILD / "h200-threads.kineto.json.gz"), workload="serving")


# --- serving ---------------------------------------------------------------------------------------

def _tokens(name: str) -> int:
    """Tokens a step's name states, parsed here independently of perfdoctor.analysis.serving."""
    m = re.fullmatch(r"step\[(\w+) bs=(\d+)(?: tokens=(\d+))?\]", name)
    if m:
        return int(m.group(3)) if m.group(3) else int(m.group(2))
    m = re.fullmatch(r"execute_context_(\d+)\((\d+)\)_generation_(\d+)\((\d+)\)", name)
    return int(m.group(2)) + int(m.group(4))


@pytest.mark.parametrize("name,facts", [("h200-serve-eager", "serve-eager.facts.json"), ("h200-serve-graph", "serve-graph.facts.json")])
def test_serving_steps_tokens_and_queue_delay(name, facts):
    facts = json.loads((WILD / facts).read_text())
    a, findings = _analysis(str(WILD / f"{name}.kineto.json.gz"))
    assert a.steps.table["name"].tolist() == facts["steps"]
    assert "serving" in a.steps.how
    tokens = sum(_tokens(n) for n in facts["steps"])
    cp_s = a.timeline.steps["critical_path_ns"].astype("float64").sum() / 1e9
    assert a.value("tokens_per_s") == pytest.approx(tokens / cp_s, rel=1e-9)
    q = a.metrics["queue_delay_ms_p50"]
    assert q.value is not None and np.isfinite(q.value) and q.value >= 0
    assert next(f for f in findings if f.rule_id == "queue-delay").status in ("pass", "fail")
    assert a.value("steps_graphed") == (1.0 if facts["graph"] else 0.0)


# --- capture and compiled ----------------------------------------------------------------------------

def test_capture_trace_is_recognised_and_timing_rules_not_evaluated():
    facts = json.loads((WILD / "capture.facts.json").read_text())
    assert facts["capture"]
    a, findings = _analysis(str(WILD / "h200-capture.kineto.json.gz"))
    assert a.value("capture_trace") == 1.0 and a.graph_state.kind == "capture"
    assert "timing rules do not apply" in a.graph_state.message
    by_id = {f.rule_id: f for f in findings}
    assert by_id["capture-trace"].status == "fail"
    for rid in ("memory-bubbles", "launch-rate", "launches-per-step", "p99-latency", "short-kernels"):
        assert by_id[rid].status == "not_evaluated" and finding_reason(by_id[rid]).startswith("not applicable: capture-trace"), rid
    from perfdoctor.reports.summary import header_lines

    assert any("timing rules do not apply" in line for line in header_lines(a))


def test_compiled_loads_and_analyzes():
    facts = json.loads((WILD / "compiled.facts.json").read_text())
    a, findings = _analysis(str(WILD / "h200-compiled.kineto.json.gz"))
    assert a.steps.name == facts["step"] and a.steps.count == facts["steps"]
    assert a.workload.kind == facts["workload"]
    assert findings


def test_no_communication_is_absent_never_perfectly_overlapped():
    a, findings = _analysis(str(WILD / "h200-allreduce.kineto.json.gz"))
    m = a.metrics["comm_overlap_ratio"]
    assert m.value is None and "no communication kernels" in m.reason
    assert next(f for f in findings if f.rule_id == "comm-overlap").status == "not_evaluated"


def test_zero_recognised_launches_is_never_graphed():
    """A trace whose runtime API calls are gone: kernels, no launches → no 'graphed' variant."""
    import dataclasses

    p = load_trace(FIX / "h200-decode-graph-10steps.kineto.json.gz")
    stripped = dataclasses.replace(p, calls=p.calls.iloc[0:0])
    a = analyze(stripped, step="decode_step") if (p.ranges["name"] == "decode_step").any() else analyze(stripped)
    assert a.value("steps_graphed") is None
    findings = evaluate(load_rules(), a)
    assert all("graphed" not in f.context for f in findings)


# --- every fixture -------------------------------------------------------------------------------------

NSYS_TRACES = sorted(FIX.glob("*.nsys.sqlite.gz"))
EVERY_TRACE = ALL_TRACES + NSYS_TRACES


def _raw_calls_and_kernels(path: Path) -> tuple[list[tuple[float, int]], dict[int, int]]:
    """(launch call start in ns, correlation id) on every thread, and kernels per
    correlation id, read straight from the file: Kineto JSON or the nsys SQLite export."""
    if path.name.endswith(".nsys.sqlite.gz"):
        import sqlite3
        import tempfile

        with tempfile.NamedTemporaryFile(suffix=".sqlite") as f:
            f.write(gzip.decompress(path.read_bytes()))
            f.flush()
            db = sqlite3.connect(f"file:{f.name}?mode=ro", uri=True)
            names = dict(db.execute("SELECT id, value FROM StringIds"))
            calls = [(float(s), c) for s, c, n in db.execute("SELECT start, correlationId, nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME")
                     if LAUNCH.match(re.sub(r"_ptsz$", "", names.get(n, "")))]
            kernels: dict[int, int] = {}
            for (c,) in db.execute("SELECT correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL"):
                kernels[c] = kernels.get(c, 0) + 1
            db.close()
        return calls, kernels
    x = _raw(path)
    calls = [(e["ts"] * 1e3, e["args"].get("correlation")) for e in x if e.get("cat") in ("cuda_runtime", "cuda_driver") and LAUNCH.match(e["name"])]
    kernels = {}
    for e in x:
        if e.get("cat") == "kernel" and not e["name"].startswith("memcpy32_post"):  # the loader reads graph memcpy nodes as copies
            c = e["args"].get("correlation")
            kernels[c] = kernels.get(c, 0) + 1
    return calls, kernels


@pytest.mark.parametrize("path", EVERY_TRACE, ids=lambda p: p.name)
def test_steps_own_launches_and_gpu_work_of_every_thread(path):
    """Acceptance: a step's launches are every launch call (any thread) that starts inside
    its host range, and its kernels are the GPU work those calls launched — by a plain scan
    of the file, against the step table."""
    a, _ = _analysis(str(path))
    if a.steps.count == 0:
        pytest.skip("no steps in this trace")
    calls, kernels = _raw_calls_and_kernels(path)
    t = a.steps.table
    launches, owned = [], []
    for lo, hi in zip(t["host_start_ns"].astype("int64"), t["host_end_ns"].astype("int64")):
        inside = [c for ts, c in calls if lo - 1 <= ts <= hi + 1]  # Kineto µs → ns rounding
        launches.append(len(inside))
        owned.append(sum(kernels.get(c, 0) for c in inside))
    assert t["launches"].tolist() == launches
    assert t["kernels"].tolist() == owned


@pytest.mark.parametrize("path", EVERY_TRACE, ids=lambda p: p.name)
def test_advice_fits_the_workload_kind(path):
    """Acceptance: training traces get no decode / KV-cache / batching advice, inference
    traces no gradient-bucketing advice — on every fixture."""
    a, findings = _analysis(str(path))
    advice = _advice(findings)
    if a.workload.kind == "training":
        assert not DECODE_ADVICE.search(advice), DECODE_ADVICE.search(advice)
    else:
        assert not BUCKET_ADVICE.search(advice), BUCKET_ADVICE.search(advice)
    # item 10: graph-replayed steps and capture traces are never told to capture a CUDA graph
    # (capture-trace's own fix shows how to profile the replays, graph code included)
    if a.value("steps_graphed") == 1.0 or a.value("capture_trace") == 1.0:
        others = _advice([f for f in findings if f.rule_id != "capture-trace"])
        assert not GRAPH_ADVICE.search(others), GRAPH_ADVICE.search(others)

@pytest.mark.parametrize("path", EVERY_TRACE, ids=lambda p: p.name)
def test_estimates_never_exceed_step_idle_and_gaps_agree(path):
    a, findings = _analysis(str(path))
    if a.steps.count == 0:
        return
    idle_ms = a.timeline.steps["idle_ns"].astype("float64").fillna(0).clip(lower=0).to_numpy() / 1e6
    for f in findings:
        if f.estimate is not None and f.estimate_kind in ("idle_between_kernels", "sync_wait_time") and f.estimate.ms_per_step is not None:
            assert f.estimate.ms_per_step <= float(np.median(idle_ms)) + 1e-9, (f.rule_id, formula(f.estimate))
        if f.estimate is not None and f.estimate_kind == "host_busy_gaps" and f.estimate.ms_per_step is not None:
            # host work can also sit before a step's first GPU work: capped by the critical path less GPU busy
            t = a.timeline.steps
            not_working = (t["critical_path_ns"].astype("float64") - t["busy_ns"].astype("float64")).fillna(0).clip(lower=0) / 1e6
            assert f.estimate.ms_per_step <= float(np.median(not_working)) + 1e-9, formula(f.estimate)
    # the gap evidence (what analyze and the reports print) is the timeline's gap table
    from perfdoctor.rules.evidence import largest_gaps

    ev = largest_gaps(a)
    gaps = a.timeline.gaps
    if gaps.empty:
        assert not ev.rows
        return
    # the report's evidence (the findings' largest_gaps tables) is the same table
    for f in findings:
        for e in f.evidence:
            if e.kind == "largest_gaps":
                assert e.rows == ev.rows, f.rule_id
    # one row per (before, after) pair: its longest gap (ties: the first in the table), the
    # longest first, and the steps with a gap between the same two at least half as long
    top = (gaps.assign(row=np.arange(len(gaps))).sort_values(["length_ns", "row"], ascending=[False, True])
           .drop_duplicates(["before", "after"]).head(len(ev.rows)))
    assert [r[0] for r in ev.rows] == top["step"].astype(int).tolist()
    assert [r[2] for r in ev.rows] == pytest.approx((top["length_ns"] / 1e3).tolist(), rel=5e-3, abs=1e-3)  # rows show 3 significant digits
    same = [(gaps["before"] == b) & (gaps["after"] == f) & (gaps["length_ns"] >= n / 2) for b, f, n in zip(top["before"], top["after"], top["length_ns"])]
    assert [r[5] for r in ev.rows] == [gaps.loc[m, "step"].nunique() for m in same]
    assert len(ev.rows) == min(8, len(gaps.drop_duplicates(["before", "after"])))
    for key, m in a.metrics.items():
        assert m.value is None or np.isfinite(m.value), key


def test_training_estimates_clipped_to_idle():
    """h200-train: the idle-based estimate is at most the step's idle GPU time."""
    a, findings = _analysis(str(WILD / "h200-train.kineto.json.gz"))
    idle = a.timeline.steps["idle_ns"].astype("float64").to_numpy() / 1e6
    f = next(f for f in findings if f.rule_id == "memory-bubbles")
    assert f.status == "fail" and f.estimate is not None
    assert 0 < f.estimate.ms_per_step <= float(np.median(idle)) + 1e-9


def test_report_headers_name_the_workload():
    from perfdoctor.reports import html, markdown
    from perfdoctor.reports.summary import header_lines

    a, findings = _analysis(str(WILD / "h200-train.kineto.json.gz"))
    line = next(l for l in header_lines(a) if l.startswith("workload: "))
    assert line.startswith("workload: training (152 backward ops, Optimizer.step#AdamW.step")
    assert "workload: training (152 backward ops" in markdown.render(findings, a)
    assert "workload: training (152 backward ops" in html.render(findings, a)
    assert a.to_json()["workload"]["kind"] == "training"


def test_communication_metrics_rules_and_evidence(tmp_path):
    """h200-threads with the worker's side-stream kernels renamed to NCCL all-reduces (as
    tests/analysis/test_comms.py crafts it): the metrics are the per-step medians of comms.step_metrics,
    the communication rules evaluate, and their evidence tables fill."""
    from perfdoctor.analysis import comms

    nccl = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
    doc = json.loads(gzip.decompress((WILD / "h200-threads.kineto.json.gz").read_bytes()))
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") == "kernel" and e["args"].get("stream") == 13:
            e["name"] = nccl
    path = tmp_path / "threads-nccl.json"
    path.write_text(json.dumps(doc))
    a = analyze(load_trace(path))
    per = comms.step_metrics(a.profile, a.steps.table, a.steps.activity_step)
    assert a.value("collectives_per_step") == 3
    assert a.value("comm_time_ratio") == pytest.approx(float(per["comm_share"].median()))
    assert a.value("comm_overlap_ratio") == pytest.approx(float(per["overlap"].median()))
    assert a.value("exposed_comm_ms_per_step") == pytest.approx(float(per["exposed_ns"].median()) / 1e6)
    findings = {f.rule_id: f for f in evaluate(load_rules(), a)}
    assert findings["comm-overlap"].status in ("pass", "fail")
    assert findings["exposed-comm"].status in ("pass", "fail")
    assert findings["gradient-bucketing"].status == "not_evaluated"  # inference trace
    from perfdoctor.rules.evidence import comm_timeline, top_collectives

    assert comm_timeline(a).rows and top_collectives(a).rows
    if findings["exposed-comm"].status == "fail":
        assert findings["exposed-comm"].estimate.ms_per_step == pytest.approx(a.value("exposed_comm_ms_per_step"))


def test_serving_header_line_per_kind():
    from perfdoctor.reports.summary import header_lines

    facts = json.loads((WILD / "serve-eager.facts.json").read_text())
    a, _ = _analysis(str(WILD / "h200-serve-eager.kineto.json.gz"))
    line = next(l for l in header_lines(a) if l.startswith("serving (traced): "))
    decode = sum(_tokens(n) for n in facts["steps"] if "DECODE" in n or "generation" in n)
    prefill = sum(_tokens(n) for n in facts["steps"] if "PREFILL" in n)
    assert f"decode 10 steps, {count(decode)} tokens" in line and f"prefill 2 steps, {count(prefill)} tokens" in line


# --- item 11: every failing rule estimates its time or says why ---------------------------------------

@pytest.mark.parametrize("path", EVERY_TRACE, ids=lambda p: p.name)
def test_every_failure_estimates_its_time_or_says_why(path):
    a, findings = _analysis(str(path))
    fails = [f for f in findings if f.status == "fail"]
    for f in fails:
        assert f.recovered_ms is not None or estimate_reason(f), f.rule_id
        assert finding_json(f)["estimate_reason"] == estimate_reason(f)
    # like with like: estimated failures by ms per step, then the ones that say why they have none
    with_ms = [f.recovered_ms for f in fails if f.recovered_ms is not None]
    assert with_ms == sorted(with_ms, reverse=True)
    first_without = next((i for i, f in enumerate(fails) if f.recovered_ms is None), len(fails))
    assert all(f.recovered_ms is None for f in fails[first_without:])


def test_unfused_attention_is_estimated_by_its_softmax_time():
    """The eager decode: 16 softmax kernels per step and no fused attention. The estimate is
    the median per-step softmax time, here summed from the raw trace by correlation id."""
    path = FIX / "h200-decode-eager-5steps.kineto.json.gz"
    a, findings = _analysis(str(path))
    f = next(f for f in findings if f.rule_id == "attention")
    assert f.status == "fail" and f.estimate_kind == "softmax_time"
    x = _raw(path)
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in x if e.get("cat") == "user_annotation" and e["name"] == "decode_step")
    owner = {e["args"]["correlation"]: i for e in x if e.get("cat") in ("cuda_runtime", "cuda_driver")
             for i, (s, end) in enumerate(steps) if s <= e["ts"] <= end}
    per_step = [0.0] * len(steps)
    for e in x:
        if e.get("cat") == "kernel" and "softmax" in e["name"] and e["args"]["correlation"] in owner:
            per_step[owner[e["args"]["correlation"]]] += e["dur"]
    assert f.recovered_ms == pytest.approx(float(np.median(per_step)) / 1e3, rel=1e-6)
    # it ranks by that time now, above every failure without an estimate
    fails = [g for g in findings if g.status == "fail"]
    assert fails.index(f) < min(i for i, g in enumerate(fails) if g.recovered_ms is None)


def test_a_failure_without_an_estimate_says_why_in_every_report():
    from perfdoctor.reports import html, markdown

    a, findings = _analysis(str(FIX / "h200-decode-eager-5steps.kineto.json.gz"))
    f = next(f for f in findings if f.rule_id == "p99-latency")
    assert f.status == "fail" and f.recovered_ms is None
    assert estimate_reason(f).startswith("the p99 is the step time of the slowest 1 % of steps")
    assert f"**Estimate:** none. {estimate_reason(f)}" in markdown.render(findings, a)
    assert "No estimate: the p99 is the step time" in html.render(findings, a)


def test_pack_rule_states_its_no_estimate_or_gets_the_default(tmp_path):
    from perfdoctor.rules.engine import evaluate, load_rules

    pack = tmp_path / "team.toml"
    common = 'metric = "kernels_per_step"\ncomparator = "<"\nthreshold = 1\nseverity = "error"\ncitation = "team"\n'
    pack.write_text(
        f'[[rule]]\nid = "few-kernels"\ntitle = "Few kernels"\n{common}no_estimate = "kernel counts cost no fixed time"\n'
        '[rule.remediation]\nsteps = ["Fuse."]\n\n'
        f'[[rule]]\nid = "few-kernels-2"\ntitle = "Few kernels, no reason"\n{common}[rule.remediation]\nsteps = ["Fuse."]\n'
    )
    a, _ = _analysis(str(WILD / "h200-threads.kineto.json.gz"))
    found = {f.rule_id: f for f in evaluate(load_rules([pack]), a)}
    assert found["few-kernels"].status == "fail" and estimate_reason(found["few-kernels"]) == "kernel counts cost no fixed time"
    assert estimate_reason(found["few-kernels-2"]) == NO_FORMULA
    bad = tmp_path / "bad.toml"
    bad.write_text(f'[[rule]]\nid = "x"\ntitle = "X"\n{common}no_estimate = 3\n[rule.remediation]\nsteps = ["Fuse."]\n')
    with pytest.raises(Exception, match="no_estimate"):
        load_rules([bad])


@pytest.mark.parametrize("name", ["h200-train", "h200-train-ddp"])
def test_a_loss_softmax_is_not_unfused_attention(name):
    """Issue 20, item 6: the MLP's cross-entropy runs a log-softmax (ATen's warp softmax with
    is_log_softmax = true); that is a loss, not attention."""
    path = WILD / f"{name}.kineto.json.gz"
    softmaxes = {e["name"] for e in _raw(path) if e.get("cat") == "kernel" and "softmax" in e["name"]}
    assert softmaxes and all(re.search(r"softmax_warp_\w+<float, float, float, \d+, true,", n) for n in softmaxes)
    a, findings = _analysis(str(path))
    f = next(f for f in findings if f.rule_id == "attention")
    assert f.status == "not_evaluated" and "no attention pattern" in finding_reason(f)
    # the eager decode's plain softmaxes between GEMMs still are
    a, findings = _analysis(str(FIX / "h200-decode-eager-5steps.kineto.json.gz"))
    assert next(f for f in findings if f.rule_id == "attention").status == "fail"


# --- item 4: older category spellings, device work perfdoctor cannot read ----------------------------

def _recategorised(src: Path, dst: Path, mapping: dict[str, str]) -> Path:
    """RENAMED: every event of a category in ``mapping`` given the new category name."""
    doc = json.loads(gzip.decompress(src.read_bytes()))
    for e in doc["traceEvents"]:
        if e.get("cat") in mapping:
            e["cat"] = mapping[e["cat"]]
    dst.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return dst


def test_older_kineto_category_spellings_read_the_same(tmp_path):
    """PyTorch 1.8-1.10 wrote "Kernel", "Memcpy", "Memset", "Runtime", "Operator": the same
    trace spelled so gives the same metrics."""
    src = FIX / "h200-pageable-sync-10steps.kineto.json.gz"
    old = _recategorised(src, tmp_path / "old.json.gz", {"kernel": "Kernel", "gpu_memcpy": "Memcpy", "gpu_memset": "Memset",
                                                           "cuda_runtime": "Runtime", "cuda_driver": "Runtime", "cpu_op": "Operator"})
    a, b = analyze(load_trace(src)), analyze(load_trace(old))
    for key in ("kernels_per_step", "launches_per_step", "sync_calls_per_step", "gpu_idle_ratio", "pageable_memcpy_bytes", "step_latency_ms_p50"):
        assert b.value(key) == a.value(key) and a.value(key) is not None, key
    assert b.profile.origin.unread_categories == {}


def test_device_work_perfdoctor_cannot_read_is_said_never_cpu_only(tmp_path):
    """GPU activities under categories perfdoctor does not read (another accelerator's, a
    tracer's own; crafted here by renaming the H200 trace's): the reason names them."""
    src = FIX / "h200-pageable-sync-10steps.kineto.json.gz"
    raw = json.loads(gzip.decompress(src.read_bytes()))["traceEvents"]
    n_kernels = sum(1 for e in raw if e.get("cat") == "kernel")
    other = _recategorised(src, tmp_path / "other.json.gz", {"kernel": "mtia_kernel", "gpu_memcpy": "mtia_memcpy", "gpu_memset": "mtia_memcpy"})
    a = analyze(load_trace(other))
    m = a.metrics["gpu_idle_ratio"]
    assert m.value is None and "CPU-only" not in m.reason
    assert f"'mtia_kernel' ×{n_kernels}" in m.reason and "does not read" in m.reason
    from perfdoctor.reports.summary import header_lines

    assert not any("CPU-only" in line for line in header_lines(a))
