"""The front door: a trace or a run bundle in, a diagnosis out.

``diagnose(path)`` is what ``perfdoctor analyze`` and ``perfdoctor report`` do before they
print anything: load (:func:`perfdoctor.collectors.load_trace`) → find the steps and
measure (:func:`perfdoctor.metrics.analyze`) → evaluate the rule packs
(:mod:`perfdoctor.rules.engine`) into ranked findings. The commands, diff, gate and the demo
call it instead of wiring the three steps each by hand; a notebook calls it too::

    import perfdoctor
    d = perfdoctor.diagnose("trace.json.gz", step="decode_step")
    d.analysis.metrics["step_latency_ms_p50"].value, d.findings[0].title
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from perfdoctor.console import report_load_warnings

if TYPE_CHECKING:  # the heavy modules load when diagnose runs, not at import
    from perfdoctor.metrics import Analysis
    from perfdoctor.profile import Profile
    from perfdoctor.rules.engine import Finding, RuleSet

SEED = "seed"  # `--rules seed`: the built-in pack, which every rule set starts from anyway


def pack_files(rules: Iterable[str | Path] | None) -> list[Path]:
    """The rule pack files among ``--rules`` values: ``seed`` names the built-in pack (always
    loaded first), so it adds no file. One meaning of ``--rules`` for every command."""
    return [Path(p) for p in (rules or ()) if str(p) != SEED]


@dataclass
class Diagnosis:
    """What one trace says: the normalized Profile, its Analysis (steps, timeline, metrics)
    and the ranked findings (None when no rules were evaluated)."""

    profile: Profile
    analysis: Analysis
    findings: list[Finding] | None
    packs: list[str] = field(default_factory=list)  # the rule packs evaluated, in order


def load_ruleset(rules: Iterable[str | Path] | None = (), thresholds: Iterable[str] | None = ()) -> RuleSet:
    """The seed pack, then ``rules`` layered on it, then ``RULE_ID=VALUE`` overrides."""
    from perfdoctor.rules.engine import load_rules

    return load_rules(pack_files(rules), list(thresholds or ()))


def diagnose(
    path: str | Path,
    step: str | None = None,
    tokens_per_step: float | None = None,
    rules: Iterable[str | Path] | None = (),
    thresholds: Iterable[str] | None = (),
    *,
    ruleset: RuleSet | None = None,
    warnings: bool = True,
    workload: str | None = None,
) -> Diagnosis:
    """Load ``path`` (Kineto trace, nsys export or run bundle), analyse it and evaluate rules.

    ``step``: step range name or glob (default: ProfilerStep#N, else the most frequent
    repeated range with GPU work). ``tokens_per_step`` overrides what the workload declared.
    ``rules``: pack files layered on the seed pack (``"seed"`` is the seed pack itself);
    ``None`` evaluates no rules (``findings`` is None). ``thresholds``: ``RULE_ID=VALUE``.
    ``ruleset``: an already loaded rule set (wins over ``rules``/``thresholds``).
    ``warnings``: print what the loader dropped on stderr. ``workload``: ``"training"`` or
    ``"inference"`` instead of what the trace shows (decides which rules apply).

    The trace's decoders start first (:func:`perfdoctor.collectors.start_loading`), then
    the rule packs load (importing the analysis) while they decode, so a bad pack still
    fails before the slow part of the load.
    """
    from perfdoctor.collectors import start_loading

    with start_loading(Path(path)) as loading:
        if ruleset is None and rules is not None:
            ruleset = load_ruleset(rules, thresholds)
        profile = loading.result()
    from perfdoctor.metrics import analyze
    from perfdoctor.rules.engine import evaluate

    if warnings:
        report_load_warnings(profile)
    analysis = analyze(profile, step=step, tokens_per_step=tokens_per_step, workload=workload)
    if ruleset is None:
        return Diagnosis(profile, analysis, None)
    return Diagnosis(profile, analysis, evaluate(ruleset, analysis), list(ruleset.packs))
