"""A Kineto trace's decoded events as the Profile: the columns of each span
(:mod:`.kineto_events`) joined into the tables, host threads numbered, and what the
trace says of itself (versions, declarations, threads, devices) in its :class:`~perfdoctor.profile.Origin`.

Apart from the decoding because it needs pandas: :meth:`.torch_profiler.Loading.result`
imports this module while the forked decoders are still at work.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from perfdoctor.collectors.checks import finish
from perfdoctor.collectors.kineto_events import (
    ACTIVITY_CATEGORIES,
    CALL_CATEGORIES,
    KNOWN_HOST_CATEGORIES,
    RANGE_CATEGORIES,
    RANGE_PROFILER,
    UNREAD_DEVICE_PREFIXES,
    UNREAD_DEVICE_WORK,
    Events,
    Header,
    HostRows,
    SpanTables,
)
from perfdoctor.errors import UsageError
from perfdoctor.profile import ACTIVITY_COLUMNS, CALL_COLUMNS, OP_COLUMNS, RANGE_COLUMNS, Origin, Profile, frame, parse_declarations
from perfdoctor.text import clean


def profile_of(path: Path, doc: Header, events: list[Events], invalid: tuple[int, str] = (0, ""), nonstandard: int = 0) -> Profile:
    """The Profile of the trace at ``path``: ``doc`` (the document around its events), the
    events each decoder kept, in the array's order, ``invalid``: how many events were
    skipped as not valid events, and why, and ``nonstandard``: the NaN/Infinity values read
    as missing (:func:`.kineto_events.decode_whole`).

    A few damaged events among many are skipped and counted (a warning the commands
    print); the trace is refused only when what is left cannot be analysed: no timed event
    at all, or GPU activities that are all untimed."""
    total = Events.merged(events)
    if not total.timed:
        raise UsageError(f"{path}: empty trace (no complete events with a valid 'ts' and 'dur')")
    counts = total.category_counts()
    gpu_timed = sum(counts.get(c, 0) for c in ACTIVITY_CATEGORIES)
    if total.untimed_gpu and not gpu_timed:
        raise UsageError(
            f"{path}: all {total.untimed_gpu} GPU activities lack a valid 'ts' or 'dur' (missing, negative or out of range); "
            "the trace is damaged"
        )
    read = set(ACTIVITY_CATEGORIES) | set(CALL_CATEGORIES) | set(RANGE_CATEGORIES) | KNOWN_HOST_CATEGORIES
    if not any(counts.get(c) for c in read) and not _unread_device_work(counts):
        # a Chrome trace of another profiler (TensorFlow's or JAX's: XLA ops with no 'cat'):
        # read as Kineto it gave "0 steps" and exit 0, a silent empty answer
        listed = ", ".join(f"{clean(str(c))!r} x{n}" if c else f"none x{n}" for c, n in sorted(counts.items(), key=lambda kv: -kv[1])[:4])
        raise UsageError(
            f"{path}: none of its {total.timed} timed events is of a kind perfdoctor reads (categories: {listed}): not a "
            "PyTorch profiler (Kineto) trace; perfdoctor reads torch.profiler and Nsight Systems traces, not TensorFlow's or JAX's"
        )
    unread_work = _unread_device_work(counts)  # said in a warning; the metrics it leaves unmeasured name it too
    if not gpu_timed and counts.get(RANGE_PROFILER):
        # Its kernels are folded into range events: no step, launch or idle can be measured,
        # yet host-side checks would pass; refused by name, so it never gates green.
        raise UsageError(f"{path}: its GPU work is {unread_work}, which perfdoctor does not read; trace without the range profiler")
    # In one process the columns are built here, after the file's bytes are freed (the lower peak).
    activities, calls, ranges, ops = joined([e.columns() for e in events])
    versions = {
        k: getattr(doc, k) for k in ("cuda_driver_version", "cuda_runtime_version", "cupti_version") if getattr(doc, k) is not None
    }
    warnings = ([f"read {nonstandard} NaN/Infinity values as missing: not JSON (Python's json module writes them)"] if nonstandard else [])
    warnings += _skipped(total, invalid) + ([f"not read: {unread_work} (device work perfdoctor does not read)"] if unread_work else [])
    origin = Origin(
        source="kineto", path=str(path), versions=versions, declared=parse_declarations(ranges),
        # what perfdoctor.analysis.workload reads: CPU op names (backward ops, Optimizer.step#...) and thread names
        op_counts=dict(total.op_counts), thread_names=tuple(sorted(set(total.thread_names))),
        distributed=distributed(doc.distributedInfo),  # perfdoctor.compare.comparability: world size
        unread_categories={clean(str(cat)): n for cat, n in counts.items() if cat not in read},
        time_origin_ns=total.origin * 1000 if total.origin else None, unread_device_work=unread_work or None,
        warnings=tuple(warnings),
    )
    return finish(
        Profile(activities=activities, calls=calls, ranges=ranges, ops=ops, device=_device(doc.deviceProperties or []), origin=origin)
    )


def _skipped(total: Events, invalid: tuple[int, str]) -> list[str]:
    """The loader's "skipped N events: why" lines (the commands print them)."""
    lines = []
    if total.dropped:
        gpu = f" ({total.untimed_gpu} of them GPU activities)" if total.untimed_gpu else ""
        lines.append(f"skipped {total.dropped} events{gpu}: no valid 'ts' or 'dur' (missing, not a number, negative or out of range)")
    if invalid[0]:
        lines.append(f"skipped {invalid[0]} events: not a valid trace event (first: {clean(invalid[1])})")
    return lines


def _unread_device_work(counts: dict[str, int]) -> str:
    """The kinds of device work in ``counts`` (events per category) that perfdoctor does not
    read, named with their event counts; "" when there is none."""
    kinds: dict[str, int] = {}
    for cat, n in counts.items():
        kind = UNREAD_DEVICE_WORK.get(cat) or next((k for p, k in UNREAD_DEVICE_PREFIXES.items() if cat.startswith(p)), None)
        if kind is not None:
            kinds[kind] = kinds.get(kind, 0) + n
    return "; ".join(f"{n} {kind}" for kind, n in kinds.items())


NOT_KINETO_FORMATS = {b'"rocprofiler-sdk-tool"': "a rocprofiler-sdk JSON file (AMD's rocprofv3), not a Kineto trace: "
                      "perfdoctor does not read it; profile with torch.profiler instead"}


def not_kineto(raw: bytes | memoryview) -> str:
    """Why a JSON document without a ``traceEvents`` list is no trace perfdoctor reads,
    naming the format where it is a known one."""
    head = bytes(memoryview(raw)[:4096])
    for marker, why in NOT_KINETO_FORMATS.items():
        if marker in head:
            return why
    return "not a Kineto trace (no 'traceEvents' list)"


def joined(spans: list[SpanTables]) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The activities (in start order), calls, ranges and CPU ops of consecutive spans, each
    table built once from its joined columns, with thread ids numbered over the whole trace
    (:func:`_thread_ids`; the ops last, so a thread keeps the id the calls and ranges gave it)."""
    parts = [s.activities[i] for i in range(len(ACTIVITY_CATEGORIES)) for s in spans]
    order = np.argsort(np.concatenate([p["start_ns"] for p in parts]), kind="stable")
    activities = _table(ACTIVITY_COLUMNS, {col: [p[col] for p in parts] for col in ACTIVITY_COLUMNS}, order)
    calls = [s.calls[i] for i in range(len(CALL_CATEGORIES)) for s in spans]
    ranges = [s.ranges[i] for i in range(3) for s in spans]
    ops = [s.ops for s in spans]
    hosts = calls + ranges + ops
    tids = _thread_ids(np.concatenate([h[1] for h in hosts]), np.concatenate([h[2] for h in hosts]))
    n_calls, n_ranges = (sum(len(h[1]) for h in part) for part in (calls, ranges))
    return (activities, _with_tids(calls, tids[:n_calls], CALL_COLUMNS),
            _with_tids(ranges, tids[n_calls:n_calls + n_ranges], RANGE_COLUMNS), _with_tids(ops, tids[n_calls + n_ranges:], OP_COLUMNS))


def _with_tids(parts: list[HostRows], tids: np.ndarray, columns: dict[str, str]) -> pd.DataFrame:
    return _table(columns, {col: [tids] if col == "tid" else [p[0][col] for p in parts] for col in columns})


def _table(columns: dict[str, str], pieces: dict[str, list[np.ndarray]], order: np.ndarray | None = None) -> pd.DataFrame:
    """:func:`perfdoctor.profile.frame` of each column's ``pieces`` joined (its rows taken
    in ``order``, when given): where pandas builds a frame from its blocks
    (``create_dataframe_from_blocks``, pandas >= 3) and every piece has its column's dtype,
    each column is joined straight into its row of the block the constructor would have
    stacked it in (one block per dtype, in the order the columns first have it), not joined
    and then copied into the block: HF 80 MB's tables are ~17 MB, written once instead of
    twice (~4k fewer pages first touched). Else the frame of the joined columns, as before."""
    dtypes = {col: np.dtype(dtype) for col, dtype in columns.items()}
    create = _block_frames()
    if create is None or any(p.dtype != dtypes[col] or p.ndim != 1 for col, ps in pieces.items() for p in ps):
        data = {col: np.concatenate(ps) for col, ps in pieces.items()}
        return frame(columns, data if order is None else {col: values[order] for col, values in data.items()})
    n = sum(len(p) for p in next(iter(pieces.values())))
    names = list(columns)
    groups: dict[np.dtype, list[int]] = {}
    for i, col in enumerate(names):
        groups.setdefault(dtypes[col], []).append(i)
    blocks = []
    for dtype, at in groups.items():
        values = np.empty((len(at), n), dtype=dtype)
        for row, i in zip(values, at):
            if order is None:
                np.concatenate(pieces[names[i]], out=row)
            else:
                np.take(np.concatenate(pieces[names[i]]), order, out=row)
        blocks.append((values, np.array(at, dtype=np.intp)))
    return create(blocks, pd.RangeIndex(n), pd.Index(names))


def _block_frames() -> Any:
    """pandas' ``create_dataframe_from_blocks`` (pandas >= 3), else None."""
    try:
        from pandas.api.internals import create_dataframe_from_blocks
    except ImportError:
        return None
    return create_dataframe_from_blocks


def _thread_ids(pids: np.ndarray, tids: np.ndarray) -> np.ndarray:
    """Kineto names a host thread by (pid, tid); each pair gets one integer id, numbered in
    order of first appearance over the rows (the calls, then the ranges, then the ops).
    ``pids`` and ``tids``: int64 where the decoders found only ints, else objects."""
    if not len(pids):
        return np.zeros(0, dtype=np.int64)
    pid, _ = pd.factorize(_as_keys(pids), use_na_sentinel=False)
    tid, uniques = pd.factorize(_as_keys(tids), use_na_sentinel=False)
    key = pid.astype(np.int64, copy=False)  # the pair, numbered by first appearance; computed in place (213k rows on HF 80 MB)
    key *= max(len(uniques), 1)
    key += tid
    codes, _ = pd.factorize(key)
    return codes.astype(np.int64, copy=False)


def _as_keys(values: np.ndarray) -> np.ndarray | pd.Series:
    """What pd.factorize numbers: integers as they are, objects as objects (no type inferred)."""
    return values if values.dtype == np.int64 else pd.Series(values, dtype=object)


def distributed(info: Any) -> dict[str, Any]:
    """``distributedInfo`` (written when torch.distributed is initialised): the rank, world
    size and backend, each kept only when it has the expected type."""
    if not isinstance(info, dict):
        return {}
    out: dict[str, Any] = {}
    for key in ("rank", "world_size"):
        v = info.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**31:
            out[key] = v
    if isinstance(info.get("backend"), str):
        out["backend"] = clean(info["backend"])
    return out


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
