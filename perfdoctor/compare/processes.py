"""The process as the unit of replication: per-process step latencies of a run bundle, and
their comparison between two runs (what ``diff`` and ``gate`` use on repeated bundles).

Steps inside one process are correlated — they share its clocks, its CPU placement, its
allocator state — so the spread of steps inside one process says little about how a second
process of the same program will do (on the H200 two plain processes of a host-paced loop
differed by up to 1.65x in median step). ``perfdoctor run --repeat N`` runs the light
timing pass N times, each a fresh process (:mod:`perfdoctor.record.repeats`), and keeps each
process's steady step latencies in ``manifest.json``::

    "repeat": {"requested": N, "order": ["light", "light-2", ...],
               "processes": [{"pass": "light", "file": "raw/light.json",
                              "step_latency_ms": [...], "steps_seen": 40, "steady_start": 0,
                              "warmup": 0, "exit_code": 0}, ...]}

A process left out of the statistics (it failed, or its step was a different one) carries
``"excluded": "why"`` instead of latencies being used.

Here, each process gives one number per metric — its p50 (or p90, p99) step latency — and
two runs are compared by the ratio of their geometric means over processes with a Welch
t-interval on the logarithms (:func:`perfdoctor.compare.stats.welch_log_ratio`, which says why not
a bootstrap). The two bundles of one ``compare-programs`` run (``repeat.pairing``: the same
id, sides A and B) ran their processes interleaved, A1 B1 A2 B2 ...: they are compared
pair by pair (:func:`perfdoctor.compare.stats.paired_log_ratio`), so what drifts between pairs —
another job's load on a shared runner — cancels; pairs run in lockstep
(``compare-programs --lockstep``) share even the seconds-long speed changes of one CPU, and
only the pairs that took turns are compared. A budget (``step_latency_ms_p50:+5%``) fails only when the whole interval lies
beyond it; an interval that straddles it is "inconclusive — too few processes for the
budget", with an estimate of how many processes per side would decide it. A bundle without
``repeat`` is one process: it keeps the step-level comparison of :mod:`perfdoctor.compare.diff`,
whose verdict then says it cannot tell process noise from a change.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from perfdoctor.bundle.layout import MANIFEST
from perfdoctor.bundle.protocol import Manifest, Pairing, RepeatProcess
from perfdoctor.errors import UsageError
from perfdoctor.compare.stats import LogRatioInterval, paired_log_ratio, t_ppf, welch_log_ratio

LEVEL = 0.95
MIN_PROCESSES = 2  # a spread over processes needs two of them per side
# Metrics one process gives one value of (its percentile of steady step latencies), and
# which percentile. Other metrics keep their per-step comparison.
PROCESS_METRICS: dict[str, float] = {"step_latency_ms_p50": 50, "step_latency_ms_p90": 90, "step_latency_ms_p99": 99}


def _all_processes(manifest: Manifest, where: str) -> list[list[float] | None]:
    """Every process in run order: its steady step latencies, or None when it is excluded
    or has no steps. A ``repeat`` of the wrong shape is a UsageError naming the field."""
    repeat = manifest.repeat
    if repeat is None:
        lat = manifest.light_pass.step_latency_ms if manifest.light_pass is not None else None
        return [list(lat)] if lat else []
    if not isinstance(repeat, dict) or not isinstance(repeat.get("processes"), list):
        raise UsageError(f"{where}: field 'repeat.processes': expected a list of processes")
    out: list[list[float] | None] = []
    for i, proc in enumerate(repeat["processes"]):
        if not isinstance(proc, dict):
            raise UsageError(f"{where}: field 'repeat.processes[{i}]': expected a JSON object")
        process = RepeatProcess.from_json(proc)
        lat = None if process.excluded else process.step_latency_ms
        ok = lat is None or isinstance(lat, list) and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0 for x in lat
        )
        if not ok:
            raise UsageError(f"{where}: field 'repeat.processes[{i}].step_latency_ms': expected a list of positive numbers")
        out.append([float(x) for x in lat] if lat else None)
    return out


def process_latencies(manifest: Manifest, where: str = MANIFEST) -> list[list[float]]:
    """Each included process's steady step latencies (ms), from a bundle manifest.

    A bundle without ``repeat`` is its light pass alone (one process, or none when it has no
    light pass).
    """
    return [lat for lat in _all_processes(manifest, where) if lat is not None]


def pairing(manifest_before: Manifest, manifest_after: Manifest) -> Pairing | None:
    """The ``repeat.pairing`` of the ``compare-programs`` run both bundles come from (their
    processes ran interleaved, pair k side by side; ``lockstep``: at once, taking turns), or None."""
    docs = [m.repeat.get("pairing") if isinstance(m.repeat, dict) else None for m in (manifest_before, manifest_after)]
    if not all(isinstance(doc, dict) for doc in docs):
        return None
    pb, pa = (Pairing.from_json(doc) for doc in docs)
    return pb if pb.id and pb.id == pa.id and pb.side != pa.side else None


def _took_turns(manifest: Manifest) -> list[bool]:
    """Per process: did it run in lockstep (took at least one turn)?"""
    turns = (RepeatProcess.from_json(p).lockstep for p in manifest.repeat["processes"])  # type: ignore[index]
    return [isinstance(t, dict) and bool(t.get("turns")) for t in turns]


def per_process(latencies: list[list[float]], q: float) -> list[float]:
    """The ``q`` percentile of each process's steps (linear interpolation, as the metrics)."""
    return [float(np.percentile(lat, q)) for lat in latencies]


def spread(values: list[float]) -> dict[str, Any]:
    """How much processes differ: median, min, max, max/min and the coefficient of variation."""
    v = np.asarray(values, dtype=float)
    out: dict[str, Any] = {"processes": len(v), "values": [round(x, 6) for x in v.tolist()]}
    if len(v):
        with np.errstate(over="ignore"):  # a max/min past the float range is infinite (null in JSON)
            out.update(median=_median(v), min=float(v.min()), max=float(v.max()), max_over_min=float(v.max() / v.min()))
    unit = v / v.max() if len(v) else v  # the cv on v / max: no overflow near 1e308, no underflow to 0 near 1e-308
    out["cv"] = float(unit.std(ddof=1) / unit.mean()) if len(v) >= 2 else None
    return out


def _median(v: np.ndarray) -> float:
    """The median; when that overflows (two values near the top of the float range, 1e308 ms,
    averaged), the median of ``v / max``, times max."""
    with np.errstate(over="ignore"):
        out = float(np.median(v))
    return out if math.isfinite(out) else float(np.median(v / v.max())) * float(v.max())


@dataclass(frozen=True)
class ProcessComparison:
    """One metric compared over processes: the values, the interval and a verdict. Why is
    in the numbers: fewer than :data:`MIN_PROCESSES` on a side (one, or none), else where the
    interval lies against 1; :func:`perfdoctor.reports.diff_report.process_reason` words it."""

    metric: str
    before: list[float]  # one value per process
    after: list[float]
    interval: LogRatioInterval | None  # None below MIN_PROCESSES on a side
    verdict: str  # "regressed" | "improved" | "no significant change" | "inconclusive"
    paired: bool = False  # before[k] and after[k] ran side by side (compare-programs)
    lockstep: bool = False  # ... at once, on one CPU, taking turns step by step

    @property
    def repeated(self) -> bool:
        return self.interval is not None


def compare_processes(metric: str, before: list[float], after: list[float], level: float = LEVEL,
                      paired: bool = False, lockstep: bool = False) -> ProcessComparison:
    """Latency-like metric (lower is better) over processes: regressed when the whole
    interval of after/before lies above 1, improved when below, else no significant change;
    inconclusive with fewer than two processes on a side. ``paired``: ``before[k]`` and
    ``after[k]`` ran side by side, and the interval is the paired one (what drifts between
    pairs cancels; ``lockstep``: the pairs ran at once, taking turns); else Welch's."""
    if min(len(before), len(after)) < MIN_PROCESSES:
        return ProcessComparison(metric, before, after, None, "inconclusive")
    i = paired_log_ratio(before, after, level) if paired else welch_log_ratio(before, after, level)
    verdict = "regressed" if i.low > 1.0 else "improved" if i.high < 1.0 else "no significant change"
    return ProcessComparison(metric, before, after, i, verdict, paired, paired and lockstep)


def compare_runs(manifest_before: Manifest, manifest_after: Manifest) -> dict[str, ProcessComparison]:
    """Every process metric both bundles can give (empty when either side has no process).
    Bundles of one ``compare-programs`` run are compared pair by pair (a pair with an
    excluded process is left out; of a ``--lockstep`` run, only the pairs that took turns);
    any others, side against side."""
    wb, wa = f"baseline {MANIFEST}", MANIFEST
    pb, pa = _all_processes(manifest_before, wb), _all_processes(manifest_after, wa)
    pair = pairing(manifest_before, manifest_after)
    paired = pair is not None and len(pb) == len(pa)
    lockstep = paired and bool(pair.lockstep)
    if paired:
        keep = [True] * len(pb)
        if lockstep:
            keep = [x and y for x, y in zip(_took_turns(manifest_before), _took_turns(manifest_after))]
        pairs = [(b, a) for b, a, k in zip(pb, pa, keep) if b is not None and a is not None and k]
        pb, pa = [b for b, _ in pairs], [a for _, a in pairs]
    lb, la = [x for x in pb if x is not None], [x for x in pa if x is not None]
    if not lb or not la:
        return {}
    return {m: compare_processes(m, per_process(lb, q), per_process(la, q), paired=paired, lockstep=lockstep)
            for m, q in PROCESS_METRICS.items()}


def processes_needed(interval: LogRatioInterval, bound: float, level: float = LEVEL, most: int = 200,
                     paired: bool = False) -> int | None:
    """Processes per side for the interval to clear ``bound`` (a ratio), if the observed
    ratio and spread stay as they are: the smallest n with ``t(df(n)) * se(n) < |log ratio -
    log bound|``, where ``se(n) = se * sqrt(n0 / n)`` scales the observed standard error
    from its n0 processes per side, and df is ``2n - 2`` (Welch, about) or ``n - 1``
    (paired). None when the ratio sits on the bound (no n decides it) or beyond ``most``,
    or is itself past the float range (0 or infinite: runs 1e-308 against 1e308 ms)."""
    if not 0.0 < interval.ratio < math.inf:
        return None
    gap = abs(math.log(interval.ratio) - math.log(bound))
    n0 = (interval.n_before + interval.n_after) / 2.0
    if gap == 0.0:
        return None
    for n in range(MIN_PROCESSES, most + 1):
        if t_ppf(0.5 + level / 2.0, n - 1 if paired else 2 * n - 2) * interval.se_log * math.sqrt(n0 / n) < gap:
            return n
    return None


INCONCLUSIVE_BUDGET = "inconclusive — too few processes for the budget"


@dataclass(frozen=True)
class BudgetJudgement:
    """A budget judged over processes, for :func:`perfdoctor.reports.gate_report.message` to word."""

    status: str  # "pass" | "fail"
    verdict: str  # "regressed" | "improved" | "no significant change" | INCONCLUSIVE_BUDGET
    where: str  # where the interval lies against the bound: "beyond" | "within" | "straddles"
    bound: float  # the ratio after/before the budget allows
    interval: LogRatioInterval
    needed: int | None = None  # straddles: processes per side that would decide it (processes_needed)


def judge_budget(comp: ProcessComparison, bound: float, sign: int) -> BudgetJudgement:
    """A budget on a process metric: ``bound`` is the ratio after/before the budget allows
    (1.05 for ``+5%``; 0.95 for ``-5%``), ``sign`` +1 when a rise is the regression.

    Fails only when the whole interval lies beyond the bound. Within it — the whole interval
    on the allowed side — passes, and says improved when the interval also clears 1 the good
    way. Straddling the bound passes (nothing shows the budget was exceeded) as
    "inconclusive — too few processes for the budget", with how many would decide it.
    """
    i = comp.interval
    assert i is not None
    beyond = i.low > bound if sign > 0 else i.high < bound
    within = i.high <= bound if sign > 0 else i.low >= bound
    if beyond:
        return BudgetJudgement("fail", "regressed", "beyond", bound, i)
    if within:
        better = i.high < 1.0 if sign > 0 else i.low > 1.0
        return BudgetJudgement("pass", "improved" if better else "no significant change", "within", bound, i)
    return BudgetJudgement("pass", INCONCLUSIVE_BUDGET, "straddles", bound, i, processes_needed(i, bound, paired=comp.paired))
