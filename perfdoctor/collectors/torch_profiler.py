"""PyTorch profiler (Kineto) traces: read them into a Profile.

Kineto writes Chrome-trace JSON (``export_chrome_trace``, ``tensorboard_trace_handler``):
a ``traceEvents`` list of complete events (``ph == "X"``) whose ``cat`` says what they
are — ``kernel`` / ``gpu_memcpy`` / ``gpu_memset`` on the device, ``cuda_runtime`` /
``cuda_driver`` host API calls, ``user_annotation`` for ``record_function`` ranges and
``ProfilerStep#N``. ``ts`` and ``dur`` are microseconds with fractional nanoseconds.

Reading takes three steps: the file is mapped (:func:`perfdoctor.io.read_maybe_gzip`), its
events decoded into columns (:mod:`.kineto_events`, by several processes for a large
trace), and the columns joined into the Profile's tables (:mod:`.kineto_tables`).
:func:`start` forks the decoders before the caller has imported the analysis (pandas alone
takes 0.3-0.5 s), so that import runs on this CPU while they decode on the others: this
module and the decoding import no pandas, and :meth:`Loading.result` imports the tables'
module only once the decoders are at work.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from perfdoctor.collectors.kineto_events import Events, SlicedDecode, decode_processes, decode_whole, time_origin
from perfdoctor.errors import UsageError
from perfdoctor.io import read_maybe_gzip

if TYPE_CHECKING:
    from perfdoctor.profile import Profile


def load(path: str | Path, *, processes: int | None = None) -> Profile:
    """Read a Kineto trace (``.json`` or ``.json.gz``).

    ``processes``: how many processes decode the events (default: one per usable CPU for
    a large trace, :func:`decode_processes`); the Profile is the same for any number."""
    with start(path, processes=processes) as loading:
        return loading.result()


def start(path: str | Path, *, processes: int | None = None) -> "Loading":
    """:func:`load` begun: the file is read and, for a large trace, the forked decoders are
    already at work when this returns (see :class:`Loading`)."""
    return Loading(Path(path), processes)


class Loading:
    """A Kineto trace being read (:func:`start`). The forked decoders, if any, run from
    the start; :meth:`result` decodes this process's share of the spans and builds the
    Profile. Whatever the caller does in between (load rule packs, import the analysis)
    runs on this CPU while they decode on the others. Leaving the ``with`` block stops
    decoders whose work was not collected."""

    def __init__(self, path: Path, processes: int | None) -> None:
        self.path = path
        self._raw: bytes | memoryview | None = read_maybe_gzip(path)
        n = decode_processes(len(self._raw)) if processes is None else processes
        self._sliced = SlicedDecode.begin(self._raw, n)

    def result(self) -> Profile:
        """The Profile (once: the file's bytes are released after it)."""
        assert self._raw is not None, "result() called twice"
        from perfdoctor.collectors import kineto_tables  # pandas: imported while the decoders run

        raw, path = self._raw, self.path
        decoded = self._sliced.finish(raw) if self._sliced is not None else None
        invalid: tuple[int, str] = (0, "")
        nonstandard = 0
        if decoded is not None:
            doc, events = decoded
        else:  # not the simple shape, or damaged events: decode whole (skipping what is not an event), for the exact error
            whole_doc = decode_whole(raw, path)
            doc, invalid, nonstandard = whole_doc.doc, (whole_doc.skipped, whole_doc.why), whole_doc.nonstandard
            if doc.traceEvents is None:
                raise UsageError(f"{path}: {kineto_tables.not_kineto(raw)}")
            whole = Events(time_origin(raw))
            whole.add(doc.traceEvents)
            doc.traceEvents = None
            events = [whole]
        self._raw = self._sliced = None
        del raw, decoded
        return kineto_tables.profile_of(path, doc, events, invalid, nonstandard)

    def close(self) -> None:
        if self._sliced is not None:
            self._sliced.close()
        self._raw = self._sliced = None

    def __enter__(self) -> "Loading":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
