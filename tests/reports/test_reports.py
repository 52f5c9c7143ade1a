"""The findings reports: terminal, Markdown, findings.json and the offline HTML page.

The HTML page is opened in headless Chromium (Debian's ``chromium``): it must run its
script without errors, draw its plots, and its screenshot must show them. A crafted copy
of a real trace whose kernel and range names carry ``<script>`` and quotes checks that
names from a trace are rendered as text everywhere.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import zlib
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from conftest import FIXTURES
from perfdoctor.pipeline import diagnose as pipeline_diagnose, load_trace
from perfdoctor.analysis.metrics import Analysis, analyze
from perfdoctor.profile import SAMPLE_COLUMNS, Profile, frame
from perfdoctor.reports import html, json as json_report, markdown, terminal
from perfdoctor.reports.bundle import write_reports
from perfdoctor.cli.report import report_command
from perfdoctor.rules.engine import Finding, evaluate, load_rules
from perfdoctor.text import value

EAGER = FIXTURES / "h200-llama1b-eager-5steps.kineto.json.gz"
DEMO_EAGER = Path(__file__).parents[2] / "perfdoctor" / "demo" / "data" / "eager"  # a real H200 run bundle, NVML samples included
EVIL_KERNEL = 'evil"kernel\'&[red]x[/red]</script><script>alert("k")</script>'
EVIL_STEP = 'decode</script><script>alert(1)</script>"\'&[step]'


@lru_cache(maxsize=None)
def demo_bundle() -> tuple[Analysis, list[Finding]]:
    d = pipeline_diagnose(DEMO_EAGER, rules=(), warnings=False)
    return d.analysis, d.findings


@lru_cache(maxsize=None)
def eager() -> tuple[Analysis, list[Finding]]:
    a = analyze(load_trace(EAGER), step="decode_step")
    return a, evaluate(load_rules(), a)


def crafted_evil() -> tuple[Analysis, list[Finding]]:
    """CRAFTED EDGE CASE built from the real eager fixture: hostile kernel and range names.

    The most frequent kernel is renamed to carry quotes, ``&`` and ``</script><script>``,
    the step ranges are renamed likewise, and so is the trace path. The kernel name also
    carries rich markup (``[red]x[/red]``), which the terminal must print as text.
    """
    p = load_trace(EAGER)
    acts = p.activities.copy()
    top = acts.loc[acts["kind"] == "kernel", "name"].value_counts().index[0]
    acts.loc[acts["name"] == top, "name"] = EVIL_KERNEL
    ranges = p.ranges.copy()
    ranges.loc[ranges["name"] == "decode_step", "name"] = EVIL_STEP
    profile = Profile(activities=acts, calls=p.calls, ranges=ranges, samples=p.samples, counters=p.counters,
                      device=dict(p.device), origin=replace(p.origin, path="/tmp/</script><b>trace\".json"))
    a = analyze(profile)  # found as the most frequent range (the name is not a usable glob)
    return a, evaluate(load_rules(), a)


def with_nvml_samples(a: Analysis) -> tuple[Analysis, list[Finding]]:
    """CRAFTED EDGE CASE: the real eager profile plus synthetic NVML GPM series over its span
    (the fixture has none), so the bandwidth gauge and the NVML charts have data to draw."""
    p = a.profile
    lo, hi = a.steps.span
    t = np.linspace(lo - 5_000_000, hi + 5_000_000, 60).astype(np.int64)
    wave = 0.3 + 0.2 * np.sin(np.linspace(0, 6, len(t)))
    samples = frame(SAMPLE_COLUMNS, {
        "time_ns": np.concatenate([t, t, t]),
        "metric": ["dram_bw_util"] * len(t) + ["sm_occupancy"] * len(t) + ["power_w"] * len(t),
        "value": np.concatenate([wave, wave / 2, 300 + 100 * wave]),
        "source": ["nvml-gpm"] * (2 * len(t)) + ["nvml"] * len(t),
    })
    profile = Profile(activities=p.activities, calls=p.calls, ranges=p.ranges, samples=samples, counters=p.counters,
                      device={**p.device, "peak_dram_bw_gbps": 4800.0, "peak_source": "crafted"}, origin=p.origin)
    b = analyze(profile, step="decode_step")
    return b, evaluate(load_rules(), b)


# --- terminal / markdown / json ----------------------------------------------------------------

def test_terminal_report_has_verdict_ranked_findings_passes_and_not_evaluated() -> None:
    a, findings = eager()
    out = terminal.render(findings, a, width=160)
    # Issue 32: the verdict is the first line (a crash is read first); issue 28: where the
    # step went comes next, before any finding.
    first = out.splitlines()[0]
    assert out.index("Where the step went: ") < out.index("Findings, ranked")
    assert first.startswith("FAIL: ") and "top: memory-bubbles" in first and "steps/s if fixed" in first
    assert "1. [error] memory-bubbles" in out
    # Issue 32: one finding per cause: launch-rate (2.) shares memory-bubbles' estimate, so it
    # is named under it ("Same cause") and the next finding in full is 6. (dram-bandwidth since issue 28: the GEMVs judged by bandwidth).
    assert out.index("1. [error]") < out.index("Same cause, same estimate") < out.index("  launch-rate — ") < out.index("6. [")
    assert out.index("6. [") < out.index("Passed checks") < out.index("Not evaluated")
    assert "Most repeated short kernels" in out and "elementwise_kernel · MulFunctor" in out
    assert "needs l2_hit_rate" in out  # a check not evaluated says what it needs
    assert "torch.cuda.CUDAGraph()" in out  # the fix's code


def test_markdown_fits_a_pr_comment_and_escapes_names() -> None:
    a, findings = eager()
    md = markdown.render(findings, a)
    assert md.startswith("## perfdoctor findings") and len(md) < 65_536
    assert "### 1. `memory-bubbles`" in md and "<details><summary>Evidence and code</summary>" in md
    assert md.count("<details>") == md.count("</details>")
    assert md.count("```python") == md.count("```") / 2
    evil_a, evil_findings = crafted_evil()
    evil = markdown.render(evil_findings, evil_a)
    assert "<script" not in evil and "&lt;/script&gt;&lt;script&gt;" in evil


def test_findings_json_follows_the_documented_schema() -> None:
    a, findings = eager()
    doc = json.loads(json_report.render(findings, a, ["seed (built in)"]))
    assert doc["schema"] == "perfdoctor.findings/1"
    assert doc["verdict"]["status"] == "fail" and doc["verdict"]["top"] == "memory-bubbles"
    assert doc["source"]["steps"] == 5 and doc["source"]["step_name"] == "decode_step"
    assert doc["rule_packs"] == ["seed (built in)"]
    ranks = [f["rank"] for f in doc["findings"] if f["status"] == "fail"]
    assert ranks == list(range(1, len(ranks) + 1))
    documented = (Path(__file__).parents[2] / "docs" / "rules.md").read_text()
    for f in doc["findings"]:
        for key in f:
            assert f"`{key}`" in documented, f"findings.json key {key!r} is not documented in docs/rules.md"
        for e in f["evidence"]:
            assert all(len(row) == len(e["columns"]) for row in e["rows"])
    top = doc["findings"][0]
    assert top["estimate"]["recovered_ms_per_step"] > 30 and top["projected"]["steps_per_s"] > 100
    assert top["threshold_origin"].startswith("seed default")


def test_report_command_writes_each_format(tmp_path: Path) -> None:
    app = typer.Typer()
    app.command("report")(report_command)
    app.command("noop")(lambda: None)  # keep `report` a subcommand, as in perfdoctor.cli
    runner = CliRunner()
    for fmt, name in (("md", "r.md"), ("json", "r.json"), ("html", "r.html"), ("terminal", "r.txt")):
        out = tmp_path / name
        r = runner.invoke(app, ["report", str(EAGER), "--format", fmt, "-o", str(out), "--step", "decode_step"])
        assert r.exit_code == 0, r.output
        assert out.stat().st_size > 1000
    assert json.loads((tmp_path / "r.json").read_text())["schema"] == "perfdoctor.findings/1"
    r = runner.invoke(app, ["report", str(EAGER), "--format", "pdf"])
    assert "--format 'pdf'" in str(r.exception)


def test_report_on_a_run_bundle_rewrites_its_reports(tmp_path: Path) -> None:
    """A minimal bundle (manifest + the real Kineto fixture as raw/torch-trace.json.gz)."""
    bundle = tmp_path / "20261129-000000-decode"
    (bundle / "raw").mkdir(parents=True)
    shutil.copy(EAGER, bundle / "raw" / "torch-trace.json.gz")
    # The step comes from the bundle's manifest, as `perfdoctor run` chose it.
    (bundle / "manifest.json").write_text(json.dumps(
        {"schema": "perfdoctor.run/1", "step": "decode_*",
         "gpu": {"name": "NVIDIA H200", "peak_dram_bw_gbps": 4800.0, "peak_source": "nvml"}}))
    app = typer.Typer()
    app.command("report")(report_command)
    app.command("noop")(lambda: None)
    r = CliRunner().invoke(app, ["report", str(bundle), "--format", "md"])
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith("## perfdoctor findings")
    for name in ("report.md", "report.html", "findings.json"):
        assert (bundle / name).stat().st_size > 1000, name
    doc = json.loads((bundle / "findings.json").read_text())
    assert doc["source"]["step_name"] == "decode_*" and doc["source"]["steps"] == 5  # the glob run used
    advice = next(f for f in doc["findings"] if f["id"] == "model-fits-bandwidth")
    assert advice["status"] == "advisory"  # the manifest's peak bandwidth made it evaluable
    assert "13B" in json.dumps(advice["evidence"])


def test_bundle_reports_are_written_together(tmp_path: Path) -> None:
    a, findings = eager()
    paths = write_reports(tmp_path, findings, a, ["seed (built in)"])
    assert sorted(p.name for p in paths) == ["findings.json", "report.html", "report.md"]
    assert all(p.stat().st_size > 1000 for p in paths)


# --- HTML ------------------------------------------------------------------------------------

def test_html_is_self_contained_and_escapes_every_trace_name() -> None:
    a, findings = crafted_evil()
    page = html.render(findings, a)
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", page)  # nothing from the network
    assert page.count("<script") == 3  # error capture, data, ready marker: none from the trace
    assert "alert(" in page  # the hostile text is there...
    assert "<script>alert" not in page and "</script><b>" not in page  # ...but never as markup
    assert "evil&quot;kernel&#x27;&amp;" in page
    data = page.split('<script type="application/json" id="pd-data">', 1)[1].split("</script>", 1)[0]
    assert "<" not in data and json.loads(data)["source"]["step_name"] == EVIL_STEP
    out = terminal.render(findings, a)
    assert "[red]x[/red]" in out  # rich markup in a name is printed, not interpreted


def test_html_charts_have_time_axes_units_a_step_latency_plot_and_the_trace_viewers(tmp_path: Path) -> None:
    # Issue 32: NVML charts without a time axis printed "1.98e+03 / 1.98e+03" on flat lines;
    # no step-latency plot; no way from the report to a timeline viewer. Real H200 bundle.
    a, findings = demo_bundle()
    charts = {re.search(r'aria-label="([^"]+) over time"', c).group(1): c for c in html.nvml_charts(a, findings)}
    assert "throttle_reasons" not in charts and {"power_w", "sm_clock_mhz", "dram_bw_util", "mem_used_bytes"} <= set(charts)
    for metric, svg in charts.items():
        labels = re.findall(r"<text[^>]*>([^<]*)</text>", svg)
        assert "seconds from the run start (the first NVML sample)" in labels, metric
        assert [s for s in labels if re.fullmatch(r"[\d.,]+ s", s)], metric  # time ticks in seconds
        assert not [s for s in labels if re.search(r"\de[+-]?\d", s)], (metric, labels)
    samples = a.profile.samples
    sm = samples[samples["metric"] == "sm_clock_mhz"]["value"]
    assert sm.nunique() == 1 and sm.iloc[0] == 1980.0  # flat in the recording, so:
    assert re.findall(r"<text[^>]*>([^<]*)</text>", charts["sm_clock_mhz"]).count("1980 MHz") == 1
    assert "flat" in charts["sm_clock_mhz"]
    power = samples[samples["metric"] == "power_w"]["value"]
    assert power.nunique() > 1 and re.search(r">\d[\d.]* W</text>", charts["power_w"])
    assert re.search(r">(100|50) %</text>", charts["dram_bw_util"]) and "target 85.0 %" in charts["dram_bw_util"]
    # The step latency: the light pass's 54 steps, steady from step 4 (the manifest's cut), p50 / p99 lines.
    light = a.light
    assert light is not None and light.steady_start == 4
    svg = html.step_latency_chart(a)
    assert svg.count("<circle") == light.count and "steady from step 4" in svg
    # p50 and p99 read as the metrics do everywhere else
    assert f"p50 {value(a.value('step_latency_ms_p50'), 'ms')}" in svg and f"p99 {value(a.value('step_latency_ms_p99'), 'ms')}" in svg
    # The viewers: Perfetto for a Kineto trace, nsys-ui for an Nsight Systems report.
    assert html.raw_traces(a) == [(str(DEMO_EAGER / "raw" / "torch-trace.json.gz"),
                                   "Perfetto: open https://ui.perfetto.dev and drop this file on it (it reads Kineto JSON, gzipped or not)")]
    assert html.raw_traces(eager()[0])[0][0] == str(EAGER)
    nsys = analyze(load_trace(FIXTURES / "h200-decode-eager-5steps.nsys.sqlite.gz"))
    assert "nsys-ui FILE.nsys-rep" in html.raw_traces(nsys)[0][1]
    bundle = tmp_path / "b"
    (bundle / "raw").mkdir(parents=True)
    shutil.copy(EAGER, bundle / "raw" / "torch-trace.json.gz")
    (bundle / "raw" / "nsys.nsys-rep").write_bytes(b"")  # only its presence is read
    (bundle / "manifest.json").write_text(json.dumps({"schema": "perfdoctor.run/1", "step": "decode_step"}))
    opened = html.raw_traces(analyze(load_trace(bundle), step="decode_step"))
    assert [how.split(":")[0] for _, how in opened] == ["Perfetto", "Nsight Systems"]
    assert opened[1][1] == f"Nsight Systems: nsys-ui {bundle / 'raw' / 'nsys.nsys-rep'}"


def test_gap_labels_sit_inside_their_own_gaps() -> None:
    # Issue 32: gap labels overlapped. Each label is drawn only where it fits in its gap, so two
    # labels can never touch (the browser test measures every plot's labels as laid out).
    svg = html.timeline_detail(eager()[0])
    gaps = re.findall(r'<rect class="gap" x="([\d.]+)" y="[\d.]+" width="([\d.]+)"', svg)
    labels = re.findall(r'<text x="([\d.]+)" y="[\d.]+" text-anchor="middle">([\d.]+ µs)</text>', svg)
    assert gaps and labels
    spans = [(float(x), float(x) + float(w)) for x, w in gaps]
    for x, label in labels:
        half = len(label) * html.CHAR_PX / 2
        assert any(lo <= float(x) - half and float(x) + half <= hi for lo, hi in spans), label


CJK = re.compile("[\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef]")

CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--no-first-run", "--hide-scrollbars", "--enable-logging=stderr", "--v=0",
]


@pytest.fixture(scope="module")
def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    if shutil.which("apt-get") and os.geteuid() == 0:
        subprocess.run(["apt-get", "update", "-qq"], capture_output=True, timeout=300)
        subprocess.run(["apt-get", "install", "-y", "-qq", "chromium"], capture_output=True, timeout=600)
        path = shutil.which("chromium")
        if path:
            return path
    pytest.skip("headless Chromium is not installed and cannot be installed here (apt-get install chromium)")


def browse(chromium: str, page: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / f"chromium-profile-{len(list(tmp_path.iterdir()))}"
    return subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args, page.as_uri()],
                          capture_output=True, text=True, timeout=120)


def png_pixels(path: Path) -> np.ndarray:
    """Decode an 8-bit RGB/RGBA PNG (what Chromium writes) to an (h, w, channels) array."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        chunk = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", chunk)
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    width, height, depth, color, _, _, interlace = header
    assert depth == 8 and color in (2, 6) and interlace == 0
    bpp = 3 if color == 2 else 4
    raw = np.frombuffer(zlib.decompress(idat), dtype=np.uint8).reshape(height, 1 + width * bpp)
    out = np.zeros((height, width * bpp), dtype=np.int32)
    prev = np.zeros(width * bpp, dtype=np.int32)
    for y in range(height):
        f, line = raw[y, 0], raw[y, 1:].astype(np.int32)
        if f == 0:
            row = line
        elif f == 2:
            row = (line + prev) % 256
        elif f == 1:  # Sub: running sum per channel
            row = (np.cumsum(line.reshape(width, bpp), axis=0) % 256).reshape(-1)
        else:  # Average / Paeth depend on the reconstructed left pixel: go pixel by pixel
            row = np.zeros_like(line)
            for x in range(0, width * bpp, bpp):
                a = row[x - bpp : x] if x else np.zeros(bpp, dtype=np.int32)
                b = prev[x : x + bpp]
                if f == 3:
                    pred = (a + b) // 2
                else:
                    c = prev[x - bpp : x] if x else np.zeros(bpp, dtype=np.int32)
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    pred = np.where((pa <= pb) & (pa <= pc), a, np.where(pb <= pc, b, c))
                row[x : x + bpp] = (line[x : x + bpp] + pred) % 256
        out[y], prev = row, row
    return out.reshape(height, width, bpp)[:, :, :3]


@pytest.mark.parametrize("case", ["eager", "evil", pytest.param("nvml", marks=pytest.mark.extended), pytest.param("pageable", marks=pytest.mark.extended), "bundle", "cpu"])
def test_html_renders_in_headless_chromium_with_plots(case: str, chromium: str, tmp_path: Path) -> None:
    if case == "eager":
        a, findings = eager()
        want_plots = 5  # overview, zoomed slice, families, gauges, step latency
    elif case == "evil":
        a, findings = crafted_evil()
        want_plots = 5
    elif case == "nvml":
        a, findings = with_nvml_samples(eager()[0])
        want_plots = 5 + 3  # + one chart per sampled series
    elif case == "bundle":
        a, findings = demo_bundle()
        want_plots = 5 + 13  # + the 14 NVML series of the H200 run less throttle_reasons (a bit mask: not drawn)
    elif case == "cpu":  # issue 32: no GPU ran: the CPU breakdown and the traced step latency
        d = pipeline_diagnose(FIXTURES / "cpu-mlp-5steps.kineto.json.gz", rules=(), warnings=False)
        a, findings = d.analysis, d.findings
        want_plots = 2  # gauges (said unavailable), step latency; no timeline nor kernel families without a GPU
    else:
        name = FIXTURES / "h200-pageable-sync-10steps.kineto.json.gz"
        if not name.exists():
            pytest.skip(f"needs {name.name}")
        a = analyze(load_trace(name), step="copy_step")
        findings = evaluate(load_rules(), a)
        want_plots = 5
    page = tmp_path / "report.html"
    page.write_text(html.render(findings, a), encoding="utf-8")

    dom = browse(chromium, page, tmp_path, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    head = dom.stdout[: dom.stdout.index(">", dom.stdout.index("<html")) + 1]
    assert 'data-pd-ready="1"' in head, (head, dom.stdout[-3000:])
    assert "data-pd-errors" not in head, re.search(r'id="pd-errors"[^>]*>[^<]*', dom.stdout)
    console_errors = [line for line in dom.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert not console_errors, console_errors
    status = re.search(r'<span id="pd-status"[^>]*>', dom.stdout).group(0)
    plots, overlaps, checks = (re.search(rf'{k}="(\d+)"', status) for k in ("data-plots", "data-overlaps", "data-findings"))
    assert int(plots.group(1)) == want_plots and int(checks.group(1)) == len(findings), status
    # Issue 32: no two labels of a plot overlap, as the browser lays them out (getBBox).
    assert int(overlaps.group(1)) == 0, status
    # Issue 32: no CJK glyph needed (a machine without CJK fonts showed boxes): none in the live page.
    assert not CJK.search(dom.stdout), CJK.search(dom.stdout)
    if case == "bundle":  # the axes' text: time in seconds from the run start, values in their units
        text = re.sub(r"<[^>]+>", " ", dom.stdout)
        for words in ("seconds from the run start", " s ", " W ", " MHz ", " % ", " GB ", "steady from step 4", "p50 ", "p99 ", " ms "):
            assert words in text, words
        labels = re.findall(r"<text[^>]*>([^<]*)</text>", dom.stdout)  # every label the plots draw
        assert labels and not [s for s in labels if re.search(r"\de[+-]?\d", s)]  # no 1.98e+03
        assert "1980 MHz" in labels and labels.count("1980 MHz") == 1  # the flat SM clock: its value once
        assert "ui.perfetto.dev" in text and "torch-trace.json.gz" in text
    # Exactly our three scripts survive in the live DOM: no name from the trace became markup.
    assert dom.stdout.count("<script") == 3
    if case == "evil":
        assert "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in dom.stdout

    shot = tmp_path / "shot.png"
    r = browse(chromium, page, tmp_path, f"--screenshot={shot}", "--window-size=1000,700")
    assert r.returncode == 0 and shot.exists(), r.stderr[-2000:]
    px = png_pixels(shot)
    background = np.array([0xFA, 0xFB, 0xFC])
    assert (np.abs(px - background).sum(axis=2) > 30).mean() > 0.05, "screenshot is (almost) blank"
    colors = {tuple(c) for c in px.reshape(-1, 3)[:: 7].tolist()}
    assert len(colors) > 50
    if case == "cpu":  # no timeline to draw: the first screen is the CPU breakdown's text
        return
    # The timeline is in the first screen: kernel blue (#4e79a7) and bubble red (#e15759) are drawn.
    for rgb in ((0x4E, 0x79, 0xA7), (0xE1, 0x57, 0x59)):
        assert (np.abs(px - np.array(rgb)).sum(axis=2) < 40).sum() > 50, f"no {rgb} pixels: plot not drawn"


@pytest.mark.parametrize("width", [40, 200])
def test_a_snippet_is_never_cropped_nor_wrapped_and_with_colour_is_highlighted(width: int) -> None:
    # Issue 32: a snippet cropped at the terminal's width ("fullgraph=T") is broken code when
    # copied. Each line comes out whole, once, at its indent, whatever the width (40 is
    # narrower than the first line), plain or highlighted.
    import io as _io
    import re as _re

    from rich.console import Console

    from perfdoctor.reports.code import Code

    source = "g = torch.cuda.CUDAGraph()  # capture once, replay every step\nwith torch.cuda.graph(g):\n\tout = model(x)\n\n"

    def shown(renderable: object, **console: object) -> str:
        buf = _io.StringIO()
        Console(file=buf, width=width, **console).print(renderable, crop=False)
        return buf.getvalue()

    expected = ["    g = torch.cuda.CUDAGraph()  # capture once, replay every step", "    with torch.cuda.graph(g):", "        out = model(x)"]
    assert [line.rstrip() for line in shown(Code(source, indent=4)).splitlines()] == expected
    coloured = shown(Code(source, indent=4), force_terminal=True, color_system="standard")
    assert [line.rstrip() for line in _re.sub(r"\x1b\[[0-9;]*m", "", coloured).splitlines()] == expected
    assert "\x1b[" in coloured and "CUDAGraph" in coloured


def test_the_families_chart_says_each_share_as_the_evidence_table_does():
    """The chart draws the kernel_families evidence, whose share cells are numbers handed up
    by rules/ (evidence.Share): it words them as the table and findings.json do."""
    from perfdoctor.reports.evidence import cell
    from perfdoctor.rules.evidence import kernel_families

    a, _ = eager()
    svg = html.families_chart(a)
    shares = [cell(row[2]) for row in kernel_families(a).rows]
    assert shares and all(isinstance(s, str) and s.endswith("%") and f"({s})" in svg for s in shares)
