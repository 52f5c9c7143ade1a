"""collectors/bundle.py: a run bundle read into one Profile, what it says about itself kept."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from conftest import run_cli_inprocess

DEMO = Path(__file__).resolve().parents[2] / "perfdoctor" / "demo" / "data" / "fused"


def test_the_traces_warnings_and_the_bundles_are_both_kept(tmp_path: Path) -> None:
    """A bundle whose trace has a damaged event (the trace reader's warning) and whose
    light.json has no step series (the bundle reader's): both reach the Profile and the
    terminal. The bundle's warnings used to replace the trace's. And the one damaged event
    is the only one skipped: the per-event fallback used to skip every op with recorded
    shapes too (2,023 of this trace's events), its shapes being fields only JSON text fills."""
    from perfdoctor.pipeline import load_trace

    b = tmp_path / "bundle"
    shutil.copytree(DEMO, b)
    trace = b / "raw" / "torch-trace.json.gz"
    doc = json.loads(gzip.decompress(trace.read_bytes()))
    doc["traceEvents"].append({"ph": "X", "args": [1, 2]})  # not a trace event
    trace.write_bytes(gzip.compress(json.dumps(doc).encode()))
    (b / "raw" / "light.json").write_text("{}")
    warnings = load_trace(b).origin.warnings
    assert len(warnings) == 2, warnings
    assert warnings[0].startswith("skipped 1 events: not a valid trace event")
    assert warnings[1].startswith("light.json: no readable step series for 'decode_step'")
    done = run_cli_inprocess("analyze", b)
    assert done.returncode == 0, done.stderr
    assert "skipped 1 events" in done.stderr and "no readable step series" in done.stderr, done.stderr


def test_a_light_series_says_which_steps_follow_an_end_of_pass_and_an_older_one_reads_as_before() -> None:
    """raw/light.json's per-step ``pass_ended`` (a loop range's steps: a data loader's pass
    ended since the previous step) reaches LightSteps and the rate; a bundle written before
    it has none, and its rate is what it was."""
    from perfdoctor.analysis import steady
    from perfdoctor.bundle.protocol import LightPass, PassResults
    from perfdoctor.collectors.bundle import read_light

    ms = 1_000_000
    series = {"host_start_ns": [0, 10 * ms, 24 * ms, 34 * ms], "gpu_start_ns": None, "gpu_end_ns": [10 * ms, 20 * ms, 34 * ms, 44 * ms]}
    light_pass = LightPass(step_name="Optimizer.step#SGD.step", steady_start=0, step_end_clock="host")
    warnings: list[str] = []
    now = read_light(PassResults(series={"Optimizer.step#SGD.step": {**series, "pass_ended": [False, False, True, False]}}), light_pass, warnings)
    before = read_light(PassResults(series={"Optimizer.step#SGD.step": series}), light_pass, warnings)
    assert not warnings and now is not None and before is not None
    assert now.pass_ended.tolist() == [False, False, True, False] and before.pass_ended is None
    rate = steady.steady_series(now.host_start_ns, now.gpu_end_ns, 0, None, None, now.pass_ended).cadence
    assert rate.steps_per_s == pytest.approx(100.0) and rate.pass_ends == 1  # 3 steps of 10 ms, the 4 ms between two left out
    old = steady.steady_series(before.host_start_ns, before.gpu_end_ns, 0).cadence
    assert old.steps_per_s == pytest.approx(3 / 34e-3) and old.pass_ends == 0
    # a damaged or short flag list is not used
    short = read_light(PassResults(series={"Optimizer.step#SGD.step": {**series, "pass_ended": [False, True]}}), light_pass, warnings)
    assert short is not None and short.pass_ended is None


def test_a_light_series_says_which_steps_compiled_and_an_older_one_reads_as_before() -> None:
    """raw/light.json's per-step ``compiled_ns`` (torch.compile compiled inside the step)
    reaches LightSteps, and the steps that compiled leave the rate and the p50; a bundle
    written before it (or a run where nothing compiled) has none, and reads as before."""
    from perfdoctor.analysis import steady
    from perfdoctor.bundle.protocol import LightPass, PassResults
    from perfdoctor.collectors.bundle import read_light

    ms = 1_000_000
    # 6 batches of 1 ms back to back, the 4th compiled again for 500 ms
    ends = [1, 2, 3, 504, 505, 506]
    series = {"host_start_ns": [(e - 1) * ms if e != 504 else 3 * ms for e in ends], "gpu_start_ns": None, "gpu_end_ns": [e * ms for e in ends]}
    light_pass = LightPass(step_name="enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", steady_start=0, step_end_clock="host")
    name = light_pass.step_name
    warnings: list[str] = []
    now = read_light(PassResults(series={name: {**series, "compiled_ns": [0, 0, 0, 499 * ms, 0, 0]}}), light_pass, warnings)
    before = read_light(PassResults(series={name: series}), light_pass, warnings)
    assert not warnings and now is not None and before is not None
    assert now.compiled_ns.tolist() == [0, 0, 0, 499 * ms, 0, 0] and before.compiled_ns is None
    s = steady.steady_series(now.host_start_ns, now.gpu_end_ns, 0, None, None, None, now.compiled_ns)
    assert s.cadence.steps_per_s == pytest.approx(1000.0) and s.cadence.compiles == 1 and s.cadence.compiled_ms == pytest.approx(501)
    assert s.critical_path_ms.tolist() == [1, 1, 1, 1, 1]  # the 501 ms step left out of the p50's steps
    old = steady.steady_series(before.host_start_ns, before.gpu_end_ns, 0)
    assert old.cadence.steps_per_s == pytest.approx(5 / 505e-3) and old.cadence.compiles == 0 and old.critical_path_ms.size == 6
    # a damaged or short list is not used
    short = read_light(PassResults(series={name: {**series, "compiled_ns": [0, 1]}}), light_pass, warnings)
    assert short is not None and short.compiled_ns is None
