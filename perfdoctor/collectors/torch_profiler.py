"""PyTorch profiler (Kineto) traces: read them into a Profile.

Kineto writes Chrome-trace JSON (``export_chrome_trace``, ``tensorboard_trace_handler``):
a ``traceEvents`` list of complete events (``ph == "X"``) whose ``cat`` says what they
are — ``kernel`` / ``gpu_memcpy`` / ``gpu_memset`` on the device, ``cuda_runtime`` /
``cuda_driver`` host API calls, ``user_annotation`` for ``record_function`` ranges and
``ProfilerStep#N``. ``ts`` and ``dur`` are microseconds with fractional nanoseconds.

Traces run to hundreds of MB, mostly CPU-op shapes we never read. Decoding into typed
structs (msgspec) materializes only the fields below and skips the rest unallocated, which
is what keeps parsing fast and memory low. The event array is decoded a few MB at a time
(:mod:`perfdoctor.collectors.json_chunks`); each slice's events of the categories read are
kept with their times as arrays, the rest dropped with the slice, so the peak is the file
plus one slice, not the structs of the whole trace. Each category then becomes columns,
every name test running once per distinct name.
"""

from __future__ import annotations

import pickle
import re
import types
from collections import Counter
from dataclasses import dataclass
from itertools import compress
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import Any, ClassVar, Union

import msgspec
import numpy as np
import pandas as pd

from perfdoctor.collectors.checks import finish
from perfdoctor.collectors.forked import Tickets, children, usable_cpus
from perfdoctor.collectors.json_chunks import PLACEHOLDER, ArraySlices, SliceError, array_slices
from perfdoctor.errors import UsageError
from perfdoctor.io import read_maybe_gzip
from perfdoctor.namecodes import factorize_strings
from perfdoctor.profile import (
    ACTIVITY_COLUMNS,
    CALL_COLUMNS,
    RANGE_COLUMNS,
    Profile,
    frame,
    parse_declarations,
)
from perfdoctor.text import clean

# Kineto's category names, and the spellings older PyTorch versions wrote (1.8-1.10:
# "Kernel", "Memcpy", "Memset", "Runtime", "Operator"): one trace format, read either way.
ACTIVITY_CATEGORIES = {
    "kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset",
    "Kernel": "kernel", "Memcpy": "memcpy", "Memset": "memset",
}
CALL_CATEGORIES = ("cuda_runtime", "cuda_driver", "Runtime", "runtime", "Driver")
RANGE_CATEGORIES = ("user_annotation", "cpu_op", "python_function", "Operator")
CPU_OP_CATEGORIES = ("cpu_op", "Operator")
# Host-side categories perfdoctor knows and does not need (not GPU work of any kind).
KNOWN_HOST_CATEGORIES = frozenset({
    "gpu_user_annotation", "overhead", "Trace", "cpu_instant_event", "python", "fwdbwd", "ac2g",
    "Python", "Memory", "cuda_profiler_range",
})
PROFILER_STEP = re.compile(r"^ProfilerStep#\d+$")

# "Memcpy HtoD (Pageable -> Device)": the copy direction and the host memory kind.
MEMCPY_NAME = r"^Memcpy (?P<copy_kind>\w+) \((?P<src>\w+) -> (?P<dst>\w+)\)"

DRIVER_COPY_KERNEL = re.compile(r"^memcpy\d+_post$")

# Ids and numbers are usually ints but tracers differ; accept what JSON may hold.
Scalar = Union[int, float, str, None]


class Args(msgspec.Struct, gc=False):
    """The event arguments perfdoctor reads; every other key is skipped while parsing."""

    correlation: Scalar = None
    device: Scalar = None
    stream: Scalar = None
    grid: Union[tuple[int, ...], None] = None  # tuples: hashable, so each distinct one is joined once
    block: Union[tuple[int, ...], None] = None
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


class _Header(msgspec.Struct):
    """The document's keys other than its events."""

    deviceProperties: Union[list[dict[str, Any]], None] = None  # noqa: N815
    cuda_driver_version: Scalar = None
    cuda_runtime_version: Scalar = None
    cupti_version: Scalar = None
    distributedInfo: Any = None  # noqa: N815 (torch.distributed: rank, world_size; any type: checked in _distributed)


class Trace(_Header):
    traceEvents: Union[list[Event], None] = None  # noqa: N815 (Kineto's key)


class _Rest(_Header):
    """The document with its events replaced by json_chunks.PLACEHOLDER."""

    traceEvents: Any = None  # noqa: N815


# The sliced decode tags each event by its phase: a complete event ("X") decodes like
# Event, a metadata event ("M") keeps its name and arguments, and every other phase of the
# Chrome trace format (flows, instants, counters: a third of a Kineto trace) decodes to an
# empty struct, its fields skipped unallocated. An event without a phase, or with one not
# listed, fails the slice: the document is then decoded whole with Event.
class _Complete(msgspec.Struct, gc=False, tag_field="ph", tag="X"):
    ph: ClassVar[str] = "X"
    cat: str = ""
    name: str = ""
    ts: Union[float, None] = None
    dur: Union[float, None] = None
    pid: Union[int, str, None] = None
    tid: Union[int, str, None] = None
    args: Union[Args, None] = None


class _Metadata(msgspec.Struct, gc=False, tag_field="ph", tag="M"):
    ph: ClassVar[str] = "M"
    name: str = ""
    args: Union[Args, None] = None


OTHER_PHASES = "BEiICbnestfPNODVvRc()"
_skipped = tuple(
    types.new_class(f"_Phase{ord(p)}", (msgspec.Struct,), {"tag_field": "ph", "tag": p, "gc": False}, lambda ns, p=p: ns.update(ph=p))
    for p in OTHER_PHASES
)

_decoder = msgspec.json.Decoder(Trace)
_events_decoder = msgspec.json.Decoder(list[Union[(_Complete, _Metadata, *_skipped)]])
_rest_decoder = msgspec.json.Decoder(_Rest)
_NO_ARGS = Args()

_CAT, _NAME, _TS, _DUR, _ARGS = (attrgetter(f) for f in ("cat", "name", "ts", "dur", "args"))
_PID, _TID = attrgetter("pid"), attrgetter("tid")
# What each kept category needs beyond its times: GPU work its arguments, host work its thread.
KEPT = (*ACTIVITY_CATEGORIES, *CALL_CATEGORIES, "user_annotation", "python_function")


def load(path: str | Path, *, processes: int | None = None) -> Profile:
    """Read a Kineto trace (``.json`` or ``.json.gz``).

    ``processes``: how many processes decode the events (default: one per usable CPU for
    a large trace, :func:`decode_processes`); the Profile is the same for any number."""
    path = Path(path)
    raw = read_maybe_gzip(path)
    spans = _decode_sliced(raw, decode_processes(len(raw)) if processes is None else processes)
    if spans is not None:
        doc, events = spans
    else:  # not the simple shape (or damaged): decode whole, for the exact error
        doc = _decode_whole(raw, path)
        if doc.traceEvents is None:
            raise UsageError(f"{path}: not a Kineto trace (no 'traceEvents' list)")
        whole = _Events()
        whole.add(doc.traceEvents)
        doc.traceEvents = None
        events = [whole]
    del raw
    total = _Events.merged(events)
    if total.untimed_gpu:
        raise UsageError(
            f"{path}: {total.untimed_gpu} GPU activities lack a valid 'ts' or 'dur' (missing, negative or out of range); "
            "the trace is damaged"
        )
    if not total.timed:
        raise UsageError(f"{path}: empty trace (no complete events)")
    # In one process the columns are built here, after the file's bytes are freed (the lower peak).
    activities, calls, ranges = _Columns.joined([e.columns() for e in events])
    versions = {
        k: getattr(doc, k) for k in ("cuda_driver_version", "cuda_runtime_version", "cupti_version") if getattr(doc, k) is not None
    }
    meta: dict[str, Any] = {"source": "kineto", "path": str(path), "declared": parse_declarations(ranges), "versions": versions}
    # What perfdoctor.workload reads: CPU op names (backward ops, Optimizer.step#...) and thread names.
    meta["op_counts"] = dict(total.op_counts)
    read = set(ACTIVITY_CATEGORIES) | set(CALL_CATEGORIES) | set(RANGE_CATEGORIES) | KNOWN_HOST_CATEGORIES
    unread = {clean(str(cat)): n for cat, n in total.category_counts().items() if cat not in read}
    if unread:
        meta["unread_categories"] = unread  # said when no GPU work was recognised: never "CPU-only"
    meta["thread_names"] = sorted(set(total.thread_names))
    dist = _distributed(doc.distributedInfo)
    if dist:
        meta["distributed"] = dist  # perfdoctor.comparability: world size
    if total.dropped:
        meta["warnings"] = [f"{total.dropped} host events without a valid 'ts' or 'dur' (missing, negative or out of range) dropped"]
    return finish(
        Profile(activities=activities, calls=calls, ranges=ranges, device=_device(doc.deviceProperties or []), meta=meta)
    )


def _decode_whole(raw: bytes | memoryview, path: Path) -> Trace:
    try:
        return _decoder.decode(raw)
    except msgspec.ValidationError as exc:
        raise UsageError(f"{path}: not a Kineto trace ({exc})") from None
    except msgspec.DecodeError as exc:
        raise UsageError(f"{path}: not a JSON trace ({exc})") from None
    except RecursionError:
        raise UsageError(f"{path}: not a Kineto trace (JSON nested too deeply)") from None


PART_BYTES = 48 << 20  # a forked decoder pays for itself from ~50 MB of events (fork, sending back its columns)
MAX_PROCESSES = 8
SPAN_BYTES = 16 << 20  # the share a process takes at a time: 16 spans cost what 2 do (columns, merging); 32 cost more


def decode_processes(size: int) -> int:
    """How many processes decode ``size`` bytes of trace: one per usable CPU
    (:func:`.forked.usable_cpus`), at most one per :data:`PART_BYTES`, at least one."""
    return max(1, min(usable_cpus(), size // PART_BYTES, MAX_PROCESSES))


def decode_spans(size: int, processes: int) -> int:
    """Into how many spans ``processes`` processes cut ``size`` bytes of trace: one per
    :data:`SPAN_BYTES`, at least one per process, at most :attr:`.Tickets.LIMIT`."""
    return max(processes, min(size // SPAN_BYTES, Tickets.LIMIT))


def _decode_sliced(raw: bytes | memoryview, processes: int = 1) -> "tuple[_Header, list[_Events]] | None":
    """The rest of the document and the events of each span (:meth:`.ArraySlices.spans`),
    each decoded a slice at a time (:mod:`.json_chunks`) and turned into columns
    (:meth:`_Events.columns`), by ``processes`` processes; None when that is not possible
    (then decode it whole). A parallel decode that fails (a cut that was no element
    boundary, a child that died) is no answer: it starts again in this process alone,
    where only the document itself can fail it."""
    sliced = array_slices(raw, "traceEvents")
    if sliced is None:
        return None
    spans = sliced.spans(decode_spans(len(raw), processes)) if processes > 1 else [None]
    try:
        events = _decode_spans(sliced, spans, processes) if len(spans) > 1 else [_decode_span(sliced, None)]
        doc = _rest_decoder.decode(sliced.rest())
    except (msgspec.MsgspecError, RecursionError, SliceError, _ChildFailed):
        return None if len(spans) == 1 else _decode_sliced(raw, 1)
    if doc.traceEvents != PLACEHOLDER or type(doc.traceEvents) is not int:  # a nested or second key
        return None
    return doc, events


class _ChildFailed(Exception):
    """A forked decoder gave no result."""


def _decode_span(sliced: ArraySlices, span: tuple[int, int | None] | None) -> "_Events":
    events = _Events()
    for chunk in sliced.decoded(_events_decoder, span=span):
        events.add(chunk)
        del chunk
    events.end = sliced.end  # where the array ended: known to the span that reached it
    return events


def _decode_spans(sliced: ArraySlices, spans: list[tuple[int, int | None]], processes: int) -> "list[_Events]":
    """The spans decoded by this process and ``processes - 1`` forked children (:mod:`.forked`)
    at once, each process taking the next span nobody has taken (:class:`.forked.Tickets`)
    until none is left, so a faster CPU decodes more of them. A child sends back the columns
    and counts of its spans (pickled: numpy columns copy as bytes, and a name shared by many
    rows is sent once); they are put back in the array's order."""

    def work(tickets: Tickets) -> list[tuple[int, _Events]]:
        done = []
        while (i := tickets.take()) is not None:
            events = _decode_span(sliced, spans[i])
            events.columns()
            done.append((i, events))
        return done

    with Tickets(len(spans)) as tickets:

        def child() -> bytes:
            return pickle.dumps(work(tickets), protocol=pickle.HIGHEST_PROTOCOL)

        with children([child] * (processes - 1)) as started:
            done = work(tickets)
            for c in started:
                data = c.result()
                if data is None:
                    raise _ChildFailed
                done += pickle.loads(data)
    events = [e for _, e in sorted(done, key=itemgetter(0))]
    sliced.end = events[-1].end
    return events


MAX_US = 1e15  # ~31 years in µs: beyond it, ns no longer fit an int64 (and no trace is that long)


def _ns(values: np.ndarray) -> np.ndarray:
    return np.rint(np.asarray(values, dtype=np.float64) * 1000.0).astype(np.int64)


@dataclass
class _Taken:
    """The events of one category kept for their columns: times (µs floats) and the events."""

    ts: np.ndarray
    dur: np.ndarray
    events: list[Event]
    cats: np.ndarray | None = None  # each event's category, where several are joined

    def subset(self, keep: np.ndarray) -> "_Taken":
        idx = np.flatnonzero(keep)
        return _Taken(self.ts[idx], self.dur[idx], [self.events[i] for i in idx.tolist()], None if self.cats is None else self.cats[idx])

    def start_end(self) -> tuple[np.ndarray, np.ndarray]:
        start = _ns(self.ts)
        return start, start + _ns(self.dur)


class _Numbering(dict):
    """Numbers each new key as it is first looked up: codes for short repeated strings
    (phases, categories) without hashing them twice."""

    def __missing__(self, key: str) -> int:
        self[key] = code = len(self)
        return code


def _floats_of(values: Any, n: int) -> np.ndarray:
    """float64 of ``n`` numbers or None (None becomes NaN)."""
    values = list(values)
    try:
        return np.fromiter(values, dtype=np.float64, count=n)
    except TypeError:  # a None among them
        return np.array(values, dtype=np.float64)


def _phases(chunk: list[Any]) -> tuple[list[Any], list[Any]]:
    """The complete ("X") and the metadata ("M") events of a slice, in order. The sliced
    decode made each phase its own struct type: a type test per event, in C."""
    if isinstance(chunk[0], Event):  # the whole-document decode: phases are strings
        return [e for e in chunk if e.ph == "X"], [e for e in chunk if e.ph == "M"]
    return list(compress(chunk, map(_Complete.__instancecheck__, chunk))), list(compress(chunk, map(_Metadata.__instancecheck__, chunk)))


class _Events:
    """What the loader keeps of the trace's events, filled a decoded slice at a time: the
    complete ("X") events of the categories it reads, with their times as arrays, CPU op
    names counted, thread names; everything else is dropped with its slice."""

    def __init__(self) -> None:
        self.parts: dict[str, list[tuple[np.ndarray, np.ndarray, list[Event]]]] = {}
        self.op_counts: Counter[str] = Counter()
        self.step_ops: list[tuple[np.ndarray, np.ndarray, list[Event]]] = []  # ProfilerStep#N logged as a CPU op
        self.thread_names: list[str] = []  # every name a thread was given ("pt_autograd_0", then "python3")
        self.timed = 0
        self.dropped = 0
        self.untimed_gpu = 0
        self._is_step: dict[str, bool] = {}
        self._cat = _Numbering()  # each distinct category: an integer
        self._per_cat: Counter[int] = Counter()  # timed complete events per category code
        self.end = -1  # where the event array ended, when this decoder's span reached it
        self.tables: _Columns | None = None  # set by columns(), which drops the events

    def add(self, chunk: list[Any]) -> None:
        """Keep what the loader reads of one slice of events (:class:`Event` or the
        phase-tagged structs of the sliced decode: both have ``ph``)."""
        if not chunk:
            return
        events, metadata = _phases(chunk)
        for e in metadata:
            if e.name == "thread_name" and e.args is not None and isinstance(e.args.name, str):
                self.thread_names.append(e.args.name)
        if not events:
            return
        n = len(events)
        cat = np.fromiter(map(self._cat.__getitem__, map(_CAT, events)), dtype=np.int64, count=n)
        ts, dur = _floats_of(map(_TS, events), n), _floats_of(map(_DUR, events), n)  # None (missing) is NaN
        with np.errstate(invalid="ignore"):
            timed = (-MAX_US < ts) & (ts < MAX_US) & (0 <= dur) & (dur < MAX_US)
        if not timed.all():
            self.dropped += int((~timed).sum())
            gpu = [self._cat[c] for c in ACTIVITY_CATEGORIES]
            self.untimed_gpu += int(np.isin(cat[~timed], gpu).sum())
        self.timed += int(timed.sum())
        self._per_cat.update({c: n for c, n in enumerate(np.bincount(cat[timed]).tolist()) if n})
        for name in KEPT + CPU_OP_CATEGORIES:
            idx = np.flatnonzero(timed & (cat == self._cat[name]))
            if not idx.size:
                continue
            picked = [events[i] for i in idx.tolist()]
            if name in CPU_OP_CATEGORIES:
                self._cpu_ops(ts[idx], dur[idx], picked)
            else:
                self.parts.setdefault(name, []).append((ts[idx], dur[idx], picked))

    def _cpu_ops(self, ts: np.ndarray, dur: np.ndarray, ops: list[Event]) -> None:
        names = list(map(_NAME, ops))
        self.op_counts.update(names)
        known, distinct = self._is_step, set(names)
        for n in distinct.difference(known):
            known[n] = PROFILER_STEP.match(n) is not None
        if any(known[n] for n in distinct):
            keep = np.fromiter(map(known.__getitem__, names), dtype=bool, count=len(names))
            idx = np.flatnonzero(keep)
            self.step_ops.append((ts[idx], dur[idx], [ops[i] for i in idx.tolist()]))

    def _joined(self, parts: list[tuple[np.ndarray, np.ndarray, list[Event]]], cat: str) -> _Taken:
        if not parts:
            return _Taken(np.zeros(0), np.zeros(0), [], np.zeros(0, dtype=object))
        events = [e for p in parts for e in p[2]]
        return _Taken(
            np.concatenate([p[0] for p in parts]),
            np.concatenate([p[1] for p in parts]),
            events,
            np.full(len(events), cat, dtype=object),
        )

    def columns(self) -> "_Columns":
        """The tables of the kept events (built once, into ``self.tables``; the events are
        dropped then, the counts stay)."""
        if self.tables is not None:
            return self.tables
        self.tables = _Columns(
            activities=[_activities(self.taken(cat), kind) for cat, kind in ACTIVITY_CATEGORIES.items()],
            calls=[_host_rows(self.taken(cat), _calls) for cat in CALL_CATEGORIES],
            ranges=[
                _host_rows(_range_sources(taken), _ranges)
                for taken in (self.taken("user_annotation"), self.steps_in_ops(), self.taken("python_function"))
            ],
        )
        self.parts, self.step_ops = {}, []
        return self.tables

    @staticmethod
    def merged(spans: "list[_Events]") -> "_Events":
        """The counts of consecutive spans' decoders, as if one decoder had read them all
        (categories numbered in the order first seen, op names counted in that order)."""
        total = _Events()
        for e in spans:
            total.op_counts.update(e.op_counts)
            total.thread_names += e.thread_names
            total.timed += e.timed
            total.dropped += e.dropped
            total.untimed_gpu += e.untimed_gpu
            for name in e._cat:
                total._cat[name]  # numbered on first sight
            for name, n in e.category_counts().items():
                total._per_cat[total._cat[name]] += n
        return total

    def category_counts(self) -> dict[str, int]:
        """Timed complete events per category name (what the trace has, read or not)."""
        names = {code: name for name, code in self._cat.items()}
        return {names[c]: n for c, n in self._per_cat.items()}

    def taken(self, cat: str) -> _Taken:
        return self._joined(self.parts.get(cat, []), cat)

    def steps_in_ops(self) -> _Taken:
        return self._joined(self.step_ops, "cpu_op")


def _numbers(values: list[Scalar]) -> np.ndarray:
    """float64 of JSON scalars, NaN where missing or not a number (strings are parsed as
    numbers the way pandas parses them)."""
    kinds = set(map(type, values))
    if kinds == {type(None)}:  # an argument this tracer never writes (graph id in an eager trace): 3x faster than np.array
        return np.full(len(values), np.nan)
    if kinds <= {int, float, type(None)}:
        try:
            return np.array(values, dtype=np.float64)
        except OverflowError:  # an int beyond float: pandas decides, as for strings
            pass
    return pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").astype(np.float64).to_numpy()


def _ints(values: list[Scalar]) -> np.ndarray:
    """Integer ids with -1 where missing, not a number or out of the int64 range."""
    v = _numbers(values)
    with np.errstate(invalid="ignore"):
        ok = np.isfinite(v) & (np.abs(v) < 2.0**62)
    return np.where(ok, v, -1).astype(np.int64)


def _floats(values: list[Scalar]) -> np.ndarray:
    """Numbers with NaN where missing, not a number or not finite."""
    v = _numbers(values)
    return np.where(np.isfinite(v), v, np.nan)


def _dims(values: list[tuple[int, ...] | None]) -> np.ndarray:
    """"x,y,z" per launch configuration, "" where absent: joined once per distinct one."""
    index = {v: i for i, v in enumerate(dict.fromkeys(values))}  # tuples hash fast: no pandas object table
    text = np.array(["" if v is None else ",".join(map(str, v)) for v in index], dtype=object)
    return text[np.fromiter(map(index.__getitem__, values), dtype=np.intp, count=len(values))]


def _names(events: list[Event]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each event's name, the same string object for equal names, with the name codes and
    the distinct names (every test of a name runs once per distinct name)."""
    codes, uniques = factorize_strings(list(map(_NAME, events)))  # Event.name is typed str
    return uniques[codes], codes, uniques


def _by_name(codes: np.ndarray, uniques: np.ndarray, test: Any) -> np.ndarray:
    """``test`` (a function of one name) applied to the distinct names, mapped to every event."""
    return np.asarray([test(n) for n in uniques], dtype=object)[codes] if len(uniques) else np.zeros(0, dtype=object)


def _labels(which: np.ndarray, yes: str, no: str) -> np.ndarray:
    """``yes`` where ``which``, else ``no``: an object column holding just these two string
    objects, so tests of it (:func:`perfdoctor.namecodes.factorize`) see two objects, not
    one string per row as ``np.where(...).astype(object)`` makes."""
    return np.array([no, yes], dtype=object)[which.astype(np.intp)]


def _activities(taken: _Taken, kind: str) -> pd.DataFrame:
    events = taken.events
    if not events:
        return frame(ACTIVITY_COLUMNS)
    start, end = taken.start_end()
    args = [a if a is not None else _NO_ARGS for a in map(_ARGS, events)]
    names, codes, uniques = _names(events)
    data: dict[str, Any] = {
        "kind": np.full(len(events), kind, dtype=object),
        "start_ns": start,
        "end_ns": end,
        "device": _ints([a.device for a in args]),
        "stream": _ints([a.stream for a in args]),
        "name": names,
        "correlation": _ints([a.correlation for a in args]),
    }
    if kind == "kernel":
        # A memcpy node of a CUDA graph runs as the driver's copy kernel (memcpy32_post);
        # nsys reports the same work as a memcpy, and so do we, so both tracers agree on
        # kernels per step.
        copies = _by_name(codes, uniques, lambda n: DRIVER_COPY_KERNEL.match(n) is not None).astype(bool)
        data["kind"] = _labels(copies, "memcpy", "kernel")
        data["copy_kind"] = _labels(copies, "DtoD", "")
        data["grid"] = _dims([a.grid for a in args])
        data["block"] = _dims([a.block for a in args])
        data["registers"] = _floats([a.registers for a in args])
        data["shared_mem"] = _floats([a.shared_memory for a in args])
        data["occupancy_pct"] = _floats([a.occupancy for a in args])
        data["graph_id"] = _ints([a.graph_id for a in args])
    else:
        data["bytes"] = _floats([a.bytes for a in args])
    if kind == "memcpy":
        parts = pd.Series(uniques, dtype=object).str.extract(MEMCPY_NAME)
        copy_kind = parts["copy_kind"].fillna("")
        host = pd.Series(np.where(copy_kind.str.startswith("H"), parts["src"], parts["dst"]), dtype=object)
        host = host.fillna("").str.lower().replace({"device": ""})
        data["copy_kind"] = copy_kind.to_numpy(dtype=object)[codes]
        data["host_mem"] = host.to_numpy(dtype=object)[codes]
    return frame(ACTIVITY_COLUMNS, data)


_HostRows = tuple[pd.DataFrame, np.ndarray, np.ndarray]  # a table of host events, and each row's pid and tid as written


def _host_rows(taken: _Taken, table: Any) -> _HostRows:
    """``table(taken)`` (its ``tid`` column left for :meth:`_Columns.joined`), with each
    row's Kineto ``pid`` and ``tid``."""
    n = len(taken.events)
    pids, tids = (np.fromiter(map(get, taken.events), dtype=object, count=n) for get in (_PID, _TID))
    return table(taken), pids, tids


@dataclass
class _Columns:
    """The tables of the events one decoder kept (a span of the event array, or all of
    it): a frame per category, with the Kineto thread of each host row. Every column is
    computed row by row, so the frames of consecutive spans, joined category by
    category (:meth:`joined`), are the tables one decoder of the whole array builds."""

    activities: list[pd.DataFrame]  # one per ACTIVITY_CATEGORIES entry
    calls: list[_HostRows]  # one per CALL_CATEGORIES entry
    ranges: list[_HostRows]  # user_annotation, ProfilerStep#N CPU ops, python_function

    @staticmethod
    def joined(spans: "list[_Columns]") -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
        """The activities (in start order), calls and ranges of consecutive spans, with
        thread ids numbered over the whole trace (:func:`_thread_ids`)."""
        activities = pd.concat(
            [s.activities[i] for i in range(len(ACTIVITY_CATEGORIES)) for s in spans], ignore_index=True
        ).sort_values("start_ns", kind="stable", ignore_index=True)
        calls = [s.calls[i] for i in range(len(CALL_CATEGORIES)) for s in spans]
        ranges = [s.ranges[i] for i in range(3) for s in spans]
        hosts = calls + ranges
        call_tids, range_tids = _thread_ids(
            np.concatenate([h[1] for h in hosts]), np.concatenate([h[2] for h in hosts]), sum(len(c[0]) for c in calls)
        )
        return activities, _with_tids(calls, call_tids, CALL_COLUMNS), _with_tids(ranges, range_tids, RANGE_COLUMNS)


def _with_tids(parts: list[_HostRows], tids: np.ndarray, columns: dict[str, str]) -> pd.DataFrame:
    frames = [p[0] for p in parts if len(p[0])]
    table = frame(columns) if not frames else frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
    table["tid"] = tids
    return table


def _thread_ids(pids: np.ndarray, tids: np.ndarray, n_calls: int) -> tuple[np.ndarray, np.ndarray]:
    """Kineto names a host thread by (pid, tid); each pair gets one integer id, numbered in
    order of first appearance over the calls (the first ``n_calls`` rows), then the ranges."""
    if not len(pids):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    pid, _ = pd.factorize(pd.Series(pids, dtype=object), use_na_sentinel=False)
    tid, uniques = pd.factorize(pd.Series(tids, dtype=object), use_na_sentinel=False)
    codes, _ = pd.factorize(pid.astype(np.int64) * max(len(uniques), 1) + tid)  # the pair, numbered by first appearance
    codes = codes.astype(np.int64)
    return codes[:n_calls], codes[n_calls:]


def _calls(taken: _Taken) -> pd.DataFrame:
    if not taken.events:
        return frame(CALL_COLUMNS)
    start, end = taken.start_end()
    names, _, _ = _names(taken.events)
    args = map(_ARGS, taken.events)
    return frame(
        CALL_COLUMNS,
        {
            "name": names,
            "start_ns": start,
            "end_ns": end,
            "correlation": _ints([(a or _NO_ARGS).correlation for a in args]),
        },
    )


def _range_sources(taken: _Taken) -> _Taken:
    """record_function ranges (``user_annotation``), ``ProfilerStep#N`` (whatever its
    category) and Python frames (``python_function``, from ``with_stack=True``: they name
    the line that issued a sync); each with its source in ``cats``."""
    if not taken.events:
        return taken
    _, codes, uniques = _names(taken.events)
    is_step = _by_name(codes, uniques, lambda n: PROFILER_STEP.match(n) is not None).astype(bool)
    cats = taken.cats
    labels = np.array(["", "profiler_step", "record_function", "python"], dtype=object)  # one object per label (see _labels)
    source = labels[np.select([is_step, cats == "user_annotation", cats == "python_function"], [1, 2, 3], default=0)]
    kept = taken.subset(source != "")
    kept.cats = source[source != ""]
    return kept


def _ranges(taken: _Taken) -> pd.DataFrame:
    if not taken.events:
        return frame(RANGE_COLUMNS)
    start, end = taken.start_end()
    names, _, _ = _names(taken.events)
    return frame(RANGE_COLUMNS, {"name": names, "start_ns": start, "end_ns": end, "source": taken.cats})


def _distributed(info: Any) -> dict[str, Any]:
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
