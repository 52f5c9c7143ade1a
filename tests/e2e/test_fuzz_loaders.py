"""Property-based fuzzing of the three readers (issue 12): any mutation of a real fixture
yields either an analysis or a one-line :class:`~perfdoctor.errors.UsageError` — never
another exception.

In-process (the loader, then ``perfdoctor.analysis.metrics.analyze`` and the seed rules) for speed;
the budget is fixed and derandomized so CI stays fast and reproducible. A few subprocess
checks at the end confirm what the CLI makes of such files: one line, exit 2.
"""

from __future__ import annotations

import contextlib
import copy
import gzip
import json
import os
import shutil
import sqlite3
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import FIXTURES, run_cli
from perfdoctor.errors import UsageError

KINETO = FIXTURES / "h200-pageable-sync-10steps.kineto.json.gz"
NSYS = FIXTURES / "h200-pageable-sync-10steps.nsys.sqlite.gz"
KINETO_BYTES = gzip.decompress(KINETO.read_bytes())
KINETO_DOC = json.loads(KINETO_BYTES)
NSYS_BYTES = gzip.decompress(NSYS.read_bytes())

# PERFDOCTOR_FUZZ_EXAMPLES=2000 runs a longer, random campaign (not in CI).
_LONG = int(os.environ.get("PERFDOCTOR_FUZZ_EXAMPLES", "0"))
FUZZ = settings(
    max_examples=_LONG or 60,
    deadline=None,
    derandomize=not _LONG,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.sampled_from([-1, 0, 1, 2**63, -(2**63), 1e300, -1e-300, "", "kernel", "\x1b[2J", "[/]", "copy_step"])
    | st.text(max_size=12),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=6,
)
EVENT_KEYS = ["ph", "cat", "name", "ts", "dur", "pid", "tid", "args"]
ARG_KEYS = ["correlation", "device", "stream", "grid", "block", "registers per thread", "shared memory",
            "est. achieved occupancy %", "bytes", "graph id", "External id"]


RENDER = True


def _no_constant(name: str) -> None:
    raise AssertionError(f"{name} in JSON output")


def analyse(path: Path) -> None:
    """The contract: an analysis (rules evaluated, every report rendered) or a one-line UsageError."""
    from perfdoctor.pipeline import load_trace
    from perfdoctor.analysis.metrics import analyze
    from perfdoctor.rules.engine import evaluate, load_rules

    try:
        analysis = analyze(load_trace(path))
        findings = evaluate(load_rules(), analysis)
    except UsageError as exc:
        assert "\n" not in str(exc).strip(), str(exc)
        return
    if RENDER:  # every report renders what was analysed, with strict JSON
        from perfdoctor.reports import html, json as json_report, markdown, terminal

        terminal.render(findings, analysis)
        markdown.render(findings, analysis)
        html.render(findings, analysis)
        json.loads(json_report.render(findings, analysis), parse_constant=_no_constant)


def _mutate_doc(data: st.DataObject, doc: dict) -> None:
    events = doc["traceEvents"]
    for _ in range(data.draw(st.integers(1, 4), label="edits")):
        op = data.draw(st.sampled_from(["replace", "drop", "swap", "args", "event", "top", "dup"]), label="op")
        i = data.draw(st.integers(0, len(events) - 1), label="event")
        e = events[i]
        if op == "top":
            doc[data.draw(st.sampled_from(["traceEvents", "deviceProperties", "cuda_driver_version"]))] = data.draw(json_values)
            return
        if op == "event":
            events[i] = data.draw(json_values)
        elif not isinstance(e, dict):
            continue
        elif op == "replace":
            e[data.draw(st.sampled_from(EVENT_KEYS))] = data.draw(json_values)
        elif op == "drop":
            e.pop(data.draw(st.sampled_from(EVENT_KEYS)), None)
        elif op == "swap":  # a number as a string, a string as a number
            key = data.draw(st.sampled_from(EVENT_KEYS))
            if key in e:
                v = e[key]
                e[key] = str(v) if isinstance(v, (int, float)) else (len(v) if isinstance(v, (str, list, dict)) else [v])
        elif op == "args":
            args = e.setdefault("args", {})
            if isinstance(args, dict):
                args[data.draw(st.sampled_from(ARG_KEYS))] = data.draw(json_values)
        elif op == "dup":  # the same event (ids and all) many times
            events.extend([copy.deepcopy(e)] * data.draw(st.integers(1, 50)))


@FUZZ
@given(data=st.data())
def test_kineto_mutations(data: st.DataObject) -> None:
    kind = data.draw(st.sampled_from(["json", "json", "bytes", "truncate"]), label="kind")
    if kind == "json":
        doc = copy.deepcopy(KINETO_DOC)
        _mutate_doc(data, doc)
        try:
            raw = json.dumps(doc).encode()
        except (ValueError, TypeError):
            return
    elif kind == "bytes":
        raw = bytearray(KINETO_BYTES)
        for _ in range(data.draw(st.integers(1, 16), label="flips")):
            raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
        raw = bytes(raw)
    else:
        raw = KINETO_BYTES[: data.draw(st.integers(0, len(KINETO_BYTES) - 1), label="cut")]
    gz = data.draw(st.booleans(), label="gzip")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / ("t.json.gz" if gz else "t.json")
        path.write_bytes(gzip.compress(raw, 1) if gz else raw)
        analyse(path)


NSYS_TABLES = {
    "CUPTI_ACTIVITY_KIND_KERNEL": ["start", "end", "deviceId", "streamId", "correlationId", "demangledName",
                                   "registersPerThread", "gridX", "blockX", "staticSharedMemory", "graphNodeId"],
    "CUPTI_ACTIVITY_KIND_RUNTIME": ["start", "end", "globalTid", "correlationId", "nameId"],
    "CUPTI_ACTIVITY_KIND_MEMCPY": ["start", "end", "deviceId", "streamId", "correlationId", "bytes", "copyKind", "srcKind", "dstKind"],
    "NVTX_EVENTS": ["start", "end", "text", "textId", "globalTid", "eventType"],
    "StringIds": ["id", "value"],
    "TARGET_INFO_GPU": ["name", "smCount", "memoryBandwidth", "computeMajor"],
    "ENUM_CUDA_MEMCPY_OPER": ["id", "name"],
}
bad_cells = st.sampled_from(["'abc'", "NULL", "x'00ff'", "-1", "9223372036854775807", "-9223372036854775808",
                             "1e308", "0", "'\x1b[31m[/]'", "3.5", "start", "-start"])


@FUZZ
@given(data=st.data())
def test_nsys_mutations(data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "t.sqlite"
        db.write_bytes(NSYS_BYTES)
        with contextlib.closing(sqlite3.connect(db)) as con:
            for _ in range(data.draw(st.integers(1, 3), label="edits")):
                table = data.draw(st.sampled_from(sorted(NSYS_TABLES)), label="table")
                col = data.draw(st.sampled_from(NSYS_TABLES[table]), label="column")
                op = data.draw(st.sampled_from(["cell", "cell", "all", "rename", "drop_column", "delete", "drop_table"]), label="op")
                where = data.draw(st.sampled_from(["rowid = 1", "rowid % 2 = 0", "rowid < 4", "1"]), label="where")
                sql = {
                    "cell": f"UPDATE {table} SET {col} = {data.draw(bad_cells)} WHERE {where}",
                    "all": f"UPDATE {table} SET {col} = {data.draw(bad_cells)}",
                    "rename": f"ALTER TABLE {table} RENAME COLUMN {col} TO {col}_x",
                    "drop_column": f"ALTER TABLE {table} DROP COLUMN {col}",
                    "delete": f"DELETE FROM {table} WHERE {where}",
                    "drop_table": f"DROP TABLE {table}",
                }[op]
                try:
                    con.execute(sql)
                except sqlite3.Error:
                    pass  # e.g. a type the column's affinity refuses: this mutation does not apply
            con.commit()
        if data.draw(st.booleans(), label="truncate"):
            size = db.stat().st_size
            with open(db, "r+b") as fh:
                fh.truncate(data.draw(st.integers(0, size - 1)))
        analyse(db)


MANIFEST = {"schema": "perfdoctor.run/1", "step": "copy_step", "status": "ok", "exit_code": 0,
            "gpu": {"name": "NVIDIA H200", "peak_dram_bw_gbps": 4800.0, "sm_count": 132},
            "collectors": {"torch": {"status": "ok"}}, "calibration": {"dram_read_gbps": 4000.0},
            "light_pass": {"step_latency_ms": [1.0, 1.1, 1.2], "step_name": "copy_step"}}


@FUZZ
@given(data=st.data())
def test_bundle_mutations(data: st.DataObject) -> None:
    manifest = copy.deepcopy(MANIFEST)
    for _ in range(data.draw(st.integers(1, 3), label="edits")):
        op = data.draw(st.sampled_from(["replace", "drop", "nested", "whole"]), label="op")
        key = data.draw(st.sampled_from(sorted(MANIFEST)), label="key")
        if op == "replace":
            manifest[key] = data.draw(json_values)
        elif op == "drop":
            manifest.pop(key, None)
        elif op == "nested" and isinstance(manifest.get(key), dict):
            sub = manifest[key]
            inner = data.draw(st.sampled_from(sorted(sub) or ["x"]))
            sub[inner] = data.draw(json_values)
        elif op == "whole":
            manifest = data.draw(json_values)
            break
    raw_pass = data.draw(st.one_of(st.none(), json_values, st.fixed_dictionaries({"clock_sync": json_values})), label="torch.json")
    trace = data.draw(st.sampled_from(["ok", "truncated", "missing", "nsys"]), label="trace")
    with tempfile.TemporaryDirectory() as tmp:
        b = Path(tmp) / "bundle"
        (b / "raw").mkdir(parents=True)
        try:
            (b / "manifest.json").write_text(json.dumps(manifest))
        except (ValueError, TypeError):
            return
        if raw_pass is not None:
            (b / "raw" / "torch.json").write_text(json.dumps(raw_pass))
        if trace == "ok":
            shutil.copy(KINETO, b / "raw" / "torch-trace.json.gz")
        elif trace == "truncated":
            (b / "raw" / "torch-trace.json.gz").write_bytes(KINETO.read_bytes()[:3000])
        elif trace == "nsys":
            (b / "raw" / "nsys.sqlite").write_bytes(NSYS_BYTES)
        analyse(b)


# --------------------------------------------------------------------------- the CLI's side


def _one_line_exit_2(r) -> None:
    errors = [line for line in r.stderr.splitlines() if line.strip() and not line.startswith("warning: ")]
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    assert len(errors) == 1 and errors[0].startswith("error: "), r.stderr


def test_the_cli_says_one_line_for_mutated_inputs(tmp_path: Path) -> None:
    cut = tmp_path / "cut.json"
    cut.write_bytes(KINETO_BYTES[: len(KINETO_BYTES) // 2])
    _one_line_exit_2(run_cli("analyze", cut, timeout=60))

    flipped = tmp_path / "flipped.json.gz"
    doc = copy.deepcopy(KINETO_DOC)
    for e in doc["traceEvents"]:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            e["dur"] = "twelve"  # not a number: no GPU activity left to analyse (a number spelled "12" is read)
    flipped.write_bytes(gzip.compress(json.dumps(doc).encode()))
    _one_line_exit_2(run_cli("report", flipped, "-f", "md", timeout=60))

    db = tmp_path / "renamed.sqlite"
    db.write_bytes(NSYS_BYTES)
    with contextlib.closing(sqlite3.connect(db)) as con:
        con.execute("ALTER TABLE CUPTI_ACTIVITY_KIND_RUNTIME RENAME COLUMN start TO begin")
        con.commit()
    _one_line_exit_2(run_cli("gate", db, "--rules", "seed", timeout=60))

    b = tmp_path / "bundle"
    (b / "raw").mkdir(parents=True)
    shutil.copy(KINETO, b / "raw" / "torch-trace.json.gz")
    (b / "manifest.json").write_text(json.dumps({"gpu": ["H200"]}))
    _one_line_exit_2(run_cli("diff", b, KINETO, timeout=60))
