"""Valid Kineto traces in the forms other tracers write them (issue 29 item 1, issue 30
item 10), each made here from the real H200 fixture by one transformation, and read to
the same metrics as the original: epoch-µs timestamps, strings where numbers usually
stand, the JSON-array form of the Chrome trace format, a few damaged events among many
(skipped, counted and said)."""

from __future__ import annotations

import copy
import gzip
import json
import re
from decimal import Decimal
from pathlib import Path

import pytest

from conftest import FIXTURES, run_cli_inprocess

SOURCE = FIXTURES / "h200-profilerstep-5steps.kineto.json.gz"
EPOCH_US = 1_690_000_000_000_000  # July 2023 in µs since the epoch: what Kineto wrote before baseTimeNanoseconds
KEYS = ("steps", "gpu_idle_ratio", "launches_per_step", "kernels_per_step", "step_gpu_ms_p50")


def original() -> dict:
    with gzip.open(SOURCE) as f:
        return json.load(f)


def metrics(path: Path) -> dict[str, float]:
    from perfdoctor.pipeline import diagnose

    m = diagnose(path, rules=None, warnings=False).analysis.metrics
    return {k: m[k].value for k in KEYS}


def write(path: Path, doc: object) -> Path:
    path.write_text(json.dumps(doc))
    return path


def complete(doc: dict, *cats: str) -> list[dict]:
    return [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") in cats]


@pytest.fixture(scope="module")
def want() -> dict[str, float]:
    return metrics(SOURCE)


def test_the_source_has_what_the_forms_change(want: dict[str, float]) -> None:
    doc = original()
    assert want["steps"] == 5 and want["launches_per_step"] > 0
    assert complete(doc, "kernel") and complete(doc, "cpu_op")
    assert max(e["ts"] for e in doc["traceEvents"] if "ts" in e) < 1e14  # a monotonic-clock trace: not rebased


def test_epoch_microseconds_are_read_to_the_same_metrics(tmp_path: Path, want: dict[str, float]) -> None:
    from perfdoctor.pipeline import load_trace

    with gzip.open(SOURCE) as f:
        doc = json.load(f, parse_float=Decimal)  # exact, so the shift keeps every ns fraction
    first = int(next(e["ts"] for e in doc["traceEvents"] if "ts" in e))
    for e in doc["traceEvents"]:
        if "ts" in e:
            e["ts"] = f"@{e['ts'] - first + EPOCH_US}@"
    doc["traceEvents"].insert(0, {"ph": "M", "name": "process_name", "pid": 0, "ts": 0, "args": {"name": "x"}})  # no origin
    text = re.sub(r'"@([-0-9.]+)@"', r"\1", json.dumps(doc, default=float))  # the exact decimal, as a JSON number
    path = tmp_path / "epoch.json"
    path.write_text(text)
    got = metrics(path)
    assert got["steps"] == want["steps"] and got["launches_per_step"] == want["launches_per_step"]
    for k in ("gpu_idle_ratio", "step_gpu_ms_p50"):
        assert got[k] == pytest.approx(want[k], rel=1e-3, abs=1e-4), k  # float64 holds epoch µs to 0.25 µs
    p = load_trace(path)
    assert p.origin.time_origin_ns == EPOCH_US * 1000
    assert p.origin.warnings == ()


def test_strings_and_floats_where_numbers_stand(tmp_path: Path, want: dict[str, float]) -> None:
    from perfdoctor.pipeline import load_trace

    doc = original()
    for op in complete(doc, "cpu_op"):
        op.setdefault("args", {})["grid"] = "grid(100,)"  # torch.compile's CPU ops
        op["pid"] = float(op["pid"]) if isinstance(op.get("pid"), int) else op.get("pid")
    kernel = complete(doc, "kernel")[0]
    kernel["args"]["grid"] = [float(x) for x in kernel["args"]["grid"]]
    kernel["args"]["unknown field"] = {"nested": [1, "a"]}
    op = complete(doc, "cpu_op")[0]
    op["ts"] = str(op["ts"])  # a number spelled as a string: read
    path = write(tmp_path / "strings.json", doc)
    assert metrics(path) == want
    p = load_trace(path)
    grids = p.activities.loc[p.activities["correlation"] == kernel["args"]["correlation"], "grid"].tolist()
    assert grids == [",".join(str(int(x)) for x in kernel["args"]["grid"])]
    assert p.origin.warnings == ()


def test_the_json_array_form_is_read(tmp_path: Path, want: dict[str, float]) -> None:
    path = write(tmp_path / "array.json", original()["traceEvents"])
    assert metrics(path) == want


def test_a_few_damaged_events_are_skipped_counted_and_said(tmp_path: Path, want: dict[str, float]) -> None:
    from perfdoctor.pipeline import load_trace

    doc = original()
    events = doc["traceEvents"]
    n_kernels = len(complete(doc, "kernel"))
    # A copy of the last kernel with a damaged time, and two events that are not events at
    # all: the original events are all still there, so the metrics must not move.
    bad_time = copy.deepcopy(complete(doc, "kernel")[-1])
    bad_time["dur"] = "unknown"
    events += [bad_time, {"ph": "X", "cat": "cpu_op", "name": 7, "ts": 1.0, "dur": 1.0}, {"ph": "X", "args": [1, 2]}]
    path = write(tmp_path / "damaged.json", doc)
    p = load_trace(path)
    assert len(p.activities[p.activities["kind"] == "kernel"]) == n_kernels
    assert p.origin.warnings[0] == (
        "skipped 1 events (1 of them GPU activities): no valid 'ts' or 'dur' (missing, not a number, negative or out of range)"
    )
    assert p.origin.warnings[1].startswith("skipped 2 events: not a valid trace event (first: ")
    assert metrics(path) == want
    done = run_cli_inprocess("analyze", path)
    assert done.returncode == 0, done.stderr
    skipped = [line for line in done.stderr.splitlines() if "skipped" in line]
    assert len(skipped) == 2 and all(line.startswith("warning: ") for line in skipped), done.stderr


def test_python_nan_and_infinity_values_are_read_as_missing(tmp_path: Path, want: dict[str, float]) -> None:
    # Python's json.dump writes NaN/Infinity (a script's rewrite of a trace, pandas' missing
    # values), which no JSON parser reads: refused before as "not a JSON trace (JSON is
    # malformed: invalid character)". As values they are nulls now, said in one warning; a
    # NaN in a string stays the string
    from perfdoctor.pipeline import load_trace

    doc = original()
    ops = complete(doc, "cpu_op")
    for op in ops:
        op.setdefault("args", {})["filler"] = float("nan")
    ops[0]["args"]["spans"] = [float("inf"), -float("inf"), 1]
    ops[1]["name"] = f"{ops[1]['name']}: NaN"
    bad_time = copy.deepcopy(complete(doc, "kernel")[-1])
    bad_time["dur"] = float("nan")
    doc["traceEvents"].append(bad_time)
    path = tmp_path / "nan.json"
    path.write_text(json.dumps(doc))  # allow_nan, as Python writes by default
    assert metrics(path) == want
    p = load_trace(path)
    assert p.origin.warnings[0] == f"read {len(ops) + 3} NaN/Infinity values as missing: not JSON (Python's json module writes them)"
    assert p.origin.warnings[1].startswith("skipped 1 events (1 of them GPU activities): no valid 'ts' or 'dur'")
    assert p.origin.op_counts[ops[1]["name"]] == 1  # "...: NaN", a name, kept whole


def test_a_trace_with_no_usable_gpu_activity_left_is_refused(tmp_path: Path) -> None:
    doc = original()
    for e in complete(doc, "kernel", "gpu_memcpy", "gpu_memset"):
        e["ts"] = "never"
    done = run_cli_inprocess("analyze", write(tmp_path / "none.json", doc))
    assert done.returncode == 2 and "GPU activities lack a valid 'ts' or 'dur'" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_threads_are_numbered_the_same_from_int_and_object_ids() -> None:
    """The decoders send a span's pids and tids as int64 when all are ints, else as objects
    (kineto_events._thread_keys); the thread ids are the same either way, mixed too."""
    import numpy as np

    from perfdoctor.collectors.kineto_events import _thread_keys
    from perfdoctor.collectors.kineto_tables import _thread_ids

    pids, tids = [7, 7, 3, 7, 3, 7], [1, 2, 1, 1, 1, 2]
    assert _thread_keys(pids).dtype == np.int64
    assert _thread_keys([1, "gpu", None]).dtype == object and _thread_keys([2**70]).dtype == object
    as_objects = _thread_ids(np.array(pids, dtype=object), np.array(tids, dtype=object))
    assert as_objects.tolist() == [0, 1, 2, 0, 2, 1]
    assert _thread_ids(_thread_keys(pids), _thread_keys(tids)).tolist() == as_objects.tolist()
    mixed_pids = np.concatenate([_thread_keys(pids[:3]), _thread_keys([7.0, 3, 7])])  # a float: that span's as objects
    assert _thread_ids(mixed_pids, _thread_keys(tids)).tolist() == as_objects.tolist()
