"""Issue 18 on the CPU: repeated runs, the process as the unit (run --repeat, diff and gate
over processes, compare-programs, the baseline store).

The statistics are checked against scipy; the commands run for real on
tests/programs/cpu_steps.py (a torch CPU loop with a known --slow PCT)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from perfdoctor.bundle.protocol import Manifest
from perfdoctor.errors import UsageError
from perfdoctor.compare.processes import (
    compare_processes, judge_budget, per_process, process_latencies, processes_needed,
)
from perfdoctor.reports.diff_report import ONE_PROCESS_NOTE, process_reason
from perfdoctor.compare.stats import betainc, paired_log_ratio, t_cdf, t_ppf, welch_log_ratio
from tests.conftest import run_cli, run_cli_inprocess

ROOT = Path(__file__).parents[2]
PROGRAM = Path(__file__).parents[1] / "programs" / "cpu_steps.py"


# --------------------------------------------------------------------------- statistics


def test_t_distribution_matches_scipy() -> None:
    stats = pytest.importorskip("scipy.stats")
    special = pytest.importorskip("scipy.special")
    for df in (1, 1.7, 2, 3.5, 4, 8, 17.3, 60, 500):
        for q in (0.5, 0.6, 0.9, 0.95, 0.975, 0.995, 0.9995):
            assert t_ppf(q, df) == pytest.approx(stats.t.ppf(q, df), rel=1e-9, abs=1e-12)
            assert t_ppf(1 - q, df) == pytest.approx(stats.t.ppf(1 - q, df), rel=1e-9, abs=1e-12)
        for t in (-12.0, -2.1, -0.3, 0.0, 0.7, 1.96, 4.0, 30.0):
            assert t_cdf(t, df) == pytest.approx(stats.t.cdf(t, df), rel=1e-9, abs=1e-14)
    for a, b, x in ((0.5, 0.5, 0.2), (2.0, 3.0, 0.9), (30.0, 0.5, 0.97), (0.7, 12.0, 0.01)):
        assert betainc(a, b, x) == pytest.approx(special.betainc(a, b, x), rel=1e-10)


def test_welch_log_ratio_matches_scipy_ttest() -> None:
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(7)
    for nb, na, sb, sa, shift in ((5, 5, 0.03, 0.03, 0.1), (3, 7, 0.2, 0.01, -0.05), (2, 2, 0.05, 0.08, 0.0), (10, 4, 0.01, 0.1, 0.3)):
        b = rng.lognormal(2.3, sb, nb)
        a = rng.lognormal(2.3 + shift, sa, na)
        res = stats.ttest_ind(np.log(a), np.log(b), equal_var=False)
        ci = res.confidence_interval(0.95)
        got = welch_log_ratio(b, a)
        assert (got.low, got.high) == pytest.approx((math.exp(ci.low), math.exp(ci.high)), rel=1e-9)
        assert got.ratio == pytest.approx(math.exp(np.log(a).mean() - np.log(b).mean()), rel=1e-12)
        assert got.df == pytest.approx(res.df, rel=1e-9)


def test_paired_log_ratio_matches_scipy_ttest_rel_and_cancels_drift() -> None:
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(11)
    load = rng.lognormal(0, 0.3, 6)  # a shared machine's load, the same for both of a pair
    b, a = load * rng.lognormal(0, 0.01, 6), 1.2 * load * rng.lognormal(0, 0.01, 6)
    ci = stats.ttest_rel(np.log(a), np.log(b)).confidence_interval(0.95)
    got = paired_log_ratio(b, a)
    assert (got.low, got.high) == pytest.approx((math.exp(ci.low), math.exp(ci.high)), rel=1e-9) and got.df == 5
    assert 1.1 < got.low < 1.2 < got.high < 1.3  # the drift cancels ...
    assert welch_log_ratio(b, a).low < 1.0  # ... where side against side it swamps the 1.2x
    with pytest.raises(ValueError, match="pairs"):
        paired_log_ratio([1.0, 2.0], [1.0, 2.0, 3.0])


def test_welch_log_ratio_refuses_what_it_cannot_do() -> None:
    with pytest.raises(ValueError, match="two values per side"):
        welch_log_ratio([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="positive"):
        welch_log_ratio([1.0, 0.0], [1.0, 2.0])
    same = welch_log_ratio([2.0, 2.0], [3.0, 3.0])  # no spread at all: the point ratio
    assert (same.ratio, same.low, same.high) == pytest.approx((1.5, 1.5, 1.5))


# --------------------------------------------------------------------------- verdicts


def test_verdicts_over_processes() -> None:
    base = [10.0, 10.2, 9.9, 10.1, 10.0]
    assert compare_processes("step_latency_ms_p50", base, [v * 1.2 for v in base]).verdict == "regressed"
    assert compare_processes("step_latency_ms_p50", base, [v * 0.8 for v in base]).verdict == "improved"
    assert compare_processes("step_latency_ms_p50", base, [10.1, 9.9, 10.0, 10.2, 10.0]).verdict == "no significant change"
    one = compare_processes("step_latency_ms_p50", [10.0], [12.0])
    assert one.verdict == "inconclusive" and ONE_PROCESS_NOTE in process_reason(one) and not one.repeated


def test_budget_fails_only_beyond_the_interval() -> None:
    base = [10.0, 10.2, 9.9, 10.1, 10.0]
    slow = compare_processes("step_latency_ms_p50", base, [v * 1.2 for v in base])
    assert judge_budget(slow, 1.10, +1).status == "fail"
    within = judge_budget(slow, 1.30, +1)
    assert (within.status, within.verdict) == ("pass", "no significant change")
    faster = judge_budget(compare_processes("step_latency_ms_p50", base, [v * 0.8 for v in base]), 1.05, +1)
    assert (faster.status, faster.verdict) == ("pass", "improved")
    # A noisy 1.1x: its interval straddles a 10 % budget, so it is not failed, and says so.
    noisy = compare_processes("step_latency_ms_p50", [10.0, 11.5, 9.0], [12.0, 10.0, 11.3])
    straddle = judge_budget(noisy, 1.10, +1)
    assert (straddle.status, straddle.where) == ("pass", "straddles") and straddle.verdict.startswith("inconclusive — too few processes")
    # a '-' budget guards against a fall
    assert judge_budget(compare_processes("m", base, [v * 0.8 for v in base]), 0.9, -1).status == "fail"


def test_processes_needed_is_enough_and_no_more() -> None:
    """With the per-process spread held, the n it returns clears the bound and n - 1 does not."""
    noisy = compare_processes("m", [10.0, 10.8, 9.6], [11.9, 11.2, 12.4])
    i = noisy.interval
    n = processes_needed(i, 1.10)
    assert n is not None and n > 3
    s = i.se_log * math.sqrt(3 / 2)  # per-process log spread of the 3 vs 3 interval

    def half(k: int) -> float:
        return t_ppf(0.975, 2 * k - 2) * s * math.sqrt(2 / k)

    gap = math.log(i.ratio) - math.log(1.10)
    assert half(n) < gap <= half(n - 1)


def test_process_latencies_reads_repeat_and_refuses_bad_shapes() -> None:
    def latencies(doc: dict) -> list[list[float]]:
        return process_latencies(Manifest.from_json(doc, clean=False))

    lp = {"light_pass": {"step_latency_ms": [1.0, 2.0, 3.0]}}
    assert latencies(lp) == [[1.0, 2.0, 3.0]]
    assert latencies({}) == []
    m = {"repeat": {"processes": [{"step_latency_ms": [1.0, 3.0]}, {"excluded": "exit 1"}, {"step_latency_ms": [2.0]}]}}
    assert per_process(latencies(m), 50) == [2.0, 2.0]
    for bad in ({"repeat": []}, {"repeat": {"processes": [3]}}, {"repeat": {"processes": [{"step_latency_ms": ["x"]}]}},
                {"repeat": {"processes": [{"step_latency_ms": [float("nan")]}]}}):
        with pytest.raises(UsageError, match="repeat"):
            latencies(bad)


# --------------------------------------------------------------------------- real runs


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> tuple[Path, Path, Path]:
    """compare-programs A vs A+400 % (five times the work per step: on the shared 2-core
    machine one process's median step moved 2-4x with the load), 3 processes each, light
    passes only."""
    out = tmp_path_factory.mktemp("pair")
    done = run_cli("compare-programs", "--repeat", "3", "--out", out / "runs", "--json", out / "diff.json", "-q",
                   "--", f"{PROGRAM} --steps 30", f"{PROGRAM} --steps 30 --slow 400", cwd=out)
    assert done.returncode == 0, done.stderr[-3000:]
    a, b = sorted((out / "runs").iterdir())
    return a, b, out


def test_compare_programs_interleaves_and_keeps_every_process(pair) -> None:
    a, b, out = pair
    ma, mb = (json.loads((x / "manifest.json").read_text()) for x in (a, b))
    assert a.name.endswith("cpu_steps-A") and b.name.endswith("cpu_steps-B")
    for m, bundle in ((ma, a), (mb, b)):
        rep = m["repeat"]
        assert rep["order"] == ["light", "light-2", "light-3"]
        for p in rep["processes"]:
            # every process kept, with its own steady state: the steps from its steady start
            # (under load a process's steady state can start late, so no fixed count here)
            assert not p.get("excluded") and p["step_name"] == "train_step", p
            assert p["steps_seen"] == 30 and len(p["step_latency_ms"]) == 30 - p["steady_start"] >= 5, p
        for p in rep["processes"]:
            series = json.loads((bundle / p["file"]).read_text())["series"]["train_step"]
            assert len(series["gpu_end_ns"]) == 30  # every step of every process is kept
        assert rep["summary"]["step_latency_ms_p50"]["processes"] == 3
        assert [p["name"] for p in m["passes"]] == ["light", "light-2", "light-3"]
    # A B A B: each of B's later processes started after A's process of the same rank.
    def started(bundle: Path, name: str) -> float:
        return (bundle / "raw" / f"{name}.config.json").stat().st_mtime

    assert started(a, "light-2") < started(b, "light-2") < started(a, "light-3") < started(b, "light-3")
    diff = json.loads((out / "diff.json").read_text())
    p50 = diff["processes"]["step_latency_ms_p50"]
    medians = [[float(np.median(p["step_latency_ms"])) for p in m["repeat"]["processes"]] for m in (ma, mb)]
    assert p50["before"]["values"] == pytest.approx(medians[0], rel=1e-6) and p50["after"]["values"] == pytest.approx(medians[1], rel=1e-6)
    assert p50["ratio"]["value"] > 1.5  # five times the work per step
    assert (p50["verdict"] == "regressed") == (p50["ratio"]["low"] > 1)
    assert diff["verdict"].startswith(f"step latency p50 over processes (light pass, no tracer): {p50['verdict']}")
    assert diff["metrics"]["step_latency_ms_p50"]["sample"] == "processes"
    # one compare-programs run: the two bundles share a pairing id, and are compared pair by pair
    assert ma["repeat"]["pairing"]["id"] == mb["repeat"]["pairing"]["id"]
    assert (ma["repeat"]["pairing"]["side"], mb["repeat"]["pairing"]["side"]) == ("A", "B")
    assert p50["test"].startswith("paired") and "3 interleaved pairs" in p50["reason"]
    ref = paired_log_ratio(medians[0], medians[1])
    assert (p50["ratio"]["low"], p50["ratio"]["high"]) == pytest.approx((ref.low, ref.high))


def with_processes(bundle: Path, dest: Path, medians: list[float]) -> Path:
    """A copy of a real repeated bundle whose processes have known step latencies: each
    process's steps spread ±2 % around its given median."""
    import shutil

    shutil.copytree(bundle, dest)
    m = json.loads((dest / "manifest.json").read_text())
    m["repeat"]["processes"] = [{"pass": f"p{k}", "step_latency_ms": [x * 0.98, x, x * 1.02]} for k, x in enumerate(medians)]
    (dest / "manifest.json").write_text(json.dumps(m))
    return dest


@pytest.mark.parametrize("factor, budget, code, verdict", [
    (1.30, "+10%", 1, "regressed"),
    (1.00, "+10%", 0, "no significant change"),
    (0.80, "+10%", 0, "improved"),
    (1.12, "+10%", 3, "inconclusive — too few processes for the budget"),  # issue 32: its own code, not 0
    (1.30, "+2", 1, "regressed"),  # absolute: +2 ms on a ~10 ms baseline allows ~1.2x
    (1.30, "+4", 0, "no significant change"),
])
def test_gate_over_processes_on_known_values(pair, tmp_path, factor, budget, code, verdict) -> None:
    a, _, _ = pair
    base = [10.0, 10.3, 9.8, 10.1, 9.9]
    noisy = [10.0, 11.0, 9.2] if verdict.startswith("inconclusive") else base
    before = with_processes(a, tmp_path / "before", noisy)
    after = with_processes(a, tmp_path / "after", [x * factor for x in noisy[::-1]])
    done = run_cli_inprocess("gate", after, "--baseline", before, "--fail-on", f"step_latency_ms_p50:{budget}", "--json", tmp_path / "g.json")
    check = json.loads((tmp_path / "g.json").read_text())["checks"][0]
    assert (done.returncode, check["details"]["verdict"]) == (code, verdict), check["message"]
    geo = math.exp(np.mean(np.log(noisy)))
    assert check["details"]["baseline"] == pytest.approx(geo) and check["details"]["value"] == pytest.approx(geo * factor)
    ref = welch_log_ratio(noisy, [x * factor for x in noisy[::-1]])
    assert check["details"]["processes"]["ratio"]["low"] == pytest.approx(ref.low)


def test_run_repeat_traces_once_and_summarises_in_metrics(tmp_path) -> None:
    done = run_cli("run", "--repeat", "2", "--collect", "torch", "--steps", "3", "--out", tmp_path / "runs", "-q",
                   PROGRAM, "--steps", "25", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (bundle,) = (tmp_path / "runs").iterdir()
    m = json.loads((bundle / "manifest.json").read_text())
    assert [p["name"] for p in m["passes"]] == ["light", "torch", "light-2"]
    assert m["collectors"]["torch"]["status"] == "ok"
    procs = json.loads((bundle / "metrics.json").read_text())["processes"]
    lat = [p["step_latency_ms"] for p in m["repeat"]["processes"]]
    assert procs["step_latency_ms_p50"]["values"] == pytest.approx([float(np.percentile(x, 50)) for x in lat], rel=1e-6)
    assert procs["excluded"] == 0 and procs["step_latency_ms_p50"]["processes"] == 2


def test_single_process_bundles_say_they_cannot_tell_process_noise(tmp_path) -> None:
    done = run_cli("run", "--collect", "nvml", "--out", tmp_path / "runs", "-q", PROGRAM, "--steps", "12", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    (bundle,) = (tmp_path / "runs").iterdir()
    diff = run_cli_inprocess("diff", bundle, bundle, "--no-rules", "--json", tmp_path / "d.json")
    assert diff.returncode == 0
    doc = json.loads((tmp_path / "d.json").read_text())
    assert ONE_PROCESS_NOTE in doc["verdict"] and doc["processes"]["step_latency_ms_p50"]["verdict"] == "inconclusive"
    gate = run_cli_inprocess("gate", bundle, "--baseline", bundle, "--fail-on", "step_latency_ms_p50:+10%", "--json", tmp_path / "g.json")
    check = json.loads((tmp_path / "g.json").read_text())["checks"][0]
    assert gate.returncode == 0 and check["status"] == "pass" and "process-to-process noise cannot be told apart" in check["message"]


@pytest.mark.parametrize("args, message", [
    (("run", "--repeat", "2", "--no-light", "--collect", "torch", str(PROGRAM)), "cannot go with --no-light"),
    (("run", "--repeat", "0", str(PROGRAM)), "--repeat"),
    (("compare-programs", "nope.py", str(PROGRAM)), "nope.py: no such script"),
    (("compare-programs", "--repeat", "1", str(PROGRAM), str(PROGRAM)), "--repeat"),
    (("compare-programs", "--", f"{PROGRAM} 'unclosed", str(PROGRAM)), "No closing quotation"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message) -> None:
    done = run_cli_inprocess(*args)
    assert done.returncode == 2 and message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_a_malformed_repeat_is_one_line_and_exit_2(pair, tmp_path) -> None:
    import shutil

    a, b, _ = pair
    broken = tmp_path / "broken"
    shutil.copytree(b, broken)
    m = json.loads((broken / "manifest.json").read_text())
    m["repeat"]["processes"][1]["step_latency_ms"] = "fast"
    (broken / "manifest.json").write_text(json.dumps(m))
    done = run_cli_inprocess("gate", broken, "--baseline", a, "--fail-on", "step_latency_ms_p50:+10%")
    assert done.returncode == 2 and "repeat.processes[1].step_latency_ms" in done.stderr, done.stderr


def test_engine_delay_needs_a_gpu() -> None:
    done = subprocess.run([sys.executable, "-m", "perfdoctor.engine", "--device", "cpu", "--config", "tiny", "--delay-us", "5"],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 2 and done.stderr.strip() == "error: --delay-us must be >= 0, and needs a CUDA device (the delay is a GPU kernel)"


# --------------------------------------------------------------------------- baseline store


def test_baseline_store_record_resolve_accept(pair, tmp_path) -> None:
    a, b, _ = pair
    store = tmp_path / "store"
    budget = ("--fail-on", "step_latency_ms_p50:+10%")
    # A against itself over this fixture's few processes cannot rule out +10 % (inconclusive,
    # exit 3, since issue 32): this test is about the store, so it counts that as a pass.
    done = run_cli_inprocess("gate", a, "--baseline", a, *budget, "--store", store, "--record", "main", "--inconclusive", "pass")
    assert done.returncode == 0 and "baseline main: recorded" in done.stdout, done.stderr
    # the store name resolves to the recorded copy of A; B regresses against it
    done = run_cli_inprocess("gate", b, "--baseline", "main", *budget, env={"PERFDOCTOR_BASELINE_STORE": str(store)})
    assert done.returncode == 1 and "baseline main: entry 1 (recorded" in done.stdout
    # accepted: recorded although failing, exit 0, with the reason
    done = run_cli_inprocess("gate", b, "--baseline", "main", *budget, "--store", store, "--accept", "--reason", "2x work, on purpose")
    assert done.returncode == 0 and "accepted regression (2x work, on purpose)" in done.stdout
    (first, second) = sorted((store / "main").iterdir())
    record = json.loads((second / "record.json").read_text())
    assert (record["kind"], record["reason"], record["sequence"], record["previous"]) == ("accepted", "2x work, on purpose", 2, first.name)
    assert record["gate"]["failed"] == ["budget step_latency_ms_p50:+10%"]
    assert (second / "run" / "manifest.json").is_file()
    # now B is compared against the accepted B: it passes
    done = run_cli_inprocess("gate", b, "--baseline", "main", *budget, "--store", store, "--json", tmp_path / "g.json",
                             "--inconclusive", "pass")
    assert done.returncode == 0 and "entry 2 (accepted" in done.stdout
    assert json.loads((tmp_path / "g.json").read_text())["baseline"] == str(second / "run")


@pytest.mark.parametrize("extra, message", [
    (("--baseline", "main"), "nothing recorded under that name"),
    (("--baseline", "../up"), "baseline name '../up'"),
    (("--baseline", "nostore"), "no such file or directory (to name a stored baseline"),
    (("--baseline", "BUNDLE", "--accept", "--reason", "r"), "--accept records RUN as a stored baseline"),
    (("--baseline", "BUNDLE", "--accept"), "--accept needs --reason"),
    (("--baseline", "BUNDLE", "--reason", "r"), "--reason goes with --accept"),
    (("--baseline", "BUNDLE", "--record", "a/b"), "baseline name 'a/b'"),
    (("--baseline", "BUNDLE", "--record", "main", "--store", "FILE"), "not a directory"),
])
def test_baseline_store_bad_names_and_paths(pair, tmp_path, extra, message) -> None:
    a, _, _ = pair
    (tmp_path / "file").write_text("x")
    store = [] if "nostore" in extra or "--store" in extra else ["--store", str(tmp_path / "store")]
    (tmp_path / "store").mkdir()
    args = [str(a) if x == "BUNDLE" else str(tmp_path / "file") if x == "FILE" else x for x in extra]
    done = run_cli_inprocess("gate", a, *args, *store, "--fail-on", "step_latency_ms_p50:+10%",
                             env={"PERFDOCTOR_BASELINE_STORE": ""})
    assert done.returncode == 2 and message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


# --------------------------------------------------------------------------- the bench, small


def test_interrupted_repeat_keeps_the_bundle(tmp_path) -> None:
    """SIGINT in the second light process: the run stops there, exit 130, the bundle says
    interrupted and keeps process 1; the stopped process is excluded, not counted."""
    import os
    import signal
    import time

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "perfdoctor", "run", "-q", "--repeat", "4", "--collect", "nvml", "--out", str(tmp_path / "runs"),
           str(Path(__file__).parents[1] / "programs" / "hangs_second.py"), str(tmp_path)]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not (tmp_path / "ready").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (tmp_path / "ready").exists(), proc.communicate()[1]
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-2000:]
    (bundle,) = (tmp_path / "runs").iterdir()
    m = json.loads((bundle / "manifest.json").read_text())
    assert m["status"] == "interrupted" and m["repeat"]["requested"] == 4
    first, second = m["repeat"]["processes"]
    assert len(first["step_latency_ms"]) >= 5 and second["excluded"] == "interrupted (signal 2)"  # its steady steps of 12
    assert len(list(tmp_path.glob("start-*"))) == 2  # no third process after the signal


# --------------------------------------------------------------------------- lockstep


STEPPER = '''
import argparse, time
import perfdoctor.api as perfdoctor
p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=12)
p.add_argument("--no-marks", action="store_true")
args = p.parse_args()
for _ in range(args.steps):
    if not args.no_marks:
        with perfdoctor.region("step"):
            time.sleep(0.004)
    else:
        time.sleep(0.004)
'''


@pytest.fixture(scope="module")
def lockstep_pair(tmp_path_factory) -> tuple[Path, Path, Path]:
    """compare-programs --lockstep, A vs A+100 % (cpu_steps.py), 2 pairs."""
    out = tmp_path_factory.mktemp("lockstep")
    done = run_cli("compare-programs", "--lockstep", "--repeat", "2", "--out", out / "runs", "--json", out / "diff.json", "-q",
                   "--", f"{PROGRAM} --steps 15", f"{PROGRAM} --steps 15 --slow 100", cwd=out)
    assert done.returncode == 0, done.stderr[-3000:]
    a, b = sorted((out / "runs").iterdir())
    return a, b, out


def _steps(bundle: Path, process: dict, name: str = "train_step") -> list[tuple[int, int]]:
    s = json.loads((bundle / process["file"]).read_text())["series"][name]
    return list(zip(s["host_start_ns"], s["gpu_end_ns"]))


def test_lockstep_pairs_take_turns_step_by_step_on_one_cpu(lockstep_pair) -> None:
    a, b, out = lockstep_pair
    ma, mb = (json.loads((x / "manifest.json").read_text()) for x in (a, b))
    assert ma["repeat"]["pairing"]["lockstep"] is True and mb["repeat"]["pairing"]["lockstep"] is True
    pa, pb = ma["repeat"]["processes"], mb["repeat"]["processes"]
    # the first light pass of each program ran alone; then --repeat pairs in lockstep
    assert [p["pass"] for p in pa] == ["light", "light-2", "light-3"] and "lockstep" not in pa[0]
    for x, y in zip(pa[1:], pb[1:]):
        assert (x["lockstep"]["side"], y["lockstep"]["side"]) == ("A", "B")
        assert x["lockstep"]["cpu"] == y["lockstep"]["cpu"]
        # every step of both took a turn (the warm-up work before the first step is no step)
        assert x["lockstep"]["turns"] == 15 and y["lockstep"]["turns"] == 15
        # B's last wait reads the end of A's pipe: no turn was lost
        assert x["lockstep"]["free_after"] is None
        # the steps of the pair alternate A B A B ... and never overlap in time
        steps = sorted([(s, e, "A") for s, e in _steps(a, x)] + [(s, e, "B") for s, e in _steps(b, y)])
        assert "".join(side for _, _, side in steps) == "AB" * 15
        assert all(e1 <= s2 for (_, e1, _), (s2, _, _) in zip(steps, steps[1:]))
    diff = json.loads((out / "diff.json").read_text())
    p50 = diff["processes"]["step_latency_ms_p50"]
    assert "2 lockstep pairs" in p50["reason"] and p50["test"] == "paired t-interval on log ratios of lockstep process pairs"
    # the pairs compared are the lockstep ones, not the lone first passes
    medians = [[float(np.median(p["step_latency_ms"])) for p in procs[1:]] for procs in (pa, pb)]
    ref = paired_log_ratio(medians[0], medians[1])
    assert (p50["ratio"]["low"], p50["ratio"]["high"]) == pytest.approx((ref.low, ref.high))


def test_a_gate_over_lockstep_pairs_fails_a_doubling_at_a_ten_percent_budget(lockstep_pair, tmp_path) -> None:
    """bench/gate_repeats.py --lockstep end to end, in small (its acceptance, 20 trials of 5
    pairs at +20 %, is in docs/ci.md): A+100 % against A over the two lockstep pairs fails
    step_latency_ms_p50:+10 %, its interval wholly beyond 1.1 (paired, df 1: about ±0.2 in
    log ratio at the suite's load, against log 2 = 0.69); the interval is the pairs'."""
    a, b, _ = lockstep_pair
    gate = run_cli_inprocess("gate", b, "--baseline", a, "--fail-on", "step_latency_ms_p50:+10%", "--json", tmp_path / "g.json")
    assert gate.returncode == 1, gate.stdout + gate.stderr
    checks = json.loads((tmp_path / "g.json").read_text())["checks"]
    (check,) = [c for c in checks if c["name"].startswith("budget step_latency_ms_p50")]
    assert check["status"] == "fail", check


def test_lockstep_program_that_ends_first_lets_the_other_run_on(tmp_path) -> None:
    prog = tmp_path / "stepper.py"
    prog.write_text(STEPPER)
    done = run_cli("compare-programs", "--lockstep", "--repeat", "2", "--out", tmp_path / "runs", "--",
                   f"{prog} --steps 5", f"{prog} --steps 12", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    a, b = sorted((tmp_path / "runs").iterdir())
    pa, pb = (json.loads((x / "manifest.json").read_text())["repeat"]["processes"] for x in (a, b))
    for x, y in zip(pa[1:], pb[1:]):
        assert x["lockstep"]["turns"] == 5 and x["lockstep"]["free_after"] is None
        # B took its 5 turns between A's steps, then read the end of A's pipe and ran alone
        assert y["lockstep"]["turns"] == 5 and y["lockstep"]["free_after"] == "the other program ended"
        assert y["steps_seen"] == 12
    assert "then alone: the other program ended" in done.stderr


def test_lockstep_without_step_markers_says_so_and_compares_no_pairs(tmp_path) -> None:
    prog = tmp_path / "stepper.py"
    prog.write_text(STEPPER)
    done = run_cli("compare-programs", "--lockstep", "--repeat", "2", "--out", tmp_path / "runs", "--json", tmp_path / "d.json",
                   "--", f"{prog} --no-marks", f"{prog} --no-marks", cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "took no turns" in done.stderr and "left out of the lockstep pairs" in done.stderr
    a, b = sorted((tmp_path / "runs").iterdir())
    pa = json.loads((a / "manifest.json").read_text())["repeat"]["processes"]
    assert all(p["lockstep"]["turns"] == 0 for p in pa[1:])


def test_lockstep_without_cpu_pinning_is_a_usage_error(tmp_path, monkeypatch) -> None:
    """Where the OS cannot pin a process to a CPU (macOS), --lockstep says so in one line
    before running anything."""
    monkeypatch.delattr(os, "sched_setaffinity")
    done = run_cli_inprocess("compare-programs", "--lockstep", "--out", tmp_path / "runs", "--",
                             f"{PROGRAM} --steps 3", f"{PROGRAM} --steps 3")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == ["error: --lockstep pins both programs to one CPU, which needs Linux (os.sched_setaffinity)"]
    assert not (tmp_path / "runs").exists()


def test_turns_pass_between_two_processes_and_survive_a_fork(tmp_path) -> None:
    """perfdoctor.record.lockstep alone: Pair's pipes in two real processes, one of which forks
    a child that steps too (the child must neither wait for turns nor hold the pipes)."""
    from perfdoctor.record.lockstep import Pair

    child = tmp_path / "side.py"
    child.write_text(
        "import json, os, sys, time\n"
        "from perfdoctor.record.lockstep import Turns\n"
        "t = Turns(json.loads(sys.argv[1])); t.pin()\n"
        "log = []\n"
        "for i in range(int(sys.argv[2])):\n"
        "    t.acquire(); log.append(time.perf_counter_ns()); time.sleep(0.002); log.append(time.perf_counter_ns()); t.release()\n"
        "    if i == 1 and sys.argv[3] == 'fork':\n"
        "        pid = os.fork()\n"
        "        if pid == 0:\n"
        "            t.acquire(); t.release(); os._exit(0 if t.free == 'a forked child of the program' else 3)\n"
        "        assert os.waitpid(pid, 0)[1] == 0\n"
        "print(json.dumps({'log': log, 'summary': t.summary()}))\n"
    )
    pair = Pair(cpu=max(os.sched_getaffinity(0)))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, str(child), json.dumps(c), "6", mode], pass_fds=Pair.fds(c),
                              stdout=subprocess.PIPE, text=True, env=env)
             for c, mode in zip(pair.configs, ("fork", "plain"))]
    for c in pair.configs:
        for fd in Pair.fds(c):
            os.close(fd)
    outs = [json.loads(p.communicate(timeout=60)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert [o["summary"]["turns"] for o in outs] == [6, 6]
    steps = sorted([(s, e, side) for o, side in zip(outs, "AB") for s, e in zip(o["log"][::2], o["log"][1::2])])
    assert "".join(side for _, _, side in steps) == "AB" * 6


@pytest.mark.parametrize("policy, code, headline", [
    ([], 3, "perfdoctor gate: INCONCLUSIVE (1 of 1 checks undecided: budget step_latency_ms_p50:+10%; more processes would decide)"),
    (["--inconclusive", "pass"], 0, "perfdoctor gate: PASSED (1 of 1 checks passed)"),
    (["--inconclusive", "fail"], 1, "(counted as failed: --inconclusive fail)"),
])
def test_an_inconclusive_gate_does_not_exit_0_unless_the_team_chooses(pair, tmp_path, policy, code, headline) -> None:
    # Issue 32: 1.12x slower with a noisy baseline straddles a +10 % budget. By default that
    # is its own verdict and exit code (3), never a silent pass.
    a, _, _ = pair
    noisy = [10.0, 11.0, 9.2]
    before = with_processes(a, tmp_path / "before", noisy)
    after = with_processes(a, tmp_path / "after", [x * 1.12 for x in noisy[::-1]])
    done = run_cli_inprocess("gate", after, "--baseline", before, "--fail-on", "step_latency_ms_p50:+10%",
                             "--json", tmp_path / "g.json", *policy)
    doc = json.loads((tmp_path / "g.json").read_text())
    assert done.returncode == code == doc["exit_code"], done.stdout
    assert doc["checks"][0]["status"] == "inconclusive" and doc["inconclusive"] == ["budget step_latency_ms_p50:+10%"]
    assert headline in " ".join(done.stdout.split())
    assert doc["passed"] is (code == 0)
