"""A hyperparameter search, trial after trial (session 34's probe: Optuna's PyTorch example):
each trial trains a model of its own size with the optimizer it draws, so the batches change
pace at each trial. (A file of its own so the suite's two workers share the real programs.)"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from real_helpers import light_run
from perfdoctor.pipeline import diagnose

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.flaky(reruns=1, only_rerun=["AssertionError"])


def test_a_search_steps_on_every_batch_and_keeps_every_trial(tmp_path: Path) -> None:
    # Before: the most frequent optimizer class (Adam, 120 steps) against 260 batches read as
    # "one per 2.2 DataLoader batches (gradient accumulation)", its steps the step; the first
    # trial, the largest model (~40 ms a batch among 1-11 ms ones), was left out as warm-up,
    # and uneven-steps blamed random stalls. Now a batch is a step whichever optimizer the
    # trial drew, each new optimizer begins a configuration (no warm-up), and the trials'
    # paces read as the run changing pace
    from perfdoctor.rules.engine import evaluate, load_rules

    light, series, result = light_run(tmp_path, "hpo_search.py", "--device", "cpu", "--trials", "6", "--batches", "20",
                                      "--epochs", "3", env={"OMP_NUM_THREADS": "1"})
    assert light["step_name"].startswith("enumerate(DataLoader)") and light["steps_seen"] == result["steps"]
    assert sum(result["per_trial"].values()) == result["steps"]
    first = result["per_trial"]["0"]
    assert light["steady_start"] < first // 4, light["steady_reason"]  # the first trial is the program's work
    (bundle,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    analysis = diagnose(bundle, warnings=False).analysis
    assert analysis.value("step_latency_ms_p50") == pytest.approx(np.median(result["ms_each"][light["steady_start"]:]), rel=0.1)
    uneven = next(f for f in evaluate(load_rules(()), analysis) if f.rule_id == "uneven-steps")
    if uneven.status == "fail":
        assert uneven.title.endswith("the run changed pace, a stretch of slower steps"), uneven.title
