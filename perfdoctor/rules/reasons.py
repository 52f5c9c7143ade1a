"""Why a finding is not evaluated, or is other than its rule alone would make it: codes and
numbers, worded once in :mod:`perfdoctor.reports.common` (``reason_words``) for the terminal,
Markdown, HTML, findings.json, gate and the demo.

A not-evaluated finding has one of :class:`Missing`, :class:`OffWorkload` and
:class:`Suppressed`; an evaluated one may have a :class:`Fallback` (the metric it compared
is not the rule's first) and a :class:`Lowered` (the time at stake lowered its severity),
in that order. The reports group the not-evaluated rows by these fields (the missing
metrics, why, how to collect them; the workload a rule is for), not by reading a sentence
back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Union

if TYPE_CHECKING:
    from perfdoctor.analysis.workload import Workload


@dataclass(frozen=True)
class Missing:
    """The rule's metric is absent: the metrics it may compare (the first present is), why
    the first is absent (the analysis's reason; None: not collected) and how to collect it
    (the pack's ``collect``)."""

    keys: tuple[str, ...]
    why: str | None = None
    collect: str = ""


@dataclass(frozen=True)
class OffWorkload:
    """A rule for other workloads than this trace's (``workload`` in the pack): not
    applicable, or not judged where the trace's workload is unknown."""

    rule: tuple[str, ...]  # the workloads the rule is for
    workload: Workload  # the trace's

    @property
    def judged(self) -> bool:
        """False where the workload is unknown: the rule is not judged, not ruled out."""
        return self.workload.kind != "unknown"


@dataclass(frozen=True)
class Suppressed:
    """A rule made not applicable by another's failure (``suppresses``: on a capture, the
    timing rules describe the capture, not the workload)."""

    by: str  # the failed rule's id
    title: str  # its finding's title


@dataclass(frozen=True)
class Fallback:
    """The rule compared a later metric of its list because the first is absent."""

    used: str
    preferred: str
    why: str | None = None  # the preferred metric's reason; None: not collected


@dataclass(frozen=True)
class Lowered:
    """The severity the pack gives, lowered because fixing the finding wins back little of
    the step (:data:`perfdoctor.rules.engine.STAKE_WARNING`, ``STAKE_INFO``)."""

    was: str
    to: str
    ms: float  # the estimate: time per step at stake
    step_ms: float  # the step's median latency


Reason = Union[Missing, OffWorkload, Suppressed, Fallback, Lowered]
