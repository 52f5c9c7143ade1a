"""Steps the program does not mark: calls of ``nn.Module``s (:class:`ModuleSteps`), of
``torch.compile``-d functions (:func:`install_compiled_steps`), of models loaded from an
AOTInductor package (:func:`install_aoti_steps`), replays of a CUDA graph the program
captured itself (:class:`GraphReplays`) and calls of ``--step-fn module:function``
(:func:`install_step_fn`).

Each wraps the one callable those calls go through (``nn.Module.__call__``,
``torch.compile``'s result, ``AOTICompiledModel.__call__``, ``torch.cuda.CUDAGraph.replay``,
the named function) and reports them to the
:class:`~perfdoctor.record.bootstrap.session.Session`, directly or through
:mod:`perfdoctor.api`, as steps or ranges. Together because each makes steps of calls the
program did not mark itself.
"""

from __future__ import annotations

import dis
import functools
import importlib.abc
import importlib.machinery
import itertools
import sys
import threading
import time
import types
import weakref
from collections import Counter
from typing import Any

from perfdoctor import api
from perfdoctor.names import ranges as rangenames
from perfdoctor.record.bootstrap.clock import StepTimes
from perfdoctor.record.bootstrap.session import Session


# --- module calls as steps ---------------------------------------------------------------


def module_step_name(cls: type, module: Any = None, classes: dict[str, str] | None = None) -> str:
    """``Class.forward``; a TorchScript module (``torch.jit.script``/``trace``: every one a
    ``RecursiveScriptModule``) by the class it was made from, its ``original_name``
    (rec_jit.py: ``DLRM.forward``), unless another class already goes by that name
    (``classes``: step name -> class path; ``torch.jit.trace`` calls the eager ``DLRM``
    first): then ``RecursiveScriptModule.forward``, as before, two steps never one."""
    if module is not None and scripted(cls):
        original = getattr(module, "original_name", "")
        name = f"{original}.forward"
        if original and (classes is None or classes.get(name, module_class_path(cls)) == module_class_path(cls)):
            return name
    short = f"{class_name(cls)}.forward"
    if classes is None or classes.get(short, module_class_path(cls)) == module_class_path(cls):
        return short
    return f"{cls.__qualname__}.forward"


def class_name(cls: type) -> str:
    """The name a user knows a module class by: its qualified name, but a class made inside a
    function by its own name (``main.<locals>.Net``: ``Net``) and the class torch.fx makes for
    each GraphModule (torch.export's ``ExportedProgram.module()``, ``symbolic_trace``) by the
    first public torch class it subclasses, ``GraphModule``, not
    ``GraphModule.__new__.<locals>.GraphModuleImpl``.
    (``module_step_name`` keeps the qualified name where another class has the short one.)"""
    if "<locals>" not in cls.__qualname__:
        return cls.__qualname__
    if cls.__module__.startswith("torch."):
        public = (c.__qualname__ for c in cls.__mro__[1:] if "<locals>" not in c.__qualname__ and not c.__name__.startswith("_"))
        return next(public)  # torch.nn.Module at the latest
    return cls.__qualname__.rsplit(".<locals>.", 1)[1]


def scripted_as(module: Any, step_name: str) -> bool:
    """Whether the TorchScript ``module`` is the one the light pass named ``step_name``
    (``DLRM.forward``, ``DLRM#2.forward`` for a second instance; its class's name when
    another class had its original name)."""
    base = step_name.removesuffix(".forward").split("#")[0]
    return base in (type(module).__qualname__, getattr(module, "original_name", ""))


def scripted(cls: type) -> bool:
    """A TorchScript module's class (``torch.jit``'s ``RecursiveScriptModule``): one class for
    every scripted model, told apart by each instance's ``original_name``."""
    return cls.__module__.startswith("torch.jit") and isinstance(getattr(cls, "original_name", None), property)


def module_class_path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def is_compiling(torch: Any) -> Any:
    """torch's ``torch.compiler.is_compiling`` (true while dynamo traces a function), or a
    function that says False on a torch without it: a wrapper of perfdoctor's calls it to stay
    out of a graph being compiled."""
    return getattr(getattr(torch, "compiler", None), "is_compiling", None) or (lambda: False)


class _Depth(threading.local):
    depth = 0  # module calls open on this thread (counted up to the depth that matters)


class Instances:
    """Each module's ordinal within its class, by its first depth-0 call (1 for the first):
    how the light pass tells apart two instances of one class called in one loop (assisted
    generation's draft and target, both ``LlamaForCausalLM``), and how a traced pass finds
    again the one the light pass chose. Called the same way in both passes, a program gives
    its instances the same ordinals. A module is known by its ``id()`` while it lives: a
    freed one is forgotten, so a new module that reuses its id gets an ordinal of its own
    (a loss module made anew each iteration is many instances, each called once).

    On the hot path ``ordinals.get(id(module)) or add(module)``: one dict read per call."""

    def __init__(self) -> None:
        self.ordinals: dict[int, int] = {}  # id(module) -> its ordinal
        self.refs: dict[int, Any] = {}  # id(module) -> the weak reference whose callback forgets it
        self.counts: dict[type, int] = {}  # ordinals given per class
        self.lock = threading.Lock()

    def add(self, module: Any) -> int:
        """``module``'s ordinal, given now if it has none (two threads may meet here)."""
        key = id(module)
        with self.lock:
            ordinal = self.ordinals.get(key)
            if ordinal is None:
                cls = type(module)
                ordinal = self.ordinals[key] = self.counts[cls] = self.counts.get(cls, 0) + 1
                self.refs[key] = weakref.ref(module, functools.partial(self.forget, key))
        return ordinal

    def forget(self, key: int, _ref: Any) -> None:
        # runs as the module is freed: before any new object can take its id
        self.ordinals.pop(key, None)
        self.refs.pop(key, None)


class Sites:
    """Each place in the program that calls a module at depth 0 (the caller's code object and
    instruction), an ordinal by its first call (1 for the first): a continuous-batching loop
    calls its model from two places, an admitted request's prefill and the batch's decode,
    and the light pass tells which marks the iteration
    (:func:`perfdoctor.analysis.steps.iteration_site`). A code object is known by its ``id()``
    while it lives: the functions of a running loop do.

    On the hot path ``of(sys._getframe(1))``: a frame read, a tuple and a dict read per
    depth-0 call, 0.45-0.6 us on this 2-core CPU box under load (the instance's note: 0.1-0.25
    us in the same run), once per model call, not per submodule."""

    def __init__(self) -> None:
        self.ordinals: dict[tuple[int, int], int] = {}
        self.lock = threading.Lock()

    def of(self, frame: Any) -> int:
        """The ordinal of the call site ``frame`` (the caller's) is at, given now if it has none."""
        key = (id(frame.f_code), frame.f_lasti)
        ordinal = self.ordinals.get(key)
        if ordinal is None:
            with self.lock:  # two threads may meet here
                ordinal = self.ordinals.setdefault(key, len(self.ordinals) + 1)
        return ordinal


class Windows:
    """Whether each depth-0 call of a class takes as its first argument another window of
    the previous call's input: a tensor of the same shape on the same storage, at another
    place (``data_ptr()``), with grad disabled. mmsegmentation's sliding-window inference
    calls its model on 9 crops of one image (``img[:, :, y1:y2, x1:x2]``), then on the next
    image's: the light pass groups such calls one step per input (:func:`perfdoctor.analysis.steps.call_groups`),
    where a benchmark's calls on one tensor, or a loop's on slices of one preloaded batch
    tensor, never change input between their groups. The shape too: a decode loop that
    slices its token buffer (Meta's Llama ``generate``: ``tokens[:, prev_pos:cur_pos]``)
    calls the prefill on a longer window than each token's. Grad disabled: a training loop
    over windows of one tensor (truncated backpropagation through time: ``source[i:i+bptt]``)
    trains one window per iteration.

    The storage, not ``_base``: views under ``torch.inference_mode()`` have no ``_base``.
    The previous call's storage is held by a weak reference (torch keeps one Python object
    per live storage), so that a freed image whose memory the next one takes is no window
    of it; a new reference only when the storage changes. On the hot path ``of(name,
    args, grad)`` (``grad``: the grad mode the wrapper already read for the call): a tuple
    index, a type check, three C getters, a dict read and write, 0.2-0.3 us on this 2-core
    CPU box: once per model call, not per submodule.

    A library's sliding-window function (``WINDOWING_FUNCTIONS``) may batch its windows by
    ``torch.cat`` (MONAI's ``sliding_window_inference``, ``sw_batch_size`` crops a call): each
    call's input is then new storage. Wrapped by :meth:`over`, its calls of the model are
    windows of one input, the function's (one volume: 84 steps of a window batch each read
    for 12 volumes)."""

    def __init__(self, tensor: type) -> None:
        self.tensor = tensor
        # per step name: (weak ref to the previous input's storage, its shape, its data_ptr,
        # weak ref to the input itself)
        self.last: dict[str, tuple[Any, Any, int, Any]] = {}
        self.local = threading.local()  # .call: the windowing function's call under way (a token), or None
        self.calls: dict[str, object] = {}  # per step name: the windowing call of the previous input

    def over(self, fn: Any) -> Any:
        """``fn``, a windowing function, wrapped: each call a new input, whose windows its
        model calls take."""
        local = self.local

        @functools.wraps(fn)
        def windowing(*args: Any, **kwargs: Any) -> Any:
            if getattr(local, "call", None) is not None:
                return fn(*args, **kwargs)
            local.call = object()
            try:
                return fn(*args, **kwargs)
            finally:
                local.call = None

        return windowing

    def of(self, name: str, args: tuple[Any, ...], grad: bool) -> bool:
        call = getattr(self.local, "call", None)
        if call is not None:
            self.last.pop(name, None)
            same = self.calls.get(name) is call
            self.calls[name] = call
            return same and not grad
        if self.calls:
            self.calls.pop(name, None)
        x = args[0] if args else None
        last = self.last.get(name)
        if last is not None and last[3]() is x:
            # the same tensor again (a benchmark's input): no other window of anything, and
            # nothing to note; one weakref read where the three getters below cost ~0.7 us a
            # call on this 2-core CPU box, several times that inside a GPU forward (item 6)
            return False
        if type(x) is not self.tensor:
            self.last.pop(name, None)
            return False
        try:
            storage, shape, ptr = x.untyped_storage(), x.shape, x.data_ptr()
        except Exception:  # a tensor with no storage of its own (sparse, nested): no window
            self.last.pop(name, None)
            return False
        same = last is not None and last[0]() is storage
        self.last[name] = (last[0] if same else weakref.ref(storage), shape, ptr, weakref.ref(x))
        return same and ptr != last[2] and shape == last[1] and not grad


class ModuleSteps:
    """``torch.nn.Module.__call__``, wrapped thinly: a program with no step markers at all
    has as its step the outermost repeating module call (metrics.md, "Automatic step").

    Light pass (``time=True``), in two phases. Scouting: a global ``Module.__call__``
    keeps, per thread, the depth of nested module calls; calls at depth 0 and 1 are timed
    like steps (host start, CUDA events at start and end), keyed by the class
    (``LlamaForCausalLM.forward``); deeper calls (a transformer layer) only count the depth.
    Once one depth-0 instance has completed SCOUT_CALLS calls, depth 0 repeats, so the step is a
    depth-0 class (the first rule of ``perfdoctor.record.light.choose_module``): ``narrow``
    gives torch back its own ``Module.__call__`` and gives each class seen at depth 0 (only
    those) a ``__call__`` of its own that times its outermost calls. Python looks the call
    up on ``type(module)``, so every submodule is back on torch's path and costs nothing.
    Why: the global wrapper cost every module call a Python frame, a torch.compile check
    and a thread-local read (+0.45 us per call on this 2-core CPU box, a 211-module no-op
    tree; on the H200 the light pass slowed ResNet-50 at batch 1 by 48 %, ViT-small by 25 %).
    What narrowing gives up: a class first called at depth 0 after the scout is not timed,
    and depth-1 series stop at their scouting calls (depth 1 is the step only when depth 0
    never repeats, and then the scout never narrows). A forward hook would be simpler but
    sends every module call down torch's slow path (+1.6-2.7 us per call). It removes itself
    as soon as a range or perfdoctor step repeats (that is the step, then).

    Each depth-0 call also notes its module's instance (:class:`Instances`: a dict read and
    a list append, +75 ns per call narrowed on this CPU box, over ~1.4 us for the wrapper):
    two instances of one class in one loop (assisted generation's draft and target) are
    different steps, and the light pass may choose one (``series``). And its call site
    (:class:`Sites`): one model called from two places in one loop (a server's prefills and
    decodes) may have one of them mark the iteration. And whether grad was enabled
    (``torch.is_grad_enabled()``, a C call and a list append: 32 ns per call narrowed, 50
    while scouting, timeit on this CPU box; 0.2 % of a 14 us step): a training loop with no optimizer and no data loader evaluates the same model
    under ``no_grad`` after each epoch, and its training calls are the steps
    (:func:`perfdoctor.analysis.steps.grad_mode_steps`). And whether its first argument is
    another window of the previous call's input (:class:`Windows`, 0.3 us per call): a
    sliding-window inference's crops of one image are one step.

    Traced passes (``mark``): the calls of one class at one depth (of one instance of it,
    when the light pass chose one; each group's first call, when it grouped them k per
    iteration; those of its grad mode, when its steps are one mode's calls) become a perfdoctor region of that name (record_function for the torch
    profiler, NVTX for nsys and ncu), so the tools see the step the light pass chose.
    """

    DEPTHS = 2
    # Depth-0 calls of one class before narrowing: a few, so that the classes a loop calls
    # at depth 0 (a model and its loss) have all been seen; within image_infer.py's and
    # gpt-fast's default warm-up (10 and 2+ calls), which the steady cut leaves out anyway.
    SCOUT_CALLS = 5

    def __init__(self, session: Session, mark: dict[str, Any] | None = None) -> None:
        import torch

        self.session = session
        self.module_class = torch.nn.Module
        self.original = torch.nn.Module.__call__
        self.local = _Depth()
        self.active = True
        self.scouting = mark is None
        self.narrowing = threading.Lock()
        self.classes: dict[str, str] = {}  # step name -> module.Class
        self.times = [StepTimes(session.timer) for _ in range(self.DEPTHS)]
        self.names: dict[type, str] = {}
        self.tops: dict[type, str] = {}  # classes called at depth 0 -> step name
        self.own: list[tuple[type, Any, Any]] = []  # narrowed: (class, its own __call__ or None, ours)
        self.instances = Instances()
        # per depth-0 step name: the instance (its ordinal) of each call, beside times[0]'s
        self.called: dict[str, list[int]] = {}
        self.sites = Sites()
        self.sited: dict[str, list[int]] = {}  # per depth-0 step name: each call's site, beside times[0]'s
        self.grads: dict[str, list[bool]] = {}  # per depth-0 step name: each call's grad mode, beside times[0]'s
        self.windows = Windows(torch.Tensor)
        self.windowed: dict[str, list[bool]] = {}  # per depth-0 step name: each call's Windows.of, beside times[0]'s
        # once a loop range is the step (keep_work): the host start of each depth-0 call, not
        # timed — the work of the loop's iterations, which tells a fetch that fetched a batch
        # from one a `break` left (perfdoctor.analysis.steady.holds_work)
        self.work_only = False
        self.work_timed = False  # keep_work(timed=True): the calls noted and timed
        self.work_ns: list[int] = []
        self.work_grad: list[bool] = []  # each one's grad mode: an evaluation's calls among the training's
        self.work_end_ns: list[int] = []  # each one's host end (0 until it returns)
        # Under torch.compile (dynamo tracing a forward) the wrapper must be invisible: a
        # thread-local or a clock read there would break the graph. 0.15 us per call.
        self.compiling = is_compiling(torch)
        self.grad_enabled = torch.is_grad_enabled  # a C function: no Python frame per call
        self.wrapper = self.scout_call() if mark is None else self.mark_call(mark)
        torch.nn.Module.__call__ = self.wrapper

    def scout_call(self) -> Any:
        """The light pass's ``Module.__call__`` until :meth:`narrow`: depths 0 and 1 timed
        per class, depth 0's instances noted."""
        original, local, times, names, classes, tops = self.original, self.local, self.times, self.names, self.classes, self.tops
        called, ordinals, add, compiling = self.called, self.instances.ordinals, self.instances.add, self.compiling
        sited, site, frame = self.sited, self.sites.of, sys._getframe
        grads, grad_enabled = self.grads, self.grad_enabled
        windowed, window = self.windowed, self.windows.of
        deepest, scout = self.DEPTHS, self.SCOUT_CALLS
        work, work_grad, work_end, clock = self.work_ns, self.work_grad, self.work_end_ns, time.perf_counter_ns
        # depth-0 calls per instance, (step name, ordinal): the scout ends when one instance
        # repeats, not one class. A model built by calling its own forward (Ultralytics'
        # DetectionModel runs forward() on zeros in __init__ to find its strides) calls each
        # of its layers at depth 0 once: five Conv layers were five calls of a class, and the
        # scout narrowed to the layers before the predictor's model was ever called; each
        # C2f block read as a step, 8 per frame, and the traced pass, which sees them at depth
        # 2, traced nothing.
        repeats: dict[tuple[str, int], int] = {}
        this = self

        def __call__(module: Any, *args: Any, **kwargs: Any) -> Any:
            if compiling():
                return original(module, *args, **kwargs)  # traced by torch.compile: stay out of its graph
            depth = local.depth
            if depth >= deepest:
                # Inside a depth-1 call every call is deeper still: nothing to count.
                return original(module, *args, **kwargs)
            cls = type(module)
            name = names.get(cls)
            if name is None:
                name = module_step_name(cls, module, classes)
                if not scripted(cls):  # a scripted module's name is its instance's: not cached by class
                    names[cls] = name
                classes.setdefault(name, module_class_path(cls))
            noted = -1
            if depth == 0:
                tops.setdefault(cls, name)
                instance = (name, ordinals.get(id(module)) or add(module))
                repeats[instance] = repeats.get(instance, 0) + 1
                called.setdefault(name, []).append(instance[1])
                sited.setdefault(name, []).append(site(frame(1)))
                grads.setdefault(name, []).append(grad_enabled())
                windowed.setdefault(name, []).append(window(name, args, grads[name][-1]))
                if this.work_only:  # a loop range is the step already (keep_work)
                    work.append(clock())
                    work_grad.append(grads[name][-1])
                    noted = len(work_end)
                    work_end.append(0)
            series = times[depth]
            series.start(name)
            local.depth = depth + 1
            try:
                return original(module, *args, **kwargs)
            finally:
                local.depth = depth
                series.end(name)
                if noted >= 0:
                    work_end[noted] = clock()
                if depth == 0 and this.scouting and repeats[instance] >= scout:
                    this.narrow()

        return __call__

    def mark_call(self, mark: dict[str, Any]) -> Any:
        """A traced pass's ``Module.__call__``: the calls of the light pass's module step
        (its class at its depth; its instance, when it chose one) become a region. When the
        light pass grouped the calls k per iteration (``groups``: the group sizes in call
        order, run-length encoded, :func:`perfdoctor.analysis.steps.call_groups`; or by their
        call sites, :func:`perfdoctor.analysis.steps.site_groups`, sizes that vary), only each
        group's first call does: one region per step, which the window counts and a trace
        reads as the iteration's mark. The program calls the same way in every pass (as
        :class:`Instances` assumes); past the light pass's last group, groups of k (1 for
        groups by site)."""
        original, local, compiling, region = self.original, self.local, self.compiling, api.region
        step_depth, path, step_name, instance = int(mark["depth"]), mark["class"], mark["name"], mark.get("instance")
        ordinals, add, grad_enabled = self.instances.ordinals, self.instances.add, self.grad_enabled
        grad = mark.get("grad")  # the light pass's steps are the calls of one grad mode (an evaluation's calls are not)
        first = self.group_firsts(mark)
        this = self

        def __call__(module: Any, *args: Any, **kwargs: Any) -> Any:
            if compiling():
                return original(module, *args, **kwargs)
            depth = local.depth
            if depth > step_depth:
                return original(module, *args, **kwargs)
            local.depth = depth + 1
            try:
                if (depth == step_depth and this.active and module_class_path(type(module)) == path
                        and (not scripted(type(module)) or scripted_as(module, step_name))
                        and (instance is None or (ordinals.get(id(module)) or add(module)) == instance)
                        and (grad is None or grad_enabled() == grad)
                        and (first is None or first())):
                    with region(step_name):
                        return original(module, *args, **kwargs)
                return original(module, *args, **kwargs)
            finally:
                local.depth = depth

        return __call__

    @staticmethod
    def group_firsts(mark: dict[str, Any]) -> Any:
        """For a module step of several calls per iteration (``mark["groups"]``), a function
        called once per call of the step's module that says whether this call begins a
        group; None for one call per step."""
        runs, k = mark.get("groups"), int(mark.get("calls_per_step") or 1)
        if not runs:
            return None
        sizes = (int(size) for size, times in runs for _ in range(int(times)))
        left = [0]  # calls still to come in the open group
        lock = threading.Lock()

        def first() -> bool:
            with lock:
                if left[0] > 0:
                    left[0] -= 1
                    return False
                left[0] = next(sizes, k) - 1
                return True

        return first

    def narrow(self) -> None:
        """End of the scout: torch's own ``Module.__call__`` again, and a timing ``__call__``
        on each class seen at depth 0 only."""
        with self.narrowing:
            if not self.scouting:
                return
            self.scouting = False
            if self.module_class.__call__ is not self.wrapper:
                return  # uninstalled meanwhile (a range repeated), or replaced by someone else
            self.module_class.__call__ = self.original
            for cls, name in list(self.tops.items()):
                own = cls.__dict__.get("__call__")
                ours = self.timed_call(cls, name, cls.__call__)  # resolved now: the class's own, or torch's
                cls.__call__ = ours
                self.own.append((cls, own, ours))

    def timed_call(self, cls: type, name: str, inner: Any) -> Any:
        """``cls.__call__`` after the scout: its outermost calls timed as depth-0 steps; a
        nested call, a subclass's call (``cls``'s attribute is inherited) and a call traced
        by torch.compile go straight to ``inner``."""
        local, series, compiling = self.local, self.times[0], self.compiling
        called, ordinals, add = self.called.setdefault(name, []), self.instances.ordinals, self.instances.add
        sited, site, frame = self.sited.setdefault(name, []), self.sites.of, sys._getframe
        graded, grad_enabled = self.grads.setdefault(name, []), self.grad_enabled
        windowed, window = self.windowed.setdefault(name, []), self.windows.of
        work, work_grad, work_end, clock, this = self.work_ns, self.work_grad, self.work_end_ns, time.perf_counter_ns, self

        by_instance = scripted(cls)  # TorchScript: each instance's name, its original_name
        # the step's own (start, end), held: no method and no dict between the call and its marks
        fixed = None if by_instance else series.lane(name)

        def __call__(module: Any, *args: Any, **kwargs: Any) -> Any:
            if local.depth or type(module) is not cls or compiling():
                return inner(module, *args, **kwargs)
            noted = -1
            if this.work_only:
                work.append(clock())
                work_grad.append(grad_enabled())
                noted = len(work_end)
                work_end.append(0)
                if not this.work_timed:
                    local.depth = 1
                    try:
                        return inner(module, *args, **kwargs)
                    finally:
                        local.depth = 0
                        work_end[noted] = clock()
            if fixed is None:
                step = module_step_name(cls, module, this.classes)
                this.classes.setdefault(step, module_class_path(cls))
                this.called.setdefault(step, []).append(ordinals.get(id(module)) or add(module))
                this.sited.setdefault(step, []).append(site(frame(1)))
                this.grads.setdefault(step, []).append(grad_enabled())
                this.windowed.setdefault(step, []).append(window(step, args, this.grads[step][-1]))
                start, end = series.lane(step)
            else:
                called.append(ordinals.get(id(module)) or add(module))
                sited.append(site(frame(1)))
                graded.append(grad_enabled())
                windowed.append(window(name, args, graded[-1]))
                start, end = fixed
            start()
            local.depth = 1  # a step class called inside this call is not a step
            try:
                return inner(module, *args, **kwargs)
            finally:
                local.depth = 0
                end()
                if noted >= 0:
                    work_end[noted] = clock()

        return __call__

    def keep_work(self, timed: bool = False) -> None:
        """A loop range repeats (a data loader's fetch): it is the step, so module calls are
        timed no more, but each depth-0 call's start and end are noted (``work_ns``,
        ``work_end_ns``): narrowed, one wrapper, two clock reads and a few list appends per call
        of the loop's model. A range that repeats before
        any module call (the seq2seq tutorial's ``encoder_optimizer.zero_grad()`` and
        ``decoder_optimizer.zero_grad()`` at the top of the first iteration) leaves the scout
        on, noting the work, until a class has its scouting calls: narrowed then, it would
        wrap no class, and the light pass saw no work at all. ``timed``: the calls stay timed
        too (an inference loop: a generator called per token inside each fetch, HF's
        pipelines' generate() per batch of their own DataLoader, whose tokens are the steps:
        :func:`perfdoctor.analysis.steps.generates_per_fetch`)."""
        self.work_only, self.work_timed = True, timed
        if self.tops:
            self.narrow()

    def renew_locks(self) -> None:
        """A forked child's own locks (Session.forked)."""
        self.narrowing = threading.Lock()
        self.instances.lock = threading.Lock()

    def uninstall(self) -> None:
        self.active = False
        with self.narrowing:
            self.scouting = False
            if self.module_class.__call__ is self.wrapper:
                self.module_class.__call__ = self.original
            for cls, own, ours in reversed(self.own):
                if cls.__dict__.get("__call__") is ours:
                    if own is None:
                        del cls.__call__
                    else:
                        cls.__call__ = own
            self.own.clear()

    def series(self) -> tuple[dict[str, dict[str, Any]], str | None]:
        """Per depth, the series of each class's calls. A depth-0 class with two instances or
        more that each made two calls or more (that repeat) also has ``instance``: each
        call's instance, by ordinal (:class:`Instances`), for the light pass to tell which
        one marks the loop iteration (:func:`perfdoctor.analysis.steps.iteration_instance`);
        a class with one such instance, the common case, reads as it always did. One called
        from two places or more also has ``site``: each call's site, by ordinal
        (:class:`Sites`, :func:`perfdoctor.analysis.steps.iteration_site`). One called with grad
        enabled and disabled also has ``grad``: each call's mode
        (:func:`perfdoctor.analysis.steps.grad_mode_steps`). One called on windows of one
        input also has ``window``: per call, whether it took another window of the previous
        call's input (:class:`Windows`, :func:`perfdoctor.analysis.steps.call_groups`)."""
        out: dict[str, dict[str, Any]] = {}
        error = None
        for depth, times in enumerate(self.times):
            out[str(depth)], err = times.series()
            error = error or err
        kept_of = {name: self.times[0].kept(name) for name in out["0"]}  # once per name: each pairs ends with starts
        for name, called in self.called.items():
            if name in out["0"]:
                ordinals = [called[i] for i in kept_of[name]]
                if sum(n >= 2 for n in Counter(ordinals).values()) >= 2:
                    out["0"][name]["instance"] = ordinals
        for name, sited in self.sited.items():
            if name in out["0"]:
                sites = [sited[i] for i in kept_of[name]]
                if len(set(sites)) >= 2:
                    out["0"][name]["site"] = sites
        for name, grads in self.grads.items():
            if name in out["0"]:
                modes = [grads[i] for i in kept_of[name]]
                if len(set(modes)) == 2:
                    out["0"][name]["grad"] = modes
        for name, windowed in self.windowed.items():
            if name in out["0"]:
                kept = [windowed[i] for i in kept_of[name]]
                if any(kept):
                    out["0"][name]["window"] = kept
        return out, error


# --- calls of torch.compile-d functions as steps ----------------------------------------


# the names a module's whole call goes by: torch's Module.__call__ (an alias of
# _wrapped_call_impl), its _call_impl, perfdoctor's wrappers
MODULE_CALLS = ("__call__", "_wrapped_call_impl", "_call_impl")
RANGED = "_perfdoctor_compiled_range"  # a compiled function's call already wrapped in its range


def install_compiled_steps(session: Session) -> None:
    """``torch.compile``, wrapped: every call of a compiled *function* is a range named
    ``torch.compile: <qualname>`` (:func:`perfdoctor.names.ranges.compiled_name`).

    A gpt-fast decode loop calls ``decode_one_token = torch.compile(decode_one_token,
    mode="reduce-overhead")`` once per token, and inside it no ``nn.Module.__call__`` runs
    in Python (with CUDA graphs the calls are replays): without this the light pass saw only
    the eager prefill's ``Transformer.forward``, once per generation. Light pass: the calls
    are timed like any range (the scout times them as the loop iteration). Traced passes:
    when it is the step the light pass chose, each call becomes a perfdoctor region, so the
    trace and the window see it. A compiled ``nn.Module`` is left alone: its calls are
    module calls already.
    """
    import torch

    original = torch.compile
    module_class = torch.nn.Module
    compiling = is_compiling(torch)
    light = session.mode == "light"

    def wrap(fn: Any, compiled: Any) -> Any:
        if isinstance(compiled, module_class) or not callable(compiled) or getattr(compiled, RANGED, False):
            # torch's decorator factory (``@torch.compile(mode=...)``) calls torch.compile
            # again, through this wrapper: that call's range is the one (before: two nested
            # ranges per call, 80 steps for a training loop's 40)
            return compiled
        owner = getattr(fn, "__self__", None)
        if isinstance(owner, module_class):
            # A module's bound method, named after the module's class as its module calls
            # are: ``model.forward`` (the transformers docs' recipe), or ``model.__call__``
            # (transformers 5's generate compiles that for its decode steps): the latter's
            # function is whatever ``Module.__call__`` is at the time, in a run perfdoctor's
            # own wrapper, whose name differs between the passes.
            method = getattr(fn, "__name__", "forward")
            whole = method in MODULE_CALLS
            name = rangenames.compiled_name(f"{class_name(type(owner))}.{'forward' if whole else method}")
            if whole:
                # its eager calls (generate's prefill) bypass the compiled one: the same
                # forward, so the light pass keeps timing them (Session.stop_module_timing).
                # Not for a compiled ``forward``: ``model(x)`` runs it inside a module call.
                session.compiled_modules.add(name)
        else:
            name = rangenames.compiled_name(getattr(fn, "__qualname__", None) or getattr(fn, "__name__", "function"))

        @functools.wraps(compiled)
        def call(*args: Any, **kwargs: Any) -> Any:
            if session.disabled or compiling():
                return compiled(*args, **kwargs)  # traced by torch.compile: stay out of its graph
            return ranged(session, light, name, compiled, *args, **kwargs)

        setattr(call, RANGED, True)
        return call

    @functools.wraps(original)
    def compile_(model: Any = None, *args: Any, **kwargs: Any) -> Any:
        if light and not session.disabled:
            if session.compiles is None:
                session.compiles = Compiles(session)
            session.compiles.install()
        if model is None:  # torch.compile(mode=...) as a decorator factory
            decorate = original(None, *args, **kwargs)
            return lambda fn: wrap(fn, decorate(fn))
        return wrap(model, original(model, *args, **kwargs))

    torch.compile = compile_


def ranged(session: Session, light: bool, name: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` as a step candidate named ``name``: timed as a range in the
    light pass; in a traced pass a perfdoctor region when it is the step, else left alone."""
    if light:
        session.range_start(name)
        try:
            return fn(*args, **kwargs)
        finally:
            session.range_end(name)
    if session.matches(name):
        with api.region(name):
            return fn(*args, **kwargs)
    return fn(*args, **kwargs)


class FirstUseNames:
    """Objects named by first use, ``name(n)`` for the n-th (1 for the first): the replays of
    each CUDA graph, the calls of each AOTInductor model. Weakly keyed, so a freed object is
    forgotten, and an ordinal is never reused. A caller's hot path reads ``names`` first and
    calls this only for an object not named yet."""

    def __init__(self, name: Any) -> None:
        self.names: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.name, self.lock, self.ordinals = name, threading.Lock(), itertools.count(1)

    def __call__(self, obj: Any) -> str:
        with self.lock:
            name = self.names.get(obj)
            if name is None:
                name = self.names[obj] = self.name(next(self.ordinals))
            return name


# --- calls of a model loaded from an AOTInductor package as steps -------------------------


# where torch defines AOTICompiledModel: since the PT2 archive (2.13 here), and before it
AOTI_MODULES = ("torch.export.pt2_archive._package", "torch._inductor.package.package")


def install_aoti_steps(session: Session) -> None:
    """``AOTICompiledModel.__call__``, wrapped: every call of a model loaded from an
    AOTInductor package (``torch._inductor.aoti_load_package``, PyTorch's AOTInductor docs)
    is a range named after the model (``AOTInductor: model #<n>``,
    :func:`perfdoctor.names.ranges.aoti_name`, ``n`` by first call), timed and marked as a
    ``torch.compile``-d function's calls are. Its calls run compiled C++: no module call and
    no range (aoti_infer.py read "no step seen"). The class's module loads with the package
    (importing it costs the program time): wrapped then, through an import hook that looks
    for that one name, or now if the program already imported it. Like graph replays, only in
    the light pass and in a traced pass whose step is such a model's calls; elsewhere no hook
    and no cost."""
    if session.mode != "light" and not (session.pattern or "").startswith(rangenames.AOTI_PREFIX):
        return
    for name in AOTI_MODULES:  # the class wrapped once, whichever module holds or imports it
        module = sys.modules.get(name)
        if module is not None:
            _wrap_aoti(session, module)
        else:
            sys.meta_path.insert(0, _AfterImport(name, lambda m: _wrap_aoti(session, m)))


def _wrap_aoti(session: Session, module: Any) -> None:
    model_class = getattr(module, "AOTICompiledModel", None)
    if model_class is None or getattr(model_class.__call__, RANGED, False):
        return
    original = model_class.__call__
    name_of = FirstUseNames(rangenames.aoti_name)
    names, light = name_of.names, session.mode == "light"

    @functools.wraps(original)
    def call(model: Any, *args: Any, **kwargs: Any) -> Any:
        if session.disabled:
            return original(model, *args, **kwargs)
        return ranged(session, light, names.get(model) or name_of(model), original, model, *args, **kwargs)

    setattr(call, RANGED, True)
    model_class.__call__ = call


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``then(module)`` once the module named ``name`` has been executed, the first time
    the program imports it; then leaves ``sys.meta_path``."""

    def __init__(self, name: str, then: Any) -> None:
        self.name, self.then = name, then

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None  # the other finders' (this one stays: removing it now would skip the next finder)
        sys.meta_path.remove(self)  # importlib stops at the spec returned
        execute, then = spec.loader.exec_module, self.then

        def exec_module(module: Any) -> None:
            execute(module)
            then(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


class Compiles:
    """Light pass: when torch.compile's dynamo compiled, from its compile-time callbacks
    (``torch._dynamo.callback.callback_handler``'s start and end callbacks: the outermost
    compilation of a frame, a lazily compiled backward, a CUDA graph's recording), in host
    ns on the steps' clock. A step that compiled (a recompilation for a new batch size
    inside the loop) is no steady work of the program's: the analysis leaves it out of the
    rate and the p50 (:func:`perfdoctor.analysis.steady.time_inside`).

    Installed at the first ``torch.compile`` call only (nothing compiles before one: no cost
    to a program that never compiles; the callbacks run at compile time only), and again at
    each later call in case the program's ``torch._dynamo.reset()`` cleared them. The
    handler is torch 2.13's (checked here); older torch had it too, its callbacks once
    called with no argument and now with a ``CallbackArgs`` (both accepted; which versions:
    not checked here). A torch without it: nothing is noted, and compiling steps stay in the
    steady state as before."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.start_ns: list[int] = []
        self.end_ns: list[int] = []

    def install(self) -> None:
        try:
            from torch._dynamo.callback import callback_handler
        except Exception:  # an older torch: no compile callbacks
            return
        if self.started not in getattr(callback_handler, "start_callbacks", ()):
            callback_handler.register_start_callback(self.started)
            callback_handler.register_end_callback(self.ended)

    def started(self, *args: Any) -> None:
        if not self.session.disabled:
            self.start_ns.append(time.perf_counter_ns())

    def ended(self, *args: Any) -> None:
        if not self.session.disabled and len(self.end_ns) < len(self.start_ns):
            self.end_ns.append(time.perf_counter_ns())

    def series(self) -> dict[str, list[int]] | None:
        """``{"start_ns", "end_ns"}`` of every compilation, or None when none ended."""
        n = min(len(self.start_ns), len(self.end_ns))
        return {"start_ns": self.start_ns[:n], "end_ns": self.end_ns[:n]} if n else None


# --- replays of a hand-captured CUDA graph as steps ---------------------------------------


class GraphReplays:
    """``torch.cuda.CUDAGraph.replay``, wrapped: each replay is a range named after its graph
    (``CUDAGraph.replay #<n>``, :func:`perfdoctor.names.ranges.replay_name`, ``n`` the graph's
    ordinal by first replay).

    A program that captures its model in a CUDA graph itself (``with torch.cuda.graph(g):
    static_out = model(static_in)``, then ``static_in.copy_(x); g.replay()`` per iteration:
    PyTorch's CUDA Graphs docs, "whole network capture") calls no module in its loop, and the
    forwards of its warm-up and capture are not steps. Light pass: one series per graph
    object, so the scout can tell one graph replayed once per iteration (the step) from
    vLLM's piecewise graphs or a torch.compile graph with breaks (many graphs per iteration:
    none is the step; :func:`perfdoctor.analysis.steps.one_graph`). A replay inside a module
    call is not timed: the module's call is the step (``OptimizedModule.forward`` of a module
    compiled with ``mode="reduce-overhead"``). Traced passes, installed
    only when the light pass chose a graph's replays: each replay of that graph becomes a
    perfdoctor region, so the trace's steps are those replays. Runs once per replay: a weak
    dictionary lookup and the session's range calls; nothing at all when ``session.disabled``
    (a forked child).
    """

    def __init__(self, session: Session, graph_class: type) -> None:
        self.graph_class = graph_class
        self.own = graph_class.__dict__.get("replay")  # None: inherited, to be inherited again
        self.original = original = graph_class.replay
        self.name_of = name_of = FirstUseNames(rangenames.replay_name)  # a graph's name, given at its first replay
        names, light = name_of.names, session.mode == "light"

        def replay(graph: Any) -> Any:
            if session.disabled:
                return original(graph)
            # named at its first replay, timed or not: the passes number the graphs alike
            name = names.get(graph) or name_of(graph)
            if light:
                modules = session.modules
                if modules is not None and modules.local.depth:
                    # inside a module call (a module compiled with mode="reduce-overhead"
                    # replays its graph inside each call): that call is the step, named for
                    # the user's model, and a second series would cost every step two events
                    return original(graph)
            return ranged(session, light, name, original, graph)

        self.wrapper = functools.wraps(original)(replay)
        graph_class.replay = self.wrapper

    def uninstall(self) -> None:
        if self.graph_class.__dict__.get("replay") is self.wrapper:  # not if someone replaced it since
            if self.own is None:
                del self.graph_class.replay
            else:
                self.graph_class.replay = self.own


def install_graph_replays(session: Session) -> GraphReplays | None:
    """Wrap ``torch.cuda.CUDAGraph.replay`` (:class:`GraphReplays`) in the light pass, and in a
    traced pass whose step is a graph's replays; elsewhere leave it alone (no cost)."""
    import torch

    graph_class = getattr(torch.cuda, "CUDAGraph", None)
    if graph_class is None or not hasattr(graph_class, "replay"):
        return None
    if session.mode != "light" and rangenames.kind(session.pattern or "") != rangenames.REPLAY:
        return None
    return GraphReplays(session, graph_class)


# --- backward calls as steps -------------------------------------------------------------


class BackwardCalls:
    """``torch.autograd.backward`` (``Tensor.backward`` calls it) and ``torch.autograd.grad``
    (``torch.func.grad`` calls it), wrapped: each outermost call is a range named
    :data:`perfdoctor.names.ranges.BACKWARD_RANGE` or :data:`~perfdoctor.names.ranges.GRAD_RANGE`.

    A training loop written by hand (Karpathy's makemore: plain tensors with
    ``requires_grad``, ``loss.backward()``, ``p.data += -lr * p.grad``; the JAX way: a
    model that is a function of a parameter dict, ``torch.func.grad_and_value``, an update by
    ``tree_map``) has no optimizer, module or data loader to mark its iteration, and often
    no function around it to name with ``--step-fn``; its one backward per iteration marks
    it, last in the order of evidence. A call inside another (reentrant checkpointing's
    backward inside the backward, on autograd's thread on a GPU) is part of the outer one: no
    range of its own, so each range is one outermost call. So is the call of an inner
    ``torch.func`` grad transform (``grad(lambda x: grad(f)(x).sum())``: the inner one's call
    comes first, while the outer's transform runs, with two Grad levels on functorch's
    stack). Light pass: timed like any range (one wrapper call per call, nothing per autograd
    node). Traced passes: installed when the light pass chose one, each call a perfdoctor
    region; or when the calls mark a data loader step's training batches (no optimizer range:
    ``PassConfig.backward_marks``), each outermost call then the mark its fetch's tick waits
    for (a test batch has none). Inside a ``torch.compile``-d function the call is left to dynamo."""

    def __init__(self, session: Session, autograd: Any, compiling: Any) -> None:
        self.autograd = autograd
        self.originals = {"backward": autograd.backward, "grad": autograd.grad}
        self.wrappers: dict[str, Any] = {}
        self.depth = 0  # outer calls running: across threads, as the engine's own thread calls back
        light = session.mode == "light"
        self.marks = not light and bool(session.config.backward_marks)  # each backward is a training mark (tally_mark)
        for attr, name, inner in (("backward", rangenames.BACKWARD_RANGE, _never), ("grad", rangenames.GRAD_RANGE, _inner_grad)):
            self.wrappers[attr] = self._wrapper(session, light, name, self.originals[attr], compiling, inner)
            setattr(autograd, attr, self.wrappers[attr])

    def _wrapper(self, session: Session, light: bool, name: str, original: Any, compiling: Any, inner: Any) -> Any:
        @functools.wraps(original)
        def call(*args: Any, **kwargs: Any) -> Any:
            if session.disabled or self.depth or compiling() or inner():
                return original(*args, **kwargs)
            if self.marks:
                session.tally_mark()
            self.depth += 1
            try:
                return ranged(session, light, name, original, *args, **kwargs)
            finally:
                self.depth -= 1

        return call

    def uninstall(self) -> None:
        for attr, wrapper in self.wrappers.items():
            if getattr(self.autograd, attr) is wrapper:  # not if someone replaced it since
                setattr(self.autograd, attr, self.originals[attr])


def _never() -> bool:
    return False


def _inner_grad() -> bool:
    """Whether a ``torch.autograd.grad`` call is an inner ``torch.func`` grad transform's:
    two or more Grad levels on functorch's interpreter stack (None outside any transform)."""
    import torch

    get_stack = getattr(torch._C._functorch, "get_interpreter_stack", None)  # torch >= 2.1
    stack = get_stack() if get_stack is not None else None
    return bool(stack) and sum(i.key() == torch._C._functorch.TransformType.Grad for i in stack) >= 2


def install_backward_calls(session: Session) -> BackwardCalls | None:
    """:class:`BackwardCalls` in the light pass, and in a traced pass whose step they are."""
    import torch

    if session.mode != "light" and rangenames.kind(session.pattern or "") != rangenames.BACKWARD and not session.config.backward_marks:
        return None
    compiling = is_compiling(torch)
    return BackwardCalls(session, torch.autograd, compiling)


# --- one optimizer's steps ----------------------------------------------------------------


class LoopSites:
    """The loop that calls each optimizer step: the innermost loop of the first frame, from
    the step outward, that sits in a loop, past torch's and perfdoctor's frames (the
    program's own loop, or a library's: Lightning's, HF Trainer's). Two optimizers stepped
    in one loop, one every iteration and one every k-th (TD3's critics and its delayed
    actor: ``if step % 2 == 0``), mark one iteration per step of the first; a critic stepped
    k times in an inner loop of its own and a generator once after it (WGAN's
    ``for _ in range(critic_iters)``) mark the generator's: the order of the steps alone
    cannot tell these apart (C A C C A against C C G C C G), the loops can.

    A loop is a backward jump in the frame's bytecode: its body runs from the jump's target
    to the last jump back there (a ``continue`` jumps back too, from inside the body); the
    innermost one holding the call is the one with the latest start. A site is (code object,
    loop start), numbered by first use. Read once per optimizer step (a few frames), the
    code's loops once per code object."""

    SKIP = ("torch", "perfdoctor")

    def __init__(self) -> None:
        self.ids: dict[tuple[Any, int], int] = {}
        self.loops: dict[Any, dict[int, int]] = {}  # code -> loop start -> the body's last offset

    def of(self, frame: Any) -> int | None:
        """The site of the call ``frame`` is in (walking outward), or None outside any loop
        (or where the bytecode cannot be read: the program's step must go on whatever)."""
        try:
            return self._of(frame)
        except Exception:  # noqa: BLE001 - a frame or code object of an unforeseen kind
            return None

    def _of(self, frame: Any) -> int | None:
        while frame is not None:
            if frame.f_globals.get("__name__", "").partition(".")[0] not in self.SKIP:
                code, at = frame.f_code, frame.f_lasti
                loops = self.loops.get(code)
                if loops is None:
                    loops = self.loops[code] = self.code_loops(code)
                start = max((a for a, b in loops.items() if a <= at <= b), default=None)
                if start is not None:
                    return self.ids.setdefault((code, start), len(self.ids))
            frame = frame.f_back
        return None

    @staticmethod
    def code_loops(code: Any) -> dict[int, int]:
        loops: dict[int, int] = {}
        for ins in dis.get_instructions(code):
            if (ins.opcode in dis.hasjrel or ins.opcode in dis.hasjabs) and isinstance(ins.argval, int) and ins.argval <= ins.offset:
                loops[ins.argval] = max(loops.get(ins.argval, 0), ins.offset)
        return loops


class OptimizerSteps:
    """Which optimizer made each ``Optimizer.step#Class.step`` range: torch names the range
    after the optimizer's class only, so a GAN's two Adams (the critic's, stepped k times
    per iteration, and the generator's, once) share one name and read as k + 1 steps per
    iteration. Through torch's global step hooks, which ``Optimizer.profile_hook_step`` runs
    inside that range: a Python call per optimizer step, nothing per module or op.

    Light pass: each step's optimizer, by its ordinal within its class by first step
    (:class:`Instances`), beside the session's timing of the range (``annotate``), for the
    light pass to choose the optimizer whose steps mark the iteration. Traced passes whose
    step is one optimizer's (``Optimizer.step#Adam#2.step``,
    :func:`perfdoctor.names.ranges.optimizer_instance`): its steps become a perfdoctor region
    of that name, from the pre-hook to the post-hook, so the tools see that step. The
    program steps its optimizers in the same order in every pass, as :class:`Instances`
    assumes of modules."""

    def __init__(self, session: Session, hooks: Any) -> None:
        self.instances = Instances()
        self.called: dict[str, list[int]] = {}  # per range name: each step's optimizer, by ordinal
        self.sites = LoopSites()
        self.loops: dict[str, list[int | None]] = {}  # per range name: each step's loop (LoopSites)
        self.local = threading.local()  # traced passes: the region the pre-hook opened
        mark = rangenames.parse_optimizer_instance(session.pattern or "")
        ordinals, add, called, local, region = self.instances.ordinals, self.instances.add, self.called, self.local, api.region
        loops, site = self.loops, self.sites.of

        def noted(optimizer: Any, args: Any, kwargs: Any) -> None:
            if not session.disabled:
                name = optimizer_range(optimizer)
                called.setdefault(name, []).append(ordinals.get(id(optimizer)) or add(optimizer))
                loops.setdefault(name, []).append(site(sys._getframe(1)))

        def opened(optimizer: Any, args: Any, kwargs: Any) -> None:
            if session.disabled:
                return
            known = ordinals.get(id(optimizer))
            ordinal = known or add(optimizer)
            # the marked optimizer's steps, or (NEW_OPTIMIZER) each optimizer's first step
            if optimizer_range(optimizer) == mark[0] and (ordinal == mark[1] or mark[1] == rangenames.NEW_OPTIMIZER and known is None):
                local.region = (id(optimizer), region(session.pattern))
                local.region[1].__enter__()

        def closed(optimizer: Any, args: Any, kwargs: Any) -> None:
            # only the marked optimizer's own step closes it (an optimizer that steps an
            # inner one, as Lookahead does, runs the inner's hooks inside its own)
            open_region = getattr(local, "region", None)
            if open_region is not None and open_region[0] == id(optimizer):
                local.region = None
                open_region[1].__exit__(None, None, None)

        if session.mode == "light":
            self.handles = [hooks.register_optimizer_step_pre_hook(noted)]
        elif mark is not None:
            self.handles = [hooks.register_optimizer_step_pre_hook(opened), hooks.register_optimizer_step_post_hook(closed)]
        else:
            self.handles = []

    def annotate(self, series: dict[str, dict[str, Any]], times: StepTimes) -> None:
        """The light pass's ``series`` of each optimizer range stepped by two optimizers or
        more that each stepped twice or more gets ``instance``: each kept step's optimizer,
        and ``loop``: the loop that called it (:class:`LoopSites`; None: none). A range timed
        without its hook's note, which never happens in torch, leaves the name as it was."""
        for name, called in self.called.items():
            if name in series and len(called) == len(times.host.get(name, ())):
                kept = times.kept(name)
                ordinals = [called[i] for i in kept]
                if sum(n >= 2 for n in Counter(ordinals).values()) >= 2:
                    series[name]["instance"] = ordinals
                    series[name]["loop"] = [self.loops[name][i] for i in kept]

    def uninstall(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles = []


def optimizer_range(optimizer: Any) -> str:
    """torch's range name for ``optimizer``'s steps (``Optimizer.profile_hook_step``'s)."""
    return f"{rangenames.OPTIMIZER_STEP_PREFIX}{type(optimizer).__name__}.step"


def install_optimizer_steps(session: Session) -> OptimizerSteps | None:
    """:class:`OptimizerSteps` in the light pass, and in a traced pass whose step is one
    optimizer's; elsewhere nothing (no cost). None with a torch too old for global
    optimizer hooks (before 2.0): there the steps stay one series per class."""
    from torch.optim import optimizer as hooks  # the module (torch.optim's own attribute of that name is gone)

    if not hasattr(hooks, "register_optimizer_step_post_hook"):
        return None
    if session.mode != "light" and rangenames.parse_optimizer_instance(session.pattern or "") is None:
        return None
    return OptimizerSteps(session, hooks)


# --- --step-fn ---------------------------------------------------------------------------


def resolve_attr(obj: Any, dotted: str) -> tuple[Any, str] | None:
    """(owner, last name) for ``a.b.c`` under ``obj`` when it exists, else None."""
    *path, last = dotted.split(".")
    for part in path:
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return (obj, last) if hasattr(obj, last) else None


def wrap_attr(owner: Any, attr: str) -> None:
    """``owner.attr`` made a step function (:func:`rebind`)."""
    fn = getattr(owner, attr)
    if getattr(fn, "__perfdoctor_step__", False):
        return
    wrapped = api.step_function(fn, attr)
    wrapped.__perfdoctor_step__ = True  # type: ignore[attr-defined]
    rebind(owner, attr, wrapped)


def rebind(owner: Any, attr: str, wrapped: Any) -> None:
    """``owner.attr`` replaced by ``wrapped``, and a module's function wherever an imported
    module holds it too: a package re-exports its functions (``monai.inferers`` binds
    ``monai.inferers.utils.sliding_window_inference``, as programs import it), and another
    module took it by ``from ... import``; replaced in its own module only, every call went
    through another name (--step-fn read "never called")."""
    fn = getattr(owner, attr)
    setattr(owner, attr, wrapped)
    if not isinstance(owner, types.ModuleType):
        return  # a method: its class is the one place
    for module in list(sys.modules.values()):
        names = getattr(module, "__dict__", None)
        if isinstance(names, dict):
            for name in [name for name, value in list(names.items()) if value is fn]:
                names[name] = wrapped


# Library functions that call the model on windows of their input, one input per call
# (:class:`Windows`): (module, function or Class.method), wrapped once the module is imported.
# MONAI's sliding-window function (its SlidingWindowInferer calls it) and its PatchInferer
# (a Splitter's patches, batched by torch.cat, then merged)
WINDOWING_FUNCTIONS = (("monai.inferers.utils", "sliding_window_inference"), ("monai.inferers.inferer", "PatchInferer.__call__"))


def install_windowing(session: Session, module: str, attr: str) -> None:
    """The light pass's module steps see ``module.attr``'s model calls as windows of its input."""
    steps, target = session.modules, resolve_attr(sys.modules[module], attr)
    if isinstance(steps, ModuleSteps) and target is not None and callable(getattr(*target)):
        rebind(*target, steps.windows.over(getattr(*target)))


def install_step_fn(spec: str, main_module: str) -> None:
    """Wrap ``module:function`` (``function`` may be ``Class.method``) so each call is a step.

    A module other than the program is imported now and patched, so ``from module import
    function`` in the program gets the wrapped function. The program itself (``__main__``,
    the script's own name or the ``-m`` module) does not exist yet: a trace function watches its
    top-level code and wraps the function right after its ``def`` runs, then removes itself.
    """
    module, _, attr = spec.partition(":")
    if module not in ("__main__", main_module):
        import importlib

        target = resolve_attr(importlib.import_module(module), attr)
        if target is None:
            raise SystemExit(f"perfdoctor: --step-fn {spec}: {module} has no attribute {attr}")
        wrap_attr(*target)
        return

    def on_line(frame: Any, event: str, arg: Any) -> Any:
        target = resolve_attr(sys.modules["__main__"], attr)
        if target is not None:
            wrap_attr(*target)
            sys.settrace(None)
            frame.f_trace = None
            return None
        return on_line

    def on_call(frame: Any, event: str, arg: Any) -> Any:
        if frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__") == "__main__":
            return on_line
        return None

    sys.settrace(on_call)
