"""Mark steps in your own program: ``perfdoctor.step()`` and ``perfdoctor.region()``.

    import perfdoctor

    for token in range(n):
        with perfdoctor.region("decode_step", tokens=1, bytes=weight_bytes):
            logits = model(x)

A region is a range seen by every tool at once: the torch profiler (``record_function``)
and Nsight Systems / Nsight Compute (NVTX, through the ``nvtx`` package when installed,
else ``torch.cuda.nvtx`` when CUDA is available). The first time a name is used with
``tokens`` or ``bytes`` the region also emits a zero-work declaration range
``perfdoctor.declare step=NAME tokens=.. bytes=..`` so the analysis can turn step times
into tokens/s and bandwidth (see :mod:`perfdoctor.declare`).

``perfdoctor.step()`` is the lighter form, like ``torch.profiler.profile.step()``: each call
ends the previous step and starts the next one, as a range named ``perfdoctor.step``.

Outside ``perfdoctor run`` these calls cost a record_function and an NVTX push/pop. Under
``perfdoctor run`` the bootstrap subscribes to them (:func:`subscribe`) to time steps in the
light pass and to start and stop tracing around the ``--warmup`` / ``--steps`` window.

The primitives below bind to the *original* record_function and NVTX functions the first
time they are used; the bootstrap resolves them before it patches those functions to mirror
NVTX into the torch profiler (and back), so a region never appears twice.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from typing import Any, Protocol

from perfdoctor.declare import declaration_name

STEP_RANGE = "perfdoctor.step"


class StepListener(Protocol):
    """What the bootstrap implements to follow the program's steps."""

    def step_start(self, name: str) -> None: ...

    def step_end(self, name: str) -> None: ...

    def declared(self, name: str) -> None: ...


_listeners: list[StepListener] = []
_declarations: dict[str, dict[str, float]] = {}
_local = threading.local()


def subscribe(listener: StepListener) -> None:
    """Call ``listener.step_start/step_end(name)`` around every outermost region and step."""
    _listeners.append(listener)


# --- primitives: one record_function + one NVTX range, bound to the original functions ---


class _Marks:
    """The original range functions, resolved once (before anyone patches them); those of
    ``earlier`` kept (resolved again when torch shows up, after perfdoctor run's light pass
    may have hooked the ``nvtx`` package: bound to the hook, a region's NVTX range was one
    more step)."""

    def __init__(self, earlier: _Marks | None = None) -> None:
        torch = sys.modules.get("torch")
        self.rf_class: Any = None
        if torch is not None:
            # Only when the program already imported torch: a profiler cannot be running
            # otherwise, and importing torch here would cost seconds.
            from torch.autograd.profiler import record_function

            self.rf_class = record_function
            self.rf_enter = record_function.__enter__
            self.rf_exit = record_function.__exit__
        self.nvtx_push: Callable[[str], Any] | None = None
        self.nvtx_pop: Callable[[], Any] | None = None
        if earlier is not None and earlier.nvtx_push is not None:
            self.nvtx_push, self.nvtx_pop = earlier.nvtx_push, earlier.nvtx_pop
            return
        try:
            import nvtx

            self.nvtx_push = nvtx.push_range
            self.nvtx_pop = nvtx.pop_range
        except ImportError:
            if torch is not None and hasattr(torch._C, "_nvtx"):  # a CUDA build; no CUDA init
                self.nvtx_push = torch.cuda.nvtx.range_push
                self.nvtx_pop = torch.cuda.nvtx.range_pop

    def push(self, name: str) -> Any:
        """Open ``name`` in every tool; returns the token :meth:`pop` needs."""
        handle = None
        if self.rf_class is not None:
            handle = self.rf_class(name)
            self.rf_enter(handle)
        if self.nvtx_push is not None:
            self.nvtx_push(name)
        return handle

    def pop(self, handle: Any) -> None:
        if self.nvtx_pop is not None:
            self.nvtx_pop()
        if handle is not None:
            self.rf_exit(handle, None, None, None)


_marks: _Marks | None = None


def marks() -> _Marks:
    """The resolved primitives. Re-resolved once torch shows up, so a region used before
    ``import torch`` does not leave the profiler blind for the rest of the run."""
    global _marks
    if _marks is None or (_marks.rf_class is None and "torch" in sys.modules):
        _marks = _Marks(_marks)
    return _marks


# --- declarations ---


def _emit_declaration(name: str, values: dict[str, float]) -> None:
    m = marks()
    m.pop(m.push(declaration_name(name, values.get("tokens"), values.get("bytes"))))


def redeclare() -> None:
    """Emit every declaration seen so far again: a trace that starts after the first step
    (``--warmup``) must still carry them."""
    for name, values in _declarations.items():
        _emit_declaration(name, values)


def _declare(name: str, tokens: float | None, nbytes: float | None) -> None:
    values = {k: v for k, v in (("tokens", tokens), ("bytes", nbytes)) if v is not None}
    if not values or _declarations.get(name) == values:
        return
    _declarations[name] = values
    _emit_declaration(name, values)
    for listener in _listeners:
        listener.declared(name)


# --- the public API ---


def _depth() -> int:
    return getattr(_local, "depth", 0)


@contextmanager
def region(name: str, tokens: float | None = None, bytes: float | None = None) -> Iterator[None]:  # noqa: A002
    """A named range around one unit of work (``tokens`` and ``bytes`` it does, if known).

    The outermost regions of a thread are the program's steps for ``perfdoctor run``;
    nested regions are plain ranges (a breakdown inside the step).
    """
    if not isinstance(name, str) or not name:
        raise ValueError("perfdoctor.region needs a non-empty name")
    _declare(name, tokens, bytes)
    outermost = _depth() == 0
    if outermost:
        for listener in _listeners:
            listener.step_start(name)
    _local.depth = _depth() + 1
    m = marks()
    handle = m.push(name)
    try:
        yield
    finally:
        m.pop(handle)
        _local.depth -= 1
        if outermost:
            for listener in _listeners:
                listener.step_end(name)


def step() -> None:
    """End the current step (if any) and start the next, as ``prof.step()`` does.

    Call it at the top of every iteration; the last step ends with :func:`end_step`,
    which ``perfdoctor run`` calls for you when the program finishes.
    """
    end_step()
    for listener in _listeners:
        listener.step_start(STEP_RANGE)
    _local.open_step = marks().push(STEP_RANGE)


def end_step() -> None:
    """Close the step opened by the last :func:`step` call on this thread, if one is open."""
    if not hasattr(_local, "open_step"):
        return
    handle = _local.open_step
    del _local.open_step
    marks().pop(handle)
    for listener in _listeners:
        listener.step_end(STEP_RANGE)


def step_function(fn: Callable[..., Any], name: str | None = None) -> Callable[..., Any]:
    """``fn`` wrapped so that every outermost call is a step named ``name`` (default: the
    function's name). Used by ``perfdoctor run --step-fn module:function``."""
    label = name or getattr(fn, "__name__", "step")

    @wraps(fn)
    def stepped(*args: Any, **kwargs: Any) -> Any:
        with region(label):
            return fn(*args, **kwargs)

    return stepped
