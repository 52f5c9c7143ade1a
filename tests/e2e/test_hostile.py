"""Hostile inputs (issue 12): every test builds its attack from a real H200 fixture and
checks the contract — bad input is one line ``error: ...`` on stderr and exit 2, never a
traceback; no input is ever overwritten; nothing hangs (subprocesses have timeouts);
no NaN verdict; untrusted text is inert in the terminal, Markdown, HTML, JUnit and GitHub
outputs. See docs/safety.md.

Most checks run the real ``perfdoctor.cli.commands.main`` in-process (fast); the ones that could
hang or need a real process (FIFO, /dev/zero, gzip bomb, a closed pipe) run a subprocess
with a timeout.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import math
import os
import shutil
import sqlite3
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import FIXTURES, run_cli
from perfdoctor.errors import UsageError

KINETO = FIXTURES / "h200-pageable-sync-10steps.kineto.json.gz"
NSYS = FIXTURES / "h200-pageable-sync-10steps.nsys.sqlite.gz"
TIMEOUT = 60  # seconds: every subprocess here finishes in a few


# --------------------------------------------------------------------------- helpers


def incli(*args: object, env: dict | None = None) -> tuple[int, str, str]:
    """``perfdoctor ARGS`` in this process: (exit code, stdout, stderr)."""
    from conftest import run_cli_inprocess

    done = run_cli_inprocess(*args, env=env)
    return done.returncode, done.stdout, done.stderr


def assert_usage(result, *needles: str) -> str:
    """Exit 2 and exactly one line ``error: ...`` on stderr (no traceback)."""
    if isinstance(result, subprocess.CompletedProcess):
        code, err = result.returncode, result.stderr
    else:
        code, _, err = result
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("warning: ")]
    assert code == 2, err
    assert "Traceback" not in err, err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def kineto_doc() -> dict:
    return json.loads(gzip.decompress(KINETO.read_bytes()))


def write_kineto(path: Path, doc: dict) -> Path:
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data, 1) if path.name.endswith(".gz") else data)
    return path


def nsys_db(tmp: Path, name: str = "t.sqlite") -> Path:
    db = tmp / name
    db.write_bytes(gzip.decompress(NSYS.read_bytes()))
    return db


def bundle(tmp: Path, manifest: object | None = None, name: str = "b") -> Path:
    b = tmp / name
    (b / "raw").mkdir(parents=True)
    shutil.copy(KINETO, b / "raw" / "torch-trace.json.gz")
    doc = {"schema": "perfdoctor.run/1", "step": "copy_step", "gpu": {"name": "NVIDIA H200"}} if manifest is None else manifest
    (b / "manifest.json").write_text(json.dumps(doc))
    return b


PACK = """
[[rule]]
id = "my-rule"
title = "A rule"
metric = "kernel_time_ratio"
comparator = ">"
threshold = 0.5
severity = "warning"
citation = "test"
remediation = { steps = ["do it"] }
"""


# --------------------------------------------------------------------------- 1. data loss


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    return Path(shutil.copy(KINETO, tmp_path / "t.kineto.json.gz"))


def _same_bytes(path: Path, before: bytes) -> None:
    assert path.read_bytes() == before, f"{path} was overwritten"


@pytest.mark.parametrize(
    "argv",
    [
        ["report", "{T}", "--format", "md", "-o", "{T}"],
        ["report", "{T}", "--format", "json", "-o", "{LINK}"],  # a symlink to the input
        ["report", "{T}", "--format", "md", "-o", "{HARD}"],  # a hard link to the input
        ["analyze", "{T}", "--json", "{T}"],
        ["diff", "{T}", "{T2}", "--md", "{T}"],
        ["diff", "{T}", "{T2}", "--json", "{T2}"],
        ["gate", "{T}", "--baseline", "{T2}", "--fail-on", "step_latency_ms_p50:+50%", "--junit", "{T2}"],
        ["gate", "{T}", "--baseline", "{T2}", "--fail-on", "step_latency_ms_p50:+50%", "--json", "{T2}"],
        ["report", "{T}", "--rules", "{PACK}", "-o", "{PACK}"],
        ["report", "{T}", "-o", "{OTHER_TRACE}"],  # not an input, but a trace: never overwritten
    ],
)
def test_an_output_never_overwrites_an_input(tmp_path: Path, trace: Path, argv: list[str]) -> None:
    t2 = Path(shutil.copy(KINETO, tmp_path / "t2.kineto.json.gz"))
    pack = tmp_path / "pack.toml"
    pack.write_text(PACK)
    other = Path(shutil.copy(KINETO, tmp_path / "other.json.gz"))
    (tmp_path / "link.json").symlink_to(trace)
    os.link(trace, tmp_path / "hard.md")
    names = {"{T}": trace, "{T2}": t2, "{PACK}": pack, "{LINK}": tmp_path / "link.json",
             "{HARD}": tmp_path / "hard.md", "{OTHER_TRACE}": other}
    before = {p: p.read_bytes() for p in (trace, t2, pack, other)}
    assert_usage(incli(*(str(names.get(a, a)) for a in argv)))
    for p, data in before.items():
        _same_bytes(p, data)


def test_an_output_inside_an_input_bundle_is_refused(tmp_path: Path) -> None:
    b = bundle(tmp_path)
    raw = (b / "raw" / "torch-trace.json.gz").read_bytes()
    assert_usage(incli("report", b, "-f", "md", "-o", b / "raw" / "torch-trace.json.gz"), "input bundle")
    assert_usage(incli("report", b, "-f", "md", "-o", b / "manifest.json"), "input bundle")
    assert_usage(incli("analyze", b, "--json", b / "raw" / "new.json"), "input bundle")
    assert (b / "raw" / "torch-trace.json.gz").read_bytes() == raw


def test_plain_outputs_are_written_atomically_and_rewritten(tmp_path: Path, trace: Path) -> None:
    out = tmp_path / "report.md"
    out.write_text("an old report\n")
    code, _, err = incli("report", trace, "-f", "md", "-o", out)
    assert code == 0, err
    assert out.read_text().startswith("## perfdoctor findings")
    code, _, err = incli("report", trace, "-f", "md", "-o", out)  # a report perfdoctor wrote: rewritten
    assert code == 0, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.md", "t.kineto.json.gz"]  # no temp files left


def test_a_full_disk_is_one_line(trace: Path) -> None:
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    assert_usage(incli("analyze", trace, "--json", "/dev/full"), "cannot write", "No space left")
    assert_usage(incli("report", trace, "-f", "md", "-o", "/dev/full"), "cannot write")


def test_report_on_a_bundle_it_cannot_write_into_still_reports(tmp_path: Path) -> None:
    b = bundle(tmp_path)
    (b / "report.md").mkdir()  # unwritable the way a read-only bundle is (tests run as root)
    if os.geteuid() != 0:
        os.chmod(b, 0o555)
    try:  # without -o (issue 32: with -o the report goes only there, the bundle is not written)
        code, out, err = incli("report", b, "-f", "md")
    finally:
        os.chmod(b, 0o755)
    assert code == 0, err
    assert "warning: reports not written into the bundle" in err
    assert out.startswith("## perfdoctor findings")


# --------------------------------------------------------------------------- 4. injection

EVIL = "\x1b[31mred\x1b[0m \x1b]8;;http://evil.example\x07link\x1b]8;;\x07 [/] [link=http://evil.example]x[/link] \u202eevil\x9b2J"
EVIL_STEP = "copy\n::error::pwned [/]\x1b[2J"


@pytest.fixture
def evil(tmp_path: Path) -> Path:
    """The pageable-sync trace with hostile kernel, range and device names."""
    doc = kineto_doc()
    n = 0
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel":
            e["name"] = f"{EVIL} {n % 3}"
            n += 1
        if e.get("name") == "copy_step":
            e["name"] = EVIL_STEP
    for p in doc.get("deviceProperties") or []:
        p["name"] = "\x1b]0;owned\x07GPU [/]"
    assert n > 0
    d = tmp_path / "a["
    d.mkdir()
    return write_kineto(d / "]b.kineto.json.gz", doc)  # the path holds [/] too


def _inert(text: str) -> None:
    assert "\x1b" not in text and "\x9b" not in text and "\u202e" not in text, repr(text[:500])
    for line in text.splitlines():
        assert not line.startswith("::") or line.startswith(("::error title=", "::warning title=", "::notice title=")), line
        assert "::error::pwned" not in line.split("⏎")[0] or not line.lstrip().startswith("::error::"), line


@pytest.mark.parametrize("step", [[], ["--step", "copy*"]])  # the hostile range as the step name, or a glob
def test_hostile_names_are_inert_in_analyze_and_report(tmp_path: Path, evil: Path, step: list[str]) -> None:
    code, out, err = incli("analyze", evil, *step)
    assert code == 0, err
    _inert(out + err)
    assert "GPU [/]" in out  # markup in a name is shown as text
    for fmt in ("terminal", "md", "html", "json"):
        code, out, err = incli("report", evil, "-f", fmt, *step)
        assert code == 0, err
        _inert(out + err)
        if fmt == "json":
            json.loads(out)


def test_hostile_names_are_inert_in_diff_and_gate(tmp_path: Path, evil: Path) -> None:
    code, out, err = incli("diff", KINETO, evil, "--md", tmp_path / "d.md")
    assert code == 0, err
    _inert(out + err + (tmp_path / "d.md").read_text())
    code, out, err = incli("rules", "list", "--rules", _evil_pack(tmp_path))
    assert code == 0, err
    _inert(out + err)
    code, out, err = incli("diff", KINETO, evil, "--md", tmp_path / "d.md", "--rules", _evil_pack(tmp_path))
    assert code == 0, err
    _inert(out + err + (tmp_path / "d.md").read_text())
    summary = tmp_path / "summary.md"
    code, out, err = incli("gate", evil, "--baseline", KINETO, "--fail-on", "step_latency_ms_p50:+1000%",
                           "--rules", "seed", "--min-severity", "info", "--github",
                           "--junit", tmp_path / "g.xml", "--json", tmp_path / "g.json",
                           env={"GITHUB_STEP_SUMMARY": str(summary)})
    # the hostile trace names another GPU: no verdict (issue 20), every output still written and inert
    assert code == 2 and err.startswith("error: no verdict: the baseline is not comparable: gpu"), err
    _inert(out + err + summary.read_text())
    assert any(line.startswith("::") for line in out.splitlines())  # annotations were printed
    junit = (tmp_path / "g.xml").read_text()
    _inert(junit)
    ET.fromstring(junit.split("\n", 1)[1])


def _evil_pack(tmp: Path) -> Path:
    d = tmp / "p["
    d.mkdir(exist_ok=True)
    pack = d / "]x.toml"  # the path holds [/]
    pack.write_text(PACK.replace('title = "A rule"', 'title = "A \\u001b[31mrule [/] \\u202e"')
                    .replace('citation = "test"', 'citation = "line\\n::error::pwned"'))
    return pack


def test_the_sanitiser() -> None:
    from perfdoctor.text import clean, github_data, github_property, rich, xml

    assert clean("a\x1b[31mb\x1b]8;;http://x\x07c\x1b]8;;\x1b\\d\x07e\u202ef") == "abcdef"
    assert clean("line1\nline2\r\n::error::x") == "line1⏎line2⏎::error::x"
    assert clean("kernel<float>(int, 3)") == "kernel<float>(int, 3)"
    assert rich("[/] [link=x]y[/link]") == "\\[/] \\[link=x]y\\[/link]"
    assert github_data("50%\n::error::x") == "50%25%0A::error::x"
    assert github_property("a:b,c") == "a%3Ab%2Cc"
    assert xml("a\x01b") == "a?b"


# --------------------------------------------------------------------------- 5. unbounded reads


def test_a_fifo_is_refused_not_read(tmp_path: Path, trace: Path) -> None:
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    assert_usage(run_cli("analyze", fifo, timeout=TIMEOUT), "FIFO", "regular file")
    pack = tmp_path / "pack.toml"
    os.mkfifo(pack)
    assert_usage(run_cli("analyze", trace, "--rules", pack, timeout=TIMEOUT), "FIFO")


def test_a_fifo_inside_a_bundle_is_refused(tmp_path: Path) -> None:
    b = bundle(tmp_path)
    os.mkfifo(b / "raw" / "ncu.csv")
    assert_usage(run_cli("report", b, "-f", "md", timeout=TIMEOUT), "ncu.csv", "FIFO")


def test_dev_zero_linked_as_a_trace_is_refused(tmp_path: Path) -> None:
    link = tmp_path / "x.json"
    link.symlink_to("/dev/zero")
    assert_usage(run_cli("analyze", link, timeout=TIMEOUT), "character device")


def test_a_gzip_bomb_stops_at_the_cap(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.json.gz"
    with gzip.open(bomb, "wb", compresslevel=9) as fh:
        chunk = b" " * (1 << 20)
        for _ in range(64):  # 64 MiB of whitespace: ~64 kB compressed
            fh.write(chunk)
    r = run_cli("analyze", bomb, timeout=TIMEOUT, env={"PERFDOCTOR_MAX_TRACE_BYTES": str(8 << 20)})
    assert_usage(r, "PERFDOCTOR_MAX_TRACE_BYTES=")
    nsys_bomb = tmp_path / "bomb.sqlite.gz"
    shutil.copy(bomb, nsys_bomb)
    assert_usage(run_cli("analyze", nsys_bomb, timeout=TIMEOUT, env={"PERFDOCTOR_MAX_TRACE_BYTES": str(8 << 20)}),
                 "PERFDOCTOR_MAX_TRACE_BYTES=")


def test_the_cap_can_be_raised(trace: Path) -> None:
    assert_usage(incli("analyze", trace, env={"PERFDOCTOR_MAX_TRACE_BYTES": "1000"}), "more than 1000 B")
    code, _, err = incli("analyze", trace, env={"PERFDOCTOR_MAX_TRACE_BYTES": str(1 << 30)})
    assert code == 0, err


# --------------------------------------------------------------------------- 6. tracebacks


@pytest.mark.parametrize(
    "sql",
    [
        "ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL RENAME COLUMN demangledName TO name2",
        "ALTER TABLE CUPTI_ACTIVITY_KIND_RUNTIME RENAME COLUMN correlationId TO corr",
        "ALTER TABLE CUPTI_ACTIVITY_KIND_MEMCPY DROP COLUMN copyKind",
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'abc' WHERE rowid = 1",
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET deviceId = x'00ff' WHERE rowid = 2",
        "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET nameId = 'x', globalTid = NULL",
        "UPDATE StringIds SET value = 42 WHERE rowid < 5",
        "UPDATE TARGET_INFO_GPU SET memoryBandwidth = 'fast', name = x'1b5b3331'",
        "DROP TABLE StringIds",
        "UPDATE ENUM_CUDA_MEMCPY_OPER SET name = x'00'",
    ],
)
def test_a_damaged_nsys_export_is_one_line_or_a_result(tmp_path: Path, sql: str) -> None:
    from perfdoctor.pipeline import load_trace
    from perfdoctor.analysis.metrics import analyze

    db = nsys_db(tmp_path)
    with contextlib.closing(sqlite3.connect(db)) as con:
        try:
            con.execute(sql)
        except sqlite3.OperationalError as exc:
            pytest.skip(f"this sqlite cannot: {exc}")
        con.commit()
    try:
        analyze(load_trace(db))
    except UsageError as exc:
        assert "\n" not in str(exc)


@pytest.mark.parametrize(
    "manifest, needle",
    [
        ([1, 2], "expected a JSON object"),
        ({"schema": "perfdoctor.run/99"}, "schema"),
        ({"gpu": []}, "'gpu'"),
        ({"gpu": {"peak_dram_bw_gbps": "fast"}}, "gpu.peak_dram_bw_gbps"),
        ({"collectors": {"torch": "ok"}}, "collectors.torch"),
        ({"light_pass": {"step_latency_ms": ["x"]}}, "light_pass.step_latency_ms"),
        ({"calibration": {"dram_read_gbps": []}}, "calibration.dram_read_gbps"),
        ({"step": 3}, "'step'"),
    ],
)
def test_a_manifest_of_the_wrong_shape_is_one_line(tmp_path: Path, manifest: object, needle: str) -> None:
    assert_usage(incli("analyze", bundle(tmp_path, manifest)), needle)


def test_raw_pass_results_of_the_wrong_shape_are_one_line(tmp_path: Path) -> None:
    b = bundle(tmp_path)
    (b / "raw" / "torch.json").write_text("[]")
    assert_usage(incli("report", b), "torch.json", "expected a JSON object")
    (b / "raw" / "torch.json").write_text('{"clock_sync": [1]}')
    assert_usage(incli("report", b), "clock_sync")


def test_json_nested_too_deeply_is_one_line(tmp_path: Path) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    t = tmp_path / "deep.json"
    t.write_text('{"traceEvents": [{"ph": "X", "args": {"x": ' + deep + "}}]}")
    assert_usage(incli("analyze", t))
    b = bundle(tmp_path)
    (b / "manifest.json").write_text('{"gpu": ' + deep + "}")
    assert_usage(incli("analyze", b), "nested too deeply")


@pytest.mark.parametrize(
    "extra, needle",
    [
        ('[[rule.variant]]\nwhen = ["graphed"]\ntitle = "x"\n', "when"),
        ('[[rule.variant]]\nwhen = {a = 1}\n', "when"),
    ],
)
def test_a_pack_with_values_of_the_wrong_type_is_one_line(tmp_path: Path, trace: Path, extra: str, needle: str) -> None:
    pack = tmp_path / "p.toml"
    pack.write_text(PACK + extra)
    assert_usage(incli("analyze", trace, "--rules", pack), needle)
    pack.write_text(PACK.replace('severity = "warning"', "severity = [1]"))
    assert_usage(incli("analyze", trace, "--rules", pack), "severity")


def test_a_bad_option_is_one_line() -> None:
    line = assert_usage(incli("analyze", "--foo", "x"))
    # click names the closest option (analyze's --top, issue 32): still one line
    assert line == "error: no such option: --foo (Possible options: --top) (see perfdoctor analyze --help)"
    assert_usage(incli("gate"), "missing argument")
    assert_usage(run_cli("report", "--nope", timeout=TIMEOUT), "no such option")


# --------------------------------------------------------------------------- 7. wrong results


def test_a_bundle_with_a_damaged_trace_says_so(tmp_path: Path) -> None:
    b = bundle(tmp_path)
    (b / "raw" / "torch-trace.json.gz").write_bytes(KINETO.read_bytes()[:2000])  # truncated
    code, out, err = incli("analyze", b)
    assert "warning:" in err and "no trace:" in err and "torch-trace.json.gz" in err, err
    assert "Traceback" not in err
    assert "no trace:" in out and "CPU-only" not in out  # the summary says why, not "CPU-only run"
    (b / "raw" / "torch-trace.json.gz").unlink()
    code, out, err = incli("report", b, "-f", "md")
    assert "no trace:" in err, err


def test_events_without_ts_or_dur(tmp_path: Path) -> None:
    from perfdoctor.pipeline import load_trace

    doc = kineto_doc()
    host = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cuda_runtime"]
    del host[0]["ts"], host[1]["dur"]
    host[2]["dur"] = -5.0
    p = load_trace(write_kineto(tmp_path / "a.json", doc))
    assert "skipped 3 events: no valid 'ts' or 'dur' (missing, not a number, negative or out of range)" in p.origin.warnings, p.origin
    assert len(p.calls) == len(host) - 3

    # One damaged GPU activity among many is skipped and counted, not the trace refused ...
    doc = kineto_doc()
    gpu = [e for e in doc["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    del gpu[0]["dur"]
    code, _, err = incli("analyze", write_kineto(tmp_path / "b.json", doc))
    assert code == 0 and "skipped 1 events (1 of them GPU activities)" in err, err
    p = load_trace(tmp_path / "b.json")
    assert len(p.activities) == len(gpu) - 1
    # ... but when none is left there is nothing to analyse.
    for e in gpu:
        e["dur"] = 1e300  # overflows int64 nanoseconds
    assert_usage(incli("analyze", write_kineto(tmp_path / "c.json", doc)), "GPU activities lack a valid")


def test_a_shared_correlation_id_does_not_attach_every_kernel_to_one_launch(tmp_path: Path) -> None:
    from perfdoctor.pipeline import load_trace

    doc = kineto_doc()
    for e in doc["traceEvents"]:
        if isinstance(e.get("args"), dict) and "correlation" in e["args"]:
            e["args"]["correlation"] = 7
    p = load_trace(write_kineto(tmp_path / "c.json.gz", doc))
    assert any("correlation ids are shared" in w for w in p.origin.warnings)
    assert (p.calls["correlation"] == 7).sum() <= 1
    code, _, err = incli("analyze", tmp_path / "c.json.gz")
    assert "correlation ids are shared" in err


# --------------------------------------------------------------------------- 8. fail-open numbers


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["gate", "{T}", "--baseline", "{T}", "--fail-on", "step_latency_ms_p50:+1e999%"], "finite"),
        (["analyze", "{T}", "--threshold", "kernel-share=nan"], "finite"),
        (["analyze", "{T}", "--threshold", "kernel-share=inf"], "finite"),
        (["report", "{T}", "--threshold", "kernel-share=-inf%"], "finite"),
        (["analyze", "{T}", "--tokens-per-step", "inf"], "finite"),
        (["report", "{T}", "--tokens-per-step", "nan"], "--tokens-per-step"),
        (["diff", "{T}", "{T}", "--noise-floor", "inf"], "finite"),
        (["gate", "{T}", "--baseline", "{T}", "--fail-on", "step_latency_ms_p50:+5%", "--noise-floor", "nan"], "--noise-floor"),
        (["gate", "{T}", "--rules", "{NANPACK}"], "finite"),
    ],
)
def test_non_finite_numbers_are_refused(tmp_path: Path, trace: Path, argv: list[str], needle: str) -> None:
    from perfdoctor.rules.engine import load_rules

    if "--threshold" in argv:  # use a real threshold rule id of the seed pack
        rid = next(r.id for r in load_rules() if not r.advisory)
        argv = [a.replace("kernel-share", rid) for a in argv]
    nanpack = tmp_path / "nan.toml"
    nanpack.write_text(PACK.replace("threshold = 0.5", "threshold = nan"))
    names = {"{T}": str(trace), "{NANPACK}": str(nanpack)}
    assert_usage(incli(*(names.get(a, a) for a in argv)), needle)


def test_a_nan_metric_fails_a_budget_closed() -> None:
    from perfdoctor.pipeline import diagnose
    from perfdoctor.compare.gate import evaluate_budget, parse_budget
    from perfdoctor.compare.diff import diff_runs
    from perfdoctor.reports.gate_report import message
    from tests.compare.test_gate import with_metrics

    run = diagnose(KINETO, rules=None)
    bad = with_metrics(run, "nan", step_latency_ms_p99=float("nan"))
    for budget in ("step_latency_ms_p99:+5%", "step_latency_ms_p99:+1000"):
        c = evaluate_budget(parse_budget(budget), diff_runs(run, bad))
        assert c.status == "fail" and c.outcome == "not finite" and "cannot evaluate" in message(c), c
        c = evaluate_budget(parse_budget(budget), diff_runs(bad, run))
        assert c.status == "fail", c


def test_json_outputs_are_strict(tmp_path: Path, trace: Path) -> None:
    from perfdoctor.io import dumps_json

    assert json.loads(dumps_json({"a": float("nan"), "b": [float("inf")], "c": 1.5})) == {"a": None, "b": [None], "c": 1.5}

    def strict(text: str) -> object:
        return json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(AssertionError(c)))

    code, _, err = incli("gate", trace, "--baseline", trace, "--fail-on", "step_latency_ms_p50:+5%",
                         "--rules", "seed", "--json", tmp_path / "g.json")
    assert code in (0, 1), err
    strict((tmp_path / "g.json").read_text())
    code, _, err = incli("diff", trace, trace, "--json", tmp_path / "d.json")
    strict((tmp_path / "d.json").read_text())
    code, _, err = incli("analyze", trace, "--json", tmp_path / "m.json")
    strict((tmp_path / "m.json").read_text())


# --------------------------------------------------------------------------- 9. exit codes


def test_a_closed_stdout_does_not_change_the_gate_verdict(tmp_path: Path, trace: Path) -> None:
    cmd = [sys.executable, "-m", "perfdoctor", "gate", str(trace), "--baseline", str(trace),
           "--fail-on", "step_latency_ms_p50:+50%", "--junit", str(tmp_path / "g.xml")]
    alone = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT)
    assert alone.returncode == 0, alone.stderr
    # The reader goes away at once: every write to stdout meets a closed pipe.
    piped = subprocess.run(["bash", "-o", "pipefail", "-c", " ".join(map(_sh, cmd)) + " | true"],
                           capture_output=True, text=True, timeout=TIMEOUT)
    assert piped.returncode == 0, piped.stderr
    assert "Traceback" not in piped.stderr and "BrokenPipe" not in piped.stderr
    assert (tmp_path / "g.xml").exists()  # the gate finished its work


def _sh(s: str) -> str:
    import shlex

    return shlex.quote(s)


# --------------------------------------------------------------------------- 10. smaller


def test_a_utf8_bom_is_accepted(tmp_path: Path, trace: Path) -> None:
    t = tmp_path / "bom.json"
    t.write_bytes(b"\xef\xbb\xbf" + gzip.decompress(KINETO.read_bytes()))
    code, _, err = incli("analyze", t)
    assert code == 0, err
    pack = tmp_path / "bom.toml"
    pack.write_bytes(b"\xef\xbb\xbf" + PACK.encode())
    code, _, err = incli("analyze", trace, "--rules", pack)
    assert code == 0, err
    b = bundle(tmp_path)
    (b / "manifest.json").write_bytes(b"\xef\xbb\xbf" + (b / "manifest.json").read_bytes())
    code, _, err = incli("analyze", b)
    assert code == 0, err


def test_a_wal_database_leaves_no_sidecar_files(tmp_path: Path) -> None:
    from perfdoctor.pipeline import load_trace

    db = nsys_db(tmp_path)
    with contextlib.closing(sqlite3.connect(db)) as con:
        assert con.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
    before = sorted(p.name for p in tmp_path.iterdir())
    assert len(load_trace(db).activities) > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_locked_database_still_reads(tmp_path: Path) -> None:
    from perfdoctor.pipeline import load_trace

    db = nsys_db(tmp_path)
    holder = sqlite3.connect(db, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        holder.execute("CREATE TABLE lock_me (x)")
        assert len(load_trace(db).activities) > 0
    finally:
        holder.execute("ROLLBACK")
        holder.close()
