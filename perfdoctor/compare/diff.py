"""Diff: what a change did to performance, from two analysed runs.

``diff_runs(before, after)`` is pure: two :class:`~perfdoctor.pipeline.Diagnosis` (a Profile,
its Analysis and, when rules ran, their findings) in, a :class:`Diff` out. It answers four questions:

1. **Metrics** — every key of the metric contract, before and after, the change, and
   whether that is better or worse (``perfdoctor.analysis.metrics.HIGHER_IS_BETTER``).
2. **Is it real?** — step-level samples (latency, GPU window, completion interval, kernels
   and launches per step) are compared with a Mann-Whitney U test and a bootstrap interval
   of the median ratio (:mod:`perfdoctor.compare.stats`), with a run-to-run noise floor because
   the test sees only the spread within each run. A metric built from those samples gets
   a verdict: improved / regressed / no significant change / inconclusive (too few steps).
3. **Which kernels?** — kernels matched across runs by a normalized name (template
   arguments, argument lists and numeric or hex suffixes removed, so ``gemm<128, 4>`` and
   a recompiled ``triton_poi_fused_add_7`` still match), with count and time per step
   before and after, and the ones that appeared or vanished.
4. **Like for like?** — GPU model, driver, CUDA driver and runtime, torch, step name and
   tokens per step; any mismatch is a loud warning, because a diff across different GPUs measures
   the GPUs, not the change. Some mismatches are *blocking* (:mod:`perfdoctor.compare.comparability`:
   GPU model or vendor, world size, workload kind, a whole-trace window against steps): the
   diff then says "not comparable" before anything else and gives no verdict. Steps that
   cover different fractions of the profiled span make the span's metrics "not comparable"
   (``Diff.not_comparable_metrics``), not the per-step samples.

Across vendors, kernels that find no partner by name are matched by family and operation
(:mod:`perfdoctor.compare.crossvendor`); what changed in counts — kernels and copies per step —
leads the report when it explains the change (counted in :mod:`perfdoctor.compare.lead`, worded
by :func:`perfdoctor.reports.diff_report.lead_lines`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from perfdoctor.compare import comparability

from perfdoctor.compare import crossvendor
from perfdoctor.compare.lead import CopyChange, compare_copies
from perfdoctor.names.kernels import match_keys
from perfdoctor.analysis.metrics import HIGHER_IS_BETTER, METRIC_UNITS, Analysis, jsonable
from perfdoctor.compare.processes import ONE_PROCESS_NOTE, ProcessComparison, compare_runs
from perfdoctor.compare.stats import Comparison, compare_samples

if TYPE_CHECKING:
    from perfdoctor.pipeline import Diagnosis

SCHEMA = "perfdoctor.diff/1"

# Which step-level sample each metric summarises, and whether the metric moves with the
# samples (+1: higher samples → higher metric) or against them (-1: steps_per_s falls when
# the completion interval grows). Metrics not listed are single numbers per run: their
# change is reported, but no test can say whether it exceeds run-to-run noise.
SAMPLED_METRICS: dict[str, tuple[str, int]] = {
    "step_latency_ms_p50": ("step_latency_ms", +1),
    "step_latency_ms_p90": ("step_latency_ms", +1),
    "step_latency_ms_p99": ("step_latency_ms", +1),
    "step_gpu_ms_p50": ("step_gpu_ms", +1),
    "steps_per_s": ("step_interval_ms", -1),
    "tokens_per_s": ("step_interval_ms", -1),
    "kernels_per_step": ("kernels_per_step", +1),
    "launches_per_step": ("launches_per_step", +1),
}

# Relative changes smaller than this (0.1 %) are "unchanged": reports print 3-4 significant
# digits, and calling a 1e-6 wiggle of a ratio "worse" would be rounding dressed as a finding.
UNCHANGED_REL = 1e-3
NOT_COMPARABLE = "not comparable"  # the verdict of every metric row when the runs are not comparable


# --------------------------------------------------------------------------- samples


def step_samples(analysis: Analysis) -> dict[str, np.ndarray]:
    """Per-step samples of one run, keyed by the names in SAMPLED_METRICS, read from the
    analysis's timeline (:mod:`perfdoctor.analysis.timeline`).

    ``step_latency_ms``: the critical-path time (the contract's latency) — of the light
    pass's steady steps when the run has one, as the step latency metrics are, else traced;
    ``step_gpu_ms``: length of the step's GPU window; ``step_interval_ms``: time between
    consecutive step completions (what ``steps_per_s`` averages); kernel and launch counts.
    The light timing pass of ``perfdoctor run``, when present, adds
    ``light_step_latency_ms``: its critical-path times over its steady state.
    """
    tl = analysis.timeline
    t, w = tl.steps, tl.with_gpu
    gpu_end = w["gpu_end_ns"].astype("int64").to_numpy()
    gpu_start = w["gpu_start_ns"].astype("int64").to_numpy()
    out = {
        "step_latency_ms": tl.critical_path_ms(),
        "step_gpu_ms": (gpu_end - gpu_start) / 1e6,
        "step_interval_ms": np.diff(np.sort(gpu_end)) / 1e6,
        "kernels_per_step": t["kernels"].to_numpy(dtype=float),
        "launches_per_step": t["launches"].to_numpy(dtype=float),
    }
    light = analysis.light
    if light is not None and light.count:
        from perfdoctor.analysis.steady import steady_series

        out["light_step_latency_ms"] = steady_series(light.host_start_ns, light.gpu_end_ns, light.steady_start).critical_path_ms
        # The step latency metrics come from the light pass (contract v2): test their
        # change on the samples they are computed from, not on the traced steps.
        out["step_latency_ms"] = out["light_step_latency_ms"]
    return out


# Run-to-run noise floors per sample: a significant median shift within a factor
# 1 + floor either way is "no significant change" (see stats.compare_samples).
# Traced timings: two identical processes of the decode fixtures on the H200 differ by a
# factor 1.20 (graph: tests/fixtures/h200-decode-graph-10steps vs -rerun; cudaGraphLaunch
# took 1.5 vs 0.85 ms under CUPTI) and 1.28 (eager: h200-decode-eager-5steps vs -rerun) in
# median step latency, while each run's steps spread by a few percent: a within-run test
# alone calls tracer noise a change. Two pairs are little data: revisit with more. The
# light pass has no tracer, but it is one process too: on the H200 test machine a
# host-paced loop's median step differed by up to 1.65x between plain processes of one
# program (docs/performance.md, 2026-11-30), so its 5 % is meant for steps the GPU paces
# (a GPU-bound loop's plain processes spread 3.7 %, and its light pass matched them to
# 0.1 % in median); measure two bundles of your program on your runner and pass --noise-floor.
TRACED_NOISE_FLOOR = 0.30
LIGHT_NOISE_FLOOR = 0.05
SAMPLE_NOISE_FLOORS = {
    "step_latency_ms": TRACED_NOISE_FLOOR,
    "step_gpu_ms": TRACED_NOISE_FLOOR,
    "step_interval_ms": TRACED_NOISE_FLOOR,
    "light_step_latency_ms": LIGHT_NOISE_FLOOR,
    "kernels_per_step": 0.0,  # counts are exact: any significant shift is real
    "launches_per_step": 0.0,
}
LIGHT_PREFIX = "light_"  # metric rows computed from the light timing pass

SAMPLE_UNITS = {
    "step_latency_ms": "ms",
    "step_gpu_ms": "ms",
    "step_interval_ms": "ms",
    "kernels_per_step": "count",
    "launches_per_step": "count",
    "light_step_latency_ms": "ms",
}


# --------------------------------------------------------------------------- metrics


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
    reason: str | None = None  # why absent, or why inconclusive

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _metric_status(before: float | None, after: float | None, better: bool | None) -> str:
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
        status = _metric_status(b, a, better)
        verdict, sample = (None, None)
        if b is not None and a is not None:
            verdict, sample = _metric_verdict(key, comparisons, better)
        reason = None
        if status == "absent":
            reason = (mb.reason if mb is not None else None) or (ma.reason if ma is not None else None)
        elif status == "added":
            reason = f"before: {mb.reason}" if mb is not None and mb.reason else None
        elif status == "removed":
            reason = f"after: {ma.reason}" if ma is not None and ma.reason else None
        elif verdict and verdict.startswith("inconclusive"):
            reason = comparisons[sample].reason
        rows.append(MetricChange(key, unit, b, a, change, change_rel, better, status, verdict, sample, reason))
    return rows


# --------------------------------------------------------------------------- kernels

def kernel_table(analysis: Analysis) -> tuple[pd.DataFrame, int, str]:
    """Kernels of one run grouped by normalized name, per step.

    Counts kernels that start inside the profiled span S — the same population as
    ``kernels_per_step`` — divided by the number of steps. Without steps the whole trace is
    one window and the figures are per trace. Returns (table indexed by normalized name with
    count, time_us, variants; the divisor; "step" or "trace").
    """
    profile, steps = analysis.profile, analysis.steps
    k = profile.activities[profile.activities["kind"] == "kernel"]
    if steps.count > 0 and steps.span is not None:
        k = analysis.timeline.in_span
        k = k[k["kind"] == "kernel"]
        per, divisor = "step", steps.count
    else:
        per, divisor = "trace", 1
    if k.empty:
        empty = pd.DataFrame({"count": [], "time_us": [], "variants": []}, dtype=float)
        return empty, divisor, per
    names = match_keys(k["name"])
    dur_us = (k["end_ns"] - k["start_ns"]).to_numpy(dtype=float) / 1e3
    frame = pd.DataFrame({"key": names.to_numpy(), "raw": k["name"].to_numpy(), "dur": dur_us})
    g = frame.groupby("key")
    table = pd.DataFrame(
        {
            "count": g.size() / divisor,
            "time_us": g["dur"].sum() / divisor,
            "variants": g["raw"].nunique(),
        }
    )
    return table, divisor, per


@dataclass
class KernelChange:
    name: str  # normalized; "gemm (by family)" for a row matched by family across vendors
    status: str  # "matched" | "matched by family" | "appeared" | "vanished"
    count_before: float  # per step (or per trace, see KernelDiff.per)
    count_after: float
    time_us_before: float
    time_us_after: float
    variants_before: int
    variants_after: int

    @property
    def time_change_us(self) -> float:
        return self.time_us_after - self.time_us_before

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__, time_change_us=self.time_change_us)


@dataclass
class KernelDiff:
    per: str  # "step" when both runs have steps, else "trace"
    rows: list[KernelChange]  # sorted by |time change| per step, largest first
    kernels_before: float
    kernels_after: float
    names_before: int
    names_after: int
    launches_before: float | None  # launches_per_step: a graph replay is one launch of many kernels
    launches_after: float | None
    # across vendors (perfdoctor.compare.crossvendor): (before, after) vendors, rows merged by
    # family and op, and the names that found no counterpart on the other vendor
    vendors: tuple[str, str] | None = None
    matched_by_family: list[str] = field(default_factory=list)
    unmatched: list[str] = field(default_factory=list)

    @property
    def appeared(self) -> list[KernelChange]:
        return [r for r in self.rows if r.status == "appeared"]

    @property
    def vanished(self) -> list[KernelChange]:
        return [r for r in self.rows if r.status == "vanished"]

    def to_json(self) -> dict[str, Any]:
        return {
            "per": self.per,
            "kernels_before": self.kernels_before,
            "kernels_after": self.kernels_after,
            "names_before": self.names_before,
            "names_after": self.names_after,
            "launches_before": self.launches_before,
            "launches_after": self.launches_after,
            "appeared": [r.name for r in self.appeared],
            "vanished": [r.name for r in self.vanished],
            "vendors": list(self.vendors) if self.vendors else None,
            "matched_by_family": self.matched_by_family,
            "unmatched": self.unmatched,
            "rows": [r.to_json() for r in self.rows],
        }


def compare_kernels(before: Analysis, after: Analysis) -> KernelDiff:
    """Match kernels by normalized name and compare count and time per step.

    Across GPU vendors, kernels without a name partner are matched by family and op
    (:func:`perfdoctor.compare.crossvendor.match_by_family`); the rest are listed as unmatched.
    """
    tb, _, per_b = kernel_table(before)
    ta, _, per_a = kernel_table(after)
    per = "step" if per_b == per_a == "step" else "trace"
    vb, va = comparability.vendor(before.profile), comparability.vendor(after.profile)
    vendors, by_family, unmatched = None, [], []
    if vb is not None and va is not None and vb != va:
        vendors = (vb, va)
        tb, ta, by_family, unmatched = crossvendor.match_by_family(tb, ta)
    names = sorted(set(tb.index) | set(ta.index))
    rows = []
    for name in names:
        in_b, in_a = name in tb.index, name in ta.index
        matched = "matched by family" if name in by_family else "matched"
        rows.append(
            KernelChange(
                name=name,
                status=matched if in_b and in_a else ("vanished" if in_b else "appeared"),
                count_before=float(tb.at[name, "count"]) if in_b else 0.0,
                count_after=float(ta.at[name, "count"]) if in_a else 0.0,
                time_us_before=float(tb.at[name, "time_us"]) if in_b else 0.0,
                time_us_after=float(ta.at[name, "time_us"]) if in_a else 0.0,
                variants_before=int(tb.at[name, "variants"]) if in_b else 0,
                variants_after=int(ta.at[name, "variants"]) if in_a else 0,
            )
        )
    rows.sort(key=lambda r: (-abs(r.time_change_us), r.name))
    return KernelDiff(
        per=per,
        rows=rows,
        kernels_before=float(tb["count"].sum()),
        kernels_after=float(ta["count"].sum()),
        names_before=len(tb),
        names_after=len(ta),
        launches_before=before.value("launches_per_step"),
        launches_after=after.value("launches_per_step"),
        vendors=vendors,
        matched_by_family=by_family,
        unmatched=unmatched,
    )


# --------------------------------------------------------------------------- like for like


def run_facts(run: Diagnosis) -> dict[str, Any]:
    """What must match for two runs to be comparable, from the trace and the bundle.

    Sources: the trace header (Kineto ``deviceProperties``, ``cuda_driver_version``,
    ``cuda_runtime_version``; nsys ``TARGET_INFO_GPU``) via ``profile.device`` and
    ``profile.meta["versions"]``; for a run bundle also the manifest's ``gpu`` (NVML:
    driver build) and the torch version the bootstrap saw (``raw/<pass>.json``).
    ``driver`` is the NVML driver build ("580.95.05"); ``cuda_driver`` the CUDA API version
    the driver supports (13000): different facts, compared separately.
    """
    profile, steps = run.profile, run.analysis.steps
    versions = profile.meta.get("versions") or {}
    device = profile.device
    man = run.manifest or {}
    man_versions = man.get("versions") if isinstance(man.get("versions"), dict) else {}
    declared = (profile.meta.get("declared") or {}).get(steps.name or "", {})
    window = comparability.window_facts(run.analysis)  # vendor, world size, workload, the steps' window
    if man.get("world_size"):  # a multi-rank bundle's manifest knows its ranks even where its traces do not say
        window["world_size"] = man["world_size"]
    return window | {
        "gpu": device.get("name"),
        "driver": device.get("driver_version"),
        "cuda_driver": versions.get("cuda_driver_version") or device.get("cuda_driver_version"),
        "cuda_runtime": versions.get("cuda_runtime_version") or man_versions.get("cuda") or run.pass_env.get("cuda"),
        "torch": versions.get("torch") or man_versions.get("torch") or run.pass_env.get("torch"),
        "step_name": steps.name,
        "tokens_per_step": _tokens_per_step(run, declared),
    }


def _tokens_per_step(run: Diagnosis, declared: dict[str, Any]) -> float | None:
    tps = run.analysis.metrics.get("tokens_per_s")
    sps = run.analysis.metrics.get("steps_per_s")
    if tps is not None and tps.value is not None and sps is not None and sps.value:
        return tps.value / sps.value  # honours --tokens-per-step overrides as well
    return declared.get("tokens")


@dataclass
class Mismatch:
    field: str
    before: Any
    after: Any
    message: str
    blocking: bool = False  # the runs are not comparable: no verdict (perfdoctor.compare.comparability)
    metrics: tuple[str, ...] = ()  # not blocking, but these metrics are not comparable (different step coverage)

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


COMPARABILITY_FIELDS = {
    "gpu": "different GPU models: the diff measures the hardware, not your change",
    "driver": "different NVIDIA drivers: launch latency and clocks can differ",
    "cuda_driver": "different CUDA driver versions: launch latency and kernels can differ",
    "cuda_runtime": "different CUDA runtimes: libraries pick different kernels",
    "torch": "different torch versions: operators and kernels can differ",
    "step_name": "different step ranges: the runs may not measure the same unit of work",
    "tokens_per_step": "different tokens per step: per-step numbers are not comparable",
}


# Mismatches of these fields make the runs not comparable (blocking), the others warn.
BLOCKING_FIELDS = frozenset({"gpu"}) | frozenset(comparability.WINDOW_FIELDS) - {"step_coverage"}


def check_comparable(before: Diagnosis, after: Diagnosis) -> tuple[list[Mismatch], list[str]]:
    """Mismatched facts, and facts unknown on one or both sides (said, not assumed equal).

    Blocking mismatches (:data:`BLOCKING_FIELDS`) come first: the window facts of
    :func:`perfdoctor.compare.comparability.window_mismatches`, then the GPU model.
    """
    fb, fa = run_facts(before), run_facts(after)
    mismatches = [Mismatch(k, b, a, m, blocking=not keys, metrics=keys) for k, b, a, m, keys in comparability.window_mismatches(fb, fa)]
    unknown = []
    for key in ("vendor", "world_size"):
        b, a = fb.get(key), fa.get(key)
        if (b is None) != (a is None):
            unknown.append(f"{key}: before {b if b is not None else 'unknown'}, after {a if a is not None else 'unknown'}")
    for key, message in COMPARABILITY_FIELDS.items():
        b, a = fb.get(key), fa.get(key)
        if b is None or a is None:
            if b is not None or a is not None:
                unknown.append(f"{key}: before {b if b is not None else 'unknown'}, after {a if a is not None else 'unknown'}")
            continue
        if isinstance(b, float) or isinstance(a, float):
            same = np.isclose(float(b), float(a), rtol=1e-6)
        else:
            same = str(b) == str(a)
        if not same:
            mismatches.append(Mismatch(key, b, a, message, blocking=key in BLOCKING_FIELDS))
    mismatches.sort(key=lambda m: (not m.blocking, not m.metrics))
    return mismatches, unknown


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


@dataclass
class Diff:
    before: str
    after: str
    metrics: list[MetricChange]
    samples: dict[str, Comparison]
    kernels: KernelDiff
    mismatches: list[Mismatch]
    unknown_facts: list[str]
    facts_before: dict[str, Any]
    facts_after: dict[str, Any]
    findings: FindingsDiff | None
    copies: list[CopyChange] = field(default_factory=list)  # copies and memsets per step (perfdoctor.compare.lead)
    not_comparable_metrics: dict[str, str] = field(default_factory=dict)  # metric -> why it is not compared
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

    def not_comparable(self) -> str | None:
        """``not comparable: <field>: before X, after Y (why); ...`` when the whole diff is
        (blocking mismatches), else None."""
        if not self.blocking:
            return None
        return "not comparable: " + "; ".join(f"{m.field}: before {m.before}, after {m.after} ({m.message})" for m in self.blocking)

    @property
    def scoped(self) -> list[Mismatch]:
        """Mismatches that make some metrics, not the whole diff, not comparable."""
        return [m for m in self.mismatches if m.metrics and not m.blocking]

    def verdict(self) -> str:
        """One line on step latency: the headline a PR comment starts with.

        Runs that are not comparable get no verdict: the line says why. Over processes when
        both runs are repeated bundles (``perfdoctor run --repeat``); else from the light
        timing pass (no tracer) when both runs have one — tracing inflates the step time of
        launch-bound code 2-3x — else from the traced steps. A bundle of one process says it
        cannot tell process noise from a change.
        """
        refusal = self.not_comparable()
        if refusal is not None:
            return f"no verdict — {refusal}"
        p50 = self.processes.get("step_latency_ms_p50")
        if p50 is not None and p50.repeated:
            return f"step latency p50 over processes (light pass, no tracer): {p50.verdict}, {p50.reason}"
        note = f"; {ONE_PROCESS_NOTE}" if p50 is not None else ""
        return self._step_verdict() + note

    def _step_verdict(self) -> str:
        name = "light_step_latency_ms" if "light_step_latency_ms" in self.samples else "step_latency_ms"
        what = "step latency (light pass, no tracer)" if name.startswith("light") else "step latency"
        c = self.samples.get(name)
        if c is None:
            return f"{what}: not measured (no steps on one side)"
        if c.verdict == "inconclusive":
            return f"{what}: {c.reason}"
        if c.verdict == "no significant change":
            return f"{what}: no significant change ({c.reason})"
        word = "improved" if c.verdict == "lower" else "regressed"
        ratio = c.interval
        size = f" ({ratio.ratio:.3g}x, {ratio.level:.0%} CI {ratio.low:.3g}–{ratio.high:.3g})" if ratio else ""
        return f"{what} {word}: median {c.median_before:.4g} → {c.median_after:.4g} ms{size}, {c.reason}"

    def to_json(self) -> dict[str, Any]:
        return jsonable(
            {
                "schema": SCHEMA,
                "before": self.before,
                "after": self.after,
                "verdict": self.verdict(),
                "comparable": self.comparable,
                "not_comparable": self.not_comparable(),
                "not_comparable_metrics": self.not_comparable_metrics,
                "mismatches": [m.to_json() for m in self.mismatches],
                "unknown_facts": self.unknown_facts,
                "facts": {"before": self.facts_before, "after": self.facts_after},
                "metrics": {m.key: m.to_json() for m in self.metrics},
                "samples": {k: dict(c.to_json(), unit=SAMPLE_UNITS.get(k)) for k, c in self.samples.items()},
                "kernels": self.kernels.to_json(),
                "copies": [c.to_json() for c in self.copies],
                "findings": self.findings.to_json() if self.findings else None,
                "processes": {k: c.to_json() for k, c in self.processes.items()},
            }
        )


def compare_step_samples(before: Analysis, after: Analysis, noise_floor: float | None = None) -> dict[str, Comparison]:
    """Significance of the change in each step-level sample both runs have.

    ``noise_floor`` overrides the per-sample floors of timing samples (counts keep 0).
    """
    sb, sa = step_samples(before), step_samples(after)
    out = {}
    for name in sb:
        if name not in sa:
            continue
        floor = SAMPLE_NOISE_FLOORS.get(name, 0.0)
        if noise_floor is not None and floor > 0:
            floor = noise_floor
        out[name] = compare_samples(sb[name], sa[name], noise_floor=floor)
    return out


def light_metrics(before: Analysis, after: Analysis, comparisons: dict[str, Comparison]) -> list[MetricChange]:
    """Step latency percentiles of the light timing pass (no tracer), when both runs have one.

    Named ``light_step_latency_ms_pNN``; same definition as the traced percentiles (linear
    interpolation), measured without a profiler perturbing the steps.
    """
    lb = step_samples(before).get("light_step_latency_ms")
    la = step_samples(after).get("light_step_latency_ms")
    if lb is None or la is None or not len(lb) or not len(la):
        return []
    rows = []
    for q in (50, 90, 99):
        b, a = float(np.percentile(lb, q)), float(np.percentile(la, q))
        comp = comparisons["light_step_latency_ms"]
        verdict = {"lower": "improved", "higher": "regressed", "no significant change": "no significant change"}.get(
            comp.verdict, "inconclusive — need more steps"
        )
        rows.append(
            MetricChange(
                key=f"{LIGHT_PREFIX}step_latency_ms_p{q}", unit="ms", before=b, after=a, change=a - b,
                change_rel=(a - b) / b if b else None, higher_is_better=False,
                status=_metric_status(b, a, False), verdict=verdict, sample="light_step_latency_ms",
                reason=comp.reason if comp.verdict == "inconclusive" else None,
            )
        )
    return rows


def diff_runs(before: Diagnosis, after: Diagnosis, noise_floor: float | None = None) -> Diff:
    """Compare two runs: metrics, step statistics, kernels, findings and comparability.

    ``noise_floor`` (relative, e.g. 0.1) overrides the run-to-run noise floors of the
    timing samples (SAMPLE_NOISE_FLOORS).
    """
    samples = compare_step_samples(before.analysis, after.analysis, noise_floor)
    mismatches, unknown = check_comparable(before, after)
    processes = compare_runs(before.manifest, after.manifest) if before.manifest and after.manifest else {}
    metrics = compare_metrics(before.analysis, after.analysis, samples) + light_metrics(before.analysis, after.analysis, samples)
    for m in metrics:
        # Repeated bundles: a latency percentile's verdict is the one over processes (the
        # values stay the first process's, as in its metrics.json).
        over = processes.get(m.key.removeprefix(LIGHT_PREFIX))
        if over is not None and over.repeated and m.verdict is not None:
            m.verdict, m.sample, m.reason = over.verdict, "processes", over.reason
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
        facts_before=run_facts(before),
        facts_after=run_facts(after),
        findings=compare_findings(before, after),
        copies=compare_copies(before.analysis, after.analysis),
        not_comparable_metrics=excluded,
        processes=processes,
    )


def _not_comparable_metrics(before: Analysis, after: Analysis, mismatches: list[Mismatch], rows: list[MetricChange]) -> dict[str, str]:
    """Metric key -> why it is not compared: every metric under a blocking mismatch; the
    span metrics under a coverage mismatch, unless both sides took them from the light
    timing pass (no span: the coverage of the traced window does not enter them)."""
    blocking = [m for m in mismatches if m.blocking]
    if blocking:
        why = "; ".join(f"{m.field} differs" for m in blocking)
        return {r.key: why for r in rows}
    out = {}
    for m in mismatches:
        for key in m.metrics:
            sources = [a.metrics[key].source for a in (before, after) if key in a.metrics]
            if sources and all("light" in (s or "") for s in sources):
                continue
            out[key] = f"{m.field} differs: before {m.before}, after {m.after}"
    return out
