"""``perfdoctor demo``: what perfdoctor finds, on the bundled reference engine.

On a machine without a GPU (a laptop, a CI runner) the demo first shows the real thing
from a recording: run bundles of the engine's eager, graph, fused and megakernel variants
(the megakernel where its bundle was recorded) made on a GPU by ``scripts/record-demo``
and shipped in :mod:`perfdoctor.demo.data`, analysed now — the ranked findings of each run
and the diffs eager → graph → fused → megakernel. It says where and when they were
recorded and never passes them off as live. Then it runs ``perfdoctor run`` on the
engine's tiny config on this CPU, to show that collection works here. On a GPU machine it
profiles the variants live instead (the megakernel only on a Hopper GPU).

The same module computes the recording's headline numbers (:func:`measure`), which
``scripts/record-demo`` writes to ``headline.json`` and ``tests/demo/test_show.py`` recomputes
from the shipped bundles with the current code.
"""

from __future__ import annotations

import datetime
import gzip
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from rich import box
from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.rule import Rule
from rich.table import Table
from rich.text import Text

from perfdoctor.bundle.layout import MANIFEST, RAW, TORCH_TRACE
from perfdoctor.console import LAYOUT_WIDTH
from perfdoctor.io import write_json
from perfdoctor.text import interval, num, value

if TYPE_CHECKING:
    from perfdoctor.pipeline import Diagnosis

DEMO_DATA_ENV = "PERFDOCTOR_DEMO_DATA"  # a folder to read the recording from instead of the package's
HEADLINE = "headline.json"
HEADLINE_SCHEMA = "perfdoctor.demo-headline/1"
STEP = "decode_step"
WIDTH = LAYOUT_WIDTH  # the demo's output is laid out for 80 columns
DETAILED = 3  # failing findings shown with their estimate and fix; the rest get one line each

VARIANT_NOTES = {
    "eager": "plain PyTorch decode step",
    "graph": "the same step as one CUDA graph",
    "fused": "Triton kernels in one CUDA graph",
    "megakernel": "the whole step as one persistent CUDA kernel",
    "eager-again": "the same program again",
}

# Metrics the diff tables show (when measured on both sides), in this order.
DIFF_METRICS = (
    "light_step_latency_ms_p50",
    "step_latency_ms_p50",
    "tokens_per_s",
    "launches_per_step",
    "kernels_per_step",
    "gpu_idle_ratio",
    "dram_bw_util",
)


# --------------------------------------------------------------------------- what runs


def plan(mode: str, tokens: int = 48, megakernel: bool = True) -> tuple[list[tuple[str, list[str]]], list[tuple[str, str]]]:
    """(label, engine arguments) of each run, and the (before, after) pairs to diff.

    ``gpu``: Llama-3.2-1B eager, graph, fused and (with ``megakernel``: it needs a Hopper
    GPU) megakernel on CUDA, each diffed against the one before it.
    ``cpu``: the tiny config, eager twice (the other variants need CUDA); only for testing
    the recording machinery, its diff shows this machine's run-to-run noise.
    """
    if mode == "gpu":
        common = ["--config", "llama-3.2-1b", "--device", "cuda", "--tokens", str(tokens), "--ctx", "2048"]
        variants = ["eager", "graph", "fused", *(["megakernel"] if megakernel else [])]
        runs = [(v, ["--variant", v, *common]) for v in variants]
        return runs, list(zip(variants, variants[1:]))
    common = ["--variant", "eager", "--config", "tiny", "--device", "cpu", "--tokens", str(tokens), "--ctx", "256"]
    return [("eager", common), ("eager-again", common)], [("eager", "eager-again")]


def engine_command(args: Sequence[str]) -> str:
    return "perfdoctor run -m perfdoctor.engine " + " ".join(args)


# --------------------------------------------------------------------------- analysis


def analyse(label: str, bundle: Path, ruleset: Any = None) -> Diagnosis:
    """One run bundle, analysed and diagnosed with the current code, called ``label``."""
    from perfdoctor.pipeline import diagnose

    run = diagnose(bundle, step=STEP, ruleset=ruleset)
    run.label = label
    return run


def light_latencies(a: Diagnosis) -> list[float]:
    """Step latencies (ms) of the light pass (no tracer), as the diff compares them."""
    series = a.analysis.light_series
    return [] if series is None else [float(v) for v in series.critical_path_ms]


def median(values: Sequence[float]) -> float | None:
    if not len(values):
        return None
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def latency_sample(diff: Any) -> str:
    return "light_step_latency_ms" if "light_step_latency_ms" in diff.samples else "step_latency_ms"


def run_numbers(a: Diagnosis) -> dict[str, Any]:
    """The numbers of one run that headline.json records and the README may quote."""
    from perfdoctor.rules.engine import verdict

    fails = [f for f in a.findings if f.status == "fail"]
    top = fails[0] if fails else None
    v = verdict(a.findings)
    light = light_latencies(a)
    return {
        "light_step_latency_ms_p50": median(light),
        "light_steps": len(light),
        "step_latency_ms_p50": a.analysis.value("step_latency_ms_p50"),
        "tokens_per_s": a.analysis.value("tokens_per_s"),
        "verdict": v["status"],
        "counts": dict(v["counts"]),
        "failing": [f.rule_id for f in fails],
        "top": None if top is None else {"rule": top.rule_id, "metric": top.metric, "value": top.value},
    }


def diff_numbers(before: str, after: str, diff: Any) -> dict[str, Any]:
    name = latency_sample(diff)
    c = diff.samples.get(name)
    mb = None if c is None else c.median_before
    ma = None if c is None else c.median_after
    f = diff.findings
    return {
        "before": before,
        "after": after,
        "sample": name,
        "median_before_ms": mb,
        "median_after_ms": ma,
        "speedup": (mb / ma) if mb and ma else None,
        "verdict": None if c is None else c.verdict,
        "fixed": [] if f is None else list(f.fixed),
        "new": [] if f is None else list(f.new),
    }


def measure(root: Path, runs: Sequence[str], diffs: Sequence[Sequence[str]]) -> tuple[dict[str, Any], dict[str, Diagnosis], list[Any]]:
    """Analyse the bundles ``root/<label>`` and diff the pairs, with the current code.

    Returns the numbers (``{"runs": {label: ...}, "diffs": [...]}``), the analysed runs and
    the :class:`perfdoctor.compare.diff.Diff` of each pair.
    """
    from perfdoctor.compare.diff import diff_runs
    from perfdoctor.rules.engine import load_rules

    ruleset = load_rules()
    analysed = {label: analyse(label, root / label, ruleset) for label in runs}
    made = [diff_runs(analysed[b], analysed[a]) for b, a in diffs]
    numbers = {
        "runs": {label: run_numbers(a) for label, a in analysed.items()},
        "diffs": [diff_numbers(b, a, d) for (b, a), d in zip(diffs, made)],
    }
    return numbers, analysed, made


def readme_quotes(numbers: dict[str, Any]) -> list[str]:
    """The sentences the README quotes from a recording, formatted from its numbers."""
    out = []
    for d in numbers["diffs"]:
        if d["speedup"] is None:
            continue
        size = speedup_words(d["speedup"]) if d["verdict"] in ("lower", "higher") else str(d["verdict"])
        out.append(f"{d['before']} → {d['after']}: {d['median_before_ms']:.2f} → {d['median_after_ms']:.2f} ms per step ({size})")
    return out


def speedup_words(speedup: float) -> str:
    return f"{speedup:.2f}x faster" if speedup >= 1 else f"{1 / speedup:.2f}x slower"


# --------------------------------------------------------------------------- the recording


@dataclass
class Recording:
    root: Path
    headline: dict[str, Any]

    @property
    def labels(self) -> list[str]:
        return [r["label"] for r in self.headline["runs"]]

    @property
    def pairs(self) -> list[tuple[str, str]]:
        return [(b, a) for b, a in self.headline["diffs"]]

    @property
    def cpu(self) -> bool:
        return self.headline.get("mode") != "gpu"

    def args(self, label: str) -> list[str]:
        return next(r["args"] for r in self.headline["runs"] if r["label"] == label)

    def provenance(self) -> str:
        """``recorded on an NVIDIA H200 on 2026-12-01 with perfdoctor 0.1.0``."""
        h = self.headline
        device = str(h.get("device") or "an unknown device")
        article = "an " if device.startswith("NVIDIA") else ""
        return f"recorded on {article}{device} on {str(h.get('recorded_at', '?'))[:10]} with perfdoctor {h.get('perfdoctor', '?')}"


def recording_dir() -> Path:
    override = os.environ.get(DEMO_DATA_ENV)
    if override:
        return Path(override)
    return Path(__file__).parent / "data"


def find_recording(root: Path | None = None) -> tuple[Recording | None, str | None]:
    """The recording in ``root`` (default: the package's), or None and why not."""
    root = recording_dir() if root is None else root
    path = root / HEADLINE
    if not path.is_file():
        return None, (
            f"no recording is shipped with this perfdoctor ({root} has no {HEADLINE}); "
            "scripts/record-demo OUTDIR makes one on a GPU machine"
        )
    try:
        headline = json.loads(path.read_text())
    except ValueError as exc:
        return None, f"{path}: not valid JSON ({exc})"
    if not isinstance(headline, dict) or headline.get("schema") != HEADLINE_SCHEMA:
        return None, f"{path}: not a {HEADLINE_SCHEMA} file; re-record with scripts/record-demo"
    rec = Recording(root, headline)
    missing = [label for label in rec.labels if not (root / label / MANIFEST).is_file()]
    if missing:
        return None, f"{root}: the recording lacks the bundle(s) {', '.join(missing)}"
    return rec, None


# --------------------------------------------------------------------------- output


class PlainWhenPiped(Console):
    """A Console that, when not writing to a terminal, strips the trailing blanks rich pads
    table and rule lines with, and flushes after each print (a child process shares the fd)."""

    def print(self, *objects: Any, **kwargs: Any) -> None:  # type: ignore[override]
        if self.is_terminal:
            super().print(*objects, **kwargs)
            return
        with self.capture() as captured:
            super().print(*objects, **kwargs)
        self.file.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))
        self.file.flush()


def make_console() -> Console:
    """stdout, at most 80 columns wide (narrower terminals keep their width)."""
    probe = Console()
    return PlainWhenPiped(width=min(probe.width, WIDTH), highlight=False)


def indented(text: str | Text, by: int = 3, style: str = "") -> Padding:
    return Padding(text if isinstance(text, Text) else Text(text, style=style), (0, 0, 0, by))


def latency_line(a: Diagnosis) -> Text:
    """``step latency p50 8.12 ms (light pass, no tracer, 10 steps); traced 9.3 ms; 121 tokens/s``."""
    light = light_latencies(a)
    parts = []
    if light:
        parts.append(f"step latency p50 {value(median(light), 'ms')} (light pass, no tracer, {len(light)} steps)")
    # Under the v2 contract step_latency_ms_p50 is the light pass's own number when there is
    # one; the traced pass's is traced_step_latency_ms_p50.
    traced = a.analysis.value("traced_step_latency_ms_p50") if light else a.analysis.value("step_latency_ms_p50")
    if traced is not None:
        parts.append(f"traced {value(traced, 'ms')}" if light else f"step latency p50 {value(traced, 'ms')} (traced)")
    tps = a.analysis.value("tokens_per_s")
    if tps is not None:
        parts.append(value(tps, "tokens/s"))
    return Text("; ".join(parts) or "no step latency measured")


def numbered(rank: str, body: RenderableType) -> Table:
    """``rank`` in its own column, so a wrapped line stays under the text, not the number."""
    t = Table.grid(padding=(0, 1))
    t.add_column(no_wrap=True)
    t.add_column()
    t.add_row(Text(rank, style="bold"), body)
    return t


def report_renderable(a: Diagnosis, detailed: int = DETAILED, table: bool = True) -> RenderableType:
    """The ranked findings of one run, compact: the top failures with their evidence in
    numbers, estimate and first fix; the other failures one line each; passed checks in
    one line; the checks not evaluated grouped by what would evaluate them."""
    from perfdoctor.reports import common
    from perfdoctor.rules.engine import verdict

    v = verdict(a.findings)
    head = {"fail": "FAIL", "pass": "PASS", "not_evaluated": "NOT EVALUATED"}[v["status"]]
    style = {"fail": "bold red", "pass": "bold green", "not_evaluated": "bold yellow"}[v["status"]]
    parts: list[RenderableType] = [latency_line(a), Text(f"{head}: {common.counts_text(v['counts'])}", style=style)]
    fails = [f for f in a.findings if f.status == "fail"]
    for i, f in enumerate(fails):
        title = Text()
        title.append(f"[{f.severity}] ", style={"critical": "bold red", "error": "red", "warning": "yellow"}.get(f.severity, ""))
        title.append(f.rule_id, style="bold")
        rank = f"{f.rank or i + 1}."
        if i < detailed:
            title.append(f" — {f.title}")
            lines: list[RenderableType] = [title, Text(f"{common.measured(f)}   target {common.condition(f)}")]
            est = common.estimate_line(f, a.analysis)
            if est:
                overlap = common.overlap_line(f)
                lines.append(Text(est + (f" ({overlap})" if overlap else ""), style="green"))
            if f.remediation is not None and f.remediation.steps:
                lines.append(Text(f"fix: {f.remediation.steps[0]}"))
            parts.append(numbered(rank, Group(*lines)))
        else:
            title.append(f"  {common.measured(f)} (target {common.condition(f)})")
            parts.append(numbered(rank, title))
    passed = [f.rule_id for f in a.findings if f.status == "pass"]
    if passed:
        parts.append(Text(f"passed: {', '.join(passed)}", style="green"))
    missing = [f for f in a.findings if f.status == "not_evaluated"]
    if missing and table:
        parts.append(not_evaluated_table(missing))
    elif missing:
        parts.append(Text(f"not evaluated: {', '.join(f.rule_id for f in missing)}", style="yellow"))
    return Group(*parts)


def not_evaluated_table(findings: Sequence[Any]) -> Table:
    """Rules not evaluated, one row per way of collecting what they need."""
    from perfdoctor.reports.common import how_to_collect

    groups: dict[str, list[str]] = {}
    for f in findings:
        groups.setdefault(short_how(how_to_collect(f)), []).append(f.rule_id)
    t = Table(
        title="not evaluated (never counted as passed)",
        title_justify="left",
        title_style="yellow",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
    )
    t.add_column("rules", ratio=2, overflow="fold")
    t.add_column("would need", ratio=3, overflow="fold", style="dim")
    for how, ids in groups.items():
        t.add_row(Text(", ".join(ids)), Text(how))
    return t


def short_how(text: str) -> str:
    """What would evaluate a rule, without its parenthesised details (the full sentence is
    in ``perfdoctor report``): ``perfdoctor run --collect ncu``."""
    while True:
        shorter = re.sub(r"\s*\([^()]*\)", "", text)
        if shorter == text:
            return shorter.strip() or text
        text = shorter


def diff_renderable(diff: Any) -> RenderableType:
    """The diff, compact: the latency verdict as a speed-up, key metrics, findings."""
    from perfdoctor.reports.diff_report import fact, fmt_change, kernel_summary, sample_reason

    name = latency_sample(diff)
    c = diff.samples.get(name)
    what = "step latency (light pass, no tracer)" if name.startswith("light") else "step latency (traced)"
    parts: list[RenderableType] = []
    if diff.mismatches:
        parts.append(Text("NOT LIKE FOR LIKE: " + "; ".join(f"{m.field}: {fact(m.before)} vs {fact(m.after)}" for m in diff.mismatches), style="bold red"))
    if c is None or c.median_before is None or c.median_after is None:
        parts.append(Text(f"{what}: not measured on both sides"))
    else:
        ratio = c.median_before / c.median_after if c.median_after else float("inf")
        line = Text(f"{what}: {num(c.median_before)} → {value(c.median_after, 'ms')} per step, ", style="bold")
        if c.verdict in ("lower", "higher"):
            line.append(speedup_words(ratio), style="bold green" if ratio >= 1 else "bold red")
        else:
            line.append(c.verdict)
        parts.append(line)
        stats = [f"{c.n_before} vs {c.n_after} steps"]
        if c.p_value is not None:
            stats.append(f"Mann-Whitney p = {num(c.p_value)}")
        iv = c.interval
        if iv is not None:
            stats.append(f"after/before {interval(iv.ratio, iv.low, iv.high, iv.level)}")
        parts.append(indented(", ".join(stats), style="dim"))
        if c.verdict == "inconclusive":
            parts.append(indented(sample_reason(c), style="dim"))
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    t.add_column("metric (↑/↓ better)", no_wrap=True)
    for col in ("before", "after", "change"):
        t.add_column(col, justify="right", no_wrap=True)
    shown = 0
    for key in DIFF_METRICS:
        m = next((m for m in diff.metrics if m.key == key), None)
        if m is None or m.before is None or m.after is None:
            continue
        arrow = {True: " ↑", False: " ↓"}.get(m.higher_is_better, "")
        t.add_row(key + arrow, value(m.before, m.unit), value(m.after, m.unit), fmt_change(m))
        shown += 1
    if shown:
        parts.append(t)
    parts.append(Text(f"kernels: {kernel_summary(diff.kernels)}"))
    f = diff.findings
    if f is not None:
        parts.append(Text(f"findings fixed: {', '.join(f.fixed) or 'none'}", style="green" if f.fixed else ""))
        parts.append(Text(f"findings new: {', '.join(f.new) or 'none'}", style="red" if f.new else ""))
        parts.append(Text(f"still failing: {', '.join(f.persisting) or 'none'}"))
    return Group(*parts)


# --------------------------------------------------------------------------- the command


def show_recording(console: Console, rec: Recording, more: bool, progress: Console | None = None) -> None:
    """The recorded reports and diffs, analysed now with this perfdoctor."""
    from perfdoctor import __version__

    console.print(Rule("Recorded, not live", style="cyan"))
    what = (
        "a CPU TEST RECORDING (scripts/record-demo --cpu), not the real thing"
        if rec.cpu
        else "the bundled engine (Llama-3.2-1B decode, batch 1, random weights)"
    )
    h = rec.headline
    console.print(
        Text(
            f"Run bundles of {what}, {rec.provenance()} (scripts/record-demo, "
            f"{h.get('tokens', '?')} tokens, {h.get('steps', '?')} traced steps), "
            f"analysed now by perfdoctor {__version__}. These are not this machine's numbers."
        )
    )
    if progress is not None and progress.is_terminal:
        with progress.status("analysing the recorded bundles"):
            _, analysed, diffs = measure(rec.root, rec.labels, rec.pairs)
    else:
        _, analysed, diffs = measure(rec.root, rec.labels, rec.pairs)
    for i, label in enumerate(rec.labels):
        a = analysed[label]
        note = VARIANT_NOTES.get(label, "")
        console.print()
        console.print(Rule(f"recorded: {label}" + (f" ({note})" if note else ""), align="left"))
        console.print(Text(engine_command(rec.args(label)), style="dim"))
        console.print(report_renderable(a, DETAILED if i == 0 or more else 1, table=i == 0 or more))
    for (b, a_), d in zip(rec.pairs, diffs):
        console.print()
        console.print(Rule(f"recorded diff: {b} → {a_}", align="left"))
        console.print(Text(f"perfdoctor diff {b} {a_}", style="dim"))
        console.print(diff_renderable(d))
    console.print()
    # -o outside the package and the working tree: the bundles are read, never written into.
    html_out = Path(tempfile.gettempdir()) / "perfdoctor-demo-report.html"
    console.print(Text(f"The bundles are in {rec.root}: perfdoctor report {rec.root / rec.labels[0]} --format html -o {html_out}", style="dim"))


def live_runs(console: Console, progress: Console, variants: list[tuple[str, list[str]]], pairs: list[tuple[str, str]], out: Path, steps: int, collect: list[str] | None) -> int:
    """Profile each variant with perfdoctor run, show its findings, then the diffs."""
    from perfdoctor.compare.diff import diff_runs
    from perfdoctor.rules.engine import load_rules
    from perfdoctor.record.options import RunOptions
    from perfdoctor.record.run import execute

    ruleset = load_rules()
    analysed: dict[str, Diagnosis] = {}
    for label, args in variants:
        console.print()
        console.print(Rule(f"live: {label}" + (f" ({VARIANT_NOTES[label]})" if label in VARIANT_NOTES else ""), align="left"))
        console.print(Text(engine_command(args), style="dim"))
        options = RunOptions(
            target=["-m", "perfdoctor.engine", *args],
            warmup=2,
            steps=steps,
            step=STEP,
            out=out,
            name=f"demo-{label}",
            collect=collect,
        )
        code, bundle = execute(options, progress)
        if code != 0:
            console.print(f"[red]the engine exited with {code}; bundle: {bundle}[/]")
            return code
        analysed[label] = analyse(label, bundle, ruleset)
        console.print(report_renderable(analysed[label]))
        console.print(Text(f"bundle: {bundle}", style="dim"))
    for b, a in pairs:
        console.print()
        console.print(Rule(f"live diff: {b} → {a}", align="left"))
        console.print(diff_renderable(diff_runs(analysed[b], analysed[a])))
    return 0


def live_cpu(console: Console, progress: Console, out: Path, steps: int, tokens: int) -> int:
    """A short perfdoctor run of the tiny engine on this CPU: collection works here."""
    from perfdoctor.bundle.manifest import read_valid_manifest
    from perfdoctor.bundle.protocol import Collector
    from perfdoctor.record.options import RunOptions
    from perfdoctor.reports import common
    from perfdoctor.record.run import execute

    args = ["--variant", "eager", "--config", "tiny", "--device", "cpu", "--tokens", str(tokens), "--ctx", "256"]
    console.print()
    console.print(Rule("Live, on this machine", style="cyan"))
    console.print(
        Text(
            "Now a real run here: perfdoctor run of the engine's tiny config (random "
            "weights, a few MB) on this CPU. The GPU checks need a GPU; this shows the "
            "collection and the light pass's step timing working.",
        )
    )
    console.print(Text(engine_command(args), style="dim"))
    options = RunOptions(
        target=["-m", "perfdoctor.engine", *args],
        warmup=2,
        steps=steps,
        step=STEP,
        out=out,
        name="demo-cpu",
    )
    code, bundle = execute(options, progress)
    if code != 0:
        console.print(f"[red]the engine exited with {code}; bundle: {bundle}[/]")
        return code
    a = analyse("cpu", bundle)
    light = light_latencies(a)
    if light:
        console.print(Text(f"live step latency on this CPU: p50 {value(median(light), 'ms')} (light pass, no tracer, {len(light)} steps)", style="bold"))
    else:
        console.print(Text("live step latency: the light pass saw no step", style="yellow"))
    manifest = read_valid_manifest(bundle)
    t = Table(title="collectors on this machine", title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    t.add_column("collector", no_wrap=True)
    t.add_column("status", overflow="fold")
    for name, entry in (manifest.collectors or {}).items():
        status = str(Collector.from_json(entry).status)
        if len(status) > 110:  # nsys's list of folders searched: perfdoctor doctor prints it
            status = status[: status.find(" (", 20)] + " (perfdoctor doctor lists where it looked)" if " (" in status[20:] else status
        t.add_row(name, Text(status, style="green" if status == "ok" else "dim"))
    console.print(t)
    v = run_numbers(a)
    c = v["counts"]
    console.print(Text(f"checks on this run: {common.counts_text(c)} (they need GPU activity)", style="dim"))
    console.print(Text(f"bundle: {bundle}\nnext: perfdoctor analyze {bundle}\n      perfdoctor doctor   (what this machine offers, and why)"))
    return 0


# --------------------------------------------------------------------------- recording helpers
# Used by scripts/record-demo: trim a run bundle to what the report and the diff read, and
# write headline.json.

DROP_SUFFIXES = (".nsys-rep", ".sqlite", ".qdstrm", ".log")
TRIMMED = "trimmed.json"  # in each trimmed bundle: the original bundle's name and what was left out
NVML_MARGIN_NS = 2_000_000_000


def _trace_span_ns(trace: Path) -> int | None:
    """Length of the Kineto trace (first event start to last event end), in ns."""
    try:
        events = json.loads(gzip.decompress(trace.read_bytes())).get("traceEvents", [])
    except (OSError, ValueError):
        return None
    starts = [e["ts"] for e in events if isinstance(e.get("ts"), (int, float)) and e.get("ph") == "X"]
    ends = [e["ts"] + e.get("dur", 0) for e in events if isinstance(e.get("ts"), (int, float)) and e.get("ph") == "X"]
    if not starts:
        return None
    return int((max(ends) - min(starts)) * 1000)


def trim_bundle(src: Path, dst: Path) -> list[str]:
    """Copy the parts of run bundle ``src`` that analysis reads into ``dst``.

    Kept: manifest.json, metrics.json, raw/ except the nsys report and export and the
    pass logs; the NVML samples of the torch pass cut to the traced window (± 2 s), those
    of other passes dropped (the bundle loader reads the samples of the pass whose trace
    it loads). Returns what was left out.
    """
    dropped: list[str] = []
    (dst / RAW).mkdir(parents=True, exist_ok=True)
    for name in (MANIFEST, "metrics.json"):
        if (src / name).exists():
            shutil.copy2(src / name, dst / name)
    for path in sorted((src / RAW).iterdir()):
        rel = f"{RAW}/{path.name}"
        if not path.is_file() or path.name.endswith(DROP_SUFFIXES):
            dropped.append(rel)
        elif path.name.startswith("nvml-") and path.name.endswith(".jsonl"):
            if path.name != "nvml-torch.jsonl":
                dropped.append(rel)
                continue
            kept, total = _trim_nvml(path, dst / rel, src / RAW)
            if kept < total:
                dropped.append(f"{rel}: {total - kept} of {total} samples outside the traced window")
        elif path.name.endswith(".json.gz"):
            # Recompress at -9 without a timestamp: smaller, and re-recording changes only real bytes.
            data = gzip.decompress(path.read_bytes())
            (dst / rel).write_bytes(gzip.compress(data, compresslevel=9, mtime=0))
        else:
            shutil.copy2(path, dst / rel)
    write_json(dst / TRIMMED, {"from": src.name, "left_out": dropped})
    return dropped


def trim_differences(src: Path, dst: Path, label: str) -> list[str]:
    """What the trimmed bundle ``dst`` measures differently from the original ``src``:
    every metric, the light pass's latencies and the rule verdicts. Empty when trimming
    lost nothing the demo shows."""
    full, cut = analyse(label, src), analyse(label, dst)
    out = []
    for key, m in full.analysis.metrics.items():
        other = cut.analysis.metrics.get(key)
        if other is None or other.value != m.value:
            out.append(f"{key}: {m.value} untrimmed, {None if other is None else other.value} trimmed")
    if light_latencies(full) != light_latencies(cut):
        out.append("the light pass's step latencies differ")
    verdicts = [(f.rule_id, f.status) for f in full.findings], [(f.rule_id, f.status) for f in cut.findings]
    if verdicts[0] != verdicts[1]:
        out.append(f"rule verdicts differ: {verdicts[0]} untrimmed, {verdicts[1]} trimmed")
    return out


def _trim_nvml(path: Path, dst: Path, raw: Path) -> tuple[int, int]:
    from perfdoctor.bundle.protocol import PassResults
    from perfdoctor.errors import UsageError

    lines = path.read_text().splitlines()
    try:
        sync = (PassResults.from_json(json.loads((raw / "torch.json").read_text())).clock_sync or {})["monotonic_ns"]
    except (OSError, ValueError, KeyError, TypeError, UsageError):
        sync = None
    span = _trace_span_ns(raw / TORCH_TRACE)
    if sync is None or span is None:
        dst.write_text("\n".join(lines) + "\n")
        return len(lines), len(lines)
    lo, hi = sync - NVML_MARGIN_NS, sync + span + NVML_MARGIN_NS
    kept = []
    for line in lines:
        try:
            t = int(json.loads(line)["t"])
        except (ValueError, KeyError, TypeError):
            continue
        if lo <= t <= hi:
            kept.append(line)
    dst.write_text("".join(f"{line}\n" for line in kept))
    return len(kept), len(lines)


def _option(args: Sequence[str], name: str) -> str | None:
    return next((args[i + 1] for i, a in enumerate(args[:-1]) if a == name), None)


def write_headline(root: Path, mode: str, runs: list[tuple[str, list[str]]], pairs: list[tuple[str, str]], command: str) -> dict[str, Any]:
    """Measure the trimmed bundles ``root/<label>`` and write ``root/headline.json``: where,
    when and how they were recorded (from their manifests) and the numbers (:func:`measure`)."""
    from perfdoctor import __version__
    from perfdoctor.bundle.layout import SCHEMA as BUNDLE_SCHEMA
    from perfdoctor.bundle.manifest import read_valid_manifest
    from perfdoctor.bundle.protocol import Collector
    from perfdoctor.analysis.metrics import SCHEMA as METRICS_SCHEMA

    manifests = {label: read_valid_manifest(root / label) for label, _ in runs}
    first = manifests[runs[0][0]]
    gpu = first.gpu or {}
    env = first.environment or {}
    options = first.options or {}
    numbers, _, _ = measure(root, [label for label, _ in runs], pairs)
    trimmed = {}
    for label, _ in runs:
        try:
            trimmed[label] = json.loads((root / label / TRIMMED).read_text())
        except (OSError, ValueError):
            trimmed[label] = None
    headline = {
        "schema": HEADLINE_SCHEMA,
        "mode": mode,
        "recorded_at": first.started_at or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "perfdoctor": env.get("perfdoctor") or __version__,
        "bundle_schema": BUNDLE_SCHEMA,
        "metrics_schema": METRICS_SCHEMA,
        "device": gpu.get("name") or ("a CPU (no GPU)" if mode == "cpu" else "an unknown GPU"),
        "driver": gpu.get("driver_version"),
        "torch": env.get("torch"),
        "cuda": env.get("cuda"),
        "python": env.get("python"),
        "command": command,
        "tokens": int(_option(runs[0][1], "--tokens") or 0) or None,
        "warmup": options.get("warmup"),
        "steps": options.get("steps"),
        "collectors": {
            label: sorted(k for k, v in (m.collectors or {}).items() if Collector.from_json(v).status == "ok")
            for label, m in manifests.items()
        },
        "trimmed": trimmed,
        "runs": [{"label": label, "args": args} for label, args in runs],
        "diffs": [list(p) for p in pairs],
        "numbers": numbers,
    }
    headline["readme"] = readme_quotes(numbers)
    write_json(root / HEADLINE, headline)
    return headline
