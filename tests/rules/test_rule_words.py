"""rules/ hands up numbers and reasons; reports/ words them (house plan step 2, "Out").

An estimate's formula, why a failure has none, an evidence table's title, note and cells
that are numbers with a meaning become text in :mod:`perfdoctor.reports.estimates` and
:mod:`perfdoctor.reports.evidence`, once, for the terminal, Markdown, HTML and findings.json.
The checks of tests/compare/test_words.py, on rules/:

- what each module of rules/ imports from :mod:`perfdoctor.text` is listed here with why:
  nothing, for the estimates and the evidence;
- every ``str`` field of the estimates' and the evidence's dataclasses is a label, a code, a
  name or a reason another room wrote, listed here: a new one (``formula: str``) fails;
- a string the estimates or the evidence compose is listed here: names, not sentences.

Not yet (docs/architecture.md, "Not yet one"): a finding's reason (rules/engine.py) and a
metric's note and reason (rules/signals.py, as analysis/'s) are still sentences.
"""

from __future__ import annotations

from pathlib import Path

from words_helpers import composed_in, imports_of, text_fields, unlisted

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "perfdoctor" / "rules"
WORDED = [RULES / "estimates.py", RULES / "evidence.py"]  # the modules whose words are reports/'

TEXT_IMPORTS: dict[str, tuple[set[str], str]] = {  # module -> (what it imports from text.py, why)
    "engine.py": ({"clean", "clean_block", "percent", "setting", "value"},
                  "clean and clean_block make a pack's text safe; a finding's reason and a rule's condition are still sentences"),
    "signals.py": ({"count", "value"}, "a Metric's note and reason are sentences, as analysis/'s"),
}

STR_FIELDS: dict[str, str] = {  # Class.field -> what it holds
    "Unavailable.why": "the reason its source gave: the analysis's (analysis/ keeps its reasons as sentences) or the pack's no_estimate",
    "PartTime.what": "a label of the attribution's parts (`rules explain` prints it in the estimate's docstring)",
    "PartTime.source": "the attribution's source: light, or the trace's loader",
    "LayoutTime.source": "the attribution's source",
    "NormElementwise.source": "the attribution's source",
    "HostBusy.sites": "Python call sites, file.py(line): fn",
    "HostIntervals.counts": "what the host did: busy, waiting, launching, unknown",
    "Evidence.kind": "the evidence kind",
    "Evidence.columns": "column headings",
    "Evidence.note": "host_in_gaps's: the analysis's reason, as analysis/ wrote it",
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


def test_every_evidence_kind_and_note_has_its_words() -> None:
    from perfdoctor.reports.evidence import NOTES, TITLES
    from perfdoctor.reports.estimates import MEDIANS, GAPS, FLOORS
    from perfdoctor.rules.estimates import Floor, Gaps, Of
    from perfdoctor.rules.evidence import EVIDENCE, Note

    assert set(TITLES) == set(EVIDENCE)
    assert set(NOTES) == set(Note)
    assert set(MEDIANS) == set(Of) and set(GAPS) == set(Gaps) and set(FLOORS) == set(Floor)
