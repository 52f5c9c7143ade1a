"""A training loop without a readable trace is recognised from its light pass, and a rule
declared for a workload is not judged where the workload is unknown.

H200, 2026-12-02: the training loop train_r50_w4_pin (tests/programs/real/train_loop.py,
DataLoader with 4 workers, pinned memory) had its torch pass killed, so its trace is damaged;
the workload was unknown and p99-latency failed as an error, its first finding, against the
10 ms decode target. Its bundle is rebuilt here from the run's own light-pass step name and
latencies (its manifest.json), with a damaged trace.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from perfdoctor.pipeline import diagnose
from perfdoctor.reports.common import finding_reason
from perfdoctor.rules.engine import load_rules

# --- a training loop without a readable trace (train_r50_w4_pin, H200 2026-12-02) ----------

# The run's manifest (light_pass): the step perfdoctor run chose and its steady latencies, ms.
TRAIN_STEP = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"
TRAIN_MS = [50.657715, 67.201172, 55.009277, 46.999512, 48.021972, 46.809571, 46.801757, 54.441895, 46.84082, 46.736328,
            56.561036, 46.632324, 187.30664, 62.631348, 51.292481, 77.894531, 151.461914, 48.229004, 76.670898,
            85.233399, 145.946777, 49.934082, 62.36377, 92.989746]


def _bundle(dst: Path, step: str, **light: object) -> Path:
    """A bundle whose torch pass died (a truncated gzip) and whose light pass timed ``step``
    (``light``: more of raw/light.json: other series, the model calls' grad modes)."""
    raw = dst / "raw"
    raw.mkdir(parents=True)
    (raw / "torch-trace.json.gz").write_bytes(gzip.compress(b'{"traceEvents": [' + b"{}, " * 2000)[:200])
    h, ge, t = [], [], 5_000_000_000
    for ms in TRAIN_MS:
        h.append(t)
        ge.append(t + round(ms * 1e6))
        t = ge[-1] + 20_000
    series = {step: {"host_start_ns": h, "gpu_start_ns": None, "gpu_end_ns": ge}, **light.pop("series", {})}
    (raw / "light.json").write_text(json.dumps({"series": series, "step_end_clock": "cuda-event", **light}))
    manifest = {"schema": "perfdoctor.run/1", "status": "finished", "exit_code": 0, "step": step,
                "gpu": {"name": "NVIDIA H200"}, "collectors": {"torch": {"status": "ok"}},
                "light_pass": {"step_name": step, "steady_start": 0, "steady_reason": "test"}}
    (dst / "manifest.json").write_text(json.dumps(manifest))
    return dst


def _p99(d):
    return next(f for f in d.findings if f.rule_id == "p99-latency")


def test_a_dataloader_loop_without_a_trace_is_training_and_p99_does_not_fail(tmp_path: Path):
    d = diagnose(_bundle(tmp_path / "b", TRAIN_STEP), warnings=False)
    assert d.analysis.value("step_latency_ms_p99") == pytest.approx(float(np.percentile(TRAIN_MS, 99)), rel=1e-6)
    assert d.analysis.value("step_latency_ms_p99") > 10  # what failed as an error before
    w = d.analysis.workload
    assert (w.kind, w.task, w.confidence) == ("training", "training", "low")
    assert TRAIN_STEP in w.text
    f = _p99(d)
    assert f.status == "not_evaluated" and finding_reason(f).startswith("not applicable: ") and "training" in finding_reason(f)
    # What does fail is what this H200 loop (4 DataLoader workers) has: uneven steps, whose slow
    # ones waited for the loader. The only failure, a warning, estimated from the series itself.
    failed = [x for x in d.findings if x.status == "fail"]
    assert [x.rule_id for x in failed] == ["uneven-steps"]
    steady = np.asarray(TRAIN_MS[d.analysis.light.steady_start:])
    beyond = np.clip(steady - np.median(steady) - 0.05, 0, None)  # beyond the light pass's 50 us resolution
    assert failed[0].estimate.ms_per_step == pytest.approx(beyond.sum() / steady.size, rel=1e-6)
    assert d.analysis.value("slow_step_time_ratio") == pytest.approx(beyond.sum() / steady.sum(), rel=1e-6)
    # Its evidence names the untraced slow steps, by their number in the run, slowest first.
    (ev,) = [e for e in failed[0].evidence if e.kind == "slow_untraced_steps"]
    start = d.analysis.light.steady_start
    order = np.argsort(-steady, kind="stable")[:len(ev.rows)]
    assert [row[0] for row in ev.rows] == [start + int(i) for i in order]
    assert [row[1] for row in ev.rows] == pytest.approx([steady[i] for i in order], rel=5e-3)  # 3 significant digits
    assert ev.rows[0][1] == pytest.approx(max(TRAIN_MS[start:]), rel=5e-3)


@pytest.mark.parametrize("seen", ["no grad", "grad", "backward", "optimizer"])
def test_a_dataloader_loop_without_a_trace_is_read_by_what_its_light_pass_saw(tmp_path: Path, seen: str):
    """The same DataLoader loop, where the light pass saw the model's calls all under no_grad and
    no optimizer or backward (an evaluation loop: inference, not the training a DataLoader
    fetch alone suggests), with grad (it cannot say: the fetch decides), and where it timed a
    backward call or an optimizer step (training, whichever the step)."""
    calls = {"module_work_ns": [5_000_000_000 + k for k in range(3)]}
    light = {"no grad": {**calls, "module_work_grad": [False] * 3}, "grad": {**calls, "module_work_grad": [False, True, False]},
             "backward": {"series": {"torch.autograd.backward": {"host_start_ns": [1], "gpu_start_ns": None, "gpu_end_ns": [2]}}},
             "optimizer": {"series": {"Optimizer.step#Adam.step": {"host_start_ns": [1], "gpu_start_ns": None, "gpu_end_ns": [2]}}}}[seen]
    w = diagnose(_bundle(tmp_path / "b", TRAIN_STEP, **light), warnings=False).analysis.workload
    assert (w.kind, w.confidence) == ("inference" if seen == "no grad" else "training", "low")
    said = {"no grad": "every one without grad", "grad": TRAIN_STEP, "backward": "a backward call", "optimizer": "an optimizer step"}[seen]
    assert said in w.text


@pytest.mark.parametrize("step", ["decode_step", "Optimizer.zero_grad#SGD.zero_grad"])
def test_p99_is_not_judged_on_an_unknown_workload(tmp_path: Path, step: str):
    d = diagnose(_bundle(tmp_path / "b", step), warnings=False)
    f = _p99(d)
    if step.startswith("Optimizer."):  # torch's loop range: a training loop
        assert d.analysis.workload.kind == "training" and f.status == "not_evaluated"
        return
    assert d.analysis.workload.kind == "unknown"
    assert f.status == "not_evaluated"
    assert finding_reason(f).startswith("not judged: llm-decode/serving-only rule; the workload is unknown")
    # every workload-gated rule is treated alike: none fails or advises on an unknown workload
    gated = {r.id for r in load_rules() if r.workload}
    assert all(x.status == "not_evaluated" for x in d.findings if x.rule_id in gated)
    # the user can say what it is: --workload inference judges the p99 against its target
    told = diagnose(_bundle(tmp_path / "c", step), warnings=False, workload="inference")
    assert _p99(told).status == "fail"


@pytest.mark.parametrize("step", [TRAIN_STEP, "Optimizer.zero_grad#Adam.zero_grad"])
def test_uneven_steps_names_the_data_loader_only_where_one_feeds_the_loop(tmp_path: Path, step: str):
    """The same slow steps, read from a DataLoader loop and from a loop with no loader at all (PyG's
    full-batch GCN, whose step is zero_grad to zero_grad): only the first is told about
    DataLoader workers (CPU probe of torch_geometric 2.8.1, 2026-12-06, was told both)."""
    d = diagnose(_bundle(tmp_path / "b", step), warnings=False)
    (f,) = [x for x in d.findings if x.rule_id == "uneven-steps"]
    assert f.status == "fail"
    loader = "DataLoader" in step
    advice = " ".join(f.remediation.steps) + (f.remediation.snippet or "")
    assert ("DataLoader" in advice) == loader
    assert ("num_workers" in advice) == loader
    assert "gc.freeze()" in advice  # the causes every loop can have stay
