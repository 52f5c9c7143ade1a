"""What changed in the work itself: copies per step, the numbers a diff leads with.

A diff of timings says *that* something moved; counts say *what*. When a change added
4,590 device-to-device copies per step, or removed one 4 µs kernel, that is the first thing
a reader needs, before any ratio. :func:`compare_copies` counts copies (and memsets) per
step by direction and host memory; :func:`perfdoctor.reports.diff_report.lead_lines`
words the kernel and copy changes.

Counts per step come from the same population as ``kernels_per_step`` (activities that
start inside the profiled span S, divided by the number of steps; per trace without steps).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from perfdoctor.analysis.metrics import Analysis

_DIRECTIONS = {
    "HtoD": "host-to-device copies",
    "DtoH": "device-to-host copies",
    "DtoD": "device-to-device copies",
    "HtoH": "host-to-host copies",
    "PtoP": "peer-to-peer copies",
}


def copy_label(kind: str, copy_kind: str, host_mem: str) -> str:
    """``device-to-device copies``, ``host-to-device copies (pageable)``, ``memsets``."""
    if kind == "memset":
        return "memsets"
    label = _DIRECTIONS.get(copy_kind, f"{copy_kind or 'other'} copies")
    return f"{label} ({host_mem})" if host_mem else label


def copy_table(analysis: Analysis) -> tuple[pd.DataFrame, str]:
    """Copies and memsets per step (or per trace without steps), by :func:`copy_label`:
    columns count, bytes, time_us. Returns (table, "step" | "trace")."""
    steps = analysis.steps
    if steps.count > 0 and steps.span is not None:
        acts, divisor, per = analysis.timeline.in_span, steps.count, "step"
    else:
        acts, divisor, per = analysis.profile.activities, 1, "trace"
    c = acts[acts["kind"].isin(("memcpy", "memset"))]
    if c.empty:
        return pd.DataFrame({"count": [], "bytes": [], "time_us": []}, dtype=float), per
    labels = [copy_label(k, ck, hm) for k, ck, hm in zip(c["kind"], c["copy_kind"].fillna(""), c["host_mem"].fillna(""))]
    frame = pd.DataFrame(
        {
            "label": labels,
            "bytes": c["bytes"].fillna(0).to_numpy(dtype=float),
            "dur": (c["end_ns"] - c["start_ns"]).to_numpy(dtype=float) / 1e3,
        }
    )
    g = frame.groupby("label")
    table = pd.DataFrame({"count": g.size() / divisor, "bytes": g["bytes"].sum() / divisor, "time_us": g["dur"].sum() / divisor})
    return table, per


@dataclass
class CopyChange:
    label: str  # copy_label
    count_before: float  # per step (or per trace)
    count_after: float
    bytes_before: float
    bytes_after: float
    time_us_before: float
    time_us_after: float

    @property
    def count_change(self) -> float:
        return self.count_after - self.count_before

    @property
    def time_change_us(self) -> float:
        return self.time_us_after - self.time_us_before

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__, count_change=self.count_change, time_change_us=self.time_change_us)


def compare_copies(before: Analysis, after: Analysis) -> list[CopyChange]:
    """Copies per step before and after, by label, largest time change first."""
    tb, _ = copy_table(before)
    ta, _ = copy_table(after)
    rows = []
    for label in sorted(set(tb.index) | set(ta.index)):
        b = tb.loc[label] if label in tb.index else None
        a = ta.loc[label] if label in ta.index else None
        rows.append(
            CopyChange(
                label,
                float(b["count"]) if b is not None else 0.0,
                float(a["count"]) if a is not None else 0.0,
                float(b["bytes"]) if b is not None else 0.0,
                float(a["bytes"]) if a is not None else 0.0,
                float(b["time_us"]) if b is not None else 0.0,
                float(a["time_us"]) if a is not None else 0.0,
            )
        )
    rows.sort(key=lambda r: (-abs(r.time_change_us), r.label))
    return rows
