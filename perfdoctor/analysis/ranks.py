"""Several ranks of one job: each rank's analysis, and the cross-rank view.

Input: a multi-rank run bundle (:mod:`perfdoctor.record.launch`: ``raw/rank<k>/``), or a folder
of per-rank Kineto traces as ``torch.profiler.tensorboard_trace_handler`` writes them
(``<worker>.<ts>.pt.trace.json[.gz]``; the rank is the trace's ``distributedInfo.rank``),
where one process's files (one worker, one rank, disjoint in time: the windows of a
``schedule`` with ``repeat``) are first joined into one timeline (:func:`load_profiles`).
Every rank is analysed on its own (:func:`perfdoctor.analysis.metrics.analyze`, on the step rank 0
uses). Then, step ``i`` of every rank being the same step of the job (the same traced
window):

Per rank and step (:func:`rank_steps`)
    ``step_ms``       the traced step (its GPU window with GPU work, else its host range)
    ``comm_ms``       union of the step's collectives: communication kernels
                      (:mod:`perfdoctor.analysis.comms`) when the trace has any, else the host-side
                      collective ranges the process-group backend records (``gloo:all_reduce``
                      from enqueue to completion, on the backend's threads)
    ``exposed_ms``    communication no compute hides: :mod:`perfdoctor.analysis.comms`'s
                      ``exposed_ns`` for kernels; for host collectives the whole ``comm_ms``
                      (a host trace has no per-op compute intervals to overlap them with:
                      an upper bound, exact for a blocking collective)
    ``busy_ms``       the time the rank worked rather than waited: the union of the step's
                      non-communication kernels (a rank that waits in a collective spends
                      that time in the communication kernel, or idle before it, so the
                      step's span less its exposed communication still holds idle time:
                      param_dlrm_8ranks read "rank 5 works 1.79 ms longer" from that,
                      while its kernels ran 1.04 ms of its step). For host collectives (no
                      kernel at all) ``step_ms − exposed_ms``

The straggler (:func:`find_straggler`)
    In a synchronous job every rank's step takes as long as the slowest rank's: the others
    wait for it inside a collective. So the straggler is not the rank with the longest
    step but the one that **works** longest: the highest median ``busy_ms``. Its delay is
    its median ``busy_ms`` minus the median of the other ranks' median ``busy_ms``; the
    collective that waits for it is the one (by position in the step, ``#k`` of
    ``collectives`` per step) whose duration on the other ranks exceeds the straggler's by
    the most (median over steps).

Cross-rank metrics (:meth:`CrossRank.metrics`): ``straggler_delay_ms``,
``straggler_delay_ratio`` (the delay over the job's median step) and
``rank_step_spread_ratio`` ((max − min) / median of the ranks' step p50). They are the job's,
not one rank's: the door (:func:`perfdoctor.pipeline.diagnose`) hands the view to the rules of
every analysed rank as an input beside its own metrics (:func:`perfdoctor.rules.signals.inputs`);
no rank's Analysis holds them.

Many ranks (a folder of more than :data:`FULL_VIEW_RANKS` traces, :func:`grouped_view`):
ranks whose traces are the same but for their times, every start and end in the same
order, share one full analysis; the others get the per-step figures above, their step p50
and their collectives from their own times with its steps, ownership and kernel classes
(:func:`group_steps`): the same integer sums, so the same numbers. The rules, and
``per_rank``/``findings`` in the JSON, then cover the ranks analysed in full: the first,
one per group, the straggler, the report rank, the fastest and the slowest.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Hashable, Iterable, NamedTuple

import msgspec
import numpy as np
import pandas as pd

from perfdoctor.analysis import comms
from perfdoctor.collectors.kineto_events import Header, start_end_ns, time_origin, timed_mask
from perfdoctor.collectors.kineto_tables import distributed
from perfdoctor.errors import UsageError
from perfdoctor.io import read_maybe_gzip
from perfdoctor.analysis.metrics import Analysis, Metric, analyze
from perfdoctor.analysis.steps import AUTO_STEP
from perfdoctor.analysis.timeline import union_per_group
from perfdoctor.bundle.layout import MANIFEST
from perfdoctor.bundle.protocol import Collector, Manifest, Rank
from perfdoctor.text import value
from perfdoctor.names import families
from perfdoctor.names.codes import equals
from perfdoctor.profile import Profile
from perfdoctor.text import percent

# Ranges c10d's backends record around a collective: "gloo:all_reduce", "nccl:all_reduce",
# "mpi:broadcast", "ucc:...", "xccl:..." (ProcessGroup's profiling titles).
HOST_COLLECTIVE = re.compile(r"^(gloo|nccl|mpi|ucc|xccl):")
TRACE_GLOB = ("*.pt.trace.json", "*.pt.trace.json.gz")
WINDOW_FILE = re.compile(r"^(?P<worker>.+)\.\d+\.pt\.trace\.json(?:\.gz)?$")  # <worker>.<time>.pt.trace.json[.gz]
STEP_COLUMNS = ("step_ms", "comm_ms", "exposed_ms", "busy_ms", "overlap", "collectives", "mean_collective_us")
CROSS_RANK_METRICS = {
    "straggler_delay_ms": "ms",
    "straggler_delay_ratio": "ratio",
    "rank_step_spread_ratio": "ratio",
}
COMM_KERNELS = "communication kernels (GPU)"
# Up to this many ranks every rank gets the full analysis and its findings (~0.07 s of CPU
# each); a folder of more shares one analysis among the ranks of one structure (grouped_view).
FULL_VIEW_RANKS = 64


@dataclass
class RankRun:
    """One rank: where it came from and its analysis."""

    rank: int
    source: str
    analysis: Analysis
    device: str | None = None
    # the rank's metrics as it alone measures them, before the view filled its communication
    # ones from host collectives (fill_host_comm): what a run's metrics.json holds
    own_metrics: dict[str, Metric] | None = field(default=None, repr=False, compare=False)

    @property
    def profile(self) -> Profile:
        return self.analysis.profile

    def own_json(self) -> dict[str, Any]:
        """The rank's analysis document with its own metrics (:attr:`own_metrics`), as the
        door's one-rank analysis writes it (``perfdoctor run``'s metrics.json of a multi-rank
        job, from the same load as ranks.json). The other parts do not read the filled
        metrics (the attribution reads only the step latency), so they are the same."""
        doc = self.analysis.to_json()
        own = self.own_metrics if self.own_metrics is not None else self.analysis.metrics
        return {**doc, "metrics": {k: m.to_json() for k, m in own.items()}}


@dataclass
class Collective:
    """Per position in the step: the collective that absorbs the wait for the straggler."""

    index: int  # 0-based position among the step's collectives
    name: str
    per_step: int  # collectives per step
    wait_ms: float  # median over steps and waiting ranks of (their duration − the straggler's)
    waiting_ranks: list[int]


@dataclass
class Straggler:
    rank: int
    delay_ms: float
    delay_ratio: float
    step_share: float  # share of steps in which this rank was the busiest
    busy_ms: float
    others_busy_ms: float
    collective: Collective | None = None


@dataclass
class CrossRank:
    """Every rank's per-step communication, the straggler, and the full analyses: of every
    rank, or with many ranks of one structure only of those :func:`grouped_view` picks
    (``runs``; the per-step statistics cover every rank either way)."""

    runs: list[RankRun]
    world_size: int | None
    source: str  # "bundle" | "trace folder"
    per_step: dict[int, pd.DataFrame]  # every rank, by rank
    comm_source: dict[int, str]
    step_p50: dict[int, float | None]  # every rank's step_latency_ms_p50
    devices: dict[int, str | None]
    straggler: Straggler | None
    straggler_reason: str | None = None
    warnings: list[str] = field(default_factory=list)
    _table: pd.DataFrame | None = field(default=None, repr=False, compare=False)
    _metrics: dict[str, Metric] | None = field(default=None, repr=False, compare=False)

    def table(self) -> pd.DataFrame:
        """One row per rank: step time (light pass and traced), communication, busy time
        (built once: the report, the JSON and the report rank's choice all read it)."""
        if self._table is None:
            self._table = self._build_table()
        return self._table

    def _build_table(self) -> pd.DataFrame:
        rows = []
        for rank, per in self.per_step.items():
            # numpy columns, the steps with collectives by a mask: a pandas selection per rank
            # cost ~0.5 ms, 5 s at 10,000 ranks
            col = {c: per[c].to_numpy(dtype=float) for c in STEP_COLUMNS}
            comm = col["collectives"] > 0
            rows.append({
                "rank": rank,
                "device": self.devices[rank],
                "step_ms_p50": self.step_p50[rank],
                "traced_step_ms_p50": _median(col["step_ms"]),
                "busy_ms_p50": _median(col["busy_ms"]),
                "comm_ms_p50": _median(col["comm_ms"]),
                "exposed_comm_ms_p50": _median(col["exposed_ms"]),
                "comm_overlap": _median(col["overlap"][comm]) if comm.any() else None,
                "collectives_per_step": _median(col["collectives"]),
                "mean_collective_us": _median(col["mean_collective_us"][comm]) if comm.any() else None,
                "comm_source": self.comm_source[rank],
            })
        return pd.DataFrame(rows)

    def metrics(self) -> dict[str, Metric]:
        """The cross-rank metrics (see the module docstring); absent with a reason when
        there is no straggler to measure. Built once: they read every rank, and the rules of
        every analysed rank read them (:func:`perfdoctor.rules.signals.inputs`)."""
        if self._metrics is None:
            self._metrics = self._build_metrics()
        return self._metrics

    def _build_metrics(self) -> dict[str, Metric]:
        src = f"cross-rank: {len(self.per_step)} ranks' traced steps"
        out: dict[str, Metric] = {}
        s = self.straggler
        for key, unit in CROSS_RANK_METRICS.items():
            out[key] = Metric(None, unit, src, reason=self.straggler_reason or "no straggler measured")
        if s is not None:
            note = f"rank {s.rank} is the straggler in {percent(s.step_share)} of the steps"
            out["straggler_delay_ms"] = Metric(round(s.delay_ms, 6), "ms", src, note=note)
            out["straggler_delay_ratio"] = Metric(round(s.delay_ratio, 6), "ratio", src, note=note)
        p50 = [v for v in self.step_p50.values() if v is not None]
        if len(p50) >= 2 and np.median(p50) > 0:
            out["rank_step_spread_ratio"] = Metric(
                round(float((max(p50) - min(p50)) / np.median(p50)), 6), "ratio", "step_latency_ms_p50 of every rank"
            )
        return out

    def to_json(self) -> dict[str, Any]:
        cross = {k: m.to_json() for k, m in self.metrics().items()}
        s = self.straggler
        straggler = None
        if s is not None:
            straggler = {k: v for k, v in s.__dict__.items() if k != "collective"}
            straggler["collective"] = None if s.collective is None else dict(s.collective.__dict__)
        return {
            "schema": "perfdoctor.ranks/1",
            "world_size": self.world_size,
            "source": self.source,
            "ranks": _records(self.table()),
            "straggler": straggler,
            "straggler_reason": self.straggler_reason,
            "metrics": cross,
            # the fully analysed ranks, each with the cross-rank metrics its rules read beside its own
            "per_rank": {str(r.rank): _with_metrics(r.analysis.to_json(), cross) for r in self.runs},
            "warnings": self.warnings,
        }


def _with_metrics(doc: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """An analysis document with ``extra`` after its own metrics."""
    return {**doc, "metrics": {**doc["metrics"], **extra}}


def _median(values: Any) -> float | None:
    """The median of the numbers among ``values`` (None and NaN left out), in numpy: a
    pandas Series per call cost ~1 ms, six per rank."""
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    return float(np.median(v)) if len(v) else None


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    return [{k: (None if isinstance(v, float) and not np.isfinite(v) else v) for k, v in row.items()} for row in df.to_dict("records")]


# --- reading the ranks -------------------------------------------------------------------------


def trace_files(folder: Path) -> list[Path]:
    """The per-rank traces ``tensorboard_trace_handler`` wrote into ``folder``."""
    return sorted({p for pattern in TRACE_GLOB for p in folder.glob(pattern) if p.is_file()})


def load_profiles(path: Path, manifest: Manifest | None = None) -> tuple[dict[int, Profile], int | None, str, list[str]]:
    """(profile per rank, world size, source, warnings) of a multi-rank bundle or trace folder
    (a folder's rank: one process, its windows joined, :func:`timelines`; a folder of one
    process gives one). ``manifest``: the bundle's, already read and checked
    (:func:`perfdoctor.pipeline.open`)."""
    from perfdoctor.collectors import torch_profiler

    warnings: list[str] = []
    if manifest is not None or (path / MANIFEST).exists():
        from perfdoctor.collectors.bundle import load_bundle
        from perfdoctor.bundle.manifest import check_bundle

        manifest = manifest if manifest is not None else check_bundle(path)
        profiles = {}
        for key in sorted(manifest.ranks or {}, key=int):
            profile = load_bundle(path, rank=int(key), manifest=manifest)  # checked once: not read again per rank
            if profile.origin.bundle.activities_from is None:
                warnings.append(f"rank {key}: no trace ({profile.origin.bundle.reason}): left out of the view")
            else:
                profiles[int(key)] = profile
        if not profiles:
            torch = Collector.from_json((manifest.collectors or {}).get("torch") or {}).status
            raise UsageError(f"{path}: no rank has a trace to analyse (torch collector: {torch}; exit code {manifest.exit_code})")
        return profiles, manifest.world_size, "bundle", warnings
    files = trace_files(path)
    loaded = [torch_profiler.load(f) for f in files]
    keys = [(worker_of(f.name), p.origin.distributed.get("rank")) for f, p in zip(files, loaded)]
    runs = timelines(keys, [absolute_extent(p) for p in loaded])
    profiles = [loaded[r[0]] if len(r) == 1 else join_windows([loaded[i] for i in r]) for r in runs]
    ranks, world, warnings = number_ranks(path, [(files[r[0]].name, p.origin.distributed) for r, p in zip(runs, profiles)])
    return dict(sorted(zip(ranks, profiles))), world, "trace folder", warnings


def many_ranks(files: list[Path]) -> bool:
    """A folder :func:`grouped_view` reads: more than :data:`FULL_VIEW_RANKS` traces, each
    the only one of its worker (the windows of one process are joined into one timeline by
    :func:`load_profiles`, which reads every file)."""
    return len(files) > FULL_VIEW_RANKS and len({worker_of(f.name) for f in files}) == len(files)


def worker_of(name: str) -> str:
    """The worker that wrote a trace file: ``tensorboard_trace_handler`` names each file
    ``<worker>.<time>.pt.trace.json[.gz]`` (the worker ``<host>_<pid>`` unless the user named
    it); any other name is its own worker."""
    found = WINDOW_FILE.match(name)
    return found["worker"] if found else name


def timelines(keys: list[Hashable], extents: list[tuple[int, int]]) -> list[list[int]]:
    """Which files of a folder are one process's timeline (by position): the files of one
    key (their worker and ``distributedInfo`` rank) are its successive profiler windows (a
    ``schedule`` with ``repeat``) when, in time order (``extents``: each file's first and
    last time on the process's clock), each ends before the next begins; files of one key
    that overlap in time are different processes, each its own. Timelines in the order of
    their first file, each in time order."""
    groups: dict[Hashable, list[int]] = {}
    for i, key in enumerate(keys):
        groups.setdefault(key, []).append(i)
    out: list[list[int]] = []
    for members in groups.values():
        order = sorted(members, key=lambda i: extents[i])
        if all(extents[a][1] <= extents[b][0] for a, b in zip(order, order[1:])):
            out.append(order)
        else:
            out.extend([i] for i in members)
    return sorted(out, key=min)


TIMED = {"activities": ("start_ns", "end_ns"), "calls": ("start_ns", "end_ns"), "ranges": ("start_ns", "end_ns"),
         "ops": ("start_ns", "end_ns"), "samples": ("time_ns",)}  # the Profile's tables with times, and their time columns
CORRELATED = ("activities", "calls", "counters")  # the tables a correlation id links


def extent(profile: Profile) -> tuple[int, int]:
    """The first and the last time of a Profile (ns, its own origin); (0, 0) with none."""
    lo = [int(getattr(profile, t)[c].min()) for t, cols in TIMED.items() for c in cols[:1] if len(getattr(profile, t))]
    hi = [int(getattr(profile, t)[c].max()) for t, cols in TIMED.items() for c in cols[-1:] if len(getattr(profile, t))]
    return (min(lo), max(hi)) if lo else (0, 0)


def absolute_extent(profile: Profile) -> tuple[int, int]:
    """:func:`extent` on the trace's own clock (each file's times are taken from its first
    event's: :attr:`perfdoctor.profile.Origin.time_origin_ns`), so one process's files compare."""
    at = profile.origin.time_origin_ns or 0
    lo, hi = extent(profile)
    return lo + at, hi + at


def join_windows(windows: list[Profile]) -> Profile:
    """One process's profiler windows (in time order, disjoint) as one timeline, laid end to
    end: each window's times shifted so that it begins where the previous one's last event
    ends. The time between windows was not traced (the schedule's wait and warmup
    iterations): kept, it would be a span with no step, no GPU work and no host event, read
    as GPU idle time (gpu_idle_ratio's span S) and a gap between steps; left out, every step,
    gap and span is one the trace recorded. Correlation ids are offset per window, so a
    launch links only to its own window's GPU work."""
    first = windows[0]
    parts: dict[str, list[pd.DataFrame]] = {t: [] for t in (*TIMED, "counters")}
    at, corr = None, 0
    for w in windows:
        lo, hi = extent(w)
        shift = 0 if at is None else at - lo
        at = hi + shift
        top = 0
        for t in parts:
            df = getattr(w, t)
            moved = {c: df[c] + shift for c in TIMED.get(t, ())}
            if t in CORRELATED:
                c = df["correlation"]
                moved["correlation"] = c.where(c < 0, c + corr)
                top = max(top, int(c.max()) + 1 if len(c) else 0)
            parts[t].append(df.assign(**moved))
        corr += top
    origins = [w.origin for w in windows]
    spans = [absolute_extent(w) for w in windows]
    untraced = sum(b[0] - a[1] for a, b in zip(spans, spans[1:]))
    names = [Path(o.path).name if o.path else "?" for o in origins]
    note = (f"{len(windows)} profiler windows of one process ({', '.join(names)}) read as one timeline, laid end to end: "
            f"the {value(untraced / 1e9, 's')} between them was not traced")
    origin = replace(
        first.origin,
        declared={k: v for o in origins for k, v in (o.declared or {}).items()} if any(o.declared is not None for o in origins) else None,
        thread_names=tuple(dict.fromkeys(n for o in origins for n in o.thread_names)),
        op_counts=_summed(o.op_counts for o in origins),
        unread_categories=_summed(o.unread_categories for o in origins),
        unread_device_work=next((o.unread_device_work for o in origins if o.unread_device_work), None),
        warnings=tuple(w for o in origins for w in o.warnings) + (note,),
    )
    tables = {t: pd.concat(p, ignore_index=True) for t, p in parts.items()}
    return Profile(**tables, device=next((w.device for w in windows if w.device), first.device), origin=origin)


def _summed(counts: Iterable[dict[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in counts:
        for k, v in c.items():
            out[k] = out.get(k, 0) + v
    return out


def number_ranks(path: Path, found: list[tuple[str, dict[str, Any]]]) -> tuple[list[int], int | None, list[str]]:
    """The rank of each trace of a folder, given (file name, its ``distributedInfo`` as the
    loader keeps it) in file order: its own rank, else (none, or one already taken) the
    next free one by file order; and the world size, which must be one."""
    ranks, taken, sizes, warnings = [], set(), set(), []
    last = -1
    for i, (name, info) in enumerate(found):
        rank = info.get("rank")
        if not isinstance(rank, int) or rank in taken:
            rank = i if i not in taken else last + 1
            warnings.append(f"{name}: no distributedInfo rank (or a repeated one): taken as rank {rank} by file order")
        if isinstance(info.get("world_size"), int):
            sizes.add(info["world_size"])
        taken.add(rank)
        ranks.append(rank)
        last = max(last, rank)
    if len(sizes) > 1:
        raise UsageError(f"{path}: the traces come from jobs of different world sizes ({sorted(sizes)}): not one job")
    world = sizes.pop() if sizes else None
    if world is not None and world != len(ranks):
        warnings.append(f"{len(ranks)} traces for a world size of {world}: the view covers the ranks present")
    return ranks, world, warnings


def nsys_processes(path: Path) -> tuple[dict[int, Profile], int | None, str, list[str]]:
    """:func:`load_profiles` of an Nsight Systems export: one timeline per process with GPU
    work (:func:`perfdoctor.collectors.nsys.load_processes`), numbered in process-id order."""
    from perfdoctor.collectors import nsys

    return nsys_ranks(nsys.load_processes(path))


def nsys_ranks(procs: dict[int, Profile]) -> tuple[dict[int, Profile], int | None, str, list[str]]:
    """:func:`nsys_processes` of processes already read (by OS process id)."""
    profiles = {i: procs[pid] for i, pid in enumerate(sorted(procs))}
    note = ", ".join(f"rank {i} = pid {pid}" for i, pid in enumerate(sorted(procs)))
    return profiles, None, "nsys export, one timeline per process", [f"ranks by process id: {note}"]


def _device(profile: Profile) -> str | None:
    rank = Rank.from_json((profile.origin.bundle.rank if profile.origin.bundle is not None else None) or {})
    return rank.device or profile.device.get("name")  # a bundle's rank, else the trace's GPU


def cross_rank(
    path: str | Path, step: str | None = None, tokens_per_step: float | None = None, workload: str | None = None,
    loaded: tuple[dict[int, Profile], int | None, str, list[str]] | None = None,
) -> CrossRank:
    """Load and analyse every rank of ``path`` (or take ``loaded``, as :func:`load_profiles`
    returns it), then measure across them. A folder of more than :data:`FULL_VIEW_RANKS`
    traces: :func:`grouped_view`."""
    path = Path(path)
    if loaded is None and not (path / MANIFEST).exists() and many_ranks(files := trace_files(path)):
        return grouped_view(path, files, step, tokens_per_step, workload)
    profiles, world, source, warnings = loaded if loaded is not None else load_profiles(path)
    if not profiles:
        raise UsageError(f"{path}: no rank has a trace")
    runs: list[RankRun] = []
    for rank, profile in profiles.items():
        # every rank on the step the first one found, so step i means the same on all
        # (automatic steps are found per rank: they name no range the others could look for)
        first = runs[0].analysis.steps.name if runs and runs[0].analysis.steps.name != AUTO_STEP else None
        use = step or first or (profile.origin.bundle.step if profile.origin.bundle is not None else None)
        runs.append(RankRun(rank, profile.origin.path or str(path), analyze(profile, step=use, tokens_per_step=tokens_per_step,
                                                                            workload=workload), _device(profile)))
    return measured(runs, {run.rank: full_stats(run) for run in runs}, world, source, warnings)


class RankStats(NamedTuple):
    """What the cross-rank view reads of one rank."""

    per_step: pd.DataFrame  # STEP_COLUMNS (rank_steps)
    comm_source: str
    collectives: list[list[tuple[str, float]]]  # collective_table
    step_p50: float | None  # step_latency_ms_p50
    device: str | None


def full_stats(run: RankRun) -> RankStats:
    """:class:`RankStats` of a fully analysed rank (with host collectives, its communication
    metrics filled from them: :func:`fill_host_comm`)."""
    per, source = rank_steps(run.analysis)
    run.own_metrics = dict(run.analysis.metrics)  # fill_host_comm replaces entries, never changes a Metric
    fill_host_comm(run.analysis, per, source)
    return RankStats(per, source, collective_table(run.analysis), run.analysis.metrics["step_latency_ms_p50"].value, run.device)


def measured(runs: list[RankRun], stats: dict[int, RankStats], world: int | None, source: str, warnings: list[str]) -> CrossRank:
    """The view of every rank's statistics (``stats``, by rank) and the straggler among them."""
    straggler, why = find_straggler({r: s.per_step for r, s in stats.items()}, {r: s.collectives for r, s in stats.items()})
    return CrossRank(runs, world, source, {r: s.per_step for r, s in stats.items()}, {r: s.comm_source for r, s in stats.items()},
                     {r: s.step_p50 for r, s in stats.items()}, {r: s.device for r, s in stats.items()}, straggler, why, warnings)


def report_rank(view: CrossRank) -> int:
    """The rank whose findings the report shows: the most exposed communication (where
    communication problems and the wait for a straggler show), else the first."""
    exposed = {r: v for r, v in view.table().set_index("rank")["exposed_comm_ms_p50"].items() if v is not None and np.isfinite(v)}
    return int(max(exposed, key=lambda r: exposed[r])) if exposed else view.runs[0].rank


# --- many ranks of one structure: one full analysis per group ----------------------------------


def read_times(file: Path) -> tuple[dict[str, Any] | None, tuple[bytes, bytes] | None, np.ndarray | None]:
    """One rank's trace read here, without the loader's tables: (its ``distributedInfo`` as
    the loader keeps it, its group key, its distinct endpoint times in ns, sorted, as the
    loader converts them). The key is (the trace less the times of its complete events,
    the order of all their endpoints, ties included): ranks of one key differ only in
    times that keep every containment, overlap and order, so each union, exposed share and
    critical path of one is the same sum of endpoint differences in another. Key and times
    are None for a trace not read here (another shape, an event without usable times): it
    gets the full analysis; the info too when the document does not decode here (the
    loader, which skips damaged events, tells its rank)."""
    raw = read_maybe_gzip(file)
    try:
        doc = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return None, None, None
    if not isinstance(doc, dict):  # the legacy array form: no distributedInfo
        return {}, None, None
    info = distributed(doc.get("distributedInfo"))
    events = doc.get("traceEvents")
    if not isinstance(events, list):
        return info, None, None
    complete = [e for e in events if isinstance(e, dict) and e.get("ph") == "X"]
    ts, dur = [e.get("ts") for e in complete], [e.get("dur") for e in complete]
    if not all(type(v) in (int, float) for v in ts + dur):  # a string or missing time: the loader's own reading
        return info, None, None
    at, length = np.array(ts, dtype=np.float64) - time_origin(raw), np.array(dur, dtype=np.float64)
    if not timed_mask(at, length).all():
        return info, None, None
    ends, order = np.unique(np.concatenate(start_end_ns(at, length)), return_inverse=True)
    shape = [{k: v for k, v in e.items() if k not in ("ts", "dur")} if isinstance(e, dict) and e.get("ph") == "X" else e for e in events]
    # with the document's other keys the loader reads (the device, the CUDA versions), not its distributedInfo (the rank)
    header = [doc.get(k) for k in Header.__struct_fields__ if k != "distributedInfo"]
    return info, (msgspec.json.encode([shape, header]), order.astype(np.int64).tobytes()), ends


def grouped_view(path: Path, files: list[Path], step: str | None, tokens_per_step: float | None, workload: str | None) -> CrossRank:
    """:func:`cross_rank` of a folder of many traces, where ranks of one structure (one key
    of :func:`read_times`) share one full analysis: the group's representative is analysed
    and the others get its steps, ownership and kernel classes with their own times
    (:func:`group_steps`: exact, the same integer sums). Fully analysed, for the findings
    and ``per_rank``: the first rank, one per group (every rank of a group
    :func:`group_steps` does not apply to, or whose representative it does not reproduce),
    then the straggler, the report rank, the fastest and the slowest."""
    from perfdoctor.collectors import torch_profiler

    read = [read_times(f) for f in files]
    early = {f: torch_profiler.load(f) for f, (info, _, _) in zip(files, read) if info is None}  # their rank: the loader's reading
    infos = [early[f].origin.distributed if f in early else info for f, (info, _, _) in zip(files, read)]
    ranks, world, warnings = number_ranks(path, [(f.name, info) for f, info in zip(files, infos)])
    file_of, ends = dict(zip(ranks, files)), {r: t for r, (_, _, t) in zip(ranks, read)}
    runs: dict[int, RankRun] = {}
    stats: dict[int, RankStats] = {}

    def analysed(rank: int, use: str | None) -> RankRun:
        profile = early.pop(file_of[rank], None) or torch_profiler.load(file_of[rank])
        runs[rank] = RankRun(rank, profile.origin.path or str(file_of[rank]), analyze(profile, step=use, tokens_per_step=tokens_per_step,
                                                                                      workload=workload), _device(profile))
        return runs[rank]

    first = min(ranks)
    stats[first] = full_stats(analysed(first, step))
    found = runs[first].analysis.steps.name
    use = step or (found if found != AUTO_STEP else None)  # every rank on the step the first one found, as cross_rank
    groups: dict[Any, list[int]] = {}
    for rank, (_, key, _) in sorted(zip(ranks, read), key=lambda x: x[0]):
        groups.setdefault(rank if key is None else key, []).append(rank)
    for members in groups.values():
        rest = [r for r in members if r != first]
        if not rest:
            continue
        rep = stats[rest[0]] = full_stats(analysed(rest[0], use))
        shared = group_steps(runs[rest[0]].analysis, np.stack([ends[r] for r in rest])) if len(rest) > 1 else None
        if shared is not None and rep.comm_source == COMM_KERNELS and rep.per_step.equals(shared[0][0]) and rep.step_p50 == shared[1][0] \
                and rep.collectives == shared[2][0]:  # the representative reproduced: the others are the same sums
            for r, per, p50, coll in zip(rest[1:], shared[0][1:], shared[1][1:], shared[2][1:]):
                stats[r] = RankStats(per, COMM_KERNELS, coll, p50, rep.device)
        else:
            for r in rest[1:]:
                stats[r] = full_stats(analysed(r, use))
    view = measured([runs[r] for r in sorted(runs)], dict(sorted(stats.items())), world, "trace folder", warnings)
    p50 = {r: v for r, v in view.step_p50.items() if v is not None}
    singled = {report_rank(view)} | ({view.straggler.rank} if view.straggler is not None else set())
    singled |= {min(p50, key=p50.__getitem__), max(p50, key=p50.__getitem__)} if p50 else set()
    for r in sorted(singled - runs.keys()):
        analysed(r, use)  # its statistics are its group's: the same sums
    view.runs = [runs[r] for r in sorted(runs)]
    return view


def _positions(ends: np.ndarray, times: Any) -> np.ndarray | None:
    """Where each of ``times`` lies among a rank's distinct endpoint times ``ends``; None
    when one is no endpoint (the order key fixes endpoints only)."""
    t = np.asarray(times, dtype=np.int64)
    at = np.searchsorted(ends, t)
    return at if (at < len(ends)).all() and (ends[np.minimum(at, len(ends) - 1)] == t).all() else None


def group_steps(rep: Analysis, ends: np.ndarray) -> tuple[list[pd.DataFrame], list[float], list[list[list[tuple[str, float]]]]] | None:
    """:func:`rank_steps` (its communication-kernel case), the step p50 and
    :func:`collective_table` of every rank of a structure group, as lists by row of
    ``ends`` (one row per rank: its distinct endpoint times; row 0 the representative
    ``rep``): the representative's steps, activity ownership and kernel classes, each
    rank's times. Every number is the pipeline's: an integer sum of endpoint differences,
    then the same float operations. None where this does not hold or is not written for
    (automatic steps, found by comparing durations; a step without GPU work; host
    collectives; a time that is no endpoint): the group is then analysed rank by rank."""
    profile, table = rep.profile, rep.steps.table
    if rep.steps.name in (None, AUTO_STEP) or table.empty or table["gpu_start_ns"].isna().any() or not has_comm_kernels(profile):
        return None
    acts = profile.activities
    pos = [_positions(ends[0], v) for v in (acts["start_ns"], acts["end_ns"], table["host_start_ns"],
                                           table["gpu_start_ns"].astype("int64"), table["gpu_end_ns"].astype("int64"))]
    if any(p is None for p in pos):
        return None
    s, e, host, lo, hi = pos
    n = len(table)
    kc = comms.classes(profile).to_numpy()
    comm, comp = kc == "communication", kc == "compute"
    owner = rep.steps.activity_step.to_numpy()
    owned = (owner >= 0) & (owner < n)
    work = owned & equals(acts["kind"], "kernel") & ~comm  # kernel_busy_ms: the step's non-communication kernels

    def total(pieces: tuple[np.ndarray, np.ndarray]) -> np.ndarray:  # per rank
        return (ends[:, pieces[1]] - ends[:, pieces[0]]).sum(axis=1)

    def in_window(mask: np.ndarray) -> np.ndarray:  # ranks × steps: the union clipped to each step's GPU window (comms.step_metrics)
        return np.stack([total(comms.union_pieces(s[mask], e[mask], lo[i], hi[i])) for i in range(n)], axis=1)

    def owned_by(mask: np.ndarray) -> np.ndarray:  # ranks × steps: the union of what each step owns (union_per_group)
        return np.stack([total(comms.union_pieces(s[mask & (owner == i)], e[mask & (owner == i)])) for i in range(n)], axis=1)

    comm_ns, compute_ns, either_ns = in_window(comm), in_window(comp), in_window(comm | comp)
    overlap_ns = comm_ns + compute_ns - either_ns  # comms._metrics
    mine = comm & owned  # the collectives each step owns
    count = np.bincount(owner[mine], minlength=n)[:n]
    dur = ends[:, e] - ends[:, s]
    coll_ns = np.stack([dur[:, mine & (owner == i)].sum(axis=1) for i in range(n)], axis=1)
    # steady.critical_path_ns: gpu_end[k] − max(host_start[k], gpu_end[k−1])
    step_ms = (ends[:, hi] - ends[:, np.maximum(host, np.concatenate((host[:1], hi[:-1])))]).astype(np.float64) / 1e6
    with np.errstate(divide="ignore", invalid="ignore"):
        overlap = np.where(comm_ns > 0, overlap_ns / comm_ns, np.nan)
        mean_us = np.where(count > 0, coll_ns / count / 1e3, np.nan)
    comm_ms, exposed_ms, busy_ms = comm_ns / 1e6, (comm_ns - overlap_ns) / 1e6, owned_by(work) / 1e6
    frames = [pd.DataFrame({"step_ms": step_ms[r], "comm_ms": comm_ms[r], "exposed_ms": exposed_ms[r], "busy_ms": busy_ms[r],
                            "overlap": overlap[r], "collectives": count, "mean_collective_us": mean_us[r]}) for r in range(len(ends))]
    pick = np.flatnonzero(comm & (owner >= 0))
    pick = pick[np.argsort(s[pick], kind="stable")]  # collective_table: by start
    where, names = owner[pick].tolist(), [str(v) for v in acts["name"].to_numpy()[pick]]
    tables = []
    for row in ((ends[:, e[pick]] - ends[:, s[pick]]) / 1e6).tolist():
        steps: list[list[tuple[str, float]]] = [[] for _ in range(n)]
        for i, name, ms in zip(where, names, row):
            steps[i].append((name, ms))
        tables.append(steps)
    return frames, [float(np.percentile(row, 50)) for row in step_ms], tables


# --- per rank, per step -----------------------------------------------------------------------


def host_collectives(profile: Profile) -> pd.DataFrame:
    """The backend's host-side collective ranges (``gloo:all_reduce`` ...), by start."""
    r = profile.ranges
    return r[r["name"].str.match(HOST_COLLECTIVE, na=False)].sort_values("start_ns", kind="stable")


def has_comm_kernels(profile: Profile) -> bool:
    return bool((comms.classes(profile) == "communication").any()) if not profile.activities.empty else False


def rank_steps(analysis: Analysis) -> tuple[pd.DataFrame, str]:
    """:data:`STEP_COLUMNS` per traced step of one rank, and where communication came from."""
    profile, table = analysis.profile, analysis.steps.table
    if table.empty:
        return pd.DataFrame(columns=list(STEP_COLUMNS)), "no steps"
    if has_comm_kernels(profile):
        per = comms.step_metrics(profile, table, analysis.steps.activity_step)
        step_ms = analysis.timeline.critical_path_ms()
        out = pd.DataFrame({
            "step_ms": step_ms,
            "comm_ms": per["comm_ns"].to_numpy() / 1e6,
            "exposed_ms": per["exposed_ns"].to_numpy() / 1e6,
            "overlap": per["overlap"].to_numpy(),
            "collectives": per["collectives"].to_numpy(),
            "mean_collective_us": per["mean_collective_us"].to_numpy(),
        })
        out["busy_ms"] = kernel_busy_ms(analysis)[analysis.timeline.steps["gpu_start_ns"].notna().to_numpy()]
        source = COMM_KERNELS
    else:
        coll = host_collectives(profile)
        start, end = coll["start_ns"].to_numpy(np.int64), coll["end_ns"].to_numpy(np.int64)
        rows = []
        for lo, hi in zip(table["host_start_ns"].astype("int64"), table["host_end_ns"].astype("int64")):
            inside = (start >= lo) & (start < hi)
            comm_ns = comms.union_ns(start, end, int(lo), int(hi))
            n = int(inside.sum())
            rows.append({
                "step_ms": (hi - lo) / 1e6,
                "comm_ms": comm_ns / 1e6,
                "exposed_ms": comm_ns / 1e6,
                "overlap": np.nan,
                "collectives": n,
                "mean_collective_us": (end[inside] - start[inside]).mean() / 1e3 if n else np.nan,
            })
        out = pd.DataFrame(rows)
        # no kernel timeline (gloo on CPU): the step's span less its collectives
        out["busy_ms"] = kernel_busy_ms(analysis) if analysis.timeline.is_kernel.any() else out["step_ms"] - out["exposed_ms"]
        source = "host collective ranges (gloo:*/nccl:* of the process group)" if len(coll) else "none (no collectives in the trace)"
    return out[list(STEP_COLUMNS)], source


def kernel_busy_ms(analysis: Analysis) -> np.ndarray:
    """Per step of the table: the union of its non-communication kernels, in ms."""
    acts = analysis.timeline.activities
    work = analysis.timeline.is_kernel & (families.kernel_classes(acts["name"], acts["kind"]).to_numpy() != "communication")
    return union_per_group(acts["start_ns"].to_numpy(np.int64)[work], acts["end_ns"].to_numpy(np.int64)[work],
                           acts["step"].to_numpy(np.int64)[work], len(analysis.steps.table)) / 1e6


def collective_table(analysis: Analysis) -> list[list[tuple[str, float]]]:
    """Per traced step, its collectives in start order as (name, duration ms)."""
    profile, table = analysis.profile, analysis.steps.table
    steps: list[list[tuple[str, float]]] = [[] for _ in range(len(table))]
    if has_comm_kernels(profile):
        acts = profile.activities
        comm = (comms.classes(profile) == "communication").to_numpy()
        owner = analysis.steps.activity_step.to_numpy()
        pick = acts[comm & (owner >= 0)].assign(step=owner[comm & (owner >= 0)]).sort_values("start_ns", kind="stable")
        for s, name, a, b in zip(pick["step"], pick["name"], pick["start_ns"], pick["end_ns"]):
            steps[int(s)].append((str(name), (b - a) / 1e6))
        return steps
    coll = host_collectives(profile)
    bounds = list(zip(table["host_start_ns"].astype("int64"), table["host_end_ns"].astype("int64")))
    for name, a, b in zip(coll["name"], coll["start_ns"], coll["end_ns"]):
        for i, (lo, hi) in enumerate(bounds):
            if lo <= a < hi:
                steps[i].append((str(name), (b - a) / 1e6))
                break
    return steps


def fill_host_comm(analysis: Analysis, per: pd.DataFrame, source: str) -> None:
    """With host collectives only (gloo on CPU), the contract's communication metrics from
    them, in place of the GPU-kernel ones that are absent: so exposed-comm and the other
    communication rules judge a CPU job too. The source says which they are."""
    if not source.startswith("host collective") or per.empty:
        return
    m = analysis.metrics
    has = per[per["collectives"] > 0]
    src = f"{source}; per step, median over {len(per)} traced steps"
    share = per["comm_ms"] / per["step_ms"].where(per["step_ms"] > 0)
    values = {
        "comm_time_ratio": (_median(share), "ratio", "of the step's host time (no GPU: the step's span stands for busy time)"),
        "exposed_comm_ms_per_step": (_median(per["exposed_ms"]), "ms", "host collectives: all of it counted exposed (no per-op compute intervals to overlap)"),
        "collectives_per_step": (_median(per["collectives"]), "count", None),
        "mean_collective_us": (_median(has["mean_collective_us"]) if not has.empty else None, "us", "host range: enqueue to completion, waiting included"),
    }
    for key, (value, unit, note) in values.items():
        if m.get(key) is None or m[key].value is None:
            m[key] = Metric(value, unit, src, note=note) if value is not None else Metric(None, unit, src, reason="no step with collectives")
    if m.get("comm_overlap_ratio") is None or m["comm_overlap_ratio"].value is None:
        m["comm_overlap_ratio"] = Metric(None, "ratio", src, reason="host collective ranges: the trace has no per-op compute intervals to overlap them with")


# --- across ranks ----------------------------------------------------------------------------


def find_straggler(
    per_step: dict[int, pd.DataFrame], collectives: dict[int, list[list[tuple[str, float]]]] | None = None
) -> tuple[Straggler | None, str | None]:
    """The rank that works longest and by how much (module docstring); (None, why) when
    it cannot be told (one rank, no steps, or no rank waits in a collective)."""
    ranks = sorted(per_step)
    if len(ranks) < 2:
        return None, comms.NEEDS_RANKS
    n = min(len(per_step[r]) for r in ranks)
    if n == 0:
        return None, "a rank has no traced steps"
    if all(int(per_step[r]["collectives"].iloc[:n].sum()) == 0 for r in ranks):
        return None, "no collectives in the steps: the ranks never wait for each other"
    busy = np.array([per_step[r]["busy_ms"].to_numpy(float)[:n] for r in ranks])
    step = np.array([per_step[r]["step_ms"].to_numpy(float)[:n] for r in ranks])
    med = np.median(busy, axis=1)
    s = int(np.argmax(med))
    others = np.delete(med, s)
    delay = float(med[s] - np.median(others))
    job_step = float(np.median(step))
    share = float(np.mean(np.argmax(busy, axis=0) == s))
    result = Straggler(ranks[s], delay, delay / job_step if job_step > 0 else float("nan"), share, float(med[s]), float(np.median(others)))
    if collectives is not None:
        result.collective = waiting_collective(ranks, s, n, collectives)
    return result, None


def waiting_collective(ranks: list[int], s: int, n: int, collectives: dict[int, list[list[tuple[str, float]]]]) -> Collective | None:
    """The collective position whose duration on the other ranks exceeds the straggler's
    by the most (median over steps), among positions every rank has in every step."""
    per = [collectives[r][:n] for r in ranks]
    k_max = min((len(step) for steps in per for step in steps), default=0)
    if k_max == 0:
        return None
    others = [i for i in range(len(ranks)) if i != s]
    waits = []
    for k in range(k_max):
        excess = [per[i][t][k][1] - per[s][t][k][1] for i in others for t in range(n)]
        waits.append(float(np.median(excess)))
    k = int(np.argmax(waits))
    per_step = int(np.median([len(step) for step in per[s]]))
    return Collective(k, per[s][0][k][0], per_step, waits[k], [ranks[i] for i in others])
