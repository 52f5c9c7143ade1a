"""Multi-rank runs on CPU: torchrun + gloo jobs under ``perfdoctor run``, the cross-rank view
checked against the program's own per-rank timers, failures and hangs, trace folders."""

import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfdoctor.analysis import ranks
from perfdoctor.analysis.ranks import cross_rank, find_straggler
from tests.conftest import run_cli_inprocess

PROGRAMS = Path(__file__).parents[1] / "programs"
JOB = PROGRAMS / "allreduce_steps.py"
ROOT = Path(__file__).parents[2]
SLOW_MS = {2: 30.0, 4: 40.0}  # the straggler's extra sleep per step
SLOW_RANK = {2: 1, 4: 2}


def perfdoctor(*args: str, cwd: Path, timeout: float = 240, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), **(env or {})}
    return subprocess.run([sys.executable, "-m", "perfdoctor", *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout)


def bundle_of(cwd: Path) -> Path:
    (bundle,) = (cwd / "runs").iterdir()
    return bundle


def own_timers(folder: Path, rank: int) -> list[dict]:
    """The program's own per-step timers, one line per run: [light pass, torch pass]."""
    return [json.loads(line) for line in (folder / f"rank{rank}.jsonl").read_text().splitlines()]


def median_ms(ns: list[int]) -> float:
    return statistics.median(ns) / 1e6


@pytest.fixture(scope="module", params=[2, pytest.param(4, marks=pytest.mark.extended)], ids=["2-ranks", "4-ranks"])
def job(request, tmp_path_factory):
    """A gloo job with one slow rank: 2 ranks launched by --nproc-per-node, 4 by the user's
    own torchrun line (python -m torch.distributed.run)."""
    n = request.param
    cwd = tmp_path_factory.mktemp(f"ranks{n}")
    program = [str(JOB), "--steps", "16", "--slow-rank", str(SLOW_RANK[n]), "--slow-ms", str(SLOW_MS[n]), "--timers", str(cwd / "own")]
    if n == 2:
        done = perfdoctor("run", "-q", "--out", "runs", "--steps", "8", "--nproc-per-node", "2", *program, cwd=cwd)
    else:
        launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4"]
        done = perfdoctor("run", "-q", "--out", "runs", "--steps", "8", "--", *launch, *program, cwd=cwd)
    assert done.returncode == 0, done.stderr[-3000:]
    return n, cwd, bundle_of(cwd)


def test_bundle_has_every_rank(job):
    n, _, bundle = job
    m = json.loads((bundle / "manifest.json").read_text())
    assert m["world_size"] == n and m["exit_code"] == 0 and m["collectors"]["torch"]["status"] == "ok"
    assert sorted(m["ranks"], key=int) == [str(k) for k in range(n)]
    for k, entry in m["ranks"].items():
        assert entry["rank"] == int(k) and entry["world_size"] == n and entry["device"] == "cpu"
        assert entry["passes"]["light"]["status"] == "ok" and entry["passes"]["torch"]["status"] == "ok"
        assert entry["light_pass"]["step_name"] == "train_step"
        assert (bundle / "raw" / f"rank{k}" / "torch-trace.json.gz").is_file()
        assert (bundle / "raw" / f"rank{k}" / "light.json").is_file()
    assert m["launch"]["how"] == ("--nproc-per-node" if n == 2 else "torchrun command line")


def test_metrics_json_is_the_lowest_rank_s_analysis(job, monkeypatch):
    """perfdoctor run's metrics.json of a job: rank 0's, through the door (ranks.json is the view across ranks)."""
    from perfdoctor.io import dumps_json
    from perfdoctor.pipeline import diagnose

    _, cwd, bundle = job
    step = json.loads((bundle / "manifest.json").read_text())["step"]
    monkeypatch.chdir(cwd)  # the run named its bundle from there: metrics.json's meta.path
    rank0 = diagnose(bundle.relative_to(cwd), step=step, rules=None, rank=0).analysis.to_json()
    assert (bundle / "metrics.json").read_text() == dumps_json(rank0)
    assert (bundle / "ranks.json").is_file()


def test_run_s_ranks_json_and_metrics_json_come_from_one_diagnosis(job, tmp_path, monkeypatch):
    """metrics.json and ranks.json re-derived in process from the job's raw files: byte-equal
    to what perfdoctor run wrote, from one open and one diagnosis of every rank (house plan,
    step 2), each rank loaded and analysed once (rank 0 was read twice before)."""
    import collections
    import shutil
    import types

    import perfdoctor.analysis.ranks as ranks
    import perfdoctor.collectors.bundle as collected
    from perfdoctor import pipeline
    from perfdoctor.bundle.layout import write_json_atomic
    from perfdoctor.bundle.protocol import Manifest
    from perfdoctor.record.run import write_metrics

    n, cwd, bundle = job
    copy = tmp_path / "runs" / bundle.name
    shutil.copytree(bundle / "raw", copy / "raw")
    monkeypatch.chdir(tmp_path)  # the bundle named relative to where it ran, as perfdoctor run names it
    rel = copy.relative_to(tmp_path)
    runner = types.SimpleNamespace(bundle=rel, manifest=Manifest.from_json(json.loads((bundle / "manifest.json").read_text()),
                                                                            clean=False), say=lambda text: None)
    runner.manifest.metrics_error = runner.manifest.ranks_error = None
    runner.save = lambda: write_json_atomic(rel / "manifest.json", runner.manifest.to_json())
    runner.save()  # as perfdoctor run saves it before the analysis
    loads, analyses, diagnoses = collections.Counter(), [0], []
    load_bundle, analyze, diagnose = collected.load_bundle, ranks.analyze, pipeline.diagnose

    def counting_load(path, rank=None, **kw):
        loads[rank] += 1
        return load_bundle(path, rank=rank, **kw)

    def counting_analyze(*args, **kw):
        analyses[0] += 1
        return analyze(*args, **kw)

    def counting_diagnose(*args, **kw):
        diagnoses.append(kw)
        return diagnose(*args, **kw)

    monkeypatch.setattr(collected, "load_bundle", counting_load)
    monkeypatch.setattr(ranks, "analyze", counting_analyze)
    monkeypatch.setattr(pipeline, "diagnose", counting_diagnose)
    write_metrics(runner, several=True)
    monkeypatch.undo()
    assert runner.manifest.metrics_error is None and runner.manifest.ranks_error is None, runner.manifest
    for name in ("metrics.json", "ranks.json", "manifest.json"):
        assert (copy / name).read_bytes() == (bundle / name).read_bytes(), name
    assert dict(loads) == {k: 1 for k in range(n)} and analyses[0] == n
    assert diagnoses == [dict(rules=None, warnings=False)]


def test_per_rank_metrics_match_the_programs_own_timers(job):
    n, cwd, bundle = job
    view = cross_rank(bundle)
    table = view.table().set_index("rank")
    for rank in range(n):
        light, traced = own_timers(cwd / "own", rank)
        # step time: the light pass (no tracer) against the program's own timer of that run
        assert table.loc[rank, "step_ms_p50"] == pytest.approx(median_ms(light["step_ns"]), rel=0.10)
        # communication: the traced window's steps against the program's timer around its all-reduces
        warmup = json.loads((bundle / "manifest.json").read_text())["light_pass"]["warmup"]
        window = slice(warmup, warmup + 8)  # the traced window: --steps 8 after the light pass's warm-up
        own_comm = median_ms(traced["comm_ns"][window])
        # the program's timer also holds the Python calls and their dispatch under the tracer
        # (record_shapes): up to ~0.75 ms per all-reduce on a loaded 2-core machine
        assert abs(table.loc[rank, "comm_ms_p50"] - own_comm) <= max(0.15 * own_comm, 3.0), (rank, table.loc[rank].to_dict(), own_comm)
        assert table.loc[rank, "collectives_per_step"] == 4  # one all-reduce per parameter tensor
    assert set(view.comm_source.values()) == {"host collective ranges (gloo:*/nccl:* of the process group)"}


def test_the_slow_rank_is_the_straggler_within_ten_percent(job):
    n, cwd, bundle = job
    view = cross_rank(bundle)
    s = view.straggler
    assert s is not None and s.rank == SLOW_RANK[n]
    assert s.delay_ms == pytest.approx(SLOW_MS[n], rel=0.10)
    # the program's own view of the same thing: its compute time before the all-reduce
    compute = {r: median_ms(own_timers(cwd / "own", r)[1]["compute_ns"]) for r in range(n)}
    own_delay = compute[s.rank] - statistics.median(v for r, v in compute.items() if r != s.rank)
    assert s.delay_ms == pytest.approx(own_delay, rel=0.10)
    assert s.collective is not None and s.collective.name == "gloo:all_reduce" and s.collective.per_step == 4
    assert s.collective.waiting_ranks == [r for r in range(n) if r != s.rank]
    assert s.collective.wait_ms == pytest.approx(SLOW_MS[n], rel=0.15)
    metrics = view.metrics()
    assert metrics["straggler_delay_ms"].value == pytest.approx(s.delay_ms, rel=1e-5)
    written = json.loads((bundle / "ranks.json").read_text())  # perfdoctor run wrote the same view
    assert written["straggler"]["rank"] == s.rank and written["straggler"]["delay_ms"] == pytest.approx(s.delay_ms, rel=1e-6)


def test_analyze_names_the_straggler_and_fails_the_rule(job, tmp_path):
    n, _, bundle = job
    done = run_cli_inprocess("analyze", bundle, "--json", tmp_path / "ranks.json")
    assert done.returncode == 0, done.stderr
    assert f"straggler: rank {SLOW_RANK[n]}" in done.stdout
    assert "waits for it: gloo:all_reduce (#1 of 4" in done.stdout
    doc = json.loads((tmp_path / "ranks.json").read_text())
    assert doc["schema"] == "perfdoctor.ranks/1" and doc["world_size"] == n and doc["straggler"]["rank"] == SLOW_RANK[n]
    for rank, found in doc["findings"].items():
        status = {f["id"]: f["status"] for f in found}
        assert status["straggler"] == "fail"
    waiting = str(next(r for r in range(n) if r != SLOW_RANK[n]))
    exposed = {f["id"]: f for f in doc["findings"][waiting]}["exposed-comm"]
    assert exposed["status"] == "fail"


def test_a_folder_of_per_rank_traces_gives_the_same_view(job, tmp_path):
    """The layout tensorboard_trace_handler writes: <worker>.<ts>.pt.trace.json.gz, rank from distributedInfo."""
    n, _, bundle = job
    folder = tmp_path / "tb"
    folder.mkdir()
    for rank in reversed(range(n)):  # file order is not rank order: the rank comes from the trace
        shutil.copy(bundle / "raw" / f"rank{rank}" / "torch-trace.json.gz", folder / f"host_{900 - rank}.17000000{rank}.pt.trace.json.gz")
    view = cross_rank(folder, step="train_step")
    assert view.source == "trace folder" and view.world_size == n and [r.rank for r in view.runs] == list(range(n))
    from_bundle = cross_rank(bundle).straggler
    assert view.straggler.rank == from_bundle.rank
    assert view.straggler.delay_ms == pytest.approx(from_bundle.delay_ms, rel=1e-6)


def test_a_real_folder_taken_as_many_ranks_gives_the_same_view(job, tmp_path, monkeypatch):
    """The grouped reading (ranks.grouped_view, above FULL_VIEW_RANKS traces) of a real
    job's traces: each rank's own pids, thread ids and times make it its own group, and
    host collectives are not grouped anyway, so every rank is analysed in full and the view
    is the one rank by rank."""
    n, _, bundle = job
    folder = tmp_path / "tb"
    folder.mkdir()
    for rank in range(n):
        shutil.copy(bundle / "raw" / f"rank{rank}" / "torch-trace.json.gz", folder / f"rank{rank}.pt.trace.json.gz")
    full = cross_rank(folder, step="train_step")
    monkeypatch.setattr(ranks, "FULL_VIEW_RANKS", 0)
    grouped = cross_rank(folder, step="train_step")
    assert [r.rank for r in grouped.runs] == list(range(n))
    pd.testing.assert_frame_equal(grouped.table(), full.table(), check_exact=True)
    assert grouped.straggler == full.straggler and grouped.to_json() == full.to_json()


def test_a_failed_rank_gives_its_exit_code_and_a_readable_bundle(tmp_path):
    done = perfdoctor("run", "-q", "--out", "runs", "--nproc-per-node", "2", str(JOB), "--steps", "6", "--fail-rank", "1", cwd=tmp_path)
    assert done.returncode == 3, done.stderr[-2000:]
    bundle = bundle_of(tmp_path)
    m = json.loads((bundle / "manifest.json").read_text())
    assert m["failed_rank"] == {"rank": 1, "exit_code": 3}
    assert m["ranks"]["1"]["passes"]["light"]["status"] == "exited 3"
    assert m["ranks"]["0"]["passes"]["light"]["status"] != "ok"  # its peer died under it
    analyzed = run_cli_inprocess("analyze", bundle)
    assert analyzed.returncode in (0, 2) and "Traceback" not in analyzed.stderr
    assert analyzed.returncode == 0 or len(analyzed.stderr.strip().splitlines()) == 1


def test_a_hung_rank_is_stopped_by_the_timeout(tmp_path):
    done = perfdoctor("run", "-q", "--out", "runs", "--timeout", "12", "--nproc-per-node", "2", str(JOB), "--steps", "6",
                      "--hang-rank", "1", cwd=tmp_path, timeout=120)
    assert done.returncode == 124, done.stderr[-2000:]
    m = json.loads((bundle_of(tmp_path) / "manifest.json").read_text())
    assert m["status"] == "timed out" and m["timed_out"] == {"pass": "light", "after_s": 12.0}
    assert m["ranks"]["1"]["passes"]["light"]["status"].startswith("terminated")
    assert m["collectors"]["torch"]["status"] == "failed: not run, an earlier pass timed out (--timeout)"
    analyzed = run_cli_inprocess("analyze", bundle_of(tmp_path))
    assert analyzed.returncode == 2 and "no rank has a trace" in analyzed.stderr and len(analyzed.stderr.strip().splitlines()) == 1


def test_a_rank_left_running_after_the_others_ended_is_named_while_the_run_waits(tmp_path):
    # rank 1 sleeps on after its last step while rank 0's program ends: before, the run
    # waited on it with nothing said (the DDP tutorial on gloo under the profiler: forever,
    # ~1 run in 3). It is named once the wait passes the straggler time (2 s here)
    done = perfdoctor("run", "--out", "runs", "--timeout", "12", "--nproc-per-node", "2", str(JOB), "--steps", "4",
                      "--linger-rank", "1", cwd=tmp_path, timeout=120, env={"PERFDOCTOR_STRAGGLER_S": "2"})
    assert done.returncode == 124, done.stderr[-2000:]
    said = [line for line in (done.stdout + done.stderr).splitlines() if "still running" in line and "ended" in line]
    assert len(said) == 1 and said[0].startswith("light pass: rank 1 still running") and "after rank 0 ended" in said[0], said
    assert "--timeout S" in said[0]
    m = json.loads((bundle_of(tmp_path) / "manifest.json").read_text())
    assert m["ranks"]["0"]["passes"]["light"]["status"] == "ok" and m["timed_out"]["pass"] == "light"


def test_what_is_said_of_ranks_left_running() -> None:
    from perfdoctor.record.progress import straggler_note

    assert straggler_note([1, 3], [0, 2], 95).startswith("ranks 1, 3 still running 1 min 35 s after ranks 0, 2 ended")
    assert straggler_note([], [0, 1], 30).startswith("every rank's program ended 30 s ago and the job is still running")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--", "mpirun", "-n", "2", "x.py"], "mpirun: no such script"),  # not torchrun: a plain script, as ever
        (["--nproc-per-node", "2", "--", "torchrun", "--nproc-per-node", "2", str(JOB)], "not both"),
        (["--", "torchrun", "--no-python", "hostname"], "--no-python"),
        (["--", "torchrun", "--nproc-per-node", "2", "missing.py"], "missing.py: no such script"),
        (["--", "torchrun", "--bogus-option", "1", str(JOB)], "torchrun options"),
        (["--", "torchrun", "--help"], "run torchrun --help itself"),
        # Hugging Face's launcher, read by accelerate's own parser
        (["--", "accelerate", "launch", "--bogus-option", str(JOB)], "accelerate launch options: unrecognized arguments: --bogus-option"),
        (["--", "accelerate", "launch", "--help"], "run accelerate launch --help itself"),
        (["--", "accelerate", "launch", "--cpu", "missing.py"], "missing.py: no such script"),
        (["--", "accelerate", "launch", "--num_machines", "2", "--main_process_ip", "10.0.0.1", str(JOB)], "accelerate launch with several machines"),
        (["--nproc-per-node", "2", "--", "accelerate", "launch", str(JOB)], "not both"),
    ],
)
def test_launch_usage_errors(tmp_path, args, message):
    done = run_cli_inprocess("run", "-q", "--out", tmp_path / "runs", *args)
    assert done.returncode == 2 and message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "runs").exists()


def test_torchrun_of_a_shell_script_is_named_as_a_plain_run_names_it(tmp_path):
    script = tmp_path / "setup.sh"
    script.write_text("#!/bin/sh\npython train.py\n")
    done = run_cli_inprocess("run", "-q", "--out", tmp_path / "runs", "--", "torchrun", "--nproc-per-node", "2", str(script))
    assert done.returncode == 2 and "setup.sh: a shell script" in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "runs").exists()


def test_find_straggler_known_case():
    """Three ranks; rank 2 works 5 ms more per step, ranks 0 and 1 wait for it in collective #2."""
    def steps(busy, waits):
        return pd.DataFrame({"step_ms": [busy + waits] * 4, "comm_ms": [waits] * 4, "exposed_ms": [waits] * 4,
                             "busy_ms": [busy] * 4, "overlap": [np.nan] * 4, "collectives": [2] * 4, "mean_collective_us": [1.0] * 4})

    per = {0: steps(10.0, 6.0), 1: steps(10.5, 5.5), 2: steps(15.25, 0.75)}
    coll = {r: [[("c0", 0.25), ("c1", per[r]["comm_ms"][0] - 0.25)]] * 4 for r in per}
    s, why = find_straggler(per, coll)
    assert why is None and s.rank == 2 and s.delay_ms == pytest.approx(15.25 - 10.25) and s.step_share == 1.0
    assert s.delay_ratio == pytest.approx(5.0 / 16.0)
    assert s.collective.index == 1 and s.collective.name == "c1" and s.collective.wait_ms == pytest.approx(5.0)
    assert find_straggler({0: per[0]})[0] is None


def test_the_worker_of_a_trace_file():
    """tensorboard_trace_handler's ``<worker>.<time>.pt.trace.json[.gz]``; a host name with dots stays whole."""
    assert ranks.worker_of("vm_4867.1796323248277929153.pt.trace.json") == "vm_4867"
    assert ranks.worker_of("ip-10-0-0-1.ec2.internal_77.1700000000123.pt.trace.json.gz") == "ip-10-0-0-1.ec2.internal_77"
    assert ranks.worker_of("rank3.pt.trace.json") == "rank3.pt.trace.json"  # no time: a name of its own


def test_timelines_join_one_process_s_disjoint_windows_only():
    """Files 0, 2 (worker a) one after the other: one timeline in time order; 1 and 3 (worker
    b, 3 first): one; 4 and 5 (worker c) overlap in time: two processes; 6 (worker a, another
    distributedInfo rank): its own."""
    keys = [("a", None), ("b", None), ("a", None), ("b", None), ("c", None), ("c", None), ("a", 1)]
    extents = [(0, 10), (0, 30), (15, 20), (-50, -40), (0, 10), (5, 20), (30, 40)]
    assert ranks.timelines(keys, extents) == [[0, 2], [3, 1], [4], [5], [6]]


def test_join_windows_lays_them_end_to_end():
    """Two windows of one process (each on its own origin, the second 1 s after the first's
    end): the second begins where the first's last event ends; its correlation ids follow
    the first's; the untraced second is said."""
    from perfdoctor.profile import ACTIVITY_COLUMNS, CALL_COLUMNS, RANGE_COLUMNS, Origin, Profile, frame

    def window(origin_ns, name, step):
        return Profile(
            activities=frame(ACTIVITY_COLUMNS, {"kind": ["kernel"], "start_ns": [150], "end_ns": [400], "name": ["k"], "correlation": [7]}),
            calls=frame(CALL_COLUMNS, {"name": ["cudaLaunchKernel"], "start_ns": [120], "end_ns": [140], "tid": [0], "correlation": [7]}),
            ranges=frame(RANGE_COLUMNS, {"name": [step], "start_ns": [100], "end_ns": [300], "tid": [0], "source": ["profiler_step"]}),
            origin=Origin(source="kineto", path=f"/t/{name}", time_origin_ns=origin_ns, op_counts={"aten::mm": 2}))

    joined = ranks.join_windows([window(10_000, "w.1.pt.trace.json", "ProfilerStep#2"), window(10_000 + 400 + 10**9, "w.2.pt.trace.json", "ProfilerStep#7")])
    assert joined.ranges["start_ns"].tolist() == [100, 400] and joined.ranges["end_ns"].tolist() == [300, 600]
    assert joined.activities["start_ns"].tolist() == [150, 450] and joined.activities["end_ns"].tolist() == [400, 700]
    assert joined.calls["start_ns"].tolist() == [120, 420]
    assert joined.calls["correlation"].tolist() == joined.activities["correlation"].tolist() == [7, 15]
    assert joined.origin.op_counts == {"aten::mm": 4} and joined.origin.path == "/t/w.1.pt.trace.json"
    assert "2 profiler windows of one process" in joined.origin.warnings[-1] and "the 1 s between them" in joined.origin.warnings[-1]


@pytest.fixture(scope="module")
def balanced(tmp_path_factory):
    """The 2-rank job without its straggler: what a fix of the slow rank would give."""
    cwd = tmp_path_factory.mktemp("balanced")
    done = perfdoctor("run", "-q", "--out", "runs", "--steps", "8", "--nproc-per-node", "2", str(JOB), "--steps", "16", cwd=cwd)
    assert done.returncode == 0, done.stderr[-3000:]
    return bundle_of(cwd)


def test_diff_and_gate_compare_like_ranks(job, balanced, tmp_path):
    n, _, slow = job
    done = run_cli_inprocess("diff", slow, balanced, "--no-rules", "--json", tmp_path / "diff.json")
    assert done.returncode == 0, done.stderr
    doc = json.loads((tmp_path / "diff.json").read_text())
    if n == 2:  # same world size: rank k against rank k, each side labelled with its rank
        assert doc["schema"] == "perfdoctor.diff-ranks/1" and sorted(doc["ranks"]) == ["0", "1"]
        for rank, d in doc["ranks"].items():
            assert d["before"].endswith(f"(rank {rank})") and d["after"].endswith(f"(rank {rank})")
            assert not d["mismatches"]
            latency = d["metrics"]["step_latency_ms_p50"]
            assert latency["after"] < latency["before"] - 0.5 * SLOW_MS[2]  # the straggler's sleep is gone on every rank
        # the slow run against the balanced baseline fails its budget on every rank
        gate = run_cli_inprocess("gate", slow, "--baseline", balanced, "--fail-on", "step_latency_ms_p50:+10%", "--json", tmp_path / "g.json")
        assert gate.returncode == 1, gate.stdout + gate.stderr
        checks = json.loads((tmp_path / "g.json").read_text())["checks"]
        assert [c["name"] for c in checks] == ["rank 0: budget step_latency_ms_p50:+10%", "rank 1: budget step_latency_ms_p50:+10%"]
        assert all(c["status"] == "fail" for c in checks)
        assert run_cli_inprocess("gate", balanced, "--baseline", slow, "--fail-on", "step_latency_ms_p50:+10%").returncode == 0
    else:  # 4 ranks against 2: not comparable, said through the comparability facts
        assert doc["schema"] == "perfdoctor.diff/1" and doc["comparable"] is False
        mismatch = {m["field"]: m for m in doc["mismatches"]}
        assert mismatch["world_size"]["before"] == 4 and mismatch["world_size"]["after"] == 2
        assert "not comparable" in mismatch["world_size"]["message"]


def test_busy_is_the_non_communication_kernel_time_of_each_rank(tmp_path):
    # wild/param_dlrm_8ranks: 8 ranks of one DLRM step. A rank's busy time is the union of
    # its step's non-communication kernels, computed here from the raw events (kernels whose
    # launch call starts inside ProfilerStep#10); the step's span less its exposed
    # communication (the old reading) holds idle time and made rank 5 "work 1.79 ms longer".
    import gzip

    from perfdoctor.analysis.metrics import analyze
    from perfdoctor.analysis.ranks import rank_steps
    from perfdoctor.pipeline import load_trace

    folder = ROOT.parent / "shared" / "traces" / "wild" / "param_dlrm_8ranks"
    if not folder.exists():
        pytest.skip(f"{folder} is absent (the shared real traces)")
    busy = {}
    for path in sorted(folder.glob("*.pt.trace.json.gz")):
        doc = json.loads(gzip.decompress(path.read_bytes()))
        ev = doc["traceEvents"]
        t0 = min(e["ts"] for e in ev if "ts" in e)  # epoch-µs timestamps: shifted until the loader reads them
        for e in ev:
            if "ts" in e:
                e["ts"] -= t0
        shifted = tmp_path / path.name.removesuffix(".gz")
        shifted.write_text(json.dumps(doc))
        x = [e for e in ev if e.get("ph") == "X"]
        step = next(e for e in x if e["name"].startswith("ProfilerStep#"))
        launched = {e["args"]["correlation"]: e["ts"] for e in x if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
        mine = sorted((e["ts"], e["ts"] + e["dur"]) for e in x if e.get("cat") == "kernel" and "nccl" not in e["name"].lower()
                      and step["ts"] <= launched.get(e["args"]["correlation"], -1) <= step["ts"] + step["dur"])
        total, reach = 0.0, float("-inf")
        for s, e in mine:
            total += max(0.0, e - max(s, reach))
            reach = max(reach, e)
        rank = doc["distributedInfo"]["rank"]
        got = rank_steps(analyze(load_trace(shifted)))[0]["busy_ms"].to_numpy()
        assert got == pytest.approx([total / 1e3], abs=1e-3), rank
        busy[rank] = got[0]
    assert len(busy) == 8 and all(1.0 < b < 1.2 for b in busy.values())
    assert busy[5] == pytest.approx(1.04, abs=0.01)
