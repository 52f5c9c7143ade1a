"""The rule engine and the seed pack, on real H200 traces.

Acceptance (issue 4): an eager decode ranks launch overhead / bubbles first with CUDA
graphs and fusion as the fix; a pageable-copy + .item() loop ranks the copy and sync
findings first with pinned memory and removing syncs as the fix; a CUDA-graph decode is
never told to use CUDA graphs; a missing metric is "not evaluated", never a pass; a bad
pack is one line naming file, line and field.
"""

from __future__ import annotations

import re
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import FIXTURES, run_cli
from perfdoctor.pipeline import load_trace
from perfdoctor.reports.common import finding_reason, rule_condition
from perfdoctor.reports.estimates import formula
from perfdoctor.errors import UsageError
from perfdoctor.analysis.metrics import Analysis, analyze
from perfdoctor.profile import ACTIVITY_COLUMNS, CALL_COLUMNS, RANGE_COLUMNS, Origin, Profile, frame
from perfdoctor.cli.rules import rules_app
from perfdoctor.rules.engine import NO_TOP_FINDING, _fill_top_finding, evaluate, load_rules
from perfdoctor.rules.estimates import idle_between_kernels, sync_wait_time
from perfdoctor.rules.evidence import sync_calls
from perfdoctor.names.kernels import family, gemm_precision, label as short_name

EAGER = "h200-llama1b-eager-5steps.kineto.json.gz"
# Every row of shared/design/rules-seed.md.
SEED_IDS = {
    "dram-bandwidth", "memory-bubbles", "launch-rate", "launches-per-step", "p99-latency", "sm-occupancy",
    "cache-hit", "warp-efficiency", "short-kernels", "kernel-share", "memcpy-share", "pageable-copies",
    "host-syncs", "throttling", "pcie", "mixed-precision", "attention", "model-fits-bandwidth", "batching",
    # issue 20 (docs/rules-wild.md): capture traces, communication, queue delay, gradient buckets
    "capture-trace", "comm-overlap", "comm-share", "exposed-comm", "small-collectives", "queue-delay", "gradient-bucketing",
    "host-busy-in-gaps",  # issue 20 item 12: what the host ran while the GPU idled
    # issue 17: several ranks
    "straggler",
    # issue 28: remedies the field uses, cited from the PyTorch docs by title and section
    "layout-transforms", "norm-elementwise", "data-loading", "host-late-launches",
    # issue 29: uneven steps (a DataLoader behind every few iterations), from the light pass;
    # the host's work before each step's first launch that no DataLoader names (item 3)
    "uneven-steps", "host-before-launch",
    # issue 29: the loop's time between its steps (an OpenMMLab runner's sleep at each epoch change)
    "time-between-steps",
    # issue 29: the steps' waits for a CPU where every step waits alike (nanoGPT beside a neighbour)
    "cpu-contention",
}
LAUNCH_RULES = {"memory-bubbles", "launch-rate", "launches-per-step", "short-kernels", "kernel-share"}
# What telling someone "use CUDA graphs" looks like in a remediation.
GRAPH_ADVICE = re.compile(r"torch\.cuda\.graph\(|CUDAGraph\(\)|reduce-overhead|Capture (the|the whole) (decode )?step", re.I)


@lru_cache(maxsize=None)
def fixture_analysis(name: str, step: str | None) -> Analysis:
    return analyze(load_trace(FIXTURES / name), step=step)


def fixtures_matching(pattern: str) -> list[str]:
    return sorted(p.name for p in FIXTURES.glob(pattern))


def remediation_text(f) -> str:
    return "\n".join(f.remediation.steps) + "\n" + f.remediation.snippet


# --- the seed pack --------------------------------------------------------------------------

def test_seed_pack_has_every_documented_rule_with_a_citation() -> None:
    rules = load_rules()
    assert set(rules.rules) == SEED_IDS
    for r in rules:
        assert r.cites, r.id  # structured: every rule names its sources
        assert r.citation.startswith(r.cites[0].source.title), r.id
        assert r.remediation.steps, r.id
        assert r.threshold_origin.startswith("seed default") or r.advisory, r.id
    assert rule_condition(load_rules().get("dram-bandwidth")) == "memory_bound_bw_util >= 0.85"
    assert rule_condition(load_rules().get("memory-bubbles")) == "memory_bubble_ratio < 0.15"
    assert rule_condition(load_rules().get("p99-latency")) == "step_latency_ms_p99 < 10"
    assert {r.id for r in rules if r.advisory} == {"model-fits-bandwidth", "batching"}


CJK = re.compile("[\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uff00-\uffef]")


def shown_text(r) -> list[str]:
    """Every string of a rule that a report, ``rules list`` or ``rules explain`` prints."""
    out = [r.title, r.description, r.citation, r.collect, r.no_estimate, *r.remediation.steps, r.remediation.snippet]
    for v in r.variants:
        out += [v.title or ""] + ([*v.remediation.steps, v.remediation.snippet] if v.remediation else [])
    return out


def test_seed_citations_are_english_with_titles_and_sections_and_keep_the_original_words() -> None:
    # Issue 32: readers saw Chinese quotations from documents called "000" and "003".
    rules = load_rules()
    for r in rules:
        for text in shown_text(r):
            assert not CJK.search(text), (r.id, text)  # readable without CJK fonts
            assert not re.search(r"\b00[03]\b|\{\w[\w-]* §", text), (r.id, text)  # no file numbers, every reference written out
        for c in r.cites:
            assert c.source.title and not CJK.search(c.source.title + c.says), r.id
            if c.source.sections and c.section:  # a numbered document: the section's English title is printed
                assert c.source.where(c.section).startswith(f"§{c.section} ") and c.source.where(c.section) in r.citation
    seeds = {c.source.id: c.source for r in rules for c in r.cites if c.source.id in ("megakernel", "toolbox")}
    assert set(seeds) == {"megakernel", "toolbox"}
    documents = Path("/work/shared/seeds")  # the seed documents, where this machine has them
    texts = {"megakernel": "000_eab63515e496ace8.txt", "toolbox": "003_a88b920a39a2aa5a.txt"}
    for r in rules:
        assert any(c.original for c in r.cites if c.source.id in texts) or not any(c.source.id in texts for c in r.cites), r.id
        for c in r.cites:
            if c.source.id in texts and c.original:  # the quotation kept for reference
                path = documents / texts[c.source.id]
                if path.exists():  # a quotation is the document's own words, in the section cited
                    doc = path.read_text(encoding="utf-8")
                    assert c.original in doc, (r.id, c.original)
                    start = doc.index(c.source.section(c.section)[1])
                    pos = doc.find(c.original, start)
                    assert pos >= 0, (r.id, c.section, c.original)
                    # ... before the next section listed (a subsection of the one cited is inside it)
                    others = [doc.find(o, start + 1) for n, _, o in c.source.sections if not n.startswith(c.section)]
                    assert all(not start < i < pos for i in others), (r.id, c.section, c.original)
    for src in seeds.values():
        assert CJK.search(src.original_title) and all(CJK.search(o) for _, _, o in src.sections)
    bubbles = rules.get("memory-bubbles")
    assert bubbles.citation.startswith("Low-latency inference optimisation for large models: ")
    assert '§5.2 Key metrics to monitor ("the memory-bubble share should be kept below 15 %")' in bubbles.citation
    assert bubbles.cites[0].to_json()["original"] == "内存气泡占比：应控制在15%以下"
    # the CUDA graph step (after the loop-that-waits step, each given where its condition holds)
    assert "(inference acceleration overview, §5.1 GPU kernel tuning parameters)" in bubbles.remediation.steps[1]


def test_a_pack_cites_its_own_sources_and_bad_references_name_the_field(tmp_path: Path) -> None:
    pack = tmp_path / "team.toml"
    body = [line for line in GOOD_RULE if not line.startswith("citation")]
    source = ['[[source]]', 'id = "slo"', 'title = "Team latency SLO, 2026 edition"', '[source.sections]', '"2" = { title = "Decode" }']
    pack.write_text("\n".join(source + body[:7] + ['cite = [{ source = "slo", section = "2", says = "p50 under 5 ms" }]'] + body[7:]) + "\n")
    mine = load_rules([pack]).get("mine")
    assert mine.citation == 'Team latency SLO, 2026 edition: §2 Decode ("p50 under 5 ms")'
    pack.write_text(pack.read_text().replace('section = "2"', 'section = "3"'))
    with pytest.raises(UsageError, match=re.escape("field 'cite.section': source 'slo' has no section '3' (it has: 2)")):
        load_rules([pack])
    pack.write_text(pack.read_text().replace('source = "slo", section = "3"', 'source = "sol", section = "2"'))
    with pytest.raises(UsageError, match=re.escape("unknown source 'sol' (did you mean 'slo'?)")):
        load_rules([pack])
    pack.write_text(pack.read_text().replace('source = "sol"', 'source = "slo"').replace('steps = ["do it"]', 'steps = ["do it ({slo §9})"]'))
    with pytest.raises(UsageError, match=re.escape("{slo §9}: source 'slo' has no section 9")):
        load_rules([pack])
    # A user's citation replaces the seed's, whichever form: plain text replaces cite.
    override = tmp_path / "o.toml"
    override.write_text('[[rule]]\nid = "memory-bubbles"\ncitation = "our own budget"\n')
    bubbles = load_rules([override]).get("memory-bubbles")
    assert bubbles.citation == "our own budget" and bubbles.cites == ()


def test_docs_list_every_metric_evidence_and_estimate_a_pack_can_name() -> None:
    from perfdoctor.rules.engine import PREDICATES
    from perfdoctor.rules.estimates import ESTIMATES
    from perfdoctor.rules.evidence import EVIDENCE
    from perfdoctor.rules.signals import KNOWN_INPUTS

    docs = (Path(__file__).parents[2] / "docs" / "rules.md").read_text()
    for name in [*KNOWN_INPUTS, *EVIDENCE, *ESTIMATES, *PREDICATES]:
        assert f"`{name}`" in docs, f"{name} is not documented in docs/rules.md"


# --- acceptance on real traces -------------------------------------------------------------

@pytest.mark.parametrize("name", [EAGER, *fixtures_matching("h200-decode-eager-5steps.*")])
def test_eager_decode_ranks_launch_overhead_first_with_graphs_and_fusion_as_the_fix(name: str) -> None:
    a = fixture_analysis(name, "decode_step")
    findings = evaluate(load_rules(), a)
    top = findings[0]
    assert top.status == "fail" and top.rank == 1
    assert top.rule_id in LAUNCH_RULES, [f.rule_id for f in findings[:3]]
    assert "launch" in top.title.lower()  # the report names launch overhead as the first problem
    assert "graphed" not in top.context
    fix = remediation_text(top)
    assert "CUDA graph" in fix and ("Fuse" in fix or "fuse" in fix) and "torch.compile" in fix
    # The estimate is most of the step (the trace is ~90 % idle) and projects a real speedup.
    period_ms = 1000.0 / a.value("steps_per_s")
    assert 0.5 * period_ms < top.recovered_ms < period_ms
    assert top.projected["steps_per_s"] > 2 * a.value("steps_per_s")
    # Evidence names the repeated short kernels and the largest gaps.
    kinds = {e.kind: e for f in findings if f.status == "fail" for e in f.evidence}
    assert kinds["top_short_kernels"].rows and kinds["top_short_kernels"].rows[0][1] >= 10
    gaps = kinds["largest_gaps"].rows
    assert gaps and all(row[2] > 0 for row in gaps)


@pytest.mark.parametrize("name", fixtures_matching("h200-decode-graph-*") or ["(no CUDA-graph fixture recorded yet)"])
def test_graph_decode_is_never_told_to_use_cuda_graphs(name: str) -> None:
    if not (FIXTURES / name).exists():
        pytest.skip(f"needs tests/fixtures/h200-decode-graph-*: {name}")
    a = fixture_analysis(name, "decode_step")
    assert a.value("launches_per_step") <= 2 and a.value("kernels_per_step") > 100
    findings = evaluate(load_rules(), a)
    fails = [f for f in findings if f.status == "fail"]
    assert fails
    for f in findings:
        assert "graphed" in f.context
        if f.status == "fail":
            assert not GRAPH_ADVICE.search(remediation_text(f)), (f.rule_id, remediation_text(f))
    by_id = {f.rule_id: f for f in findings}
    assert by_id["launches-per-step"].status == "pass"
    # The decode declares 1 token per step: fixes are projected in tokens/s too.
    if a.value("tokens_per_s"):
        top = fails[0]
        assert top.projected["tokens_per_s"] > a.value("tokens_per_s")
    for rule_id in ("memory-bubbles", "launch-rate"):
        f = by_id[rule_id]
        if f.status == "fail":
            text = remediation_text(f)
            assert "already" in text.lower() and ("megakernel" in text.lower() or "fuse" in text.lower())


@pytest.mark.parametrize("name", fixtures_matching("h200-pageable-sync-*") or ["(no pageable-copy fixture recorded yet)"])
def test_pageable_copy_loop_ranks_copy_and_sync_first_with_pinning_and_no_syncs(name: str) -> None:
    if not (FIXTURES / name).exists():
        pytest.skip(f"needs tests/fixtures/h200-pageable-sync-*: {name}")
    a = fixture_analysis(name, "copy_step")
    findings = evaluate(load_rules(), a)
    top3 = [f.rule_id for f in findings[:3]]
    assert set(top3) == {"memcpy-share", "pageable-copies", "host-syncs"}, top3
    assert "pin_memory" in remediation_text(findings[0])
    by_id = {f.rule_id: f for f in findings}
    pin = remediation_text(by_id["pageable-copies"])
    assert "pin_memory" in pin and "non_blocking=True" in pin
    assert ".item()" in remediation_text(by_id["host-syncs"])
    # The program copies one 4 MiB pageable buffer per step and reads back 2 scalars with .item().
    copies = next(e for e in by_id["pageable-copies"].evidence if e.kind == "pageable_copies")
    assert copies.rows[0][0] == "HtoD" and copies.rows[0][1] == 1.0 and copies.rows[0][2] == pytest.approx(4.19, abs=0.01)
    syncs = next(e for e in by_id["host-syncs"].evidence if e.kind == "sync_calls")
    assert syncs.rows[0][0] == "cudaStreamSynchronize" and syncs.rows[0][1] >= 2


def test_missing_metric_is_not_evaluated_with_how_to_collect_never_pass() -> None:
    findings = evaluate(load_rules(), fixture_analysis(EAGER, "decode_step"))
    by_id = {f.rule_id: f for f in findings}
    # Issue 28: this trace records shapes, so dram-bandwidth reads the memory-bound classes
    # (the GEMVs); a trace without shapes or counters leaves it not evaluated, saying how.
    assert by_id["dram-bandwidth"].metric == "memory_bound_bw_util" and by_id["dram-bandwidth"].status == "fail"
    bare = {f.rule_id: f for f in evaluate(load_rules(), fixture_analysis("h200-decode-eager-5steps.kineto.json.gz", "decode_step"))}
    dram = bare["dram-bandwidth"]
    assert dram.status == "not_evaluated" and dram.metric is None
    assert finding_reason(dram).startswith("needs memory_bound_bw_util") and "collect it with" in finding_reason(dram)
    for rule_id in ("cache-hit", "warp-efficiency", "throttling", "pcie"):
        assert by_id[rule_id].status == "not_evaluated", rule_id
    # A fallback metric is used and said.
    occ = by_id["sm-occupancy"]
    assert occ.metric == "achieved_occupancy_est" and "sm_occupancy is absent" in finding_reason(occ)
    # Ranking: failures, then advisory, pass, not evaluated.
    order = [f.status for f in findings]
    assert order == sorted(order, key=["fail", "advisory", "pass", "not_evaluated"].index)


def test_cpu_only_trace_is_not_evaluated_not_a_pass(tmp_path: Path) -> None:
    """A real torch profiler run on the CPU: no GPU activity, so nothing can pass."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            with record_function("step"):
                torch.randn(64, 64) @ torch.randn(64, 64)
    trace = tmp_path / "cpu.json"
    prof.export_chrome_trace(str(trace))
    findings = evaluate(load_rules(), analyze(load_trace(trace)))
    assert {f.status for f in findings} == {"not_evaluated"}
    from perfdoctor.rules.engine import verdict

    assert verdict(findings)["status"] == "not_evaluated"


def test_failures_are_ranked_by_recovered_time_then_severity() -> None:
    findings = evaluate(load_rules(), fixture_analysis(EAGER, "decode_step"))
    fails = [f for f in findings if f.status == "fail"]
    assert [f.rank for f in fails] == list(range(1, len(fails) + 1))
    keys = [(-(f.recovered_ms if f.recovered_ms is not None else -1.0)) for f in fails]
    assert keys == sorted(keys)
    # Rules that count the same bubbles say so rather than being added up.
    assert set(fails[0].overlaps) >= LAUNCH_RULES - {fails[0].rule_id}
    # The p99 fix is "whatever ranks first": filled in from the ranking.
    p99 = next(f for f in fails if f.rule_id == "p99-latency")
    assert f"Fix the top-ranked finding first, {fails[0].rule_id} ({fails[0].title})" in p99.remediation.steps[0]
    # Alone (a CPU encoder over the 10 ms p99, nothing else failing), the step that would name
    # the top finding says where to look instead, not "fix the other findings (none fails)"
    alone = replace(p99, remediation=load_rules().get("p99-latency").remediation)
    _fill_top_finding([alone])
    assert alone.remediation.steps[0] == NO_TOP_FINDING and "{top_finding}" not in " ".join(alone.remediation.steps)
    assert alone.remediation.steps[1:] == p99.remediation.steps[1:]


# --- overrides ------------------------------------------------------------------------------

def test_threshold_override_from_the_command_line_records_its_origin() -> None:
    a = fixture_analysis(EAGER, "decode_step")
    findings = {f.rule_id: f for f in evaluate(load_rules(thresholds=["memory-bubbles=95%", "p99-latency=50"]), a)}
    assert findings["memory-bubbles"].status == "pass"
    assert findings["memory-bubbles"].threshold == pytest.approx(0.95)
    assert findings["memory-bubbles"].threshold_origin == "command line (--threshold memory-bubbles=95%)"
    assert findings["p99-latency"].status == "pass"


@pytest.mark.parametrize(
    "spec, message",
    [
        ("nope=1", "no rule 'nope'"),
        ("memory-bubbles", "expected RULE_ID=VALUE"),
        ("memory-bubbles=abc", "'abc' is not a number"),
        ("batching=1", "advisory and has no threshold"),
    ],
)
def test_bad_threshold_override_is_a_usage_error(spec: str, message: str) -> None:
    with pytest.raises(UsageError, match=re.escape(message)):
        load_rules(thresholds=[spec])


def test_user_pack_merges_by_id_and_adds_rules(tmp_path: Path) -> None:
    pack = tmp_path / "team.toml"
    pack.write_text(
        '[[rule]]\nid = "memory-bubbles"\nseverity = "critical"\n\n'
        '[[rule]]\nid = "dram-bandwidth"\nthreshold = 0.8\n\n'
        '[[rule]]\nid = "step-budget"\ntitle = "Step over budget"\nmetric = "step_latency_ms_p50"\n'
        'comparator = "<"\nthreshold = 30\nseverity = "error"\ncitation = "team SLO"\n'
        'estimate = "memcpy_time"\n[rule.remediation]\nsteps = ["Fix the top finding."]\n'
    )
    rules = load_rules([pack])
    bubbles = rules.get("memory-bubbles")
    assert bubbles.severity == "critical"
    assert bubbles.citation == load_rules().get("memory-bubbles").citation  # kept from the seed
    assert bubbles.threshold_origin.startswith("seed default")  # threshold not overridden
    assert f"overridden by pack {pack}" in bubbles.origin
    assert rules.get("dram-bandwidth").threshold == 0.8
    assert rules.get("dram-bandwidth").threshold_origin == f"pack {pack}"
    findings = {f.rule_id: f for f in evaluate(rules, fixture_analysis(EAGER, "decode_step"))}
    assert findings["step-budget"].status == "fail" and findings["step-budget"].value == pytest.approx(38.59, abs=0.01)
    assert rules.packs == ["seed (built in)", str(pack)]


# --- bad packs: one line, file, line, field ---------------------------------------------------

GOOD_RULE = [
    '[[rule]]',
    'id = "mine"',
    'title = "mine"',
    'metric = "gpu_idle_ratio"',
    'comparator = "<"',
    'threshold = 0.5',
    'severity = "error"',
    'citation = "me"',
    'evidence = ["largest_gaps"]',
    '[rule.remediation]',
    'steps = ["do it"]',
]


def _pack(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "bad.toml"
    path.write_text("# a user pack\n" + "\n".join(lines) + "\n")
    return path


def _edit(field: str, value: str) -> list[str]:
    return [f"{field} = {value}" if line.startswith(f"{field} =") else line for line in GOOD_RULE]


@pytest.mark.parametrize(
    "lines, line, field, words",
    [
        (_edit("metric", '"gpu_idle_ratoi"'), 5, "metric", "unknown metric 'gpu_idle_ratoi' (did you mean 'gpu_idle_ratio'?)"),
        (_edit("comparator", '"=<"'), 6, "comparator", "bad comparator '=<'"),
        (_edit("severity", '"fatal"'), 8, "severity", "bad severity 'fatal'"),
        (_edit("evidence", '["gaps"]'), 10, "evidence", "unknown evidence kind 'gaps'"),
        (_edit("threshold", '"high"'), 7, "threshold", "expected a number"),
        ([line for line in GOOD_RULE if not line.startswith("citation")], 2, "cite", "required: where the threshold comes from"),
        (GOOD_RULE + ['colour = "red"'], 13, "remediation.colour", "unknown field"),
        (_edit("title", '"unterminated'), 4, "title", "malformed TOML"),
        (GOOD_RULE[:3] + ["metric = [1,"] + GOOD_RULE[4:], 6, None, "malformed TOML"),
    ],
)
def test_bad_pack_is_one_line_naming_file_line_and_field(tmp_path: Path, lines, line: int, field, words: str) -> None:
    path = _pack(tmp_path, lines)
    with pytest.raises(UsageError) as err:
        load_rules([path])
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"{path}:{line}: "), message
    if field and words != "malformed TOML":
        assert f"field '{field}'" in message, message
    elif field:
        assert f"in field '{field}'" in message, message
    assert words in message, message


def test_bad_pack_exits_2_with_one_line_from_the_real_cli(tmp_path: Path) -> None:
    path = _pack(tmp_path, _edit("comparator", '"=<"'))
    r = run_cli("report", FIXTURES / EAGER, "--rules", path)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0
    assert r.stderr.startswith(f"error: {path}:6: rule 'mine': field 'comparator'")


# --- rules list / explain ---------------------------------------------------------------------

def test_rules_list_and_explain() -> None:
    runner = CliRunner()
    listed = runner.invoke(rules_app, ["list"], env={"COLUMNS": "250"})
    assert listed.exit_code == 0, listed.output
    for rule_id in SEED_IDS:
        assert rule_id in listed.output
    explained = runner.invoke(rules_app, ["explain", "memory-bubbles", "--threshold", "memory-bubbles=0.2"], env={"COLUMNS": "250"})
    assert explained.exit_code == 0, explained.output
    out = explained.output
    assert "memory_bubble_ratio < 0.2" in out and "command line (--threshold memory-bubbles=0.2)" in out
    assert "§5.2 Key metrics to monitor" in out and "idle_between_kernels" in out and "when graphed" in out
    assert not CJK.search(out)  # the original words only on request:
    original = runner.invoke(rules_app, ["explain", "memory-bubbles", "--original"], env={"COLUMNS": "250"})
    assert original.exit_code == 0 and "内存气泡占比：应控制在15%以下" in original.output
    for rule_id in SEED_IDS:  # every rule explains (layout-transforms' estimate had no docstring: a traceback)
        one = runner.invoke(rules_app, ["explain", rule_id], env={"COLUMNS": "250"})
        assert one.exit_code == 0 and one.exception is None, (rule_id, one.exception)
        assert not CJK.search(one.output), rule_id
    unknown = runner.invoke(rules_app, ["explain", "memory-bubble"])
    assert isinstance(unknown.exception, UsageError) and "did you mean 'memory-bubbles'" in str(unknown.exception)


# --- estimates on a crafted profile (labelled: hand-made to check the formulas exactly) -------

def _crafted_profile() -> Profile:
    """CRAFTED EDGE CASE, not a real trace: 2 steps, each 3 kernels with known gaps.

    Step 0: kernels [0,10) [30,40) [41,50) µs; a cudaStreamSynchronize returns at 20 µs,
    inside the first gap. Step 1: kernels [100,110) [150,160) [160,170) µs, no sync.
    """
    us = 1000
    k = [(0, 10), (30, 40), (41, 50), (100, 110), (150, 160), (160, 170)]
    acts = frame(ACTIVITY_COLUMNS, {
        "kind": ["kernel"] * 6, "start_ns": [s * us for s, _ in k], "end_ns": [e * us for _, e in k],
        "device": [0] * 6, "stream": [7] * 6, "name": [f"k{i}" for i in range(6)], "correlation": list(range(1, 7)),
        "graph_id": [-1] * 6,
    })
    launch_at = [-5, 1, 25, 95, 101, 102]
    calls = frame(CALL_COLUMNS, {
        "name": ["cudaLaunchKernel"] * 6 + ["cudaStreamSynchronize"],
        "start_ns": [t * us for t in launch_at] + [12 * us],
        "end_ns": [(t + 1) * us for t in launch_at] + [20 * us],
        "tid": [1] * 7, "correlation": list(range(1, 7)) + [-1],
    })
    # Python frames around the sync, as Kineto records them with with_stack=True: the
    # user's line, and a torch frame inside it that must not be reported as the call site.
    ranges = frame(RANGE_COLUMNS, {
        "name": ["step", "step", "decode.py(42): step", "/usr/lib/python3/site-packages/torch/_tensor.py(1): item"],
        "start_ns": [-10 * us, 90 * us, 11 * us, 11 * us + 500], "end_ns": [60 * us, 175 * us, 21 * us, 20 * us + 900],
        "tid": [1, 1, 1, 1], "source": ["record_function", "record_function", "python", "python"],
    })
    return Profile(activities=acts, calls=calls, ranges=ranges, origin=Origin(source="crafted"))


def test_estimates_follow_their_stated_formulas_on_a_crafted_profile() -> None:
    a = analyze(_crafted_profile(), step="step")
    # Gaps: step 0: 20 µs (after a sync) and 1 µs; step 1: 40 µs and 0.
    # idle_between_kernels (residual 2 µs), sync gaps excluded: step 0 → max(0, 1-2) = 0; step 1 → 38 µs.
    est = idle_between_kernels(a, None, {"residual_gap_us": 2.0}, {})
    assert est.ms_per_step == pytest.approx((0 + 0.038) / 2)  # median of two steps = mean
    assert idle_between_kernels(a, None, {"residual_gap_us": 0.0}, {}).ms_per_step == pytest.approx((0.001 + 0.040) / 2)
    # sync_wait_time: only step 0's 20 µs gap follows a sync.
    assert sync_wait_time(a, None, {}, {}).ms_per_step == pytest.approx(0.020 / 2)
    assert "2 µs" in formula(est)
    syncs = sync_calls(a)
    assert syncs.rows == [["cudaStreamSynchronize", 0.5, 8.0, 0.004, "decode.py(42): step ×1"]]
    assert syncs.note is None


# --- kernel names ---------------------------------------------------------------------------

def test_kernel_names_are_readable_and_classified() -> None:
    mul = ("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<"
           "c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> > > >"
           "(int, at::native::gpu_kernel_impl_nocast<...>)")
    assert short_name(mul) == "elementwise_kernel · MulFunctor"
    assert family(mul) == "elementwise"
    assert family("nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT") == "gemm"
    assert family("cudnn_generated_fort_native_sdpa_sm80_flash_fprop_wmma_f16_knob_35") == "attention"
    assert gemm_precision("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x128x8") == "fp32"
    assert gemm_precision("nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT") == "unknown"
    assert gemm_precision("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n") == "low"


@pytest.mark.parametrize("name", [EAGER, *fixtures_matching("*pageable*.kineto.json*")[:1]])
def test_evidence_collected_when_read_is_the_evidence_collected_at_once(name: str) -> None:
    """A finding's evidence tables are collected when first read (a report reads those of
    the findings it prints): they are the tables of each rule's kinds, collected straight
    from the analysis, read in any order; their kinds are known before."""
    from perfdoctor.rules.engine import _Later
    from perfdoctor.rules.evidence import EVIDENCE

    a = fixture_analysis(name, None)
    rules = load_rules()
    findings = [f for f in evaluate(rules, a) if f.status in ("fail", "advisory")]
    assert any(rules.rules[f.rule_id].evidence for f in findings)
    assert all(type(f.__dict__["_evidence"]) is _Later for f in findings if rules.rules[f.rule_id].evidence)
    for f in reversed(findings):  # not the order of the rules: each reads its own copy anyway
        kinds = tuple(rules.rules[f.rule_id].evidence)
        assert f.evidence_kinds == kinds
        assert f.evidence == [EVIDENCE[k](a) for k in kinds]
        assert f.evidence_kinds == kinds and f.evidence is f.evidence
    shared = [f.evidence[0] for f in findings if f.evidence_kinds[:1] == ("top_short_kernels",)]
    assert len({id(e) for e in shared}) == len(shared)  # never one table object for two findings


def _looped_profile(turns: int, same: bool = True) -> Profile:
    """CRAFTED EDGE CASE, not a real trace: 3 steps of kmeans_pytorch's shape, each the
    distances' kernel and a sync, then ``turns`` turns of a loop (an eq and a nonzero kernel,
    then the nonzero's sync), then the shift's reduce and its .item() sync. ``same``: every
    turn launches the same kernels; else the turns alternate two kernels."""
    us, t = 1000, 0
    acts, calls, ranges = [], [], []

    def launch(name: str) -> None:
        nonlocal t
        corr = len(acts) + 1
        calls.append(("cudaLaunchKernel", t * us, (t + 1) * us, corr))
        acts.append((name, (t + 2) * us, (t + 4) * us, corr))
        t += 5

    def sync() -> None:
        nonlocal t
        calls.append(("cudaStreamSynchronize", t * us, (t + 3) * us, -1))
        t += 4

    for _ in range(3):
        start = t
        launch("void cdist_kernel<float>()")
        sync()
        for i in range(turns):
            launch("void elementwise_kernel<EqFunctor>()" if same or i % 2 == 0 else "void gemv2T_kernel<float>()")
            launch("void DeviceSelectSweepKernel()")
            sync()
        launch("void reduce_kernel<SumOps>()")
        sync()
        ranges.append(("iteration", start * us, t * us))
        t += 10
    return Profile(
        activities=frame(ACTIVITY_COLUMNS, {
            "kind": ["kernel"] * len(acts), "name": [a[0] for a in acts], "start_ns": [a[1] for a in acts],
            "end_ns": [a[2] for a in acts], "correlation": [a[3] for a in acts], "device": [0] * len(acts),
            "stream": [7] * len(acts), "graph_id": [-1] * len(acts)}),
        calls=frame(CALL_COLUMNS, {"name": [c[0] for c in calls], "start_ns": [c[1] for c in calls], "end_ns": [c[2] for c in calls],
                                   "tid": [1] * len(calls), "correlation": [c[3] for c in calls]}),
        ranges=frame(RANGE_COLUMNS, {"name": [r[0] for r in ranges], "start_ns": [r[1] for r in ranges], "end_ns": [r[2] for r in ranges],
                                     "tid": [1] * len(ranges), "source": ["record_function"] * len(ranges)}),
        origin=Origin(source="crafted"))


def test_a_loop_that_waits_at_each_turn_is_counted_and_changes_the_advice() -> None:
    from perfdoctor.rules.signals import sync_loop_turns

    looped = analyze(_looped_profile(6), step="iteration")
    assert looped.steps.count == 3 and sync_loop_turns(looped).value == 6  # the turns, not the 8 syncs per step
    assert sync_loop_turns(analyze(_looped_profile(6, same=False), step="iteration")).value == 1  # no two alike in a row
    assert sync_loop_turns(analyze(_looped_profile(2), step="iteration")).value == 2
    # the advice: batch the loop's turns, not a CUDA graph (a sync and data-dependent shapes forbid one)
    findings = {f.rule_id: f for f in evaluate(load_rules(), looped)}
    bubbles = findings["memory-bubbles"].remediation.steps
    assert "Python loop that waits for the GPU at every turn" in bubbles[0] and not any("CUDA graph (static shapes" in s for s in bubbles)
    assert "turns of one loop" in findings["host-syncs"].remediation.steps[0]
    few = {f.rule_id: f for f in evaluate(load_rules(), analyze(_looped_profile(2), step="iteration"))}
    assert "Capture the step in a CUDA graph" in few["memory-bubbles"].remediation.steps[0]
    assert not any("turns of one loop" in s for s in few["host-syncs"].remediation.steps)
