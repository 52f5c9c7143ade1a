"""rules/ hands up numbers and reasons; reports/ words them (house plan step 2, "Out").

An estimate's formula, why a failure has none, an evidence table's title, note and cells
that are numbers with a meaning become text in :mod:`perfdoctor.reports.estimates` and
:mod:`perfdoctor.reports.evidence`, and a finding's reasons (:mod:`perfdoctor.rules.reasons`:
not evaluated, a fallback metric, a lowered severity) and a rule's pass condition in
:mod:`perfdoctor.reports.common`, once, for the terminal, Markdown, HTML, findings.json, gate
and the demo. The checks of tests/compare/test_words.py, on rules/:

- what each module of rules/ imports from :mod:`perfdoctor.text` is listed here with why:
  nothing, for the estimates, the evidence and the reasons; only what makes pack text safe,
  for the engine;
- every ``str`` field of the estimates', the evidence's and the reasons' dataclasses, and of
  a Finding, is a label, a code, a name or a reason another room wrote, listed here: a new
  one (``formula: str``, ``reason: str``) fails;
- a string the estimates, the evidence, the reasons or the engine's evaluation compose is
  listed here: names, not sentences.

Not yet (docs/architecture.md, "Not yet one"): a metric's note and reason (rules/signals.py,
as analysis/'s) are still sentences.
"""

from __future__ import annotations

from pathlib import Path

from words_helpers import composed_in, imports_of, text_fields, unlisted

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "perfdoctor" / "rules"
WORDED = [RULES / "estimates.py", RULES / "evidence.py", RULES / "reasons.py"]  # the modules whose words are reports/'

TEXT_IMPORTS: dict[str, tuple[set[str], str]] = {  # module -> (what it imports from text.py, why)
    "engine.py": ({"clean", "clean_block"}, "they make a pack's text safe, once, as it loads"),
    "signals.py": ({"count", "value"}, "a Metric's note and reason are sentences, as analysis/'s"),
}

STR_FIELDS: dict[str, str] = {  # Class.field -> what it holds
    "Unavailable.why": "the reason its source gave: the analysis's (analysis/ keeps its reasons as sentences) or the pack's no_estimate",
    "PartTime.what": "a label of the attribution's parts (`rules explain` prints it in the estimate's docstring)",
    "PartTime.source": "the attribution's source: light, or the trace's loader",
    "HiddenPart.what": "a label of the attribution's parts",
    "HiddenPart.source": "the attribution's source: light, or the trace's loader",
    "LayoutTime.source": "the attribution's source",
    "NormElementwise.source": "the attribution's source",
    "HostBusy.sites": "Python call sites, file.py(line): fn",
    "HostIntervals.counts": "what the host did: busy, waiting, launching, unknown",
    "Evidence.kind": "the evidence kind",
    "Evidence.columns": "column headings",
    "Evidence.note": "host_in_gaps's: the analysis's reason, as analysis/ wrote it",
    "Missing.keys": "metric keys",
    "Missing.why": "the absent metric's reason, as analysis/ or rules/signals.py wrote it",
    "Missing.collect": "the pack's `collect`: pack text",
    "OffWorkload.rule": "the workloads a rule is for: names",
    "Suppressed.by": "a rule id",
    "Suppressed.title": "the failed finding's title: pack text",
    "Fallback.used": "a metric key",
    "Fallback.preferred": "a metric key",
    "Fallback.why": "the preferred metric's reason, as analysis/ or rules/signals.py wrote it",
    "Lowered.was": "a severity name",
    "Lowered.to": "a severity name",
}

FINDING_FIELDS: dict[str, str] = {  # Finding.field -> what it holds (rules/engine.py)
    "Finding.rule_id": "a rule id",
    "Finding.title": "pack text",
    "Finding.status": "a status code",
    "Finding.severity": "a severity name",
    "Finding.citation": "pack text",
    "Finding.metric": "a metric key",
    "Finding.comparator": "a comparator as the pack spells it",
    "Finding.threshold_origin": "where the threshold comes from: the pack's label or the command line's option",
    "Finding.estimate_kind": "an estimate kind",
    "Finding.context": "the names of the conditions that chose a variant",
    "Finding.overlaps": "rule ids",
}

EVALUATION_COMPOSED: dict[str, str] = {  # function of rules/engine.py's evaluation -> why its composed strings are not sentences
    "_fill_top_finding": "a remediation step's {top_finding}: the top finding's id and title (pack text into pack text)",
    "__set_name__": "the lazy evidence descriptor's slot, an attribute name (`_evidence`)",
}

COMPOSED: dict[tuple[str, str], str] = {  # (module, function) -> why its composed strings are not sentences
    ("estimates.py", "_part_time"): "the estimate's docstring, which `rules explain` prints",
    ("evidence.py", "_r"): "a float rounded to 3 significant digits (a float, not text)",
    ("evidence.py", "_clip"): "a name cut to a table's width",
    ("evidence.py", "largest_gaps"): "the host calls during a gap: names, each with how many",
    ("evidence.py", "sync_calls"): "the Python call sites of a sync: names, each with how many",
}


def test_rules_import_from_text_only_what_is_listed() -> None:
    found = {path.name: imports_of(path, "perfdoctor.text") for path in sorted(RULES.glob("*.py"))}
    found = {k: v for k, v in found.items() if v}
    listed = {k: names for k, (names, _) in TEXT_IMPORTS.items()}
    assert found == listed, ("rules/ words no number: hand it up, and word it in reports/ "
                             f"(imports from text.py: {found}; listed: {listed})")


def test_every_text_field_of_the_estimates_and_evidence_is_a_label_a_code_or_a_name() -> None:
    new, stale = unlisted(text_fields("perfdoctor.rules", WORDED), STR_FIELDS)
    assert not new, f"a text field in rules/ (a sentence belongs in reports/; a label, code or name: list it): {new}"
    assert not stale, f"no longer a text field: remove from STR_FIELDS: {stale}"


def test_the_estimates_and_evidence_compose_names_not_sentences() -> None:
    found = composed_in(WORDED)
    new, stale = unlisted(found, COMPOSED)
    assert not new, f"a string composed in rules/: word it in reports/, or list a name here: { {k: found[k] for k in new} }"
    assert not stale, f"composes nothing now: remove from COMPOSED: {stale}"


def test_a_finding_holds_no_sentence() -> None:
    new, stale = unlisted({f for f in text_fields("perfdoctor.rules", [RULES / "engine.py"]) if f.startswith("Finding.")}, FINDING_FIELDS)
    assert not new, f"a text field of Finding (a reason is a rules.reasons type, worded in reports/common.py; a label, code or name: list it): {new}"
    assert not stale, f"no longer a text field: remove from FINDING_FIELDS: {stale}"


def test_the_evaluation_composes_no_sentence() -> None:
    """What rules/engine.py composes after ``# --- evaluation`` (loading a pack composes its
    error messages and the pack's own text, and stays out of this check)."""
    source = (RULES / "engine.py").read_text(encoding="utf-8")
    start = source.index("\n# --- evaluation") + 1
    first = source.count("\n", 0, start) + 1
    found = {fn for (_, fn), lines in composed_in([RULES / "engine.py"]).items() if max(lines) >= first}
    new, stale = unlisted(found, EVALUATION_COMPOSED)
    assert not new, f"a string composed in the rules' evaluation: hand up a rules.reasons type, worded in reports/common.py: {new}"
    assert not stale, f"composes nothing now: remove from EVALUATION_COMPOSED: {stale}"


def test_every_reason_has_its_words() -> None:
    """Each reason type of rules/reasons.py is worded by reports/common.reason_words, which
    raises on one it does not know."""
    import typing

    from perfdoctor.reports.common import reason_words
    from perfdoctor.rules import reasons

    source = (ROOT / "perfdoctor" / "reports" / "common.py").read_text(encoding="utf-8")
    body = source[source.index("def reason_words("):source.index("def finding_reason(")]
    kinds = typing.get_args(reasons.Reason)
    assert {k.__name__ for k in kinds} == {n for n, v in vars(reasons).items() if isinstance(v, type) and v.__module__ == reasons.__name__}
    unworded = [k.__name__ for k in kinds if f"isinstance(r, {k.__name__})" not in body]
    assert not unworded, f"reports/common.reason_words has no words for {unworded}"
    assert reason_words(reasons.Lowered("error", "info", 0.1, 37.6)) == "severity error → info: 0.1 ms of a 37.6 ms step (0.266 %) is at stake"


def test_every_evidence_kind_and_note_has_its_words() -> None:
    from perfdoctor.reports.evidence import NOTES, TITLES
    from perfdoctor.reports.estimates import MEDIANS, GAPS, FLOORS
    from perfdoctor.rules.estimates import Floor, Gaps, Of
    from perfdoctor.rules.evidence import EVIDENCE, Note

    assert set(TITLES) == set(EVIDENCE)
    assert set(NOTES) == set(Note)
    assert set(MEDIANS) == set(Of) and set(GAPS) == set(Gaps) and set(FLOORS) == set(Floor)
