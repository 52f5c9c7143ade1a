"""The program's own ranges (``record_function``, the ``nvtx`` package, ``torch.cuda.nvtx``):
:func:`hook_ranges` reports them to the :class:`~perfdoctor.record.bootstrap.session.Session`
and mirrors each kind into the tool that only sees the other.

Its own module because the hooks share one piece of state, the ranges open on each thread
(:class:`_Mirror`), and nothing else of the bootstrap.
"""

from __future__ import annotations

import functools
import sys
import threading
from dataclasses import dataclass
from typing import Any, Callable

from perfdoctor import api
from perfdoctor.names import ranges as rangenames
from perfdoctor.record.bootstrap.session import Session


@dataclass
class _Open:
    """A range open on this thread, as hook_ranges sees it.

    ``echo``: the same name as the range just outside it (one range annotated twice, e.g.
    record_function and NVTX with one name): not a range of its own, not counted again.
    ``skipped``: an NVTX push not passed on, because our record_function mirror already
    pushed the identical NVTX range. ``mirrored``: a record_function we also pushed to NVTX.
    """

    kind: str
    name: str
    echo: bool
    skipped: bool
    handle: Any = None
    mirrored: bool = False


def hook_ranges(session: Session, nvtx_to_torch: bool, torch_to_nvtx: bool) -> Callable[[], None]:
    """Follow ``record_function`` and NVTX ranges (``nvtx`` package, ``torch.cuda.nvtx``):
    report them to the session (steps matching ``--step``, light-pass timing) and, as the
    pass needs, mirror NVTX into the torch profiler or record_function into NVTX, so each
    tool sees the ranges of both kinds.

    On a CPU-only torch, ``torch.cuda.nvtx`` raises (as it does without perfdoctor), so there
    the ``nvtx`` package is the only NVTX source; with no NVTX tool attached its calls are
    no-ops, and this mirror is how its ranges reach the torch trace.

    Returns the hooking of torch's own ranges: done here when torch is imported already,
    else the caller's to run once the program imports it (the light pass leaves that import
    to the program, :func:`perfdoctor.record.bootstrap.main.when_imported`).
    """
    mirror = _Mirror(session, api.marks(), nvtx_to_torch)
    _hook_nvtx_package(mirror)

    def torch_ranges() -> None:
        mirror.marks = api.marks()  # resolved again, torch imported
        if mirror.marks.rf_class is not None:
            _hook_record_function(mirror, torch_to_nvtx)
            _hook_profiler_stop(mirror)
        _hook_torch_nvtx(mirror)

    if "torch" in sys.modules:
        torch_ranges()
    return torch_ranges


class _Mirror:
    """The ranges open on each thread, shared by the hooks of :func:`hook_ranges`."""

    def __init__(self, session: Session, marks: Any, nvtx_to_torch: bool) -> None:
        self.session = session
        self.marks = marks
        self.nvtx_to_torch = nvtx_to_torch
        self.local = threading.local()

    def opened(self) -> list[_Open]:
        if not hasattr(self.local, "items"):
            self.local.items = []
        return self.local.items

    def nvtx_enter(self, name: str) -> bool:
        """Before an NVTX push; False when the push itself must be skipped."""
        items = self.opened()
        outer = items[-1] if items else None
        echo = outer is not None and outer.name == name
        # Our record_function -> NVTX mirror already pushed this very range for nsys/ncu.
        skip = echo and outer.kind == "rf" and outer.mirrored  # type: ignore[union-attr]
        entry = _Open("nvtx", name, echo, skip)
        if not echo:
            self.session.range_start(name)
            if self.nvtx_to_torch and self.marks.rf_class is not None:
                entry.handle = self.marks.rf_class(name)
                self.marks.rf_enter(entry.handle)
        items.append(entry)
        return not skip

    def nvtx_leave(self) -> _Open | None:
        items = self.opened()
        index = next((i for i in range(len(items) - 1, -1, -1) if items[i].kind == "nvtx"), None)
        return None if index is None else items.pop(index)

    def nvtx_left(self, entry: _Open | None) -> None:
        if entry is None or entry.echo:
            return
        if entry.handle is not None:
            self.marks.rf_exit(entry.handle, None, None, None)
        self.session.range_end(entry.name)

    def nvtx_pop(self, original: Any, *args: Any, **kwargs: Any) -> Any:
        entry = self.nvtx_leave()
        result = None if entry is not None and entry.skipped else original(*args, **kwargs)
        self.nvtx_left(entry)
        return result


def _hook_record_function(mirror: _Mirror, torch_to_nvtx: bool) -> None:
    """record_function's enter and exit report the range, and push it to NVTX when asked."""
    session, marks = mirror.session, mirror.marks
    rf = marks.rf_class
    rf_enter, rf_exit = marks.rf_enter, marks.rf_exit
    push = marks.nvtx_push if torch_to_nvtx else None
    pop = marks.nvtx_pop if torch_to_nvtx else None
    light = session.mode == "light"

    def enter(self: Any) -> Any:
        items = mirror.opened()
        echo = bool(items) and items[-1].name == self.name
        if not echo:
            session.range_start(self.name)
        result = rf_enter(self)
        entry = _Open("rf", self.name, echo, False, handle=id(self))
        if push is not None and not echo:
            push(self.name)
            entry.mirrored = True
        items.append(entry)
        return result

    def exit_(self: Any, *exc: Any) -> Any:
        items = mirror.opened()
        index = next((i for i in range(len(items) - 1, -1, -1) if items[i].handle == id(self)), None)
        entry = items.pop(index) if index is not None else _Open("rf", self.name, False, False)
        if entry.mirrored:
            pop()  # type: ignore[misc]
        result = rf_exit(self, *exc)
        if not entry.echo:
            # a data loader's __next__ that raised StopIteration fetched no batch: it ends a
            # pass over the loader (an epoch, or an evaluation loop) and begins no iteration
            raised = bool(exc) and exc[0] is not None
            session.range_end(
                self.name, exhausted=raised and exc[0] is StopIteration,
                profiler_exit=getattr(mirror.local, "profiler_stop", False) and rangenames.kind(self.name) == rangenames.PROFILER_STEP,
                last_batch=_yielded_all(sys._getframe(1)) if light and not raised and self.name.startswith(rangenames.DATA_LOADER_PREFIX) else None,
            )
        return result

    rf.__enter__, rf.__exit__ = enter, exit_


def _yielded_all(frame: Any) -> tuple[int, bool] | None:
    """Whether the data loader iterator whose ``__next__`` is ``frame`` (its fetch range closes
    inside it, after counting the batch) has yielded its pass's last batch: a loop that stops at
    ``len(loader)`` (Lightning's) never calls it again to raise StopIteration, so this is the
    only sign that its pass ended. (the iterator's id, True) where the fetch yielded batch
    ``len(it)``; (its id, False) where it yielded more than ``len(it)``: the length was an
    estimate (Opacus' BatchSplittingSampler under Poisson sampling: 80 for the 90 batches it
    yields), so the batch marked last was none; None before the length, for a loader of no
    length (an iterable dataset) or anything unexpected."""
    it = frame.f_locals.get("self") if frame is not None else None
    try:
        yielded, size = it._num_yielded, len(it)  # type: ignore[union-attr]
    except Exception:  # noqa: BLE001 - not a sized torch data loader iterator
        return None
    return (id(it), yielded == size) if isinstance(yielded, int) and yielded >= size else None


def _hook_profiler_stop(mirror: _Mirror) -> None:
    """torch.profiler's ``profile.stop`` (the ``with`` block's exit) marks the range it
    closes: ``start()`` opens ProfilerStep#0, each ``prof.step()`` closes #k and opens #k+1,
    and ``stop()`` closes the last one — in the recipe's loop (``work(); prof.step()``) the
    range the last ``prof.step()`` opened after the loop's last iteration, which holds none:
    not a step (:mod:`perfdoctor.names.ranges`, ``profiler_step``)."""
    profiler = getattr(sys.modules.get("torch.profiler.profiler"), "profile", None)
    if profiler is None:
        return
    stop = profiler.stop

    def stop_(self: Any, *args: Any, **kwargs: Any) -> Any:
        outer = getattr(mirror.local, "profiler_stop", False)
        mirror.local.profiler_stop = True
        try:
            return stop(self, *args, **kwargs)
        finally:
            mirror.local.profiler_stop = outer

    profiler.stop = stop_


def _hook_nvtx_package(mirror: _Mirror) -> None:
    """The ``nvtx`` package's push_range/pop_range and annotate go through the mirror."""
    try:
        import nvtx
        import nvtx.nvtx as nvtx_impl
    except ImportError:
        return
    orig_push, orig_pop = nvtx.push_range, nvtx.pop_range

    def push_range(message: str | None = None, *args: Any, **kwargs: Any) -> Any:
        if mirror.nvtx_enter(message or ""):
            return orig_push(message, *args, **kwargs)
        return None

    def pop_range(*args: Any, **kwargs: Any) -> Any:
        return mirror.nvtx_pop(orig_pop, *args, **kwargs)

    nvtx.push_range = nvtx_impl.push_range = push_range
    nvtx.pop_range = nvtx_impl.pop_range = pop_range
    annotate = nvtx.annotate
    a_enter, a_exit, a_call = annotate.__enter__, annotate.__exit__, annotate.__call__

    def annotate_enter(self: Any) -> Any:
        if mirror.nvtx_enter(self.init_args[0] or ""):
            a_enter(self)
        return self

    def annotate_exit(self: Any, *exc: Any) -> Any:
        return mirror.nvtx_pop(a_exit, self, *exc)

    def annotate_call(self: Any, func: Any) -> Any:
        inner = a_call(self, func)
        label = self.init_args[0] or func.__name__

        @functools.wraps(func)
        def mirrored(*args: Any, **kwargs: Any) -> Any:
            # inner pushes its own NVTX range: ours only follows it, never skips it.
            mirror.nvtx_enter(label)
            try:
                return inner(*args, **kwargs)
            finally:
                mirror.nvtx_left(mirror.nvtx_leave())

        return mirrored

    annotate.__enter__, annotate.__exit__, annotate.__call__ = annotate_enter, annotate_exit, annotate_call


def _hook_torch_nvtx(mirror: _Mirror) -> None:
    """``torch.cuda.nvtx.range_push``/``range_pop`` go through the mirror."""
    torch = sys.modules.get("torch")
    # A CUDA build, asked without torch.cuda.is_available(), which would initialize the CUDA
    # driver before the program does: the bootstrap should change nothing the program does.
    if torch is None or not hasattr(torch._C, "_nvtx"):
        return
    tnvtx = torch.cuda.nvtx
    t_push, t_pop = tnvtx.range_push, tnvtx.range_pop

    def range_push(msg: str) -> Any:
        return t_push(msg) if mirror.nvtx_enter(msg) else 0

    def range_pop() -> Any:
        return mirror.nvtx_pop(t_pop)

    tnvtx.range_push, tnvtx.range_pop = range_push, range_pop
