"""``diff`` and ``gate`` across multi-rank runs: rank k is compared with rank k.

A multi-rank run is a bundle of several ranks, or an Nsight Systems export of several
processes with GPU work (one per GPU: ``nsys profile torchrun ...``), whose processes are
ranks in process-id order as ``analyze`` shows them (:func:`perfdoctor.analysis.ranks.nsys_ranks`):
one merged timeline would add one process's idle time to the other's busy time.

Two multi-rank bundles of the same world size pair up rank by rank; each pair is an
ordinary :func:`perfdoctor.compare.diff.diff_runs` (or gate), labelled with its rank. Bundles of
different world sizes, or a multi-rank bundle against a single-process run, pair only
their lowest ranks, so that the diff is still produced and the ``world_size`` fact
(:data:`perfdoctor.compare.diff.COMPARABILITY_FIELDS`) says loudly that they are not comparable.
A gate over several ranks is :func:`perfdoctor.compare.gate.merge_gates`.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from perfdoctor.pipeline import Diagnosis, Source, diagnose
from perfdoctor.profile import Profile


def bundle_ranks(source: Source | None) -> list[int]:
    """The ranks of a multi-rank bundle, or the processes of a multi-process nsys export;
    [] for anything else."""
    if source is None:
        return []
    if nsys_export(source.path):
        procs = nsys_process_runs(source.path)
        return list(procs) if len(procs) > 1 else []
    return source.ranks


def nsys_export(path: Path) -> bool:
    from perfdoctor.pipeline import NSYS_SUFFIXES

    return not path.is_dir() and path.name.lower().endswith(NSYS_SUFFIXES)


@lru_cache(maxsize=2)
def _nsys_views(path: Path) -> tuple[Profile, dict[int, Profile]]:
    from perfdoctor.collectors import nsys

    return nsys.load_views(path)  # one read per file: a .nsys-rep is exported once


def nsys_process_runs(path: Path) -> dict[int, Profile]:
    """The processes of an nsys export as ranks (0, 1, ... in process-id order)."""
    from perfdoctor.analysis.ranks import nsys_ranks

    procs = nsys_ranks(_nsys_views(path)[1])[0]
    for profile in procs.values():
        # nsys does not say the job's world size: its processes with GPU work are the job,
        # so that one of them against a single-process run is "not comparable" as a rank of
        # a multi-rank bundle is (perfdoctor.compare.comparability.world_size)
        profile.meta["distributed"] = {"world_size": len(procs)}
    return procs


def paired_ranks(before: Source | None, after: Source) -> list[int | None]:
    """Which ranks to compare: every rank when both sides have the same ranks; else the
    lowest rank of each multi-rank side (None: a single-process run)."""
    b, a = bundle_ranks(before), bundle_ranks(after)
    if b and b == a:
        return list(a)
    return [None]


def load_pair(source: Source, rank: int | None, **kwargs: Any) -> Diagnosis:
    """``source`` at ``rank`` — or at its lowest rank when ranks do not pair (``rank`` None),
    diagnosed through the door (:func:`perfdoctor.pipeline.diagnose`)."""
    side = bundle_ranks(source)
    use = rank if rank is not None else (side[0] if side else None)
    if nsys_export(source.path):
        if use is None:  # one process: the export's one timeline, read once
            return diagnose(source, profile=_nsys_views(source.path)[0], **kwargs)
        return diagnose(source, rank=use, profile=nsys_process_runs(source.path)[use], **kwargs)
    # diff and gate never printed the load warnings of one rank of a multi-rank bundle: kept, so their output is unchanged
    return diagnose(source, rank=use, warnings=use is None, **kwargs)
