"""The decoders' shortcuts in building a span's columns (docs/performance.md, "hf 80 MB — the
CPU ops' names hashed once"), each checked against the code it replaced: the CPU
ops' names factorized once per slice and merged per span (it was: counted, made a set, then
factorized again over the span), an op's three shape fields copied and deduplicated as one
key (it was: each field on its own), and the shared zero-length columns of an empty category;
an event's times read straight from the events (docs/results/speed-2026-12-03; it was: each
slice's values listed first)."""

from __future__ import annotations

from collections import Counter

import msgspec
import numpy as np
import pytest

from conftest import FIXTURES
from perfdoctor.collectors import kineto_events as ke
from perfdoctor.io import read_maybe_gzip
from perfdoctor.names.codes import factorize_strings
from perfdoctor.schema import ACTIVITY_COLUMNS, CALL_COLUMNS, OP_COLUMNS, RANGE_COLUMNS, filled

TRACES = sorted(FIXTURES.glob("*.kineto.json.gz")) + sorted((FIXTURES / "wild").glob("*.kineto.json.gz"))


def _replaced_op_names(events: list, origin: int) -> tuple[Counter, list[str]]:
    """What Events._cpu_ops and _ops computed before: every timed CPU op's name counted one
    by one, and the names of the ops that are no step's (ProfilerStep#N, the DataLoader)."""
    ops = [e for e in events if e.ph == "X" and e.cat in ke.CPU_OP_CATEGORIES]
    ts = ke._floats_of(ops, ke._TS) - origin
    timed = ke.timed_mask(ts, ke._floats_of(ops, ke._DUR))
    counts: Counter = Counter()
    rest = []
    for e in (e for e, t in zip(ops, timed) if t):
        counts[e.name] += 1
        if not (ke.PROFILER_STEP_NAME.match(e.name) or ke.DATALOADER_NEXT.search(e.name)):
            rest.append(e.name)
    return counts, rest


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name.split(".")[0])
def test_op_names_factorized_once_are_the_counted_and_refactorized_ones(path) -> None:
    raw = read_maybe_gzip(path)
    doc = ke.decode_whole(raw, path).doc
    events = ke.Events(ke.time_origin(raw))
    for at in range(0, len(doc.traceEvents), 997):  # many slices, as the sliced decode adds them
        events.add(doc.traceEvents[at : at + 997])
    counts, rest = _replaced_op_names(doc.traceEvents, events.origin)
    assert list(events.op_counts.items()) == list(counts.items())  # the same counts, first seen first
    ops = events.columns().ops[0]
    assert ops["name"].tolist() == rest
    codes, uniques = factorize_strings(rest)
    np.testing.assert_array_equal(ops["name"], uniques[codes] if rest else np.zeros(0, dtype=object))


@pytest.mark.parametrize("seed", range(6))
def test_merged_codes_are_factorize_strings_of_all_the_names(seed: int) -> None:
    rng = np.random.default_rng(seed)
    vocabulary = [f"aten::op{i}" for i in range(40)]
    names, parts, with_step = [], [], []
    for _ in range(rng.integers(1, 8)):
        part = [vocabulary[i] for i in rng.integers(0, 1 + rng.integers(0, 40), rng.integers(0, 50))]
        parts.append(factorize_strings(part))
        codes, uniques = factorize_strings(part + ["ProfilerStep#1"])  # as _cpu_ops keeps a slice with a step
        with_step.append((codes[: len(part)], uniques))
        names += part
    want_codes, want_uniques = factorize_strings(names)
    codes, uniques = ke._merged_codes(parts)
    np.testing.assert_array_equal(codes, want_codes)
    assert uniques.tolist() == want_uniques.tolist()
    assert all(a is b for a, b in zip(uniques, want_uniques))  # the first object of each name
    # with a unique no row has: the same names row by row, and the same order of the others
    codes, uniques = ke._merged_codes(with_step)
    np.testing.assert_array_equal(uniques[codes], np.asarray(names + [None], dtype=object)[:-1])
    assert [u for u in uniques.tolist() if u != "ProfilerStep#1"] == want_uniques.tolist()


def _replaced_raws(args: list, field: str) -> np.ndarray:
    """What _ops computed per shape field before: each op's field copied out, equal ones as one object."""
    values = [bytes(getattr(a, field)) for a in args]
    seen: dict = {}
    return np.array([seen.setdefault(v, v) for v in values] + [None], dtype=object)[:-1]


def _check_shapes(args: list) -> None:
    got = ke._shapes(args)
    assert list(got) == list(ke.SHAPE_COLUMNS)
    for col, field in ke.SHAPE_COLUMNS.items():
        want = _replaced_raws(args, field)
        assert got[col].dtype == object and got[col].tolist() == want.tolist()
        assert len({id(v) for v in got[col]}) == len(set(want.tolist()))  # equal values are one object


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name.split(".")[0])
def test_shapes_by_op_are_the_fields_one_by_one(path) -> None:
    raw = read_maybe_gzip(path)
    doc = ke.decode_whole(raw, path).doc
    args = [e.args or ke._NO_ARGS for e in doc.traceEvents if e.ph == "X" and e.cat in ke.CPU_OP_CATEGORIES]
    _check_shapes(args)


def test_shapes_of_ops_with_some_fields_absent() -> None:
    decoder = msgspec.json.Decoder(list[ke.Args])
    args = decoder.decode(
        b'[{"Input Dims": [[1, 2], []], "Input type": ["float", ""]}, {"Concrete Inputs": ["", "3"]},'
        b' {}, {"Input Dims": [[1, 2], []], "Input type": ["float", ""]}, {"Input Dims": [[1,2],[]]},'
        b' {"Input Dims": [], "Input type": [], "Concrete Inputs": []}, {"Input type": ["float", ""]}]'
    )
    _check_shapes(args)
    _check_shapes(decoder.decode(b"[{}, {}]"))


def test_shared_empty_columns_are_filled_ones() -> None:
    for shared, columns in ((ke._NO_ACTIVITIES, ACTIVITY_COLUMNS), (ke._NO_CALLS, CALL_COLUMNS), (ke._NO_OPS, OP_COLUMNS), (ke._NO_RANGES, RANGE_COLUMNS)):
        want = filled(columns)
        assert list(shared) == list(want)
        for col, arr in shared.items():
            assert arr.dtype == want[col].dtype and arr.size == 0
    assert ke._NO_THREADS.dtype == np.int64 and ke._NO_THREADS.size == 0


def _replaced_floats_of(values: list, n: int) -> np.ndarray:
    """Events.add's times before: the values listed, then read (each a NaN where float() fails)."""
    values = list(values)
    try:
        return np.fromiter(values, dtype=np.float64, count=n)
    except (TypeError, ValueError):
        return np.fromiter(map(ke._float_or_nan, values), dtype=np.float64, count=n)


@pytest.mark.parametrize(
    "values",
    [
        [],
        [1, 2.5, 3],
        [1700000000123456, 1.5, None, 7],  # a missing ts: NaN
        [None, None],
        ["12.5", 3, "x", True, float("inf"), -4],  # strings that spell a number or not, a bool, an infinity
        [2**70, 1],  # an int beyond int64 (a float, as float() reads it)
    ],
)
def test_floats_read_from_the_events_are_the_listed_ones(values: list) -> None:
    events = [ke.Event(ph="X", ts=v, dur=v) for v in values]
    got = ke._floats_of(events, ke._TS)
    np.testing.assert_array_equal(got, _replaced_floats_of([e.ts for e in events], len(events)))
    assert got.dtype == np.float64 and got.shape == (len(values),)


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name.split(".")[0])
def test_floats_of_a_trace_are_the_listed_ones(path) -> None:
    events = [e for e in ke.decode_whole(read_maybe_gzip(path), path).doc.traceEvents if e.ph == "X"]
    for field in (ke._TS, ke._DUR):
        np.testing.assert_array_equal(ke._floats_of(events, field), _replaced_floats_of(map(field, events), len(events)))


def _blocks(df) -> list:
    return [(str(b.dtype), b.mgr_locs.as_array.tolist(), b.values.flags["C_CONTIGUOUS"]) for b in df._mgr.blocks]


@pytest.mark.parametrize("order", [False, True])
@pytest.mark.parametrize("sizes", [(0,), (3,), (5, 0, 2), (1, 1, 1, 4)])
def test_tables_joined_into_their_blocks_are_the_frames_of_the_joined_columns(sizes: tuple[int, ...], order: bool) -> None:
    """kineto_tables._table (each column joined straight into its block, pandas >= 3)
    against what it replaced: the frame of the joined columns, rows taken in ``order`` —
    the same values, dtypes, index, columns and blocks; and the frame itself where a
    piece's dtype is not its column's (then it is what it always was)."""
    import pandas as pd

    from perfdoctor.collectors import kineto_tables as kt
    from perfdoctor.profile import frame

    rng = np.random.default_rng(sum(sizes) + order)
    names = np.array(["aten::mm", "kernel", "", "x" * 300], dtype=object)
    for columns in (ACTIVITY_COLUMNS, CALL_COLUMNS, RANGE_COLUMNS, OP_COLUMNS):
        spans = [filled(columns, {c: (names[rng.integers(0, 4, n)] if t == "object" else rng.integers(-5, 5, n).astype(t))
                                  for c, t in columns.items()}) for n in sizes]
        taken = rng.permutation(sum(sizes)) if order else None
        joined = {c: np.concatenate([s[c] for s in spans]) for c in columns}
        want = frame(columns, joined if taken is None else {c: v[taken] for c, v in joined.items()})
        got = kt._table(columns, {c: [s[c] for s in spans] for c in columns}, taken)
        pd.testing.assert_frame_equal(got, want, check_exact=True)
        assert got.columns.equals(want.columns) and got.columns.dtype == want.columns.dtype and got.index.equals(want.index)
        assert _blocks(got) == _blocks(want)
        odd = dict(spans[0], start_ns=spans[0]["start_ns"].astype(np.int32))  # not the column's dtype: the constructor converts it
        mixed = kt._table(columns, {c: [odd[c], *(s[c] for s in spans[1:])] for c in columns}, taken)
        pd.testing.assert_frame_equal(mixed, want, check_exact=True)
