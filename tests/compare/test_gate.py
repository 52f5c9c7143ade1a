"""perfdoctor gate: the budget grammar, budget verdicts (zero and missing baselines,
significance), rules, CI outputs and exit codes.

Real H200 traces for the eager-vs-graph acceptance; CRAFTED variants of a real trace
(tests/diffgate_helpers.py) or of its metrics where a test needs a change of known size.
"""

from __future__ import annotations

import dataclasses
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import FIXTURES
from diffgate_helpers import cli, cli_inprocess, crafted_bundle, stretched
from perfdoctor.compare.diff import diff_runs
from perfdoctor.pipeline import Diagnosis, diagnose
from perfdoctor.errors import UsageError
from perfdoctor.compare.gate import (
    Budget,
    Check,
    GateResult,
    evaluate_budget,
    evaluate_gate,
    parse_budget,
)
from perfdoctor.compare.comparability import Mismatch
from perfdoctor.compare.diff import NotComparable
from perfdoctor.reports.gate_report import budget_text, details, github_annotations, junit_xml, message, summary_markdown
from perfdoctor.analysis.metrics import Metric

EAGER5 = FIXTURES / "h200-llama1b-eager-5steps.kineto.json.gz"
STEP = "decode_step"


@pytest.fixture(scope="module")
def eager5() -> Diagnosis:
    return diagnose(EAGER5, step=STEP, rules=None)


@pytest.fixture(scope="module")
def slow_path(tmp_path_factory) -> Path:
    """CRAFTED: the eager trace with its GPU timeline stretched 1.5x (a planted regression)."""
    return stretched(EAGER5, tmp_path_factory.mktemp("crafted") / "slow.kineto.json.gz", 1.5)


def with_metrics(run: Diagnosis, label: str, **values: float | None) -> Diagnosis:
    """CRAFTED: the same run with some metric values replaced (None = absent)."""
    metrics = dict(run.analysis.metrics)
    for key, value in values.items():
        unit = metrics[key].unit
        metrics[key] = Metric(value, unit, "crafted", reason=None if value is not None else "crafted: not collected")
    return Diagnosis(run.profile, dataclasses.replace(run.analysis, metrics=metrics), None, label=label)


def with_steps(run: Diagnosis, label: str, n: int) -> Diagnosis:
    """CRAFTED: the same run keeping only its first ``n`` steps in the step table."""
    steps = dataclasses.replace(run.analysis.steps, table=run.analysis.steps.table.iloc[:n])
    return Diagnosis(run.profile, dataclasses.replace(run.analysis, steps=steps), None, label=label)


def check(budget: str, baseline: Diagnosis, run: Diagnosis) -> Check:
    return evaluate_budget(parse_budget(budget), diff_runs(baseline, run))


# --------------------------------------------------------------------------- grammar


@pytest.mark.parametrize(
    "text, metric, sign, amount, relative",
    [
        ("step_latency_ms_p99:+5%", "step_latency_ms_p99", +1, 5.0, True),
        ("dram_bw_util:-0.05", "dram_bw_util", -1, 0.05, False),
        ("launches_per_step:+2", "launches_per_step", +1, 2.0, False),
        (" steps_per_s : - 10 % ", "steps_per_s", -1, 10.0, True),
        ("tokens_per_s:-.5%", "tokens_per_s", -1, 0.5, True),
        ("gpu_idle_ratio:+1e-2", "gpu_idle_ratio", +1, 0.01, False),
        ("sync_calls_per_step:+0", "sync_calls_per_step", +1, 0.0, False),
    ],
)
def test_budget_grammar(text: str, metric: str, sign: int, amount: float, relative: bool) -> None:
    b = parse_budget(text)
    assert (b.metric, b.sign, b.amount, b.relative) == (metric, sign, pytest.approx(amount), relative)


@pytest.mark.parametrize(
    "text, message",
    [
        ("step_latency_ms_p99:5%", "with a sign"),
        ("step_latency_ms_p99", "expected METRIC:+N%"),
        ("step_latency_ms_p99:+", "expected METRIC:+N%"),
        ("step_latency_ms_p99:+5%%", "expected METRIC:+N%"),
        ("step_latency_ms_p99:+-5", "expected METRIC:+N%"),
        ("step_latency_ms_p99:+five", "expected METRIC:+N%"),
        ("", "expected METRIC:+N%"),
        ("step_latency_p99:+5%", "did you mean step_latency_ms_p99"),
        ("banana:+5%", "unknown metric 'banana'"),
    ],
)
def test_bad_budgets_are_usage_errors(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message.replace("+", r"\+")):
        parse_budget(text)


def test_budget_is_worded_as_what_it_allows() -> None:
    assert budget_text(parse_budget("dram_bw_util:-0.05")) == "fails if dram_bw_util falls by more than 0.05 ratio"
    assert budget_text(parse_budget("step_latency_ms_p99:+5%")) == "fails if step_latency_ms_p99 rises by more than 5 %"


# --------------------------------------------------------------------------- budget verdicts


def test_relative_and_absolute_budgets_in_both_directions(eager5) -> None:
    base = with_metrics(eager5, "base", kernel_time_ratio=0.50, gpu_idle_ratio=0.40)
    run = with_metrics(eager5, "run", kernel_time_ratio=0.44, gpu_idle_ratio=0.43)
    assert check("kernel_time_ratio:-0.05", base, run).status == "fail"  # fell 0.06 > 0.05
    assert check("kernel_time_ratio:-0.1", base, run).status == "pass"
    assert check("kernel_time_ratio:-10%", base, run).status == "fail"  # fell 12 %
    assert check("kernel_time_ratio:-15%", base, run).status == "pass"
    assert check("kernel_time_ratio:+1%", base, run).status == "pass"  # it fell: a '+' budget does not care
    assert check("gpu_idle_ratio:+5%", base, run).status == "fail"  # rose 7.5 %
    assert check("gpu_idle_ratio:+10%", base, run).status == "pass"
    assert check("gpu_idle_ratio:+0.05", base, run).status == "pass"  # rose 0.03 absolute


def test_zero_baseline(eager5) -> None:
    base = with_metrics(eager5, "base", sync_calls_per_step=0.0)
    run = with_metrics(eager5, "run", sync_calls_per_step=2.0)
    rel = check("sync_calls_per_step:+5%", base, run)
    assert rel.status == "fail"
    assert "baseline 0: relative change undefined" in message(rel) and "+2" in message(rel)
    assert "absolute budget" in message(rel)
    assert check("sync_calls_per_step:+2", base, run).status == "pass"
    assert check("sync_calls_per_step:+1", base, run).status == "fail"
    assert check("sync_calls_per_step:-5%", base, run).status == "pass"  # a rise, and '-' guards falls
    same = check("sync_calls_per_step:+5%", base, base)
    assert same.status == "pass" and "relative change undefined" in message(same)


def test_metric_on_one_side_only_is_added_or_removed_not_a_regression(eager5) -> None:
    without = with_metrics(eager5, "without", dram_bw_util=None)
    with_bw = with_metrics(eager5, "with", dram_bw_util=0.3)
    added = check("dram_bw_util:-0.05", without, with_bw)
    removed = check("dram_bw_util:-0.05", with_bw, without)
    assert (added.status, removed.status) == ("skip", "skip")
    assert (added.outcome, removed.outcome) == ("added", "removed")
    assert "added" in message(added) and "removed" in message(removed)
    neither = check("dram_bw_util:-0.05", without, without)
    assert neither.status == "skip" and "not measured in either run" in message(neither)


def test_step_metric_over_budget_but_not_significant_passes(eager5) -> None:
    # CRAFTED: p50 value raised 20 % while the per-step samples are unchanged (p = 1).
    run = with_metrics(eager5, "run", step_latency_ms_p50=eager5.analysis.value("step_latency_ms_p50") * 1.2)
    c = check("step_latency_ms_p50:+5%", eager5, run)
    assert (c.status, c.outcome) == ("pass", "noise") and "not a significant change" in message(c)
    assert details(c)["significance"]["p_value"] == 1.0


def test_step_metric_with_too_few_steps_is_judged_by_the_budget_alone(eager5) -> None:
    base, run = with_steps(eager5, "base", 3), with_steps(eager5, "run", 3)
    run = with_metrics(run, "run", step_latency_ms_p50=eager5.analysis.value("step_latency_ms_p50") * 1.2)
    c = check("step_latency_ms_p50:+5%", base, run)
    assert (c.status, c.outcome) == ("fail", "untested")
    assert "not tested for significance" in message(c) and "need more steps" in message(c)


def test_planted_regression_fails_and_reverse_passes(eager5, slow_path) -> None:
    slow = diagnose(slow_path, step=STEP, rules=None)
    budgets = [parse_budget("step_latency_ms_p50:+5%"), parse_budget("step_latency_ms_p99:+5%"), parse_budget("launches_per_step:+0")]
    bad = evaluate_gate(slow, eager5, budgets)
    assert not bad.passed and bad.exit_code == 1
    assert [c.name for c in bad.failed] == ["budget step_latency_ms_p50:+5%", "budget step_latency_ms_p99:+5%"]
    good = evaluate_gate(eager5, slow, budgets)
    assert good.passed and good.exit_code == 0


def test_latency_budgets_use_the_light_pass_of_bundles(tmp_path) -> None:
    # CRAFTED bundles around the same real trace: only the light pass differs, by 10 %.
    light = [4.02, 4.0, 4.05, 3.98, 4.01, 4.03, 3.99, 4.0]
    base = diagnose(crafted_bundle(EAGER5, tmp_path / "base", light_ms=light, torch="2.11"), step=STEP, rules=None)
    slow = diagnose(crafted_bundle(EAGER5, tmp_path / "slow", light_ms=[v * 1.1 for v in light], torch="2.11"), step=STEP, rules=None)
    c = check("step_latency_ms_p50:+5%", base, slow)
    assert c.status == "fail" and "light timing pass" in message(c), message(c)
    assert details(c)["measured_as"] == "light_step_latency_ms_p50"
    assert details(c)["baseline"] == pytest.approx(4.005)  # median of the light pass
    assert check("step_latency_ms_p50:+15%", base, slow).status == "pass"
    assert check("step_latency_ms_p50:+5%", slow, base).status == "pass"
    # traced metrics without a light-pass twin are judged as before
    assert details(check("launches_per_step:+0", base, slow))["measured_as"] == "launches_per_step"


def test_budgets_need_a_baseline(eager5) -> None:
    with pytest.raises(UsageError, match="--baseline"):
        evaluate_gate(eager5, None, [parse_budget("steps_per_s:-5%")])


# --------------------------------------------------------------------------- outputs


def _budget(metric: str) -> Budget:
    return Budget(metric, +1, 5.0, True, f"{metric}:+5%")


def _refused(before: str) -> NotComparable:
    """A refusal for a budget on ``m``: its facts are trace text, carried through untrusted."""
    return NotComparable((Mismatch("step_coverage", before, "H200"),), "m")


def _result(n_fail: int, n_pass: int = 1, n_skip: int = 1) -> GateResult:
    # the outputs word what they are given: a refusal's reason carries untrusted text through
    checks = [Check(f"budget m{i}:+5%", "budget", "fail", "not comparable", why=_refused(f"m{i} rose 10%, 100% of: a,b\nc"),
                    budget=_budget(f"m{i}")) for i in range(n_fail)]
    checks += [Check(f"budget ok{i}:+5%", "budget", "pass", "not comparable", why=_refused("within"), budget=_budget(f"ok{i}"))
               for i in range(n_pass)]
    checks += [Check(f"budget gone{i}:+5%", "budget", "skip", "not comparable", why=_refused("removed"), budget=_budget(f"gone{i}"))
               for i in range(n_skip)]
    return GateResult("run.json.gz", "base.json.gz", checks, [Mismatch("gpu", "A100", "H200")], None)


def test_junit_has_one_testcase_per_check() -> None:
    r = _result(2)
    root = ET.fromstring(junit_xml(r).split("\n", 1)[1])
    cases = root.findall("./testsuite/testcase")
    assert len(cases) == 4
    assert [c.get("name") for c in cases if c.find("failure") is not None] == ["budget m0:+5%", "budget m1:+5%"]
    assert len(root.findall("./testsuite/testcase/skipped")) == 1
    suite = root.find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("4", "2", "1")


def test_junit_survives_control_characters_and_markup() -> None:
    r = GateResult("r", None, [Check("rule <x>\x01", "budget", "fail", "not comparable", why=_refused("a & b \x07"),
                                     budget=_budget("m"))], [], None)
    root = ET.fromstring(junit_xml(r).split("\n", 1)[1])
    assert root.find("./testsuite/testcase").get("name") == "rule <x>?"


def test_github_annotations_are_capped_and_escaped() -> None:
    lines = github_annotations(_result(15))
    errors = [line for line in lines if line.startswith("::error")]
    assert len(errors) == 10
    assert lines[0].startswith("::warning")
    assert lines[-1].startswith("::notice") and "5 more" in lines[-1]
    # workflow-command escaping: %, newlines in data; also ':' and ',' in properties
    assert ("::error title=budget m0%3A+5%25::not comparable: step_coverage differs: before m0 rose 10%25, 100%25 of: a,b%0Ac, "
            "after H200: the budget is not judged") in lines


def test_summary_lists_failures_first() -> None:
    md = summary_markdown(_result(1))
    assert "FAILED" in md and md.index("m0:+5%") < md.index("ok0:+5%")
    assert "not like for like" in md


# --------------------------------------------------------------------------- the command


def test_gate_planted_regression_exits_1_with_junit_and_summary(tmp_path, slow_path) -> None:
    junit, summary, js = tmp_path / "gate.xml", tmp_path / "summary.md", tmp_path / "gate.json"
    summary.write_text("previous step\n")
    r = cli(
        "gate", slow_path, "--baseline", EAGER5, "--step", STEP,
        "--fail-on", "step_latency_ms_p50:+5%", "--fail-on", "launches_per_step:+0",
        "--junit", junit, "--github", "--json", js,
        env={"GITHUB_STEP_SUMMARY": str(summary)},
    )
    assert r.returncode == 1, r.stdout + r.stderr
    failed = [c.get("name") for c in ET.parse(junit).getroot().iter("testcase") if c.find("failure") is not None]
    assert failed == ["budget step_latency_ms_p50:+5%"]
    text = summary.read_text()
    assert text.startswith("previous step\n")  # appended, not overwritten
    assert "step_latency_ms_p50:+5%" in text and "FAILED" in text
    assert [line for line in r.stdout.splitlines() if line.startswith("::error")][0].startswith(
        "::error title=budget step_latency_ms_p50%3A+5%25::"
    )
    doc = json.loads(js.read_text())
    assert doc["passed"] is False and doc["exit_code"] == 1 and doc["diff"]["schema"] == "perfdoctor.diff/1"


def test_gate_reverse_and_same_run_exit_0(slow_path) -> None:
    r = cli("gate", EAGER5, "--baseline", slow_path, "--step", STEP, "--fail-on", "step_latency_ms_p50:+5%")
    assert r.returncode == 0, r.stdout + r.stderr
    same = cli("gate", EAGER5, "--baseline", EAGER5, "--step", STEP,
               "--fail-on", "step_latency_ms_p99:+5%", "--fail-on", "kernels_per_step:+5%")
    assert same.returncode == 0, same.stdout + same.stderr
    assert "PASSED" in same.stdout


def test_gate_rules_and_min_severity() -> None:
    r = cli_inprocess("gate", EAGER5, "--step", STEP, "--rules", "seed")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "rule memory-bubbles" in r.stdout and "rule launch-rate" in r.stdout
    # The eager trace's failing rules are error or warning; nothing critical fails.
    r = cli_inprocess("gate", EAGER5, "--step", STEP, "--rules", "seed", "--min-severity", "critical")
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (("--baseline", EAGER5, "--fail-on", "banana:+5%"), "unknown metric"),
        (("--baseline", EAGER5, "--fail-on", "steps_per_s:5%"), "sign"),
        (("--fail-on", "steps_per_s:-5%"), "--baseline"),
        ((), "nothing to check"),
        (("--rules", "seed", "--min-severity", "fatal"), "--min-severity"),
        (("--baseline", FIXTURES / "README.md", "--fail-on", "steps_per_s:-5%"), "unknown trace type"),
        (("--baseline", FIXTURES / "missing.json.gz", "--fail-on", "steps_per_s:-5%"), "no such file"),
        (("--rules", FIXTURES / "missing.toml"), "not found"),
    ],
)
def test_gate_bad_input_exits_2(args, message) -> None:
    r = cli_inprocess("gate", EAGER5, "--step", STEP, *args)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.startswith("error: ") and message in r.stderr and "Traceback" not in r.stderr


def test_gate_that_checks_nothing_exits_2() -> None:
    assert _result(0, n_pass=0, n_skip=2).exit_code == 2
    assert _result(0, n_pass=1, n_skip=2).exit_code == 0
    matmul = FIXTURES / "h200-matmul-20steps.nsys.sqlite.gz"
    # Contract v2 finds this file's steps automatically, so "nothing checked" now comes from
    # a budget on a metric neither run collected (no ncu, no GPM in an nsys-only file).
    r = cli("gate", matmul, "--baseline", matmul, "--fail-on", "sm_occupancy:-5%")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "NOTHING CHECKED" in r.stdout and r.stderr.startswith("error: no check could be evaluated")
    r = cli("gate", matmul, "--baseline", matmul, "--step", "step*", "--fail-on", "step_latency_ms_p50:+5%")
    assert r.returncode == 0, r.stdout + r.stderr


def test_gate_help_documents_exit_codes() -> None:
    r = cli_inprocess("gate", "--help")
    assert r.returncode == 0
    text = " ".join(r.stdout.split())
    assert "0 every check passed" in text and "1 the gate failed" in text and "2 usage or input error" in text


# --------------------------------------------------------------------------- real H200 runs

EAGER = FIXTURES / "h200-decode-eager-5steps.kineto.json.gz"
GRAPH = FIXTURES / "h200-decode-graph-10steps.kineto.json.gz"
GRAPH_RERUN = FIXTURES / "h200-decode-graph-10steps-rerun.kineto.json.gz"
REAL_BUDGETS = ("--fail-on", "step_latency_ms_p50:+5%", "--fail-on", "step_latency_ms_p99:+5%",
                "--fail-on", "launches_per_step:+5%", "--fail-on", "tokens_per_s:-5%")


def test_real_eager_gated_against_graph_baseline_fails_and_reverse_passes(tmp_path) -> None:
    junit, summary = tmp_path / "gate.xml", tmp_path / "summary.md"
    r = cli("gate", EAGER, "--baseline", GRAPH, "--step", STEP, *REAL_BUDGETS, "--junit", junit, "--github",
            env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert r.returncode == 1, r.stdout + r.stderr
    failed = {c.get("name") for c in ET.parse(junit).getroot().iter("testcase") if c.find("failure") is not None}
    # p50 and launches fail; p99 too; tokens_per_s has only 4 eager intervals (< 5): judged
    # by its budget alone, and it fell 6x, so it fails as well.
    assert failed == {"budget step_latency_ms_p50:+5%", "budget step_latency_ms_p99:+5%",
                      "budget launches_per_step:+5%", "budget tokens_per_s:-5%"}
    assert all(name in summary.read_text() for name in failed)
    r = cli("gate", GRAPH, "--baseline", EAGER, "--step", STEP, *REAL_BUDGETS)
    assert r.returncode == 0, r.stdout + r.stderr


def test_real_two_runs_of_one_program_pass_a_5_percent_budget() -> None:
    for run, baseline in ((GRAPH_RERUN, GRAPH), (GRAPH, GRAPH_RERUN)):
        r = cli("gate", run, "--baseline", baseline, "--step", STEP, *REAL_BUDGETS)
        assert r.returncode == 0, r.stdout + r.stderr
