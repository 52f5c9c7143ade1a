"""Kineto's event array decoded into columns, by one process or several, without pandas.

Traces run to hundreds of MB, mostly CPU-op shapes we never read. Decoding into typed
structs (msgspec) materializes only the fields below and skips the rest unallocated, which
is what keeps parsing fast and memory low. The event array is decoded a few MB at a time
(:mod:`perfdoctor.collectors.json_chunks`); each slice's events of the categories read are
kept with their times as arrays, the rest dropped with the slice, so the peak is the file
plus one slice, not the structs of the whole trace. Each category then becomes columns
(numpy arrays, :mod:`perfdoctor.schema`), every name test running once per distinct name.

A large trace is cut into spans decoded by several processes at once (:mod:`.forked`,
:class:`SlicedDecode`). Nothing here imports pandas, so the decoders can be forked before
pandas is imported (see :mod:`.torch_profiler`); :mod:`.kineto_tables` joins the spans'
columns into the Profile's tables.
"""

from __future__ import annotations

import pickle
import re
import types
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass
from itertools import compress
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterator, Union

import msgspec
import numpy as np

from perfdoctor.collectors.forked import Tickets, children, usable_cpus
from perfdoctor.collectors.json_chunks import PLACEHOLDER, ArraySlices, SliceError, array_slices
from perfdoctor.errors import UsageError
from perfdoctor.names.codes import factorize_strings
from perfdoctor.names.ranges import PROFILER_STEP_NAME
from perfdoctor.schema import ACTIVITY_COLUMNS, CALL_COLUMNS, DATA_LOADER_SOURCE, OP_COLUMNS, RANGE_COLUMNS, filled, repeated

# Kineto's category names, and the spellings older PyTorch versions wrote (1.8-1.10:
# "Kernel", "Memcpy", "Memset", "Runtime", "Operator"): one trace format, read either way.
ACTIVITY_CATEGORIES = {
    "kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset",
    "Kernel": "kernel", "Memcpy": "memcpy", "Memset": "memset",
}
CALL_CATEGORIES = ("cuda_runtime", "cuda_driver", "Runtime", "runtime", "Driver")
RANGE_CATEGORIES = ("user_annotation", "cpu_op", "python_function", "Operator")
CPU_OP_CATEGORIES = ("cpu_op", "Operator")
OPS_SOURCE = "cpu_op"  # the source column of the Profile's ``ops`` table
# Host-side categories perfdoctor knows and does not need (not GPU work of any kind).
KNOWN_HOST_CATEGORIES = frozenset({
    "gpu_user_annotation", "overhead", "Trace", "cpu_instant_event", "python", "fwdbwd", "ac2g",
    "Python", "Memory",
})
# Device work of a kind perfdoctor does not read, named in a load warning (and by the
# metrics it leaves unmeasured): CUPTI's range profiler writes the GPU work of a range as
# one `cuda_profiler_range` event (a trace with only that is refused: kineto_tables), Meta's
# MTIA accelerators write `mtia_*` categories.
RANGE_PROFILER = "cuda_profiler_range"
UNREAD_DEVICE_WORK = {RANGE_PROFILER: "CUPTI range-profiler events (cuda_profiler_range)"}
UNREAD_DEVICE_PREFIXES = {"mtia_": "MTIA device events"}
# The DataLoader's iterator, a CPU op torch.profiler records around every batch
# ("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"): kept with its times (source
# "data_loader") so the step attribution can say how long the GPU waited for data.
DATALOADER_NEXT = re.compile(r"DataLoader.*__next__")

# "Memcpy HtoD (Pageable -> Device)": the copy direction and the host memory kind.
MEMCPY_NAME = re.compile(r"^Memcpy (?P<copy_kind>\w+) \((?P<src>\w+) -> (?P<dst>\w+)\)")

DRIVER_COPY_KERNEL = re.compile(r"^memcpy\d+_post$")

# Ids and numbers are usually ints but tracers differ; accept what JSON may hold.
Scalar = Union[int, float, str, None]
# A launch dimension: [x, y, z] of ints (floats in some tracers); torch.compile's CPU ops
# write a string ("grid(100,)"), which is not a kernel's and is read as absent.
Dims = Union[tuple[Union[int, float], ...], str, None]  # tuples: hashable, so each distinct one is joined once


_NO_RAW = msgspec.Raw()


class Args(msgspec.Struct, gc=False):
    """The event arguments perfdoctor reads; every other key is skipped while parsing."""

    correlation: Scalar = None
    device: Scalar = None
    stream: Scalar = None
    grid: Dims = None
    block: Dims = None
    registers: Scalar = msgspec.field(default=None, name="registers per thread")
    shared_memory: Scalar = msgspec.field(default=None, name="shared memory")
    occupancy: Scalar = msgspec.field(default=None, name="est. achieved occupancy %")
    bytes: Scalar = None
    graph_id: Scalar = msgspec.field(default=None, name="graph id")
    # A CPU op's shapes (record_shapes=True): kept unparsed (msgspec.Raw is a view of the
    # bytes, no allocation per element), copied out only for ops that carry them.
    # An absent one is the empty Raw (a Raw cannot be in a Union).
    input_dims: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Input type")
    concrete: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Concrete Inputs")
    name: Any = None  # metadata events (ph "M", thread_name): the thread's name; anything else is ignored


class Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    ts: Scalar = None  # missing or not a number: the event is skipped and counted
    dur: Scalar = None
    pid: Scalar = None
    tid: Scalar = None
    args: Union[Args, None] = None


class Header(msgspec.Struct):
    """The document's keys other than its events."""

    deviceProperties: Union[list[dict[str, Any]], None] = None  # noqa: N815
    cuda_driver_version: Scalar = None
    cuda_runtime_version: Scalar = None
    cupti_version: Scalar = None
    distributedInfo: Any = None  # noqa: N815 (torch.distributed: rank, world_size; any type: checked in kineto_tables.distributed)


class Trace(Header):
    traceEvents: Union[list[Event], None] = None  # noqa: N815 (Kineto's key)


class _Rest(Header):
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
    ts: Scalar = None
    dur: Scalar = None
    pid: Scalar = None
    tid: Scalar = None
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

class _LooseTrace(Header):
    """The document with its events left as their JSON text, each then decoded alone
    (:func:`decode_whole`): a damaged event is skipped, not the trace refused. Text, not
    Python values: an event's shapes are msgspec.Raw fields, which only JSON text fills
    (converting a decoded list into one fails, and every op with shapes was skipped)."""

    traceEvents: Union[list[msgspec.Raw], None] = None  # noqa: N815


_decoder = msgspec.json.Decoder(Trace)
_array_decoder = msgspec.json.Decoder(list[Event])  # the JSON-array form (the legacy autograd profiler)
_loose_decoder = msgspec.json.Decoder(_LooseTrace)
_loose_array_decoder = msgspec.json.Decoder(list[msgspec.Raw])
_event_decoder = msgspec.json.Decoder(Event)
events_decoder = msgspec.json.Decoder(list[Union[(_Complete, _Metadata, *_skipped)]])
_rest_decoder = msgspec.json.Decoder(_Rest)
_NO_ARGS = Args()

_CAT, _NAME, _TS, _DUR, _ARGS = (attrgetter(f) for f in ("cat", "name", "ts", "dur", "args"))
_PID, _TID = attrgetter("pid"), attrgetter("tid")
# What each kept category needs beyond its times: GPU work its arguments, host work its thread.
KEPT = (*ACTIVITY_CATEGORIES, *CALL_CATEGORIES, "user_annotation", "python_function")


@dataclass
class Decoded:
    """The whole document decoded (:func:`decode_whole`): its header and events, and the
    events skipped as not valid Chrome-trace events (with the first reason)."""

    doc: Trace
    skipped: int = 0
    why: str = ""
    nonstandard: int = 0  # NaN/Infinity values read as missing (:data:`_NONSTANDARD`)


_OPENING = re.compile(rb"\s*(.)", re.S)
# Python's json module writes NaN, Infinity and -Infinity for floats that are not finite (a
# trace rewritten by a script: pandas' missing values are NaN), which no JSON parser reads.
# Where one stands as a value (after ':', ',' or '[', before ',', ']' or '}'), it is null: a
# field missing, as the events' own checks then treat it.
_NONSTANDARD = re.compile(rb"([:,\[]\s*)-?(?:NaN|Infinity)(?=\s*[,\]}])")


def decode_whole(raw: bytes | memoryview, path: Path) -> Decoded:
    """The document decoded at once: a ``{"traceEvents": [...]}`` object or the JSON-array
    form of the Chrome trace format (a top-level list of events). When some events do not
    validate (a field of an unexpected type), the events are validated one by one and the
    bad ones skipped and counted; a document that is not a trace still fails whole. One
    that is not JSON only by Python's NaN/Infinity values is read with them as nulls."""
    first = _OPENING.match(memoryview(raw)[:4096])
    array = first is not None and first[1] == b"["
    try:
        try:
            return Decoded(Trace(traceEvents=_array_decoder.decode(raw)) if array else _decoder.decode(raw))
        except msgspec.ValidationError as exc:
            loose = _loose_array_decoder.decode(raw) if array else _loose_decoder.decode(raw)
            return _validated(loose if array else loose.traceEvents, None if array else loose, exc)
    except msgspec.ValidationError as exc:
        raise UsageError(f"{path}: not a Kineto trace ({exc})") from None
    except msgspec.DecodeError as exc:
        standard, n = _NONSTANDARD.subn(rb"\1null", bytes(raw))
        if n:
            decoded = decode_whole(standard, path)
            decoded.nonstandard = n
            return decoded
        raise UsageError(f"{path}: not a JSON trace ({exc})") from None
    except RecursionError:
        raise UsageError(f"{path}: not a Kineto trace (JSON nested too deeply)") from None


def _validated(events: list[msgspec.Raw] | None, header: _LooseTrace | None, first: msgspec.ValidationError) -> Decoded:
    """Each event of ``events`` decoded alone; those that fail are counted, the rest kept."""
    if events is None:  # the events were fine: the header is what failed
        raise first
    kept, skipped, why = [], 0, ""
    for e in events:
        try:
            kept.append(_event_decoder.decode(e))
        except msgspec.ValidationError as exc:
            skipped += 1
            why = why or str(exc)
    doc = Trace(traceEvents=kept)
    if header is not None:
        for key in Header.__struct_fields__:
            setattr(doc, key, getattr(header, key))
    return Decoded(doc, skipped, why)


# A forked decoder pays for itself from ~50 MB of events: it decodes while this process
# imports pandas and loads the rule packs (0.3-0.5 s), then both share the spans left. An
# 83 MB trace: 7.1-9.7 s wall with two processes, 11.3-13.2 s with one, the same CPU (the
# loaded 2-CPU machine); at 48 MB a part, 55-95 MB traces were decoded by one.
PART_BYTES = 24 << 20
MAX_PROCESSES = 8
# The share a process takes at a time. Smaller shares balance the processes better at the
# end (the last one taken is the time the other process may wait), and 8 MB spans cost less
# CPU than 16 MB ones (fewer events alive at once): one process, decode + columns + pickle,
# eager 80 MB 0.61-0.73 -> 0.54-0.59 s, HF 80 MB 0.77-0.80 -> 0.62-0.67, eager 200 MB
# 2.1-2.2 -> 1.87-1.88; 4 and 2 MB no better.
SPAN_BYTES = 8 << 20


def decode_processes(size: int) -> int:
    """How many processes decode ``size`` bytes of trace: one per usable CPU
    (:func:`.forked.usable_cpus`), at most one per :data:`PART_BYTES`, at least one."""
    return max(1, min(usable_cpus(), size // PART_BYTES, MAX_PROCESSES))


def decode_spans(size: int, processes: int) -> int:
    """Into how many spans ``processes`` processes cut ``size`` bytes of trace: one per
    :data:`SPAN_BYTES`, at least one per process, at most :attr:`.Tickets.LIMIT`."""
    return max(processes, min(size // SPAN_BYTES, Tickets.LIMIT))


class SlicedDecode:
    """The event array decoded a slice at a time (:mod:`.json_chunks`), in spans
    (:meth:`.ArraySlices.spans`) by this process and ``processes - 1`` forked children
    (:mod:`.forked`), or whole by this process alone. Each process takes the next span
    nobody has taken (:class:`.forked.Tickets`) until none is left, so a faster CPU
    decodes more of them. The children start in :meth:`begin`; this process joins in
    :meth:`finish`. A child sends back the columns and counts of each span as it finishes
    it (pickled: numpy columns copy as bytes, and a name shared by many rows is sent once),
    and this process unpickles what has come between its own spans; they are put back in
    the array's order."""

    def __init__(self, sliced: ArraySlices, spans: list[tuple[int, int | None]], processes: int, origin: int) -> None:
        self.sliced, self.spans = sliced, spans
        self.origin = origin  # set before the fork: every decoder takes its times from one origin
        self._children: list[Any] = []
        with ExitStack() as stack:
            if len(spans) > 1:
                self._tickets = stack.enter_context(Tickets(len(spans)))
                self._children = stack.enter_context(children([self._child] * (processes - 1)))
            self._stack = stack.pop_all()

    @classmethod
    def begin(cls, raw: bytes | memoryview, processes: int) -> "SlicedDecode | None":
        """The decode started, or None when the document is not the simple shape (then
        decode it whole)."""
        sliced = array_slices(raw, "traceEvents")
        if sliced is None:
            return None
        spans = sliced.spans(decode_spans(len(raw), processes)) if processes > 1 else [None]
        return cls(sliced, spans, processes, time_origin(raw))

    def _work(self) -> Iterator[tuple[int, "Events"]]:
        """The spans this process takes, each decoded into columns, until none is left."""
        while (i := self._tickets.take()) is not None:
            events = _decode_span(self.sliced, self.spans[i], self.origin)
            events.columns()
            yield i, events

    def _child(self) -> Iterator[bytes]:
        for span in self._work():
            yield pickle.dumps(span, protocol=pickle.HIGHEST_PROTOCOL)

    def _decoded(self) -> "list[Events]":
        if len(self.spans) == 1:
            return [_decode_span(self.sliced, None, self.origin)]
        done = []
        for span in self._work():
            done.append(span)
            # The children's spans sent meanwhile, unpickled while they decode the next ones.
            done += [pickle.loads(piece) for c in self._children for piece in c.ready()]
        for c in self._children:
            pieces = c.result()
            if pieces is None:
                raise _ChildFailed
            done += map(pickle.loads, pieces)
        events = [e for _, e in sorted(done, key=itemgetter(0))]
        self.sliced.end = events[-1].end
        return events

    def finish(self, raw: bytes | memoryview) -> "tuple[Header, list[Events]] | None":
        """The rest of the document and the events of each span; None when the document is
        not the simple shape after all. A parallel decode that fails (a cut that was no
        element boundary, a child that died) is no answer: it starts again in this process
        alone, where only the document itself can fail it."""
        try:
            events = self._decoded()
            doc = _rest_decoder.decode(self.sliced.rest())
        except (msgspec.MsgspecError, RecursionError, SliceError, _ChildFailed):
            return None if len(self.spans) == 1 else decode_sliced(raw)
        finally:
            self.close()
        if doc.traceEvents != PLACEHOLDER or type(doc.traceEvents) is not int:  # a nested or second key
            return None
        return doc, events

    def close(self) -> None:
        """Stop and reap the children whose result was not collected."""
        self._stack.close()


def decode_sliced(raw: bytes | memoryview, processes: int = 1) -> "tuple[Header, list[Events]] | None":
    """:class:`SlicedDecode` begun and finished at once."""
    sliced = SlicedDecode.begin(raw, processes)
    return None if sliced is None else sliced.finish(raw)


class _ChildFailed(Exception):
    """A forked decoder gave no result."""


def _decode_span(sliced: ArraySlices, span: tuple[int, int | None] | None, origin: int) -> "Events":
    events = Events(origin)
    for chunk in sliced.decoded(events_decoder, span=span):
        events.add(chunk)
        del chunk
    events.end = sliced.end  # where the array ended: known to the span that reached it
    return events


# Kineto writes epoch µs (ts ≈ 1.6e15, most traces before 2024) or µs of a monotonic clock
# (≈ 5e12: days of uptime). In ns the epoch form is ≈ 1.6e18: it fits an int64 (9.2e18), but
# float64 × 1000 there rounds to 256 ns. So an epoch trace's times are rebased on its first
# timestamp before the µs→ns conversion (the subtraction is exact; what is left is the parse's
# own precision, 0.25 µs at 1.6e15, against 1 ns for a monotonic trace); the origin is kept (Profile
# origin.time_origin_ns) and every time of the Profile shares it, so anything aligned through
# the trace's own events (the bundle's clock-sync range) still aligns. A monotonic-clock
# trace (what `perfdoctor run` records) keeps its times as written.
REBASE_US = 1e14  # epoch µs since 1973, or 3 years of uptime
MAX_US = 1e15  # ~31 years from the origin: no trace spans that; an event that far is damaged

# Only a run of 15-18 digits can be an epoch time (at least REBASE_US, under 19 characters):
# the regular expression passes over every other "ts" itself. A monotonic-clock trace
# (5e12: 13 digits) has none, and its whole first MB was a Python loop over ~6,000 "ts"
# matches: 5 ms warm, 11 ms cold on HF 80 MB -> 1.8 ms, before the decoders fork.
_TS_TEXT = re.compile(rb'"ts"\s*:\s*(-?\d{15,18})(?!\d)')
ORIGIN_SEARCH_BYTES = 1 << 20  # the first events are enough


def time_origin(raw: bytes | memoryview) -> int:
    """The whole µs of the first epoch-time ``"ts"`` (at least :data:`REBASE_US`) among the
    document's first MB, else 0: the origin every time is taken from. Any value near the
    trace's times does (a metadata event's ``"ts": 0`` before them is passed over); found
    from the bytes, it is the same in every forked decoder."""
    for found in _TS_TEXT.finditer(memoryview(raw)[:ORIGIN_SEARCH_BYTES]):
        if len(found[1]) < 19 and abs(first := int(found[1])) >= REBASE_US:
            return first
    return 0


def _ns(values: np.ndarray) -> np.ndarray:
    return np.rint(np.asarray(values, dtype=np.float64) * 1000.0).astype(np.int64)


def timed_mask(ts: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """Which events (``ts`` already taken from the origin, µs) have times the Profile
    keeps: finite, within :data:`MAX_US` of the origin, a duration not negative."""
    with np.errstate(invalid="ignore"):
        return (-MAX_US < ts) & (ts < MAX_US) & (0 <= dur) & (dur < MAX_US)


def start_end_ns(ts: np.ndarray, dur: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start and end in ns of events at ``ts`` (µs from the origin) lasting ``dur`` µs:
    THE conversion of every Profile time (the end is the start plus the rounded
    duration), also what :mod:`perfdoctor.analysis.ranks` reads a small rank's times with."""
    start = _ns(ts)
    return start, start + _ns(dur)


@dataclass
class _Taken:
    """The events of one category kept for their columns: times (µs floats) and the events."""

    ts: np.ndarray
    dur: np.ndarray
    events: list[Event]
    cats: np.ndarray | None = None  # each event's category, where several are joined
    # The events' names factorized already, codes and uniques (the CPU ops', by Events._cpu_ops:
    # their uniques may hold a ProfilerStep#N name, which went to the ranges, that no row has).
    coded: "tuple[np.ndarray, np.ndarray] | None" = None

    def subset(self, keep: np.ndarray) -> "_Taken":
        idx = np.flatnonzero(keep)
        return _Taken(self.ts[idx], self.dur[idx], [self.events[i] for i in idx.tolist()], None if self.cats is None else self.cats[idx])

    def start_end(self) -> tuple[np.ndarray, np.ndarray]:
        return start_end_ns(self.ts, self.dur)


class _Numbering(dict):
    """Numbers each new key as it is first looked up: codes for short repeated strings
    (phases, categories) without hashing them twice."""

    def __missing__(self, key: str) -> int:
        self[key] = code = len(self)
        return code


def _floats_of(events: list[Any], field: Callable[[Any], Scalar]) -> np.ndarray:
    """float64 of one JSON scalar of each event (``field``: its getter, such as ``_TS``): NaN
    for None and for what is not a number (a string timestamp is read when it spells a
    number, else the event is skipped). Read from the events as numpy fills the array, not
    listed first: a None or a string (a damaged trace) is rare, and reading the field again
    then costs less than a list of every slice's values (HF 80 MB, ts and dur of 356k events:
    ~10 ms of the decode's CPU)."""
    try:
        return np.fromiter(map(field, events), dtype=np.float64, count=len(events))
    except (TypeError, ValueError):  # a None or a string among them
        return np.fromiter(map(_float_or_nan, map(field, events)), dtype=np.float64, count=len(events))


def _float_or_nan(v: Scalar) -> float:
    try:
        return float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return float("nan")


def _phases(chunk: list[Any]) -> tuple[list[Any], list[Any]]:
    """The complete ("X") and the metadata ("M") events of a slice, in order. The sliced
    decode made each phase its own struct type: a type test per event, in C."""
    if isinstance(chunk[0], Event):  # the whole-document decode: phases are strings
        return [e for e in chunk if e.ph == "X"], [e for e in chunk if e.ph == "M"]
    return list(compress(chunk, map(_Complete.__instancecheck__, chunk))), list(compress(chunk, map(_Metadata.__instancecheck__, chunk)))


class Events:
    """What the loader keeps of the trace's events, filled a decoded slice at a time: the
    complete ("X") events of the categories it reads, with their times as arrays, CPU op
    names counted, thread names; everything else is dropped with its slice."""

    def __init__(self, origin: int = 0) -> None:
        self.origin = origin  # µs subtracted from every timestamp (time_origin)
        self.parts: dict[str, list[tuple[np.ndarray, np.ndarray, list[Event]]]] = {}
        self.op_counts: Counter[str] = Counter()
        self.step_ops: list[tuple[np.ndarray, np.ndarray, list[Event]]] = []  # ProfilerStep#N logged as a CPU op
        self.ops: list[tuple[np.ndarray, np.ndarray, list[Event]]] = []  # every other CPU op: the operator breakdown, and the shapes bounds costs
        self.op_names: list[tuple[np.ndarray, np.ndarray]] = []  # each part of ops: its names' codes and uniques
        self.thread_names: list[str] = []  # every name a thread was given ("pt_autograd_0", then "python3")
        self.timed = 0
        self.dropped = 0
        self.untimed_gpu = 0
        self._is_step: dict[str, bool] = {}
        self._cat = _Numbering()  # each distinct category: an integer
        self._per_cat: Counter[int] = Counter()  # timed complete events per category code
        self.end = -1  # where the event array ended, when this decoder's span reached it
        self.tables: SpanTables | None = None  # set by columns(), which drops the events

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
        ts, dur = _floats_of(events, _TS) - self.origin, _floats_of(events, _DUR)  # None (missing) is NaN
        timed = timed_mask(ts, dur)
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
        # The names factorized once: counted (by code) and tested (per distinct name) here,
        # and kept for the ops table's name column (_joined). They used to be hashed three
        # times: counted, made a set, factorized.
        codes, uniques = factorize_strings(list(map(_NAME, ops)))
        distinct = uniques.tolist()
        self.op_counts.update(dict(zip(distinct, np.bincount(codes).tolist())))  # first seen first, as counting each name
        known = self._is_step
        for n in distinct:
            if n not in known:
                known[n] = PROFILER_STEP_NAME.match(n) is not None or DATALOADER_NEXT.search(n) is not None
        step = np.fromiter(map(known.__getitem__, distinct), dtype=bool, count=len(distinct))
        if not step.any():
            self.ops.append((ts, dur, ops))
            self.op_names.append((codes, uniques))
            return
        keep = step[codes]
        idx = np.flatnonzero(keep)
        self.step_ops.append((ts[idx], dur[idx], [ops[i] for i in idx.tolist()]))
        rest = np.flatnonzero(~keep)
        self.ops.append((ts[rest], dur[rest], [ops[i] for i in rest.tolist()]))
        self.op_names.append((codes[rest], uniques))  # uniques: the steps' names too, which no row of ops has

    def _joined(
        self, parts: list[tuple[np.ndarray, np.ndarray, list[Event]]], cat: str, coded: list[tuple[np.ndarray, np.ndarray]] | None = None
    ) -> _Taken:
        """The parts as one :class:`_Taken`; ``coded``: each part's names factorized."""
        if not parts:
            return _Taken(np.zeros(0), np.zeros(0), [], np.zeros(0, dtype=object))
        events = [e for p in parts for e in p[2]]
        return _Taken(
            np.concatenate([p[0] for p in parts]),
            np.concatenate([p[1] for p in parts]),
            events,
            repeated(cat, len(events)),
            _merged_codes(coded) if coded else None,
        )

    def columns(self) -> "SpanTables":
        """The tables of the kept events (built once, into ``self.tables``; the events are
        dropped then, the counts stay)."""
        if self.tables is not None:
            return self.tables
        self.tables = SpanTables(
            activities=[_activities(self.taken(cat), kind) for cat, kind in ACTIVITY_CATEGORIES.items()],
            calls=[_host_rows(self.taken(cat), _calls) for cat in CALL_CATEGORIES],
            ranges=[
                _host_rows(_range_sources(taken), _ranges)
                for taken in (self.taken("user_annotation"), self.steps_in_ops(), self.taken("python_function"))
            ],
            ops=_host_rows(self._joined(self.ops, OPS_SOURCE, self.op_names), _ops),
        )
        self.parts, self.step_ops, self.ops, self.op_names = {}, [], [], []
        return self.tables

    @staticmethod
    def merged(spans: "list[Events]") -> "Events":
        """The counts of consecutive spans' decoders, as if one decoder had read them all
        (categories numbered in the order first seen, op names counted in that order)."""
        total = Events(spans[0].origin if spans else 0)
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
    import pandas as pd  # strings as numbers: rare (most tracers write numbers), so pandas is imported only then

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
    text = np.array([_dims_text(v) for v in index], dtype=object)
    return text[np.fromiter(map(index.__getitem__, values), dtype=np.intp, count=len(values))]


def _dims_text(v: Dims) -> str:
    if not isinstance(v, tuple):  # absent, or torch.compile's "grid(100,)" string
        return ""
    return ",".join(str(int(x)) if isinstance(x, float) and x.is_integer() else str(x) for x in v)


def _names(taken: _Taken) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each event's name, the same string object for equal names, with the name codes and
    the distinct names (every test of a name runs once per distinct name)."""
    codes, uniques = taken.coded or factorize_strings(list(map(_NAME, taken.events)))  # Event.name is typed str
    return uniques[codes], codes, uniques


def _merged_codes(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """The codes and uniques of consecutive parts' names factorized part by part, joined:
    uniques in order of first appearance over the parts (the first object of each), codes
    into them — :func:`.factorize_strings` of all the names, when each part's uniques are
    its rows' names. A part's unique that none of its rows has (a ProfilerStep#N name, see
    :meth:`Events._cpu_ops`) is numbered too, and no code points at it."""
    index: dict[str, int] = {}
    codes = []
    for part_codes, uniques in parts:
        to = np.fromiter((index.setdefault(u, len(index)) for u in uniques.tolist()), dtype=np.intp, count=len(uniques))
        codes.append(to[part_codes])
    return np.concatenate(codes), np.fromiter(index, dtype=object, count=len(index))


def _by_name(codes: np.ndarray, uniques: np.ndarray, test: Any) -> np.ndarray:
    """``test`` (a function of one name) applied to the distinct names, mapped to every event."""
    return np.asarray([test(n) for n in uniques], dtype=object)[codes] if len(uniques) else np.zeros(0, dtype=object)


def _labels(which: np.ndarray, yes: str, no: str) -> np.ndarray:
    """``yes`` where ``which``, else ``no``: an object column holding just these two string
    objects, so tests of it (:func:`perfdoctor.names.codes.factorize`) see two objects, not
    one string per row as ``np.where(...).astype(object)`` makes."""
    return np.array([no, yes], dtype=object)[which.astype(np.intp)]


Columns = dict[str, np.ndarray]  # a table's columns (perfdoctor.schema), every one the same length

# The columns of a category no event of a span has, made once: every span has several such
# (three of the six activity spellings, most call categories; on HF 80 MB ~80 zero-length
# arrays a span, 9 spans: ~700 np.full calls and as many arrays pickled). Sharing them is
# safe: an array of no elements holds nothing to write, and :func:`.kineto_tables.joined`
# concatenates every span's columns into new arrays.
_NO_ACTIVITIES, _NO_CALLS, _NO_OPS, _NO_RANGES = (filled(c) for c in (ACTIVITY_COLUMNS, CALL_COLUMNS, OP_COLUMNS, RANGE_COLUMNS))
_NO_THREADS = np.zeros(0, dtype=np.int64)


def _activities(taken: _Taken, kind: str) -> Columns:
    events = taken.events
    if not events:
        return _NO_ACTIVITIES
    start, end = taken.start_end()
    args = [a if a is not None else _NO_ARGS for a in map(_ARGS, events)]
    names, codes, uniques = _names(taken)
    data: dict[str, Any] = {
        "kind": repeated(kind, len(events)),
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
        # Current Kineto writes "graph id": 0 on every eager kernel; only an id > 0 marks a
        # kernel replayed from a CUDA graph, so 0 reads as "no graph" (-1, as nsys's NULL).
        graph = _ints([a.graph_id for a in args])
        data["graph_id"] = np.where(graph > 0, graph, -1)
    else:
        data["bytes"] = _floats([a.bytes for a in args])
    if kind == "memcpy":
        data["copy_kind"] = _by_name(codes, uniques, lambda n: _copy_of(n)[0])
        data["host_mem"] = _by_name(codes, uniques, lambda n: _copy_of(n)[1])
    return filled(ACTIVITY_COLUMNS, data)


def _copy_of(name: str) -> tuple[str, str]:
    """A memcpy's direction and host memory kind from its name ("Memcpy HtoD (Pageable ->
    Device)": "HtoD", "pageable"); the host side is the source of a copy from the host,
    else the destination; "" for what the name does not say (or a device side)."""
    m = MEMCPY_NAME.match(name)
    if m is None:
        return "", ""
    host = (m["src"] if m["copy_kind"].startswith("H") else m["dst"]).lower()
    return m["copy_kind"], "" if host == "device" else host


HostRows = tuple[Columns, np.ndarray, np.ndarray]  # a table of host events, and each row's pid and tid as written


def _host_rows(taken: _Taken, table: Any) -> HostRows:
    """``table(taken)`` (its ``tid`` column left for :func:`.kineto_tables.joined`), with
    each row's Kineto ``pid`` and ``tid``."""
    if not taken.events:
        return table(taken), _NO_THREADS, _NO_THREADS
    return table(taken), _thread_keys(list(map(_PID, taken.events))), _thread_keys(list(map(_TID, taken.events)))


def _thread_keys(values: list[Scalar]) -> np.ndarray:
    """Kineto's pids or tids: int64 when every one is an int (as tracers write them), else
    the objects as written. The threads are numbered over every host row of the trace
    (:func:`.kineto_tables._thread_ids`): integers number ~3x faster than objects, in
    the parent after the decode, and pickle smaller."""
    if set(map(type, values)) <= {int}:
        try:
            return np.array(values, dtype=np.int64)
        except OverflowError:  # beyond int64: kept as written
            pass
    return np.fromiter(values, dtype=object, count=len(values))


@dataclass
class SpanTables:
    """The tables of the events one decoder kept (a span of the event array, or all of
    it), as columns: one per category, with the Kineto thread of each host row. Every
    column is computed row by row, so the columns of consecutive spans, joined category
    by category (:func:`.kineto_tables.joined`), are the tables one decoder of the whole
    array builds."""

    activities: list[Columns]  # one per ACTIVITY_CATEGORIES entry
    calls: list[HostRows]  # one per CALL_CATEGORIES entry
    ranges: list[HostRows]  # user_annotation, ProfilerStep#N CPU ops, python_function
    ops: HostRows  # the other CPU ops (aten::mm, ...), with their recorded shapes: the Profile's ``ops``


def _calls(taken: _Taken) -> Columns:
    if not taken.events:
        return _NO_CALLS
    start, end = taken.start_end()
    names, _, _ = _names(taken)
    args = map(_ARGS, taken.events)
    return filled(
        CALL_COLUMNS,
        {
            "name": names,
            "start_ns": start,
            "end_ns": end,
            "correlation": _ints([(a or _NO_ARGS).correlation for a in args]),
        },
    )


SHAPE_COLUMNS = {"dims": "input_dims", "types": "input_type", "concrete": "concrete"}  # the ops table's columns of the shapes: Args' fields


def _shapes(args: list[Args]) -> Columns:
    """The unparsed shape fields (:data:`SHAPE_COLUMNS`) of each op's arguments as bytes,
    equal ones as one object: every step repeats the same few hundred argument lists, and a
    forked decoder's pickle (:class:`SlicedDecode`) sends a repeated object once (3.7 of a
    5 MB span's pickle, eager 80 MB, before; and as many bytes objects in the parent's
    memory)."""
    raws = [list(map(attrgetter(field), args)) for field in SHAPE_COLUMNS.values()]
    if all(r.count(_NO_RAW) == len(r) for r in raws):
        # No op of the span carries them (an absent field is the one default object): no
        # per-op copy. HF 80 MB records no shapes: its 164k ops' three fields took 0.057 s
        # of the decode's CPU that way, 0.019 s this way (median of 10, one process).
        # One array for the three columns, as the empty categories share theirs (_NO_OPS): a
        # forked decoder's pickle sends it once, not three times (HF 80 MB's 164k ops).
        absent = repeated(b"", len(args))
        return dict.fromkeys(SHAPE_COLUMNS, absent)
    # An op's three fields as one key, copied out and hashed once, each distinct key split
    # back into its fields: eager 80 MB's 9 spans 95-103 -> 43-48 ms (least of 5), against a
    # copy and a hash per field. The separator is unambiguous: msgspec rejects a NUL byte
    # anywhere in JSON, so no Raw holds one.
    codes, keys = factorize_strings(list(map(b"\0".join, zip(*raws))))  # bytes hash and compare as str does
    fields = [k.split(b"\0") for k in keys.tolist()]
    columns = {}
    for i, col in enumerate(SHAPE_COLUMNS):
        seen: dict[bytes, bytes] = {}
        distinct = np.fromiter((seen.setdefault(f[i], f[i]) for f in fields), dtype=object, count=len(fields))
        columns[col] = distinct[codes]
    return columns


def _ops(taken: _Taken) -> Columns:
    if not taken.events:
        return _NO_OPS
    start, end = taken.start_end()
    names, _, _ = _names(taken)
    args = [a if a is not None else _NO_ARGS for a in map(_ARGS, taken.events)]
    return filled(
        OP_COLUMNS,
        {
            "name": names,
            "start_ns": start,
            "end_ns": end,
            **_shapes(args),
        },
    )


def _range_sources(taken: _Taken) -> _Taken:
    """record_function ranges (``user_annotation``), ``ProfilerStep#N`` (whatever its
    category) and Python frames (``python_function``, from ``with_stack=True``: they name
    the line that issued a sync); each with its source in ``cats``."""
    if not taken.events:
        return taken
    _, codes, uniques = _names(taken)
    is_step = _by_name(codes, uniques, lambda n: PROFILER_STEP_NAME.match(n) is not None).astype(bool)
    is_loader = _by_name(codes, uniques, lambda n: DATALOADER_NEXT.search(n) is not None).astype(bool)
    cats = taken.cats
    labels = np.array(["", "profiler_step", "record_function", "python", DATA_LOADER_SOURCE], dtype=object)  # one object per label (see _labels)
    source = labels[np.select([is_step, is_loader, cats == "user_annotation", cats == "python_function"], [1, 4, 2, 3], default=0)]
    kept = taken.subset(source != "")
    kept.cats = source[source != ""]
    return kept


def _ranges(taken: _Taken) -> Columns:
    if not taken.events:
        return _NO_RANGES
    start, end = taken.start_end()
    names, _, _ = _names(taken)
    return filled(RANGE_COLUMNS, {"name": names, "start_ns": start, "end_ns": end, "source": taken.cats})
