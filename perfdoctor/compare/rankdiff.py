"""``diff`` and ``gate`` across multi-rank bundles: rank k is compared with rank k.

Two multi-rank bundles of the same world size pair up rank by rank; each pair is an
ordinary :func:`perfdoctor.compare.diff.diff_runs` (or gate), labelled with its rank. Bundles of
different world sizes, or a multi-rank bundle against a single-process run, pair only
their lowest ranks, so that the diff is still produced and the ``world_size`` fact
(:data:`perfdoctor.compare.diff.COMPARABILITY_FIELDS`) says loudly that they are not comparable.
A gate over several ranks fails when a check fails on any rank: its checks are every
rank's, named ``rank k: ...``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from perfdoctor.compare.diff import Run, load_run
from perfdoctor.compare.gate import GateResult


def bundle_ranks(path: Path | None) -> list[int]:
    """The ranks of a multi-rank bundle; [] for anything else."""
    if path is None or not path.is_dir() or not (path / "manifest.json").exists():
        return []
    from perfdoctor.bundle.manifest import read_valid_manifest

    return sorted(int(k) for k in read_valid_manifest(path).get("ranks") or {})


def paired_ranks(before: Path | None, after: Path) -> list[int | None]:
    """Which ranks to compare: every rank when both sides have the same ranks; else the
    lowest rank of each multi-rank side (None: a single-process run)."""
    b, a = bundle_ranks(before), bundle_ranks(after)
    if b and b == a:
        return list(a)
    return [None]


def load_pair(path: Path, rank: int | None, side: list[int], **kwargs: Any) -> Run:
    """``path`` at ``rank`` — or at its lowest rank when ranks do not pair (``rank`` None)."""
    use = rank if rank is not None else (side[0] if side else None)
    return load_run(path, rank=use, **kwargs)


def merge_gates(results: dict[int, GateResult]) -> GateResult:
    """One gate over every rank: each rank's checks named ``rank k: ...``, warnings once."""
    checks, warnings = [], []
    for rank, r in results.items():
        for c in r.checks:
            c.name = f"rank {rank}: {c.name}"
            checks.append(c)
        warnings += [w for w in r.warnings if w not in warnings]
    first = next(iter(results.values()))
    return GateResult(first.run, first.baseline, checks, warnings, first.diff)
