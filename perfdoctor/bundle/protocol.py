"""The typed contract across the process boundary: what ``perfdoctor run`` asks of the
bootstrap, what the bootstrap answers, and the manifest the reader gets.

- :class:`PassConfig`   ``raw/<pass>.config.json``: written by :mod:`perfdoctor.record.runner`,
  read by the bootstrap inside the program's process;
- :class:`PassResults`  ``raw/<pass>.json``: written by the bootstrap's ``write_results``,
  read back by ``perfdoctor run`` and by :mod:`perfdoctor.collectors.bundle`;
- :class:`LightPass`    the manifest's ``light_pass``: the light pass's scout report;
- :class:`PassRun`, :class:`Collector`, :class:`TimedOut`, :class:`FailedRank`,
  :class:`RepeatProcess`, :class:`Pairing`, :class:`Rank`, :class:`RankStatus`  an entry of
  the manifest (``passes``, ``collectors``, ``timed_out``, ``failed_rank``,
  ``repeat.processes``, ``repeat.pairing``, ``ranks``, ``ranks.<k>.passes``), which keeps
  them as JSON: its readers take what a damaged entry still holds;
- :class:`Manifest`     ``manifest.json``.

Each field is one JSON key, spelled here only (a test checks that no other module spells
one as a string). ``to_json`` writes the fields in declaration order, whatever order a
writer set them in (no reader depends on it; for the manifest it is the order a single-rank
run, a torchrun job and a run timed out in its light pass have always written); a field listed in the class's ``KEPT`` is written even when
None (its null is part of the format, e.g. ``exit_code`` before the program ended), any
other None field is left out. Keys this version does not know are kept in ``extra`` and
written back: a bundle reopened by ``perfdoctor run --repeat`` loses nothing.

``from_json`` checks the shape before any field is read: a bundle is input like any other,
and valid JSON of the wrong shape (a list, a string where a table belongs, an unknown
schema) is one :class:`~perfdoctor.errors.UsageError` naming the field.

Standard library only (with :mod:`perfdoctor.errors` and :mod:`perfdoctor.text`, which are
too): the bootstrap imports it inside the program's process.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from perfdoctor.bundle.layout import MANIFEST, SCHEMA
from perfdoctor.errors import UsageError
from perfdoctor.text import clean_deep

D = TypeVar("D", bound="_Document")


def _key(f: dataclasses.Field) -> str:
    return f.metadata.get("key", f.name)


def keys(cls: type[_Document]) -> frozenset[str]:
    """The JSON keys of one document class (``pass_`` is spelled ``pass`` on disk)."""
    return frozenset(_key(f) for f in dataclasses.fields(cls) if f.name != "extra")


class _Document:
    """to_json / from_json for the dataclasses below (see the module docstring)."""

    KEPT: ClassVar[frozenset[str]] = frozenset()
    extra: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if f.name == "extra" or (value is None and _key(f) not in self._kept()):
                continue
            out[_key(f)] = value.to_json() if isinstance(value, _Document) else value
        return {**out, **self.extra}

    def _kept(self) -> frozenset[str]:
        """The keys written even when None (``KEPT``, for most documents)."""
        return self.KEPT

    @classmethod
    def _build(cls: type[D], doc: dict[str, Any], **typed: Any) -> D:
        """The instance with ``doc``'s known keys as fields (``typed``: those already turned
        into documents) and the unknown ones in ``extra``."""
        names = {_key(f): f.name for f in dataclasses.fields(cls) if f.name != "extra"}  # type: ignore[arg-type]
        values = {names[k]: v for k, v in doc.items() if k in names}
        return cls(**{**values, **typed}, extra={k: v for k, v in doc.items() if k not in names})


# --- shape checks --------------------------------------------------------------------------


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _expect(cond: bool, where: str, name: str, what: str) -> None:
    if not cond:
        raise UsageError(f"{where}: field {name!r}: expected {what}")


def _optional(doc: dict[str, Any], key: str, types: tuple[type, ...], where: str, what: str) -> None:
    v = doc.get(key)
    _expect(v is None or (isinstance(v, types) and not (isinstance(v, bool) and bool not in types)), where, key, what)


def _object(doc: Any, where: str, what: str) -> dict[str, Any]:
    if not isinstance(doc, dict):
        raise UsageError(f"{where}: expected a JSON object ({what}), got {type(doc).__name__}")
    return doc


# --- the pass config ------------------------------------------------------------------------


@dataclass
class PassConfig(_Document):
    """What one pass asks of the bootstrap (``raw/<pass>.config.json``)."""

    KEPT: ClassVar[frozenset[str]] = frozenset(
        {"warmup", "steps", "step", "step_fn", "tokens_per_step", "pass", "results", "progress_fd"})

    warmup: int = 0  # steps before the window
    steps: int = 0  # steps in the window; 0: every step after the warm-up
    step: str | None = None  # the step name (pattern) the window follows
    step_fn: str | None = None  # --step-fn module:function
    tokens_per_step: float | None = None
    ranks: bool | None = None  # each rank writes into raw/rank<k>/ (perfdoctor.record.launch)
    step_thread: str | None = None  # "main" or "worker": where the light pass saw the step run
    trains: bool | None = None  # the light pass saw the optimizer's marks: a fetch step ticks on its iteration's
    # no optimizer range: the backward() calls mark a fetch step's training batches (the traced
    # passes' ticks, as the light pass's steps: analysis.steps.training_loop)
    backward_marks: bool | None = None
    module_step: dict[str, Any] | None = None  # the light pass's module step: {"name", "depth", "class", "span"; "instance"; "calls_per_step", "groups"}
    windowed: bool | None = None  # the window is known before the program runs
    trace: str | None = None  # torch: where to export the Kineto trace
    capture_range: bool | None = None  # nsys: bracket the window with cudaProfilerStart/Stop
    ncu_steps: int | None = None  # ncu: steps after the warm-up inside the perfdoctor_ncu range
    lockstep: dict[str, Any] | None = None  # one side of a perfdoctor.record.lockstep.Pair
    pass_: str = field(default="light", metadata={"key": "pass"})  # what the bootstrap does
    results: str = ""  # where it writes its PassResults
    progress_fd: int | None = None  # the step-tick pipe's write end
    progress_pipe: list[int] | None = None  # that pipe's (device, inode), to recognise it
    rank: dict[str, Any] | None = None  # set inside a rank: {"rank", "local_rank", "world_size", "host"}
    stdin_record: str | None = None  # the first pass: keep what the program reads from a piped stdin here (record.stdin)
    stop_after_window: bool | None = None  # --duration: end the program once its window is traced
    # torch, a trace begun with the program (no step known): stop tracing once the process holds
    # this many MB resident, the tracer's buffers over what the program itself needs (Session.watch_trace)
    trace_rss_mb: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, doc: Any, where: str = "pass config") -> PassConfig:
        doc = _object(doc, where, "a pass config")
        _expect(isinstance(doc.get("pass"), str), where, "pass", "a string")
        _expect(isinstance(doc.get("results"), str), where, "results", "a string")
        return cls._build(doc)


# --- the pass results ----------------------------------------------------------------------

# A ``children`` key's end for a program the program's own code started through ``subprocess``
# (``python train.py (a program)``), where the others are multiprocessing processes.
CHILD_PROGRAM = " (a program)"


@dataclass
class PassResults(_Document):
    """What the bootstrap saw in one pass (``raw/<pass>.json``)."""

    KEPT: ClassVar[frozenset[str]] = frozenset(
        {"window_step", "trace_scope", "trace_error", "clock_sync", "program_error", "exit_code"})

    pass_: str | None = field(default=None, metadata={"key": "pass"})
    pid: int | None = None
    step_counts: dict[str, int] = field(default_factory=dict)  # steps begun, per name
    worker_steps: dict[str, int] = field(default_factory=dict)  # of those, off the main thread
    window_step: str | None = None  # the step name that opened the window
    window_state: str | None = None  # before, open or closed
    whole_program: bool | None = None  # the trace covers the whole program
    trace_scope: str | None = None  # why the trace is not just the window, when it is not
    trace_error: str | None = None
    # a trace begun with the program, stopped at PassConfig.trace_rss_mb: {"seconds" (since it
    # began), "rss_mb" (the process's resident memory then)}
    trace_cut: dict[str, float] | None = None
    max_rss_mb: float | None = None  # the process's peak resident memory (its children left out)
    clock_sync: dict[str, int] | None = None  # {"monotonic_ns"} at the clock-sync range's start
    environment: dict[str, Any] | None = None  # torch, CUDA, the device, as the program saw them
    program_error: str | None = None  # an exception the program did not catch
    exit_code: int | None = None
    terminated: bool | None = None  # SIGTERM ended it
    stopped_after_window: bool | None = None  # the bootstrap sent that SIGTERM itself, its window traced (--duration)
    # the multiprocessing processes the program started, "module.function (start method)" ->
    # how many (DataLoader and compile workers left out), and the programs its own code started
    # ("python train.py (a program)", CHILD_PROGRAM): work perfdoctor does not see
    children: dict[str, int] | None = None
    ended_at_ns: int | None = None  # wall clock: which rank of a job failed first
    rank: dict[str, Any] | None = None  # a rank of a torchrun job: the config's rank
    device: str | None = None  # that rank's device
    lockstep: dict[str, Any] | None = None  # perfdoctor.record.lockstep.Turns.summary()
    # the light pass: per step name, {"host_start_ns", "gpu_start_ns", "gpu_end_ns", "tid",
    # "host_end_ns", "run_delay_ns", "run_delay_read"} (the thread's time waiting for a CPU at each
    # start, or None; which starts read it, the others interpolated), "gpu_measured" where a sparse lane left some steps'
    # GPU edges unmeasured (clock.StepTimes.settle: which were measured, the others read between), and for a step timed
    # as the loop iteration "waited_ns" (a call's) or
    # "pass_ended" (a loop range's); perfdoctor run adds "compiled_ns", "gc_ns" and "save_ns" to the step's
    # (perfdoctor.record.light.noted_steps)
    series: dict[str, dict[str, Any]] | None = None
    spans_ns: dict[str, list[list[int]]] | None = None  # perfdoctor 0.1's series: [[host start, GPU end], ...]
    step_end_clock: str | None = None  # "cuda-event" or "host"
    declared: dict[str, dict[str, float]] | None = None  # per step name, the tokens and bytes declared
    modules: dict[str, dict[str, dict[str, Any]]] | None = None  # per depth, module calls' series
    # once a loop range (a data loader's fetch) is the step: the host start of every depth-0
    # module call after, untimed — the work a loop's iteration holds
    module_work_ns: list[int] | None = None
    module_work_grad: list[bool] | None = None  # each of those calls: grad enabled
    module_work_end_ns: list[int] | None = None  # each of those calls: its host end (0: it never returned)
    module_classes: dict[str, str] | None = None  # module step name -> module.Class
    timing_error: str | None = None  # why some steps are missing
    # the light pass: per data loader range name, its fetches that raised StopIteration (the
    # end of each pass over a loader), as a series; they are not in ``series``
    exhausted: dict[str, dict[str, Any]] | None = None
    # the light pass: per data loader range name, the host starts of its fetches that yielded
    # their pass's last batch (a loop that stops at len(loader) raises no StopIteration)
    last_batches: dict[str, list[int]] | None = None
    # the light pass: per ProfilerStep#N name, the range torch.profiler's exit closed (the
    # last prof.step() opened it after the loop's last iteration), as a series; not in ``series``
    profiler_exit: dict[str, dict[str, Any]] | None = None
    # the light pass: every thread's waits for another thread, for I/O or in time.sleep
    # ({"tid", "start_ns", "end_ns", "worked"}: perfdoctor.record.bootstrap.waits), which lie
    # between a worker's steps, not in them, unless the rest of the process worked meanwhile
    # (worked 1: a producer beside it)
    waits: dict[str, list[int]] | None = None
    # the light pass: when torch.compile's dynamo compiled ({"start_ns", "end_ns"}, host ns:
    # perfdoctor.record.bootstrap.steps.Compiles); None when nothing compiled or the torch
    # has no compile callbacks
    compiles: dict[str, list[int]] | None = None
    # the light pass: Python's full garbage collections ({"start_ns", "end_ns"}, host ns:
    # perfdoctor.record.bootstrap.clock.FullCollections); None when none ran
    full_gcs: dict[str, list[int]] | None = None
    # the light pass: the program's checkpoint saves, torch.save, safetensors' save_file, DCP's save ({"start_ns", "end_ns"}, host ns:
    # perfdoctor.record.bootstrap.clock.TimedCalls); None when it saved nothing
    saves: dict[str, list[int]] | None = None
    # the light pass: [its start before the program ran, its end], host ns on the steps'
    # clock: what share of the program's run its steps hold
    program_ns: list[int] | None = None
    # the calls as measured, when series holds the iteration: added by perfdoctor run after
    # the bootstrap wrote the rest, so last on disk
    call_series: dict[str, dict[str, Any]] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def _kept(self) -> frozenset[str]:
        # a light pass's results say it had no timing error with a null, as the bootstrap
        # wrote them before this class (the demo's and docs/results' light.json hold it)
        return self.KEPT | {"timing_error"} if self.series is not None else self.KEPT

    @classmethod
    def from_json(cls, doc: Any, where: str = "pass results") -> PassResults:
        doc = _object(doc, where, "a pass's results")
        sync = doc.get("clock_sync")
        _expect(sync is None or isinstance(sync, dict), where, "clock_sync", "a JSON object")
        mono = (sync or {}).get("monotonic_ns")
        _expect(mono is None or (isinstance(mono, int) and not isinstance(mono, bool) and abs(mono) < 2**62), where,
                "clock_sync.monotonic_ns", "an integer")
        _expect(doc.get("environment") is None or isinstance(doc.get("environment"), dict), where, "environment", "a JSON object")
        children = doc.get("children")
        _expect(children is None or (isinstance(children, dict) and all(type(n) is int for n in children.values())), where,
                "children", "a JSON object of counts")
        return cls._build(doc)

    def child_programs_only(self) -> bool:
        """Whether every child the program started is a program (``subprocess``), none a
        ``multiprocessing`` process."""
        return bool(self.children) and all(work.endswith(CHILD_PROGRAM) for work in self.children)

    def children_note(self) -> str | None:
        """What the program ran in processes of its own (``children``), which no pass saw."""
        if not self.children:
            return None
        started = ", ".join(f"{work} x{n}" for work, n in self.children.items())
        return (f"the program ran work in child processes ({started}), and perfdoctor times and traces only the "
                "process it starts")

    def step_series(self) -> dict[str, dict[str, Any]]:
        """Per name, the light pass's step series; from the ``spans_ns`` of older bundles too."""
        if self.spans_ns is not None and self.series is None:
            return {
                name: {"host_start_ns": [s for s, _ in pairs], "gpu_start_ns": None, "gpu_end_ns": [e for _, e in pairs]}
                for name, pairs in self.spans_ns.items()
            }
        return self.series or {}


# --- the manifest ----------------------------------------------------------------------------


@dataclass
class LightPass(_Document):
    """The manifest's ``light_pass``: the step the light pass found, its steady state and
    the window the traced passes use (:func:`perfdoctor.record.light.light_summary`)."""

    KEPT: ClassVar[frozenset[str]] = frozenset({"step_name", "how", "step_end_clock"})

    step_name: str | None = None
    how: str | None = None  # how the step was found
    step_end_clock: str | None = None
    timing: str | None = None  # what a step's time is, in words
    steps_seen: int | None = None
    warmup_explicit: bool | None = None  # --warmup given
    module: dict[str, Any] | None = None  # a module step: {"name", "depth", "class", "span"; "instance"; "calls_per_step", "groups", "windows": light.module_step}
    iteration: bool | None = None  # raw/light.json carries the series rewritten as the loop iteration
    reason: str | None = None  # why there is no step
    warmup_reason: str | None = None
    steady_start: int | None = None
    steady_reason: str | None = None
    warmup: int | None = None  # the warm-up the traced passes skip
    step_latency_ms: list[float] | None = None  # critical path of each step from the warm-up on
    step_thread: str | None = None  # "main" or "worker"
    trains: bool | None = None  # the program ran an optimizer's step or zero_grad (torch's loop ranges)
    other_phase: str | None = None  # another optimizer's phase outside the steps, in words (light._other_phase)
    # a step of several of its range's occurrences (an optimizer's marks in groups, steady.mark_groups):
    # how many; the traced passes' window and progress count occurrences
    marks_per_step: int | None = None
    declared: dict[str, Any] | None = None  # {"tokens", ..., "source"}
    timing_error: str | None = None
    nvml_sampled: bool | None = None
    counters: dict[str, Any] | None = None  # GPM metrics over the steady steps
    counters_reason: str | None = None
    gpm_interval_ms: float | None = None
    nvml_means: dict[str, Any] | None = None  # plain means of the NVML samples in the steady span
    own_steady_start: int | None = None  # a rank's own, before rank 0's window was imposed
    extra: dict[str, Any] = field(default_factory=dict)

    def _kept(self) -> frozenset[str]:
        # a sampler without GPM writes its interval as null; without a sampler it is absent
        return self.KEPT | {"gpm_interval_ms"} if self.nvml_sampled else self.KEPT

    @classmethod
    def from_json(cls, doc: Any, where: str = MANIFEST, name: str = "light_pass") -> LightPass:
        _expect(isinstance(doc, dict), where, name, "a JSON object")
        lat = doc.get("step_latency_ms")
        _expect(lat is None or (isinstance(lat, list) and all(_is_number(x) and x >= 0 for x in lat)), where,
                f"{name}.step_latency_ms", "a list of finite non-negative numbers")
        _expect(doc.get("step_name") is None or isinstance(doc.get("step_name"), str), where, f"{name}.step_name", "a string")
        return cls._build(doc)


class _Entry(_Document):
    """An entry the manifest keeps as JSON: read from any JSON object."""

    WHAT: ClassVar[str]  # what it is, for the error

    @classmethod
    def from_json(cls: type[D], doc: Any, where: str = MANIFEST) -> D:
        return cls._build(_object(doc, where, cls.WHAT))  # type: ignore[attr-defined]


@dataclass
class PassRun(_Entry):
    """One pass as the manifest's ``passes`` lists it: what ran, how it ended, how long it
    took and how many steps it ticked."""

    KEPT: ClassVar[frozenset[str]] = frozenset({"exit_code", "window_step"})
    WHAT: ClassVar[str] = "an entry of passes"

    name: str = ""  # light, torch, nsys, ncu; light-2, ... for --repeat
    command: list[str] = field(default_factory=list)
    exit_code: int | None = None  # the program's (None: it did not start)
    seconds: float = 0.0
    steps: int = 0  # the steps the progress pipe counted
    window_step: str | None = None  # PassResults.window_step
    program_error: str | None = None  # PassResults.program_error
    trace_scope: str | None = None  # PassResults.trace_scope
    stopped: str | None = None  # why perfdoctor ended the program (--duration): "after its window", "at --duration 60 s"
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Collector(_Entry):
    """A collector's entry in the manifest's ``collectors``: its status (``pending``, ``ok``,
    ``unavailable: why``, ``failed: why``), what it ran and what it wrote."""

    KEPT: ClassVar[frozenset[str]] = frozenset({"status"})
    WHAT: ClassVar[str] = "an entry of collectors"

    status: str | None = None
    command: list[str] | None = None
    export_command: list[str] | None = None  # nsys: the SQLite export
    files: list[str] | None = None  # relative to the bundle
    kernels: int | None = None  # ncu: the kernels profiled
    step_index: int | None = None  # ncu: the first step replayed
    replay: str | None = None  # ncu: what it replayed, in words
    interval_ms: int | None = None  # nvml: the sampling period
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class TimedOut(_Entry):
    """The manifest's ``timed_out``: the pass ``--timeout`` stopped."""

    WHAT: ClassVar[str] = "timed_out"

    pass_: str | None = field(default=None, metadata={"key": "pass"})
    after_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class FailedRank(_Entry):
    """The manifest's ``failed_rank``: the rank of a torchrun job that failed first."""

    KEPT: ClassVar[frozenset[str]] = frozenset({"exit_code"})
    WHAT: ClassVar[str] = "failed_rank"

    rank: int | None = None
    exit_code: int | None = None  # None: torchrun did not say
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class RepeatProcess(_Entry):
    """A light process of ``perfdoctor run --repeat`` (the manifest's ``repeat.processes``)."""

    KEPT: ClassVar[frozenset[str]] = frozenset({"exit_code", "step_name", "steps_seen", "steady_start", "warmup"})
    WHAT: ClassVar[str] = "an entry of repeat.processes"

    pass_: str | None = field(default=None, metadata={"key": "pass"})  # light, light-2, ...
    file: str | None = None  # its results, relative to the bundle
    exit_code: int | None = None
    step_name: str | None = None
    steps_seen: int | None = None
    steady_start: int | None = None
    warmup: int | None = None
    lockstep: dict[str, Any] | None = None  # perfdoctor.record.lockstep.Turns.summary()
    excluded: str | None = None  # why it is left out of the statistics
    step_latency_ms: list[float] | None = None  # from the warm-up on, when not excluded
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Pairing(_Entry):
    """The manifest's ``repeat.pairing``: which ``compare-programs`` run the bundle is one side of
    (:func:`perfdoctor.record.repeats.compare_programs`; :func:`perfdoctor.compare.processes.pairing`)."""

    WHAT: ClassVar[str] = "repeat.pairing"

    id: str | None = None  # the same in both bundles of one run
    side: str | None = None  # "A" or "B"
    lockstep: bool | None = None  # its processes ran at once with the other side's, taking turns
    extra: dict[str, Any] = field(default_factory=dict)


NO_RESULTS = "no results"  # how a RankStatus begins when the rank died before writing its results


@dataclass
class RankStatus(_Entry):
    """How one rank ended one pass (a rank's ``passes``, :func:`perfdoctor.record.launch.rank_status`).

    Two shapes, each with its own nulls: a rank that wrote its results has ``ended_at_ns``
    (null from a bootstrap that did not say); one that died before writing them (``status``
    begins with :data:`NO_RESULTS`) has the exit code and time torchrun saw instead, null
    when torchrun did not say. (A "no results" status from before ``torchrun_time_s`` was
    written gains it as null when rewritten.)"""

    KEPT: ClassVar[frozenset[str]] = frozenset({"status", "exit_code"})
    WHAT: ClassVar[str] = "a rank's status in a pass"

    status: str | None = None  # ok, exited N, raised ..., terminated (...), no results (...)
    exit_code: int | None = None
    ended_at_ns: int | None = None  # PassResults.ended_at_ns
    torchrun_time_s: int | None = None  # when torchrun saw the rank fail, in whole seconds
    extra: dict[str, Any] = field(default_factory=dict)

    def no_results(self) -> bool:
        """The rank died before its bootstrap wrote its results."""
        return str(self.status).startswith(NO_RESULTS)

    def _kept(self) -> frozenset[str]:
        return self.KEPT | {"torchrun_time_s" if self.no_results() else "ended_at_ns"}


@dataclass
class Rank(_Entry):
    """A rank of a torchrun job (the manifest's ``ranks.<k>``): its facts from the first
    results it wrote (PassConfig.rank's keys, its device), its status per pass and its own
    light pass. A rank that never wrote results has only ``rank`` and ``passes``."""

    WHAT: ClassVar[str] = "an entry of ranks"

    rank: int | None = None
    local_rank: int | None = None
    world_size: int | None = None
    host: str | None = None
    device: str | None = None  # PassResults.device
    passes: dict[str, dict[str, Any]] = field(default_factory=dict)  # per pass: a RankStatus's JSON
    light_pass: dict[str, Any] | None = None  # a LightPass's JSON (Manifest.rank_light_pass)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Manifest(_Document):
    """``manifest.json``: the run, its passes and collectors, the device and the light pass."""

    KEPT: ClassVar[frozenset[str]] = frozenset({"exit_code", "calibration", "step"})

    schema: str | None = SCHEMA
    status: str | None = None  # running, done, interrupted, timed out, error: ...
    command: list[str] | None = None
    target: list[str] | None = None
    cwd: str | None = None
    options: dict[str, Any] | None = None  # perfdoctor.record.options.RunOptions, as given
    started_at: str | None = None
    exit_code: int | None = None  # perfdoctor run's own exit code
    environment: dict[str, Any] = field(default_factory=dict)
    collectors: dict[str, dict[str, Any]] = field(default_factory=dict)  # per collector: a Collector's JSON
    passes: list[dict[str, Any]] = field(default_factory=list)  # per pass run: a PassRun's JSON
    launch: dict[str, Any] | None = None  # a torchrun job (perfdoctor.record.launch.Launch.to_json)
    world_size: int | None = None
    gpu: dict[str, Any] | None = None  # NVML's device facts
    gpu_error: str | None = None
    calibration: dict[str, Any] | None = None  # perfdoctor calibrate's measurements of this GPU
    timed_out: dict[str, Any] | None = None  # a TimedOut's JSON
    ranks: dict[str, dict[str, Any]] | None = None  # per rank number: a Rank's JSON
    light_pass: LightPass | None = None
    nvml_errors: list[str] | None = None
    failed_rank: dict[str, Any] | None = None  # a FailedRank's JSON
    target_exit_code: int | None = None  # the program's, from the first pass
    finished_at: str | None = None
    step: str | None = None  # the step the run traced
    metrics_error: str | None = None
    ranks_error: str | None = None
    repeat: dict[str, Any] | None = None  # perfdoctor run --repeat (perfdoctor.record.repeats), added last
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, doc: Any, where: str = MANIFEST, clean: bool = True) -> Manifest:
        """The manifest when it has the shape the readers rely on, strings cleaned
        (:func:`perfdoctor.text.clean_deep`); ``clean=False``: as written, for ``perfdoctor
        run --repeat`` adding to its own bundle, which then loses nothing."""
        if not isinstance(doc, dict):
            raise UsageError(f"{where}: expected a JSON object (the run manifest), got {type(doc).__name__}")
        schema = doc.get("schema")
        if schema is not None and schema != SCHEMA:
            raise UsageError(f"{where}: field 'schema': {schema!r} is not {SCHEMA!r} (a bundle from another perfdoctor version?)")
        for key in ("step", "status"):
            _optional(doc, key, (str,), where, "a string")
        _optional(doc, "exit_code", (int,), where, "an integer")
        _optional(doc, "world_size", (int,), where, "an integer")
        for key in ("gpu", "calibration", "collectors", "light_pass", "environment", "ranks"):
            _optional(doc, key, (dict,), where, "a JSON object")
        # A device fact NVML could not give as a number (NaN, inf) is absent, not an error:
        # the bundle stays readable and nothing downstream sees a non-finite value.
        gpu = {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in (doc.get("gpu") or {}).items()}
        if doc.get("gpu"):
            doc = {**doc, "gpu": gpu}
        for key, value in gpu.items():
            _expect(value is None or isinstance(value, (str, bool)) or _is_number(value), where, f"gpu.{key}", "a string or a finite number")
        for key in ("peak_dram_bw_gbps", "sm_count"):
            _expect(gpu.get(key) is None or (_is_number(gpu[key]) and gpu[key] > 0), where, f"gpu.{key}", "a positive number")
        calibration = doc.get("calibration") or {}
        for key in ("dram_read_gbps", "bf16_matmul_tflops"):
            _expect(calibration.get(key) is None or _is_number(calibration[key]), where, f"calibration.{key}", "a finite number")
        for name, c in (doc.get("collectors") or {}).items():
            _expect(isinstance(c, dict), where, f"collectors.{name}", "a JSON object")
        for key, entry in (doc.get("ranks") or {}).items():
            _expect(key.isascii() and key.isdigit() and isinstance(entry, dict), where, f"ranks.{key}", "a JSON object under a rank number")
            _expect(entry.get("light_pass") is None or isinstance(entry["light_pass"], dict), where, f"ranks.{key}.light_pass", "a JSON object")
        light = doc.get("light_pass")
        doc = clean_deep(doc) if clean else doc
        return cls._build(doc, light_pass=None if light is None else LightPass.from_json(doc["light_pass"], where))

    def asked_step(self) -> str | None:
        """The step the user named (``perfdoctor run --step``), as the run's options keep it;
        None when they named none (``step`` is then the one the run found)."""
        asked = (self.options or {}).get("step")
        return asked if isinstance(asked, str) else None

    def rank_light_pass(self, rank: str) -> LightPass | None:
        """The light pass of ``rank`` (a key of ``ranks``), checked as the run's own is."""
        doc = Rank.from_json((self.ranks or {})[rank]).light_pass
        return None if doc is None else LightPass.from_json(doc, name=f"ranks.{rank}.light_pass")
