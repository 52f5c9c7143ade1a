"""PyTorch profiler (Kineto) traces: read them into a Profile.

Kineto writes Chrome-trace JSON (``export_chrome_trace``, ``tensorboard_trace_handler``):
a ``traceEvents`` list of complete events (``ph == "X"``) whose ``cat`` says what they
are — ``kernel`` / ``gpu_memcpy`` / ``gpu_memset`` on the device, ``cuda_runtime`` /
``cuda_driver`` host API calls, ``user_annotation`` for ``record_function`` ranges and
``ProfilerStep#N``. ``ts`` and ``dur`` are microseconds with fractional nanoseconds.

Traces run to hundreds of MB, mostly CPU-op shapes we never read. Decoding into typed
structs (msgspec) materializes only the fields below and skips the rest unallocated, which
is what keeps parsing fast and memory low; events are then bucketed by category in one
pass and each bucket becomes columns.
"""

from __future__ import annotations

from collections import Counter

from pathlib import Path
from typing import Any, Union

import msgspec
import numpy as np
import pandas as pd

from perfdoctor.collectors.checks import finish
from perfdoctor.errors import UsageError
from perfdoctor.io import read_maybe_gzip
from perfdoctor.profile import (
    ACTIVITY_COLUMNS,
    CALL_COLUMNS,
    RANGE_COLUMNS,
    Profile,
    frame,
    parse_declarations,
)
from perfdoctor.text import clean

ACTIVITY_CATEGORIES = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
CALL_CATEGORIES = ("cuda_runtime", "cuda_driver")
RANGE_CATEGORIES = ("user_annotation", "cpu_op", "python_function")
PROFILER_STEP = r"^ProfilerStep#\d+$"

# "Memcpy HtoD (Pageable -> Device)": the copy direction and the host memory kind.
MEMCPY_NAME = r"^Memcpy (?P<copy_kind>\w+) \((?P<src>\w+) -> (?P<dst>\w+)\)"

DRIVER_COPY_KERNEL = r"^memcpy\d+_post$"

# Ids and numbers are usually ints but tracers differ; accept what JSON may hold.
Scalar = Union[int, float, str, None]


class Args(msgspec.Struct, gc=False):
    """The event arguments perfdoctor reads; every other key is skipped while parsing."""

    correlation: Scalar = None
    device: Scalar = None
    stream: Scalar = None
    grid: Union[list[int], None] = None
    block: Union[list[int], None] = None
    registers: Scalar = msgspec.field(default=None, name="registers per thread")
    shared_memory: Scalar = msgspec.field(default=None, name="shared memory")
    occupancy: Scalar = msgspec.field(default=None, name="est. achieved occupancy %")
    bytes: Scalar = None
    graph_id: Scalar = msgspec.field(default=None, name="graph id")
    name: Any = None  # metadata events (ph "M", thread_name): the thread's name; anything else is ignored


class Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    ts: Union[float, None] = None  # missing: the event is dropped (refused for GPU work)
    dur: Union[float, None] = None
    pid: Union[int, str, None] = None
    tid: Union[int, str, None] = None
    args: Union[Args, None] = None


class Trace(msgspec.Struct):
    traceEvents: Union[list[Event], None] = None  # noqa: N815 (Kineto's key)
    deviceProperties: Union[list[dict[str, Any]], None] = None  # noqa: N815
    cuda_driver_version: Scalar = None
    cuda_runtime_version: Scalar = None
    cupti_version: Scalar = None
    distributedInfo: Union[dict[str, Any], None] = None  # noqa: N815 - rank, world_size, backend of a torch.distributed job


_decoder = msgspec.json.Decoder(Trace)
_NO_ARGS = Args()


def load(path: str | Path) -> Profile:
    """Read a Kineto trace (``.json`` or ``.json.gz``)."""
    path = Path(path)
    raw = read_maybe_gzip(path)
    try:
        doc = _decoder.decode(raw)
    except msgspec.ValidationError as exc:
        raise UsageError(f"{path}: not a Kineto trace ({exc})") from None
    except msgspec.DecodeError as exc:
        raise UsageError(f"{path}: not a JSON trace ({exc})") from None
    except RecursionError:
        raise UsageError(f"{path}: not a Kineto trace (JSON nested too deeply)") from None
    del raw
    if doc.traceEvents is None:
        raise UsageError(f"{path}: not a Kineto trace (no 'traceEvents' list)")

    buckets: dict[str, list[Event]] = {}
    dropped = 0
    untimed_gpu = 0
    thread_names: list[str] = []  # every name a thread was given ("pt_autograd_0", then "python3")
    for e in doc.traceEvents:
        if e.ph == "M":
            if e.name == "thread_name" and e.args is not None and isinstance(e.args.name, str):
                thread_names.append(e.args.name)
            continue
        if e.ph == "X":
            if not _timed(e):
                dropped += 1
                untimed_gpu += e.cat in ACTIVITY_CATEGORIES
                continue
            buckets.setdefault(e.cat, []).append(e)
    if untimed_gpu:
        raise UsageError(
            f"{path}: {untimed_gpu} GPU activities lack a valid 'ts' or 'dur' (missing, negative or out of range); "
            "the trace is damaged"
        )
    if not buckets:
        raise UsageError(f"{path}: empty trace (no complete events)")
    doc.traceEvents = None

    activities = pd.concat(
        [_activities(buckets.get(cat, []), kind) for cat, kind in ACTIVITY_CATEGORIES.items()],
        ignore_index=True,
    ).sort_values("start_ns", kind="stable", ignore_index=True)
    threads = _ThreadIds()
    calls = _calls([e for cat in CALL_CATEGORIES for e in buckets.get(cat, [])], threads)
    ranges = _ranges([e for cat in RANGE_CATEGORIES for e in buckets.get(cat, [])], threads)
    versions = {
        k: getattr(doc, k) for k in ("cuda_driver_version", "cuda_runtime_version", "cupti_version") if getattr(doc, k) is not None
    }
    meta: dict[str, Any] = {"source": "kineto", "path": str(path), "declared": parse_declarations(ranges), "versions": versions}
    # What perfdoctor.workload reads: CPU op names (backward ops, Optimizer.step#...) and thread names.
    meta["op_counts"] = dict(Counter(e.name for e in buckets.get("cpu_op", [])))
    meta["thread_names"] = sorted(set(thread_names))
    if doc.distributedInfo:  # written when torch.distributed was initialised as the profiler started
        meta["distributed"] = {k: doc.distributedInfo[k] for k in ("rank", "world_size", "backend") if k in doc.distributedInfo}
    if dropped:
        meta["warnings"] = [f"{dropped} host events without a valid 'ts' or 'dur' (missing, negative or out of range) dropped"]
    return finish(
        Profile(activities=activities, calls=calls, ranges=ranges, device=_device(doc.deviceProperties or []), meta=meta)
    )


MAX_US = 1e15  # ~31 years in µs: beyond it, ns no longer fit an int64 (and no trace is that long)


def _timed(e: Event) -> bool:
    """The event has a usable start and duration: finite, in range, duration >= 0."""
    ts, dur = e.ts, e.dur
    return ts is not None and dur is not None and -MAX_US < ts < MAX_US and 0 <= dur < MAX_US


def _ns(values: list[float]) -> np.ndarray:
    return np.rint(np.asarray(values, dtype=np.float64) * 1000.0).astype(np.int64)


def _times(events: list[Event]) -> tuple[np.ndarray, np.ndarray]:
    start = _ns([e.ts for e in events])
    return start, start + _ns([e.dur for e in events])


def _ints(values: list[Scalar]) -> np.ndarray:
    """Integer ids with -1 where missing, not a number or out of the int64 range."""
    v = pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").astype(np.float64).to_numpy()
    ok = np.isfinite(v) & (np.abs(v) < 2.0**62)
    return np.where(ok, v, -1).astype(np.int64)


def _floats(values: list[Scalar]) -> np.ndarray:
    """Numbers with NaN where missing, not a number or not finite."""
    v = pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").astype(np.float64).to_numpy()
    return np.where(np.isfinite(v), v, np.nan)


def _dims(values: list[list[int] | None]) -> list[str]:
    return [",".join(map(str, v)) if v else "" for v in values]


def _activities(events: list[Event], kind: str) -> pd.DataFrame:
    if not events:
        return frame(ACTIVITY_COLUMNS)
    start, end = _times(events)
    args = [e.args or _NO_ARGS for e in events]
    names = pd.Series([e.name for e in events], dtype=object)
    data: dict[str, Any] = {
        "kind": np.full(len(events), kind, dtype=object),
        "start_ns": start,
        "end_ns": end,
        "device": _ints([a.device for a in args]),
        "stream": _ints([a.stream for a in args]),
        "name": names.to_numpy(),
        "correlation": _ints([a.correlation for a in args]),
    }
    if kind == "kernel":
        # A memcpy node of a CUDA graph runs as the driver's copy kernel (memcpy32_post);
        # nsys reports the same work as a memcpy, and so do we, so both tracers agree on
        # kernels per step.
        copies = names.str.match(DRIVER_COPY_KERNEL, na=False).to_numpy()
        data["kind"] = np.where(copies, "memcpy", "kernel").astype(object)
        data["copy_kind"] = np.where(copies, "DtoD", "").astype(object)
        data["grid"] = _dims([a.grid for a in args])
        data["block"] = _dims([a.block for a in args])
        data["registers"] = _floats([a.registers for a in args])
        data["shared_mem"] = _floats([a.shared_memory for a in args])
        data["occupancy_pct"] = _floats([a.occupancy for a in args])
        data["graph_id"] = _ints([a.graph_id for a in args])
    else:
        data["bytes"] = _floats([a.bytes for a in args])
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

    def __call__(self, events: list[Event]) -> np.ndarray:
        ids = self.ids
        return np.fromiter(
            (ids.setdefault((e.pid, e.tid), len(ids)) for e in events), dtype=np.int64, count=len(events)
        )


def _calls(events: list[Event], threads: _ThreadIds) -> pd.DataFrame:
    if not events:
        return frame(CALL_COLUMNS)
    start, end = _times(events)
    return frame(
        CALL_COLUMNS,
        {
            "name": [e.name for e in events],
            "start_ns": start,
            "end_ns": end,
            "tid": threads(events),
            "correlation": _ints([(e.args or _NO_ARGS).correlation for e in events]),
        },
    )


def _ranges(events: list[Event], threads: _ThreadIds) -> pd.DataFrame:
    """record_function ranges (``user_annotation``), ``ProfilerStep#N`` (whatever its
    category) and Python frames (``python_function``, from ``with_stack=True``: they name
    the line that issued a sync)."""
    names = pd.Series([e.name for e in events], dtype=object)
    cats = pd.Series([e.cat for e in events], dtype=object)
    is_step = names.str.match(PROFILER_STEP, na=False).to_numpy()
    source = np.select(
        [is_step, (cats == "user_annotation").to_numpy(), (cats == "python_function").to_numpy()],
        ["profiler_step", "record_function", "python"],
        default="",
    ).astype(object)
    keep = source != ""
    if not keep.any():
        return frame(RANGE_COLUMNS)
    kept = [e for e, k in zip(events, keep) if k]
    start, end = _times(kept)
    return frame(
        RANGE_COLUMNS,
        {"name": names[keep].to_numpy(), "start_ns": start, "end_ns": end, "tid": threads(kept), "source": source[keep]},
    )


def _device(props: list[dict[str, Any]]) -> dict[str, Any]:
    """The first device the trace describes; Kineto records no memory clock or bus width."""
    if not props:
        return {}
    p = props[0]

    def count(v: Any) -> int | None:  # a positive integer, else unknown
        return v if isinstance(v, int) and not isinstance(v, bool) and 0 < v < 2**62 else None

    def small(v: Any) -> int | None:
        return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1000 else None

    name = p.get("name")
    return {
        "name": clean(name) if isinstance(name, str) else None,
        "sm_count": count(p.get("numSms")),
        "total_memory_bytes": count(p.get("totalGlobalMem")),
        "compute_capability": f"{small(p.get('computeMajor'))}.{small(p.get('computeMinor'))}",
    }
