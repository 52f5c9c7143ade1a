"""``findings.json``: the ranked findings as data (schema ``perfdoctor.findings/1``).

The schema is documented in ``docs/rules.md``; CI tools and ``perfdoctor gate`` read it.
Non-finite numbers (a rate over zero time) are written as ``null``.
"""

from __future__ import annotations

from typing import Any, Sequence

from perfdoctor.analysis.metrics import Analysis, jsonable
from perfdoctor.io import dumps_json
from perfdoctor.reports import attribution
from perfdoctor.reports.common import estimate_reason, finding_reason, outcome, verdict_line
from perfdoctor.reports.estimates import formula
from perfdoctor.reports.evidence import evidence_json
from perfdoctor.rules.engine import Finding, verdict

SCHEMA = "perfdoctor.findings/1"


def document(findings: Sequence[Finding], analysis: Analysis, packs: Sequence[str] = ()) -> dict[str, Any]:
    """The findings.json document as a dict."""
    origin = analysis.profile.origin
    v = verdict(findings)
    return {
        "schema": SCHEMA,
        # status: the rules' outcome; outcome: the report's (a crash, too little evidence).
        "verdict": {**v, "outcome": outcome(findings, analysis), "line": verdict_line(findings, analysis)},
        "source": {
            "path": origin.path,
            "loader": origin.source,
            "device": analysis.profile.device.get("name"),
            "step_name": analysis.steps.name,
            "steps": analysis.steps.count,
            "steps_how": analysis.steps.how or None,
            # training / inference / unknown with its evidence (perfdoctor.analysis.workload)
            "workload": None if getattr(analysis, "workload", None) is None else analysis.workload.to_dict(),
            "graph_state": None if getattr(analysis, "graph_state", None) is None else analysis.graph_state.message or None,
        },
        "baseline": {
            k: analysis.value(k) for k in ("steps_per_s", "tokens_per_s", "step_latency_ms_p50", "step_latency_ms_p99")
        },
        "attribution": attribution.json_block(analysis),
        **({"cpu": jsonable(analysis.cpu.to_json())} if analysis.cpu is not None else {}),  # a CPU-only run's breakdown
        "rule_packs": list(packs),
        # the sources the findings cite, once (titles, sections, the original titles)
        "sources": {c.source.id: c.source.to_json() for f in findings for c in f.cites},
        "findings": [finding_json(f) for f in findings],
    }


def finding_json(f: Finding) -> dict[str, Any]:
    """One entry of ``findings.json`` (schema in docs/rules.md). Written here, where the
    findings are worded, not by the Finding: its estimate is numbers and a reason code, and
    the formula and the reason the entry carries are the sentences every report prints."""
    return {
        "id": f.rule_id,
        "title": f.title,
        "status": f.status,
        "severity": f.severity,
        "rank": f.rank,
        "metric": f.metric,
        "value": f.value,
        "comparator": f.comparator,
        "threshold": f.threshold,
        "threshold_origin": f.threshold_origin or None,
        "values": {k: m.to_json() for k, m in f.values.items()},
        "citation": f.citation,
        "citations": [c.to_json() for c in f.cites],
        "reason": finding_reason(f),
        "context": f.context,
        "estimate": None
        if f.estimate is None
        else {
            "kind": f.estimate_kind,
            "recovered_ms_per_step": f.estimate.ms_per_step,
            "formula": formula(f.estimate),
            "overlaps": f.overlaps,
        },
        "estimate_reason": estimate_reason(f),
        "projected": f.projected or None,
        "evidence": [evidence_json(e) for e in f.evidence],
        "remediation": None if f.remediation is None else f.remediation.to_json(),
    }


def render(findings: Sequence[Finding], analysis: Analysis, packs: Sequence[str] = ()) -> str:
    """findings.json text (indented, UTF-8 characters kept), written as every JSON file is
    (:func:`perfdoctor.io.dumps_json`); a path that is not UTF-8 (its bytes as surrogates)
    becomes "?" there, as io writes it."""
    return dumps_json(document(findings, analysis, packs)).encode("utf-8", "replace").decode("utf-8")
