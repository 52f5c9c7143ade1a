"""compare/ hands up numbers and reasons; reports/ words them (house plan step 2, "Out").

A refusal, a significance test's reason, a judgement over processes or a budget becomes a
sentence in :mod:`perfdoctor.reports.diff_report` or :mod:`perfdoctor.reports.gate_report`,
once, for the terminal, Markdown, JUnit, diff.json and gate.json. Three checks keep it so:

- compare/ does not import :mod:`perfdoctor.text`: no number becomes words there;
- every ``str`` field of compare/'s dataclasses is a label, a code or a name, listed here
  with what it holds: a new one (``reason: str``, ``message: str``) fails until decided;
- a string compare/ composes (an f-string, a join, ``format``, ``+``) is an error it raises
  or listed here: names and keys, not sentences.
"""

from __future__ import annotations

from pathlib import Path

from words_helpers import composed_in, imports_of, text_fields, unlisted

ROOT = Path(__file__).resolve().parents[2]
COMPARE = ROOT / "perfdoctor" / "compare"

STR_FIELDS: dict[str, str] = {  # Class.field -> what it holds
    "MetricChange.key": "a metric key",
    "MetricChange.unit": "a unit",
    "MetricChange.status": "a code: better, worse, unchanged, ...",
    "MetricChange.verdict": "a code: improved, regressed, ..., not comparable",
    "MetricChange.sample": "a sample's name, or 'processes'",
    "Missing.side": "before or after",
    "Missing.reason": "the analysis's own reason (analysis/ keeps its notes as sentences)",
    "NotComparable.metric": "a metric key",
    "Diff.before": "the run's label",
    "Diff.after": "the run's label",
    "FindingsDiff.fixed": "rule ids",
    "FindingsDiff.new": "rule ids",
    "FindingsDiff.persisting": "rule ids",
    "FindingsDiff.unknown": "rule ids",
    "Mismatch.field": "a fact's name: the reason code of a mismatch",
    "UnknownFact.field": "a fact's name",
    "Comparison.method": "exact or asymptotic",
    "Comparison.verdict": "a code: lower, higher, no significant change, inconclusive",
    "MannWhitney.method": "exact or asymptotic",
    "ProcessComparison.metric": "a metric key",
    "ProcessComparison.verdict": "a code: regressed, improved, no significant change, inconclusive",
    "BudgetJudgement.status": "pass or fail",
    "BudgetJudgement.verdict": "a code",
    "BudgetJudgement.where": "a code: beyond, within, straddles",
    "Budget.metric": "a metric key",
    "Budget.text": "the budget as the user wrote it",
    "Check.name": "the check's name",
    "Check.kind": "budget or rule",
    "Check.status": "a code: pass, fail, inconclusive, skip",
    "Check.outcome": "a code: what decided the status",
    "Check.min_severity": "a severity",
    "GateResult.run": "the run's label",
    "GateResult.baseline": "the baseline's label",
    "GateResult.inconclusive_policy": "pass or fail",
    "KernelChange.name": "a kernel's normalized name",
    "KernelChange.status": "a code: matched, appeared, vanished, ...",
    "KernelDiff.per": "step or trace",
    "KernelDiff.matched_by_family": "family keys",
    "KernelDiff.unmatched": "kernel names",
    "KernelDiff.vendors": "the vendors' names, across vendors",
    "Mismatch.metrics": "metric keys",
    "CopyChange.label": "what the copies are called (a name, as a kernel's)",
}

COMPOSED: dict[tuple[str, str], str] = {  # (module, function) -> why its composed strings are not sentences
    ("crossvendor.py", "op_key"): "a family key, family:op",
    ("diff.py", "_metric_verdict"): "a verdict code: higher or lower (significant), for a metric without a better way",
    ("diff.py", "light_metrics"): "a metric key",
    ("gate.py", "parse_budget"): "the hints of its usage errors",
    ("gate.py", "evaluate_budget"): "a check's name",
    ("gate.py", "process_budget"): "a check's name",
    ("gate.py", "rule_checks"): "a check's name",
    ("gate.py", "evaluate_gate"): "a check's name",
    ("gate.py", "merge_gates"): "a check's name, rank k: ...",
    ("lead.py", "copy_label"): "what the copies are called",
    ("processes.py", "compare_runs"): "which manifest a usage error names",
}


def test_compare_does_not_word_numbers() -> None:
    importing = [path.name for path in sorted(COMPARE.glob("*.py")) if imports_of(path, "perfdoctor.text")]
    assert not importing, f"compare/ words no number: return it, and word it in reports/ ({importing})"


def test_every_text_field_of_compare_is_a_label_a_code_or_a_name() -> None:
    new, stale = unlisted(text_fields("perfdoctor.compare", sorted(COMPARE.glob("*.py"))), STR_FIELDS)
    assert not new, f"a text field in compare/ (a sentence belongs in reports/; a label, code or name: list it): {new}"
    assert not stale, f"no longer a text field: remove from STR_FIELDS: {stale}"


def test_compare_composes_names_not_sentences() -> None:
    found = composed_in(sorted(COMPARE.glob("*.py")))
    new, stale = unlisted(found, COMPOSED)
    assert not new, f"a string composed in compare/: word it in reports/, or list a name or key here: { {k: found[k] for k in new} }"
    assert not stale, f"composes nothing now: remove from COMPOSED: {stale}"
