"""``perfdoctor run`` on a real GPU decode-like loop (tests/programs/gpu_decode.py).

Run on the H200 by ``scripts/gpu-check``. Checks that all four collectors work there, that
the two hardware counter sources (NVML GPM in the light pass, Nsight Compute replay) rank a
memory-bound and a launch-bound program the same way, and that the light pass's step
latency matches the program's own timing. The numbers are appended to
``$PERFDOCTOR_NUMBERS`` (JSON lines) when set, for the script's table.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from perfdoctor.analysis import steady
from perfdoctor.pipeline import diagnose
from perfdoctor.reports.summary import UNEVEN, uneven_steps_lines

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

PROGRAM = Path(__file__).parents[1] / "programs" / "gpu_decode.py"
ROOT = Path(__file__).parents[2]


def record(**numbers: object) -> None:
    path = os.environ.get("PERFDOCTOR_NUMBERS")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(numbers) + "\n")


def run(cwd: Path, *args: str, timeout: int = 150) -> tuple[subprocess.CompletedProcess, Path]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-m", "perfdoctor.record.run", "--out", str(cwd / "runs"), *args],
        capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout,
    )
    assert (cwd / "runs").is_dir(), done.stderr[-3000:]
    return done, sorted((cwd / "runs").iterdir())[-1]


def manifest(bundle: Path) -> dict:
    return json.loads((bundle / "manifest.json").read_text())


def ncu_time_weighted(bundle: Path, metric: str) -> float:
    from perfdoctor.collectors.bundle import load_bundle

    c = load_bundle(bundle).counters
    rows = c[c["metric"] == metric]
    return float((rows["value"] * rows["duration_ns"]).sum() / rows["duration_ns"].sum())


@pytest.fixture(scope="module")
def big_run(tmp_path_factory):
    """The memory-bound program under all four collectors."""
    cwd = tmp_path_factory.mktemp("big")
    # 1500 steps (~1.5 s): the light pass must span several ~0.1 s GPM samples; the trace keeps 5.
    done, bundle = run(cwd, "--warmup", "3", "--steps", "5", str(PROGRAM), "--size", "big", "--steps", "1500")
    return done, bundle, cwd


def test_all_four_collectors_ok(big_run):
    done, bundle, _ = big_run
    m = manifest(bundle)
    statuses = {k: v["status"] for k, v in m["collectors"].items()}
    record(test="collectors", bundle=str(bundle), **statuses)
    assert done.returncode == 0, done.stderr[-3000:]
    assert statuses == {"torch": "ok", "nvml": "ok", "nsys": "ok", "ncu": "ok"}, json.dumps(m["collectors"], indent=1)[-3000:]
    metrics = json.loads((bundle / "metrics.json").read_text())["metrics"]
    keys = ("steps", "dram_bw_util", "sm_occupancy", "profiler_overhead_ratio", "step_latency_ms_p50", "peak_dram_bw_gbps")
    record(test="metrics-big", **{k: metrics.get(k, {}).get("value") for k in keys},
           dram_source=metrics.get("dram_bw_util", {}).get("source"), occ_source=metrics.get("sm_occupancy", {}).get("source"),
           light_p50=statistics.median(m["light_pass"]["step_latency_ms"]))
    assert metrics["steps"]["value"] == 5
    assert m["gpu"]["peak_dram_bw_gbps"] > 1000
    assert metrics["profiler_overhead_ratio"]["value"] is not None


def test_nvml_samples_are_aligned_with_the_trace(big_run):
    from perfdoctor.collectors.bundle import load_bundle

    _, bundle, _ = big_run
    p = load_bundle(bundle)
    nvml = p.samples[p.samples["source"].isin(["nvml", "nvml-gpm"])]
    first, last = p.kernels["start_ns"].min(), p.kernels["end_ns"].max()
    # The sampler ran for the whole pass, so on the trace's clock its samples bracket the
    # traced kernels, within the pass's few seconds (a wrong offset lands hours away).
    record(test="alignment", nvml_samples=len(nvml), before_s=(first - nvml["time_ns"].min()) / 1e9, after_s=(nvml["time_ns"].max() - last) / 1e9)
    assert nvml["time_ns"].min() < first and nvml["time_ns"].max() > last
    assert (first - nvml["time_ns"].min()) < 120e9 and (nvml["time_ns"].max() - last) < 120e9


@pytest.fixture(scope="module")
def big_gpm(tmp_path_factory):
    """The memory-bound program, light pass only: with no tracing pass, NVML (GPM) samples it."""
    cwd = tmp_path_factory.mktemp("big_gpm")
    return run(cwd, "--collect", "nvml", "--warmup", "3", str(PROGRAM), "--size", "big", "--steps", "1500")


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    """The launch-bound program, light pass (GPM) + ncu only."""
    cwd = tmp_path_factory.mktemp("small")
    done, bundle = run(cwd, "--collect", "nvml,ncu", "--warmup", "3", "--steps", "20", str(PROGRAM), "--size", "small", "--steps", "500")
    return done, bundle


def test_gpm_and_ncu_agree_in_direction(big_run, big_gpm, small_run):
    _, big, _ = big_run
    done, small = small_run
    assert done.returncode == 0, done.stderr[-3000:]
    gpm = {n: manifest(b)["light_pass"].get("nvml_means", {}) for n, b in (("big", big_gpm[1]), ("small", small))}
    record(test="collectors-small", **{k: v["status"] for k, v in manifest(small)["collectors"].items()})
    record(test="gpm-means", big=json.dumps(gpm["big"])[:400], small=json.dumps(gpm["small"])[:400])
    # Issue 19's counters: GPM time-weighted over exactly the steady steps (100 ms GPM intervals).
    for n, b in (("big", big_gpm[1]), ("small", small)):
        lp = manifest(b)["light_pass"]
        record(test=f"gpm-counters-{n}", steady_start=lp.get("steady_start"), warmup=lp.get("warmup"),
               gpm_interval_ms=lp.get("gpm_interval_ms"), counters=json.dumps(lp.get("counters"))[:500])
    numbers = {
        "gpm_dram_big": gpm["big"]["dram_bw_util"]["mean"],
        "gpm_dram_small": gpm["small"]["dram_bw_util"]["mean"],
        "ncu_dram_pct_big": ncu_time_weighted(big, "dram__throughput.avg.pct_of_peak_sustained_elapsed"),
        "ncu_dram_pct_small": ncu_time_weighted(small, "dram__throughput.avg.pct_of_peak_sustained_elapsed"),
        "gpm_occ_big": gpm["big"]["sm_occupancy"]["mean"],
        "gpm_occ_small": gpm["small"]["sm_occupancy"]["mean"],
        "ncu_occ_pct_big": ncu_time_weighted(big, "sm__warps_active.avg.pct_of_peak_sustained_active"),
        "ncu_occ_pct_small": ncu_time_weighted(small, "sm__warps_active.avg.pct_of_peak_sustained_active"),
    }
    record(test="direction", **numbers)
    assert numbers["gpm_dram_big"] > numbers["gpm_dram_small"]
    assert numbers["ncu_dram_pct_big"] > numbers["ncu_dram_pct_small"]
    assert (numbers["gpm_occ_big"] > numbers["gpm_occ_small"]) == (numbers["ncu_occ_pct_big"] > numbers["ncu_occ_pct_small"])


def test_light_pass_event_record_is_fast_and_on_the_current_stream():
    """The light pass records a CUDA event at each step's end, and at its start unless the
    stream is idle. ``stream_ops`` skips torch's Python stream lookup (H200, 2026-12-02:
    Event.record 8.3-10.8 us, the fast path 2.6 us in a prototype): its record must be
    faster and land on the stream current at that moment, as Event.record does; its idle
    query must say what ``current_stream().query()`` says, on that stream."""
    import time

    from perfdoctor.record.bootstrap import clock

    torch.ones(1, device="cuda")
    torch.cuda.synchronize()
    stream, record_on, query = clock.stream_ops(torch)
    e = torch.cuda.Event(enable_timing=True)

    def fast_record(event):
        record_on(event, stream())

    def idle():
        return query(stream())

    def per_call(f, n=20000):
        for _ in range(200):
            f()
        t = time.perf_counter_ns()
        for _ in range(n):
            f()
        return (time.perf_counter_ns() - t) / n

    fast = min(per_call(lambda: fast_record(e)) for _ in range(3))
    plain = min(per_call(e.record) for _ in range(3))
    torch.cuda.synchronize()
    query_ns = min(per_call(idle) for _ in range(3))
    idle_default = idle()
    # On a side stream held by a long kernel, the event completes only after that kernel:
    # it was recorded on the side stream, not on the default one; the side stream is busy
    # and the default one idle.
    side = torch.cuda.Stream()
    a = torch.randn(4096, 4096, device="cuda")
    with torch.cuda.stream(side):
        for _ in range(20):
            a = a @ a / 64
        fast_record(e)
        side_idle = idle()
    default_idle_meanwhile = idle()
    queued = not e.query()
    e.synchronize()
    record(test="event-record", fast_ns=fast, plain_ns=plain, query_ns=query_ns, queued_on_side_stream=queued)
    assert fast < 0.6 * plain
    assert queued
    assert idle_default and default_idle_meanwhile and not side_idle


def test_light_pass_takes_no_event_on_an_idle_stream():
    """A host-paced loop (a synchronize after each step) starts every step on an idle
    stream: its GPU starts are its host starts; a step that synchronizes before it returns
    ends on an idle stream: its GPU end is its host end; a GPU-bound loop (no synchronize,
    long kernels) queues its steps: their GPU starts are events, later than their host
    starts, and each one is the previous step's end or later."""
    import time

    from perfdoctor.record.bootstrap import clock

    torch.ones(1, device="cuda")
    torch.cuda.synchronize()
    timer = clock.Timer()
    paced, synced, queued = clock.StepTimes(timer), clock.StepTimes(timer), clock.StepTimes(timer)
    a = torch.randn(4096, 4096, device="cuda")
    for _ in range(20):
        paced.start("step")
        b = a @ a
        paced.end("step")
        torch.cuda.synchronize()
    host_ends = []
    for _ in range(20):
        synced.start("step")
        b = a @ a
        torch.cuda.synchronize()
        before = time.perf_counter_ns()
        synced.end("step")
        host_ends.append((before, time.perf_counter_ns()))
    for _ in range(20):
        queued.start("step")
        for _ in range(5):
            b = a @ a
        queued.end("step")
    torch.cuda.synchronize()
    p, _ = paced.series()
    y, _ = synced.series()
    q, _ = queued.series()
    p, y, q = p["step"], y["step"], q["step"]
    assert p["gpu_start_ns"] == p["host_start_ns"]
    assert all(e - h > 50_000 for h, e in zip(p["host_start_ns"], p["gpu_end_ns"]))  # a busy end: the matmul's event
    assert all(lo <= e <= hi for e, (lo, hi) in zip(y["gpu_end_ns"], host_ends))
    later = [g - h for g, h in zip(q["gpu_start_ns"][1:], q["host_start_ns"][1:])]
    record(test="idle-start", queued_start_after_host_ms_min=min(later) / 1e6, steps=len(later))
    assert min(later) > 0
    assert all(s >= e - 50_000 for s, e in zip(q["gpu_start_ns"][1:], q["gpu_end_ns"][:-1]))  # 50 us: the clock's resolution


def test_light_pass_samples_a_steady_loop_and_reads_its_other_steps_as_measured():
    """A host-paced loop of small kernels, no synchronize (a launch-bound forward's shape), timed
    by two lanes at once: one as shipped, which goes sparse once its lags are steady
    (StepTimes.settle), and one measuring every step (Timer.sampling off), its edges just inside
    the other's. The sparse lane measures about one step in SPARSE_EVERY, and its GPU ends of
    the steps between are the dense lane's within the spread the sampling allows; its step
    times, on average, too."""
    from perfdoctor.record.bootstrap import clock

    x = torch.zeros(1024, device="cuda")
    torch.cuda.synchronize()
    shipped, every = clock.Timer(), clock.Timer()
    every.sampling = False
    sparse, dense = clock.StepTimes(shipped), clock.StepTimes(every)
    for _ in range(600):
        sparse.start("step")
        dense.start("step")
        for _ in range(200):  # ~1 ms of launches: 2 % of it is the spread a lane samples under
            x.add_(1)
        dense.end("step")
        sparse.end("step")
    torch.cuda.synchronize()
    s, d = sparse.series()[0]["step"], dense.series()[0]["step"]
    measured = s["gpu_measured"]
    assert "gpu_measured" not in d and len(measured) == len(d["gpu_end_ns"]) == 600
    share = sum(measured[200:]) / 400
    period = statistics.median(b - a for a, b in zip(s["host_start_ns"], s["host_start_ns"][1:]))
    errors = sorted(abs(a - b) for a, b, m in zip(s["gpu_end_ns"], d["gpu_end_ns"], measured) if not m)
    sparse_ms = statistics.fmean(e - h for e, h in zip(s["gpu_end_ns"], s["host_start_ns"])) / 1e6
    dense_ms = statistics.fmean(e - h for e, h in zip(d["gpu_end_ns"], s["host_start_ns"])) / 1e6
    record(test="sparse-lane", measured_share=share, period_us=period / 1e3, error_p50_us=errors[len(errors) // 2] / 1e3,
           error_p99_us=errors[int(0.99 * len(errors))] / 1e3, sparse_ms=sparse_ms, dense_ms=dense_ms)
    assert 0.8 / clock.SPARSE_EVERY < share < 1.5 / clock.SPARSE_EVERY
    # the spread steady_lags allows, plus the two lanes' edges' own distance (their host times)
    assert errors[int(0.95 * len(errors))] < clock.STEADY_SHARE * period + 20_000
    assert abs(sparse_ms - dense_ms) < 0.01 * dense_ms


def test_light_pass_latency_matches_the_program_alone(tmp_path):
    """bench/light_pass.py, three trials per size, each a fresh process: the light pass's
    step latency against the program's own timer in the same process (the light pass's
    accuracy, every size), and against the program run alone with no perfdoctor (what the
    light pass costs the program: only on the GPU-bound size, the one whose step time does
    not change from process to process; host-paced loops alone varied 1.0-1.65x there)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = tmp_path / "light.json"
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "light_pass.py"), "--modes", "light", "--trials", "3", "--json", str(out)],
                          capture_output=True, text=True, env=env, timeout=500)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["args"]["pinned_cpus"]
    # Mode "light" is --collect torch: nvml not selected, so no NVML sampler beside the light pass.
    assert all(r["nvml_sampled"] is False for r in result["rows"] if r["mode"] == "light")
    light = {t["size"]: t for t in result["table"] if t["mode"] == "light"}
    for size, t in light.items():
        record(test=f"latency-{size}", light_ms=t["light_ms"], program_in_light_pass_ms=t["own_ms"],
               light_vs_alone=t["light_vs_alone"] - 1, light_vs_own=t["light_vs_own"] - 1, own_vs_alone=t["own_vs_alone"] - 1)
    assert set(light) == {"gpu", "big", "small"}
    for t in light.values():
        # The program's timer ends when synchronize() has returned and its thread woke; the
        # critical path ends at the GPU's end event. That host wake-up is a fixed time, not a
        # share: own - light was 17-57 us in all 18 size-runs recorded on the H200 (11-30 to
        # 12-03, docs/results/*/gpu-numbers.jsonl), never negative; at 1.2 ms per step 57 us
        # is 4.7 %, so the bound is in us (a 3 % bound failed on 42 us, 12-03).
        assert -0.01 < t["own_ms"] - t["light_ms"] < 0.1, t
    # Light vs alone is two processes: the program alone moved -1.9 % to +10.4 % against its
    # own timer under the light pass in six recorded runs of this size, more than the light
    # pass costs. This bound catches a light pass that slows the program grossly; the cost
    # itself (+1.30 % ± 0.12) is resolved in one process by bench/light_pass.py --alternate.
    assert abs(light["gpu"]["light_vs_alone"] - 1) < 0.15, light["gpu"]


def test_calibrate_measures_a_ceiling_below_the_theoretical_peak(tmp_path, monkeypatch):
    import typer
    from typer.testing import CliRunner

    from perfdoctor.record.calibrate import load_calibration
    from perfdoctor.cli.calibrate import calibrate_command
    from perfdoctor.collectors import nvml

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    app = typer.Typer()
    app.command()(calibrate_command)
    result = CliRunner().invoke(app, ["--sizes-mb", "512,2048", "--matmul-n", "8192"])
    assert result.exit_code == 0, result.output
    info = nvml.device_info()
    entry = load_calibration(info["uuid"])
    record(test="calibrate", dram_read_gbps=entry["dram_read_gbps"], theoretical_gbps=info["peak_dram_bw_gbps"],
           bf16_matmul_tflops=entry["bf16_matmul_tflops"])
    assert 0.5 * info["peak_dram_bw_gbps"] < entry["dram_read_gbps"] < info["peak_dram_bw_gbps"]
    assert entry["bf16_matmul_tflops"] > 100


# --- issue 19: perfdoctor run's numbers against the program's own -----------------------
#
# Each program times itself and prints its speed; `perfdoctor run` with default options
# must report the same: step latency and tokens/s within 5 %, DRAM bandwidth within 3
# points of the engine's own GB/s / peak, few bubbles for the graph and fused engines, and
# one step per generated token for Hugging Face generate (which has no annotation at all).
# One run has every collector; the others --collect torch,nvml, to keep GPU time short.

ENGINE_LINE = re.compile(r"decode: ([\d.]+) ms/token, ([\d.]+) tokens/s, ([\d.]+) GB/s \(([\d.]+) % of the")
HF_LINE = re.compile(r"hf generate: ([\d.]+) ms/token, ([\d.]+) tokens/s")


def first_finding(bundle: Path) -> str | None:
    """The id of the report's first (highest-ranked) failing finding for the run bundle."""
    from perfdoctor.pipeline import load_trace
    from perfdoctor.analysis.metrics import analyze
    from perfdoctor.rules.engine import evaluate, load_rules

    findings = evaluate(load_rules(()), analyze(load_trace(bundle)))
    return next((f.rule_id for f in findings if f.status == "fail"), None)


def metric(metrics: dict, key: str) -> float | None:
    entry = metrics.get(key) or {}
    return entry.get("value")


def light_numbers(m: dict) -> dict:
    """What the light pass itself measured (this branch's side of the bundle)."""
    lp = m["light_pass"]
    counters = lp.get("counters") or {}
    dram = counters.get("dram_bw_util") or {}
    return {
        "light_step": lp.get("step_name"), "light_how": lp.get("how"), "light_steps_seen": lp.get("steps_seen"),
        "light_steady_start": lp.get("steady_start"), "light_warmup": lp.get("warmup"),
        "light_cp_p50_ms": statistics.median(lp["step_latency_ms"]) if lp.get("step_latency_ms") else None,
        "gpm_dram": dram.get("value"), "gpm_dram_samples": dram.get("samples"), "gpm_dram_nan": dram.get("dropped_nan"),
        "gpm_reason": dram.get("reason") or lp.get("counters_reason"),
    }


ACCEPTANCE = [("eager", 48, None), ("eager", 256, "torch,nvml"), ("graph", 48, "torch,nvml"), ("graph", 256, "torch,nvml"),
              ("fused", 48, "torch,nvml"), ("fused", 256, "torch,nvml"), ("megakernel", 256, "torch,nvml")]


@pytest.mark.parametrize(("variant", "tokens", "collect"), ACCEPTANCE, ids=[f"{v}-{t}" for v, t, _ in ACCEPTANCE])
def test_acceptance_engine_numbers_are_the_programs_own(tmp_path, variant, tokens, collect):
    args = ["--collect", collect] if collect else []
    done, bundle = run(tmp_path, *args, "-m", "perfdoctor.engine", "--variant", variant, "--tokens", str(tokens), timeout=420)
    own = ENGINE_LINE.search(done.stdout)
    assert done.returncode == 0 and own, (done.stdout[-2000:], done.stderr[-3000:])
    own_ms, own_tps, own_gbps, own_pct = map(float, own.groups())
    m = manifest(bundle)
    metrics = json.loads((bundle / "metrics.json").read_text())["metrics"] if (bundle / "metrics.json").exists() else {}
    got = {k: metric(metrics, k) for k in ("step_latency_ms_p50", "tokens_per_s", "dram_bw_util", "gpu_idle_ratio", "steps_per_s")}
    first = first_finding(bundle)
    record(test=f"acceptance-{variant}-{tokens}", own_ms=own_ms, own_tps=own_tps, own_dram=own_pct / 100, **got, first_finding=first,
           dram_source=(metrics.get("dram_bw_util") or {}).get("source"), **light_numbers(m),
           collectors=",".join(f"{k}:{v['status'][:40]}" for k, v in m["collectors"].items()))
    if collect is None:
        statuses = {k: v["status"] for k, v in m["collectors"].items()}
        assert statuses == {"torch": "ok", "nvml": "ok", "nsys": "ok", "ncu": "ok"}, statuses
    lp = m["light_pass"]
    assert (lp["step_name"], lp["how"]) == ("decode_step", "perfdoctor.region")
    assert lp["warmup"] == lp["steady_start"] and not lp["warmup_explicit"]
    # This branch's own number: the light pass's critical path over the steady steps.
    assert statistics.median(lp["step_latency_ms"]) == pytest.approx(got["step_latency_ms_p50"], rel=1e-9)
    # The engine's ms/token is a mean (seconds / tokens), perfdoctor's p50 a median: the same
    # number on even steps. On uneven ones the report prints the mean step beside the median
    # (reports.summary.uneven_steps_lines), and that is what a user holds against the engine's
    # print: the host-bound eager loop at 256 tokens read p50 9.718 ms, mean 10.393, its own
    # 10.328 on 2026-12-02 (a median 6 % under a mean timer, the mean 0.6 % over it).
    mean_ms = 1e3 / got["steps_per_s"]
    uneven = uneven_steps_lines(diagnose(bundle).analysis)
    assert bool(uneven) == (abs(mean_ms / got["step_latency_ms_p50"] - 1) > UNEVEN)
    if uneven:
        assert mean_ms == pytest.approx(own_ms, rel=0.05), uneven
    else:
        assert got["step_latency_ms_p50"] == pytest.approx(own_ms, rel=0.05)
    assert got["tokens_per_s"] == pytest.approx(own_tps, rel=0.05)
    assert got["dram_bw_util"] == pytest.approx(own_pct / 100, abs=0.03)
    if variant in ("graph", "fused", "megakernel"):
        # Issue 16's bar for the one-launch step is tighter: idle at most 10 %.
        assert got["gpu_idle_ratio"] <= (0.10 if variant == "megakernel" else 0.15)
        # The kernels themselves are what is slow there, not bubbles or launches.
        assert first not in ("memory-bubbles", "launch-rate", "launches-per-step", "short-kernels"), first


def test_acceptance_hf_generate_step_per_token(tmp_path):
    program = Path(__file__).parents[1] / "programs" / "hf_generate.py"
    # The warm-up generate as long as the timed ones: on the H200 a first call that reached
    # context lengths the warm-up had not ran at ~70 ms/token instead of ~13 (new kernels
    # loaded lazily), and the program's own timer would count that as its speed.
    per_run, runs = 32, 3
    done, bundle = run(tmp_path, "--collect", "torch,nvml", "--tokens-per-step", "1", str(program), "--config", "1b",
                       "--tokens", str(per_run), "--warmup-tokens", "32", "--runs", str(runs), timeout=420)
    own = HF_LINE.search(done.stdout)
    assert done.returncode == 0 and own, (done.stdout[-2000:], done.stderr[-3000:])
    own_ms, own_tps = map(float, own.groups())
    tokens = int(done.stdout.split("tokens generated:")[1].split()[0])
    m = manifest(bundle)
    metrics = json.loads((bundle / "metrics.json").read_text())["metrics"] if (bundle / "metrics.json").exists() else {}
    got = {k: metric(metrics, k) for k in ("step_latency_ms_p50", "tokens_per_s", "steps", "gpu_idle_ratio", "dram_bw_util")}
    record(test="acceptance-hf-1b", own_ms=own_ms, own_tps=own_tps, tokens=tokens, **got, **light_numbers(m),
           collectors=",".join(f"{k}:{v['status'][:40]}" for k, v in m["collectors"].items()))
    lp = m["light_pass"]
    assert (lp["step_name"], lp["how"]) == ("LlamaForCausalLM.forward", "module: LlamaForCausalLM")
    assert lp["module"]["span"].startswith("the loop iteration")
    assert lp["steps_seen"] == tokens  # one step per generated token, warm-up generate included
    assert m["collectors"]["torch"]["status"] == "ok"
    # Every timed token by hand: the program's own timer around each generate call against
    # the light pass's steps of that call (its forwards, the prefill's included, in order after
    # the warm-up call's), whatever the steady state.
    own_each = [float(v) for v in re.search(r"ms per run: ([\d. ]+)", done.stdout).group(1).split()]
    series = json.loads((bundle / "raw" / "light.json").read_text())["series"][lp["step_name"]]
    cp = steady.critical_path_ns(series["host_start_ns"], series["gpu_end_ns"]) / 1e6
    warm = tokens - runs * per_run
    light_each = [float(cp[warm + per_run * k : warm + per_run * (k + 1)].sum()) for k in range(runs)]
    record(test="acceptance-hf-1b-runs", own_ms_each=own_each, light_ms_each=light_each, warmup=lp["warmup"])
    assert light_each == pytest.approx(own_each, rel=0.05)
    # The warm-up call (its context lengths load kernels lazily: ~70 ms per token on the H200,
    # then 13-28) is not the steady state: kept, it read 24.8 tokens/s for the program's 44.2.
    assert lp["warmup"] >= warm // 2
    # The rate and the median against the program's own, over the timed calls wholly inside
    # perfdoctor's steady state: this host runs some calls 1.3x slower than others (20 ms per
    # token, then 15), and perfdoctor leaves such a regime out where it comes first, naming it.
    # The program prints a mean (its tokens over its time); the median step sits below a mean
    # that a few slow tokens pull up (p50 0.947 of it on 2026-12-04).
    whole = [k for k in range(runs) if warm + per_run * k >= lp["warmup"]]
    assert whole, lp["steady_reason"]
    own_whole_ms = sum(own_each[k] for k in whole) / (per_run * len(whole))
    assert got["tokens_per_s"] == pytest.approx(1e3 / own_whole_ms, rel=0.05)
    assert 0.9 * own_whole_ms <= got["step_latency_ms_p50"] <= 1.05 * own_whole_ms


def test_acceptance_hf_generate_every_collector_in_three_minutes(tmp_path):
    """Issue 32, item 9: a default run (every collector) of HF generate, 32 tokens, ends in
    under 3 minutes end to end, saying how long at each pass; Nsight Compute replays each
    distinct launch of the step once (its CSV has one kernel per distinct launch at most)."""
    import time

    from perfdoctor.collectors import ncu
    from perfdoctor.pipeline import load_trace

    program = Path(__file__).parents[1] / "programs" / "hf_generate.py"
    start = time.monotonic()
    done, bundle = run(tmp_path, str(program), "--config", "1b", "--tokens", "32", timeout=420)
    wall = time.monotonic() - start
    m = manifest(bundle)
    passes = {p["name"]: p["seconds"] for p in m["passes"]}
    record(test="issue32-hf-default-run", wall_s=round(wall, 1), **{f"{k}_s": v for k, v in passes.items()},
           ncu_replay=m["collectors"]["ncu"].get("replay"), ncu_kernels=m["collectors"]["ncu"].get("kernels"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert {k: v["status"] for k, v in m["collectors"].items()} == {"torch": "ok", "nvml": "ok", "nsys": "ok", "ncu": "ok"}
    assert wall < 180, passes
    # How long each pass took: the light pass counts its steps on the line after (it knows them
    # only once its series is read), the tracing passes on the same line.
    assert re.search(r"^light pass: [\d.]+ s, exit 0$", done.stderr, re.M), done.stderr[-3000:]
    for name in ("torch", "nsys", "ncu"):
        assert re.search(rf"^{name} pass: \d+ steps, [\d.]+ s, exit 0$", done.stderr, re.M), (name, done.stderr[-3000:])
    ks = ncu.kernel_set(load_trace(bundle / "raw" / "torch-trace.json.gz").kernels)
    assert 0 < m["collectors"]["ncu"]["kernels"] <= ks.launches, (m["collectors"]["ncu"], ks.launches)


def _run_real_program(tmp_path: Path, test: str, collect: str, program: str, *args: str) -> tuple[dict, dict, dict, dict]:
    """``perfdoctor run --collect COLLECT`` on tests/programs/real/PROGRAM ARGS: the program's own
    RESULT (the first printed: the light pass's process; its ``ms_per_step``), the bundle's
    manifest and metrics.json, and the metrics the tests compare (recorded under ``test``)."""
    path = Path(__file__).parents[1] / "programs" / "real" / program
    done, bundle = run(tmp_path, "--collect", collect, str(path), *args, timeout=300)
    own = re.search(r"^RESULT (\{.*\})$", done.stdout, re.M)
    assert done.returncode == 0 and own, (done.stdout[-2000:], done.stderr[-3000:])
    result = json.loads(own.group(1))
    own_ms = result["ms_per_step"]
    m = manifest(bundle)
    metrics = json.loads((bundle / "metrics.json").read_text())
    got = {k: metric(metrics["metrics"], k) for k in ("step_latency_ms_p50", "steps_per_s", "steps", "gpu_idle_ratio")}
    record(test=test, own_ms=own_ms, **got, **light_numbers(m), trace_step=metrics["step_name"], trace_how=metrics["steps_how"],
           collectors=",".join(f"{k}:{v['status'][:40]}" for k, v in m["collectors"].items()))
    return result, m, metrics, got


def test_hand_captured_graph_replays_are_the_step(tmp_path):
    """tests/programs/real/graph_infer.py at batch 1 (PyTorch's CUDA Graphs docs, "whole
    network capture"): its loop calls no module, only ``g.replay()``. The light pass's step
    is that graph's replays, one per timed iteration, timed as the loop iteration; its
    numbers are the program's own (its RESULT line printed inside the light pass, the first
    pass); the traced pass finds the same replays in its trace, one per step."""
    iters = 200
    own, m, metrics, got = _run_real_program(tmp_path, "graph-infer-b1", "torch,nvml", "graph_infer.py", "--batch", "1",
                                                "--warmup", "10", "--iters", str(iters))
    lp = m["light_pass"]
    # the program's first replayed graph (the capture replays nothing): not the warm-up forwards
    assert lp["step_name"] == "CUDAGraph.replay #1", (lp["step_name"], lp["how"])
    assert lp["how"].startswith(f"one CUDA/HIP graph replayed {lp['steps_seen']}x, timed as the loop iteration")
    assert iters - 1 <= lp["steps_seen"] <= iters
    assert got["step_latency_ms_p50"] == pytest.approx(own["ms_per_step"], rel=0.05)
    assert 1e3 / got["steps_per_s"] == pytest.approx(own["ms_per_step"], rel=0.05)
    # the trace: the run's step, recorded, each step one replay and the loop's work to the next
    assert m["collectors"]["torch"]["status"] == "ok"
    assert metrics["step_name"] == "CUDAGraph.replay #1"
    # run analyses its trace with the light pass's step as --step (as for every run bundle)
    assert metrics["steps_how"].startswith("ranges named 'CUDAGraph.replay #1'"), metrics["steps_how"]
    assert "timed as the loop iteration" in metrics["steps_how"]
    assert got["steps"] >= 2
    assert all(s["kernels"] > 50 for s in metrics["steps"])  # ResNet-50's captured forward in every step


@pytest.mark.parametrize("capture", ["whole", "partial"])
def test_graphed_training_iterations_are_the_step(tmp_path, capture):
    """tests/programs/real/graphed_train.py (PyTorch's CUDA-graphs docs,
    ``make_graphed_callables``; MLPerf's training loops): forward and backward replay graphs,
    the loss and the optimizer run eager; ``partial`` replays two forward and two backward
    graphs per iteration, which of them decided on the host by ``.item()`` mid-step. One
    step per training iteration, its time the program's own (its RESULT line printed in
    the light pass), never one step per replayed graph."""
    iters, warmup = 100, 10
    own, m, metrics, got = _run_real_program(tmp_path, f"graphed-train-{capture}", "torch", "graphed_train.py", "--capture", capture,
                                             "--warmup", str(warmup), "--iters", str(iters))
    lp = m["light_pass"]
    # one step per iteration (the warm-up's included, less the one the first step starts at)
    assert iters <= lp["steps_seen"] <= iters + warmup, (lp["step_name"], lp["how"], lp["steps_seen"])
    # the median against the program's median, the rate against its mean: partial's
    # iterations take one of two branches, so its median and mean differ (H100: p50 1.789 ms,
    # the program's mean 1.914, its rate 1.92)
    assert got["step_latency_ms_p50"] == pytest.approx(statistics.median(own["ms_each"]), rel=0.05)
    assert 1e3 / got["steps_per_s"] == pytest.approx(own["ms_per_step"], rel=0.05)
    assert got["steps"] >= 2
