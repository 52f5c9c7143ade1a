"""PyTorch profiler (Kineto) traces: read them into a Profile.

Kineto writes Chrome-trace JSON (``export_chrome_trace``, ``tensorboard_trace_handler``):
a ``traceEvents`` list of complete events (``ph == "X"``) whose ``cat`` says what they
are — ``kernel`` / ``gpu_memcpy`` / ``gpu_memset`` on the device, ``cuda_runtime`` /
``cuda_driver`` host API calls, ``user_annotation`` for ``record_function`` ranges and
``ProfilerStep#N``. ``ts`` and ``dur`` are microseconds with fractional nanoseconds.

Parsing is one pass with orjson to bucket events by category, then column extraction
per bucket; no per-event work happens in pandas.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pandas as pd

from perfdoctor.collectors import read_maybe_gzip
from perfdoctor.errors import UsageError
from perfdoctor.profile import (
    ACTIVITY_COLUMNS,
    CALL_COLUMNS,
    RANGE_COLUMNS,
    Profile,
    frame,
    parse_declarations,
)

ACTIVITY_CATEGORIES = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
CALL_CATEGORIES = ("cuda_runtime", "cuda_driver")
RANGE_CATEGORIES = ("user_annotation", "cpu_op")
PROFILER_STEP = r"^ProfilerStep#\d+$"

# "Memcpy HtoD (Pageable -> Device)": the copy direction and the host memory kind.
MEMCPY_NAME = r"^Memcpy (?P<copy_kind>\w+) \((?P<src>\w+) -> (?P<dst>\w+)\)"


def load(path: str | Path) -> Profile:
    """Read a Kineto trace (``.json`` or ``.json.gz``)."""
    path = Path(path)
    raw = read_maybe_gzip(path)
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise UsageError(f"{path}: not a JSON trace ({exc})") from None
    del raw
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        raise UsageError(f"{path}: not a Kineto trace (no 'traceEvents' list)")
    if not events:
        raise UsageError(f"{path}: empty trace (no events)")

    buckets: dict[str, list[dict[str, Any]]] = {}
    for e in events:
        if e.get("ph") == "X":
            buckets.setdefault(e.get("cat"), []).append(e)
    if not buckets:
        raise UsageError(f"{path}: empty trace (no complete events)")

    activities = pd.concat(
        [_activities(buckets.get(cat, []), kind) for cat, kind in ACTIVITY_CATEGORIES.items()],
        ignore_index=True,
    ).sort_values("start_ns", kind="stable", ignore_index=True)
    threads = _ThreadIds()
    calls = _calls([e for cat in CALL_CATEGORIES for e in buckets.get(cat, [])], threads)
    ranges = _ranges([e for cat in RANGE_CATEGORIES for e in buckets.get(cat, [])], threads)
    return Profile(
        activities=activities,
        calls=calls,
        ranges=ranges,
        device=_device(doc),
        meta={
            "source": "kineto",
            "path": str(path),
            "declared": parse_declarations(ranges),
            "versions": {
                k: doc[k]
                for k in ("cuda_driver_version", "cuda_runtime_version", "cupti_version")
                if k in doc
            },
        },
    )


def _ns(values: list[float]) -> np.ndarray:
    return np.rint(np.asarray(values, dtype=np.float64) * 1000.0).astype(np.int64)


def _times(events: list[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    start = _ns([e["ts"] for e in events])
    return start, start + _ns([e.get("dur", 0.0) for e in events])


def _arg_column(args: list[dict[str, Any]], key: str, default: Any = np.nan) -> list[Any]:
    return [a.get(key, default) for a in args]


def _dims(values: list[Any]) -> list[str]:
    return [",".join(str(int(x)) for x in v) if isinstance(v, list) else "" for v in values]


def _activities(events: list[dict[str, Any]], kind: str) -> pd.DataFrame:
    if not events:
        return frame(ACTIVITY_COLUMNS)
    start, end = _times(events)
    args = [e.get("args") or {} for e in events]
    names = pd.Series([e.get("name", "") for e in events], dtype=object)
    data: dict[str, Any] = {
        "kind": np.full(len(events), kind, dtype=object),
        "start_ns": start,
        "end_ns": end,
        "device": pd.to_numeric(pd.Series(_arg_column(args, "device", -1)), errors="coerce").fillna(-1).astype("int64"),
        "stream": pd.to_numeric(pd.Series(_arg_column(args, "stream", -1)), errors="coerce").fillna(-1).astype("int64"),
        "name": names.to_numpy(),
        "correlation": pd.to_numeric(pd.Series(_arg_column(args, "correlation", -1)), errors="coerce").fillna(-1).astype("int64"),
    }
    if kind == "kernel":
        data["grid"] = _dims(_arg_column(args, "grid", None))
        data["block"] = _dims(_arg_column(args, "block", None))
        data["registers"] = _arg_column(args, "registers per thread")
        data["shared_mem"] = _arg_column(args, "shared memory")
        data["occupancy_pct"] = _arg_column(args, "est. achieved occupancy %")
        data["graph_id"] = pd.to_numeric(pd.Series(_arg_column(args, "graph id", -1)), errors="coerce").fillna(-1).astype("int64")
    else:
        data["bytes"] = _arg_column(args, "bytes")
    if kind == "memcpy":
        parts = names.str.extract(MEMCPY_NAME)
        data["copy_kind"] = parts["copy_kind"].fillna("").to_numpy()
        host = np.where(parts["copy_kind"].str.startswith("H", na=False), parts["src"], parts["dst"])
        data["host_mem"] = pd.Series(host, dtype=object).fillna("").str.lower().replace({"device": ""}).to_numpy()
    return frame(ACTIVITY_COLUMNS, data)


class _ThreadIds:
    """Kineto names a host thread by (pid, tid); give each pair one integer id."""

    def __init__(self) -> None:
        self.ids: dict[tuple[Any, Any], int] = {}

    def __call__(self, events: list[dict[str, Any]]) -> np.ndarray:
        ids = self.ids
        return np.fromiter(
            (ids.setdefault((e.get("pid"), e.get("tid")), len(ids)) for e in events),
            dtype=np.int64,
            count=len(events),
        )


def _calls(events: list[dict[str, Any]], threads: _ThreadIds) -> pd.DataFrame:
    if not events:
        return frame(CALL_COLUMNS)
    start, end = _times(events)
    args = [e.get("args") or {} for e in events]
    return frame(
        CALL_COLUMNS,
        {
            "name": [e.get("name", "") for e in events],
            "start_ns": start,
            "end_ns": end,
            "tid": threads(events),
            "correlation": pd.to_numeric(pd.Series(_arg_column(args, "correlation", -1)), errors="coerce").fillna(-1).astype("int64"),
        },
    )


def _ranges(events: list[dict[str, Any]], threads: _ThreadIds) -> pd.DataFrame:
    """record_function ranges (``user_annotation``) and ``ProfilerStep#N`` (whatever its category)."""
    names = pd.Series([e.get("name", "") for e in events], dtype=object)
    is_step = names.str.match(PROFILER_STEP, na=False).to_numpy()
    is_user = np.array([e.get("cat") == "user_annotation" for e in events], dtype=bool)
    keep = is_step | is_user
    if not keep.any():
        return frame(RANGE_COLUMNS)
    kept = [e for e, k in zip(events, keep) if k]
    start, end = _times(kept)
    return frame(
        RANGE_COLUMNS,
        {
            "name": names[keep].to_numpy(),
            "start_ns": start,
            "end_ns": end,
            "tid": threads(kept),
            "source": np.where(is_step[keep], "profiler_step", "record_function").astype(object),
        },
    )


def _device(doc: dict[str, Any]) -> dict[str, Any]:
    """The first device the trace describes; Kineto records no memory clock or bus width."""
    props = doc.get("deviceProperties") or []
    if not props:
        return {}
    p = props[0]
    return {
        "name": p.get("name"),
        "sm_count": p.get("numSms"),
        "total_memory_bytes": p.get("totalGlobalMem"),
        "compute_capability": f"{p.get('computeMajor')}.{p.get('computeMinor')}",
    }
