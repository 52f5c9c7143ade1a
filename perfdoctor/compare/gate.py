"""Gate: turn a run (and optionally a baseline) into pass / fail for CI.

A gate is a list of checks; it fails when any check fails. Two kinds of check:

- **budgets** (``--fail-on EXPR``, need ``--baseline``): how far a metric may move from
  the baseline before the build fails. Grammar (whitespace is ignored)::

      EXPR   := METRIC ":" SIGN NUMBER ["%"]
      SIGN   := "+"   fails if the metric rises by more than NUMBER
              | "-"   fails if the metric falls by more than NUMBER
      "%"    := NUMBER is relative to the baseline value; without it, absolute (metric units)

  ``step_latency_ms_p99:+5%`` fails when p99 latency rises more than 5 %;
  ``dram_bw_util:-0.05`` fails when bandwidth utilization falls more than 0.05 (absolute);
  ``launches_per_step:+2`` fails when a step gains more than two launches.
  METRIC is a key of the metric contract; anything else is a usage error (exit 2).

  A metric summarising per-step samples (step latency percentiles, step GPU time,
  steps/s, tokens/s, kernels and launches per step) fails only when the change is also
  significant in the budget's direction, whenever both runs have at least 5 steps:
  Mann-Whitney p < 0.05 *and* a median shift beyond the run-to-run noise floor of that
  sample (:data:`perfdoctor.compare.samples.SAMPLE_NOISE_FLOORS`; the test alone sees only the spread
  within each run) — so run-to-run noise does not fail builds. With fewer steps the budget
  alone decides, and the check says it was not tested. Step latency percentiles are judged
  on the light timing pass (no tracer) when both runs are bundles that have one.

  Edge cases, decided and documented: a metric measured on one side only is reported as
  *added* or *removed* and skipped, not failed (a new collector is not a regression). A
  relative budget against a baseline of exactly 0 cannot be evaluated as a percentage: any
  move past 0 in the budget's direction fails (going from 0 to 3 host syncs per step is
  an unbounded relative rise), and the check reports the absolute change and suggests an
  absolute budget (``sync_calls_per_step:+1``) to allow some.

- **rules** (``--rules PACK``): one check per rule; a failing rule at or above
  ``--min-severity`` (default ``error``) fails the gate, a failing rule below it is skipped
  as "not gating", and a rule that could not be evaluated is skipped with its reason
  (never passed). See :mod:`perfdoctor.rules.engine`.

Runs that are not comparable (:mod:`perfdoctor.compare.comparability`: other GPU or vendor, world
size, workload kind, a whole-trace window against steps) get no verdict: every budget is
skipped as "not comparable", and the gate refuses with exit 2, saying why. Steps covering
different fractions of the profiled span skip the budgets on the span's metrics
(``Diff.not_comparable_metrics``); if nothing else was checked, the gate refuses too.

Exit codes: 0 pass, 1 gate failed, 2 usage or input error — including a gate in which
every check was skipped (a gate that checked nothing must not pass a build) and a baseline
that is not comparable with the run.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from perfdoctor.compare.comparability import Mismatch
from perfdoctor.compare.diff import Diff, MetricChange, Missing, NotComparable, diff_runs, metric_status
from perfdoctor.compare.samples import LIGHT_PREFIX, SAMPLED_METRICS
from perfdoctor.compare.stats import Comparison
from perfdoctor.errors import UsageError
from perfdoctor.analysis.metrics import HIGHER_IS_BETTER, METRIC_UNITS
from perfdoctor.compare.processes import BudgetJudgement, ProcessComparison, judge_budget

if TYPE_CHECKING:
    from perfdoctor.pipeline import Diagnosis
    from perfdoctor.rules.engine import Finding

SCHEMA = "perfdoctor.gate/1"
EXIT_PASS, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
# A budget the processes could not decide (its interval straddles the budget): a regression
# the gate cannot rule out must not pass CI silently, nor be called a failure; its own code,
# unless the team chooses (--inconclusive pass|fail). See docs/ci.md.
EXIT_INCONCLUSIVE = 3
INCONCLUSIVE_POLICIES = ("pass", "fail")

_BUDGET = re.compile(r"^(?P<metric>[A-Za-z_][A-Za-z0-9_]*):(?P<sign>[+-])(?P<amount>\d+(?:\.\d*)?|\.\d+)(?:[eE](?P<exp>[+-]?\d+))?(?P<pct>%?)$")


# --------------------------------------------------------------------------- budgets


@dataclass(frozen=True)
class Budget:
    metric: str
    sign: int  # +1: a rise is the regression; -1: a fall is
    amount: float  # >= 0, percent when relative, metric units otherwise
    relative: bool
    text: str  # as the user wrote it (normalized whitespace), names the check


def parse_budget(text: str) -> Budget:
    """Parse ``METRIC:+N%`` / ``METRIC:-N`` (see the module docstring); UsageError if malformed."""
    compact = re.sub(r"\s+", "", text)
    m = _BUDGET.match(compact)
    if not m:
        if ":" in compact and compact.split(":", 1)[1][:1] not in "+-":
            raise UsageError(
                f"budget {text!r}: say which way is a regression with a sign: "
                f"'{compact.split(':', 1)[0]}:+N' (fails if it rises) or ':-N' (fails if it falls)"
            )
        raise UsageError(
            f"budget {text!r}: expected METRIC:+N%, METRIC:-N% (relative) or METRIC:+N, METRIC:-N (absolute), "
            "e.g. step_latency_ms_p99:+5%"
        )
    metric = m["metric"]
    if metric not in METRIC_UNITS:
        close = difflib.get_close_matches(metric, list(METRIC_UNITS), n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else f"; known: {', '.join(METRIC_UNITS)}"
        raise UsageError(f"budget {text!r}: unknown metric {metric!r}{hint}")
    amount = float(m["amount"] + (f"e{m['exp']}" if m["exp"] else ""))
    if not math.isfinite(amount):
        raise UsageError(f"budget {text!r}: {m['amount']}{'e' + m['exp'] if m['exp'] else ''} is not a finite number")
    return Budget(metric, +1 if m["sign"] == "+" else -1, amount, bool(m["pct"]), compact)


# --------------------------------------------------------------------------- checks


@dataclass
class Check:
    """One check's status, what decided it and its numbers; :mod:`perfdoctor.reports.gate_report`
    words it (``message``: gate.json, JUnit, the summary and the terminal say the same sentence)
    and lays out its numbers (``details``, as gate.json has them)."""

    name: str  # what JUnit and the summary call it, e.g. "budget step_latency_ms_p99:+5%"
    kind: str  # "budget" | "rule"
    status: str  # "pass" | "fail" | "inconclusive" | "skip"
    # what decided the status. A budget: "within" | "noise" (over it, not a significant change) |
    # "untested" (over it, too few steps to test) | "regressed" | "not finite" | "absent" | "added"
    # | "removed" | "not comparable" | "processes". A rule: its finding's status, or "not gating".
    outcome: str
    # the reason from below: the metric's (Missing), the processes' (a ProcessComparison that could
    # not judge, or the BudgetJudgement over them), the refusal (NotComparable); a rule's is its finding's
    why: Missing | ProcessComparison | BudgetJudgement | NotComparable | None = None
    budget: Budget | None = None  # what a budget check checked
    measured: MetricChange | None = None  # a budget: the metric as compared, baseline (before) → run (after)
    significance: Comparison | None = None  # a budget over it on a sampled metric: the test of measured.sample
    processes: ProcessComparison | None = None  # a budget judged over processes: their comparison
    finding: Finding | None = None  # what a rule check checked
    min_severity: str | None = None  # a rule check: the severity from which a failing rule gates


def evaluate_budget(budget: Budget, diff: Diff) -> Check:
    """Check one budget against a diff of baseline (before) → run (after).

    A step latency percentile is judged on the light timing pass (no tracer) when both runs
    have one: tracing perturbs launch-bound steps 2-3x, so the untraced numbers are the ones
    a latency budget means. When both runs are repeated bundles (``perfdoctor run
    --repeat``), a step latency percentile is judged over processes instead
    (:func:`process_budget`).
    """
    over_processes = diff.processes.get(budget.metric)
    if over_processes is not None and over_processes.repeated:
        return process_budget(budget, over_processes)
    light = LIGHT_PREFIX + budget.metric
    m: MetricChange = diff.metric(light) if diff.has_metric(light) else diff.metric(budget.metric)
    name = f"budget {budget.text}"
    if m.status in ("absent", "added", "removed"):
        assert m.reason is None or isinstance(m.reason, Missing)
        return Check(name, "budget", "skip", m.status, why=m.reason, budget=budget, measured=m)

    assert m.before is not None and m.after is not None and m.change is not None
    if not all(math.isfinite(v) for v in (m.before, m.after, m.change)):
        # Fail closed: a NaN compares false with everything, so it would pass any budget.
        return Check(name, "budget", "fail", "not finite", budget=budget, measured=m)
    moved = budget.sign * m.change  # > 0: moved the way the budget guards against
    if budget.relative and m.before == 0:
        over = moved > 0  # any move from 0 is an unbounded relative change
    elif budget.relative:
        over = moved / abs(m.before) * 100.0 > budget.amount
    else:
        over = moved > budget.amount
    # bundles, but not repeated on both sides: the processes say why they could not judge
    why = over_processes
    if not over:
        return Check(name, "budget", "pass", "within", why=why, budget=budget, measured=m)

    if m.sample is not None:
        sample_sign = SAMPLED_METRICS.get(m.key, (m.sample, +1))[1]
        comp = diff.samples.get(m.sample)
        if comp is not None:
            if comp.verdict == "inconclusive":
                return Check(name, "budget", "fail", "untested", why=why, budget=budget, measured=m, significance=comp)
            metric_rose = (comp.verdict == "higher") == (sample_sign > 0)
            significant = comp.verdict != "no significant change" and metric_rose == (budget.sign > 0)
            return Check(name, "budget", "fail" if significant else "pass", "regressed" if significant else "noise",
                         why=why, budget=budget, measured=m, significance=comp)
    return Check(name, "budget", "fail", "regressed", why=why, budget=budget, measured=m)


def process_budget(budget: Budget, comp: ProcessComparison) -> Check:
    """A budget judged over processes: the ratio after/before of the geometric means of the
    per-process values, with its interval (:func:`perfdoctor.compare.processes.judge_budget`). An
    absolute budget becomes a ratio of the baseline's geometric mean (``+0.5`` ms on a 10 ms
    baseline allows 1.05x)."""
    i = comp.interval
    assert i is not None
    base = float(np.exp(np.mean(np.log(comp.before))))
    value = base * i.ratio
    allowed = budget.amount / 100.0 if budget.relative else budget.amount / base
    judgement = judge_budget(comp, 1.0 + budget.sign * allowed, budget.sign)
    better = HIGHER_IS_BETTER.get(budget.metric)
    measured = MetricChange(budget.metric, METRIC_UNITS[budget.metric], base, value, value - base, i.ratio - 1.0,
                            better, metric_status(base, value, better), judgement.verdict, "processes", comp)
    status = "inconclusive" if judgement.verdict.startswith("inconclusive") else judgement.status
    return Check(f"budget {budget.text}", "budget", status, "processes", why=judgement, budget=budget,
                 measured=measured, processes=comp)


def rule_checks(findings: list[Finding], min_severity: str) -> list[Check]:
    """One check per rule finding (the run diagnosed with ``--rules``: "seed" for the built-in
    pack, or TOML files layered on it, as in ``analyze``): a failing rule at or above
    ``min_severity`` fails the gate. Below ``min_severity`` a failing rule is
    skipped ("not gating"), and so are rules that could not be evaluated (metric missing:
    never a pass) and advisory rules.
    """
    from perfdoctor.rules.engine import SEVERITIES, SEVERITY_RANK

    if min_severity not in SEVERITY_RANK:
        raise UsageError(f"--min-severity {min_severity!r}: use one of {', '.join(SEVERITIES)}")
    checks = []
    for f in findings:
        if f.status == "fail":
            gating = SEVERITY_RANK[f.severity] >= SEVERITY_RANK[min_severity]
            status, outcome = ("fail", "fail") if gating else ("skip", "not gating")
        else:  # a pass passes; a rule not evaluated (never a pass) or advisory is skipped
            status, outcome = "pass" if f.status == "pass" else "skip", f.status
        checks.append(Check(f"rule {f.rule_id}", "rule", status, outcome, finding=f, min_severity=min_severity))
    return checks


# --------------------------------------------------------------------------- the gate


@dataclass
class GateResult:
    run: str
    baseline: str | None
    checks: list[Check]
    warnings: list[Mismatch]  # facts that differ between baseline and run (each warned about)
    diff: Diff | None
    refused: NotComparable | None = None  # why, when the baseline cannot be compared with the run
    inconclusive_policy: str | None = None  # None: its own exit code; "pass" / "fail": counted as that

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.status == "fail"]

    @property
    def inconclusive(self) -> list[Check]:
        return [c for c in self.checks if c.status == "inconclusive"]

    @property
    def passed(self) -> bool:
        """No failure, a verdict, and nothing undecided (unless the team counts it as a pass)."""
        undecided = bool(self.inconclusive) and self.inconclusive_policy != "pass"
        return not self.failed and self.refused is None and not undecided  # no verdict is not a pass

    @property
    def evaluated(self) -> list[Check]:
        return [c for c in self.checks if c.status != "skip"]

    @property
    def exit_code(self) -> int:
        """0 pass, 1 fail; 2 when nothing could be evaluated (a gate that checked nothing
        must not pass a build: the runs lack what the checks need) and when the baseline is
        not comparable with the run (no verdict)."""
        if self.refused is not None:
            return EXIT_USAGE
        if self.failed or (self.inconclusive and self.inconclusive_policy == "fail"):
            return EXIT_FAIL
        if self.inconclusive and self.inconclusive_policy is None:
            return EXIT_INCONCLUSIVE
        return EXIT_PASS if self.evaluated else EXIT_USAGE


def evaluate_gate(
    run: Diagnosis,
    baseline: Diagnosis | None,
    budgets: list[Budget],
    rules: list[Check] | None = None,
    noise_floor: float | None = None,
) -> GateResult:
    """Pure: the checks of a gate from loaded runs, parsed budgets and evaluated rule checks.

    ``noise_floor`` overrides the diff's run-to-run noise floors (relative, e.g. 0.1).
    """
    if budgets and baseline is None:
        raise UsageError("--fail-on budgets compare against a baseline: give --baseline RUN")
    diff = diff_runs(baseline, run, noise_floor) if baseline is not None else None
    refused = diff.not_comparable() if diff is not None else None
    checks = []
    for b in budgets if diff is not None else []:
        why = refused or diff.not_comparable_metrics.get(b.metric)
        if why:
            checks.append(Check(f"budget {b.text}", "budget", "skip", "not comparable", why=why, budget=b))
        else:
            checks.append(evaluate_budget(b, diff))
    checks += rules or []
    if refused is None and checks and all(c.status == "skip" for c in checks) and any(c.outcome == "not comparable" for c in checks):
        refused = next(c.why for c in checks if c.outcome == "not comparable")
    warnings = list(diff.mismatches) if diff is not None else []
    return GateResult(run.label, baseline.label if baseline else None, checks, warnings, diff, refused)


def merge_gates(results: dict[int, GateResult]) -> GateResult:
    """One gate over every rank (:func:`perfdoctor.pipeline.paired_ranks` pairs them): it fails when a
    check fails on any rank; each rank's checks named ``rank k: ...``, warnings once."""
    checks, warnings = [], []
    for rank, r in results.items():
        for c in r.checks:
            c.name = f"rank {rank}: {c.name}"
            checks.append(c)
        warnings += [w for w in r.warnings if w not in warnings]
    first = next(iter(results.values()))
    return GateResult(first.run, first.baseline, checks, warnings, first.diff)
