"""Hostile inputs, third round (issue 30, items 8, 11, 12 on CPU): a rank that dies without a
word, Ctrl-C on a job, numbers at the ends of the float range, bundle paths that are not
UTF-8, a program that deletes its own bundle, and the caches. Every program and file is
made here; the contract is docs/safety.md's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
TIMEOUT = 240


def perfdoctor(*args: str, cwd: Path, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "perfdoctor", *args], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=TIMEOUT, **kw)


def only_bundle(cwd: Path) -> Path:
    (b,) = (cwd / "runs").iterdir()
    return b


# --------------------------------------------------------------------------- 8. multi-rank blame

# Rank DEAD leaves at once (no results, no traceback, as an OOM kill would: posix._exit, the
# process's own exit — perfdoctor's os._exit writes the results first); the others wait in
# a collective for it and fail there, later.
DIES = """
import posix, sys, time
import torch, torch.distributed as dist
dist.init_process_group("gloo")
if dist.get_rank() == int(sys.argv[1]):
    posix._exit(int(sys.argv[2]))
time.sleep(0.5)
dist.all_reduce(torch.ones(4))
"""


@pytest.mark.parametrize("dead, code", [(1, 5), pytest.param(0, 7, marks=pytest.mark.extended)])
def test_a_rank_that_dies_silently_is_named_with_its_own_code(tmp_path: Path, dead: int, code: int) -> None:
    (tmp_path / "dies.py").write_text(DIES)
    done = perfdoctor("run", "-q", "--collect", "nvml", "--out", "runs", "--nproc-per-node", "2", "dies.py", str(dead), str(code),
                      cwd=tmp_path)
    assert done.returncode == code, done.stderr[-3000:]
    m = json.loads((only_bundle(tmp_path) / "manifest.json").read_text())
    assert m["failed_rank"] == {"rank": dead, "exit_code": code}
    status = m["ranks"][str(dead)]["passes"]["light"]
    assert status["exit_code"] == code and status["status"].startswith("no results") and f"exit {code}" in status["status"]
    # no rank traced (--collect nvml): no metrics.json, and the reason names the rank it would be of
    assert not (only_bundle(tmp_path) / "metrics.json").exists()
    assert m["metrics_error"] == "a 2-rank bundle: rank 0 loaded (perfdoctor analyze shows every rank)"


def test_the_first_silent_rank_by_torchruns_clock_and_not_one_it_stopped() -> None:
    from perfdoctor.bundle.protocol import Manifest, PassResults
    from perfdoctor.record import launch

    writer = PassResults(exit_code=1, program_error="RuntimeError: peer gone", ended_at_ns=5)
    seen = {1: {"exit_code": -15, "time_s": 100}, 2: {"exit_code": -9, "time_s": 101}, 3: {"exit_code": 5, "time_s": 102}}
    manifest = Manifest()
    launch.record_pass(manifest, "light", {0: writer, 1: None, 2: None, 3: None}, seen)
    assert launch.failed_rank(manifest, "light") == (2, -9)  # rank 1 was stopped by torchrun (SIGTERM): not the cause
    assert manifest.ranks["2"]["passes"]["light"]["status"].endswith("killed by signal 9, as torchrun saw it)")
    manifest = Manifest()
    launch.record_pass(manifest, "light", {0: writer, 1: None}, {})  # torchrun said nothing: named, its code unknown
    assert launch.failed_rank(manifest, "light") == (1, None)
    manifest = Manifest()  # a rank that died before it made its folder is still one of the job
    launch.record_pass(manifest, "light", {0: writer}, {4: {"exit_code": 3, "time_s": 1}})
    assert launch.failed_rank(manifest, "light") == (4, 3)


@pytest.mark.parametrize("content", ["[1, 2]", '{"1": {"exit_code": "5"}, "x": 1}', "{" * 100_000, "\xff"])
def test_a_damaged_torchrun_record_is_ignored(tmp_path: Path, content: str) -> None:
    from perfdoctor.record import launch

    (tmp_path / launch.FAILURES.format("light")).write_text(content, errors="surrogateescape")
    assert launch.torchrun_failures(tmp_path, "light") == {}
    os.mkfifo(tmp_path / launch.FAILURES.format("torch"))  # never opened: no hang
    assert launch.torchrun_failures(tmp_path, "torch") == {}


SLEEPS = """
import sys, time, pathlib
import torch.distributed as dist
dist.init_process_group("gloo")
pathlib.Path(sys.argv[1], f"ready{dist.get_rank()}").touch()
time.sleep(120)
"""


def test_ctrl_c_on_a_job_is_130(tmp_path: Path) -> None:
    (tmp_path / "sleeps.py").write_text(SLEEPS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "perfdoctor", "run", "-q", "--collect", "nvml", "--out", "runs", "--nproc-per-node", "2",
           "sleeps.py", str(tmp_path)]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + TIMEOUT
    while len(list(tmp_path.glob("ready*"))) < 2 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(list(tmp_path.glob("ready*"))) == 2, proc.communicate()[1][-2000:]
    os.killpg(proc.pid, signal.SIGINT)  # what the terminal does on Ctrl-C: the foreground group, perfdoctor run
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    m = json.loads((only_bundle(tmp_path) / "manifest.json").read_text())
    assert m["status"] == "interrupted" and m["exit_code"] == 130


# --------------------------------------------------------------------------- 11. tracebacks

KINETO = ROOT / "tests" / "fixtures" / "h200-pageable-sync-10steps.kineto.json.gz"


def repeat_bundle(where: Path, latencies: list[list[float]]) -> Path:
    """A bundle of the fixture trace whose light pass ran in len(latencies) processes."""
    import shutil

    (where / "raw").mkdir(parents=True)
    shutil.copy(KINETO, where / "raw" / "torch-trace.json.gz")
    doc = {"schema": "perfdoctor.run/1", "step": "copy_step", "gpu": {"name": "NVIDIA H200"},
           "repeat": {"requested": len(latencies), "processes": [{"step_latency_ms": lat} for lat in latencies]}}
    (where / "manifest.json").write_text(json.dumps(doc))
    return where


def one_error_line(done: subprocess.CompletedProcess) -> str:
    lines = [line for line in done.stderr.splitlines() if line.strip() and not line.startswith("warning: ")]
    assert done.returncode == 2 and "Traceback" not in done.stderr and len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    return lines[0]


@pytest.mark.parametrize("before, after, verdict", [
    (1e-308, 1e308, "regressed"), (1e308, 1e-308, "improved"),
])
def test_latencies_a_whole_float_range_apart(tmp_path: Path, before: float, after: float, verdict: str) -> None:
    b = repeat_bundle(tmp_path / "before", [[before] * 3, [before * 0.5] * 3, [before * 0.75] * 3])
    a = repeat_bundle(tmp_path / "after", [[after] * 3, [after * 0.9] * 3, [after * 0.8] * 3])
    done = perfdoctor("diff", str(b), str(a), "--no-rules", "--json", str(tmp_path / "d.json"), cwd=tmp_path)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    doc = json.loads((tmp_path / "d.json").read_text())
    p50 = doc["processes"]["step_latency_ms_p50"]
    assert p50["verdict"] == verdict and p50["ratio"]["value"] in (None, 0.0)  # past the float range: null (inf) or 0
    gate = perfdoctor("gate", str(a), "--baseline", str(b), "--fail-on", "step_latency_ms_p50:+5%", cwd=tmp_path)
    assert gate.returncode == (1 if verdict == "regressed" else 0) and "Traceback" not in gate.stderr, gate.stderr[-2000:]


def test_paths_that_are_not_utf8(tmp_path: Path) -> None:
    """A bundle and a trace whose names are not UTF-8 (bytes 0xff 0xfe): every command reads
    them, shows the bytes as \\xff, and writes reports into and beside them, even on a
    terminal whose encoding refuses what cannot be encoded."""
    import shutil

    b = os.fsdecode(os.path.join(os.fsencode(tmp_path), b"b\xff\xfe"))
    t = os.fsdecode(os.path.join(os.fsencode(tmp_path), b"t\xff.json.gz"))
    repeat_bundle(Path(b), [[1.0, 1.1]])
    shutil.copy(KINETO, t)
    strict = {"env": {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONIOENCODING": "utf-8:strict", "COLUMNS": "200"}}
    runs = [("analyze", b), ("analyze", b, "--brief"), ("analyze", t, "--json", t[:-8] + ".out.json"), ("report", b),
            ("report", b, "--format", "json"), ("report", t, "--format", "html", "-o", t + ".html"),
            ("diff", b, b, "--no-rules"), ("gate", b, "--baseline", b, "--fail-on", "step_latency_ms_p50:+50%", "--junit", b + ".xml")]
    for args in runs:
        done = subprocess.run([sys.executable, "-m", "perfdoctor", *args], capture_output=True, cwd=tmp_path, timeout=TIMEOUT, **strict)
        err = done.stderr.decode()
        assert done.returncode == 0 and "Traceback" not in err, (args, err[-2000:])
        assert b"\\xff" in done.stdout + done.stderr, args  # the byte, shown
    findings = json.loads((Path(b) / "findings.json").read_text())
    assert findings["source"]["path"].endswith("b??")  # JSON carries text: the bytes that are not UTF-8 as "?", as every JSON output
    assert Path(t + ".html").stat().st_size > 1000
    missing = subprocess.run([sys.executable, "-m", "perfdoctor", "analyze", b + "x"], capture_output=True, text=True,
                             cwd=tmp_path, timeout=TIMEOUT, **strict)
    assert one_error_line(missing).endswith("b\\xff\\xfex: no such file or directory")


@pytest.mark.parametrize("removes", ["runs", "runs/*", "runs/*/raw"])
def test_a_program_that_deletes_its_own_bundle(tmp_path: Path, removes: str) -> None:
    (tmp_path / "keep.txt").write_text("the user's")
    (tmp_path / "rm.py").write_text(f"import glob, shutil\nshutil.rmtree(glob.glob({removes!r})[0])\n")
    done = perfdoctor("run", "-q", "--out", "runs", "rm.py", cwd=tmp_path)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert done.returncode == 2 and "Traceback" not in done.stderr and len(errors) == 1, done.stderr
    if removes != "runs/*/raw":
        assert "was removed while the run was writing it" in errors[0]
    assert "could not be written" in done.stderr  # the program's own pass said why it has no results
    assert (tmp_path / "keep.txt").read_text() == "the user's"
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == (["keep.txt", "rm.py"] if removes == "runs" else ["keep.txt", "rm.py", "runs"]), left  # nothing made elsewhere


# --------------------------------------------------------------------------- 12. caches, on CPU (the H200 runs calibrate and the cubin build)


@pytest.mark.parametrize("entry", [{"dram_read_gbps": "fast", "bf16_matmul_tflops": 700.0}, {"dram_read_gbps": 4100.0},
                                   {"dram_read_gbps": 0.0, "bf16_matmul_tflops": 700.0}, ["not", "an", "entry"]])
def test_an_unchecked_cache_entry_never_reaches_a_bundle(tmp_path: Path, monkeypatch, entry) -> None:
    """What ``perfdoctor run`` copies into every bundle's manifest (``calibration``) is the
    validated cache entry or nothing: a bad entry cannot make the bundles unreadable."""
    from perfdoctor.record import calibrate
    from perfdoctor.record.run import cached_calibration

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    calibrate.cache_path().parent.mkdir(parents=True)
    calibrate.cache_path().write_text(json.dumps({"GPU-1": entry}))
    assert cached_calibration({"name": "NVIDIA H200", "uuid": "GPU-1"}) is None


@pytest.mark.parametrize("cache", ["unwritable", "fifo", "bad_entry", "none"])
def test_calibrate_prints_its_numbers_and_one_warning(tmp_path: Path, monkeypatch, cache: str) -> None:
    """``perfdoctor calibrate`` (its command function; the measurement faked, there is no GPU
    here): the numbers are printed whether or not they could be cached, an unwritable cache is
    one "not cached" line, an unreadable one or a bad entry one "rewritten" line, never a
    traceback. The H200 runs the real command (tests/record/test_caches_gpu.py)."""
    torch = pytest.importorskip("torch")
    import typer
    from typer.testing import CliRunner

    import perfdoctor.cli.calibrate as cli
    from perfdoctor.collectors import nvml
    from perfdoctor.record import calibrate

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Fake GPU")
    monkeypatch.setattr(nvml, "device_info", lambda *a: {"uuid": "GPU-1", "peak_dram_bw_gbps": 4800.0})
    measured = {"dram_read_gbps": 4100.0, "bf16_matmul_tflops": 700.0, "measured_at": "2026-12-02T00:00:00Z"}
    monkeypatch.setattr(cli, "calibrate", lambda *a: dict(measured))
    if cache == "unwritable":
        (tmp_path / "perfdoctor").write_text("a file where the cache folder goes")
    elif cache != "none":
        calibrate.cache_path().parent.mkdir()
        if cache == "fifo":
            os.mkfifo(calibrate.cache_path())
        else:
            calibrate.cache_path().write_text(json.dumps({"GPU-1": {"dram_read_gbps": "x"}, "GPU-2": measured}))
    app = typer.Typer()
    app.command()(cli.calibrate_command)
    result = CliRunner().invoke(app, ["--sizes-mb", "8"])
    assert result.exit_code == 0 and result.exception is None, result.output
    out = result.stdout
    assert "DRAM read (measured): 4,100 GB/s (85.4 % of the theoretical 4,800 GB/s, NVML)" in out
    assert "bf16 matmul (measured): 700 TFLOP/s" in out
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    if cache == "unwritable":
        assert "not cached (see the warning above)" in out
        assert len(warnings) == 1 and warnings[0].startswith("warning: calibration not cached ("), result.stderr
        assert (tmp_path / "perfdoctor").read_text() == "a file where the cache folder goes"
        return
    assert f"cached in {calibrate.cache_path()}" in out
    if cache == "none":
        assert warnings == []
    else:
        assert len(warnings) == 1 and warnings[0].startswith("warning: calibration cache rewritten: "), result.stderr
        assert ("is a FIFO" if cache == "fifo" else "1 invalid entry dropped") in warnings[0]
    assert calibrate.load_calibration("GPU-1")["dram_read_gbps"] == 4100.0
    assert calibrate.load_all().keys() == ({"GPU-1", "GPU-2"} if cache == "bad_entry" else {"GPU-1"})
