"""Issue 32, item 4: a CPU user gets a diagnosis: the operator table, the traced step latency
and what holds, in the terminal, Markdown and JSON; GPU metrics said absent once, never a
row of "—" each."""

from __future__ import annotations

import dataclasses
import gzip
import json
import re
import shutil

import numpy as np
import pytest

from conftest import FIXTURES, run_cli_inprocess
from perfdoctor.pipeline import diagnose
from perfdoctor.reports import cpu
from perfdoctor.reports.summary import header_lines
from perfdoctor.text import num, value

CPU_MLP = FIXTURES / "cpu-mlp-5steps.kineto.json.gz"
NO_GPU = "GPU metrics and checks: absent, no GPU ran in this trace"


def test_analyze_of_a_cpu_trace_shows_the_operators_not_rows_of_dashes() -> None:
    r = run_cli_inprocess("analyze", CPU_MLP, "--json", "-")
    assert r.returncode == 0, r.stderr
    out = r.stderr.splitlines()  # --json -: the JSON on stdout, the report on stderr
    assert out[1].startswith("Where the step went (CPU): ") and "traced step ranges, mean of 5 steps" in out[1]
    assert sum(NO_GPU in line for line in out) == 1
    assert not any("—" in line.split("│")[1] for line in out if line.count("│") >= 2)  # no cell of "—"
    assert "absent, not zero" not in r.stderr  # the GPU metrics are not listed one by one
    ops = [line.split("│") for line in out if line.lstrip().startswith("aten::")]
    assert [cells[0].strip() for cells in ops] == ["aten::mm", "aten::tanh", "aten::matmul", "aten::resolve_conj"]
    doc = json.loads(r.stdout)["cpu"]
    mm = doc["ops_per_step"][0]
    assert mm["name"] == "aten::mm" and mm["calls"] == 160  # 40 units x 4 matmuls per step
    assert num(mm["self_ms"]) == ops[0][2].strip()  # the table shows the JSON's number
    assert doc["step_latency_ms"]["p50"] > 0 and doc["steps"] == 5
    shown = [o["kind"] for o in doc["observations"]]
    assert [line for line in out if line.startswith("CPU ")] == [
        f"CPU {i}. {o['title']} — {o['evidence']}" for i, o in enumerate(doc["observations"], start=1)] and shown
    not_eval = next(line for line in out if line.startswith("Not evaluated: no GPU ran"))
    assert "memory-bubbles" in not_eval and "launch-rate" in not_eval
    # the verdict names them: a CPU run's GPU checks cannot run, and "0 of 34 checks fail"
    # alone read as nothing found (pytorch-tabnet's fit, 2026-12-06)
    first = doc["observations"][0]
    said = f" — CPU: {len(shown)} observations, first: {first['title']} (up to {value(first['ms_per_step'], 'ms')} per step)"
    assert out[0].endswith(said)


def test_the_brief_of_a_cpu_trace_lists_what_its_breakdown_shows() -> None:
    from conftest import run_cli_inprocess

    r = run_cli_inprocess("analyze", CPU_MLP, "--brief")
    assert r.returncode == 0, r.stderr
    doc = diagnose(CPU_MLP, warnings=False).analysis.cpu
    lines = r.stdout.splitlines()
    assert lines[0].startswith("NOT EVALUATED: ") and lines[1].startswith("Where the step went (CPU): ")
    assert lines[2:] == [f"CPU {i}. {o.title} — {o.evidence}" for i, o in enumerate(doc.observations, start=1)] and len(lines) == 4


def test_the_markdown_report_of_a_cpu_trace_has_the_operator_table() -> None:
    r = run_cli_inprocess("report", CPU_MLP, "--format", "md", "-o", "-")
    assert r.returncode == 0, r.stderr
    md = r.stdout
    assert "### Where the step went (CPU)" in md and md.count(NO_GPU) == 1
    assert "| operator | calls/step | self ms/step | total ms/step | self % of step |" in md
    assert "| aten::mm | 160 |" in md
    assert "No GPU ran: " in md and "| `memory-bubbles` |" not in md  # the GPU checks in one line


def test_the_terminal_report_of_a_cpu_trace_has_the_operator_table_once() -> None:
    r = run_cli_inprocess("report", CPU_MLP, "--format", "terminal", "-o", "-")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("Operators per step, by self time") == 1 and r.stdout.count(NO_GPU) == 1


def test_the_html_report_of_a_cpu_trace_has_the_operator_table_and_the_step_latency_plot(tmp_path) -> None:
    page = tmp_path / "report.html"
    r = run_cli_inprocess("report", CPU_MLP, "--format", "html", "-o", page)
    assert r.returncode == 0, r.stderr
    html = page.read_text()
    md = run_cli_inprocess("report", CPU_MLP, "--format", "md", "-o", "-").stdout
    top = next(line for line in md.splitlines() if line.startswith("| aten::"))  # the Markdown's top operator
    cells = [c.strip() for c in top.strip("|").split("|")]
    assert cells[:3] == ["aten::mm", "160", cells[2]] and float(cells[2]) > 0
    assert "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>" in html  # its row, the same numbers
    assert html.count(NO_GPU) == 1 and "Where the step went (CPU):" in html
    assert "Operators per step, by self time" in html
    # The plot's points are the trace's own step ranges (train_step, dur in us), read here independently.
    doc = json.loads(gzip.decompress(CPU_MLP.read_bytes()))
    want = [e["dur"] / 1e3 for e in doc["traceEvents"] if e.get("name") == "train_step"]
    drawn = re.findall(r"<title>step \d+: ([^<]+)</title></circle>", html)
    assert len(want) == 5 and drawn == [value(v, "ms") for v in want]
    assert "5 steps" in html and "No latency series to draw" not in html


LOADED = FIXTURES / "bundles" / "ddpm-cpu-loaded"  # diffusers' DDPMPipeline, traced while another process took the cores


def _loaded(tmp_path):
    b = tmp_path / "ddpm"
    shutil.copytree(LOADED, b)  # analyze writes metrics.json into the bundle
    return diagnose(b, warnings=False)


def test_a_cpu_runs_traced_steps_are_timed_and_a_window_in_another_regime_is_said(tmp_path) -> None:
    """A CPU-only run's traced step latency is its steps' host ranges, so the trace-window
    check works there too: it had no traced latency, and diffusers' window at 74x the light
    pass's steps went unsaid (2026-12-06)."""
    doc = json.loads(gzip.decompress((LOADED / "raw" / "torch-trace.json.gz").read_bytes()))
    starts = sorted(e["ts"] for e in doc["traceEvents"] if e.get("name") == "UNet2DModel.forward")
    want = float(np.median(np.diff(starts))) / 1e3  # each call to the next (the step: a call and the host work after it)
    d = _loaded(tmp_path)
    a = d.analysis
    assert a.value("traced_step_latency_ms_p50") == pytest.approx(want, rel=1e-6)
    light = a.value("step_latency_ms_p50")
    assert a.metrics["step_latency_ms_p50"].source == "light" and 10 < light < 20
    assert a.value("profiler_overhead_ratio") == pytest.approx(want / light, rel=1e-6)
    (line,) = [x for x in header_lines(a) if x.startswith("trace window:")]
    assert f"p50 {value(want, 'ms')} against {value(light, 'ms')}" in line
    assert f"not the steady state: untraced, the light pass's p50 is {value(light, 'ms')}" in cpu.headline(a.cpu, cpu.tracer_cost(a))


def test_a_window_faster_than_a_light_pass_that_waited_for_cpus_says_the_load_moved(tmp_path) -> None:
    """datasets.map over a BERT on a shared CPU (2026-12-07): the light pass's steps waited a
    median 8.76 ms of their 25.4 ms for a CPU and the window ran at 14.1 ms; the report said
    "a producer had run ahead, a backlog drained", which no producer did."""
    b = tmp_path / "embed"
    shutil.copytree(FIXTURES / "bundles" / "embed-cpu-contended", b)
    a = diagnose(b, warnings=False).analysis
    waits = a.light.cpu_wait_ns[a.light_series.steps] / 1e6  # by hand: the steady steps' waits
    light = a.value("step_latency_ms_p50")
    assert float(np.median(waits)) >= 0.2 * light and a.value("profiler_overhead_ratio") < 0.8
    (line,) = [x for x in header_lines(a) if x.startswith("trace window:")]
    assert f"waited for a CPU, median {value(float(np.median(waits)), 'ms')} of its {value(light, 'ms')}" in line
    assert "producer" not in line


@pytest.mark.parametrize("ratio, said", [(1.1, None), (3.7, "the tracer's own cost is in them"), (0.5, "not the steady state")])
def test_the_cpu_headline_says_what_the_traced_milliseconds_hold(tmp_path, ratio, said) -> None:
    """Pyro's SVI loop on the CPU: the breakdown's 7.3 ms per step against the light pass's 1.95
    ms, with no word that the tracer's events are in them (2026-12-06)."""
    a = _loaded(tmp_path).analysis
    m = a.metrics["profiler_overhead_ratio"]
    a.metrics["profiler_overhead_ratio"] = dataclasses.replace(m, value=ratio)
    clause = cpu.tracer_cost(a)
    if said is None:
        assert clause == ""
    else:
        assert clause.startswith(f"; {said}") and clause.endswith(value(a.value("step_latency_ms_p50"), "ms"))
