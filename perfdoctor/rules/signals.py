"""Rule inputs that are not in the metric contract: read from kernel names, samples, declarations.

``metrics.md`` defines the numbers every loader agrees on. A few seed rules need more:
whether GEMMs run in fp32, whether attention is fused, PCIe traffic during the steps, the
bytes a step must read. They are computed here, as :class:`perfdoctor.analysis.metrics.Metric`
values with a source and, when absent, the reason — so the engine treats them exactly like
contract metrics, and a missing one is "not evaluated", never a pass.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Callable

import numpy as np
import pandas as pd

from perfdoctor.analysis.metrics import METRIC_UNITS, NEEDS_LIGHT, Analysis, Metric
from perfdoctor.analysis.attribution import is_layout_conversion
from perfdoctor.analysis.cpu import fetch_ms, loader_waits
from perfdoctor.analysis.ownership import containing
from perfdoctor.analysis.comms import NEEDS_RANKS
from perfdoctor.names.families import is_log_softmax
from perfdoctor.names.codes import equals, factorize, starts_with
from perfdoctor.names.kernels import family, per_name
from perfdoctor.names.ranges import LOOP_PREFIXES
from perfdoctor.text import count, value

if TYPE_CHECKING:  # the cross-rank view's module loads with a multi-rank job, not with every rule evaluation
    from perfdoctor.analysis.ranks import CrossRank

DATALOADER_PREFIX = LOOP_PREFIXES[0]  # enumerate(DataLoader)#<Iter>.__next__


def step_activities(analysis: Analysis) -> pd.DataFrame:
    """GPU activities that belong to a step, with a ``step`` column (position in the step
    table): the timeline's table, built once per analysis."""
    return analysis.timeline.activities


def _kernels_in_steps(analysis: Analysis) -> pd.DataFrame:
    return analysis.timeline.step_kernels


def step_kernel_families(analysis: Analysis) -> pd.Series:
    """The family of each kernel of :func:`_kernels_in_steps` (same index), from the timeline."""
    t = analysis.timeline
    return pd.Series(t.step_kernel_families, index=t.step_kernels.index, dtype=object)


def fp32_gemm_time_ratio(analysis: Analysis) -> Metric:
    """Share of GEMM time spent in kernels whose name says fp32/tf32, among GEMMs whose name says a precision."""
    k = _kernels_in_steps(analysis)
    if k.empty:
        return Metric(None, "ratio", "kernel-names", reason="no kernels inside steps")
    gemm = analysis.timeline.gemm_kernels
    if gemm.empty:
        return Metric(None, "ratio", "kernel-names", reason="no GEMM kernels inside steps")
    precision = gemm["precision"]
    dur = (gemm["end_ns"] - gemm["start_ns"]).astype(float)
    known = dur[precision != "unknown"].sum()
    if known <= 0:
        return Metric(
            None,
            "ratio",
            "kernel-names",
            reason="the GEMM kernel names do not state their precision (cuBLAS nvjet kernels do not)",
        )
    return Metric(float(dur[precision == "fp32"].sum() / known), "ratio", "kernel-names")


def attention_softmax(kernels: pd.DataFrame) -> pd.Series:
    """Which kernels are softmaxes attention could run: the softmax family less log-softmax
    (a cross-entropy loss's: a training step's loss is not unfused attention)."""
    names = kernels["name"]
    return (per_name(names, family) == "softmax") & ~per_name(names, is_log_softmax).astype(bool)


def unfused_attention(analysis: Analysis) -> Metric:
    """1 when steps run (non-log) softmax and GEMM kernels and no fused attention kernel, 0
    when attention is fused."""
    k = _kernels_in_steps(analysis)
    if k.empty:
        return Metric(None, "flag", "kernel-names", reason="no kernels inside steps")
    fams = step_kernel_families(analysis)
    if equals(fams, "attention").any():
        return Metric(0.0, "flag", "kernel-names", note="a fused attention kernel runs in the steps")
    if (attention_softmax(k)).any() and equals(fams, "gemm").any():
        return Metric(1.0, "flag", "kernel-names", note="softmax and GEMM kernels, no fused attention kernel")
    return Metric(None, "flag", "kernel-names", reason="no attention pattern recognised in the kernel names")


def pcie_h2d_gbps(analysis: Analysis) -> Metric:
    """Median host-to-device PCIe throughput (NVML RX, as seen by the GPU) during the profiled span."""
    s = analysis.profile.samples
    s = s[s["metric"] == "pcie_rx_bytes_per_s"]
    span = analysis.steps.span
    if span is not None and not s.empty:
        s = s[(s["time_ns"] >= span[0]) & (s["time_ns"] <= span[1])]
    if s.empty:
        return Metric(None, "GB/s", "nvml", reason="needs NVML PCIe throughput samples inside the steps")
    return Metric(float(np.median(s["value"].to_numpy())) / 1e9, "GB/s", "nvml")


def model_bytes_per_step(analysis: Analysis) -> Metric:
    """Bytes one step must read from DRAM, as the workload declared (``perfdoctor.declare``)."""
    declared = (analysis.profile.origin.declared or {}).get(analysis.steps.name or "", {})
    if not declared.get("bytes"):
        return Metric(None, "bytes", "declared", reason="the step declares no bytes (perfdoctor.declare range)")
    return Metric(float(declared["bytes"]), "bytes", "declared")


def bandwidth_floor_ms(analysis: Analysis) -> Metric:
    """The fastest a step can be if it only streams its declared bytes at the device's peak bandwidth."""
    peak = analysis.value("peak_dram_bw_gbps")
    nbytes = model_bytes_per_step(analysis).value
    if not peak or not nbytes:
        return Metric(None, "ms", "model", reason="needs the declared bytes per step and the device peak bandwidth")
    return Metric(nbytes / (peak * 1e9) * 1e3, "ms", "model", note="declared bytes / peak bandwidth")


def graph_replay_share(analysis: Analysis) -> Metric:
    """Share of the steps' kernels replayed from a CUDA graph (the tracer's graph id)."""
    k = _kernels_in_steps(analysis)
    if k.empty:
        return Metric(None, "ratio", "kernel-names", reason="no kernels inside steps")
    return Metric(float((k["graph_id"] >= 0).mean()), "ratio", analysis.profile.origin.source or "trace")


def step_kernels_p50(analysis: Analysis) -> Metric:
    """Median kernels a step runs itself (its own GPU work by ownership, a graph replay's
    kernels included; not ``kernels_per_step``, which counts the whole traced span): 1-2 for
    a persistent megakernel, ~80 for the fused engine, ~400 for its eager step. The step
    table's own count (the ``step_kernels`` sample of a diff)."""
    kernels = analysis.timeline.steps["kernels"]
    if kernels.empty:
        return Metric(None, "count", "trace", reason="no steps")
    return Metric(float(kernels.median()), "count", analysis.profile.origin.source or "trace")


def host_busy_gap_ratio(analysis: Analysis) -> Metric:
    """Share of the steps' idle time (gaps and lead-ins) in which the host ran Python instead
    of issuing GPU work (neither waiting on the GPU nor launching; :mod:`perfdoctor.analysis.hostgaps`)."""
    from perfdoctor.analysis.hostgaps import busy_summary

    b = busy_summary(analysis)
    if b.ratio is None:
        return Metric(None, "ratio", "python-stacks", reason=b.reason)
    top = f"; top call site {b.sites[0][0]} ({value(b.sites[0][1], 'ms')} per step)" if b.sites else ""
    return Metric(b.ratio, "ratio", "python-stacks", note=f"{value(b.ms_per_step, 'ms')} per step (median){top}")


def paused_time_ratio(analysis: Analysis) -> Metric:
    """Share of the light pass's steady loop time (its first steady step's end to its last
    step's, every interval) spent between steps in the program's own pauses and pass ends
    (:attr:`perfdoctor.analysis.steady.Cadence.own_ms`): the time ``steps_per_s`` leaves out
    as no step's. An iteration-based training loop that sleeps at each epoch change
    (mmengine's endless loader iterator: time.sleep(2)) spent 97 % of its run so at a
    0.44 ms step, with every check passing. A thread's waits for another (a server idle
    between requests, a loop paced to a rate) and torch.compile's recompilations are not
    counted: they are no time the loop could spend on steps."""
    series = analysis.light_series
    if series is None:
        return Metric(None, "ratio", "light", reason=NEEDS_LIGHT)
    cad = series.cadence
    if cad.steps_per_s is None:
        return Metric(None, "ratio", "light", reason=f"light pass: {cad.reason}")
    total = cad.loop_ms
    own = float(cad.own_ms.sum())
    ends, pauses = cad.own_ms[cad.own_pass_end], cad.own_ms[~cad.own_pass_end]
    note = (f"{ends.size} pass end(s) {value(float(ends.sum()), 'ms')} and {pauses.size} pause(s) {value(float(pauses.sum()), 'ms')}, "
            f"of {value(total, 'ms')} from the first steady step to the last")
    return Metric(own / total if total > 0 else 0.0, "ratio", "light", note=note)


def steady_cpu_waits_ms(analysis: Analysis) -> np.ndarray | None:
    """Each of the light pass's steady steps' waits for a CPU, ms (its ``cpu_wait_ns``); None
    without steady steps or where no step waited: :func:`cpu_wait_ratio` and the
    ``cpu_wait_time`` estimate read the same waits."""
    light, series = analysis.light, analysis.light_series
    if light is None or series is None or series.steps is None or not series.critical_path_ms.size or light.cpu_wait_ns is None:
        return None
    return light.cpu_wait_ns[series.steps] / 1e6


def cpu_wait_ratio(analysis: Analysis) -> Metric:
    """Share of the light pass's steady step time in which the step's thread was ready to run
    and waited for a CPU (the kernel's run-queue delay, read by the light pass: each step's
    ``cpu_wait_ns``): another process on the program's cores, or more runnable threads than
    cores. uneven-steps' contended variant sees waits only in the slow steps; a run whose
    every step waits alike has no slow ones (nanoGPT's train.py beside a neighbour: 172 ms of
    each 344 ms iteration, every check passing)."""
    series = analysis.light_series
    if analysis.light is None or series is None or series.steps is None or not series.critical_path_ms.size:
        return Metric(None, "ratio", "light", reason=NEEDS_LIGHT)
    waited = steady_cpu_waits_ms(analysis)
    if waited is None:
        return Metric(None, "ratio", "light", reason="no step's thread waited for a CPU that the light pass read "
                      "(its run-queue delay, /proc/<pid>/task/<tid>/schedstat: none waited, or the kernel does not say)")
    total = float(series.critical_path_ms.sum())
    note = f"{value(float(waited.sum()), 'ms')} of {value(total, 'ms')} over {series.steps.size} steady steps"
    return Metric(float(waited.sum()) / total if total > 0 else 0.0, "ratio", "light", note=note)


def loop_step_latency_ms_p99(analysis: Analysis) -> Metric:
    """The p99 of the light pass's steady steps with each loop's first step after a pause left
    out (:attr:`perfdoctor.analysis.steady.SteadySeries.paused`: the program did other work
    before it, a generate's prefill, an encoder over a new input): the decode loop's own
    tail. openai-whisper's first decoder call per clip (its prompt and the cross-attention
    keys over the audio, 50-94 ms among 11 ms tokens) set the p99 of its run; the p99-latency
    rule's ``tail-after-pauses`` variant compares the two."""
    series = analysis.light_series
    if series is None:
        return Metric(None, "ms", "light", reason=NEEDS_LIGHT)
    if series.paused is None or not series.paused.any():
        return Metric(None, "ms", "light", reason="no steady step follows a pause: every step is the loop's own")
    rest = series.critical_path_ms[~series.paused]
    if not rest.size:
        return Metric(None, "ms", "light", reason="every steady step follows a pause")
    after = int(series.paused.sum())
    return Metric(float(np.percentile(rest, 99)), "ms", "light", note=f"{after} of {series.paused.size} steady steps follow a pause, left out")


def _attribution_share(parts: tuple[str, ...], of: str, meaning: str) -> Callable[[Analysis], Metric]:
    """A share of the step attribution (:mod:`perfdoctor.analysis.attribution`): ``parts`` over
    the whole step (``of="step"``) or over the GPU busy time (``of="busy"``)."""

    def read(analysis: Analysis) -> Metric:
        a = analysis.attribution
        if a.reason:
            return Metric(None, "ratio", "attribution", reason=a.reason)
        whole = a.step_ms if of == "step" else a.busy_ms
        if whole <= 0:
            return Metric(None, "ratio", "attribution", reason=f"the step has no {'time' if of == 'step' else 'GPU busy time'}")
        ms = sum(a.step[p] for p in parts)
        return Metric(ms / whole, "ratio", f"attribution ({a.source})", note=f"{value(ms, 'ms')} per step of {value(whole, 'ms')} {meaning}")

    return read


def layout_conversions(analysis: Analysis) -> np.ndarray:
    """Which of the steps' kernels are NCHW<->NHWC conversions: cuDNN's, around each
    convolution that runs in NHWC on NCHW tensors (the attribution's layout part holds them)."""
    k = analysis.timeline.step_kernels
    return per_name(k["name"], is_layout_conversion).to_numpy(dtype=bool) if not k.empty else np.zeros(0, dtype=bool)


def conversion_ms(analysis: Analysis) -> float:
    """The NCHW<->NHWC conversion kernels' time per step (ms), :func:`layout_conversions`."""
    k = analysis.timeline.step_kernels
    if k.empty:
        return 0.0
    mine = layout_conversions(analysis)
    ns = (k["end_ns"].to_numpy(dtype=float) - k["start_ns"].to_numpy(dtype=float))[mine].sum()
    return float(ns) / 1e6 / max(analysis.steps.count, 1)


def convolution_layout_share(analysis: Analysis) -> float | None:
    """The convolutions' share of GPU busy time with the conversions cuDNN runs around them
    (:func:`conversion_ms`), or None without an attribution: an NCHW model's convolutions
    cost their conversions too. ResNet-50 b256 AMP on the H100: convolution kernels 9.4 %
    (its 1x1 ones run as GEMMs, a family of their own), with the conversions 25 %; a ViT's
    one patch convolution and its conversions ~4 %."""
    a = analysis.attribution
    if a.reason or a.busy_ms <= 0:
        return None
    return (a.step["convolution"] + conversion_ms(analysis)) / a.busy_ms


def convolution_layout_ratio(analysis: Analysis) -> Metric:
    """The convolutions' share of GPU busy time, with the NCHW<->NHWC conversions cuDNN runs
    around them (:func:`convolution_layout_share`)."""
    share = convolution_layout_share(analysis)
    a = analysis.attribution
    if share is None:
        return Metric(None, "ratio", "attribution", reason=a.reason or "the step has no GPU busy time")
    conversions = share * a.busy_ms - a.step["convolution"]  # conversion_ms, as the share holds it
    note = (f"{value(a.step['convolution'], 'ms')} of convolutions and {value(conversions, 'ms')} of NCHW<->NHWC "
            f"conversions per step of {value(a.busy_ms, 'ms')} of GPU busy time")
    return Metric(share, "ratio", f"attribution ({a.source})", note=note)


def eager_launches_per_step(analysis: Analysis) -> Metric:
    """Launches per step that are not graph replays, in steps that also replay graphs
    (piecewise CUDA graphs leave the pieces between them eager)."""
    from perfdoctor.names.api import is_graph_launch
    from perfdoctor.analysis.steps import is_launch

    calls = analysis.profile.calls
    if calls.empty or analysis.steps.count == 0:
        return Metric(None, "count", "trace", reason="the trace has no CUDA API calls inside steps")
    mine = calls[analysis.steps.call_step.to_numpy() >= 0]
    graph = is_graph_launch(mine["name"])
    launch = is_launch(mine["name"]).to_numpy()
    n = analysis.steps.count
    if not graph.any():
        return Metric(None, "count", "trace", reason="no step replays a CUDA graph")
    eager = int((launch & ~graph).sum())
    return Metric(eager / n, "count", analysis.profile.origin.source or "trace",
                  note=f"{count(graph.sum() / n)} graph launches and {count(eager / n)} eager launches per step")


def memory_bound_bw_util(analysis: Analysis) -> Metric:
    """DRAM bandwidth of the memory-bound kernel classes against the ceiling
    (:meth:`perfdoctor.analysis.bounds.Bounds.memory_bound_bw_util`): the time a roofline
    judges by bandwidth, not the whole step's idle and compute-bound time. Where the judged
    classes hold under half of the kernel time, the whole step's ``dram_bw_util``, saying so."""
    value, what = analysis.bounds.memory_bound_bw_util()
    if value is not None:
        return Metric(value, "ratio", "bounds", note=what)
    if analysis.bounds.judged:  # the bounds of most kernel time are known and say bandwidth is not the question
        return Metric(None, "ratio", "bounds", reason=what)
    whole = analysis.metrics.get("dram_bw_util")
    if whole is not None and whole.value is not None:
        return Metric(whole.value, "ratio", whole.source, note=f"the whole step's DRAM bandwidth: per-class bounds unknown ({what})",
                      alternatives=whole.alternatives)
    return Metric(None, "ratio", "bounds", reason=f"{what}; the whole step's dram_bw_util: {whole.reason if whole is not None else 'absent'}")


# Batch norm by name: cuDNN's bn_fw_inf / bn_fw_tr / bn_bw kernels, ATen's batch_norm_* kernels
# and CPU ops (aten::batch_norm, aten::cudnn_batch_norm, aten::native_batch_norm), MIOpen's
# BatchNorm. Layer / group / RMS norm are not batch norm: there is nothing to fold.
_BATCH_NORM = re.compile(r"batch_?norm|(?:^|[^a-z])bn_(?:fw|bw)", re.I)


def batch_norm_in_steps(analysis: Analysis) -> Metric:
    """1 when the steps run batch norm (a kernel of a step, or a CPU op inside a step's host
    range, named so), 0 when they run kernels and none is: what batch-norm folding needs."""
    k = _kernels_in_steps(analysis)
    if k.empty:
        return Metric(None, "flag", "kernel-names", reason="no kernels inside steps")
    # The distinct names by factorize (object identity first): pd.unique hashed every row's
    # long kernel name (37 ms of 50 on the 80 MB HF trace).
    hit = next((n for n in factorize(k["name"])[1] if isinstance(n, str) and _BATCH_NORM.search(n)), None)
    if hit is None:
        ops, table = analysis.profile.ops, analysis.steps.table
        named = ops[per_name(ops["name"], lambda n: bool(isinstance(n, str) and _BATCH_NORM.search(n))).astype(bool)] if not ops.empty else ops
        if not named.empty and not table.empty:
            lo, hi = (table[k].to_numpy(dtype=np.int64) for k in ("host_start_ns", "host_end_ns"))
            step = containing(lo, hi, np.argsort(lo, kind="stable"), named["start_ns"].to_numpy(dtype=np.int64))
            hit = str(named["name"].to_numpy()[step >= 0][0]) if (step >= 0).any() else None
    if hit is None:
        return Metric(0.0, "flag", "kernel-names", note="no batch-norm kernel or op in the steps")
    return Metric(1.0, "flag", "kernel-names", note=f"batch norm runs in the steps: {hit[:80]}")


# aten::convolution's inputs: the input, the weight, then the bias ([] where bias=False, as
# torchvision's ResNets build every convolution that a batch norm follows).
CONV_OP, BATCH_NORM_OP = "aten::convolution", "aten::batch_norm"


def conv_bias_before_bn(analysis: Analysis) -> Metric:
    """1 when a convolution with a bias runs right before a batch norm (on its thread, the
    next of the two ops after an aten::convolution is an aten::batch_norm), 0 when the
    convolutions' shapes are recorded and none does: what "bias=False" advice needs. A
    ResNet-50 from torchvision has no such bias and was told to remove it."""
    from perfdoctor.analysis.bounds import parse_recorded, shaped_ops

    ops = analysis.profile.ops
    conv = equals(ops["name"], CONV_OP) if not ops.empty else np.zeros(0, dtype=bool)
    if not conv.any():
        return Metric(None, "flag", "cpu-ops", reason=f"no {CONV_OP} CPU op in the trace")
    if not (conv & shaped_ops(ops)).any():
        return Metric(None, "flag", "cpu-ops", reason="the convolutions' input shapes were not recorded (torch.profiler record_shapes=True)")
    pick = np.flatnonzero(conv | equals(ops["name"], BATCH_NORM_OP))
    order = pick[np.lexsort((ops["start_ns"].to_numpy()[pick], ops["tid"].to_numpy()[pick]))]
    is_conv, tid = conv[order], ops["tid"].to_numpy()[order]
    before = np.flatnonzero(is_conv[:-1] & ~is_conv[1:] & (tid[:-1] == tid[1:]))  # a convolution, then a batch norm
    if not before.size:
        return Metric(0.0, "flag", "cpu-ops", note="no convolution runs right before a batch norm")
    codes, distinct = factorize(ops["dims"].to_numpy(dtype=object)[order[before]])
    n = int(np.array([_has_bias(parse_recorded(d)) for d in distinct], dtype=bool)[codes].sum())
    if n:
        return Metric(1.0, "flag", "cpu-ops", note=f"{count(n)} of {count(before.size)} convolutions before a batch norm have a bias")
    return Metric(0.0, "flag", "cpu-ops", note=f"none of {count(before.size)} convolutions before a batch norm has a bias")


def _has_bias(inputs: object) -> bool:
    """Whether a recorded aten::convolution's third input (its bias) has a shape."""
    return isinstance(inputs, list) and len(inputs) > 2 and isinstance(inputs[2], list) and len(inputs[2]) > 0


# torch.compile's inductor names every kernel it generates triton_<kind>_... (triton_poi_fused_add_0,
# triton_red_..., triton_per_..., triton_tem_fused_mm_0): a step that runs them runs compiled
# code. Hand-written Triton kernels carry their authors' names.
INDUCTOR_KERNEL_PREFIX = "triton_"


def compiled_kernel_ratio(analysis: Analysis) -> Metric:
    """Share of the steps' kernels generated by torch.compile (inductor's ``triton_*`` kernels),
    by count: what "torch.compile the model" advice must know it has already been taken."""
    k = _kernels_in_steps(analysis)
    if k.empty:  # 0, not absent: the steps run nothing compiled, and the advice to compile (needs < 0.2) stands
        return Metric(0.0, "ratio", "kernel-names", note="no kernels inside steps: nothing compiled runs there")
    hit = starts_with(k["name"], INDUCTOR_KERNEL_PREFIX)
    return Metric(float(hit.mean()), "ratio", "kernel-names",
                  note=f"{count(int(hit.sum()))} of {count(len(hit))} step kernels generated by torch.compile (inductor's {INDUCTOR_KERNEL_PREFIX}* kernels)")


def _loader_names(analysis: Analysis) -> list[str]:
    """The DataLoader ranges' names (``enumerate(DataLoader)#<its iterator>.__next__``) of the
    trace and the light pass's step, each once; [] where none was seen."""
    profile = analysis.profile
    light = getattr(profile, "light", None)
    names = [light.name] if light is not None else []
    if not profile.ranges.empty:
        names += [n for n in factorize(profile.ranges["name"])[1] if isinstance(n, str)]
    return [n for n in names if n.startswith(DATALOADER_PREFIX)]


# The iterator a DataLoader hands out names its workers: _MultiProcessingDataLoaderIter for
# num_workers > 0, _SingleProcessDataLoaderIter for 0 (the range torch.profiler records is named after it).
MULTIPROCESS_LOADER = "_MultiProcessingDataLoaderIter"


def loader_workers(analysis: Analysis) -> Metric:
    """1 when the DataLoader loads in worker processes (its iterator is the multiprocessing one),
    0 when in the step's own process; absent without a DataLoader range: "use worker processes"
    is advice for the second case only."""
    names = _loader_names(analysis)
    if not names:
        return Metric(None, "flag", "ranges", reason="no DataLoader range in the trace or the light pass")
    multi = next((n for n in names if MULTIPROCESS_LOADER in n), None)
    if multi is not None:
        return Metric(1.0, "flag", "ranges", note=f"worker processes: {multi[:80]}")
    return Metric(0.0, "flag", "ranges", note=f"no worker process: {names[0][:80]}")


def loader_wait_share(analysis: Analysis) -> Metric:
    """The share of the DataLoader's fetches inside the steps that their thread spent waiting
    for the workers' batch (or pin_memory's thread: :func:`perfdoctor.analysis.cpu.loader_waits`);
    the rest took the batch in. Absent where the trace marks no such wait (only
    ``perfdoctor run``'s traced pass does, and only a DataLoader with workers waits so)."""
    st = analysis.timeline.steps
    if st.empty:
        return Metric(None, "ratio", "ranges", reason="no steps")
    s0, s1 = (st.sort_values("host_start_ns")[c].to_numpy(np.int64) for c in ("host_start_ns", "host_end_ns"))
    waiting = loader_waits(analysis.profile.ranges, s0, s1)
    if waiting is None:
        return Metric(None, "ratio", "ranges", reason="the trace does not mark the fetches' waits for the workers "
                      "(perfdoctor run's traced pass does, where the DataLoader has workers)")
    fetched = fetch_ms(analysis.profile.ranges, s0, s1)
    if fetched <= 0:
        return Metric(None, "ratio", "ranges", reason="no DataLoader fetch inside the steps")
    return Metric(min(waiting / fetched, 1.0), "ratio", "ranges",
                  note=f"{value(waiting, 'ms')} of each step's {value(fetched, 'ms')} in the DataLoader waited for the workers")


def data_loading_seen(analysis: Analysis) -> Metric:
    """1 when a data loader was seen: a DataLoader range (``enumerate(DataLoader)#…__next__``)
    in the trace, the light pass's step is one, or the attribution gives data loading time;
    0 when the trace or the light pass was read and shows none: what DataLoader advice needs."""
    profile = analysis.profile
    light = getattr(profile, "light", None)
    names = _loader_names(analysis)
    hit = names[0] if names else None
    if hit is not None:
        return Metric(1.0, "flag", "ranges", note=f"a DataLoader range: {hit[:80]}")
    a = analysis.attribution
    if not a.reason and a.step.get("data_loading", 0.0) > 0:
        return Metric(1.0, "flag", "attribution", note=f"{value(a.step['data_loading'], 'ms')} per step waiting for data loading")
    if light is None and profile.ranges.empty and profile.activities.empty and profile.ops.empty:
        return Metric(None, "flag", "ranges", reason="no trace and no light pass to read")
    return Metric(0.0, "flag", "ranges", note="no DataLoader range and no data-loading time in the steps")


SYNC_LOOP_TURNS = 4  # turns of a loop that waits at each: fewer are a step's own reads (a loss and an accuracy)


def sync_loop_turns(analysis: Analysis) -> Metric:
    """The median over steps of :func:`perfdoctor.analysis.steps.waiting_turns`: the turns of
    a Python loop over the data that waits for the GPU at each (kmeans_pytorch's
    ``torch.nonzero`` per cluster, an ``.item()`` per box), 1 where no two consecutive
    sync-delimited parts repeat, 0 where the steps sync nowhere. Such a step cannot be
    captured in a CUDA graph (a sync in it, shapes that follow the data), and the fix is one
    batched op for all the turns."""
    from perfdoctor.analysis.steps import waiting_turns

    table, acts = analysis.steps.table, analysis.profile.activities
    if table.empty or acts.empty:
        return Metric(None, "count", "trace", reason="no steps with GPU work")
    return Metric(float(np.median(waiting_turns(analysis.profile, table))), "count", "trace")


SIGNALS: dict[str, tuple[str, Callable[[Analysis], Metric], str]] = {
    # key: (unit, function, one-line meaning for `perfdoctor rules explain`)
    "fp32_gemm_time_ratio": ("ratio", fp32_gemm_time_ratio, "share of GEMM time in kernels named fp32/tf32"),
    "unfused_attention": ("flag", unfused_attention, "1 = softmax + GEMM kernels and no fused attention kernel"),
    "pcie_h2d_gbps": ("GB/s", pcie_h2d_gbps, "median NVML host-to-device PCIe throughput during the steps"),
    "model_bytes_per_step": ("bytes", model_bytes_per_step, "bytes a step declares it must read"),
    "bandwidth_floor_ms": ("ms", bandwidth_floor_ms, "declared bytes per step / device peak bandwidth"),
    "memory_bound_bw_util": ("ratio", memory_bound_bw_util, "DRAM bandwidth of the memory-bound kernel classes / the ceiling (perfdoctor.analysis.bounds), else the whole step's dram_bw_util"),
    "graph_replay_share": ("ratio", graph_replay_share, "share of step kernels replayed from a CUDA graph"),
    "step_kernels_p50": ("count", step_kernels_p50, "median kernels a step runs itself (1-2: one persistent kernel)"),
    "host_busy_gap_ratio": ("ratio", host_busy_gap_ratio, "share of the steps' idle time the host ran Python (not waiting, not launching)"),
    "layout_transform_ratio": ("ratio", _attribution_share(("layout_transform",), "busy", "of GPU busy time"), "share of GPU busy time in layout transforms (NCHW<->NHWC, transposes, contiguous copies)"),
    "norm_elementwise_ratio": ("ratio", _attribution_share(("normalisation", "elementwise"), "busy", "of GPU busy time"), "share of GPU busy time in normalisation and elementwise kernels"),
    "convolution_ratio": ("ratio", _attribution_share(("convolution",), "busy", "of GPU busy time"), "share of GPU busy time in convolution kernels"),
    "convolution_layout_ratio": ("ratio", convolution_layout_ratio, "share of GPU busy time in convolution kernels and the NCHW<->NHWC conversions cuDNN runs around them"),
    "conv_bias_before_bn": ("flag", conv_bias_before_bn, "1 = a convolution with a bias runs right before a batch norm (aten::convolution, then aten::batch_norm; recorded shapes), 0 = none does"),
    "batch_norm_in_steps": ("flag", batch_norm_in_steps, "1 = batch-norm kernels or ops run in the steps (cuDNN bn_fw / bn_bw, ATen batch_norm), 0 = kernels run and none is batch norm"),
    "compiled_kernel_ratio": ("ratio", compiled_kernel_ratio, "share of the steps' kernels generated by torch.compile (inductor's triton_* kernels), by count"),
    "loader_wait_share": ("ratio", loader_wait_share, "share of the DataLoader's fetch time inside the steps spent waiting for the workers' batch (the rest took it in)"),
    "loader_workers": ("flag", loader_workers, "1 = the DataLoader loads in worker processes (_MultiProcessingDataLoaderIter), 0 = in the step's process"),
    "data_loading_seen": ("flag", data_loading_seen, "1 = a DataLoader range (trace or light-pass step) or data-loading time in the attribution, 0 = none seen"),
    "data_loading_ratio": ("ratio", _attribution_share(("data_loading",), "step", "of the step"), "share of the step the GPU waited for the DataLoader"),
    "host_late_ratio": ("ratio", _attribution_share(("host_late",), "step", "of the step"), "share of the step the GPU waited for the host to issue work, nothing else in flight"),
    "host_before_launch_ratio": ("ratio", _attribution_share(("host_before_launch",), "step", "of the step"), "share of the step the GPU waited, before the step's first launch, for host work no DataLoader, sync or Python frame explains"),
    "sync_loop_turns": ("count", sync_loop_turns, "median per step of the longest run of consecutive sync-delimited parts launching the same kernels: "
                        "the turns of a loop that waits for the GPU at each (a nonzero or .item() per element)"),
    "paused_time_ratio": ("ratio", paused_time_ratio, "share of the light pass's steady loop time between its steps: the program's pauses and pass ends "
                          "(an evaluation, an epoch's end, a prefill or an encoder per generate), its waits for other threads left out"),
    "cpu_wait_ratio": ("ratio", cpu_wait_ratio, "share of the light pass's steady step time the step's thread waited for a CPU (run-queue delay): "
                       "another process on its cores, or more runnable threads than cores"),
    "eager_launches_per_step": ("count", eager_launches_per_step, "launches per step that are not graph replays, where steps replay graphs"),
    "loop_step_latency_ms_p99": ("ms", loop_step_latency_ms_p99, "p99 of the light pass's steady steps, each loop's first step after a pause left out "
                                 "(a prefill or an encoder per generate before it): the loop's own tail"),
}

# The job's numbers, measured across its ranks (perfdoctor.analysis.ranks.CrossRank.metrics): no
# one rank's trace holds them, so the rules of every rank get the view beside their Analysis.
CROSS_RANK_INPUTS: dict[str, tuple[str, str]] = {
    # key: (unit, one-line meaning for `perfdoctor rules explain`)
    "straggler_delay_ms": ("ms", "how much longer the slowest-working rank works per step than the others (perfdoctor.analysis.ranks)"),
    "straggler_delay_ratio": ("ratio", "straggler_delay_ms over the job's median traced step"),
    "rank_step_spread_ratio": ("ratio", "(max − min) / median of the ranks' step_latency_ms_p50"),
}

KNOWN_INPUTS: dict[str, str] = {**METRIC_UNITS, **{k: unit for k, (unit, _, _) in SIGNALS.items()},
                                **{k: unit for k, (unit, _) in CROSS_RANK_INPUTS.items()}}


def meaning(key: str) -> str | None:
    """What a signal or cross-rank input means; None for a contract metric."""
    if key in SIGNALS:
        return SIGNALS[key][2]
    return CROSS_RANK_INPUTS[key][1] if key in CROSS_RANK_INPUTS else None


def inputs(analysis: Analysis, cross_rank: CrossRank | None = None) -> dict[str, Metric]:
    """Every value a rule may read: the contract metrics, the signals above, and the
    cross-rank metrics of the job ``analysis`` is one rank of (``cross_rank``; absent, with
    the reason, for a single process)."""
    values = dict(analysis.metrics)
    for key, (_, fn, _) in SIGNALS.items():
        values[key] = fn(analysis)
    cross = cross_rank.metrics() if cross_rank is not None else {}
    for key, (unit, _) in CROSS_RANK_INPUTS.items():
        values[key] = cross[key] if key in cross else Metric(None, unit, "cross-rank", reason=NEEDS_RANKS)
    return values
