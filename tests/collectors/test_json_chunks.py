"""The sliced decode of a trace's event array (perfdoctor.collectors.json_chunks) gives
exactly what decoding the whole document gives, on hostile layouts: strings and nested
arguments full of ``},{`` and ``]``, a nested or repeated key, odd whitespace."""

from __future__ import annotations

import gzip
import json
from typing import Any

import msgspec
from hypothesis import given, settings, strategies as st

from conftest import FIXTURES
from perfdoctor.collectors.json_chunks import PLACEHOLDER, SliceError, array_slices

ANY_LIST = msgspec.json.Decoder(list[Any])
NASTY = st.sampled_from(["},{", "}, {", "]", "[", '"', "\\", '"traceEvents": [', "},\n{", "x"])
text = st.lists(st.one_of(NASTY, st.text(max_size=3)), max_size=4).map("".join)
leaf = st.one_of(st.integers(-5, 5), text, st.none(), st.floats(allow_nan=False, allow_infinity=False))
value = st.recursive(leaf, lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(text, inner, max_size=3)), max_leaves=8)
event = st.fixed_dictionaries({"ph": st.sampled_from(["X", "M", "s"]), "name": text}, optional={"args": value, "ts": leaf})
separators = st.sampled_from([(",", ":"), (", ", ": "), (",\n  ", " : ")])


def sliced(raw: bytes, size: int) -> tuple[list[Any], Any] | None:
    """The events and the rest, or None where the cutter gives up (SliceError: the loader
    then decodes the document whole)."""
    s = array_slices(raw, "traceEvents")
    assert s is not None
    try:
        items = [e for part in s.decoded(ANY_LIST, size) for e in part]
    except SliceError:
        return None
    return items, msgspec.json.decode(s.rest())


@settings(max_examples=150, deadline=None)
@given(events=st.lists(event, max_size=12), before=st.dictionaries(text, value, max_size=2), after=st.dictionaries(text, value, max_size=2), sep=separators, size=st.integers(1, 64))
def test_slices_equal_the_whole_decode(events, before, after, sep, size):
    doc = {**{k: v for k, v in before.items() if k != "traceEvents"}, "traceEvents": events, **{k: v for k, v in after.items() if k != "traceEvents"}}
    raw = json.dumps(doc, separators=sep).encode()
    got = sliced(raw, size)
    if got is None:  # too many false cuts in a row (strings full of "},{"): decoded whole instead
        return
    items, rest = got
    assert items == json.loads(raw)["traceEvents"]
    assert rest["traceEvents"] == PLACEHOLDER
    assert {k: v for k, v in rest.items() if k != "traceEvents"} == {k: v for k, v in json.loads(raw).items() if k != "traceEvents"}


def test_a_nested_key_of_the_same_name_is_not_taken_for_the_events():
    raw = json.dumps({"meta": {"traceEvents": [{"ph": "X"}]}, "traceEvents": [{"ph": "M"}]}).encode()
    items, rest = sliced(raw, 4)
    assert items == [{"ph": "X"}]  # the first key found ...
    assert rest["traceEvents"] != PLACEHOLDER  # ... and the rest shows it was not the document's own


def test_a_broken_array_raises_instead_of_guessing():
    raw = b'{"traceEvents": [{"ph": "X"}, {"ph": "X",}, {"ph": "M"}]}'
    assert sliced(raw, 1) is None  # the loader then decodes whole and reports the JSON error


def test_a_real_trace_cut_in_small_slices():
    raw = gzip.decompress((FIXTURES / "wild" / "h200-train.kineto.json.gz").read_bytes())
    items, rest = sliced(raw, 4096)
    whole = json.loads(raw)
    assert items == whole["traceEvents"]
    assert rest["traceEvents"] == PLACEHOLDER and rest["traceName"] == whole.get("traceName")


def test_every_fixture_trace_takes_the_sliced_path():
    """The real H200 traces decode slice by slice (the memory bound of issue 15), not whole."""
    from perfdoctor.collectors import kineto_events
    from perfdoctor.io import read_maybe_gzip

    traces = sorted(FIXTURES.glob("*.kineto.json.gz")) + sorted((FIXTURES / "wild").glob("*.kineto.json.gz"))
    assert traces
    for trace in traces:
        decoded = kineto_events.decode_sliced(read_maybe_gzip(trace))
        assert decoded is not None, trace.name
        assert decoded[1][0].timed > 0


def spans_decoded(raw: bytes, parts: int, size: int) -> list[Any] | None:
    """Every span of ``parts`` decoded in turn (as the processes of the parallel decode
    do), or None where a span fails (the loader then decodes in one process)."""
    s = array_slices(raw, "traceEvents")
    assert s is not None
    try:
        return [e for span in s.spans(parts) for part in s.decoded(ANY_LIST, size, span=span) for e in part]
    except SliceError:
        return None


@settings(max_examples=150, deadline=None)
@given(events=st.lists(event, max_size=12), sep=separators, parts=st.integers(2, 5), size=st.integers(1, 64))
def test_spans_equal_the_whole_decode_or_fail(events, sep, parts, size):
    """A cut between spans is only a candidate (a "},{" inside a string looks like one):
    the spans either decode to exactly the array, or one of them fails. Never a wrong event."""
    raw = json.dumps({"traceEvents": events, "after": [{"x": 1}, {"y": 2}]}, separators=sep).encode()
    got = spans_decoded(raw, parts, size)
    if got is not None:
        assert got == json.loads(raw)["traceEvents"]


def test_a_false_cut_fails_the_span_before_it():
    """The midpoint falls inside a string holding "},{": the first span cannot end there."""
    raw = json.dumps({"traceEvents": [{"ph": "X", "name": "a" * 40 + "},{" + "b" * 40}, {"ph": "M"}]}).encode()
    s = array_slices(raw, "traceEvents")
    first, second = s.spans(2)
    assert raw[first[1] - 1 : first[1] + 2] == b"},{"  # the candidate cut is the one in the string
    try:
        list(s.decoded(ANY_LIST, 4, span=first))
    except SliceError:
        return
    raise AssertionError("a span ending inside a string decoded")


def test_spans_of_a_real_trace_equal_its_events():
    raw = gzip.decompress((FIXTURES / "wild" / "h200-train.kineto.json.gz").read_bytes())
    whole = json.loads(raw)["traceEvents"]
    for parts in (2, 3, 7):
        s = array_slices(raw, "traceEvents")
        spans = s.spans(parts)
        assert len(spans) == parts
        assert [e for span in spans for part in s.decoded(ANY_LIST, 4096, span=span) for e in part] == whole
        assert msgspec.json.decode(s.rest())["traceEvents"] == PLACEHOLDER  # the last span found the array's end
