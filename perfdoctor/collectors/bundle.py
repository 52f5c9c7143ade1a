"""The run bundle: one directory per ``perfdoctor run``, readable even after a crash.

    perfdoctor-runs/20261129-223000-infer/
      manifest.json     command, exit code, timings, GPU, versions, collector statuses and
                        the exact tool commands; written first, rewritten after each pass
      raw/              the tools' own outputs, per pass:
        <pass>.config.json  what the bootstrap was asked to do (pass, window, step)
        <pass>.json       what it saw: step counts, the window, the clock-sync point;
                          light.json also, per step name, every step's host start, GPU
                          start and GPU end in ns ("series"; "spans_ns" in older bundles)
        <pass>.log        the program's (and the tool's) output, for all but the first pass
        torch-trace.json.gz   Kineto trace of the --warmup/--steps window
        nsys.nsys-rep, nsys.sqlite    Nsight Systems report and its SQLite export
        ncu.csv           Nsight Compute's --csv output
        nvml-<pass>.jsonl NVML samples taken during that pass (CLOCK_MONOTONIC)
      metrics.json      perfdoctor.metrics/2, when the analysis could run

A multi-rank run (``perfdoctor run --nproc-per-node N``, :mod:`perfdoctor.record.launch`) keeps
each rank's pass results and trace in ``raw/rank<k>/``, the ranks in the manifest's
``ranks`` and ``world_size``, rank 0's metrics in metrics.json and the cross-rank view in
ranks.json (:mod:`perfdoctor.analysis.ranks`).

:func:`load_bundle` merges what is there into one :class:`~perfdoctor.profile.Profile`:
activities, calls and ranges from the Kineto trace (else the nsys export), NVML samples
of the same pass moved onto that trace's clock, ncu counters, the device from NVML, and
``profile.light`` (:class:`~perfdoctor.profile.LightSteps`) from the light timing pass —
the source of truth for step time (see :func:`read_light` for the formats it accepts).
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from perfdoctor.bundle.layout import CLOCK_SYNC_RANGE, NCU_CSV, NSYS_SQLITE, RAW, TORCH_TRACE
from perfdoctor.bundle.protocol import LightPass, Manifest, PassResults
from perfdoctor.errors import UsageError
from perfdoctor.io import read_capped, read_json, regular_file
from perfdoctor.names import ranges as rangenames
from perfdoctor.profile import BundleFacts, LightSteps, Profile


def _read_json(path: Path) -> dict[str, Any]:
    """A bundle's small JSON file, {} when it is missing or damaged; a FIFO or device
    (which would block or never end) is a UsageError, in rank folders as anywhere."""
    if not os.path.lexists(path):
        return {}
    regular_file(path)
    try:
        doc = read_json(path)
    except UsageError:
        return {}
    return doc if isinstance(doc, dict) else {}


def _pass_results(raw: Path, name: str, results: dict[str, PassResults] | None) -> PassResults:
    """``raw/<name>.json``: as read_bundle checked it, else (a rank's own, or not given)
    read here; empty when it is missing or damaged."""
    read = (results or {}).get(name)
    if read is not None:
        return read
    path = raw / f"{name}.json"
    return PassResults.from_json(_read_json(path), str(path))


def _light_training(light: PassResults) -> bool | None:
    """BundleFacts.light_training from the light pass's results: its series hold the
    optimizer steps and backward calls it timed, ``module_work_grad`` each model call's grad mode."""
    names = (light.series or {}).keys()
    if any(n.startswith(rangenames.LOOP_PREFIXES[1:]) or n == rangenames.BACKWARD_RANGE for n in names):
        return True
    grads = light.module_work_grad
    return False if grads and not any(grads) else None


def _present(path: Path) -> bool:
    """Whether a bundle file is there to read: a regular file (else a UsageError, so a FIFO
    planted in raw/rank<k>/ cannot hang the reading)."""
    if not os.path.lexists(path):
        return False
    regular_file(path)
    return True


def _activity_source(raw: Path, warnings: list[str]) -> tuple[Profile, str | None]:
    """The Kineto trace when it loads, else the nsys export; else an empty Profile."""
    from perfdoctor.collectors import nsys, torch_profiler

    for pass_name, path, loader in (("torch", raw / TORCH_TRACE, torch_profiler.load), ("nsys", raw / NSYS_SQLITE, nsys.load)):
        if not _present(path):
            continue
        try:
            return loader(path), pass_name
        except Exception as exc:  # noqa: BLE001 - a damaged trace: say so, try the next one
            warnings.append(f"{path.name} could not be read: {exc}")
    return Profile(), None


def _clock_offset(profile: Profile, results: PassResults) -> int | None:
    """trace clock − CLOCK_MONOTONIC, from the bootstrap's clock-sync range."""
    mono = (results.clock_sync or {}).get("monotonic_ns")
    marks = profile.ranges[profile.ranges["name"] == CLOCK_SYNC_RANGE]
    if mono is None or marks.empty:
        return None
    return int(marks["start_ns"].iloc[0]) - int(mono)


def _int_array(values: Any) -> np.ndarray | None:
    """The leading run of integers of a list as int64 (a step whose CUDA event never
    completed — the program died — is null, and so is everything after it), or None when
    it is not a list."""
    if not isinstance(values, list):
        return None
    n = 0
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v):
            break
        n += 1
    return np.asarray(values[:n], dtype=np.int64)


def _bool_array(values: Any) -> np.ndarray | None:
    """The leading run of booleans of a list, or None when it is not a list."""
    if not isinstance(values, list):
        return None
    n = next((i for i, v in enumerate(values) if not isinstance(v, bool)), len(values))
    return np.asarray(values[:n], dtype=bool)


# the per-step ns a light-pass series may carry, each a LightSteps field of that name: a
# call's wait for another thread, and what perfdoctor run notes (record.light.noted_steps)
PER_STEP_NS = ("waited_ns", "compiled_ns", "gc_ns", "save_ns", "cpu_wait_ns", "idle_before_ns", "gc_before_ns")


def read_light(results: PassResults, light_pass: LightPass, warnings: list[str]) -> LightSteps | None:
    """The light pass's step series as :class:`LightSteps`, or None when there is none.

    ``results`` is ``raw/light.json``; ``light_pass`` the manifest's ``light_pass``. Two
    formats of light.json:

    * perfdoctor ≥ 0.2: ``"series": {step: {"host_start_ns": [...], "gpu_start_ns": [...]
      or null, "gpu_end_ns": [...], "waited_ns": [...] (a step timed as the loop iteration:
      its thread's waits for another thread before it), "pass_ended": [...] (a loop
      range's iteration: a data loader's pass ended since the previous step), "compiled_ns": [...]
      (torch.compile compiled inside the step; only when one did), "gc_ns": [...] (Python's full
      garbage collections inside the step; only when one ran), "save_ns": [...] (the program's
      checkpoint saves (torch.save, safetensors' save_file, DCP's save) inside the step; only when one saved),
      "cpu_wait_ns": [...] (the step's thread waiting for a CPU inside the step; only when it did), "idle_before_ns": [...]
      (the step's thread waiting, in time.sleep, a queue or a socket, between the previous step's end and its start;
      only when it did), "gc_before_ns": [...] (Python's full garbage collections there; only when one ran)}}`` and ``"step_end_clock":
      "cuda-event" | "host"``;
    * perfdoctor 0.1: ``"spans_ns": {step: [[host_start, gpu_end], ...]}``.

    The step is the manifest's ``light_pass.step_name``. Where the steady state starts:
    the user's explicit ``--warmup`` (``warmup_explicit: true`` and ``warmup``); else the
    manifest's ``light_pass.steady_start`` (with ``steady_reason``) when the runner wrote
    it; else None (0.1 bundles): the analysis decides it (the loader reads, it does not cut).
    ``light_pass.counters`` (``{metric: {"value", "source", "samples", "dropped_nan",
    "start_ns", "end_ns"}}``) are hardware counters averaged over the steady steps.
    """
    name = light_pass.step_name
    if not name:
        return None
    gpu_start: np.ndarray | None = None
    ended: np.ndarray | None = None
    noted: dict[str, np.ndarray | None] = {}  # PER_STEP_NS the series carries
    series = (results.series or {}).get(name)
    if isinstance(series, dict):
        host = _int_array(series.get("host_start_ns"))
        end = _int_array(series.get("gpu_end_ns"))
        if series.get("gpu_start_ns") is not None:
            gpu_start = _int_array(series.get("gpu_start_ns"))
        ended = _bool_array(series.get("pass_ended"))
        noted = {k: _int_array(series.get(k)) for k in PER_STEP_NS if series.get(k) is not None}
    else:
        spans = (results.spans_ns or {}).get(name)
        pairs = spans if isinstance(spans, list) and all(isinstance(p, list) and len(p) == 2 for p in spans) else None
        host = _int_array([p[0] for p in pairs]) if pairs is not None else None
        end = _int_array([p[1] for p in pairs]) if pairs is not None else None
    if host is None or end is None:
        warnings.append(f"light.json: no readable step series for {name!r}; step time comes from the trace")
        return None
    n = min(host.size, end.size, gpu_start.size if gpu_start is not None else host.size)
    if n < max(host.size, end.size):
        warnings.append(f"light.json: {name!r} has {n} complete steps of {max(host.size, end.size)} (the rest were not timed)")
    host, end = host[:n], end[:n]
    gpu_start = gpu_start[:n] if gpu_start is not None else None
    ended = ended[:n] if ended is not None and ended.size >= n else None
    per_step = {k: v[:n] for k, v in noted.items() if v is not None and v.size >= n}  # a shorter one is none
    if host.size == 0:
        return None
    clock = str(results.step_end_clock or light_pass.step_end_clock or "cuda-event")
    if light_pass.warmup_explicit and isinstance(light_pass.warmup, int):
        # the user's --warmup wins over the rule; the runner averaged the counters from it too
        start = int(light_pass.warmup)
        reason = f"--warmup {start} (given by the user)"
    elif isinstance(light_pass.steady_start, int):
        start = int(light_pass.steady_start)
        reason = str(light_pass.steady_reason or f"the run left out the first {start} steps as warm-up")
    else:
        start, reason = None, ""
    start = min(max(start, 0), host.size - 1) if start is not None else None
    counters = light_pass.counters if isinstance(light_pass.counters, dict) else {}
    module = light_pass.module if isinstance(light_pass.module, dict) else {}
    windows = module.get("calls_per_step") if module.get("windows") is True else None
    return LightSteps(
        name=str(name),
        host_start_ns=host,
        gpu_end_ns=end,
        gpu_start_ns=gpu_start,
        pass_ended=ended,
        **per_step,
        work_calls=_work_calls(results, host, end),
        call_ns=_call_ns(results, name, host),
        clock=clock,
        steady_start=start,
        steady_reason=reason,
        counters={k: v for k, v in counters.items() if isinstance(v, dict)},
        windows_per_step=int(windows) if isinstance(windows, int) and windows > 1 else None,
        threads=_threads(series, n),
        cpus=_cpus(results),
    )


def _cpus(results: PassResults) -> int | None:
    cpus = (results.environment or {}).get("cpus") if isinstance(results.environment, dict) else None
    return int(cpus) if isinstance(cpus, int) and cpus > 0 else None


def _threads(series: Any, n: int) -> np.ndarray | None:
    """Each of the ``n`` steps' thread (the series' ``tid``), where they ran on more than one."""
    tids = _int_array(series.get("tid")) if isinstance(series, dict) else None
    if tids is None or tids.size < n or np.unique(tids[:n]).size < 2:
        return None
    return tids[:n]


def _call_ns(results: PassResults, name: str, host: np.ndarray) -> np.ndarray | None:
    """Per step of a series timed as the loop iteration (a DataLoader's fetch to the next),
    the mark's own call as measured (``call_series``: the fetch's ``__next__`` alone), ns; -1
    where no call starts with the step; None where the series is the calls themselves."""
    calls = (results.call_series or {}).get(name)
    starts = _int_array(calls.get("host_start_ns")) if isinstance(calls, dict) else None
    ends = _int_array(calls.get("host_end_ns")) if isinstance(calls, dict) else None
    if starts is None or ends is None or not starts.size or not host.size:
        return None
    n = min(starts.size, ends.size)
    order = np.argsort(starts[:n], kind="stable")
    starts, ends = starts[:n][order], ends[:n][order]
    k = np.clip(np.searchsorted(starts, host), 0, n - 1)
    return np.where(starts[k] == host, ends[k] - starts[k], -1).astype(np.int64)


def _work_calls(results: PassResults, host: np.ndarray, end: np.ndarray) -> np.ndarray | None:
    """Per step, the model calls (depth-0 module calls, ``module_work_ns``) that began inside
    it, of the grad mode most of them ran in (a training loop's no-grad evaluation calls every
    N steps are no more of its work); None where the light pass noted none (a step that is a
    module call itself notes no work). An RL episode calls its policy once per environment
    step: 12 to 2,703 calls a step in REINFORCE's CartPole, its time following them."""
    starts = np.asarray(results.module_work_ns or [], dtype=np.int64)
    if not starts.size or not host.size:
        return None
    grads = np.asarray(results.module_work_grad or [], dtype=bool)
    if grads.size == starts.size:
        starts = starts[grads == (2 * int(grads.sum()) >= grads.size)]
    starts = np.sort(starts)
    return (np.searchsorted(starts, end, side="left") - np.searchsorted(starts, host, side="left")).astype(np.int64)


def _merge_run_declaration(
    traced: dict[str, dict[str, float]] | None, light_pass: LightPass
) -> dict[str, dict[str, float]] | None:
    """The trace's declarations (``traced``) with the tokens and bytes per step the run knew
    (``light_pass.declared``): the user's ``perfdoctor run --tokens-per-step`` overrides what
    the trace declares; the program's own declaration fills in what the trace lacks (a trace
    window that missed it)."""
    name, declared = light_pass.step_name, light_pass.declared
    if not name or not isinstance(declared, dict):
        return traced
    values = {k: float(v) for k, v in declared.items() if k in ("tokens", "bytes") and isinstance(v, (int, float))}
    merged = dict(traced or {})
    step = merged[name] = dict(merged.get(name) or {})
    if declared.get("source") == "--tokens-per-step":
        step.update(values)
    else:
        for k, v in values.items():
            step.setdefault(k, v)
    return merged


# A bundle's reason for having no trace when no loader said why (BundleFacts.reason).
NO_TRACE = "no trace in the bundle (see the collectors' statuses)"


def picked_rank(ranks: int, rank: int) -> str:
    """What :func:`load_bundle` asked for no rank of a multi-rank bundle says it loaded."""
    return f"a {ranks}-rank bundle: rank {rank} loaded (perfdoctor analyze shows every rank)"


def load_bundle(bundle: str | Path, rank: int | None = None, manifest: Manifest | None = None,
                results: dict[str, PassResults] | None = None) -> Profile:
    """Everything a run collected, as one Profile (see the module docstring).

    A multi-rank bundle (:mod:`perfdoctor.record.launch`) holds one profile per rank: ``rank``
    picks one (default: the lowest rank, with a warning saying so; ``perfdoctor analyze``
    reads every rank through :mod:`perfdoctor.analysis.ranks`). ``manifest`` and ``results``
    (``raw/<pass>.json`` per pass): the bundle's, already read and validated
    (:func:`perfdoctor.bundle.manifest.read_bundle`), so not read again; a rank's results
    are in its own folder, read here."""
    from perfdoctor.collectors import ncu, nvml

    from perfdoctor.bundle.manifest import read_valid_manifest

    bundle = Path(bundle)
    if manifest is None:
        manifest = read_valid_manifest(bundle)  # read safely and shape-checked: one UsageError if not
    raw = bundle / RAW
    warnings: list[str] = []
    ranks = manifest.ranks or {}
    if rank is None and ranks:
        rank = min(int(k) for k in ranks)
        warnings.append(picked_rank(len(ranks), rank))
    if rank is not None:
        if str(rank) not in ranks:
            raise UsageError(f"{bundle}: no rank {rank} in this bundle (ranks: {', '.join(sorted(ranks, key=int)) or 'none'})")
        raw = raw / f"rank{rank}"
        light_pass = manifest.rank_light_pass(str(rank))
        results = None
    else:
        light_pass = manifest.light_pass
    profile, pass_name = _activity_source(raw, warnings)

    if pass_name is not None:
        offset = _clock_offset(profile, _pass_results(raw, pass_name, results))
        samples_file = raw / f"nvml-{pass_name}.jsonl"
        if _present(samples_file):
            if offset is None:
                warnings.append("NVML samples left out: the trace has no clock-sync range to align them")
            else:
                samples = nvml.read_samples(samples_file, offset)
                profile.samples = pd.concat([profile.samples, samples], ignore_index=True) if len(profile.samples) else samples
        profile.ranges = profile.ranges[profile.ranges["name"] != CLOCK_SYNC_RANGE].reset_index(drop=True)

    if _present(raw / NCU_CSV):
        profile.counters = ncu.parse_csv(read_capped(raw / NCU_CSV).decode("utf-8", "replace"))

    gpu = manifest.gpu or {}
    for key, value in gpu.items():
        profile.device.setdefault(key, value)
    if "peak_dram_bw_gbps" in gpu and "peak_source" not in profile.device:
        profile.device["peak_source"] = gpu.get("peak_source", "nvml")
    calibration = manifest.calibration
    if calibration:
        profile.device["measured_dram_bw_gbps"] = calibration.get("dram_read_gbps")
        profile.device["measured_bf16_tflops"] = calibration.get("bf16_matmul_tflops")
        profile.device["measured_source"] = f"perfdoctor calibrate ({calibration.get('measured_at', '?')})"

    # why there is no trace: the warnings so far (the light pass's are about its timing)
    reason = None if pass_name else "; ".join(warnings) or NO_TRACE
    classes: tuple[str, ...] = ()
    training: bool | None = None
    if light_pass is not None:
        light = _pass_results(raw, "light", results)
        profile.light = read_light(light, light_pass, warnings)
        classes = tuple(sorted(str(c) for c in (light.module_classes or {}).values()))
        training = _light_training(light)
        if children := light.children_note():
            # the light pass's reason for no step says it whole, with what to do (mnist_hogwild:
            # the main process's test loop is no step of the training in its children)
            why = light_pass.reason if light_pass.step_name is None and children in (light_pass.reason or "") else None
            warnings.append(why or f"{children}: their work is in no pass of this bundle")
        if light_pass.other_phase:
            warnings.append(light_pass.other_phase)
    origin = profile.origin
    profile.origin = replace(
        origin,
        source=origin.source or "bundle",
        path=str(bundle),
        declared=_merge_run_declaration(origin.declared, light_pass) if light_pass is not None else origin.declared,
        # The trace's own (events skipped while reading it), then the bundle's.
        warnings=origin.warnings + tuple(w for w in warnings if w not in origin.warnings),
        bundle=BundleFacts(
            step=manifest.step,  # the step name the run traced (its --step, or found)
            activities_from=pass_name,
            reason=reason,
            exit_code=manifest.exit_code,
            status=manifest.status,
            passes=tuple(p for p in manifest.passes or [] if isinstance(p, dict)),
            light_pass=light_pass.to_json() if light_pass is not None else None,
            rank=ranks[str(rank)] if rank is not None else None,
            module_classes=classes,
            light_training=training,
        ),
    )
    return profile
