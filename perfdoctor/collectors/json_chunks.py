"""Decode one large JSON array of a document a few megabytes at a time.

A Kineto trace is one object whose ``traceEvents`` array holds nearly all of its bytes.
Decoding it whole keeps every event struct alive at once (about twice the file's size on
top of the file itself); decoding it in slices of a few MB lets the caller turn each slice
into columns and drop its structs, so the peak is the file plus one slice. Smaller slices
also decode faster (the allocator reuses the memory of the slice before).

How a slice boundary is found without a JSON scanner in Python: a candidate is a ``}``,
``,``, ``{`` sequence (whitespace allowed) after the target offset, and the slice up to it,
wrapped in ``[`` … ``]``, must decode. That succeeds only at a true element boundary: a cut
inside a string leaves the string open, a cut inside a nested object or array leaves it
unclosed, and both are decode errors — then the next candidate is tried. The array's end
is the last ``]`` at which the final slice decodes; the rest of the document (its other
keys) is decoded with a placeholder in the array's place, and finding the placeholder under
the top-level key shows the array was the document's own.

The same test lets several processes decode one array at once (:meth:`ArraySlices.spans`):
the array is cut at candidate boundaries into spans of about equal bytes, each decoded
from its start to its stop; a span's last slice ends exactly at the next span's candidate
cut, so it decodes only when that cut is a true element boundary — every cut is proven by
the span before it, and a false one fails that span instead of misreading the next.

Whenever the document does not have that simple shape (no such key, a nested or repeated
one, a slice that does not decode or validate) the caller decodes the document whole, with
its own error messages.
"""

from __future__ import annotations

import re
from typing import Any, Iterator

import msgspec

SLICE_BYTES = 2 << 20  # ~2 MB: faster than 8 or 32 MB slices, and a small peak
PLACEHOLDER = -7_340_033  # what rest() leaves in the array's place: an integer no event list equals
MAX_ATTEMPTS = 8  # cuts tried per slice (and closing brackets for the last) before giving up

_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_SEPARATOR = re.compile(rb"\s*,\s*")
_SPACE = re.compile(rb"\s*")


class ArraySlices:
    """The array's elements, decoded slice by slice by :meth:`decoded`, and the document
    around it (:meth:`rest`: the document with ``[]`` in the array's place)."""

    def __init__(self, raw: bytes | memoryview, start: int) -> None:
        self._raw = memoryview(raw)
        self._start = start  # offset of the array's '['
        self.end = -1  # offset just past the array's ']', known once the last slice decoded

    def decoded(
        self, decoder: msgspec.json.Decoder, size: int = SLICE_BYTES, span: tuple[int, int | None] | None = None
    ) -> Iterator[list[Any]]:
        """Each slice decoded by ``decoder`` (a decoder of a list of elements), in order.

        ``span``: one of :meth:`spans` (its elements only) instead of the whole array; a
        span with a stop ends with a slice cut exactly there, which must decode.

        Raises :class:`SliceError` when the array cannot be cut (most likely a malformed
        document, or a span's stop that is not an element boundary): the caller then
        decodes another way and reports the document's error. A failed cut doubles the
        slice, a few times at most, so a broken file costs a few slices, not one attempt
        per element."""
        raw = self._raw
        pos, stop = span if span is not None else (_SPACE.match(raw, self._start + 1).end(), None)
        if stop is None and raw[pos : pos + 1] == b"]":  # an empty array (only a first span starts at a "]")
            self.end = pos + 1
            return
        while True:
            for attempt in range(MAX_ATTEMPTS):
                target = pos + (size << attempt)
                if stop is not None and target >= stop:
                    end = stop
                else:
                    cut = _BOUNDARY.search(raw, target) if target < len(raw) else None
                    if cut is None:
                        yield self._last(decoder, pos)
                        return
                    end = cut.start() + 1 if stop is None else min(cut.start() + 1, stop)
                try:
                    items = decoder.decode(b"".join((b"[", raw[pos:end], b"]")))
                except msgspec.DecodeError:  # not an element boundary: a longer slice
                    if end == stop:
                        raise SliceError("a span's stop is not an element boundary") from None
                    continue
                yield items
                del items
                if end == stop:
                    return
                pos = _SEPARATOR.match(raw, end).end()
                break
            else:
                raise SliceError("no element boundary found")

    def spans(self, parts: int) -> list[tuple[int, int | None]]:
        """The array's elements as up to ``parts`` spans of about equal bytes, to decode in
        separate processes (:meth:`decoded` with ``span=``): ``(start, stop)`` offsets, the
        last span's stop None (it runs to the array's end). The cuts are candidates, each
        proven only by decoding the span before it (see the module docstring)."""
        raw = self._raw
        first = _SPACE.match(raw, self._start + 1).end()
        starts, stops = [first], []
        if raw[first : first + 1] != b"]":
            for i in range(1, parts):
                target = first + (len(raw) - first) * i // parts
                cut = _BOUNDARY.search(raw, max(target, starts[-1]))
                if cut is None:
                    break
                stops.append(cut.start() + 1)
                starts.append(_SEPARATOR.match(raw, cut.start() + 1).end())
        return list(zip(starts, [*stops, None]))

    def _last(self, decoder: msgspec.json.Decoder, pos: int) -> list[Any]:
        """The final slice: up to the last ``]`` at which it decodes (see the module docstring)."""
        raw = self._raw
        tail = bytes(raw[pos:])
        close = len(tail)
        for _ in range(MAX_ATTEMPTS):
            close = tail.rfind(b"]", 0, close)
            if close < 0:
                break
            try:
                items = decoder.decode(b"".join((b"[", raw[pos : pos + close + 1])))
            except msgspec.DecodeError:
                continue
            self.end = pos + close + 1
            return items
        raise SliceError("no end of the array found")

    def rest(self) -> bytes:
        """The document with the array replaced by :data:`PLACEHOLDER` (call after every
        slice decoded). The caller checks that the placeholder is what the document's own
        key holds: a nested key of that name, or a second one, leaves something else there."""
        if self.end < 0:
            raise SliceError("the array was not read to its end")
        return b"".join((self._raw[: self._start], str(PLACEHOLDER).encode(), self._raw[self.end :]))


class SliceError(Exception):
    """The array could not be cut into slices; decode the document whole instead."""


def array_slices(raw: bytes | memoryview, key: str) -> ArraySlices | None:
    """Slices of the array under the first ``key`` in ``raw`` (a JSON object), or None when
    there is no such key holding an array. Whether it was the top-level key is known only
    from :meth:`ArraySlices.rest`."""
    found = re.compile(re.escape(b'"' + key.encode() + b'"') + rb"\s*:\s*\[").search(raw)
    if found is None:
        return None
    return ArraySlices(raw, found.end() - 1)
