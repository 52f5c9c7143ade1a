"""Hostile inputs, second round (issue 30): the surfaces added after the first round — report
files written into a bundle, compare-programs' outputs, the baseline store, rank folders,
the repeats' messages, the sanitiser's invisible characters, store names. Every attack is
built here from a real H200 fixture; the contract is the first round's (docs/safety.md):
bad input is one line ``error: ...`` and exit 2, nothing outside the place named is
written, nothing hangs, user text is inert.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES, run_cli, run_cli_inprocess
from perfdoctor.text import clean, github_data

KINETO = FIXTURES / "h200-pageable-sync-10steps.kineto.json.gz"
TIMEOUT = 120


def assert_usage(done, *needles: str) -> str:
    """Exit 2 and exactly one line ``error: ...`` on stderr (no traceback)."""
    lines = [line for line in done.stderr.splitlines() if line.strip() and not line.startswith("warning: ")]
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def bundle(tmp: Path, name: str = "b", ranks: int = 0) -> Path:
    """A run bundle of the fixture trace; with ``ranks``, one rank folder per rank."""
    b = tmp / name
    doc: dict = {"schema": "perfdoctor.run/1", "step": "copy_step", "gpu": {"name": "NVIDIA H200"}}
    if ranks:
        doc |= {"world_size": ranks, "ranks": {str(k): {"light_pass": None} for k in range(ranks)}}
        for k in range(ranks):
            (b / "raw" / f"rank{k}").mkdir(parents=True)
            shutil.copy(KINETO, b / "raw" / f"rank{k}" / "torch-trace.json.gz")
    else:
        (b / "raw").mkdir(parents=True)
        shutil.copy(KINETO, b / "raw" / "torch-trace.json.gz")
    (b / "manifest.json").write_text(json.dumps(doc))
    return b


# --------------------------------------------------------------------------- 1. links in a bundle


def test_report_into_a_bundle_replaces_links_never_writes_through_them(tmp_path: Path) -> None:
    b = bundle(tmp_path)
    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    trace_before = (b / "raw" / "torch-trace.json.gz").read_bytes()
    (b / "report.md").symlink_to(outside)
    (b / "findings.json").symlink_to("raw/torch-trace.json.gz")
    os.mkfifo(b / "report.html")  # written into, a FIFO would block the report forever
    done = run_cli("report", b, timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr
    assert outside.read_text() == "precious"
    assert (b / "raw" / "torch-trace.json.gz").read_bytes() == trace_before
    for name in ("report.md", "findings.json", "report.html"):
        assert (b / name).is_file() and not (b / name).is_symlink(), name
    assert json.loads((b / "findings.json").read_text())["schema"].startswith("perfdoctor.findings/")


# --------------------------------------------------------------------------- 2. compare-programs' outputs


def test_compare_programs_json_never_overwrites_a_program(tmp_path: Path) -> None:
    prog = tmp_path / "a.py"
    prog.write_text("print('hi')\n")
    done = run_cli("compare-programs", prog, f"{prog} --x", "--json", prog, "--out", tmp_path / "runs", timeout=TIMEOUT)
    assert_usage(done, "is also an input")
    assert prog.read_text() == "print('hi')\n"
    assert not (tmp_path / "runs").exists()  # refused before anything ran


# --------------------------------------------------------------------------- 3, 4, 13. the baseline store


@pytest.mark.parametrize("where", ["inside", "equal"])
def test_a_store_inside_or_equal_to_the_run_is_refused(tmp_path: Path, where: str) -> None:
    b = bundle(tmp_path)
    store = b / "store" if where == "inside" else b
    done = run_cli_inprocess("gate", b, "--rules", "seed", "--min-severity", "critical", "--store", store, "--record", "main")
    assert_usage(done, "keep the store apart")
    assert not (b / "store").exists() and not (b / "main").exists()


def _stored(tmp: Path, run: Path, sequence: int = 1, run_field: str = "run") -> Path:
    """A store with one entry under ``main`` holding a copy of ``run``, written by hand."""
    entry = tmp / "store" / "main" / f"{sequence:06d}-20261201T000000Z"
    shutil.copytree(run, entry / "run")
    doc = {"schema": "perfdoctor.baseline/1", "name": "main", "sequence": sequence, "recorded_at": "2026-12-01T00:00:00Z",
           "kind": "recorded", "reason": None, "source": str(run), "run": run_field, "previous": None, "gate": {}}
    (entry / "record.json").write_text(json.dumps(doc))
    return tmp / "store"


@pytest.mark.parametrize("run_field", ["/", "../../..", "run/../../../elsewhere"])
def test_a_record_pointing_outside_its_entry_is_refused(tmp_path: Path, run_field: str) -> None:
    b = bundle(tmp_path)
    store = _stored(tmp_path, b, run_field=run_field)
    done = run_cli_inprocess("gate", b, "--baseline", "main", "--store", store, "--fail-on", "gpu_idle_ratio:+50%")
    assert_usage(done, "outside the entry")


def test_a_name_that_is_also_a_path_is_an_error_and_the_baseline_is_always_named(tmp_path: Path) -> None:
    b = bundle(tmp_path)
    store = _stored(tmp_path, b)
    work = tmp_path / "work"
    work.mkdir()
    budget = ("--fail-on", "gpu_idle_ratio:+50%")
    done = run_cli("gate", b, "--baseline", "main", "--store", store, *budget, cwd=work, timeout=TIMEOUT)
    assert done.returncode == 0 and "baseline main: entry 1 (recorded" in done.stdout and str(store) in done.stdout, done.stderr
    bundle(work, "main")  # a pull request plants ./main
    done = run_cli("gate", b, "--baseline", "main", "--store", store, *budget, cwd=work, timeout=TIMEOUT)
    assert_usage(done, "both a baseline in the store")
    done = run_cli("gate", b, "--baseline", work / "main", *budget, timeout=TIMEOUT)
    assert done.returncode == 0 and f"baseline: the path {work / 'main'}" in done.stdout, done.stderr


def test_entry_one_million_is_the_newest(tmp_path: Path) -> None:
    b = bundle(tmp_path)
    _stored(tmp_path, b, sequence=999_999)
    store = _stored(tmp_path, b, sequence=1_000_000)
    done = run_cli_inprocess("gate", b, "--baseline", "main", "--store", store, "--fail-on", "gpu_idle_ratio:+50%")
    assert done.returncode == 0 and "entry 1000000 (" in done.stdout, done.stderr


@pytest.mark.parametrize("name", ["", "main\n"])
def test_store_names_empty_or_with_a_newline_are_refused(tmp_path: Path, name: str) -> None:
    b = bundle(tmp_path)
    done = run_cli_inprocess("gate", b, "--rules", "seed", "--min-severity", "critical", "--store", tmp_path / "store", "--record", name)
    assert_usage(done, "baseline name")
    assert not (tmp_path / "store" / "main").exists()


def test_a_record_nested_too_deeply_is_one_line(tmp_path: Path) -> None:
    b = bundle(tmp_path)
    store = _stored(tmp_path, b)
    (next((store / "main").iterdir()) / "record.json").write_text("[" * 100_000 + "]" * 100_000)
    assert_usage(run_cli_inprocess("gate", b, "--baseline", "main", "--store", store, "--fail-on", "gpu_idle_ratio:+50%"), "nested too deeply")


# --------------------------------------------------------------------------- 5. injection


EVIL = "\x1b]0;pwned\x07\x1b[31mred\n::error::forged\u202e\U000e0041\U000e0042"


def _inert(text: str) -> None:
    assert "\x1b" not in text and "\u202e" not in text and "\U000e0041" not in text, repr(text)
    assert not any(line.startswith("::error::forged") for line in text.splitlines()), text


def test_reason_and_store_fields_are_inert(tmp_path: Path) -> None:
    b = bundle(tmp_path)
    store = tmp_path / "store"
    budget = ("--fail-on", "gpu_idle_ratio:-90%")
    done = run_cli_inprocess("gate", b, "--baseline", b, *budget, "--store", store, "--record", "main")
    assert done.returncode == 0, done.stderr
    failing = ("--rules", "seed", "--min-severity", "info")  # the pageable copies fail a seed rule: a regression to accept
    done = run_cli_inprocess("gate", b, "--baseline", "main", *failing, "--store", store, "--accept", "--reason", EVIL)
    assert done.returncode == 0 and "accepted regression" in done.stdout, done.stderr
    _inert(done.stdout + done.stderr)
    assert "<U+E0041><U+E0042>" in done.stdout  # hidden text shown, not kept invisible
    record = next(p for p in sorted((store / "main").iterdir()))
    doc = json.loads((record / "record.json").read_text())
    doc["kind"], doc["recorded_at"] = EVIL, EVIL
    (record / "record.json").write_text(json.dumps(doc))
    shutil.rmtree(sorted((store / "main").iterdir())[-1])  # the accepted one: the edited record is the newest
    done = run_cli_inprocess("gate", b, "--baseline", "main", *budget, "--store", store)
    assert "baseline main: entry 1" in done.stdout, done.stdout + done.stderr
    _inert(done.stdout + done.stderr)


def test_an_out_path_is_inert(tmp_path: Path) -> None:
    out = tmp_path / "x\x1b]0;t\x07\n::error::forged"
    done = run_cli_inprocess("analyze", bundle(tmp_path), "--json", out / "a.json")
    _inert(done.stdout + done.stderr)


def test_the_sanitiser_shows_invisible_format_characters() -> None:
    assert clean("a\U000e0041b") == "a<U+E0041>b"
    assert clean("zero\u200bwidth\u00adsoft") == "zero<U+200B>width<U+00AD>soft"
    assert github_data("x\U000e007f") == "x<U+E007F>"
    assert clean("plain text: ünïcode ✓") == "plain text: ünïcode ✓"


# --------------------------------------------------------------------------- 6. rank folders


@pytest.mark.parametrize("name", ["light.json", "torch.json", "nvml-torch.jsonl", "torch-trace.json.gz"])
def test_a_fifo_in_a_rank_folder_is_refused(tmp_path: Path, name: str) -> None:
    b = bundle(tmp_path, ranks=2)
    fifo = b / "raw" / "rank1" / name
    fifo.unlink(missing_ok=True)
    os.mkfifo(fifo)
    if name == "light.json":
        m = json.loads((b / "manifest.json").read_text())
        m["ranks"]["1"]["light_pass"] = {"status": "ok"}
        m["light_pass"] = {"status": "ok"}
        (b / "manifest.json").write_text(json.dumps(m))
    assert_usage(run_cli("analyze", b, timeout=TIMEOUT), "FIFO", name)


# --------------------------------------------------------------------------- 11. tracebacks


def test_a_superscript_rank_key_is_one_line(tmp_path: Path) -> None:
    b = bundle(tmp_path, ranks=1)
    m = json.loads((b / "manifest.json").read_text())
    m["ranks"] = {"\u00b2": {}}
    (b / "manifest.json").write_text(json.dumps(m))
    assert_usage(run_cli_inprocess("analyze", b), "ranks.")


def test_an_infinite_cap_is_one_line(tmp_path: Path) -> None:
    assert_usage(run_cli_inprocess("analyze", KINETO, env={"PERFDOCTOR_MAX_TRACE_BYTES": "1e400"}), "PERFDOCTOR_MAX_TRACE_BYTES")


def test_nvml_lines_without_keys_are_skipped(tmp_path: Path) -> None:
    from perfdoctor.collectors.nvml import read_samples

    f = tmp_path / "nvml.jsonl"
    f.write_text('{"t": 5, "m": "sm_clock_mhz", "v": 1980, "s": "nvml"}\n{}\n{"t": 1}\n[1]\n{"t": "x", "m": 1, "v": 2, "s": 3}\n')
    samples = read_samples(f, 10)
    assert samples["time_ns"].tolist() == [15] and samples["value"].tolist() == [1980.0]


# --------------------------------------------------------------------------- 7. repeats' messages


def test_run_repeat_with_markup_in_a_step_name(tmp_path: Path) -> None:
    prog = tmp_path / "p.py"
    prog.write_text(
        "import time\nfrom perfdoctor import region\n"
        "for _ in range(12):\n    with region('step[/]x[bold]'):\n        time.sleep(0.002)\n"
    )
    done = run_cli("run", "--repeat", "2", "--collect", "nvml", prog, cwd=tmp_path, timeout=300)
    assert "MarkupError" not in done.stderr and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.returncode == 0, done.stderr[-3000:]
    written = next(line for line in done.stderr.splitlines() if line.startswith("bundle written: "))
    manifest = json.loads((tmp_path / written.split(": ", 1)[1] / "manifest.json").read_text())  # relative to its cwd
    assert len(manifest["repeat"]["processes"]) == 2


if sys.platform != "linux":  # FIFOs and /proc: the attacks are Linux ones
    pytestmark = pytest.mark.skip(reason="Linux only")


# --------------------------------------------------------------------------- 12. caches (the H200 runs them through calibrate)


@pytest.mark.parametrize("attack", ["fifo", "dev_zero", "deep", "bad_entry"])
def test_a_bad_calibration_cache_is_ignored(tmp_path: Path, monkeypatch, attack: str) -> None:
    from perfdoctor.record import calibrate

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = calibrate.cache_path()
    path.parent.mkdir(parents=True)
    good = {"dram_read_gbps": 4100.0, "bf16_matmul_tflops": 700.0, "measured_at": "2026-12-01"}
    if attack == "fifo":
        os.mkfifo(path)
    elif attack == "dev_zero":
        path.symlink_to("/dev/zero")
    elif attack == "deep":
        path.write_text("[" * 100_000 + "]" * 100_000)
    else:
        path.write_text(json.dumps({"GPU-bad": {"dram_read_gbps": "fast"}, "GPU-nan": {**good, "bf16_matmul_tflops": -1},
                                    "GPU-ok": good}))
    assert calibrate.load_calibration("GPU-bad") is None and calibrate.load_calibration("GPU-nan") is None
    assert calibrate.load_calibration("GPU-ok") == (good if attack == "bad_entry" else None)
    if attack != "dev_zero":  # rebuilt by the next save (a link to a device is replaced, never written through)
        assert calibrate.save_calibration("GPU-new", good) == path
        assert calibrate.load_calibration("GPU-new") == good


def test_an_unwritable_calibration_cache_is_a_warning(tmp_path: Path, monkeypatch, capsys) -> None:
    from perfdoctor.record import calibrate

    (tmp_path / "perfdoctor").write_text("a file where the cache folder goes")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert calibrate.save_calibration("GPU-x", {"dram_read_gbps": 1.0, "bf16_matmul_tflops": 1.0}) is None
    assert "warning: calibration not cached" in capsys.readouterr().err


def test_a_damaged_cubin_is_not_reused(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    import hashlib

    from perfdoctor.engine.cubin import _cached_cubin, _digest_path

    cubin = tmp_path / "k.cubin"
    data = b"\x7fELF" + bytes(range(256)) * 4
    cubin.write_bytes(data)
    assert _cached_cubin(cubin) is None  # no digest: not trusted
    _digest_path(cubin).write_text(hashlib.sha256(data).hexdigest())
    assert _cached_cubin(cubin) == data
    cubin.write_bytes(data[:100])  # truncated
    assert _cached_cubin(cubin) is None
    cubin.unlink()
    os.mkfifo(cubin)
    assert _cached_cubin(cubin) is None


# --------------------------------------------------------------------------- 8. multi-rank blame


def test_a_rank_that_died_without_results_is_the_one_blamed() -> None:
    from perfdoctor.bundle.protocol import Manifest, PassResults
    from perfdoctor.record import launch

    survivor = PassResults(exit_code=1, program_error="RuntimeError: peer gone", ended_at_ns=5)
    manifest = Manifest()
    launch.record_pass(manifest, "light", {0: survivor, 1: None})  # rank 1: os._exit(5), nothing written
    assert launch.failed_rank(manifest, "light") == (1, None)  # named; its code is torchrun's
    manifest = Manifest()
    launch.record_pass(manifest, "light", {0: survivor, 1: PassResults(exit_code=3, ended_at_ns=2)})
    assert launch.failed_rank(manifest, "light") == (1, 3)  # the earlier end, with its code
    manifest = Manifest()
    launch.record_pass(manifest, "light", {0: None, 1: None})  # nobody wrote: no rank singled out
    assert launch.failed_rank(manifest, "light") is None


def test_a_full_stdout_is_one_line(tmp_path: Path) -> None:
    import subprocess

    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "perfdoctor", "analyze", str(KINETO)], stdout=full, stderr=subprocess.PIPE,
                              text=True, timeout=TIMEOUT, env={**os.environ, "COLUMNS": "200"})
    assert_usage(done, "cannot write the output", "No space left on device")
