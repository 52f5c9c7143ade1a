"""The rule engine: load TOML rule packs, check them, evaluate them, rank what fails.

A rule is data (see ``docs/rules.md`` and ``packs/seed.toml``)::

    [[rule]]
    id = "memory-bubbles"
    title = "The GPU sits idle between kernels"
    metric = ["memory_bubble_ratio", "gpu_idle_ratio"]   # first one present is compared
    comparator = "<"                                     # the rule passes when value < threshold
    threshold = 0.15
    severity = "error"
    cite = [{ source = "megakernel", section = "5.2", says = "keep memory bubbles below 15 %", original = "..." }]
    evidence = ["largest_gaps", "top_short_kernels"]
    estimate = { kind = "idle_between_kernels", residual_gap_us = 2.0 }
    collect = "any trace with GPU activity"
    [rule.remediation]
    steps = ["Capture the decode step in a CUDA graph", "..."]
    snippet = '''g = torch.cuda.CUDAGraph() ...'''
    [[source]]                                           # what cite names (any pack may add sources)
    id = "megakernel"
    title = "Performance optimisation of large models for low-latency inference: ..."
    original_title = "..."                               # for reference: reports print the English only
    [source.sections]
    "5.2" = { title = "Key metrics to monitor", original = "..." }
    [[rule.variant]]                                     # replaces parts of the rule when
    when = "graphed"                                     # the steps are graph-replayed
    [rule.variant.remediation]
    steps = ["Already one launch per step: fuse kernels / megakernel"]

Packs load in order (the seed pack first, then each ``--rules FILE``); a later pack's rule
with an existing id overrides only the fields it sets, so a user pack can be just
``[[rule]] id = "dram-bandwidth"  threshold = 0.8``. ``--threshold id=value`` wins over
every pack. Every threshold remembers where it came from.

Evaluation never passes a rule whose metric is missing: it is "not evaluated" with the
reason and how to collect it. Failures are ranked by the time per step their fix should
win back (:mod:`perfdoctor.rules.estimates`), then by severity.
"""

from __future__ import annotations

import difflib
import operator
import math
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

import numpy as np

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser, packaged as tomli
    import tomli as tomllib  # type: ignore[no-redef]

from perfdoctor.analysis.cpu import READY_SHARE
from perfdoctor.errors import UsageError
from perfdoctor.text import clean, clean_block
from perfdoctor.analysis.metrics import Analysis, Metric
from perfdoctor.analysis.steady import (
    PERIODIC_SHARE, PERIODIC_SLOW, REGIME_WINDOW, WARMUP_FACTOR, WORK_SPREAD, held_share, in_flight, slow_period, slow_stretches,
    without_waits, work_share,
)
from perfdoctor.rules.estimates import ESTIMATES, Estimate, Need, Unavailable
from perfdoctor.rules.evidence import EVIDENCE, Evidence
from perfdoctor.rules.reasons import Fallback, Lowered, Missing, OffWorkload, Reason, Suppressed
from perfdoctor.rules.signals import KNOWN_INPUTS, SYNC_LOOP_TURNS, inputs

if TYPE_CHECKING:
    from perfdoctor.analysis.ranks import CrossRank

SEED_PACK = Path(__file__).parent / "packs" / "seed.toml"
SCHEMA = "perfdoctor.rules/1"

COMPARATORS: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "==": operator.eq,
}
SEVERITIES = ("info", "warning", "error", "critical")
SEVERITY_RANK = {s: i for i, s in enumerate(SEVERITIES)}
STATUS_ORDER = ("fail", "advisory", "pass", "not_evaluated")

PACK_FIELDS = {"schema", "name", "description", "rule", "source"}
RULE_FIELDS = {
    "id", "title", "description", "metric", "show", "comparator", "threshold", "severity",
    "citation", "cite", "reading", "evidence", "estimate", "collect", "remediation", "variant", "workload", "suppresses", "no_estimate",
}
WORKLOADS = ("training", "inference", "any", "serving", "diffusion", "llm-prefill", "llm-decode", "vision")
VARIANT_FIELDS = {"when", "title", "remediation", "estimate", "severity", "no_estimate"}
REMEDIATION_FIELDS = {"steps", "snippet"}
STEP_FIELDS = {"text", "needs"}  # a step given only where a condition holds: { text = "...", needs = "KEY [OP NUMBER]" | "[not] CONDITION" }
SNIPPET_FIELDS = {"code", "needs"}  # a snippet's part likewise: { code = "...", needs = "..." }
REQUIRED = ("title", "metric", "severity", "remediation")  # and a citation: `cite` or `citation`
SOURCE_FIELDS = {"id", "title", "short", "original_title", "url", "sections"}
CITE_FIELDS = {"source", "section", "says", "original"}
SECTION_FIELDS = {"title", "original"}
# A remediation step or description refers to a section of a source as {source §section}.
SECTION_REF = re.compile(r"\{([a-z0-9][a-z0-9._-]*) §([0-9][0-9.]*)\}")
ID_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


# --- what the workload looks like: conditions a variant can select on ------------------

def _graphed(values: dict[str, Metric]) -> bool:
    """Steps are replayed from CUDA graphs: most steps own a recognised graph launch that
    replays at least half their kernels (``steps_graphed``, :func:`perfdoctor.analysis.capture.graphed`).

    Judged on recognised launches, not kernel counts: a graph-captured decode still runs
    hundreds of kernels per step and must not be told to "use CUDA graphs", and a step with
    kernels but ZERO recognised launches (a tracer that dropped the runtime API, names
    perfdoctor does not know) is never read as "already graphed": ``steps_graphed`` is
    absent there and no variant is chosen.
    """
    m = values.get("steps_graphed")
    return m is not None and m.value is not None and m.value == 1.0


# A step of this many kernels or fewer, busy for most of the step, is already one persistent
# kernel (the megakernel variant's step: the kernel and a position update, 98.8 % of the
# step in kernels); "fuse the step into a megakernel" is then the advice it has already taken.
PERSISTENT_KERNELS = 2
PERSISTENT_BUSY = 0.5


def _persistent(values: dict[str, Metric]) -> bool:
    """The step runs one persistent kernel: 1 <= ``step_kernels_p50`` <= :data:`PERSISTENT_KERNELS`,
    kernels for most of the step (``kernel_time_ratio`` >= :data:`PERSISTENT_BUSY`: one short
    kernel amid host work is a host-bound step, as in two of HTA's sample traces, 0.2 % and
    1.9 %), and not a graph capture (a capture's steps record their kernels as graph nodes and
    run few or none; no kernel at all is a CPU step)."""
    m, busy, capture = values.get("step_kernels_p50"), values.get("kernel_time_ratio"), values.get("capture_trace")
    if capture is not None and capture.value == 1.0:
        return False
    if busy is None or busy.value is None or busy.value < PERSISTENT_BUSY:
        return False
    return m is not None and m.value is not None and 1 <= m.value <= PERSISTENT_KERNELS


# Compiled: at least this share of the steps' kernels is torch.compile's own (a model compiled
# whole runs its GEMMs and convolutions in cuBLAS/cuDNN and most of the rest in inductor's
# kernels: ~40-90 %); below it, a few compiled helpers beside an eager model.
COMPILED_KERNELS = 0.2


# Checkpointing: at least this share of the slow steps' time beyond the median is the
# program's checkpoint saves inside them (slow_step_save_ratio)
SAVES_EXPLAIN = 0.5
# Contended: at least this share of it is the step's thread waiting for a CPU inside the slow
# steps (slow_step_cpu_wait_ratio): another process on the program's cores
CPU_WAITS_EXPLAIN = 0.5
# Oversubscribed: the program itself runs at least this many steps at once per CPU it has
# (steps_per_cpu: a thread pool's requests, each calling the model), so its steps wait for
# each other's CPU time, not a neighbour's
OVERSUBSCRIBED = 1.5
# After pauses: at least this share of it is in the first steps after the program's pauses
# (slow_step_after_pause_ratio): whisper's first decoder call per clip (its prompt and the
# cross-attention keys over the audio), 52-54 % of the time beyond the median on a CPU
PAUSES_EXPLAIN = 0.5
# Varying work: the steady steps' model calls vary (steady.WORK_SPREAD), and each step's calls
# at the median time per call account for at least this share of the slow steps' time beyond
# the median (slow_step_work_ratio): an RL episode's length
VARYING_EXPLAIN = 0.5
# Collector pauses: at least this share of the time between steps is Python's full garbage
# collections there (paused_gc_ratio): PyKEEN's gc.collect() at each epoch's end
GC_PAUSES_EXPLAIN = 0.5
# Regimes: at least this share of it is in stretches of slow steps (slow_step_regime_ratio):
# the run changed pace (a T5's batches generated greedy, then with 4 beams: the beam half)
REGIMES_EXPLAIN = 0.5
# Tail after pauses: leaving each loop's first step after a pause out lowers the p99 by at
# least this share of its height above the median (loop_step_latency_ms_p99): those first
# steps set the tail (whisper-shaped decode on a CPU: 12.9 ms with them, 4.0 without, p50 2.2)
TAIL_EXPLAIN = 0.5


def _tail_after_pauses(values: dict[str, Metric]) -> bool:
    p50, p99, loop = (values.get(k) for k in ("step_latency_ms_p50", "step_latency_ms_p99", "loop_step_latency_ms_p99"))
    if any(m is None or m.value is None for m in (p50, p99, loop)):
        return False
    return p99.value > p50.value and p99.value - loop.value >= TAIL_EXPLAIN * (p99.value - p50.value)


def _at_least(key: str, floor: float) -> Callable[[dict[str, Metric]], bool]:
    """A condition that holds when the input ``key`` is present and at least ``floor``."""

    def pred(values: dict[str, Metric]) -> bool:
        m = values.get(key)
        return m is not None and m.value is not None and m.value >= floor

    return pred


def _workload_is(kind: str) -> Callable[[dict[str, Metric]], bool]:
    def pred(values: dict[str, Metric]) -> bool:
        m = values.get(f"workload_{kind}")
        return m is not None and m.value == 1.0

    return pred


def _workers(behind: bool) -> Callable[[dict[str, Metric]], bool]:
    """A DataLoader with workers (``loader_workers``) whose fetches waited for them (``behind``:
    ``loader_wait_share`` at least :data:`perfdoctor.analysis.cpu.READY_SHARE`, or unknown),
    or spent their time taking in the batches the workers had ready."""

    def pred(values: dict[str, Metric]) -> bool:
        workers, share = values.get("loader_workers"), values.get("loader_wait_share")
        if workers is None or workers.value != 1.0:
            return False
        ready = share is not None and share.value is not None and share.value < READY_SHARE
        return ready != behind

    return pred


def _unscheduled_work(values: dict[str, Metric]) -> bool:
    """The slow steps' own work explains them (``slow_step_work_ratio``), and they come on no
    schedule (``periodic`` names a schedule's work more precisely)."""
    return _at_least("slow_step_work_ratio", VARYING_EXPLAIN)(values) and not PREDICATES["periodic"][0](values)


def _both(*names: str) -> Callable[[dict[str, Metric]], bool]:
    """A condition that holds where each named condition of PREDICATES holds."""

    def pred(values: dict[str, Metric]) -> bool:
        return all(PREDICATES[n][0](values) for n in names)

    return pred


PREDICATES: dict[str, tuple[Callable[[dict[str, Metric]], bool], str]] = {
    "graphed": (_graphed, "steps are CUDA-graph replays (steps_graphed: most steps own a recognised graph launch replaying ≥ 50 % of their kernels)"),
    "persistent": (_persistent, f"the step is one persistent kernel (1 <= step_kernels_p50 <= {PERSISTENT_KERNELS}, kernel_time_ratio >= {PERSISTENT_BUSY}, not a capture: a megakernel)"),
    # "torch.compile the model" is then the advice the program has already taken
    "compiled": (_at_least("compiled_kernel_ratio", COMPILED_KERNELS), f"the steps run torch.compile's kernels (compiled_kernel_ratio >= {COMPILED_KERNELS}: inductor's triton_* kernels by count)"),
    # the slow steps come every k-th step: the loop's own scheduled work, not a random stall
    "periodic": (_at_least("slow_step_period", 2), "the steady steps' slow ones come on a schedule, every k-th step "
                 f"(slow_step_period: at least {PERIODIC_SHARE} of the intervals between {PERIODIC_SLOW} or more slow steps one period)"),
    # each step is the model's calls on windows of one input (sliding-window inference): a
    # batch of them is one launch's work
    "sliding-window": (_at_least("windows_per_step", 2), "each step calls the model on windows of one input, one after another "
                       "(windows_per_step: the light pass's calls per step on views of one input's storage, perfdoctor.analysis.steps.call_groups)"),
    # a loop that waits for the GPU at each turn: no CUDA graph captures it, batching its turns fixes it
    "waiting-loop": (_at_least("sync_loop_turns", SYNC_LOOP_TURNS), "the step runs a loop that waits for the GPU at each turn "
                     f"(sync_loop_turns >= {SYNC_LOOP_TURNS}: consecutive sync-delimited parts launching the same kernels)"),
    # the slow steps come in stretches: the run changed pace, not random stalls
    "regimes": (_at_least("slow_step_regime_ratio", REGIMES_EXPLAIN), "stretches of slow steps (a window of "
                f"{REGIME_WINDOW} steps around each mostly slow) hold the slow steps' time beyond the median (slow_step_regime_ratio >= {REGIMES_EXPLAIN})"),
    # the slow steps are each loop's first, after the program's other work: that call's own work
    "after-pauses": (_at_least("slow_step_after_pause_ratio", PAUSES_EXPLAIN), "the first steps after the program's pauses (a prefill or an encoder "
                     "between decode loops, an evaluation or an epoch's end) account for the slow steps' time beyond the median "
                     f"(slow_step_after_pause_ratio >= {PAUSES_EXPLAIN})"),
    # the p99 is each loop's first step, not spikes: "check swapping" is then no advice
    "tail-after-pauses": (_tail_after_pauses, "leaving out each loop's first step after a pause (a prefill or an encoder per generate before it) "
                          f"lowers the p99 by at least {TAIL_EXPLAIN} of its height above the p50 (loop_step_latency_ms_p99)"),
    # "find what the slow steps wait for" is then answered already
    "checkpointing": (_at_least("slow_step_save_ratio", SAVES_EXPLAIN), f"checkpoint saves (torch.save, safetensors' save_file, DCP's save) inside the slow steps account for their time beyond the median "
                      f"(slow_step_save_ratio >= {SAVES_EXPLAIN})"),
    # the same saves in a run that trains nothing write its outputs (a prediction writer's
    # files, an embedding job's shards), not a checkpoint: after "checkpointing" in the pack
    "saving-outputs": (_both("checkpointing", "inference"), "the slow steps' saves (torch.save, safetensors' save_file) account for their time beyond the median "
                       f"(slow_step_save_ratio >= {SAVES_EXPLAIN}) in a run that trains nothing: the job's outputs, not a checkpoint"),
    # "find what the slow steps wait for" is answered: a CPU, which another process held
    "contended": (_at_least("slow_step_cpu_wait_ratio", CPU_WAITS_EXPLAIN), "the step's thread waiting for a CPU inside the slow steps (another "
                  f"process on its cores) accounts for their time beyond the median (slow_step_cpu_wait_ratio >= {CPU_WAITS_EXPLAIN})"),
    # the CPU waits are the program's own: more of its steps at once than it has CPUs
    "oversubscribed": (_at_least("steps_per_cpu", OVERSUBSCRIBED), "the program runs its steps on several threads at once, at least "
                       f"{OVERSUBSCRIBED} per CPU it may run on where its steps waited for a CPU (steps_per_cpu: the steady steps' steps under way "
                       "while each ran, weighted by each one's wait for a CPU, the median where none waited, over the CPUs of the "
                       "program's affinity): its steps wait for each other's CPU time"),
    # the slow steps are longer because they do more: their work, not a stall to remove
    # (not on a schedule: SAC's every 3rd step holds the actor's updates, and "periodic" names that)
    "varying-work": (_unscheduled_work, f"the steps' model calls vary (most / fewest >= {WORK_SPREAD}) and "
                     "their count at the median time per call accounts for the slow steps' time beyond the median "
                     f"(slow_step_work_ratio >= {VARYING_EXPLAIN}), and the slow steps come on no schedule (not periodic)"),
    # a DataLoader with workers: the fetch waited for them, or took in batches they had ready
    "workers-behind": (_workers(behind=True), "the DataLoader has worker processes and its fetches waited for them most of "
                       f"their time (loader_wait_share >= {READY_SHARE}), or the trace does not say"),
    "batches-ready": (_workers(behind=False), "the DataLoader has worker processes and its fetches spent most of their time taking in "
                      f"batches the workers had ready, not waiting (loader_wait_share < {READY_SHARE})"),
    # the time between steps is the collector's: "persistent workers, OpenMMLab's sleep" is then no advice
    "collector-pauses": (_at_least("paused_gc_ratio", GC_PAUSES_EXPLAIN), "Python's full garbage collections between steps account for "
                         f"the time between them (paused_gc_ratio >= {GC_PAUSES_EXPLAIN})"),
    "training": (_workload_is("training"), "the trace is training (backward ops, an optimizer step or an autograd thread: perfdoctor.analysis.workload)"),
    "inference": (_workload_is("inference"), "the trace is inference (no backward op, no optimizer step)"),
    "unrecognised": (_workload_is("unrecognised"), "the trace is inference whose task was not recognised (Workload.task 'inference': "
                     "no vision, diffusion, language-model or serving names)"),
}


TASK_CONDITIONS = ("vision", "diffusion", "llm-prefill", "llm-decode", "serving")
for _task in TASK_CONDITIONS:
    PREDICATES[_task] = (_workload_is(_task), f"the workload is recognised as {_task} (perfdoctor.analysis.workload.Workload.task)")


def workload_values(analysis: Analysis) -> dict[str, Metric]:
    """The workload as 0/1 inputs for the ``training`` / ``inference`` and task conditions."""
    w = getattr(analysis, "workload", None)
    kind = w.kind if w is not None else "unknown"
    task = getattr(w, "task", "unknown")
    src = "perfdoctor.analysis.workload"
    out = {f"workload_{k}": Metric(1.0 if kind == k else 0.0, "flag", src) for k in ("training", "inference")}
    out.update({f"workload_{k}": Metric(1.0 if task == k else 0.0, "flag", src) for k in TASK_CONDITIONS})
    out["workload_unrecognised"] = Metric(1.0 if kind == "inference" and task == "inference" else 0.0, "flag", src)
    return out


def light_values(analysis: Analysis) -> dict[str, Metric]:
    """Inputs of the ``periodic``, ``regimes``, ``after-pauses``, ``sliding-window`` and ``checkpointing``
    conditions, from the light pass (none without one): ``slow_step_period``, the period in
    steps of the steady steps' slow ones where they come on a schedule
    (:func:`perfdoctor.analysis.steady.slow_period`); ``slow_step_regime_ratio``, the share of
    the steady steps' time beyond the median in stretches of slow steps
    (:func:`perfdoctor.analysis.steady.slow_stretches`); ``slow_step_after_pause_ratio``, the share
    of the steady steps' time beyond the median in the steps that follow a pause;
    ``windows_per_step``, where each step is the model's calls on windows of one input; and, when
    a steady step saved a checkpoint, ``slow_step_save_ratio``, the share of the steady
    steps' time beyond the median that the program's checkpoint saves inside them account
    for (:func:`perfdoctor.analysis.steady.held_share`); likewise ``slow_step_cpu_wait_ratio``,
    the step's thread waiting for a CPU, and ``slow_step_work_ratio``, the steps' own model
    calls (:func:`perfdoctor.analysis.steady.work_share`); and, where a full garbage collection ran between two
    steady steps, ``paused_gc_ratio``, the share of the time between steps
    (``Cadence.own_ms``, what ``paused_time_ratio`` counts) those collections account for;
    and, where the steps ran on several threads (``LightSteps.threads``), ``steps_per_cpu``,
    the steps under way while each ran (:func:`perfdoctor.analysis.steady.in_flight`),
    weighted by its wait for a CPU, per CPU of the program's affinity.
    Rule inputs, not metrics of the contract: most runs have neither, and an absent metric
    for them would be noise."""
    light, series = analysis.light, analysis.light_series
    if light is None or series is None:
        return {}
    period = slow_period(series.critical_path_ms, series.cpu_wait_ms)
    out = {} if period is None else {"slow_step_period": Metric(float(period), "steps", "light")}
    cp, paused = series.critical_path_ms, series.paused
    # the steps after a pause slower than the others (by the warm-up's factor): a server's
    # worker waits for each request, and its steps after a wait, most of them, are no slower
    # (3.06 against 3.07 ms): "each loop's first step" held their time beyond the median trivially
    if paused is not None and paused.any() and (paused.all() or np.median(cp[paused]) >= WARMUP_FACTOR * np.median(cp[~paused])):
        after = held_share(cp, np.where(paused, cp, 0.0))
        if after is not None:
            out["slow_step_after_pause_ratio"] = Metric(after, "ratio", "light")
    # stretches of the program's own pace: on the steps' time less their waits for a CPU, so
    # a neighbour's stretch is "contended", not a pace (an Optuna study beside a busy loop:
    # its trials' paces read "another process took the CPUs", the pace of each trial its own);
    # and only where the stretch's own excess over the median is at least the waits inside it:
    # a neighbour also slows the work it lets run (caches, switches), and two busy loops on a
    # program's one CPU left its steps ~25 % slower less their waits, a "stretch" of 3x steps
    # that were two thirds waiting
    own = without_waits(cp, series.cpu_wait_ms)
    stretches = slow_stretches(own)
    if stretches.any() and np.clip(own - np.median(own), 0, None)[stretches].sum() >= (cp - own)[stretches].sum():
        held = held_share(series.critical_path_ms, np.where(stretches, series.critical_path_ms, 0.0))
        if held is not None:
            out["slow_step_regime_ratio"] = Metric(held, "ratio", "light")
    if light.windows_per_step:
        out["windows_per_step"] = Metric(float(light.windows_per_step), "count", "light")
    for key, held in (("slow_step_save_ratio", light.save_ns), ("slow_step_cpu_wait_ratio", light.cpu_wait_ns)):
        share = held_share(series.critical_path_ms, held[series.steps] / 1e6) if held is not None and series.steps is not None else None
        if share is not None:
            out[key] = Metric(share, "ratio", "light")
    work = work_share(series.critical_path_ms, light.work_calls[series.steps]) if light.work_calls is not None and series.steps is not None else None
    if work is not None:
        out["slow_step_work_ratio"] = Metric(work, "ratio", "light")
    if light.threads is not None and series.steps is not None and light.cpus:
        # where the waiting was: requests arriving at random on a 4-thread executor ran 1.5
        # at once at the median, and waited for a CPU in the steps that ran beside 3 or more
        at_once = in_flight(light.host_start_ns, light.gpu_end_ns)[series.steps]
        waits = series.cpu_wait_ms
        level = float(np.average(at_once, weights=waits)) if waits is not None and waits.sum() > 0 else float(np.median(at_once))
        out["steps_per_cpu"] = Metric(level / light.cpus, "ratio", "light")
    cad = series.cadence
    if light.gc_before_ns is not None and cad.steps_per_s is not None and cad.own_ms.size and cad.own_ms.sum() > 0:
        collected = light.gc_before_ns[cad.own_after].sum() / 1e6
        out["paused_gc_ratio"] = Metric(min(float(collected / cad.own_ms.sum()), 1.0), "ratio", "light")
    return out


# Severity follows the time at stake: a failure whose estimate wins back less than these
# shares of the step is at most a warning / info (a 0.1 ms "error" in a 37 ms step is not one).
STAKE_WARNING, STAKE_INFO = 0.05, 0.01


def _stake_severity(analysis: Analysis, finding: "Finding") -> None:
    ms = finding.recovered_ms
    step = analysis.value("step_latency_ms_p50")
    if ms is None or not step or step <= 0 or finding.severity == "critical":
        return
    share = ms / step
    cap = "info" if share < STAKE_INFO else "warning" if share < STAKE_WARNING else None
    if cap is not None and SEVERITY_RANK[finding.severity] > SEVERITY_RANK[cap]:
        finding.reasons.append(Lowered(finding.severity, cap, ms, step))
        finding.severity = cap


# --- the rule model ---------------------------------------------------------------------

@dataclass(frozen=True)
class Remediation:
    """A rule's fix. ``needs`` (empty, or one entry per step, ``""`` = always) is each step's
    condition on the rule inputs (:func:`step_holds`): a step that names a cause (batch-norm
    folding, DataLoader workers) is given only where the trace shows that cause.
    ``snippet_parts``: the snippet's parts with their conditions, where any has one (the
    snippet is then every part; a finding's, those whose condition holds)."""

    steps: tuple[str, ...]
    snippet: str = ""
    needs: tuple[str, ...] = ()
    snippet_parts: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"steps": list(self.steps), "snippet": self.snippet}

    def conditions(self) -> tuple[str, ...]:
        """Each step's condition, ``""`` for a step given always."""
        return self.needs or ("",) * len(self.steps)

    def for_values(self, values: dict[str, Metric]) -> "Remediation":
        """The steps and snippet parts whose condition holds on ``values`` (a finding's remediation)."""
        if not any(self.needs) and not self.snippet_parts:
            return self
        steps = tuple(s for s, cond in zip(self.steps, self.conditions()) if step_holds(cond, values))
        snippet = "\n".join(code for code, cond in self.snippet_parts if step_holds(cond, values)) if self.snippet_parts else self.snippet
        return Remediation(steps, snippet)


# A step's condition: `KEY` (the input is measured and not 0: a flag that is 1, a share above
# 0) or `KEY OP NUMBER` (the input is measured and the comparison holds). An input that is
# absent never holds: a step that names a cause needs the trace to show it. Or a variant's
# condition, `CONDITION` or `not CONDITION` (PREDICATES: `not compiled`), so a threshold the
# engine owns is written once, not copied into the packs as a number.
STEP_NEEDS = re.compile(r"^\s*([a-z][a-z0-9_]*)\s*(?:(<=|>=|==|<|>)\s*(-?[0-9]+(?:\.[0-9]+)?(?:[eE]-?[0-9]+)?))?\s*$")
STEP_CONDITION = re.compile(r"^\s*(not\s+)?([a-z][a-z0-9-]*)\s*$")


def _step_condition(condition: str) -> tuple[bool, str] | None:
    """(negated, name) where ``condition`` names a variant condition (:data:`PREDICATES`)."""
    m = STEP_CONDITION.match(condition)
    return (m.group(1) is not None, m.group(2)) if m is not None and m.group(2) in PREDICATES else None


def step_holds(condition: str, values: dict[str, Metric]) -> bool:
    """Whether a remediation step's ``needs`` condition holds (``""`` always does)."""
    if not condition:
        return True
    named = _step_condition(condition)
    if named is not None:
        return PREDICATES[named[1]][0](values) != named[0]
    m = STEP_NEEDS.match(condition)
    if m is None:
        return False
    value = values.get(m.group(1))
    if not _usable(value):
        return False
    if m.group(2) is None:
        return value.value != 0
    return COMPARATORS[m.group(2)](value.value, float(m.group(3)))


@dataclass(frozen=True)
class EstimateSpec:
    kind: str
    params: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class Variant:
    when: str
    title: str | None = None
    remediation: Remediation | None = None
    estimate: EstimateSpec | None = None
    severity: str | None = None  # the pack's severity where the condition holds (the stake may still lower it)
    # where the condition holds, the rule's estimate does not apply: why nothing is estimated
    no_estimate: str = ""


@dataclass(frozen=True)
class Source:
    """A document rules cite: its title in English and, for a translated one, its original title.

    ``sections`` maps a section number to its (English title, original title); a source
    without sections (a web page) is cited by the section's name as the page gives it.
    """

    id: str
    title: str
    short: str = ""
    original_title: str = ""
    url: str = ""
    sections: tuple[tuple[str, str, str], ...] = ()  # (number, title, original title)

    def section(self, number: str) -> tuple[str, str] | None:
        return next(((title, original) for n, title, original in self.sections if n == number), None)

    def to_json(self) -> dict[str, Any]:
        return {"title": self.title, "short": self.short or None, "original_title": self.original_title or None, "url": self.url or None,
                "sections": {n: {"title": title, "original": original or None} for n, title, original in self.sections}}

    def where(self, number: str) -> str:
        """``§5.2 Key metrics to monitor`` for a numbered section; the section's name otherwise."""
        known = self.section(number)
        return f"§{number} {known[0]}" if known else number


@dataclass(frozen=True)
class Cite:
    """One place a rule rests on: a section of a source, what it says there in English, and
    the original words (kept for reference; reports print the English only)."""

    source: Source
    section: str = ""
    says: str = ""
    original: str = ""

    def to_json(self) -> dict[str, Any]:
        """One entry of a finding's ``citations``; the source's titles are in the document's ``sources``."""
        return {"source": self.source.id, "section": self.section or None, "says": self.says or None, "original": self.original or None}


def citation_text(cites: Sequence[Cite], reading: str = "") -> str:
    """The citation as a reader sees it: each source's full title once, then the sections cited
    from it with what they say, then perfdoctor's own reading where a threshold is ours."""
    groups: dict[str, dict[str, list[str]]] = {}  # source -> section -> what it says there, in order
    titles: dict[str, str] = {}
    for c in cites:
        titles[c.source.id] = c.source.title
        says = groups.setdefault(c.source.id, {}).setdefault(c.source.where(c.section) if c.section else "", [])
        if c.says:
            says.append(f'"{c.says}"')
    parts = []
    for sid, sections in groups.items():
        places = [" ".join(x for x in (where, f"({'; '.join(says)})" if says else "") if x) for where, says in sections.items()]
        places = [p for p in places if p]
        parts.append(titles[sid] + (": " + ", ".join(places) if places else ""))
    if reading:
        parts.append(reading)
    return "; ".join(parts)


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    metrics: tuple[str, ...]
    severity: str
    citation: str  # as printed (citation_text of ``cites``, or a pack's own ``citation`` text)
    remediation: Remediation
    comparator: str | None = None
    threshold: float | None = None
    threshold_origin: str = ""
    description: str = ""
    show: tuple[str, ...] = ()
    evidence: tuple[str, ...] = ()
    estimate: EstimateSpec | None = None
    collect: str = ""
    variants: tuple[Variant, ...] = ()
    origin: str = ""  # the pack file(s) that define it
    workload: tuple[str, ...] = ()  # the workloads it applies to ("training", "inference"); () = any
    suppresses: tuple[str, ...] = ()  # rule ids made not applicable when this rule fails
    no_estimate: str = ""  # why a rule without an estimate cannot say what fixing it wins back
    cites: tuple[Cite, ...] = ()

    @property
    def advisory(self) -> bool:
        return self.comparator is None


@dataclass
class RuleSet:
    rules: dict[str, Rule]
    packs: list[str]

    def __iter__(self):
        return iter(self.rules.values())

    def __len__(self) -> int:
        return len(self.rules)

    def get(self, rule_id: str) -> Rule:
        if rule_id not in self.rules:
            raise UsageError(f"no rule {rule_id!r}{_suggest(rule_id, self.rules)} (see `perfdoctor rules list`)")
        return self.rules[rule_id]


# --- loading and validation -------------------------------------------------------------

def _suggest(word: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


class _Locator:
    """Finds the line of a rule or of one of its fields in a pack's text, for error messages.

    tomllib returns plain dicts without positions, so a semantic error ("unknown metric")
    is located by scanning the text: the n-th ``[[rule]]`` header starts rule n, and the
    field is the first ``name =`` (or ``[rule.name]`` table) inside that block.
    """

    HEADER = re.compile(r"^\s*\[\[\s*rule\s*\]\]")
    SOURCE = re.compile(r"^\s*\[\[\s*source\s*\]\]")

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()
        self.starts = [i for i, line in enumerate(self.lines) if self.HEADER.match(line)]
        self.sources = [i + 1 for i, line in enumerate(self.lines) if self.SOURCE.match(line)]

    def line(self, index: int, field: str | None = None) -> int:
        if index >= len(self.starts):
            return 1
        lo = self.starts[index]
        hi = self.starts[index + 1] if index + 1 < len(self.starts) else len(self.lines)
        if field:
            key = re.escape(field.split(".")[-1])
            pattern = re.compile(rf"^\s*(?:{key}\s*=|\[\[?\s*rule\.(?:[\w.]+\.)?{key}\s*\]\]?)")
            for i in range(lo, hi):
                if pattern.match(self.lines[i]):
                    return i + 1
        return lo + 1


class _PackError(Exception):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def _need(cond: bool, field: str, message: str) -> None:
    if not cond:
        raise _PackError(field, message)


def _known_fields(table: dict[str, Any], allowed: set[str], prefix: str = "") -> None:
    """Reject a misspelt field (``colour``, ``treshold``): silently ignoring it would hide the mistake."""
    unknown = sorted(set(table) - allowed)
    if unknown:
        name = unknown[0]
        raise _PackError(f"{prefix}{name}", f"unknown field{_suggest(name, allowed)} (allowed: {', '.join(sorted(allowed))})")


def _strings(value: Any, field: str) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    _need(isinstance(value, list) and all(isinstance(v, str) for v in value), field, "expected a string or a list of strings")
    return tuple(value)


def _with_refs(text: str, field: str, sources: dict[str, Source]) -> str:
    """Write each ``{source §section}`` out in English: ``low-latency MegaKernel tutorial, §4.1 MegaKernel architecture design``."""
    def expand(m: re.Match[str]) -> str:
        src = sources.get(m.group(1))
        if src is None:
            raise _PackError(field, f"{m.group(0)}: unknown source {m.group(1)!r}{_suggest(m.group(1), sources)}")
        if src.sections and src.section(m.group(2)) is None:
            raise _PackError(field, f"{m.group(0)}: source {src.id!r} has no section {m.group(2)} (it has: {', '.join(n for n, _, _ in src.sections)})")
        return f"{src.short or src.title}, {src.where(m.group(2))}"

    return SECTION_REF.sub(expand, text)


def _cites(raw: Any, sources: dict[str, Source]) -> tuple[Cite, ...]:
    _need(isinstance(raw, list) and bool(raw) and all(isinstance(c, dict) for c in raw), "cite",
          "expected a list of tables: [{ source = \"id\", section = \"5.2\", says = \"...\" }]")
    out = []
    for c in raw:
        _known_fields(c, CITE_FIELDS, "cite.")
        for key in CITE_FIELDS:
            _need(isinstance(c.get(key, ""), str), f"cite.{key}", "expected a string")
        sid, section = c.get("source", ""), c.get("section", "").strip()
        src = sources.get(sid)
        if src is None:  # the message only then: its suggestion is a difflib search (64 cites in the seed pack)
            raise _PackError("cite.source", f"unknown source {sid!r}{_suggest(sid, sources)}: define it in a [[source]] table")
        _need(not src.sections or not section or src.section(section) is not None, "cite.section",
              f"source {sid!r} has no section {section!r} (it has: {', '.join(n for n, _, _ in src.sections)})")
        out.append(Cite(src, clean(section), clean(c.get("says", "").strip()), clean(c.get("original", "").strip())))
    return tuple(out)


def _source(raw: Any) -> Source:
    _need(isinstance(raw, dict), "source", "expected [[source]] tables")
    _known_fields(raw, SOURCE_FIELDS)
    for key in ("id", "title"):
        _need(isinstance(raw.get(key), str) and raw[key].strip() != "", key, "required: a non-empty string")
    _need(ID_PATTERN.match(raw["id"]) is not None, "id", "expected a lowercase id such as 'megakernel'")
    for key in ("short", "original_title", "url"):
        _need(isinstance(raw.get(key, ""), str), key, "expected a string")
    sections = raw.get("sections", {})
    _need(isinstance(sections, dict), "sections", "expected a table: \"5.2\" = { title = \"...\", original = \"...\" }")
    rows = []
    for number, s in sections.items():
        _need(isinstance(s, dict) and isinstance(s.get("title"), str), f"sections.{number}", "expected { title = \"...\", original = \"...\" }")
        _known_fields(s, SECTION_FIELDS, f"sections.{number}.")
        _need(isinstance(s.get("original", ""), str), f"sections.{number}.original", "expected a string")
        rows.append((number, clean(s["title"].strip()), clean(s.get("original", "").strip())))
    return Source(raw["id"], clean(raw["title"].strip()), clean(raw.get("short", "").strip()),
                  clean(raw.get("original_title", "").strip()), clean(raw.get("url", "").strip()), tuple(rows))


def _step(raw: Any, field: str, key: str = "text") -> tuple[str, str]:
    """One remediation step: a string, or ``{ text = "...", needs = "KEY [OP NUMBER]" }``
    (given only where the condition holds on the rule inputs: :func:`step_holds`); a
    snippet's part likewise, its text under ``key`` "code"."""
    if isinstance(raw, str):
        return raw, ""
    _need(isinstance(raw, dict), field, f'expected a string or a table {{ {key} = "...", needs = "KEY" }}')
    _known_fields(raw, STEP_FIELDS if key == "text" else SNIPPET_FIELDS, f"{field}.")
    _need(isinstance(raw.get(key), str) and raw[key].strip() != "", f"{field}.{key}", "required: a non-empty string")
    needs = raw.get("needs", "")
    _need(isinstance(needs, str), f"{field}.needs", "expected a string: KEY, KEY OP NUMBER or [not] CONDITION")
    named = _step_condition(needs) if needs else None
    if named is not None:
        needs = f"not {named[1]}" if named[0] else named[1]
    elif needs:
        m = STEP_NEEDS.match(needs)
        _need(m is not None, f"{field}.needs", f"{needs!r}: expected KEY or KEY OP NUMBER (OP one of {' '.join(COMPARATORS)}), "
              f"or [not] CONDITION (one of {', '.join(PREDICATES)})")
        if m.group(1) not in KNOWN_INPUTS:
            raise _PackError(f"{field}.needs", f"unknown metric {m.group(1)!r}{_suggest(m.group(1), KNOWN_INPUTS)} (see docs/rules.md for the list)")
        needs = " ".join(x for x in m.groups() if x is not None)
    return raw[key], needs


def _remediation(raw: Any, field: str, sources: dict[str, Source]) -> Remediation:
    _need(isinstance(raw, dict), field, "expected a table with 'steps' (list of strings) and 'snippet'")
    _known_fields(raw, REMEDIATION_FIELDS, f"{field}.")
    listed = raw.get("steps", [])
    listed = [listed] if isinstance(listed, (str, dict)) else listed
    _need(isinstance(listed, list), f"{field}.steps", "expected a string or a list of steps")
    pairs = [_step(x, f"{field}.steps") for x in listed]
    _need(bool(pairs), f"{field}.steps", "at least one step is required")
    _need(any(not cond for _, cond in pairs), f"{field}.steps", "at least one step must be given always (without 'needs')")
    snippet = raw.get("snippet", "")
    _need(isinstance(snippet, (str, list)), f"{field}.snippet", 'expected a string, or a list of parts: strings or { code = "...", needs = "KEY" }')
    # Pack text reaches terminals and reports: made inert here, once (perfdoctor.text).
    steps = tuple(_with_refs(clean_block(x), f"{field}.steps", sources) for x, _ in pairs)
    needs = tuple(cond for _, cond in pairs)
    parts = [_step(x, f"{field}.snippet", "code") for x in snippet] if isinstance(snippet, list) else [(snippet, "")]
    parts = [(clean_block(code.strip("\n")), cond) for code, cond in parts]
    conditional = tuple(parts) if any(cond for _, cond in parts) else ()
    return Remediation(steps, "\n".join(code for code, _ in parts), needs if any(needs) else (), conditional)


def _estimate(raw: Any, field: str) -> EstimateSpec:
    if isinstance(raw, str):
        raw = {"kind": raw}
    _need(isinstance(raw, dict) and isinstance(raw.get("kind"), str), field, "expected a kind name or a table with 'kind'")
    kind = raw["kind"]
    if kind not in ESTIMATES:  # (the suggestion is built only for a bad name: difflib is slow)
        raise _PackError(f"{field}.kind", f"unknown estimate kind {kind!r}{_suggest(kind, ESTIMATES)}; known: {', '.join(ESTIMATES)}")
    params = {k: v for k, v in raw.items() if k != "kind"}
    allowed = ESTIMATES[kind][1]
    for k, v in params.items():
        _need(k in allowed, f"{field}.{k}", f"estimate {kind!r} takes no parameter {k!r} (takes: {', '.join(allowed) or 'none'})")
        _need(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v), f"{field}.{k}", "expected a finite number")
    return EstimateSpec(kind, tuple(sorted((k, float(v)) for k, v in params.items())))


def _rule(raw: dict[str, Any], origin: str, threshold_origin: str, sources: dict[str, Source]) -> Rule:
    """Build a Rule from its merged TOML table, raising _PackError naming the bad field."""
    _known_fields(raw, RULE_FIELDS)
    for key in REQUIRED:
        _need(key in raw, key, "required field is missing")
    _need(isinstance(raw["title"], str) and raw["title"].strip() != "", "title", "expected a non-empty string")
    metrics = _strings(raw["metric"], "metric")
    _need(bool(metrics), "metric", "at least one metric is required")
    show = _strings(raw.get("show", []), "show")
    for key in metrics + show:
        field = "metric" if key in metrics else "show"
        if key not in KNOWN_INPUTS:
            raise _PackError(field, f"unknown metric {key!r}{_suggest(key, KNOWN_INPUTS)} (see docs/rules.md for the list)")
    comparator, threshold = raw.get("comparator"), raw.get("threshold")
    _need((comparator is None) == (threshold is None), "threshold" if threshold is None else "comparator",
          "comparator and threshold go together (leave both out for an advisory rule)")
    if comparator is not None:
        _need(isinstance(comparator, str) and comparator in COMPARATORS, "comparator",
              f"bad comparator {comparator!r}; use one of {' '.join(COMPARATORS)}")
        _need(isinstance(threshold, (int, float)) and not isinstance(threshold, bool), "threshold", "expected a number")
        _need(math.isfinite(threshold), "threshold", f"expected a finite number, not {threshold!r}")
    _need(isinstance(raw["severity"], str) and raw["severity"] in SEVERITIES, "severity", f"bad severity {raw['severity']!r}; use one of {', '.join(SEVERITIES)}")
    _need("cite" in raw or "citation" in raw, "cite", "required: where the threshold comes from (cite = [...], or citation = \"text\")")
    if "cite" in raw:
        cites = _cites(raw["cite"], sources)
        _need(isinstance(raw.get("reading", ""), str), "reading", "expected a string")
        citation = citation_text(cites, clean(raw.get("reading", "").strip()))
    else:
        _need(isinstance(raw["citation"], str) and raw["citation"].strip() != "", "citation", "expected a non-empty string")
        cites, citation = (), clean(raw["citation"].strip())
    kinds = _strings(raw.get("evidence", []), "evidence")
    for kind in kinds:
        if kind not in EVIDENCE:
            raise _PackError("evidence", f"unknown evidence kind {kind!r}{_suggest(kind, EVIDENCE)}; known: {', '.join(EVIDENCE)}")
    for key in ("description", "collect", "no_estimate"):
        _need(isinstance(raw.get(key, ""), str), key, "expected a string")
    workload = _strings(raw.get("workload", []), "workload")
    for w in workload:
        _need(w in WORKLOADS, "workload", f"unknown workload {w!r}; use one of {', '.join(WORKLOADS)}")
    workload = () if "any" in workload else workload
    suppresses = _strings(raw.get("suppresses", []), "suppresses")
    for r in suppresses:
        _need(isinstance(r, str) and ID_PATTERN.match(r) is not None, "suppresses", f"bad rule id {r!r}")
    variants = []
    raw_variants = raw.get("variant", [])
    _need(isinstance(raw_variants, list), "variant", "expected [[rule.variant]] tables")
    for v in raw_variants:
        _need(isinstance(v, dict), "variant", "expected [[rule.variant]] tables")
        _known_fields(v, VARIANT_FIELDS, "variant.")
        when = v.get("when")
        _need(isinstance(when, str) and when in PREDICATES, "when", f"unknown condition {when!r}; known: {', '.join(PREDICATES)}")
        _need(isinstance(v.get("title", ""), str), "variant.title", "expected a string")
        _need(v.get("severity", "info") in SEVERITIES, "variant.severity", f"expected one of {', '.join(SEVERITIES)}")
        _need(isinstance(v.get("no_estimate", ""), str), "variant.no_estimate", "expected a string")
        _need(not ("estimate" in v and "no_estimate" in v), "variant.no_estimate", "a variant has an estimate or says why none, not both")
        variants.append(
            Variant(
                when=when,
                title=None if v.get("title") is None else clean(v["title"]),
                remediation=_remediation(v["remediation"], "remediation", sources) if "remediation" in v else None,
                estimate=_estimate(v["estimate"], "estimate") if "estimate" in v else None,
                severity=v.get("severity"),
                no_estimate=clean(v.get("no_estimate", "").strip()),
            )
        )
    return Rule(
        id=raw["id"],
        title=clean(raw["title"].strip()),
        metrics=metrics,
        severity=raw["severity"],
        citation=citation,
        cites=cites,
        remediation=_remediation(raw["remediation"], "remediation", sources),
        comparator=comparator,
        threshold=None if threshold is None else float(threshold),
        threshold_origin=threshold_origin if comparator is not None else "",
        description=_with_refs(clean_block(raw.get("description", "").strip()), "description", sources),
        show=show,
        evidence=kinds,
        estimate=_estimate(raw["estimate"], "estimate") if "estimate" in raw else None,
        collect=clean(raw.get("collect", "").strip()),
        variants=tuple(variants),
        origin=origin,
        workload=workload,
        suppresses=suppresses,
        no_estimate=clean(raw.get("no_estimate", "").strip()),
    )


MAX_PACK_BYTES = 16 * 1024**2  # a rule pack is a few kB of TOML


def _read_pack(path: Path) -> tuple[list[dict[str, Any]], list[Any], _Locator]:
    from perfdoctor.io import regular_file

    if not os.path.lexists(path):
        raise UsageError(f"{path}: rule pack not found")
    regular_file(path)  # a FIFO or a device would block or never end
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_PACK_BYTES + 1)
        if len(data) > MAX_PACK_BYTES:
            raise UsageError(f"{path}: rule pack larger than {MAX_PACK_BYTES // 1024**2} MiB; not a rule pack?")
        text = data.decode("utf-8").removeprefix("\ufeff")  # a UTF-8 BOM is fine
    except FileNotFoundError:
        raise UsageError(f"{path}: rule pack not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read rule pack ({exc})") from None
    try:
        doc = tomllib.loads(text)
    except RecursionError:
        raise UsageError(f"{path}: malformed TOML: nested too deeply") from None
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        at = re.search(r"\(at line (\d+), column (\d+)\)", message)
        line = int(at.group(1)) if at else 1
        source = text.splitlines()[line - 1] if 0 < line <= len(text.splitlines()) else ""
        key = re.match(r"^\s*([\w.\-\"]+)\s*=", source)
        where = f" in field {key.group(1)!r}" if key else ""
        reason = re.sub(r"\s*\(at line \d+, column \d+\)", "", message)
        raise UsageError(f"{path}:{line}: malformed TOML{where}: {reason}") from None
    locator = _Locator(text)
    unknown = set(doc) - PACK_FIELDS
    if unknown:
        raise UsageError(f"{path}:1: unknown top-level field {sorted(unknown)[0]!r} (a pack has: {', '.join(sorted(PACK_FIELDS))})")
    if "schema" in doc and doc["schema"] != SCHEMA:
        raise UsageError(f"{path}:1: field 'schema': {doc['schema']!r} is not {SCHEMA!r}")
    rules = doc.get("rule", [])
    if not isinstance(rules, list) or not all(isinstance(r, dict) for r in rules):
        raise UsageError(f"{path}:1: field 'rule': rules are [[rule]] tables")
    sources = doc.get("source", [])
    if not isinstance(sources, list):
        raise UsageError(f"{path}:1: field 'source': sources are [[source]] tables")
    return rules, sources, locator


def load_rules(
    packs: Sequence[str | Path] = (),
    thresholds: Sequence[str] = (),
    *,
    seed: bool = True,
) -> RuleSet:
    """Load the seed pack (unless ``seed=False``), then ``packs`` in order, then ``--threshold`` overrides.

    Raises :class:`UsageError` with ``file:line: rule 'id': field 'name': problem``.
    """
    paths = ([SEED_PACK] if seed else []) + [Path(p) for p in packs]
    merged: dict[str, dict[str, Any]] = {}
    rules: dict[str, Rule] = {}
    sources: dict[str, Source] = {}
    for path in paths:
        is_seed = path == SEED_PACK
        label = "seed default (perfdoctor/rules/packs/seed.toml)" if is_seed else f"pack {path}"
        raw_rules, raw_sources, locator = _read_pack(path)
        for index, raw in enumerate(raw_sources):
            try:
                src = _source(raw)
            except _PackError as err:
                line = locator.sources[index] if index < len(locator.sources) else 1
                raise UsageError(f"{path}:{line}: source #{index + 1}: field {err.field!r}: {err}") from None
            sources[src.id] = src  # a later pack may restate a source (a corrected title)
        seen: set[str] = set()
        for index, raw in enumerate(raw_rules):
            rid = raw.get("id")
            if not isinstance(rid, str) or not ID_PATTERN.match(rid):
                raise UsageError(f"{path}:{locator.line(index, 'id')}: rule #{index + 1}: field 'id': "
                                 "expected a lowercase id such as 'dram-bandwidth'")
            if rid in seen:
                raise UsageError(f"{path}:{locator.line(index, 'id')}: rule {rid!r}: field 'id': defined twice in this pack")
            seen.add(rid)
            base = merged.get(rid, {})
            if "citation" in raw or "cite" in raw:  # a pack's own citation replaces the one it overrides, whichever form
                base = {k: v for k, v in base.items() if k not in ("citation", "cite", "reading")}
            combined = {**base, **raw}
            previous = rules.get(rid)
            threshold_origin = label if ("threshold" in raw or previous is None) else previous.threshold_origin
            origin = label if previous is None else f"{previous.origin}; overridden by {label}"
            try:
                rule = _rule(combined, origin, threshold_origin, sources)
            except _PackError as err:
                raise UsageError(f"{path}:{locator.line(index, err.field)}: rule {rid!r}: field {err.field!r}: {err}") from None
            merged[rid] = combined
            rules[rid] = rule
    ruleset = RuleSet(rules, ["seed (built in)" if p == SEED_PACK else str(p) for p in paths])
    for spec in thresholds:
        _override(ruleset, spec)
    return ruleset


def _override(ruleset: RuleSet, spec: str) -> None:
    """Apply one ``--threshold id=value`` (``value`` a number, or a percentage like ``80%``)."""
    rid, sep, text = spec.partition("=")
    rid, text = rid.strip(), text.strip()
    if not sep or not rid or not text:
        raise UsageError(f"--threshold {spec!r}: expected RULE_ID=VALUE, e.g. dram-bandwidth=0.8")
    if rid not in ruleset.rules:
        raise UsageError(f"--threshold {spec!r}: no rule {rid!r}{_suggest(rid, ruleset.rules)} (see `perfdoctor rules list`)")
    rule = ruleset.rules[rid]
    if rule.advisory:
        raise UsageError(f"--threshold {spec!r}: rule {rid!r} is advisory and has no threshold")
    try:
        value = float(text[:-1]) / 100.0 if text.endswith("%") else float(text)
    except ValueError:
        raise UsageError(f"--threshold {spec!r}: {text!r} is not a number") from None
    if not math.isfinite(value):
        raise UsageError(f"--threshold {spec!r}: {text!r} is not a finite number")
    ruleset.rules[rid] = replace(rule, threshold=value, threshold_origin=f"command line (--threshold {rid}={text})")


# --- evaluation -------------------------------------------------------------------------

class _Later:
    """The evidence tables of one finding, not collected yet: ``kinds`` of ``analysis``,
    through the evaluation's ``memo`` (:func:`_collect`)."""

    __slots__ = ("kinds", "analysis", "memo")

    def __init__(self, kinds: Sequence[str], analysis: Analysis, memo: dict[str, Evidence] | None) -> None:
        self.kinds, self.analysis, self.memo = tuple(kinds), analysis, memo

    def collect(self) -> list[Evidence]:
        return [_collect(kind, self.analysis, self.memo) for kind in self.kinds]


class _Tables:
    """:attr:`Finding.evidence`: the tables, collected when first read. A report shows the
    tables of the findings it prints in full (``perfdoctor analyze``: the first cause and
    the advice; its JSON none), and HF 80 MB's eleven failures asked for ten kinds, ~19 ms of
    its ~30 ms of evidence never shown. Each table is what an evaluation collecting it at
    once would have given (the analysis it reads does not change; the memo hands each
    finding its own copy, whichever reads first)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.slot = f"_{name}"

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return ()  # the field's default (made a list by __set__)
        value = obj.__dict__[self.slot]
        if type(value) is _Later:
            value = obj.__dict__[self.slot] = value.collect()
        return value

    def __set__(self, obj: Any, value: Any) -> None:
        obj.__dict__[self.slot] = [] if value == () else value


@dataclass
class Finding:
    """The outcome of one rule on one analysis."""

    rule_id: str
    title: str
    status: str  # "fail" | "pass" | "not_evaluated" | "advisory"
    severity: str
    citation: str
    metric: str | None = None  # the key compared against the threshold
    values: dict[str, Metric] = field(default_factory=dict)
    comparator: str | None = None
    threshold: float | None = None
    threshold_origin: str = ""
    evidence: list[Evidence] = _Tables()  # type: ignore[assignment]  # collected on first read
    remediation: Remediation | None = None
    estimate: Estimate | None = None
    estimate_kind: str | None = None
    estimate_reason: Unavailable | None = None  # a failure without an estimate: why it cannot give one
    projected: dict[str, float] = field(default_factory=dict)
    # why it is not evaluated (one reason), or what changed its metric or severity (rules.reasons;
    # worded by perfdoctor.reports.common.finding_reason)
    reasons: list[Reason] = field(default_factory=list)
    context: list[str] = field(default_factory=list)  # conditions that selected a variant
    overlaps: list[str] = field(default_factory=list)  # findings whose estimate counts the same time
    rank: int | None = None
    cites: tuple[Cite, ...] = ()  # the citation as data, original words included (findings.json)

    @property
    def evidence_kinds(self) -> tuple[str, ...]:
        """The kinds of :attr:`evidence`, in order, without collecting tables not read yet."""
        pending = self.__dict__["_evidence"]
        return pending.kinds if type(pending) is _Later else tuple(e.kind for e in pending)

    @property
    def recovered_ms(self) -> float | None:
        return None if self.estimate is None else self.estimate.ms_per_step

    @property
    def value(self) -> float | None:
        m = self.values.get(self.metric or "")
        return None if m is None else m.value


def _not_evaluated(rule: Rule, values: dict[str, Metric]) -> Missing:
    m = values.get(rule.metrics[0])
    return Missing(rule.metrics, m.reason if m is not None and m.reason else None, rule.collect)


def _projection(analysis: Analysis, recovered_ms: float | None) -> dict[str, float]:
    """Steps/s (and tokens/s) if ``recovered_ms`` came off every step.

    The step period is 1 / steps_per_s (the completion rate), or the median latency.
    """
    if not recovered_ms or recovered_ms <= 0:
        return {}
    sps = analysis.value("steps_per_s")
    period = 1000.0 / sps if sps else analysis.value("step_latency_ms_p50")
    if not period or recovered_ms >= period:
        return {}
    out = {"step_ms": period - recovered_ms, "steps_per_s": 1000.0 / (period - recovered_ms)}
    tps = analysis.value("tokens_per_s")
    if tps and sps:
        out["tokens_per_s"] = out["steps_per_s"] * tps / sps
    return out


def _usable(m: Metric | None) -> bool:
    """A value a threshold can be compared with: present and finite. NaN compares false
    with everything, so a NaN that slipped through would turn "<=" into a failure and ">="
    into a pass; it is "not evaluated" instead (metrics.py never emits one: this is the
    engine's own guard, for signals and hand-built analyses)."""
    return m is not None and m.value is not None and bool(np.isfinite(m.value))


def not_applicable(rule: Rule, analysis: Analysis) -> OffWorkload | None:
    """Why ``rule`` does not apply to this trace's workload (None when it does).

    A rule declared for inference (decode, KV cache, request batching, a 10 ms p99 target)
    says nothing about a training step, and a gradient-bucketing rule nothing about a
    server: such a rule is not evaluated, with the workload's evidence as the reason. On an
    ``unknown`` workload (no trace read) such a rule is not judged either: a p99 above the
    decode target is no failure of a program that may be an offline batch job
    (:func:`perfdoctor.analysis.workload.applies`); the rules for any workload still run.
    """
    w = getattr(analysis, "workload", None)
    if not rule.workload or w is None:
        return None
    from perfdoctor.analysis import workload as workloads

    if any(workloads.applies(k, w) for k in rule.workload):
        return None
    return OffWorkload(rule.workload, w)


def evaluate_rule(rule: Rule, analysis: Analysis, values: dict[str, Metric], evidence: dict[str, Evidence] | None = None) -> Finding:
    """Evaluate one rule: pick its metric, compare, and for a failure collect evidence and estimate.

    ``evidence``: the tables already collected for other rules of the same evaluation, by
    kind (several rules show the same table: it is computed once and each finding gets its
    own copy)."""
    context = [name for name, (pred, _) in PREDICATES.items() if pred(values)]
    title, remediation, spec, severity = rule.title, rule.remediation, rule.estimate, rule.severity
    no_estimate = rule.no_estimate
    for v in rule.variants:
        if v.when in context:
            title = v.title or title
            remediation = v.remediation or remediation
            spec = v.estimate or spec
            severity = v.severity or severity
            if v.no_estimate:
                spec, no_estimate = None, v.no_estimate
    if remediation is not None:
        remediation = remediation.for_values(values)  # the steps whose cause the trace shows
    shown = {k: values[k] for k in rule.metrics + rule.show if _usable(values.get(k))}
    metric = next((k for k in rule.metrics if _usable(values.get(k))), None)
    finding = Finding(
        rule_id=rule.id,
        title=title,
        status="not_evaluated",
        severity=severity,
        citation=rule.citation,
        cites=rule.cites,
        metric=metric,
        values=shown,
        comparator=rule.comparator,
        threshold=rule.threshold,
        threshold_origin=rule.threshold_origin,
        remediation=remediation,
        context=context,
    )
    why_not = not_applicable(rule, analysis)
    if why_not is not None and not why_not.judged and metric is None:
        why_not = None  # nothing to judge anyway: say what is missing (below)
    if why_not is not None:
        finding.reasons = [why_not]
        finding.values = {}
        return finding
    if metric is None:
        finding.reasons = [_not_evaluated(rule, values)]
        return finding
    if rule.advisory:
        finding.status = "advisory"
    else:
        passed = COMPARATORS[rule.comparator](values[metric].value, rule.threshold)
        finding.status = "pass" if passed else "fail"
    if metric != rule.metrics[0]:
        # A fallback metric is used: say which, and what the preferred one needed.
        preferred = values.get(rule.metrics[0])
        finding.reasons = [Fallback(metric, rule.metrics[0], None if preferred is None else preferred.reason)]
    if finding.status in ("fail", "advisory"):
        finding.evidence = _Later(rule.evidence, analysis, evidence)  # type: ignore[assignment]
    if finding.status == "fail" and spec is not None:
        fn = ESTIMATES[spec.kind][0]
        finding.estimate = fn(analysis, rule.threshold, dict(spec.params), values)
        finding.estimate_kind = spec.kind
        finding.projected = _projection(analysis, finding.estimate.ms_per_step)
        _stake_severity(analysis, finding)
        if isinstance(finding.estimate.how, Unavailable):
            finding.estimate_reason = finding.estimate.how  # the estimator says what it needed
    elif finding.status == "fail":
        # A failing rule always says what fixing it wins back, or why it cannot (issue 20, item 11).
        finding.estimate_reason = Unavailable(Need.FORMULA, no_estimate or None)
    return finding


def _collect(kind: str, analysis: Analysis, memo: dict[str, Evidence] | None) -> Evidence:
    """The evidence table ``kind`` of ``analysis``, from ``memo`` when another rule of this
    evaluation already collected it (a copy: findings never share a table)."""
    if memo is None:
        return EVIDENCE[kind](analysis)
    if kind not in memo:
        memo[kind] = EVIDENCE[kind](analysis)
    ev = memo[kind]
    return replace(ev, rows=[list(r) for r in ev.rows], columns=list(ev.columns))


def rank(findings: list[Finding]) -> list[Finding]:
    """Failures by estimated time recovered per step (desc), then severity; then advisories, passes, not evaluated."""
    order = {f.rule_id: i for i, f in enumerate(findings)}

    def key(f: Finding) -> tuple:
        ms = f.recovered_ms
        return (
            STATUS_ORDER.index(f.status),
            -(ms if ms is not None else -1.0),
            -SEVERITY_RANK[f.severity],
            order[f.rule_id],
        )

    ranked = sorted(findings, key=key)
    fails = [f for f in ranked if f.status == "fail"]
    for i, f in enumerate(fails, start=1):
        f.rank = i
    # Findings whose estimates are the same formula with the same result count the same
    # time: point each to the others so no one adds them up.
    for f in fails:
        if f.estimate is None or f.estimate.ms_per_step is None:
            continue
        f.overlaps = [
            g.rule_id
            for g in fails
            if g is not f and g.estimate_kind == f.estimate_kind and g.estimate is not None
            and g.estimate.ms_per_step == f.estimate.ms_per_step
        ]
    _fill_top_finding(fails)
    return ranked


TOP_FINDING = "{top_finding}"
# A step naming the best-ranked other failure, where none fails: no check names what sets
# the step time, so the step's own breakdown is where to look.
NO_TOP_FINDING = ("No other check fails to name what sets the step time: cut the largest part of where the step went "
                  "(the breakdown above); the tail moves with the median.")


def _fill_top_finding(fails: list[Finding]) -> None:
    """Replace ``{top_finding}`` in remediation steps by the best-ranked *other* failure; a
    step that names it is :data:`NO_TOP_FINDING` where no other check fails.

    Some fixes are "whatever ranks first" (a p99 above target is fixed by fixing what sets
    the step time), which only the ranking knows.
    """
    for f in fails:
        if f.remediation is None or not any(TOP_FINDING in step for step in f.remediation.steps):
            continue
        other = next((g for g in fails if g is not f), None)
        if other is None:
            steps = tuple(NO_TOP_FINDING if TOP_FINDING in step else step for step in f.remediation.steps)
        else:
            steps = tuple(step.replace(TOP_FINDING, f"{other.rule_id} ({other.title})") for step in f.remediation.steps)
        f.remediation = replace(f.remediation, steps=steps)


def evaluate(rules: RuleSet, analysis: Analysis, cross_rank: CrossRank | None = None) -> list[Finding]:
    """Evaluate every rule against ``analysis`` and return the findings, ranked.
    ``cross_rank``: the view of the job ``analysis`` is one rank of, whose metrics the rules
    read beside the rank's own (:func:`perfdoctor.rules.signals.inputs`).

    A failed rule with ``suppresses`` (the capture-trace rule) makes the rules it names not
    applicable: on a capture, timing rules describe the capture, not the workload.
    """
    values = {**inputs(analysis, cross_rank), **workload_values(analysis), **light_values(analysis)}
    evidence: dict[str, Evidence] = {}
    findings = [evaluate_rule(rule, analysis, values, evidence) for rule in rules]
    suppressed: dict[str, Suppressed] = {}
    for f in findings:
        if f.status == "fail":
            for rid in rules.rules[f.rule_id].suppresses:
                suppressed.setdefault(rid, Suppressed(f.rule_id, f.title))
    for i, f in enumerate(findings):
        if f.rule_id in suppressed and f.status != "not_evaluated":
            findings[i] = Finding(
                rule_id=f.rule_id, title=f.title, status="not_evaluated", severity=f.severity, citation=f.citation, cites=f.cites,
                metric=f.metric, comparator=f.comparator, threshold=f.threshold, threshold_origin=f.threshold_origin,
                remediation=f.remediation, context=f.context, reasons=[suppressed[f.rule_id]],
            )
    return rank(findings)


def verdict(findings: Sequence[Finding]) -> dict[str, Any]:
    """The outcome: "fail" when a rule above info severity fails, "pass" when some pass and
    none fails but at info, and "not_evaluated" when no rule could be checked (a CPU-only
    trace is not a healthy one). ``counts["note"]``: the failures at info, counted in
    "fail" too; a note alone is not a failing run (p99-latency on an offline pipeline
    whose task is unknown, or launch-rate's decode ideal, read FAIL before: an HF
    pipeline's every other check passed)."""
    counts = {s: sum(1 for f in findings if f.status == s) for s in STATUS_ORDER}
    notes = [f for f in findings if f.status == "fail" and f.severity == "info"]
    counts["note"] = len(notes)
    top = next((f for f in findings if f.status == "fail" and f.severity != "info"), None)
    status = "fail" if top is not None else "pass" if counts["pass"] or notes else "not_evaluated"
    return {
        "status": status,
        "counts": counts,
        "top": None if top is None else top.rule_id,
        "notes": [f.rule_id for f in notes],
    }
