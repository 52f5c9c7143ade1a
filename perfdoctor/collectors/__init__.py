"""Collectors: each module knows how to run one tool and how to read its output.

:func:`load_trace` is the single entry point for reading something that already exists: a
Kineto trace, an Nsight Systems export or a perfdoctor run bundle. :func:`start_loading`
is the same begun early: a large Kineto trace's decoders start at once, and the caller's
next steps run while they decode (see :class:`Loading`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from perfdoctor.errors import UsageError
from perfdoctor.io import regular_file

if TYPE_CHECKING:  # pandas and the loaders are imported when a trace is read, not with the package
    from perfdoctor.profile import Profile

KINETO_SUFFIXES = (".json", ".json.gz")
NSYS_SUFFIXES = (".sqlite", ".sqlite.gz", ".nsys-rep")


def load_trace(path: str | Path) -> Profile:
    """Read a trace or a run bundle into a :class:`Profile`, choosing the loader by name.

    Only regular files (after resolving symlinks) and bundle directories are read: a FIFO
    or a device is refused before it is opened (see ``docs/safety.md``).
    """
    with start_loading(path) as loading:
        return loading.result()


class Loading:
    """A trace being read (:func:`start_loading`): :meth:`result` is the Profile. Use it
    as a context manager, so work begun for a result never taken is stopped."""

    def __init__(self, result: Callable[[], Profile], close: Callable[[], None] = lambda: None) -> None:
        self.result, self._close = result, close

    def __enter__(self) -> "Loading":
        return self

    def __exit__(self, *exc: object) -> None:
        self._close()


def start_loading(path: str | Path) -> Loading:
    """:func:`load_trace` begun: the path is checked now (so a bad one fails at once) and a
    Kineto trace is read and its forked decoders started
    (:func:`.torch_profiler.start`); an Nsight Systems export or a bundle is read by
    :meth:`Loading.result`."""
    path = Path(path)
    if not os.path.lexists(path):
        raise UsageError(f"{path}: no such file or directory")
    if path.is_dir():
        return Loading(lambda: _load_bundle(path))
    regular_file(path)
    name = path.name.lower()
    if name.endswith(KINETO_SUFFIXES):
        from perfdoctor.collectors import torch_profiler

        begun = torch_profiler.start(path)
        return Loading(begun.result, begun.close)
    if name.endswith(NSYS_SUFFIXES):
        from perfdoctor.collectors import nsys

        return Loading(lambda: nsys.load(path))
    raise UsageError(
        f"{path}: unknown trace type; expected a Kineto trace ({', '.join(KINETO_SUFFIXES)}), "
        f"an Nsight Systems export ({', '.join(NSYS_SUFFIXES)}) or a run bundle directory"
    )


def _load_bundle(path: Path) -> Profile:
    from perfdoctor.bundle import load_bundle
    from perfdoctor.manifest import check_bundle

    check_bundle(path)
    return load_bundle(path)
