"""perfdoctor analyze: the metric contract on real H200 traces, bad input, CPU-only traces."""

from __future__ import annotations

import gzip
import json
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import FIXTURES, run_cli_inprocess
from perfdoctor.pipeline import load_trace
from perfdoctor.errors import UsageError
from perfdoctor.analysis.metrics import METRICS, analyze
from perfdoctor.analysis.steps import union_ns

COUNT_KEYS = {"steps", "kernels_per_step", "launches_per_step", "sync_calls_per_step", "pageable_memcpy_bytes"}


def expected_values(section: str) -> dict[str, float]:
    """The `| key | value |` table under a fixture's heading in tests/fixtures/README.md."""
    text = (FIXTURES / "README.md").read_text()
    body = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1:3] for line in body.splitlines() if line.startswith("| `")]
    return {k.strip().strip("`"): float(v) for k, v in rows}


@pytest.mark.parametrize(
    "fixture, step",
    [
        ("h200-llama1b-eager-5steps.kineto.json.gz", "decode_step"),
        ("h200-matmul-20steps.nsys.sqlite.gz", "step*"),
    ],
)
def test_metrics_match_the_shared_fixture_values(fixture: str, step: str) -> None:
    want = expected_values(fixture)
    assert len(want) >= 15
    got = analyze(load_trace(FIXTURES / fixture), step=step)
    for key, value in want.items():
        m = got.metrics[key]
        assert m.value is not None, (key, m.reason)
        if key in COUNT_KEYS:
            assert m.value == value, key
        else:
            assert m.value == pytest.approx(value, rel=1e-3), key


def test_step_is_found_without_step_option_and_metrics_json_has_contract_schema(tmp_path: Path) -> None:
    out = tmp_path / "metrics.json"
    r = run_cli_inprocess("analyze", FIXTURES / "h200-llama1b-eager-5steps.kineto.json.gz", "--json", out)
    assert r.returncode == 0, r.stderr
    assert "decode_step" in r.stdout and "Top kernels" in r.stdout
    doc = json.loads(out.read_text())
    assert doc["schema"] == "perfdoctor.metrics/2"
    assert set(doc["metrics"]) == set(METRICS)
    assert doc["metrics"]["kernels_per_step"] == {"value": 945.0, "unit": "count", "source": "kineto"}
    absent = doc["metrics"]["peak_dram_bw_gbps"]
    assert absent["value"] is None and absent["reason"]
    assert len(doc["steps"]) == 5
    assert {"host_start_ns", "host_end_ns", "gpu_start_ns", "gpu_end_ns", "kernels", "launches"} <= set(doc["steps"][0])


def test_nsys_without_step_pattern_finds_the_steps_automatically() -> None:
    # Contract v2: no repeated range name -> the step is found automatically (the repeating
    # launch sequence), and the report says so. Reference: the same file with --step 'step*'.
    got = analyze(load_trace(FIXTURES / "h200-matmul-20steps.nsys.sqlite.gz"))
    ref = analyze(load_trace(FIXTURES / "h200-matmul-20steps.nsys.sqlite.gz"), step="step*")
    assert got.metrics["steps"].value == 20
    assert got.steps.how.startswith("automatic")
    assert got.value("kernels_per_step") == ref.value("kernels_per_step") == 3
    assert got.metrics["peak_dram_bw_gbps"].value == pytest.approx(4814.304)


def test_a_trace_without_any_repetition_has_no_steps_and_says_why() -> None:
    p = load_trace(FIXTURES / "h200-matmul-20steps.nsys.sqlite.gz")
    p.ranges = p.ranges.iloc[0:0]
    first = p.calls["correlation"].isin(p.activities["correlation"])
    # keep one launch with its GPU work: nothing can repeat
    keep = p.calls[first & p.calls["name"].str.startswith("cudaLaunchKernel")].iloc[:1]
    p.calls = keep.reset_index(drop=True)
    p.activities = p.activities[p.activities["correlation"].isin(keep["correlation"])].reset_index(drop=True)
    got = analyze(p)
    assert got.metrics["steps"].value == 0
    assert got.metrics["step_latency_ms_p50"].value is None
    assert "no step ranges" in got.metrics["step_latency_ms_p50"].reason
    # the span falls back to the whole trace, so the timeline metrics still exist
    assert got.metrics["gpu_idle_ratio"].value is not None


def test_tokens_per_step_gives_tokens_per_s() -> None:
    got = analyze(load_trace(FIXTURES / "h200-llama1b-eager-5steps.kineto.json.gz"), tokens_per_step=2)
    assert got.metrics["tokens_per_s"].value == pytest.approx(2 * got.metrics["steps_per_s"].value)


def test_union_matches_a_brute_force_count() -> None:
    rng = np.random.default_rng(7)
    starts = rng.integers(0, 1000, 200)
    ends = starts + rng.integers(0, 60, 200)
    covered = np.zeros(1200, dtype=bool)
    for s, e in zip(starts, ends):
        covered[s:e] = True
    assert union_ns(starts, ends, 100, 900) == covered[100:900].sum()
    assert union_ns(np.array([]), np.array([]), 0, 10) == 0


# --- bad input: one line, exit 2, never a traceback --------------------------------------


def assert_usage_error(r: subprocess.CompletedProcess, *needles: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, r.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_missing_file(tmp_path: Path) -> None:
    assert_usage_error(run_cli_inprocess("analyze", tmp_path / "nope.json"), "no such file")


def test_truncated_gzip(tmp_path: Path) -> None:
    data = (FIXTURES / "h200-llama1b-eager-5steps.kineto.json.gz").read_bytes()
    bad = tmp_path / "cut.json.gz"
    bad.write_bytes(data[: len(data) // 2])
    assert_usage_error(run_cli_inprocess("analyze", bad), "damaged gzip")


def test_truncated_nsys_gzip(tmp_path: Path) -> None:
    data = (FIXTURES / "h200-matmul-20steps.nsys.sqlite.gz").read_bytes()
    bad = tmp_path / "cut.sqlite.gz"
    bad.write_bytes(data[: len(data) // 3])
    assert_usage_error(run_cli_inprocess("analyze", bad), "damaged gzip")


def test_not_json(tmp_path: Path) -> None:
    bad = tmp_path / "trace.json"
    bad.write_text("this is not json {")
    assert_usage_error(run_cli_inprocess("analyze", bad), "not a JSON trace")


def test_json_that_is_not_a_trace(tmp_path: Path) -> None:
    bad = tmp_path / "trace.json"
    bad.write_text('{"hello": 1}')
    assert_usage_error(run_cli_inprocess("analyze", bad), "no 'traceEvents'")


def test_empty_trace(tmp_path: Path) -> None:
    bad = tmp_path / "trace.json"
    bad.write_text('{"traceEvents": []}')
    assert_usage_error(run_cli_inprocess("analyze", bad), "empty trace")


def test_a_chrome_trace_of_another_profiler_is_refused_by_what_it_holds(tmp_path: Path) -> None:
    # TensorFlow's / JAX's profiler: process names, XLA ops with no 'cat'; read as Kineto it
    # gave "0 steps" and exit 0
    events = [{"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/device:GPU:0"}}]
    for i in range(20):
        events += [{"ph": "X", "pid": 2, "tid": 1, "ts": 1000 + 100 * i, "dur": 80, "name": "jit_train_step"},
                   {"ph": "X", "pid": 1, "tid": 3, "ts": 1010 + 100 * i, "dur": 50, "name": "fusion.12"}]
    bad = tmp_path / "jax.trace.json"
    bad.write_text(json.dumps({"displayTimeUnit": "ns", "traceEvents": events}))
    assert_usage_error(run_cli_inprocess("analyze", bad), "none of its 40 timed events is of a kind perfdoctor reads (categories: none x40)")


def test_not_sqlite(tmp_path: Path) -> None:
    bad = tmp_path / "report.sqlite"
    bad.write_bytes(b"definitely not sqlite" * 100)
    assert_usage_error(run_cli_inprocess("analyze", bad), "not an SQLite database")


def test_nsys_export_missing_tables(tmp_path: Path) -> None:
    """A real export with its CUDA runtime table dropped: named in the error."""
    db = tmp_path / "report.sqlite"
    db.write_bytes(gzip.decompress((FIXTURES / "h200-matmul-20steps.nsys.sqlite.gz").read_bytes()))
    with sqlite3.connect(db) as con:
        con.execute("DROP TABLE CUPTI_ACTIVITY_KIND_RUNTIME")
    assert_usage_error(run_cli_inprocess("analyze", db), "CUPTI_ACTIVITY_KIND_RUNTIME")
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as con:
        con.execute("CREATE TABLE t (x)")
    assert_usage_error(run_cli_inprocess("analyze", other), "not an Nsight Systems export")


def test_step_that_matches_nothing() -> None:
    r = run_cli_inprocess("analyze", FIXTURES / "h200-matmul-20steps.nsys.sqlite.gz", "--step", "decode*")
    assert_usage_error(r, "--step 'decode*' matches no range", "step0")


def test_unknown_suffix(tmp_path: Path) -> None:
    bad = tmp_path / "trace.txt"
    bad.write_text("x")
    assert_usage_error(run_cli_inprocess("analyze", bad), "unknown trace type")


# --- a real CPU-only torch profiler trace --------------------------------------------------

CPU_PROGRAM = textwrap.dedent(
    """
    import sys, torch
    from torch.profiler import profile, record_function, ProfilerActivity
    x = torch.randn(64, 64)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(4):
            with record_function("cpu_step"):
                y = (x @ x).relu().sum()
    prof.export_chrome_trace(sys.argv[1])
    """
)


@pytest.fixture(scope="module")
def cpu_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch")
    path = tmp_path_factory.mktemp("cpu") / "cpu.json"
    subprocess.run([sys.executable, "-c", CPU_PROGRAM, str(path)], check=True, timeout=120)
    return path


def test_cpu_only_trace_is_valid_input_with_gpu_metrics_absent(cpu_trace: Path, tmp_path: Path) -> None:
    out = tmp_path / "m.json"
    r = run_cli_inprocess("analyze", cpu_trace, "--step", "cpu_step", "--json", out)
    assert r.returncode == 0, r.stderr
    metrics = json.loads(out.read_text())["metrics"]
    assert metrics["steps"]["value"] == 4
    for key in ("gpu_idle_ratio", "kernel_time_ratio", "kernels_per_step", "step_latency_ms_p50"):
        assert metrics[key]["value"] is None
        assert metrics[key]["reason"], key
    assert "no GPU activity" in metrics["gpu_idle_ratio"]["reason"]


def test_analysis_path_does_not_import_torch() -> None:
    code = (
        "import sys\n"
        "from perfdoctor.cli.commands import main\n"
        f"sys.argv = ['perfdoctor', 'analyze', {str(FIXTURES / 'h200-llama1b-eager-5steps.kineto.json.gz')!r}]\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "print('torch-free')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "torch-free" in r.stdout


STACK_PROGRAM = textwrap.dedent(
    """
    import sys, torch
    from torch.profiler import profile, record_function, ProfilerActivity

    def work(x):
        return (x @ x).relu().sum()

    x = torch.randn(32, 32)
    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
        for _ in range(3):
            with record_function("stack_step"):
                work(x)
    prof.export_chrome_trace(sys.argv[1])
    """
)


def test_python_frames_are_kept_for_call_sites_but_never_steps(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    path, program = tmp_path / "stack.json", tmp_path / "stacked.py"
    program.write_text(STACK_PROGRAM)
    subprocess.run([sys.executable, str(program), str(path)], check=True, timeout=120)
    profile = load_trace(path)
    frames = profile.ranges[profile.ranges["source"] == "python"]
    assert frames["name"].str.contains(r"stacked\.py\(\d+\): work").any()
    assert analyze(profile, step="stack_step").steps.count == 3
    # `work` repeats as often as the step, but a Python frame is never a step
    with pytest.raises(UsageError, match="matches no range"):
        analyze(profile, step="*: work")


def _analyze_command() -> Any:
    import typer

    from perfdoctor.cli.commands import app

    return typer.main.get_command(app).commands["analyze"]


def test_plain_options_are_the_commands_own() -> None:
    """early.OPTIONS, what analyze's command line is read by without typer: every option of
    the command click builds, with its keyword, and its type (a list: repeatable)."""
    import typing

    from perfdoctor.cli.analyze import analyze_command
    from perfdoctor.cli.early import OPTIONS

    hints = typing.get_type_hints(analyze_command)
    read = {}
    for param in _analyze_command().params:
        if param.param_type_name == "argument":
            continue
        kind = hints[param.name]
        if typing.get_origin(kind) is typing.Union:
            (kind,) = [k for k in typing.get_args(kind) if k is not type(None)]
        if typing.get_origin(kind) is list:
            kind = list(typing.get_args(kind))
        assert param.multiple == isinstance(kind, list) and getattr(param, "is_flag", False) == (kind is bool)
        (opt,) = param.opts
        read[opt] = (param.name, kind)
    assert read == OPTIONS


TOKENS = ["t.json", "u.json", "-", "--", "", "--json", "m.json", "--json=-", "--json=", "--step", "decode*", "--step=a=b",
          "--brief", "--brief=1", "--top", "0", "3", "01", "-1", "1e3", "--top=2", "--tokens-per-step", "1.5", ".5", "1.",
          "inf", "nan", "1_0", "+1", " 2", "--rules", "seed", "p.toml", "--threshold", "a=1", "--workload", "inference",
          "--help", "-h", "--bogus", "--rule", "-x", "\udcff.json", "\u0663", "123456789012345678901"]


def _listed(arguments: dict) -> dict:
    return {k: list(v) if isinstance(v, (list, tuple)) else v for k, v in arguments.items()}


def test_plain_arguments_are_what_typer_gives_analyze(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every command line early.plain_arguments reads, typer reads alike: the same keyword
    arguments for run_analyze (the options left out at its defaults), types included; what
    it does not read is typer's (random command lines from tokens that reach every branch)."""
    import inspect
    import random

    import perfdoctor.cli.analyze
    from perfdoctor.cli.analyze_run import run_analyze
    from perfdoctor.cli.early import plain_arguments

    defaults = {k: p.default for k, p in inspect.signature(run_analyze).parameters.items() if p.default is not p.empty}
    given: list = []
    monkeypatch.setattr(perfdoctor.cli.analyze, "run_analyze", lambda path, **kw: given.append({"path": path, **kw}))
    command = _analyze_command()
    rng = random.Random(0)
    lines = [["t.json", "--json", "m.json"], ["--json", "-", "t.json", "--brief", "--top=0"], ["--step", "--brief", "t.json"],
             ["--rules", "seed", "--rules", "p.toml", "t.json", "--threshold", "a=1", "--tokens-per-step", "2.50"],
             ["--top", "2", "--top", "3", "--", "-"], ["--json=", "t.json", "--workload", "inference"]]
    lines += [[rng.choice(TOKENS) for _ in range(rng.randint(1, 6))] for _ in range(1500)]
    plain = 0
    for args in lines:
        read = plain_arguments(args)
        if read is None:
            continue
        plain += 1
        given.clear()
        command.main(args=args, prog_name="perfdoctor analyze", standalone_mode=False)
        typer_gave, plain_gives = _listed(given[0]), _listed({**defaults, **read})
        assert typer_gave == plain_gives, args
        assert {k: type(v) for k, v in typer_gave.items()} == {k: type(v) for k, v in plain_gives.items()}, args
    assert plain > 200
    assert all(plain_arguments(args) is not None for args in lines[:6])


def test_a_load_begun_early_that_no_command_takes_is_dropped(tmp_path: Path) -> None:
    """program() begins the trace's load before click parses (pipeline.start_early): a load
    no command takes is stopped, and a command that fails first still fails with one line."""
    from perfdoctor import pipeline

    trace = FIXTURES / "h200-llama1b-eager-5steps.kineto.json.gz"
    pipeline.start_early(trace)
    assert list(pipeline._early) == [str(trace)]
    pipeline.drop_early()
    assert not pipeline._early
    out = tmp_path / "m.json"
    r = run_cli_inprocess("analyze", "--top", "5", str(trace), "--json", str(out))
    assert r.returncode == 0, r.stderr
    r2 = run_cli_inprocess("analyze", "--json", str(trace), str(trace))  # the output would overwrite the input
    assert r2.returncode == 2 and r2.stderr.count("\n") == 1, r2.stderr


def test_a_folder_with_no_trace_says_which_files_it_looked_for(tmp_path: Path) -> None:
    """A folder of exported traces named otherwise (marker.json): not "not a perfdoctor run
    bundle (no manifest.json)" alone, but the trace globs it looked for; exit 2, one line."""
    (tmp_path / "marker.json").write_text("{}")
    r = run_cli_inprocess("analyze", tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "no *.pt.trace.json or *.pt.trace.json.gz file" in r.stderr and "manifest.json" in r.stderr
