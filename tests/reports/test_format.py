"""One number, one text: a ratio, a count and a duration read the same in every output.

The real commands on a real trace (``analyze``, ``report --format md/html/json``, ``diff``
with ``--md``/``--json``, ``gate`` with ``--json``/``--junit``) against
:func:`perfdoctor.text.value` of the number they all measured. Before one formatter,
``memory_bubble_ratio`` printed as 91.70 % (analyze's table), 91.7 % (findings) and 0.917
(diff and gate).
"""

from __future__ import annotations

import json
import re

import pytest

from conftest import FIXTURES, run_cli_inprocess
from perfdoctor.reports.format import html, md_cell, md_text
from perfdoctor.text import count, duration_us, elapsed, interval, nbytes, num, percent, ratio, relative, setting, tick, times, value

BEFORE = FIXTURES / "h200-decode-eager-5steps.kineto.json.gz"
AFTER = FIXTURES / "h200-decode-eager-5steps-rerun.kineto.json.gz"
# (metric, unit): a ratio, a count, a duration; each appears in findings, diff and gate
METRICS = [("memory_bubble_ratio", "ratio"), ("kernels_per_step", "count"), ("step_latency_ms_p99", "ms")]


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> dict[str, str]:
    """Every text output of the five commands, by name, and the measured values."""
    d = tmp_path_factory.mktemp("format")
    texts: dict[str, str] = {}
    r = run_cli_inprocess("analyze", BEFORE, "--json", d / "metrics.json")
    assert r.returncode in (0, 1), r.stderr
    texts["analyze"] = r.stdout
    for fmt in ("md", "html", "json"):
        r = run_cli_inprocess("report", BEFORE, "--format", fmt, "-o", d / f"report.{fmt}")
        assert r.returncode in (0, 1), r.stderr
        texts[f"report {fmt}"] = (d / f"report.{fmt}").read_text()
    r = run_cli_inprocess("diff", BEFORE, AFTER, "--md", d / "diff.md", "--json", d / "diff.json")
    assert r.returncode == 0, r.stderr
    texts["diff"], texts["diff md"] = r.stdout, (d / "diff.md").read_text()
    budgets = [a for key, _ in METRICS for a in ("--fail-on", f"{key}:+50%")]
    r = run_cli_inprocess("gate", AFTER, "--baseline", BEFORE, *budgets, "--json", d / "gate.json", "--junit", d / "gate.xml")
    assert r.returncode == 0, r.stdout + r.stderr
    texts["gate"], texts["gate junit"] = r.stdout, (d / "gate.xml").read_text()
    texts["gate json"] = "\n".join(c["message"] for c in json.loads((d / "gate.json").read_text())["checks"])
    texts["metrics"] = (d / "metrics.json").read_text()
    texts["diff json"] = (d / "diff.json").read_text()
    return texts


def _measured(outputs: dict[str, str], key: str) -> tuple[float, float]:
    """The metric before and after, as diff.json has it (before: analyze's metrics.json too)."""
    m = json.loads(outputs["diff json"])["metrics"][key]
    assert m["before"] == json.loads(outputs["metrics"])["metrics"][key]["value"]
    return m["before"], m["after"]


@pytest.mark.parametrize("key,unit", METRICS)
def test_one_text_per_number_in_every_output(outputs, key, unit):
    before, after = (value(v, unit) for v in _measured(outputs, key))
    # the findings reports: every "KEY = VALUE" (the measured value, the values beside it)
    # and analyze's metric table row
    for name in ("analyze", "report md", "report html"):
        text = outputs[name].replace("\\_", "_")
        shown = re.findall(rf"\b{key} = (\d[^\s,;(<]*(?: %| ms)?)", text) + re.findall(rf"\b{key}\s+│\s+([^│]+?)\s+│", text)
        assert set(shown) == {before} or (name == "analyze" and unit == "ms" and not shown), (name, shown, before)
    # analyze's latency table: the p99 cell in its "ms" row
    row = next(ln for ln in outputs["analyze"].splitlines() if ln.lstrip().startswith("critical path ms"))
    assert unit != "ms" or f"│ {before.removesuffix(' ms')} │" in row, row
    # diff (terminal and Markdown) and gate (terminal, JSON messages, JUnit): before → after
    for name in ("diff", "diff md"):
        row = next(ln for ln in outputs[name].splitlines() if re.search(rf"\b{key}\b", ln))
        assert before in row and after in row, (name, row)
    for name in ("gate", "gate json", "gate junit"):
        assert f"{before} → {after}" in outputs[name], (name, outputs[name][:2000])


def test_json_values_stay_numbers(outputs):
    """findings.json keeps the number; only its words come from text.value."""
    doc = json.loads(outputs["report json"])
    f = next(f for f in doc["findings"] if f["metric"] == "memory_bubble_ratio")
    assert isinstance(f["value"], float) and 0 < f["value"] < 1
    assert doc["verdict"]["line"].count(" ms per step") == 1


def test_the_rules():
    assert value(0.9482, "ratio") == "94.8 %"
    assert value(0.0042, "ratio") == "0.42 %"  # below 1 % the digits after the point matter
    assert value(863.0, "count") == "863" and value(863.5, "count") == "863.5" and value(0.02, "count") == "0.02"
    assert count(0, signed=True) == "+0" and count(-4590, signed=True) == "-4,590"
    assert value(25.09, "ms") == "25.1 ms" and value(999.6, "ms") == "1,000 ms"  # never "1e+03"
    assert value(177.3, "1/s") == "177 /s" and value(None, "ms") == "—" and value(1.0, "flag") == "yes"
    assert nbytes(1.2e9) == "1.2 GB" and nbytes(512) == "512 B"
    assert duration_us(4) == "4 µs" and duration_us(12_345, signed=True) == "+12.3 ms" and duration_us(-999.6, signed=True) == "-1,000 µs"
    assert duration_us(2_500_000) == "2,500 ms"  # the lead lines said "2.5e+03 ms"
    # a relative change: diff's change column, and a budget's check with two places
    assert relative(0.0313) == "+3.1%" and relative(-0.7524) == "-75.2%" and relative(0.0504, 2) == "+5.04%"


def test_the_rules_of_the_words_below_the_reports():
    """The formatters the analysis' notes, the rules' evidence and estimates, compare's reasons
    and run's lines use: one per concept, each with its reason in text.py."""
    assert percent(0.526) == "52.6 %" == value(0.526, "ratio") and percent(0.00277) == "0.277 %"
    assert num(0.5, signed=True) == "+0.5" and num(-1980, signed=True) == "-1,980"
    assert num(2.004, signed=True, digits=4) == "+2.004" and num(2.004, signed=True) == "+2"  # against a budget of 2
    assert nbytes(2 * 1024**3, binary=True) == "2 GiB" and nbytes(1000, binary=True) == "1000 B"
    assert times(3.21) == "3.21x" and times(1.2) == "1.2x"
    # an after/before ratio on the grid of its budget: 1.0049 is not 1
    assert ratio(1.0049) == "1.005" and ratio(1.05) == "1.050"
    assert interval(1.0134, 1.0021, 1.0243, 0.95) == "1.013x, 95% CI 1.002–1.024"
    assert setting(0.85) == "0.85" and setting(2.0) == "2" and setting(1.0625) == "1.0625"  # as written, not rounded
    assert tick(12.25) == "12.25" and tick(12_345.0) == "12,345" and tick(0.0) == "0"
    assert elapsed(42.4) == "42 s" and elapsed(125) == "2 min 5 s"


def test_one_escaping_for_untrusted_text():
    """Markdown (findings, diff, gate) and HTML escape a trace's names one way each."""
    assert md_cell("x|<b>`y`</b>\x1b[31m") == "x&#124;&lt;b&gt;&#96;y&#96;&lt;/b&gt;"
    assert md_text("a_b*c") == "a\\_b\\*c"
    assert html('"<x>"') == "&quot;&lt;x&gt;&quot;"
