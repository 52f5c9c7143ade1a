"""The normalized Profile: what every loader produces and every analysis reads.

A Profile is a handful of plain pandas DataFrames with fixed columns. Times are integer
nanoseconds on one clock per trace (the tool's own), so intervals from different tables of
the same trace compare directly. Loaders fill what their source has and leave the rest
empty; nothing downstream knows which tool produced a table.

Tables and columns
------------------
``activities`` — work executed on the GPU, one row per kernel / memcpy / memset:
    kind ("kernel" | "memcpy" | "memset"), start_ns, end_ns, device, stream, name,
    correlation (links to the launching call), grid, block (strings "x,y,z"), registers,
    shared_mem (bytes), bytes (memcpy/memset size), copy_kind ("HtoD", "DtoH", "DtoD",
    "HtoH", ...), host_mem ("pageable" | "pinned" | "" — the host side of a copy),
    graph_id (CUDA graph node/graph id when replayed from a graph, else -1),
    occupancy_pct (the tracer's estimated achieved occupancy, NaN when unknown).
``calls`` — host API calls (CUDA runtime and driver): name, start_ns, end_ns, tid,
    correlation.
``ranges`` — user annotations on the host: name, start_ns, end_ns, tid, source
    ("record_function" | "nvtx" | "profiler_step" | "python": a Python stack frame, never
    a step).
``samples`` — time series from samplers (NVML, nsys GPU metrics): time_ns, metric, value,
    source.
``counters`` — per-kernel hardware counters (Nsight Compute): correlation, name,
    metric, value, duration_ns.
``ops`` — CPU operators (Kineto ``cpu_op`` events: ``aten::mm``, ...; never a step, kept
    apart from ``ranges`` so that step choice never reads them): name, start_ns, end_ns, tid
    (the calls' thread numbering), dims / types / concrete (the "Input Dims", "Input type",
    "Concrete Inputs" arguments of a trace taken with ``record_shapes=True``, as the JSON text
    written, b"" when absent). The CPU breakdown (:mod:`perfdoctor.analysis.cpu`) times them;
    :mod:`perfdoctor.analysis.bounds` costs the shaped ones. Empty for Nsight Systems.
``device`` — a dict: name, sm_count, peak_dram_bw_gbps (with peak_source), l2_bytes, ...
``light`` — :class:`LightSteps` or None: the untraced light pass of ``perfdoctor run``
    timed every step (host start, GPU start, GPU end on the host clock); the source of
    truth for step time (see ``docs/metrics.md``).
``origin`` — :class:`Origin`: what the loader says of the trace it read (its tool, path,
    versions, declared work, threads, what it skipped and why), each a typed field; a fact
    the trace does not state is None or empty, never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from perfdoctor.declare import DECLARE_PREFIX, parse_declaration
from perfdoctor.names.codes import equals, starts_with
from perfdoctor.schema import (  # noqa: F401 (the tables' columns: imported from here by the loaders)
    ACTIVITY_COLUMNS,
    CALL_COLUMNS,
    COUNTER_COLUMNS,
    OP_COLUMNS,
    RANGE_COLUMNS,
    SAMPLE_COLUMNS,
    filled,
)

def frame(columns: dict[str, str], data: dict[str, Any] | None = None) -> pd.DataFrame:
    """A DataFrame with exactly ``columns`` (in order, with their dtypes).

    Columns missing from ``data`` are filled with the dtype's neutral value (NaN for
    floats, "" for strings, -1 for integers; :func:`perfdoctor.schema.filled`), so every
    table always has every column.

    Each column is wrapped without a copy (``copy=False``): the DataFrame copies every
    column into its blocks anyway (it stacks the columns of one dtype; a dict's columns are
    copied by default), so the frame never shares memory with ``data``, and the Series'
    own copy, ~10 ms of a large trace's tables (HF 80 MB: 33 columns, 164k ops), bought
    nothing.
    """
    return pd.DataFrame({col: pd.Series(values, dtype=columns[col], copy=False) for col, values in filled(columns, data).items()})


@dataclass
class LightSteps:
    """The light (untraced) pass's timing of the chosen step, one entry per step seen.

    Arrays are int64 ns on CLOCK_MONOTONIC. ``gpu_start_ns`` is None when the pass did not
    record it (bundles of perfdoctor 0.1). ``clock`` is ``"cuda-event"`` (GPU times from CUDA
    events, no sync added) or ``"host"`` (a program without GPU work: host end). The steady
    state starts at ``steady_start`` (decided by the run: :func:`perfdoctor.analysis.steady.steady_start`,
    or the user's ``--warmup``), for the reason in ``steady_reason``; None where the bundle does
    not say (perfdoctor 0.1), and the analysis decides it. ``counters``: per metric, hardware
    counters averaged over exactly the steady steps: ``{"value", "source", "samples",
    "dropped_nan", "start_ns", "end_ns"}``. ``waited_ns``: per step, how long its thread waited
    for another thread since the previous step (a server's worker for the next request:
    :func:`perfdoctor.analysis.steady.waits_between`); None when the run did not say.
    ``pass_ended``: per step, whether a data loader's pass ended between the previous step
    and it (an evaluation pass, the epoch's end: :func:`perfdoctor.analysis.steady.step_groups`);
    None when the run did not say. ``compiled_ns``: per step, how long torch.compile compiled
    inside it (:func:`perfdoctor.analysis.steady.time_inside`); None when nothing compiled
    in a step or the run did not say. ``gc_ns``: per step, how long Python's full garbage
    collections ran inside it (:class:`perfdoctor.record.bootstrap.clock.FullCollections`); None
    when none ran in a step or the run did not say. ``save_ns``: likewise the program's
    checkpoint saves (``torch.save``, safetensors' ``save_file``, DCP's ``save``) (:class:`perfdoctor.record.bootstrap.clock.TimedCalls`).
    ``cpu_wait_ns``: likewise the step's thread waiting for a CPU (:func:`perfdoctor.analysis.steady.cpu_waits_inside`).
    ``idle_before_ns``: per step, how long its thread waited (``time.sleep``, a queue, a socket:
    :mod:`perfdoctor.record.bootstrap.waits`) between the previous step's end and its start;
    None when it never did or the run did not say. ``gc_before_ns``: likewise Python's full
    garbage collections there (a library's ``gc.collect()`` at each epoch's end).
    ``work_calls``: per step, the model calls that began inside it (the light pass's
    ``module_work_ns``, of the grad mode most ran in: ``perfdoctor.collectors.bundle``); None
    where the run noted none. ``call_ns``: for a series timed as the loop iteration (a
    DataLoader's fetch to the next), each step's mark's own call (the fetch alone), -1 where
    none starts with it; None otherwise.
    ``threads``: each step's thread, where the steps ran on more than one (a thread pool's
    requests, each calling the model: :func:`perfdoctor.analysis.steady.critical_path_ns`);
    None where one thread ran them all. ``cpus``: the CPUs the program could run on (its
    affinity), where the run said.
    ``windows_per_step``: where each step is one input's windows (the model called on windows
    of one input, :func:`perfdoctor.analysis.steps.call_groups`), how many; None otherwise.
    """

    name: str
    host_start_ns: np.ndarray
    gpu_end_ns: np.ndarray
    gpu_start_ns: np.ndarray | None = None
    waited_ns: np.ndarray | None = None
    pass_ended: np.ndarray | None = None
    compiled_ns: np.ndarray | None = None
    gc_ns: np.ndarray | None = None
    save_ns: np.ndarray | None = None
    cpu_wait_ns: np.ndarray | None = None
    idle_before_ns: np.ndarray | None = None
    gc_before_ns: np.ndarray | None = None
    work_calls: np.ndarray | None = None
    call_ns: np.ndarray | None = None
    clock: str = "cuda-event"
    steady_start: int | None = None
    steady_reason: str = ""
    counters: dict[str, dict[str, Any]] = field(default_factory=dict)
    windows_per_step: int | None = None
    threads: np.ndarray | None = None
    cpus: int | None = None

    @property
    def count(self) -> int:
        return int(self.host_start_ns.size)


@dataclass(frozen=True)
class BundleFacts:
    """What a run bundle's manifest says of the run behind a Profile
    (:func:`perfdoctor.collectors.bundle.load_bundle`)."""

    step: str | None = None  # the step name the run traced (its --step, or found)
    activities_from: str | None = None  # the pass whose trace was read; None: no trace in the bundle
    reason: str | None = None  # why there is no trace (activities_from None)
    exit_code: int | None = None
    status: str | None = None  # "interrupted", "timed out", ...
    # The manifest's JSON, read through perfdoctor.bundle.protocol's classes (a floor above
    # this one). Each pass as the manifest lists it (a PassRun's): a report says first that
    # the run crashed.
    passes: tuple[dict[str, Any], ...] = ()
    light_pass: dict[str, Any] | None = None  # a LightPass's: how the step was found; time is Profile.light
    rank: dict[str, Any] | None = None  # a multi-rank bundle: the manifest's entry of this rank
    # the module classes the light pass saw called (raw/light.json's module_classes: their
    # qualified names), which a trace whose step is no module call never names: what the
    # task is read from beside the trace's names (perfdoctor.analysis.workload)
    module_classes: tuple[str, ...] = ()
    # whether the light pass saw the program train: True where it timed an optimizer step or a
    # backward call, False where it saw the model's calls, every one with grad disabled, and
    # neither (an evaluation loop), None where it cannot say (a custom update after
    # torch.autograd.grad, an old bundle): a bundle without a trace reads its workload from it
    light_training: bool | None = None


@dataclass(frozen=True)
class Origin:
    """Where a Profile's tables came from, as the loader read it. None or empty: the source
    does not say (an Nsight Systems export states no CUDA versions), never a guessed value.
    Frozen: a loader's later findings make a new one (``dataclasses.replace``)."""

    source: str | None = None  # "kineto" | "nsys" | "bundle" (a bundle without a trace)
    path: str | None = None
    # cuda_driver_version / cuda_runtime_version / cupti_version as a Kineto trace states
    # them ({}: it states none); None for a format without them (nsys)
    versions: dict[str, Any] | None = None
    # per step name the work a step declares ({"decode_step": {"tokens": 1, "bytes": 2.47e9}}),
    # from ``perfdoctor.declare {json}`` ranges and a run's own declaration; None: no trace read
    declared: dict[str, dict[str, float]] | None = None
    thread_names: tuple[str, ...] = ()  # perfdoctor.analysis.workload reads an autograd thread from them
    op_counts: dict[str, int] = field(default_factory=dict)  # Kineto cpu_op name -> count (workload)
    distributed: dict[str, Any] = field(default_factory=dict)  # Kineto distributedInfo (rank, world_size)
    # Kineto categories perfdoctor does not read, with counts: said when no GPU work was
    # recognised, never "CPU-only"
    unread_categories: dict[str, int] = field(default_factory=dict)
    # device work that ran but is not read (MTIA, ...): never "no GPU ran" (analysis.steps.ran_no_gpu)
    unread_device_work: str | None = None
    time_origin_ns: int | None = None  # every time in the Profile is ns after this trace time (Kineto)
    process: int | None = None  # one process of an nsys export: its OS process id
    warnings: tuple[str, ...] = ()  # what the loader dropped or changed; the commands print them
    bundle: BundleFacts | None = None  # read from a run bundle


@dataclass
class Profile:
    """Normalized tables of one trace (see the module docstring for the columns)."""

    activities: pd.DataFrame = field(default_factory=lambda: frame(ACTIVITY_COLUMNS))
    calls: pd.DataFrame = field(default_factory=lambda: frame(CALL_COLUMNS))
    ranges: pd.DataFrame = field(default_factory=lambda: frame(RANGE_COLUMNS))
    samples: pd.DataFrame = field(default_factory=lambda: frame(SAMPLE_COLUMNS))
    counters: pd.DataFrame = field(default_factory=lambda: frame(COUNTER_COLUMNS))
    ops: pd.DataFrame = field(default_factory=lambda: frame(OP_COLUMNS))
    device: dict[str, Any] = field(default_factory=dict)
    light: LightSteps | None = None
    origin: Origin = field(default_factory=Origin)

    @property
    def kernels(self) -> pd.DataFrame:
        return self.activities[equals(self.activities["kind"], "kernel")]


def parse_declarations(ranges: pd.DataFrame) -> dict[str, dict[str, float]]:
    """Per step name, the tokens and bytes its ``perfdoctor.declare`` ranges declare
    (see :mod:`perfdoctor.declare`). The last declaration of a step name wins."""
    declared: dict[str, dict[str, float]] = {}
    for text in ranges.loc[starts_with(ranges["name"], DECLARE_PREFIX), "name"]:
        parsed = parse_declaration(text)
        if parsed is not None:
            declared[parsed[0]] = parsed[1]
    return declared
