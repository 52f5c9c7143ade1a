"""What every findings report says, worded once: values with units, the verdict, estimates.

The terminal, Markdown, HTML and JSON reports differ in layout only; the sentences come from
here and the numbers from :mod:`perfdoctor.text`, so the four never disagree.
"""

from __future__ import annotations

from typing import Sequence

from perfdoctor.analysis.metrics import Analysis, Metric
from perfdoctor.bundle.protocol import PassRun
from perfdoctor.text import count, num, percent, setting, value
from perfdoctor.reports import evidence
from perfdoctor.reports.estimates import needs
from perfdoctor.rules.engine import STATUS_ORDER, Finding, Rule, verdict
from perfdoctor.rules.reasons import Fallback, Lowered, Missing, OffWorkload, Reason, Suppressed


def fmt_metric(m: Metric) -> str:
    """The value, and any disagreeing source beside it: ``81.0 % (nvml-gpm says 52.3 %)``."""
    text = value(m.value, m.unit)
    if m.alternatives:
        text += " (" + ", ".join(f"{a['source']} says {value(a['value'], m.unit)}" for a in m.alternatives) + ")"
    return text


def cell(v: object) -> object:
    """An evidence table's cell for a person: a number with a meaning as findings.json words
    it (:func:`perfdoctor.reports.evidence.cell`), a number through :func:`num` (the rows keep
    floats for findings.json, and ``str`` would print 863 kernels per step as ``863.0``),
    anything else as it is."""
    v = evidence.cell(v)
    return num(v) if isinstance(v, float) else v


def unit_of(finding: Finding) -> str:
    m = finding.values.get(finding.metric or "")
    return m.unit if m is not None else ""


def condition(finding: Finding) -> str:
    """``< 15 %`` — the pass condition in the metric's unit."""
    if finding.comparator is None or finding.threshold is None:
        return "advisory"
    unit = unit_of(finding) or "ratio"
    return f"{finding.comparator} {value(finding.threshold, unit)}"


def rule_condition(rule: Rule) -> str:
    """``memory_bubble_ratio < 0.15`` — the condition under which the rule passes, as its pack
    sets it (`rules list`, `rules explain`)."""
    if rule.advisory:
        return "advisory (no threshold)"
    return f"{rule.metrics[0]} {rule.comparator} {setting(rule.threshold)}"


def measured(finding: Finding) -> str:
    """``memory_bubble_ratio = 94.1 %`` (+ the metric's note, e.g. "lower bound: ...")."""
    if finding.metric is None:
        return ""
    m = finding.values[finding.metric]
    note = f" ({m.note})" if m.note else ""
    return f"{finding.metric} = {fmt_metric(m)}{note}"


def context_values(finding: Finding) -> str:
    """The other values the rule shows: ``launches_per_step = 945, kernels_per_step = 945``."""
    return ", ".join(f"{k} = {fmt_metric(m)}" for k, m in finding.values.items() if k != finding.metric)


NOT_APPLICABLE = "not applicable: "
NOT_JUDGED = "not judged: "  # a workload rule on a trace whose workload is unknown


def _missing_why(r: Missing) -> str:
    """Why the metric is absent, as it follows the metric's name: ``needs KEY (WHY)``."""
    why = (r.why or "not collected").rstrip(".")
    return why.removeprefix("needs ")  # the metric's reason often starts so


def _scope(r: OffWorkload) -> tuple[str, str, str]:
    """(prefix, what the rule is for, what the trace is) of a rule for another workload: the
    last part is what a row of several such rules says once (:func:`not_evaluated_rows`)."""
    w, kinds = r.workload, "/".join(r.rule)
    if not r.judged:
        return NOT_JUDGED, f"{kinds}-only rule", f"the workload is unknown ({w.text.removeprefix('unknown: ')}); --workload training|inference sets it"
    if w.kind == "training" and "training" not in r.rule:
        # an inference task's rule on a training trace: "inference-only", naming the tasks
        tasks = "" if r.rule == ("inference",) else f" (a rule for {kinds})"
        return NOT_APPLICABLE, "inference-only rule", f"this trace is {w.text}{tasks}"
    return NOT_APPLICABLE, f"{kinds}-only rule", f"this trace is {w.text} (task {w.task_text})"


def reason_words(r: Reason) -> str:
    """One reason of a finding (:mod:`perfdoctor.rules.reasons`) as every report says it."""
    if isinstance(r, Missing):
        collect = f"; collect it with {r.collect}" if r.collect else ""
        return f"needs {' or '.join(r.keys)} ({_missing_why(r)}){collect}"
    if isinstance(r, OffWorkload):
        prefix, rule, trace = _scope(r)
        return f"{prefix}{rule}; {trace}"
    if isinstance(r, Suppressed):
        return f"{NOT_APPLICABLE}{r.by} failed ({r.title})"
    if isinstance(r, Fallback):
        return f"uses {r.used} because {r.preferred} is absent: {r.why or 'not collected'}"
    if isinstance(r, Lowered):
        return f"severity {r.was} → {r.to}: {value(r.ms, 'ms')} of a {value(r.step_ms, 'ms')} step ({percent(r.ms / r.step_ms)}) is at stake"
    raise TypeError(f"no words for the reason {r!r}")


def finding_reason(finding: Finding) -> str | None:
    """Why the finding is not evaluated, or what changed its metric or severity; None: nothing."""
    return "; ".join(reason_words(r) for r in finding.reasons) or None


def how_to_collect(finding: Finding) -> str:
    """What a not-evaluated finding would need: the pack's way to collect its metric, else its reason."""
    r = finding.reasons[0] if finding.reasons else None
    if isinstance(r, Missing) and r.collect:
        return r.collect
    return finding_reason(finding) or "no reason given"


def estimate_line(finding: Finding, analysis: Analysis) -> str | None:
    """``~33.9 ms per step → 26.2 → 235 steps/s`` or None when the rule has no estimate."""
    ms = finding.recovered_ms
    if ms is None:
        return None
    text = f"~{num(ms)} ms per step recoverable"
    p = finding.projected
    sps = analysis.value("steps_per_s")
    if p.get("steps_per_s") and sps:
        text += f" → {num(sps)} → {num(p['steps_per_s'])} steps/s if fixed"
        tps = analysis.value("tokens_per_s")
        if p.get("tokens_per_s") and tps:
            text += f" ({num(tps)} → {num(p['tokens_per_s'])} tokens/s)"
    return text


def estimate_reason(finding: Finding) -> str | None:
    """Why a failure has no estimate (what its estimator needed, or the pack's word), or None."""
    return None if finding.estimate_reason is None else needs(finding.estimate_reason)


def no_estimate_line(finding: Finding) -> str | None:
    """``No estimate: <why>`` for a failure that cannot say what fixing it wins back."""
    why = estimate_reason(finding)
    if finding.status != "fail" or finding.recovered_ms is not None or not why:
        return None
    return f"No estimate: {why}"


def overlap_line(finding: Finding) -> str | None:
    if not finding.overlaps:
        return None
    return "same time as " + ", ".join(finding.overlaps) + " (not additive)"


def run_failure(analysis: Analysis) -> str | None:
    """Why the recorded run is not a whole one, from its bundle's manifest: the program
    exited non-zero (or was killed, interrupted, timed out), or one of its passes crashed.
    None for a trace file, or a run that ended cleanly or as --duration stopped it."""
    b = analysis.profile.origin.bundle
    if b is None:
        return None
    # a pass --duration stopped ended as asked, whatever its status (SIGTERM's)
    crashed = [p for p in map(PassRun.from_json, b.passes) if p.exit_code not in (0, None) and not p.stopped]
    error = next((p.program_error for p in crashed if p.program_error), None)
    why = f" ({error})" if error else ""
    code = b.exit_code
    if b.status in ("interrupted", "timed out"):
        return f"the run was {b.status} (exit code {code})"
    if code not in (0, None):
        return f"the program exited with code {code}{why}"
    if crashed:
        p = crashed[0]
        return f"the {p.name or '?'} pass crashed (exit code {p.exit_code}){why}"
    return None


def outcome(findings: Sequence[Finding], analysis: Analysis) -> str:
    """The report's verdict, said honestly: "crashed" (the run did not end cleanly: see
    :func:`run_failure`), "fail", "inconclusive" (none fails but most checks could not be
    evaluated: too little evidence for a pass), "pass", or "not_evaluated" (none could be)."""
    if run_failure(analysis) is not None:
        return "crashed"
    v = verdict(findings)
    c = v["counts"]
    if v["top"] is not None:
        return "fail"
    if not (c["pass"] or c["note"]):
        return "not_evaluated"
    return "inconclusive" if c["pass"] < c["not_evaluated"] else "pass"


def counts_text(c: dict[str, int]) -> str:
    """The checks counted: the failures at info are notes, not failing checks (``verdict``)."""
    total = sum(c[s] for s in STATUS_ORDER)
    text = f"{c['fail'] - c['note']} of {total} checks fail, {c['pass']} pass, {c['not_evaluated']} not evaluated"
    return text + (f", {c['note']} note{'s' if c['note'] > 1 else ''} (info)" if c["note"] else "")


HEADS = {"crashed": "CRASHED", "fail": "FAIL", "inconclusive": "INCONCLUSIVE", "pass": "PASS", "not_evaluated": "NOT EVALUATED"}


def verdict_line(findings: Sequence[Finding], analysis: Analysis) -> str:
    """One line: the outcome first (a crash before anything else), the counts, and the top
    finding with what fixing it would give."""
    v = verdict(findings)
    status = outcome(findings, analysis)
    counts = counts_text(v["counts"])
    if status == "crashed":
        parts = [f"CRASHED: {run_failure(analysis)}", f"the checks cover what ran before it: {counts}"]
    elif status == "inconclusive":
        parts = [f"INCONCLUSIVE: too little evidence, {counts} (no failure, but most checks need data this run lacks)"]
    else:
        parts = [f"{HEADS[status]}: {counts}"]
    top = next((f for f in findings if f.rule_id == v["top"]), None)
    if top is not None:
        est = estimate_line(top, analysis)
        parts.append(f"top: {top.rule_id}" + (f" ({est})" if est else ""))
    if v["notes"] and top is None:  # else the counts say how many; the findings list names them
        parts.append(f"note{'s' if len(v['notes']) > 1 else ''}: {', '.join(v['notes'])}")
    seen = analysis.cpu.observations if analysis.cpu is not None else []
    if seen:
        # a CPU-only run's GPU checks cannot run: what its breakdown shows is its finding
        # (pytorch-tabnet's fit read "0 of 34 checks fail" above "CPU 1. The step waits for its data")
        parts.append(f"CPU: {count(len(seen))} observation{'s' if len(seen) > 1 else ''}, first: {seen[0].title} "
                     f"(up to {value(seen[0].ms_per_step, 'ms')} per step)")
    return " — ".join(parts)


def evidence_owner(findings: Sequence[Finding]) -> dict[tuple[str, str], str]:
    """For each (finding id, evidence kind) shown earlier by another finding, that finding's id.

    Several failures share one evidence table (the largest gaps explain both the bubbles
    and the low kernel share); reports print it once and point back to it.
    """
    first: dict[str, str] = {}
    seen: dict[tuple[str, str], str] = {}
    for f in findings:
        for e in f.evidence:
            if e.kind in first:
                seen[(f.rule_id, e.kind)] = first[e.kind]
            else:
                first[e.kind] = f.rule_id
    return seen


def causes(failing: Sequence[Finding]) -> list[tuple[Finding, list[Finding]]]:
    """Failures grouped by cause: rules that share one estimate (the same milliseconds
    recoverable, one formula) are one finding, the first ranked leading and the others
    named under it, so a 21 ms estimate is said once, not five times."""
    groups: list[tuple[Finding, list[Finding]]] = []
    lead_of: dict[float, list[Finding]] = {}
    for f in failing:
        ms = f.recovered_ms
        if ms is not None and ms in lead_of:
            lead_of[ms].append(f)
            continue
        same: list[Finding] = []
        groups.append((f, same))
        if ms is not None:
            lead_of[ms] = same
    return groups


def by_status(findings: Sequence[Finding], status: str) -> list[Finding]:
    return [f for f in findings if f.status == status]


def source_line(analysis: Analysis) -> str:
    """``trace.json.gz (kineto) · NVIDIA H200 · 5 steps 'decode_step'``."""
    origin = analysis.profile.origin
    dev = analysis.profile.device.get("name") or "unknown device"
    steps = analysis.steps
    step = f"{steps.count} steps {steps.name!r}" if steps.name else (steps.reason or "no steps")
    if steps.name and steps.how:
        step += f" ({steps.how})"
    return f"{origin.path or 'trace'} ({origin.source or '?'}) · {dev} · {step}"


# Words of a not-evaluated reason that name GPU work or a GPU tool: on a run where no GPU
# ran, such a check is one of "the checks of GPU work", not a row of its own.
GPU_WORDS = ("GPU", "CUDA", "kernel", "NVML", "Nsight", "ncu", "DRAM", "memory clock", "hardware counters", "occupancy")


def about_gpu(reason: str) -> bool:
    return any(w in reason for w in GPU_WORDS)


def not_evaluated_view(missing: Sequence[Finding], no_gpu: bool) -> tuple[list[str], list[tuple[list[str], str]]]:
    """What the reports say of the checks not evaluated: where no GPU ran, the ids of the
    checks of GPU work (that one fact is their reason, said once); then one row per cause
    of the others (:func:`not_evaluated_rows`)."""
    gpu = [f for f in missing if no_gpu and about_gpu(finding_reason(f) or "")]
    return [f.rule_id for f in gpu], not_evaluated_rows([f for f in missing if f not in gpu])


Row = tuple[list[str], str, "tuple[str, str, str] | None"]  # rule ids, reason, the scope of a rule for another workload


def not_evaluated_rows(missing: Sequence[Finding]) -> list[tuple[list[str], str]]:
    """(rule ids, reason) per cause: rules whose metrics are missing for one reason share a
    row (each metric named, each way to collect said once, a way that another contains
    dropped), in the order of their first rule; rules for other workloads than this trace's
    share one (:func:`_merge_scoped`)."""
    groups: dict[str, list[tuple[str, str, str]]] = {}
    scopes: dict[str, tuple[str, str, str]] = {}
    for f in missing:
        r = f.reasons[0] if f.reasons else None
        if isinstance(r, Missing):
            key, why, how = " or ".join(r.keys), _missing_why(r), r.collect
        else:
            key, why, how = "", finding_reason(f) or "", ""
            if isinstance(r, OffWorkload):
                scopes[why] = _scope(r)
        groups.setdefault(why, []).append((f.rule_id, key, how))
    rows: list[Row] = []
    for why, members in groups.items():
        ids = [m[0] for m in members]
        keys = list(dict.fromkeys(m[1] for m in members if m[1]))
        hows = list(dict.fromkeys(m[2] for m in members if m[2]))
        hows = [h for h in hows if not any(h != o and h in o for o in hows)]
        text = (f"needs {', '.join(keys)} ({why})" if keys else why) + (f"; collect it with {' / '.join(hows)}" if hows else "")
        rows.append((ids, text, scopes.get(why)))
    for prefix in (NOT_APPLICABLE, NOT_JUDGED):
        rows = _merge_scoped(rows, prefix)
    return [(ids, text) for ids, text, _ in rows]


def _merge_scoped(rows: list[Row], prefix: str) -> list[Row]:
    """Rules not applicable for one workload evidence ("not applicable: KIND rule; this trace
    is ...") in one row, each kind named with its rules; likewise the rules not judged on an
    unknown workload ("not judged: KIND rule; the workload is unknown ...")."""
    scoped = [(ids, scope) for ids, _, scope in rows if scope is not None and scope[0] == prefix]
    if len(scoped) < 2 or len({trace for _, (_, _, trace) in scoped}) > 1:
        return rows
    kinds = "; ".join(f"{rule} ({', '.join(ids)})" for ids, (_, rule, _) in scoped)
    merged: Row = ([i for ids, _ in scoped for i in ids], f"{prefix}{kinds}; {scoped[0][1][2]}", None)
    first = next(k for k, (_, _, scope) in enumerate(rows) if scope is not None and scope[0] == prefix)
    rest = [row for row in rows if not (row[2] is not None and row[2][0] == prefix)]
    return rest[:first] + [merged] + rest[first:]


def named_not_evaluated(findings: Sequence[Finding]) -> set[str]:
    """The metric keys the not-evaluated checks name as missing (each said there, with why)."""
    return {k for f in by_status(findings, "not_evaluated") for r in f.reasons[:1] if isinstance(r, Missing) for k in r.keys}
