"""Run bundles: the light pass as the source of truth for time, the tracer-corrected idle,
bandwidth sources, and the NaN policy.

Bundles here are CRAFTED around a real H200 trace (the graph decode fixture): the trace is
real, the light-pass series is made up with a known critical path, so every expected value
is computed independently below (numpy on the made-up series, plain loops on the raw JSON).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES, run_cli_inprocess
from perfdoctor.pipeline import load_trace
from perfdoctor.reports.common import finding_reason
from perfdoctor.reports.estimates import formula
from perfdoctor.analysis.metrics import Metric, analyze
from perfdoctor.profile import frame, SAMPLE_COLUMNS
from perfdoctor.rules.engine import evaluate, load_rules
from tests.analysis.test_steady import _raw_graph_steps

GRAPH = FIXTURES / "h200-decode-graph-10steps.kineto.json.gz"
LLAMA = FIXTURES / "h200-llama1b-eager-5steps.kineto.json.gz"
DECLARED_BYTES = 2538737664
PEAK_GBPS = 4800.0
# The made-up light pass: one cold step, then ten steps of ~3 ms (median exactly 3.0).
LIGHT_CP_MS = [25.0, 3.0, 3.1, 2.9, 3.0, 3.05, 2.95, 3.0, 3.0, 3.1, 2.9]
PAUSE_NS = 20_000  # the host starts the next step 20 µs after the previous one ended


def sync_series(cp_ms: list[float], pause_ns: int = PAUSE_NS) -> tuple[list[int], list[int], list[int]]:
    """A synchronising loop: host start, GPU start (50 µs later), GPU end = start + cp."""
    h, gs, ge, t = [], [], [], 5_000_000_000
    for ms in cp_ms:
        h.append(t)
        gs.append(t + 50_000)
        ge.append(t + round(ms * 1e6))
        t = ge[-1] + pause_ns
    return h, gs, ge


def strict_json(text: str) -> object:
    """json.loads that refuses NaN and Infinity (Python's default accepts them)."""

    def refuse(name: str) -> None:
        raise ValueError(f"non-finite number {name} in JSON")

    return json.loads(text, parse_constant=refuse)


def make_bundle(
    dst: Path,
    *,
    trace: Path = GRAPH,
    light: dict | None = None,
    light_pass: dict | None = None,
    gpu: dict | None = None,
) -> Path:
    raw = dst / "raw"
    raw.mkdir(parents=True)
    (raw / "torch-trace.json.gz").write_bytes(trace.read_bytes())
    if light is not None:
        (raw / "light.json").write_text(json.dumps(light))
    manifest = {
        "schema": "perfdoctor.run/1",
        "status": "finished",
        "exit_code": 0,
        "step": "decode_step",
        "gpu": gpu if gpu is not None else {"name": "NVIDIA H200", "peak_dram_bw_gbps": PEAK_GBPS},
        "collectors": {"torch": {"status": "ok"}},
    }
    if light_pass is not None:
        manifest["light_pass"] = light_pass
    (dst / "manifest.json").write_text(json.dumps(manifest))
    return dst


def new_format(cp_ms: list[float] = LIGHT_CP_MS, **light_pass: object) -> tuple[dict, dict]:
    h, gs, ge = sync_series(cp_ms)
    light = {"pass": "light", "series": {"decode_step": {"host_start_ns": h, "gpu_start_ns": gs, "gpu_end_ns": ge}}, "step_end_clock": "cuda-event"}
    return light, {"step_name": "decode_step", **light_pass}


def test_light_pass_is_the_source_of_time_and_idle_is_corrected_for_the_tracer(tmp_path: Path) -> None:
    light, lp = new_format(steady_start=1, steady_reason="left out the first step as warm-up")
    p = load_trace(make_bundle(tmp_path / "b", light=light, light_pass=lp))
    assert p.light is not None and p.light.steady_start == 1 and p.light.count == len(LIGHT_CP_MS)
    a = analyze(p)
    steady_cp = np.asarray(LIGHT_CP_MS[1:])
    light_p50 = float(np.median(steady_cp))
    assert light_p50 == 3.0
    for q in (50, 90, 99):
        m = a.metrics[f"step_latency_ms_p{q}"]
        assert m.source == "light" and m.value == pytest.approx(float(np.percentile(steady_cp, q)), rel=1e-9)
    # the trace's own critical path, by plain loops over the raw JSON
    host, busy, end = _raw_graph_steps()
    traced_cp = [end[0] - host[0]] + [end[k] - max(host[k], end[k - 1]) for k in range(1, len(host))]
    traced_p50 = float(np.median(traced_cp)) / 1e6
    assert a.value("traced_step_latency_ms_p50") == pytest.approx(traced_p50, rel=1e-12)
    assert a.value("profiler_overhead_ratio") == pytest.approx(traced_p50 / light_p50, rel=1e-9)
    # corrected idle: exactly 1 - median GPU busy per traced step / light p50
    idle = a.metrics["gpu_idle_ratio"]
    assert idle.source == "kineto+light"
    assert idle.value == pytest.approx(1 - float(np.median(busy)) / 1e6 / light_p50, rel=1e-12)
    assert traced_p50 / light_p50 > 1.2 and "corrected for the tracer" in idle.note
    # issue 28: launches per second of the untraced run (per step × the light pass's steps/s)
    assert "untraced steps/s" in a.metrics["launch_rate_per_s"].note
    # cadence over the steady steps: a synchronising loop with 20 µs pauses (< a median step)
    h, _, ge = sync_series(LIGHT_CP_MS)
    want_sps = (len(ge) - 2) / ((ge[-1] - ge[1]) / 1e9)
    assert a.metrics["steps_per_s"].source == "light"
    assert a.value("steps_per_s") == pytest.approx(want_sps, rel=1e-12)
    assert a.value("tokens_per_s") == pytest.approx(want_sps * 1, rel=1e-12)  # the fixture declares 1 token/step
    assert a.value("host_lead_ms_p50") == 0.0  # the host waited for every step
    assert "light pass, no tracer, steady state: 10 steps after 1 warm-up" in a.time_source


def test_light_pass_with_host_running_ahead_gives_completion_intervals(tmp_path: Path) -> None:
    # Graph replays issued back to back: the host issues step k 1 ms after step k-1, the GPU
    # takes 2 ms each, so completions are 2 ms apart while host start -> GPU end grows.
    n = 12
    h = [10_000_000_000 + k * 1_000_000 for k in range(n)]
    ge = [10_000_000_000 + (k + 1) * 2_000_000 for k in range(n)]
    light = {"series": {"decode_step": {"host_start_ns": h, "gpu_start_ns": None, "gpu_end_ns": ge}}, "step_end_clock": "cuda-event"}
    a = analyze(load_trace(make_bundle(tmp_path / "b", light=light, light_pass={"step_name": "decode_step", "steady_start": 0})))
    assert a.value("step_latency_ms_p50") == pytest.approx(2.0)  # not the queueing time
    lead = [max(0, ge[k - 1] - h[k]) / 1e6 for k in range(1, n)]
    assert a.value("host_lead_ms_p50") == pytest.approx(float(np.median(lead)))
    assert a.value("steps_per_s") == pytest.approx(500.0)


def test_old_bundle_format_is_analysed_with_the_new_definitions(tmp_path: Path) -> None:
    # perfdoctor 0.1: raw/light.json "spans_ns" [[host_start, gpu_end], ...]; the manifest
    # names the step but has no steady_start: it is computed from the critical path.
    h, _, ge = sync_series(LIGHT_CP_MS)
    light = {"pass": "light", "spans_ns": {"decode_step": [[a, b] for a, b in zip(h, ge)]}, "step_end_clock": "cuda-event"}
    lp = {"step_name": "decode_step", "step_latency_ms": LIGHT_CP_MS, "warmup": 0}
    a = analyze(load_trace(make_bundle(tmp_path / "old", light=light, light_pass=lp)))
    assert a.light is not None and a.light.gpu_start_ns is None
    # by the rule: the second half's median is 3.0; 25 ms > 1.25 x 3.0, then 3 steady steps
    assert a.light.steady_start == 1 and "warm-up" in a.light.steady_reason
    assert a.value("step_latency_ms_p50") == pytest.approx(3.0)
    assert a.metrics["gpu_idle_ratio"].source == "kineto+light"


def test_explicit_warmup_in_the_manifest_is_used(tmp_path: Path) -> None:
    light, lp = new_format(warmup=3, warmup_explicit=True)
    a = analyze(load_trace(make_bundle(tmp_path / "w", light=light, light_pass=lp)))
    assert a.light.steady_start == 3 and "--warmup 3" in a.light.steady_reason
    assert a.value("step_latency_ms_p50") == pytest.approx(float(np.median(LIGHT_CP_MS[3:])))


def test_bandwidth_model_headline_and_a_disagreeing_counter_kept(tmp_path: Path) -> None:
    counters = {
        "dram_bw_util": {"value": 0.30, "source": "nvml-gpm", "samples": 12, "dropped_nan": 0, "start_ns": 1, "end_ns": 2},
        "sm_occupancy": {"value": None, "source": "nvml-gpm", "samples": 79, "dropped_nan": 79},
    }
    light, lp = new_format(steady_start=1, counters=counters)
    a = analyze(load_trace(make_bundle(tmp_path / "bw", light=light, light_pass=lp)))
    m = a.metrics["dram_bw_util"]
    model = DECLARED_BYTES / 3.0e-3 / (PEAK_GBPS * 1e9)  # bytes / light p50 / peak
    assert m.source == "model" and m.value == pytest.approx(model, rel=1e-12)
    assert abs(model - 0.30) > 0.05
    assert m.alternatives == [{"value": 0.30, "source": "nvml-gpm"}]
    bubbles = a.metrics["memory_bubble_ratio"]
    assert (bubbles.value, bubbles.source) == (pytest.approx(0.70), "nvml-gpm")  # the counter, never the model
    occ = a.metrics["sm_occupancy"]
    assert occ.value is None and "all 79 nvml-gpm samples returned NaN" in occ.reason


def test_counter_within_five_points_of_the_model_is_not_an_alternative(tmp_path: Path) -> None:
    model = DECLARED_BYTES / 3.0e-3 / (PEAK_GBPS * 1e9)
    counters = {"dram_bw_util": {"value": model + 0.03, "source": "nvml-gpm", "samples": 12, "dropped_nan": 0}}
    light, lp = new_format(steady_start=1, counters=counters)
    a = analyze(load_trace(make_bundle(tmp_path / "bw", light=light, light_pass=lp)))
    assert a.metrics["dram_bw_util"].alternatives is None
    assert a.value("memory_bubble_ratio") == pytest.approx(1 - model - 0.03)


def test_metrics_json_and_report_of_a_bundle_have_no_nan(tmp_path: Path) -> None:
    counters = {"dram_bw_util": {"value": None, "source": "nvml-gpm", "samples": 79, "dropped_nan": 79}}
    light, lp = new_format(steady_start=1, counters=counters)
    bundle = make_bundle(tmp_path / "b", light=light, light_pass=lp)
    out = tmp_path / "metrics.json"
    r = run_cli_inprocess("analyze", bundle, "--json", out)
    assert r.returncode == 0, r.stderr
    doc = strict_json(out.read_text())
    assert doc["schema"] == "perfdoctor.metrics/2"
    for key, entry in doc["metrics"].items():
        assert entry["value"] is None or math.isfinite(entry["value"]), key
    assert not re.search(r"\b(nan|inf|infinity)\b", r.stdout, re.IGNORECASE)
    assert "light pass, no tracer" in r.stdout


def _nan_samples(profile, metric: str, n: int) -> None:
    lo, hi = int(profile.activities["start_ns"].min()), int(profile.activities["end_ns"].max())
    t = np.linspace(lo, hi, n).astype(np.int64)
    profile.samples = frame(SAMPLE_COLUMNS, {"time_ns": t, "metric": [metric] * n, "value": np.full(n, np.nan), "source": ["nvml-gpm"] * n})


def test_a_nan_counter_series_is_absent_with_a_reason_and_its_rule_not_evaluated() -> None:
    p = load_trace(LLAMA)  # declares no bytes: the counter is the only bandwidth source
    _nan_samples(p, "dram_bw_util", 79)
    a = analyze(p, step="decode_step")
    m = a.metrics["dram_bw_util"]
    assert m.value is None and "all 79 nvml-gpm dram_bw_util samples returned NaN" in m.reason
    assert a.metrics["memory_bubble_ratio"].note.startswith("lower bound")
    findings = {f.rule_id: f for f in evaluate(load_rules(()), a)}
    # No rule is evaluated on the NaN counter: a rule reading dram_bw_util is not evaluated,
    # and dram-bandwidth judges the memory-bound kernel classes (issue 28: bytes from this
    # trace's recorded shapes against the card's peak), which the counter does not enter.
    on_bw = [f for f in findings.values() if f.metric is None and "dram_bw_util" in (finding_reason(f) or "")]
    assert all(f.status == "not_evaluated" for f in on_bw)
    bw = findings["dram-bandwidth"]
    assert bw.metric == "memory_bound_bw_util" and bw.value is not None and np.isfinite(bw.value)
    assert a.bounds.memory_bound_bw_util()[0] == bw.value


def test_the_rule_engine_never_compares_a_nan() -> None:
    a = analyze(load_trace(LLAMA), step="decode_step")
    before = {f.rule_id: f.status for f in evaluate(load_rules(()), a)}
    for key in ("gpu_idle_ratio", "memory_bubble_ratio", "launches_per_step", "short_kernel_ratio"):
        a.metrics[key] = Metric(float("nan"), a.metrics[key].unit, "crafted")
    after = {f.rule_id: f for f in evaluate(load_rules(()), a)}
    changed = [rid for rid, f in after.items() if f.status != before[rid]]
    assert changed, "crafting NaN into the rules' metrics must change some finding"
    assert all(after[rid].status == "not_evaluated" for rid in changed)


def test_analyze_prints_one_gap_table() -> None:
    r = run_cli_inprocess("analyze", LLAMA, "--step", "decode_step")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    title = "Largest gaps between GPU activities inside steps"
    tables = [line for line in out.splitlines() if title in line and ": see " not in line]
    assert len(tables) == 1  # other mentions only point to it ("...: see memory-bubbles above")
    assert "Largest GPU idle gaps" not in out
    assert "step time: trace" in out


def test_bandwidth_estimate_uses_the_declared_bytes_when_the_model_is_the_headline() -> None:
    from perfdoctor.rules.estimates import bandwidth_gap

    a = analyze(load_trace(FIXTURES / "h200-decode-graph-10steps.nsys.sqlite.gz"))
    assert a.metrics["dram_bw_util"].source == "model"
    peak = a.value("peak_dram_bw_gbps")
    floor_ns = DECLARED_BYTES / (peak * 1e9 * 0.85) * 1e9  # the step's bytes at 85 % of peak
    busy = a.timeline.with_gpu["busy_ns"].to_numpy(dtype=float)
    want = float(np.median(np.clip(busy - floor_ns, 0, None))) / 1e6
    est = bandwidth_gap(a, 0.85, {}, {})
    assert est.ms_per_step == pytest.approx(want, rel=1e-12) and want > 0
    assert "declared bytes" in formula(est)


def test_a_bundle_with_only_the_light_pass_still_gives_step_time(tmp_path: Path) -> None:
    light, lp = new_format(steady_start=1)
    b = make_bundle(tmp_path / "b", light=light, light_pass=lp)
    (b / "raw" / "torch-trace.json.gz").unlink()  # the traced pass failed
    a = analyze(load_trace(b))
    assert a.value("step_latency_ms_p50") == pytest.approx(3.0) and a.metrics["step_latency_ms_p50"].source == "light"
    assert a.value("traced_step_latency_ms_p50") is None and a.value("gpu_idle_ratio") is None
    assert a.metrics["profiler_overhead_ratio"].value is None and a.metrics["profiler_overhead_ratio"].reason


def test_analysis_json_is_strict_even_when_the_inputs_carry_nan(tmp_path: Path) -> None:
    # The runner writes metrics.json with json.dumps (which would write NaN): the analysis's
    # own JSON must already be free of it, whatever NaN the manifest and counters carried.
    counters = {"dram_bw_util": {"value": float("nan"), "source": "nvml-gpm", "samples": 79, "dropped_nan": 79}}
    light, lp = new_format(steady_start=1, counters=counters)
    gpu = {"name": "NVIDIA H200", "peak_dram_bw_gbps": PEAK_GBPS, "power_limit_w": float("nan")}
    a = analyze(load_trace(make_bundle(tmp_path / "b", light=light, light_pass=lp, gpu=gpu)))
    text = json.dumps(a.to_json(), allow_nan=False)  # raises on NaN / Infinity
    doc = strict_json(text)
    assert doc["device"]["power_limit_w"] is None
    assert doc["light"] == {"step_name": "decode_step", "steps": len(LIGHT_CP_MS), "steady_start": 1,
                            "steady_reason": "the run left out the first 1 steps as warm-up", "clock": "cuda-event"}
    assert doc["metrics"]["memory_bubble_ratio"]["note"].startswith("lower bound")  # the NaN counter was not used


def test_reports_say_how_steps_were_found_and_where_step_time_comes_from(tmp_path: Path) -> None:
    from perfdoctor.reports import html, markdown

    counters = {"dram_bw_util": {"value": 0.30, "source": "nvml-gpm", "samples": 12, "dropped_nan": 0}}
    light, lp = new_format(steady_start=1, counters=counters)
    a = analyze(load_trace(make_bundle(tmp_path / "b", light=light, light_pass=lp)))
    findings = evaluate(load_rules(()), a)
    for text in (markdown.render(findings, a), html.render(findings, a)):
        assert "light pass, no tracer, steady state: 10 steps after 1 warm-up" in text
        assert "recorded by the run" in text
        assert "nvml-gpm says 30.0" in text  # the disagreeing bandwidth source is shown


def test_explicit_warmup_wins_over_the_runners_steady_start(tmp_path: Path) -> None:
    light, lp = new_format(steady_start=1, warmup=4, warmup_explicit=True)
    a = analyze(load_trace(make_bundle(tmp_path / "w", light=light, light_pass=lp)))
    assert a.light.steady_start == 4
    assert a.value("step_latency_ms_p50") == pytest.approx(float(np.median(LIGHT_CP_MS[4:])))


def test_tokens_per_step_given_to_the_run_reach_tokens_per_s(tmp_path: Path) -> None:
    light, lp = new_format(steady_start=1, declared={"tokens": 4, "source": "--tokens-per-step"}, how="ranges named 'decode_step'")
    a = analyze(load_trace(make_bundle(tmp_path / "t", light=light, light_pass=lp)))
    assert a.value("tokens_per_s") == pytest.approx(4 * a.value("steps_per_s"))  # the trace declares 1
    assert "ranges named 'decode_step'" in a.steps.how and a.steps.how.startswith("recorded by the run")


def test_the_runners_reason_for_an_absent_counter_is_kept(tmp_path: Path) -> None:
    why = "the steady steps span 3.0 ms, shorter than one GPM interval: no sample lies inside them"
    counters = {"sm_occupancy": {"value": None, "reason": why, "samples": 0, "dropped_nan": 0}}
    light, lp = new_format(steady_start=1, counters=counters)
    a = analyze(load_trace(make_bundle(tmp_path / "r", light=light, light_pass=lp)))
    assert why in a.metrics["sm_occupancy"].reason


def test_a_series_cut_short_by_a_crash_keeps_its_complete_steps(tmp_path: Path) -> None:
    h, gs, ge = sync_series(LIGHT_CP_MS)
    ge[-2:] = [None, None]  # the program died: its last two events never completed
    light = {"series": {"decode_step": {"host_start_ns": h, "gpu_start_ns": gs, "gpu_end_ns": ge}}, "step_end_clock": "cuda-event"}
    p = load_trace(make_bundle(tmp_path / "c", light=light, light_pass={"step_name": "decode_step", "steady_start": 1}))
    assert p.light.count == len(LIGHT_CP_MS) - 2
    assert any("complete steps" in w for w in p.origin.warnings)
    a = analyze(p)
    assert a.value("step_latency_ms_p50") == pytest.approx(float(np.median(LIGHT_CP_MS[1:-2])))


def test_traced_pass_nvml_samples_never_stand_in_for_the_steady_counter(tmp_path: Path) -> None:
    """On the H200 the graph engine's traced window (10 steps, ~20 ms) held GPM samples that
    each covered the 100 ms before them: averaged "inside the span" they read 0.0004 % DRAM
    against 22-27 % over the steps. In a run bundle only the light pass's steady-state
    average is the NVML counter; without it the counter is absent, the model is the value."""
    light, lp = new_format(steady_start=1)  # no counters: the steady span was too short
    p = load_trace(make_bundle(tmp_path / "b", light=light, light_pass=lp))
    lo, hi = int(p.activities["start_ns"].min()), int(p.activities["end_ns"].max())
    n = 20
    p.samples = frame(SAMPLE_COLUMNS, {"time_ns": np.linspace(lo, hi, n).astype(np.int64), "metric": ["dram_bw_util"] * n,
                                       "value": np.full(n, 4e-6), "source": ["nvml-gpm"] * n})
    a = analyze(p)
    dram = a.metrics["dram_bw_util"]
    assert dram.source == "model" and not dram.alternatives  # the stray samples are not a second source
    assert a.metrics["memory_bubble_ratio"].note.startswith("lower bound")  # no counter: the idle bound
    # The same samples on a trace alone (no light pass) are the counter, inside the steps only.
    q = load_trace(GRAPH)
    q.samples = p.samples
    assert analyze(q).metrics["dram_bw_util"].source == "nvml-gpm"


def test_idle_estimates_never_exceed_the_untraced_idle_time(tmp_path: Path) -> None:
    """The eager fixture's traced steps are ~38 ms, almost all of it gaps the tracer
    stretched; with a light pass saying a step takes 12 ms, fixing the bubbles cannot win
    back more than 12 ms less the GPU busy time (kernel durations are not stretched)."""
    eager = FIXTURES / "h200-decode-eager-5steps.kineto.json.gz"
    light, lp = new_format(cp_ms=[40.0] + [12.0] * 10, steady_start=1)
    a = analyze(load_trace(make_bundle(tmp_path / "e", trace=eager, light=light, light_pass=lp)))
    busy_ms = float(np.median(a.timeline.with_gpu["busy_ns"].to_numpy(dtype=np.float64))) / 1e6
    cap = 12.0 - busy_ms
    assert 0 < cap < 12.0
    bubbles = {f.rule_id: f for f in evaluate(load_rules(()), a)}["memory-bubbles"]
    assert bubbles.recovered_ms == pytest.approx(cap)
    assert "capped at the untraced idle time" in formula(bubbles.estimate)
    # Without a light pass the traced gaps stand (their sum is at most the traced idle).
    b = analyze(load_trace(eager), step="decode_step")
    traced = {f.rule_id: f for f in evaluate(load_rules(()), b)}["memory-bubbles"].recovered_ms
    assert traced > cap and traced <= float(np.median(b.timeline.with_gpu["idle_ns"])) / 1e6


def test_a_modules_eager_calls_join_its_compiled_ones_unless_they_wrap_them():
    """transformers' generate: compiled decode calls and an eager prefill of the same forward
    are one series in host order; an eager call with a compiled call inside (``model(x)``
    over a compiled ``model.forward``) is its wrapper and is left out."""
    from perfdoctor.record.light import with_eager_calls

    compiled = {"host_start_ns": [110, 120, 130, 210, 220], "gpu_start_ns": [111, 121, 131, 211, 221],
                "gpu_end_ns": [118, 128, 138, 218, 228]}
    eager = {"host_start_ns": [100, 200, 300], "gpu_start_ns": [101, 201, 301], "gpu_end_ns": [109, 209, 340]}
    eager_wrapping = {"host_start_ns": [219], "gpu_start_ns": [219], "gpu_end_ns": [229]}  # around the call at 220
    name = "torch.compile: Net.forward"

    def join(calls, eager_calls):
        return with_eager_calls(name, calls, {"0": {"Net.forward": eager_calls}} if eager_calls else {})

    merged, how = join(compiled, {k: eager[k] + eager_wrapping[k] for k in eager})
    assert how == ", with its 3 eager calls (a prefill: the same forward, not compiled)"
    assert merged["host_start_ns"] == [100, 110, 120, 130, 200, 210, 220, 300]
    assert merged["gpu_end_ns"] == [109, 118, 128, 138, 209, 218, 228, 340]
    assert merged["gpu_start_ns"] == [101, 111, 121, 131, 201, 211, 221, 301]
    assert join(compiled, None) == (compiled, "")
    assert join(compiled, eager_wrapping) == (compiled, "")
    assert with_eager_calls("decode_one_token", compiled, {"0": {"decode_one_token": eager}}) == (compiled, "")
    # a CPU run: no GPU starts on either side
    cpu = {k: (None if k == "gpu_start_ns" else v) for k, v in compiled.items()}
    merged, how = join(cpu, {k: (None if k == "gpu_start_ns" else v) for k, v in eager.items()})
    assert "3 eager calls" in how and merged["gpu_start_ns"] is None and len(merged["host_start_ns"]) == 8


def test_a_model_called_twice_back_to_back_per_iteration_is_one_module_step_per_pair():
    """Classifier-free guidance as two UNet calls per denoising step: the light pass's
    module step is each pair (its first call's start, its last call's end), named as the
    class's calls are, and the module entry tells the traced passes the groups to mark."""
    from perfdoctor.record.light import module_step

    us = 1_000
    starts, ends, t = [], [], 0
    for i in range(16):
        t += 10 * us if i % 2 else 300 * us  # back to back within a pair, the scheduler between pairs
        starts.append(t)
        t += 2_000 * us
        ends.append(t)
    calls = {"host_start_ns": starts, "gpu_start_ns": None, "gpu_end_ns": ends, "tid": [1] * 16, "host_end_ns": ends}
    name, series, module, how, joined, moded = module_step({"0": {"UNet.forward": calls}}, {"UNet.forward": "diffusers.UNet"})
    assert name == "UNet.forward" and joined is None and moded is None
    assert series["host_start_ns"] == starts[::2] and series["gpu_end_ns"] == ends[1::2]
    assert module["calls_per_step"] == 2 and module["groups"] == [[2, 8]] and module["class"] == "diffusers.UNet"
    assert how.startswith("module: UNet, 2 calls per step") and "group of 2 calls" in module["span"]
    # one call per iteration: the calls, as before, and no groups in the entry
    one = {k: (v[::2] if isinstance(v, list) else v) for k, v in calls.items()}
    name, series, module, how, _, _ = module_step({"0": {"UNet.forward": one}}, {})
    assert series["host_start_ns"] == starts[::2] and series["gpu_end_ns"] == ends[::2]
    assert "calls_per_step" not in module and how == "module: UNet"



def test_a_loop_fed_in_bursts_is_one_module_step_per_call_where_its_thread_waited_between_bursts():
    """A loop fed by a process pool in bursts of two: two batches back to back, then a wait
    in the pool's next() for the next burst. The gaps look like classifier-free guidance's,
    but the long ones are the thread's waits for the pool (the light pass's waits), no work
    of the loop's: one step per call. The same gaps with the loop's own work in them (no
    waits, or another thread's) stay pairs."""
    from perfdoctor.record.light import module_step

    us = 1_000
    starts, ends, t, waits = [], [], 0, {"tid": [], "start_ns": [], "end_ns": [], "worked": []}
    for i in range(16):
        if i % 2 == 0 and i:  # the next burst: 20 us of the loop's Python, a 3 ms wait, 20 us more
            waits["tid"].append(1), waits["start_ns"].append(t + 20 * us), waits["end_ns"].append(t + 3_020 * us), waits["worked"].append(1)
            t += 3_040 * us
        else:
            t += 20 * us
        starts.append(t)
        t += 1_000 * us
        ends.append(t)
    calls = {"host_start_ns": starts, "gpu_start_ns": None, "gpu_end_ns": ends, "tid": [1] * 16, "host_end_ns": ends}
    name, series, module, how, _, _ = module_step({"0": {"TextClassificationModel.forward": calls}}, {}, waits)
    assert series["host_start_ns"] == starts and "calls_per_step" not in module and how == "module: TextClassificationModel"
    assert module_step({"0": {"TextClassificationModel.forward": calls}}, {}, None).entry["calls_per_step"] == 2
    other = {**waits, "tid": [2] * len(waits["tid"])}
    assert module_step({"0": {"TextClassificationModel.forward": calls}}, {}, other).entry["calls_per_step"] == 2


def test_a_model_called_from_two_places_in_its_loop_is_one_module_step_per_iteration():
    """A continuous-batching loop: per iteration the prefills of the requests it admitted
    (site 1: 2 in the first iteration, then one every other), then one decode (site 2), 0.3
    ms of loop work between any two calls (no back-to-back groups). The light pass's module
    step is each iteration: from its first call's start to its decode's end."""
    from perfdoctor.record.light import module_step

    us = 1_000
    sites = [1, 1, 2] + [2, 1, 2] * 5 + [2]
    starts = [k * 1_000 * us for k in range(len(sites))]
    ends = [h + 700 * us for h in starts]
    calls = {"host_start_ns": starts, "gpu_start_ns": None, "gpu_end_ns": ends, "tid": [1] * len(sites), "host_end_ns": ends,
             "site": sites}
    name, series, module, how, joined, _ = module_step({"0": {"GPT.forward": calls}}, {})
    assert name == "GPT.forward" and joined is None
    # groups [1, 1, 2], [2], [1, 2], ..., [2]: 12 iterations for 19 calls
    assert series["host_start_ns"] == [starts[i] for i in [0, 3, 4, 6, 7, 9, 10, 12, 13, 15, 16, 18]]
    assert series["gpu_end_ns"] == [ends[i] for i in [2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18]]
    assert module["groups"] == [[3, 1]] + [[1, 1], [2, 1]] * 5 + [[1, 1]]
    assert "calls_per_step" not in module and "12 for its 19 calls" in how
    # one place only: a step per call, as before
    one = {k: v for k, v in calls.items() if k != "site"}
    assert module_step({"0": {"GPT.forward": one}}, {})[3] == "module: GPT"


def test_a_model_trained_and_evaluated_under_no_grad_is_one_module_step_per_training_call():
    """word_language_model's shape: 4 training calls (grad enabled) per epoch, each 1 ms
    apart, then an evaluation of 2 calls under no_grad, twice. The steps are the training
    calls, each to the next call of either mode; epoch 2's first says a pass ended before
    it, and the traced passes mark the grad-enabled calls."""
    from perfdoctor.bundle.protocol import PassResults
    from perfdoctor.record.light import find_step, module_step
    from perfdoctor.record.options import RunOptions

    ms = 1_000_000
    grad = ([True] * 4 + [False] * 2) * 2
    starts = [k * ms for k in range(len(grad))]
    ends = [h + ms // 2 for h in starts]
    calls = {"host_start_ns": starts, "gpu_start_ns": None, "gpu_end_ns": ends, "tid": [1] * len(grad), "host_end_ns": ends,
             "grad": grad, "site": [1, 1, 1, 1, 2, 2] * 2}
    name, series, module, how, joined, moded = module_step({"0": {"RNNModel.forward": calls}}, {})
    assert name == "RNNModel.forward" and module["grad"] is True and "groups" not in module
    assert moded == ([0, 1, 2, 3, 6, 7, 8, 9], [False] * 4 + [True] + [False] * 3)
    assert how == "module: RNNModel, its 8 calls with grad enabled of its 12: the other 4 end a pass (1 run between them)"
    results = PassResults(series={}, modules={"0": {"RNNModel.forward": calls}}, module_classes={})
    name, _, _, iteration = find_step(results, RunOptions(target=["x.py"]))
    timed = results.series[name]
    assert iteration and timed["host_start_ns"] == [starts[i] for i in moded[0]]
    # each to the next call: the last before the evaluation to the evaluation's first call
    assert timed["gpu_end_ns"] == [starts[i] for i in [1, 2, 3, 4, 7, 8, 9, 10]]
    assert timed["pass_ended"] == moded[1]

def test_the_light_pass_notes_each_dynamo_compilation_once_however_often_installed() -> None:
    """The bootstrap's Compiles: dynamo's compile-time callbacks (torch 2.13's
    ``torch._dynamo.callback``), installed at every torch.compile call but registered once,
    note one start and end per compilation: the first call, a new shape's, none for a call
    that compiles nothing."""
    torch = pytest.importorskip("torch")
    from types import SimpleNamespace

    from torch._dynamo.callback import callback_handler

    from perfdoctor.record.bootstrap.steps import Compiles

    compiles = Compiles(SimpleNamespace(disabled=False))
    compiles.install()
    compiles.install()
    try:
        assert callback_handler.start_callbacks.count(compiles.started) == 1
        f = torch.compile(lambda x: x * 2 + 1, backend="eager")
        f(torch.ones(3))
        f(torch.ones(3))
        assert len(compiles.series()["start_ns"]) == 1
        f(torch.ones(5))  # a new shape: dynamo compiles again
        s = compiles.series()
        assert len(s["start_ns"]) == 2 and all(a <= b for a, b in zip(s["start_ns"], s["end_ns"]))
    finally:
        callback_handler.remove_start_callback(compiles.started)
        callback_handler.remove_end_callback(compiles.ended)
        torch._dynamo.reset()
