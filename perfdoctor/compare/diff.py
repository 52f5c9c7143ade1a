"""Diff: what a change did to performance, from two diagnosed runs.

``diff_runs(before, after)`` is pure: two :class:`~perfdoctor.pipeline.Diagnosis` (a Profile,
its Analysis and, when rules ran, their findings) in, a :class:`Diff` out. It answers four questions:

1. **Metrics** — every key of the metric contract, before and after, the change, and
   whether that is better or worse (``perfdoctor.analysis.metrics.HIGHER_IS_BETTER``).
2. **Is it real?** — step-level samples (:mod:`perfdoctor.compare.samples`: latency, GPU window,
   completion interval, kernels and launches per step) are compared with a Mann-Whitney U
   test and a bootstrap interval of the median ratio (:mod:`perfdoctor.compare.stats`), with a
   run-to-run noise floor. A metric built from those samples gets a verdict: improved /
   regressed / no significant change / inconclusive (too few steps).
3. **Which kernels?** — :mod:`perfdoctor.compare.kernels`, and copies per step
   (:mod:`perfdoctor.compare.lead`).
4. **Like for like?** — :mod:`perfdoctor.compare.comparability`: mismatched facts are a loud
   warning, some are *blocking* (the diff gives no verdict), and steps that cover different
   fractions of the profiled span make the span's metrics "not comparable"
   (``Diff.not_comparable_metrics``), not the per-step samples.

The Diff holds numbers and reasons; :mod:`perfdoctor.reports.diff_report` words them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from perfdoctor.analysis.metrics import HIGHER_IS_BETTER, METRIC_UNITS, Analysis
from perfdoctor.compare.comparability import Mismatch, UnknownFact, check_comparable, run_facts
from perfdoctor.compare.kernels import KernelDiff, compare_kernels
from perfdoctor.compare.lead import CopyChange, compare_copies
from perfdoctor.compare.processes import ProcessComparison, compare_runs
from perfdoctor.compare.samples import LIGHT_PREFIX, LIGHT_SAMPLE, SAMPLED_METRICS, compare_step_samples, step_samples
from perfdoctor.compare.stats import Comparison

if TYPE_CHECKING:
    from perfdoctor.pipeline import Diagnosis

SCHEMA = "perfdoctor.diff/1"

# Relative changes smaller than this (0.1 %) are "unchanged": reports print 3-4 significant
# digits, and calling a 1e-6 wiggle of a ratio "worse" would be rounding dressed as a finding.
UNCHANGED_REL = 1e-3
NOT_COMPARABLE = "not comparable"  # the verdict of every metric row when the runs are not comparable


# --------------------------------------------------------------------------- metrics


@dataclass(frozen=True)
class Missing:
    """Why a metric is absent on a side: the analysis's own reason (its words: analysis/ keeps
    its notes as sentences), and which side (None: neither side has it)."""

    side: str | None  # "before" | "after" | None
    reason: str


@dataclass
class MetricChange:
    key: str
    unit: str
    before: float | None
    after: float | None
    change: float | None  # after − before
    change_rel: float | None  # (after − before) / |before|; None when before is 0 or absent
    higher_is_better: bool | None
    status: str  # "better" | "worse" | "unchanged" | "changed" | "added" | "removed" | "absent"
    # for metrics built from step samples: "improved" | "regressed" | "no significant change"
    # | "inconclusive — need more steps" (| "higher/lower (significant)" when no direction)
    verdict: str | None
    sample: str | None  # the step sample behind the verdict
    # why absent (Missing), why inconclusive (the sample's Comparison), or the judgement over
    # processes (ProcessComparison); perfdoctor.reports.diff_report.reason words it
    reason: Missing | Comparison | ProcessComparison | None = None


def metric_status(before: float | None, after: float | None, better: bool | None) -> str:
    if before is None and after is None:
        return "absent"
    if before is None:
        return "added"
    if after is None:
        return "removed"
    scale = max(abs(before), abs(after))
    if scale == 0 or abs(after - before) <= UNCHANGED_REL * scale:
        return "unchanged"
    if better is None:
        return "changed"
    return "better" if (after > before) == better else "worse"


def _metric_verdict(key: str, comparisons: dict[str, Comparison], better: bool | None) -> tuple[str | None, str | None]:
    """(verdict, sample name) for a metric summarising step samples, else (None, None)."""
    if key not in SAMPLED_METRICS:
        return None, None
    sample, sign = SAMPLED_METRICS[key]
    comp = comparisons.get(sample)
    if comp is None:
        return None, None
    if comp.verdict == "inconclusive":
        return "inconclusive — need more steps", sample
    if comp.verdict == "no significant change":
        return "no significant change", sample
    metric_rose = (comp.verdict == "higher") == (sign > 0)
    if better is None:
        return ("higher" if metric_rose else "lower") + " (significant)", sample
    return ("improved" if metric_rose == better else "regressed"), sample


def compare_metrics(before: Analysis, after: Analysis, comparisons: dict[str, Comparison]) -> list[MetricChange]:
    """One row per metric key of the contract, in the contract's order."""
    rows = []
    for key, unit in METRIC_UNITS.items():
        mb, ma = before.metrics.get(key), after.metrics.get(key)
        b = None if mb is None else mb.value
        a = None if ma is None else ma.value
        better = HIGHER_IS_BETTER.get(key)
        change = a - b if a is not None and b is not None else None
        change_rel = change / abs(b) if change is not None and b != 0 else None
        status = metric_status(b, a, better)
        verdict, sample = (None, None)
        if b is not None and a is not None:
            verdict, sample = _metric_verdict(key, comparisons, better)
        reason: Missing | Comparison | None = None
        if status == "absent":
            why = (mb.reason if mb is not None else None) or (ma.reason if ma is not None else None)
            reason = Missing(None, why) if why else None
        elif status == "added":
            reason = Missing("before", mb.reason) if mb is not None and mb.reason else None
        elif status == "removed":
            reason = Missing("after", ma.reason) if ma is not None and ma.reason else None
        elif verdict and verdict.startswith("inconclusive"):
            reason = comparisons[sample]
        rows.append(MetricChange(key, unit, b, a, change, change_rel, better, status, verdict, sample, reason))
    return rows

# --------------------------------------------------------------------------- findings


@dataclass
class FindingsDiff:
    fixed: list[str]  # failed before, pass after
    new: list[str]  # pass before, fail after
    persisting: list[str]  # fail on both sides
    unknown: list[str]  # fail on one side, not evaluated on the other (say so, claim nothing)

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def compare_findings(before: Diagnosis, after: Diagnosis) -> FindingsDiff | None:
    """Rules fixed, newly failing, still failing; None when rules did not run on both sides."""
    if before.findings is None or after.findings is None:
        return None
    b = {f.rule_id: f.status for f in before.findings}
    a = {f.rule_id: f.status for f in after.findings}
    ids = sorted(set(a) | set(b))

    def pick(want_b: str, want_a: str) -> list[str]:
        return [i for i in ids if b.get(i) == want_b and a.get(i) == want_a]

    unknown = [i for i in ids if "fail" in (b.get(i), a.get(i)) and "not_evaluated" in (b.get(i), a.get(i))]
    return FindingsDiff(fixed=pick("fail", "pass"), new=pick("pass", "fail"), persisting=pick("fail", "fail"), unknown=unknown)


# --------------------------------------------------------------------------- the diff


@dataclass(frozen=True)
class NotComparable:
    """Why numbers are not compared, for :func:`perfdoctor.reports.diff_report.refusal` to word:
    the mismatches behind it, for the whole diff (``metric`` None: the blocking ones) or for
    one metric."""

    mismatches: tuple[Mismatch, ...]
    metric: str | None = None


@dataclass
class Diff:
    before: str
    after: str
    metrics: list[MetricChange]
    samples: dict[str, Comparison]
    kernels: KernelDiff
    mismatches: list[Mismatch]
    unknown_facts: list[UnknownFact]
    facts_before: dict[str, Any]
    facts_after: dict[str, Any]
    findings: FindingsDiff | None
    copies: list[CopyChange] = field(default_factory=list)  # copies and memsets per step (perfdoctor.compare.lead)
    not_comparable_metrics: dict[str, NotComparable] = field(default_factory=dict)  # metric -> why it is not compared
    # over processes (perfdoctor.compare.processes), when both runs are bundles with light passes
    processes: dict[str, ProcessComparison] = field(default_factory=dict)

    def metric(self, key: str) -> MetricChange:
        return next(m for m in self.metrics if m.key == key)

    def has_metric(self, key: str) -> bool:
        return any(m.key == key for m in self.metrics)

    @property
    def comparable(self) -> bool:
        return not self.mismatches

    @property
    def blocking(self) -> list[Mismatch]:
        """The mismatches that make a verdict meaningless (empty: the runs are comparable)."""
        return [m for m in self.mismatches if m.blocking]

    def not_comparable(self) -> NotComparable | None:
        """The blocking mismatches when the whole diff is not comparable (no verdict), else None."""
        return NotComparable(tuple(self.blocking)) if self.blocking else None

    @property
    def latency_sample(self) -> str:
        """The sample step latency is judged on: the light timing pass (no tracer) when both
        runs have one — tracing inflates the step time of launch-bound code 2-3x — else the
        traced steps."""
        return LIGHT_SAMPLE if LIGHT_SAMPLE in self.samples else "step_latency_ms"

    @property
    def scoped(self) -> list[Mismatch]:
        """Mismatches that make some metrics, not the whole diff, not comparable."""
        return [m for m in self.mismatches if m.metrics and not m.blocking]


def light_metrics(before: dict[str, np.ndarray], after: dict[str, np.ndarray], comparisons: dict[str, Comparison]) -> list[MetricChange]:
    """Step latency percentiles of the light timing pass (no tracer), when both runs have one
    (``before`` and ``after``: their :func:`~perfdoctor.compare.samples.step_samples`).

    Named ``light_step_latency_ms_pNN``; same definition as the traced percentiles (linear
    interpolation), measured without a profiler perturbing the steps.
    """
    lb, la = before.get(LIGHT_SAMPLE), after.get(LIGHT_SAMPLE)
    if lb is None or la is None or not len(lb) or not len(la):
        return []
    rows = []
    for q in (50, 90, 99):
        b, a = float(np.percentile(lb, q)), float(np.percentile(la, q))
        comp = comparisons[LIGHT_SAMPLE]
        verdict = {"lower": "improved", "higher": "regressed", "no significant change": "no significant change"}.get(
            comp.verdict, "inconclusive — need more steps"
        )
        rows.append(
            MetricChange(
                key=f"{LIGHT_PREFIX}step_latency_ms_p{q}", unit="ms", before=b, after=a, change=a - b,
                change_rel=(a - b) / b if b else None, higher_is_better=False,
                status=metric_status(b, a, False), verdict=verdict, sample=LIGHT_SAMPLE,
                reason=comp if comp.verdict == "inconclusive" else None,
            )
        )
    return rows


def diff_runs(before: Diagnosis, after: Diagnosis, noise_floor: float | None = None) -> Diff:
    """Compare two runs: metrics, step statistics, kernels, findings and comparability.

    ``noise_floor`` (relative, e.g. 0.1) overrides the run-to-run noise floors of the
    timing samples (SAMPLE_NOISE_FLOORS).
    """
    sb, sa = step_samples(before.analysis), step_samples(after.analysis)
    samples = compare_step_samples(sb, sa, noise_floor)
    facts_before, facts_after = run_facts(before), run_facts(after)
    mismatches, unknown = check_comparable(facts_before, facts_after)
    processes = compare_runs(before.manifest, after.manifest) if before.manifest is not None and after.manifest is not None else {}
    metrics = compare_metrics(before.analysis, after.analysis, samples) + light_metrics(sb, sa, samples)
    for m in metrics:
        # Repeated bundles: a latency percentile's verdict is the one over processes (the
        # values stay the first process's, as in its metrics.json).
        over = processes.get(m.key.removeprefix(LIGHT_PREFIX))
        if over is not None and over.repeated and m.verdict is not None:
            m.verdict, m.sample, m.reason = over.verdict, "processes", over
    excluded = _not_comparable_metrics(before.analysis, after.analysis, mismatches, metrics)
    for m in metrics:  # the numbers stay; a judgement on unlike windows would mislead
        if m.key in excluded and (m.verdict is not None or m.status in ("better", "worse")):
            m.verdict = NOT_COMPARABLE
    return Diff(
        before=before.label,
        after=after.label,
        metrics=metrics,
        samples=samples,
        kernels=compare_kernels(before.analysis, after.analysis),
        mismatches=mismatches,
        unknown_facts=unknown,
        facts_before=facts_before,
        facts_after=facts_after,
        findings=compare_findings(before, after),
        copies=compare_copies(before.analysis, after.analysis),
        not_comparable_metrics=excluded,
        processes=processes,
    )


def _not_comparable_metrics(before: Analysis, after: Analysis, mismatches: list[Mismatch],
                            rows: list[MetricChange]) -> dict[str, NotComparable]:
    """Metric key -> why it is not compared: every metric under a blocking mismatch; the
    span metrics under a coverage mismatch, unless both sides took them from the light
    timing pass (no span: the coverage of the traced window does not enter them)."""
    blocking = tuple(m for m in mismatches if m.blocking)
    if blocking:
        return {r.key: NotComparable(blocking, r.key) for r in rows}
    out = {}
    for m in mismatches:
        for key in m.metrics:
            sources = [a.metrics[key].source for a in (before, after) if key in a.metrics]
            if sources and all("light" in (s or "") for s in sources):
                continue
            out[key] = NotComparable((m,), key)
    return out
