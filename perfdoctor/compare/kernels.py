"""Which kernels changed between two runs: matched by normalized name, per step.

Kernels are matched across runs by a normalized name (:func:`perfdoctor.names.kernels.match_keys`:
template arguments, argument lists and numeric or hex suffixes removed, so ``gemm<128, 4>``
and a recompiled ``triton_poi_fused_add_7`` still match), with count and time per step
before and after, and the ones that appeared or vanished. Across GPU vendors, kernels that
find no partner by name are matched by family and operation (:mod:`perfdoctor.compare.crossvendor`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from perfdoctor.analysis.metrics import Analysis
from perfdoctor.compare import comparability, crossvendor
from perfdoctor.names.kernels import match_keys


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
