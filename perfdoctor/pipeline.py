"""The front door: a trace or a run bundle in, a diagnosis out.

``diagnose(path)`` is what ``perfdoctor analyze`` and ``perfdoctor report`` do before they
print anything: load (:func:`load_trace`) → find the steps and
measure (:func:`perfdoctor.analysis.metrics.analyze`) → evaluate the rule packs
(:mod:`perfdoctor.rules.engine`) into ranked findings. The commands, diff, gate and the demo
call it instead of wiring the three steps each by hand; a notebook calls it too::

    import perfdoctor
    d = perfdoctor.diagnose("trace.json.gz", step="decode_step")
    d.analysis.metrics["step_latency_ms_p50"].value, d.findings[0].title

``open(path)`` is the door's first half: the path checked and, for a run bundle, its
manifest read and validated once and carried on the :class:`Source`, so that diff and gate,
which ask a bundle for its ranks, its passes' environment and its profile, read it once.

Several ranks of one job (a multi-rank bundle, a folder of per-rank traces, an nsys export
of several processes with GPU work) go through the same door: every rank is analysed, the
view across them is measured (:mod:`perfdoctor.analysis.ranks`), and each rank's rules read
its numbers (the straggler's delay) as inputs beside the rank's own metrics.
:func:`paired_ranks` says which ranks ``diff`` and ``gate`` compare.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable

from perfdoctor.console import report_load_warnings
from perfdoctor.errors import UsageError
from perfdoctor.io import regular_file

if TYPE_CHECKING:  # the heavy modules load when diagnose runs, not at import
    from perfdoctor.analysis.metrics import Analysis
    from perfdoctor.analysis.ranks import CrossRank
    from perfdoctor.bundle.protocol import Manifest, PassResults
    from perfdoctor.profile import Profile
    from perfdoctor.rules.engine import Finding, RuleSet

SEED = "seed"  # `--rules seed`: the built-in pack, which every rule set starts from anyway


def pack_files(rules: Iterable[str | Path] | None) -> list[Path]:
    """The rule pack files among ``--rules`` values: ``seed`` names the built-in pack (always
    loaded first), so it adds no file. One meaning of ``--rules`` for every command."""
    return [Path(p) for p in (rules or ()) if str(p) != SEED]


@dataclass
class Source:
    """A path :func:`open` checked: a trace, a run bundle with its manifest and its pass
    results (read and shape-checked once; None and {} for anything else), or a folder of
    per-rank traces (``traces``)."""

    path: Path
    manifest: Manifest | None = None
    traces: list[Path] = field(default_factory=list)
    results: dict[str, PassResults] = field(default_factory=dict)  # per pass, raw/<pass>.json
    _nsys: tuple[Profile, dict[int, Profile]] | None = field(default=None, repr=False, compare=False)

    @property
    def nsys(self) -> bool:
        return not self.traces and self.manifest is None and self.path.name.lower().endswith(NSYS_SUFFIXES)

    def nsys_views(self) -> tuple[Profile, dict[int, Profile]]:
        """An Nsight Systems export as one timeline, and as one per process with GPU work
        (by OS process id): one read, kept (a .nsys-rep is exported once however often its
        ranks are asked)."""
        if self._nsys is None:
            from perfdoctor.collectors import nsys

            self._nsys = nsys.load_views(self.path)
        return self._nsys

    @property
    def ranks(self) -> list[int]:
        """The ranks of a multi-rank bundle, or of an Nsight Systems export of several
        processes with GPU work (one per GPU: ``nsys profile torchrun ...``; ranks in
        process-id order, :func:`perfdoctor.analysis.ranks.nsys_ranks`), lowest first; []
        for anything else (a folder of traces tells its ranks only as they are read)."""
        if self.nsys:
            n = len(self.nsys_views()[1])
            return list(range(n)) if n > 1 else []
        return sorted(int(k) for k in self.manifest.ranks or {}) if self.manifest is not None else []

    @property
    def several(self) -> bool:
        """Several ranks of one job: :func:`diagnose` analyses each and the view across them
        (a folder of traces that turns out to be one process's windows is read as one trace)."""
        return bool(self.traces) or bool(self.ranks)


def open(path: str | Path) -> Source:  # noqa: A001 - the door's name in the house plan
    """Check ``path`` and, for a run bundle, read and validate its manifest (and its raw
    files' kinds and pass results) once: a bad bundle fails here, before any slow load. A
    folder without a manifest is one of per-rank traces when it holds any
    (``*.pt.trace.json[.gz]``, as ``tensorboard_trace_handler`` writes them)."""
    path = Path(path)
    if not os.path.lexists(path):
        raise UsageError(f"{path}: no such file or directory")
    if not path.is_dir():
        return Source(path)
    from perfdoctor.bundle.layout import MANIFEST
    from perfdoctor.bundle.manifest import read_bundle

    if not (path / MANIFEST).exists():
        from perfdoctor.analysis.ranks import TRACE_GLOB, trace_files

        if traces := trace_files(path):
            return Source(path, traces=traces)
        # neither kind of folder: say both what it lacks (a folder of exported traces
        # named otherwise, marker.json, is not a broken bundle)
        raise UsageError(f"{path}: no trace found: no {' or '.join(TRACE_GLOB)} file in this folder, and no {MANIFEST} "
                         "(not a perfdoctor run bundle)")
    manifest, results = read_bundle(path)
    return Source(path, manifest, results=results)


def paired_ranks(before: Source | None, after: Source) -> dict[int | None, tuple[int | None, int | None]]:
    """Which ranks ``diff`` and ``gate`` compare, by the rank the result is labelled with
    (None: the one pair): (before's rank, after's rank). Rank k with rank k when both sides
    have the same ranks (every rank of ``after`` when there is no ``before``); else the
    lowest rank of each multi-rank side (None: a single-process run), so the diff is still
    produced and the ``world_size`` fact (:mod:`perfdoctor.compare.comparability`) says loudly
    that they are not comparable."""
    for side in (before, after):
        if side is not None and side.traces:
            raise UsageError(f"{side.path}: a folder of per-rank traces: perfdoctor analyze reads it; diff and gate compare "
                             "run bundles and traces")
    a = after.ranks
    b = before.ranks if before is not None else a
    if a and b == a:
        return {k: (k, k) for k in a}
    return {None: (b[0] if b else None, a[0] if a else None)}


@dataclass
class Diagnosis:
    """What one trace says: the normalized Profile, its Analysis (steps, timeline, metrics)
    and the ranked findings (None when no rules were evaluated); for diff and gate also
    what it is called, a bundle's manifest and the torch/CUDA versions its passes saw.

    Several ranks of one job: ``cross_rank`` is the view across them
    (:class:`perfdoctor.analysis.ranks.CrossRank`), ``rank_findings`` the findings of every
    rank analysed in full, and profile, analysis and findings are those of the report rank
    (``rank``: the one with the most exposed communication, where communication problems
    and the wait for a straggler show)."""

    profile: Profile
    analysis: Analysis
    findings: list[Finding] | None
    packs: list[str] = field(default_factory=list)  # the rule packs evaluated, in order
    label: str = ""
    manifest: Manifest | None = None
    pass_env: dict[str, Any] = field(default_factory=dict)
    rank: int | None = None
    cross_rank: CrossRank | None = None
    rank_findings: dict[int, list[Finding]] = field(default_factory=dict)


class NoTrace(UsageError):
    """A run bundle (or one rank of one) whose passes left no trace to analyse, raised by
    :func:`diagnose` asked ``traced=True`` before any analysis: ``reason`` says why (the
    bundle's :attr:`perfdoctor.profile.BundleFacts.reason`)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def load_ruleset(rules: Iterable[str | Path] | None = (), thresholds: Iterable[str] | None = ()) -> RuleSet:
    """The seed pack, then ``rules`` layered on it, then ``RULE_ID=VALUE`` overrides."""
    from perfdoctor.rules.engine import load_rules

    return load_rules(pack_files(rules), list(thresholds or ()))


def diagnose(
    path: str | Path | Source,
    step: str | None = None,
    tokens_per_step: float | None = None,
    rules: Iterable[str | Path] | None = (),
    thresholds: Iterable[str] | None = (),
    *,
    ruleset: RuleSet | None = None,
    warnings: bool = True,
    workload: str | None = None,
    rank: int | None = None,
    traced: bool = False,
) -> Diagnosis:
    """Load ``path`` (Kineto trace, nsys export, run bundle or folder of per-rank traces, or
    a :class:`Source` that :func:`open` made of one), analyse it and evaluate rules.

    ``step``: step range name or glob (default: ProfilerStep#N, else the most frequent
    repeated range with GPU work). ``tokens_per_step`` overrides what the workload declared.
    ``rules``: pack files layered on the seed pack (``"seed"`` is the seed pack itself);
    ``None`` evaluates no rules (``findings`` is None). ``thresholds``: ``RULE_ID=VALUE``.
    ``ruleset``: an already loaded rule set (wins over ``rules``/``thresholds``), so that a
    command diagnosing several runs parses its packs once.
    ``warnings``: print what the loader dropped on stderr. ``workload``: ``"training"`` or
    ``"inference"`` instead of what the trace shows (decides which rules apply).
    ``rank``: that rank of a multi-rank bundle or process of an nsys export (``Source.ranks``);
    None: every rank of several (:attr:`Source.several`), each analysed and its rules given
    the view across them (:attr:`Diagnosis.cross_rank`).
    ``traced``: a run bundle's one timeline without a trace (only the light pass's, or none)
    is not analysed: :class:`NoTrace` says why (``perfdoctor run`` writes no metrics.json then).

    A Kineto trace's decoders start first (:func:`start_loading`), then the rule packs load
    (importing the analysis) while they decode; anything else is read after them. Either
    way a bad pack fails before the slow part of the load.
    """
    source = path if isinstance(path, Source) else open(path)
    path = source.path
    if source.manifest is None and not source.traces and not source.nsys:
        with start_loading(path) as loading:
            if ruleset is None and rules is not None:
                ruleset = load_ruleset(rules, thresholds)
            profile = loading.result()
    else:
        if ruleset is None and rules is not None:
            ruleset = load_ruleset(rules, thresholds)
        loaded = _every_profile(source) if rank is None and source.several else None
        if source.traces and loaded is not None and len(loaded[0]) == 1:
            # a folder of one process's profiler windows: one timeline (ranks.load_profiles), not ranks
            profile = next(iter(loaded[0].values()))
        elif rank is None and source.several:
            return _every_rank(source, loaded, step, tokens_per_step, workload, ruleset)
        else:
            profile = _one_rank(source, rank)
    from perfdoctor.analysis.metrics import analyze
    from perfdoctor.rules.engine import evaluate

    # one rank of a bundle: its load warnings are not printed, as the every-rank view never did (nor diff and gate)
    if warnings and not (rank is not None and source.manifest is not None):
        report_load_warnings(profile)
    if traced and profile.origin.bundle is not None and profile.origin.bundle.activities_from is None:
        raise NoTrace(str(profile.origin.bundle.reason))  # load_bundle always says why
    analysis = analyze(profile, step=step, tokens_per_step=tokens_per_step, workload=workload)
    pid = profile.origin.process if source.nsys and rank is not None else None
    facts = dict(
        label=f"{path} (rank {rank}{f': pid {pid}' if pid is not None else ''})" if rank is not None else str(path),
        manifest=source.manifest,
        pass_env=pass_env(path, rank, source.results) if source.manifest is not None else {},
        rank=rank,
    )
    if ruleset is None:
        return Diagnosis(profile, analysis, None, **facts)
    return Diagnosis(profile, analysis, evaluate(ruleset, analysis), list(ruleset.packs), **facts)


def _one_rank(source: Source, rank: int | None) -> Profile:
    """The one timeline of a bundle or an nsys export: ``rank``'s, else the whole (a
    single-process export, a single-rank bundle)."""
    if source.nsys:
        from perfdoctor.analysis.ranks import nsys_ranks

        merged, procs = source.nsys_views()
        if rank is None:
            return merged
        profile = nsys_ranks(procs)[0][rank]
        # nsys does not say the job's world size: its processes with GPU work are the job,
        # so that one of them against a single-process run is "not comparable" as a rank of
        # a multi-rank bundle is (perfdoctor.compare.comparability.world_size)
        profile.origin = replace(profile.origin, distributed={"world_size": len(procs)})
        return profile
    from perfdoctor.collectors.bundle import load_bundle

    # open() checked them: not read again
    return load_bundle(source.path, rank=rank, manifest=source.manifest, results=source.results)


def _every_profile(source: Source) -> tuple[dict[int, Profile], int | None, str, list[str]] | None:
    """The timelines of a source of several (:func:`perfdoctor.analysis.ranks.load_profiles`),
    or None for a folder of many traces, one per worker, which
    :func:`perfdoctor.analysis.ranks.cross_rank` reads grouped."""
    from perfdoctor.analysis import ranks

    if source.nsys:
        return ranks.nsys_ranks(source.nsys_views()[1])
    if source.manifest is None and ranks.many_ranks(source.traces):
        return None
    return ranks.load_profiles(source.path, source.manifest)


def _every_rank(source: Source, loaded: tuple[dict[int, Profile], int | None, str, list[str]] | None, step: str | None,
                tokens_per_step: float | None, workload: str | None, ruleset: RuleSet | None) -> Diagnosis:
    """Every rank of ``source`` (``loaded``: :func:`_every_profile`) analysed, the view
    across them (:func:`perfdoctor.analysis.ranks.cross_rank`), then the rules of each fully
    analysed rank, which read the view's metrics beside the rank's own."""
    from perfdoctor.analysis import ranks
    from perfdoctor.rules.engine import evaluate

    view = ranks.cross_rank(source.path, step=step, tokens_per_step=tokens_per_step, workload=workload, loaded=loaded)
    found = {run.rank: evaluate(ruleset, run.analysis, view) for run in view.runs} if ruleset is not None else {}
    report = ranks.report_rank(view)
    run = next(r for r in view.runs if r.rank == report)
    return Diagnosis(
        run.profile, run.analysis, found.get(report), list(ruleset.packs) if ruleset is not None else [],
        label=f"{source.path} (rank {report})", manifest=source.manifest,
        pass_env=pass_env(source.path, report, source.results) if source.manifest is not None else {},
        rank=report, cross_rank=view, rank_findings=found,
    )


def pass_env(bundle: Path, rank: int | None, results: dict[str, PassResults] | None = None) -> dict[str, Any]:
    """The torch/CUDA versions the bootstrap saw in the first pass that recorded them; {}
    when none did or their results are damaged (a side file must not hide the trace).
    ``results``: the bundle's pass results as :func:`open` read them, for ``rank`` None (a
    rank's are in its own folder)."""
    from perfdoctor.bundle.layout import RAW
    from perfdoctor.bundle.protocol import PassResults
    from perfdoctor.io import read_json

    raw = bundle / RAW / (f"rank{rank}" if rank is not None else "")
    for name in ("torch", "light", "nsys"):
        path = raw / f"{name}.json"
        if rank is None and results is not None:
            env = results[name].environment if name in results else None
        else:
            try:
                env = PassResults.from_json(read_json(path), str(path)).environment if path.is_file() else None
            except UsageError:
                continue
        if isinstance(env, dict) and env.get("torch"):
            return env
    return {}


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
        self.result, self.close = result, close

    def __enter__(self) -> "Loading":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# Kineto traces whose load :func:`start_early` began, by path, until start_loading takes them.
_early: dict[str, Loading] = {}


def start_early(path: str | Path) -> None:
    """Begin :func:`start_loading` on a Kineto trace before the command that will load it
    has parsed its command line: ``perfdoctor analyze`` calls this with the path it reads
    from its arguments ahead of click (:func:`perfdoctor.cli.early.start_early`), and
    the ~0.1 s of the argument parser's imports then run while the forked decoders work.
    A path that cannot be loaded is left for start_loading to refuse, in the command's
    own order; a load never asked for is stopped by :func:`drop_early`."""
    path = Path(path)
    if not path.name.lower().endswith(KINETO_SUFFIXES):
        return
    try:
        _early[str(path)] = start_loading(path)
    except (UsageError, OSError):
        pass


def drop_early() -> None:
    """Stop every load :func:`start_early` began that no command took."""
    while _early:
        _early.popitem()[1].close()


def start_loading(path: str | Path) -> Loading:
    """:func:`load_trace` begun: the path is checked now (so a bad one fails at once) and a
    Kineto trace is read and its forked decoders started
    (:func:`.torch_profiler.start`); an Nsight Systems export or a bundle is read by
    :meth:`Loading.result`. A load :func:`start_early` began on the same path is the one
    returned."""
    path = Path(path)
    early = _early.pop(str(path), None)
    if early is not None:
        return early
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
    from perfdoctor.collectors.bundle import load_bundle
    from perfdoctor.bundle.manifest import read_bundle

    manifest, results = read_bundle(path)
    return load_bundle(path, manifest=manifest, results=results)
