"""The process as the unit of replication: per-process step latencies of a run bundle, and
their comparison between two runs (what ``diff`` and ``gate`` use on repeated bundles).

Steps inside one process are correlated — they share its clocks, its CPU placement, its
allocator state — so the spread of steps inside one process says little about how a second
process of the same program will do (on the H200 two plain processes of a host-paced loop
differed by up to 1.65x in median step). ``perfdoctor run --repeat N`` runs the light
timing pass N times, each a fresh process (:mod:`perfdoctor.repeats`), and keeps each
process's steady step latencies in ``manifest.json``::

    "repeat": {"requested": N, "order": ["light", "light-2", ...],
               "processes": [{"pass": "light", "file": "raw/light.json",
                              "step_latency_ms": [...], "steps_seen": 40, "steady_start": 0,
                              "warmup": 0, "exit_code": 0}, ...]}

A process left out of the statistics (it failed, or its step was a different one) carries
``"excluded": "why"`` instead of latencies being used.

Here, each process gives one number per metric — its p50 (or p90, p99) step latency — and
two runs are compared by the ratio of their geometric means over processes with a Welch
t-interval on the logarithms (:func:`perfdoctor.stats.welch_log_ratio`, which says why not
a bootstrap). A budget (``step_latency_ms_p50:+5%``) fails only when the whole interval lies
beyond it; an interval that straddles it is "inconclusive — too few processes for the
budget", with an estimate of how many processes per side would decide it. A bundle without
``repeat`` is one process: it keeps the step-level comparison of :mod:`perfdoctor.diff`,
whose verdict then says it cannot tell process noise from a change.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from perfdoctor.errors import UsageError
from perfdoctor.stats import LogRatioInterval, t_ppf, welch_log_ratio

LEVEL = 0.95
MIN_PROCESSES = 2  # a spread over processes needs two of them per side
# Metrics one process gives one value of (its percentile of steady step latencies), and
# which percentile. Other metrics keep their per-step comparison.
PROCESS_METRICS: dict[str, float] = {"step_latency_ms_p50": 50, "step_latency_ms_p90": 90, "step_latency_ms_p99": 99}
ONE_PROCESS_NOTE = (
    "one process per side: process-to-process noise cannot be told apart from a change "
    "(perfdoctor run --repeat N gives a confidence interval over processes)"
)


def process_latencies(manifest: dict[str, Any], where: str = "manifest.json") -> list[list[float]]:
    """Each included process's steady step latencies (ms), from a bundle manifest.

    A bundle without ``repeat`` is its light pass alone (one process, or none when it has no
    light pass). A ``repeat`` of the wrong shape is a UsageError naming the field.
    """
    repeat = manifest.get("repeat")
    if repeat is None:
        lat = (manifest.get("light_pass") or {}).get("step_latency_ms")
        return [list(lat)] if lat else []
    if not isinstance(repeat, dict) or not isinstance(repeat.get("processes"), list):
        raise UsageError(f"{where}: field 'repeat.processes': expected a list of processes")
    out = []
    for i, proc in enumerate(repeat["processes"]):
        if not isinstance(proc, dict):
            raise UsageError(f"{where}: field 'repeat.processes[{i}]': expected a JSON object")
        if proc.get("excluded"):
            continue
        lat = proc.get("step_latency_ms")
        ok = isinstance(lat, list) and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0 for x in lat
        )
        if not ok:
            raise UsageError(f"{where}: field 'repeat.processes[{i}].step_latency_ms': expected a list of positive numbers")
        if lat:
            out.append([float(x) for x in lat])
    return out


def per_process(latencies: list[list[float]], q: float) -> list[float]:
    """The ``q`` percentile of each process's steps (linear interpolation, as the metrics)."""
    return [float(np.percentile(lat, q)) for lat in latencies]


def spread(values: list[float]) -> dict[str, Any]:
    """How much processes differ: median, min, max, max/min and the coefficient of variation."""
    v = np.asarray(values, dtype=float)
    out: dict[str, Any] = {"processes": len(v), "values": [round(x, 6) for x in v.tolist()]}
    if len(v):
        out.update(median=float(np.median(v)), min=float(v.min()), max=float(v.max()), max_over_min=float(v.max() / v.min()))
    out["cv"] = float(v.std(ddof=1) / v.mean()) if len(v) >= 2 else None
    return out


@dataclass(frozen=True)
class ProcessComparison:
    """One metric compared over processes: the values, the interval and a verdict."""

    metric: str
    before: list[float]  # one value per process
    after: list[float]
    interval: LogRatioInterval | None  # None below MIN_PROCESSES on a side
    verdict: str  # "regressed" | "improved" | "no significant change" | "inconclusive"
    reason: str

    @property
    def repeated(self) -> bool:
        return self.interval is not None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "metric": self.metric,
            "unit": "process",
            "before": spread(self.before),
            "after": spread(self.after),
            "verdict": self.verdict,
            "reason": self.reason,
            "test": "welch t-interval on log per-process values",
        }
        if self.interval is not None:
            i = self.interval
            out["ratio"] = {"value": i.ratio, "low": i.low, "high": i.high, "level": i.level, "df": i.df, "se_log": i.se_log}
        return out


def compare_processes(metric: str, before: list[float], after: list[float], level: float = LEVEL) -> ProcessComparison:
    """Latency-like metric (lower is better) over processes: regressed when the whole
    interval of after/before lies above 1, improved when below, else no significant change;
    inconclusive with fewer than two processes on a side."""
    if min(len(before), len(after)) < MIN_PROCESSES:
        why = ONE_PROCESS_NOTE if min(len(before), len(after)) == 1 else "no process with steps on one side"
        return ProcessComparison(metric, before, after, None, "inconclusive", f"inconclusive — {why}")
    i = welch_log_ratio(before, after, level)
    ci = f"{i.ratio:.3f}x ({i.level:.0%} CI {i.low:.3f}–{i.high:.3f}, {i.n_before} vs {i.n_after} processes)"
    if i.low > 1.0:
        return ProcessComparison(metric, before, after, i, "regressed", f"{ci}: the interval lies above 1")
    if i.high < 1.0:
        return ProcessComparison(metric, before, after, i, "improved", f"{ci}: the interval lies below 1")
    return ProcessComparison(metric, before, after, i, "no significant change", f"{ci}: the interval contains 1")


def compare_runs(manifest_before: dict[str, Any], manifest_after: dict[str, Any]) -> dict[str, ProcessComparison]:
    """Every process metric both bundles can give (empty when either side has no process)."""
    lb, la = process_latencies(manifest_before, "baseline manifest.json"), process_latencies(manifest_after, "manifest.json")
    if not lb or not la:
        return {}
    return {m: compare_processes(m, per_process(lb, q), per_process(la, q)) for m, q in PROCESS_METRICS.items()}


def processes_needed(interval: LogRatioInterval, bound: float, level: float = LEVEL, most: int = 200) -> int | None:
    """Processes per side for the interval to clear ``bound`` (a ratio), if the observed
    ratio and spread stay as they are: the smallest n with ``t(df) * s * sqrt(2/n) <
    |log ratio - log bound|``, s the pooled log spread per process. None when the ratio sits
    on the bound (no n decides it) or beyond ``most``."""
    gap = abs(math.log(interval.ratio) - math.log(bound))
    n0 = (interval.n_before + interval.n_after) / 2.0
    s = interval.se_log * math.sqrt(n0 / 2.0)  # per-process log spread, from se = s * sqrt(2/n)
    if gap == 0.0:
        return None
    for n in range(MIN_PROCESSES, most + 1):
        if t_ppf(0.5 + level / 2.0, 2 * n - 2) * s * math.sqrt(2.0 / n) < gap:
            return n
    return None


@dataclass(frozen=True)
class BudgetJudgement:
    status: str  # "pass" | "fail"
    verdict: str  # "regressed" | "improved" | "no significant change" | "inconclusive — too few processes for the budget"
    message: str


def judge_budget(comp: ProcessComparison, bound: float, sign: int, budget_text: str) -> BudgetJudgement:
    """A budget on a process metric: ``bound`` is the ratio after/before the budget allows
    (1.05 for ``+5%``; 0.95 for ``-5%``), ``sign`` +1 when a rise is the regression.

    Fails only when the whole interval lies beyond the bound. Within it — the whole interval
    on the allowed side — passes, and says improved when the interval also clears 1 the good
    way. Straddling the bound passes (nothing shows the budget was exceeded) as
    "inconclusive — too few processes for the budget", with how many would decide it.
    """
    i = comp.interval
    assert i is not None
    ci = f"{i.ratio:.3f}x, {i.level:.0%} CI {i.low:.3f}–{i.high:.3f} over {i.n_before} vs {i.n_after} processes"
    beyond = i.low > bound if sign > 0 else i.high < bound
    within = i.high <= bound if sign > 0 else i.low >= bound
    if beyond:
        return BudgetJudgement("fail", "regressed", f"regressed past its budget: {ci}, all beyond {bound:.3f} ({budget_text})")
    if within:
        better = i.high < 1.0 if sign > 0 else i.low > 1.0
        verdict = "improved" if better else "no significant change"
        return BudgetJudgement("pass", verdict, f"within budget: {ci}, all on the allowed side of {bound:.3f} ({verdict})")
    n = processes_needed(i, bound)
    more = f"about {n} processes per side would decide it at this spread" if n else "the ratio sits on the budget"
    return BudgetJudgement(
        "pass", "inconclusive — too few processes for the budget",
        f"inconclusive — too few processes for the budget: {ci} straddles {bound:.3f}; not failed, since the interval "
        f"does not lie beyond the budget ({more})",
    )
