"""``perfdoctor gate RUN``: pass / fail for CI (the model is :mod:`perfdoctor.compare.gate`, the
outputs :mod:`perfdoctor.reports.gate_report`)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import List, Optional

import typer

from perfdoctor.bundle import store as baselines
from perfdoctor.cli import options
from perfdoctor.errors import UsageError
from perfdoctor.cli import outputs
from perfdoctor.io import check_outputs, write_text
from perfdoctor.text import clean


def gate_command(
    run: Path = typer.Argument(..., help="The run to judge: a run bundle, Kineto trace (.json, .json.gz) or nsys export (.sqlite, .nsys-rep)."),
    baseline: Optional[str] = typer.Option(None, "--baseline", metavar="RUN|NAME", help="The run to compare against (same kinds), or the name of a baseline in the store (--store): the newest run recorded under it. Needed by --fail-on."),
    fail_on: list[str] = typer.Option([], "--fail-on", metavar="EXPR", help="Budget METRIC:+N% / METRIC:-N% (relative) or METRIC:+N / METRIC:-N (absolute); '+' fails on a rise, '-' on a fall. Repeatable. E.g. 'step_latency_ms_p99:+5%', 'dram_bw_util:-0.05'."),
    rules: List[Path] = options.RULES,
    min_severity: str = typer.Option("error", "--min-severity", help="With --rules: the lowest severity of a failing rule that fails the gate (info, warning, error, critical)."),
    step: Optional[str] = options.step("for both runs"),
    tokens_per_step: Optional[float] = options.tokens_per_step("for both runs"),
    workload: Optional[str] = options.WORKLOAD,
    noise_floor: Optional[float] = options.noise_floor("does not fail a budget"),
    inconclusive: Optional[str] = typer.Option(None, "--inconclusive", metavar="pass|fail", help="Count a budget the processes could not decide (its interval straddles the budget) as a pass or a failure. Default: neither, exit code 3 (docs/ci.md)."),
    junit: Optional[Path] = typer.Option(None, "--junit", help="Write JUnit XML here: one test case per check."),
    github: bool = typer.Option(False, "--github", help="GitHub Actions: append a Markdown summary to $GITHUB_STEP_SUMMARY and print up to 10 ::error annotations."),
    json_out: Optional[Path] = options.json_out("the checks (and the diff against the baseline) as JSON (schema perfdoctor.gate/1)"),
    store: Optional[Path] = typer.Option(None, "--store", envvar="PERFDOCTOR_BASELINE_STORE", metavar="DIR", help="Baseline store: a directory of named baselines, plain files (env PERFDOCTOR_BASELINE_STORE; cache it in CI, docs/ci.md)."),
    record: Optional[str] = typer.Option(None, "--record", metavar="NAME", help="When the gate passes, record RUN in the store as the newest baseline NAME (e.g. on the main branch)."),
    accept: bool = typer.Option(False, "--accept", help="Record RUN as the newest baseline even though the gate fails (an accepted regression; needs --reason), under --record NAME or the --baseline name; exits 0."),
    reason: Optional[str] = typer.Option(None, "--reason", help="Why a regression is accepted (with --accept); kept in the store's record."),
) -> None:
    """Fail CI when performance regresses: metric budgets against a baseline, and rule findings.

    Budgets (--fail-on, with --baseline): METRIC:+N% fails if the metric rises by more than N percent of the baseline, METRIC:-N% if it falls by more; without % the amount is absolute, in the metric's unit (dram_bw_util:-0.05, launches_per_step:+0).

    Budgets on step-level metrics (step latency percentiles, step GPU time, steps/s, tokens/s, kernels and launches per step) fail only when the change is also significant (Mann-Whitney U, p < 0.05, and a median shift beyond the run-to-run noise floor, see --noise-floor) whenever both runs have at least 5 steps, so run-to-run noise does not fail builds. Step latency budgets use the light timing pass (no tracer) when both runs are bundles that have one. A metric measured in one run only is reported as added or removed, not failed. A relative budget against a baseline of 0 fails on any move past 0 in its direction (use an absolute budget to allow some).

    Rules (--rules seed, or a pack file): a failing rule at or above --min-severity fails the gate; rules that could not be evaluated are skipped with the reason, never passed.

    A baseline that is not comparable with the run (another GPU or vendor, world size or workload kind, a whole-trace window against steps) gets no verdict: the budgets are skipped as "not comparable" and the gate exits 2, saying why. Steps covering different fractions of the profiled span skip the budgets on the span's ratios (gpu_idle_ratio, kernel_time_ratio, ...); the gate exits 2 when nothing else was checked. --workload sets the workload kind of both runs.

    Exit codes: 0 every check passed (skipped checks do not fail, but at least one check must be evaluated); 1 the gate failed; 3 inconclusive: no check failed, but a budget over processes could not be decided (run more processes: --repeat); 2 usage or input error (unknown metric in a budget, malformed budget, a file that is not a trace, --fail-on without --baseline, no check could be evaluated, or a baseline not comparable with the run).

    Repeated bundles (perfdoctor run --repeat N, compare-programs): step latency budgets are judged over processes, the ratio of per-process medians with its 95 % interval: a budget fails only when the whole interval lies beyond it; an interval across the budget is "inconclusive — too few processes for the budget": neither a pass nor a failure, exit code 3 (--inconclusive pass|fail to count it as one).

    Baseline store: --baseline NAME is the newest run recorded under NAME in --store (a NAME that is also an existing path is an error; the gate prints which baseline it used); --record NAME records RUN there when the gate passes; --accept --reason TEXT records it even when it fails, so the next run compares against it.

    Example: perfdoctor gate pr.json.gz --baseline main.json.gz --step decode_step --fail-on 'step_latency_ms_p50:+5%' --fail-on 'launches_per_step:+0' --junit gate.xml --github
    """
    from perfdoctor.compare.gate import EXIT_USAGE, INCONCLUSIVE_POLICIES, evaluate_gate, merge_gates, parse_budget, rule_checks
    from perfdoctor import pipeline
    from perfdoctor.reports.diff_report import refusal
    from perfdoctor.reports.gate_report import document as gate_document, github_annotations, junit_xml, print_result, summary_markdown

    if inconclusive is not None and inconclusive not in INCONCLUSIVE_POLICIES:
        raise UsageError(f"--inconclusive {inconclusive!r}: use pass or fail")
    budgets = [parse_budget(text) for text in fail_on]  # grammar errors before any slow loading
    if budgets and baseline is None:
        raise UsageError("--fail-on budgets compare against a baseline: give --baseline RUN")
    if not budgets and not rules:
        raise UsageError("nothing to check: give --fail-on METRIC:+N% with --baseline RUN, and/or --rules PACK")
    baseline_path, baseline_record = baselines.resolve(baseline, store) if baseline is not None else (None, None)
    inputs = [run, *rules, *([baseline_path] if baseline_record is None and baseline_path else [])]
    record_as = storing(record, accept, reason, store, baseline if baseline_record else None, inputs)
    check_outputs(outputs.files([junit, json_out]), [run, baseline_path, *rules])  # never write over an input
    this_source = pipeline.open(run)
    base_source = pipeline.open(baseline_path) if baseline_path is not None else None
    ruleset = pipeline.load_ruleset(rules) if rules else None  # parsed once for every rank
    per_rank = {}
    for rank, (b, a) in pipeline.paired_ranks(base_source, this_source).items():  # like ranks of multi-rank runs, else the one pair
        this = pipeline.diagnose(this_source, rank=a, step=step, tokens_per_step=tokens_per_step, workload=workload,
                                 rules=None, ruleset=ruleset)
        base = (pipeline.diagnose(base_source, rank=b, step=step, tokens_per_step=tokens_per_step, workload=workload, rules=None)
                if base_source is not None else None)
        rule_results = rule_checks(this.findings, min_severity) if ruleset is not None else None
        per_rank[rank] = evaluate_gate(this, base, budgets, rule_results, options.fraction(noise_floor))
    result = per_rank[None] if list(per_rank) == [None] else merge_gates(per_rank)  # a multi-rank gate: every rank's checks
    result.inconclusive_policy = inconclusive

    print_result(result, outputs.report_console(junit, json_out))
    if junit is not None:
        outputs.emit_text(junit, junit_xml(result))
    if json_out is not None:
        outputs.emit_json(json_out, gate_document(result))  # strict: NaN and infinities are null
    if github:
        summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if summary:
            write_text(Path(summary), summary_markdown(result), append=True)
        else:
            print("perfdoctor gate: GITHUB_STEP_SUMMARY is not set (not in GitHub Actions?); summary not written", file=sys.stderr)
        for line in github_annotations(result):
            print(line)
    if result.refused is not None:
        raise UsageError(f"no verdict: the baseline is {refusal(result.refused)} (pass --step NAME or --workload KIND where they differ, or compare runs of one kind)")
    if result.exit_code == EXIT_USAGE:
        raise UsageError(f"no check could be evaluated ({len(result.checks)} skipped; see the reasons above)")
    if baseline_record is not None:  # which baseline was used, always said; store fields are user text
        print(clean(f"baseline {baseline}: entry {baseline_record.get('sequence')} ({baseline_record.get('kind')}, "
                    f"{baseline_record.get('recorded_at')}) from the store {store}"))
    elif baseline_path is not None:
        print(clean(f"baseline: the path {baseline_path}" + (" (not a store entry)" if store is not None else "")))
    if record_as is not None and (result.passed or accept):
        assert store is not None
        kind = "accepted" if accept and not result.passed else "recorded"
        summary = {"passed": result.passed, "failed": [c.name for c in result.failed], "baseline": str(baseline_path) if baseline_path else None}
        entry = baselines.record_run(store, record_as, run, kind, reason, summary)
        what = f"accepted regression ({reason})" if kind == "accepted" else "recorded"
        print(clean(f"baseline {record_as}: {what} as {entry}"))
        raise typer.Exit(0)
    raise typer.Exit(result.exit_code)


def storing(record: Optional[str], accept: bool, reason: Optional[str], store: Optional[Path], named: Optional[str],
            inputs: List[Path]) -> Optional[str]:
    """The store name RUN is recorded under (--record, or the --baseline name with --accept), checked before anything
    runs: the store is never inside (or around) an input it would copy, or it would copy itself into itself."""
    if reason is not None and not accept:
        raise UsageError("--reason goes with --accept (why a regression is accepted)")
    if accept and not (reason or "").strip():
        raise UsageError('--accept needs --reason "why this regression is accepted"')
    name = record if record is not None else (named if accept else None)  # --record '' is refused, not ignored
    if accept and name is None:
        raise UsageError("--accept records RUN as a stored baseline: give --baseline NAME from the store, or --record NAME")
    if name is not None:
        if store is None:
            raise UsageError("recording a baseline needs a store: give --store DIR or set PERFDOCTOR_BASELINE_STORE")
        baselines.check_name(name)
        baselines.check_apart(store, [p for p in inputs if str(p) != "seed"])
        baselines.check_store(store)
    return name
