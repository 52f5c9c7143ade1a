"""Uneven steps whose slow ones come in one stretch: the run changed pace for a while.

A T5's batches generated greedy and then with 4 beams (transformers' Seq2SeqTrainer probe,
2026-12-07): the beam batches ran at 1.4x the median, one block, and uneven-steps blamed
random stalls (the garbage collector, swapping: gc.freeze()). The light series here is
that shape, written by hand: 60 steps at ~10 ms, then 30 at ~14 ms."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from light_bundles import light_only_bundle
from perfdoctor.pipeline import diagnose
from perfdoctor.rules.engine import light_values

STEP = "T5Stack.forward"


def _bundle(dst: Path, ms: np.ndarray, wait: np.ndarray | None = None) -> Path:
    """The light series of steps of ``ms`` (each step's own time) plus ``wait`` (its wait for
    a CPU, noted as the step's cpu_wait_ns), 30 us apart."""
    h, g, t = [], [], 1_000_000_000
    for v in ms if wait is None else ms + wait:
        h.append(t)
        g.append(t + int(round(v * 1e6)))
        t = g[-1] + 30_000  # the loop's own 30 us between calls
    waits = None if wait is None else [int(round(w * 1e6)) for w in wait]
    return light_only_bundle(dst, STEP, h, g, steady_start=0, cpu_wait_ns=waits)


def _uneven(d):
    return next(f for f in d.findings if f.rule_id == "uneven-steps")


def test_a_stretch_of_slower_steps_is_a_change_of_pace_with_no_time_promised(tmp_path: Path) -> None:
    k = np.arange(90)
    ms = np.where(k < 60, 10.0, 14.0) + 0.3 * np.sin(k)
    d = diagnose(_bundle(tmp_path / "b", ms), warnings=False)
    # by hand: the stretch's share of the time beyond the median (the light pass's 50 us
    # resolution; the fast steps' noise above the median is the rest)
    beyond = np.clip(ms - np.median(ms) - 0.05, 0, None)
    share = light_values(d.analysis)["slow_step_regime_ratio"].value
    assert share == pytest.approx(beyond[60:].sum() / beyond.sum(), rel=1e-6) and share > 0.99
    f = _uneven(d)
    assert f.status == "fail" and "regimes" in f.context
    assert f.title == "Uneven steps: the run changed pace, a stretch of slower steps"
    assert f.estimate is None and "two paces" in str(f.estimate_reason)
    assert not any("gc.freeze" in s for s in f.remediation.steps) and "gc.freeze" not in f.remediation.snippet
    (ev,) = [e for e in f.evidence if e.kind == "slow_untraced_steps"]
    assert all(r[0] >= 60 for r in ev.rows)


def test_the_same_slow_steps_scattered_keep_the_general_advice(tmp_path: Path) -> None:
    # the same 30 slow steps, every third step: no stretch, a random stall's advice
    k = np.arange(90)
    ms = np.where(k % 3 == 2, 14.0, 10.0) + 0.3 * np.sin(k)
    d = diagnose(_bundle(tmp_path / "b", ms), warnings=False)
    assert "slow_step_regime_ratio" not in light_values(d.analysis)
    f = _uneven(d)
    assert f.status == "fail" and "regimes" not in f.context
    assert f.title == "Uneven steps: the slow ones hold much of the run's time" or "periodic" in f.context


def test_a_pace_of_the_programs_own_is_named_beside_a_neighbours_random_waits(tmp_path: Path) -> None:
    # an Optuna study beside a busy loop (hpo_search.py, 2026-12-07): a trial's own slower
    # pace for a stretch, and a neighbour's time on random steps, more than half of the time
    # beyond the median. The stretch is what the program can change; the waits stay
    # cpu-contention's finding
    rng = np.random.default_rng(3)
    k = np.arange(90)
    own = np.where(k < 60, 10.0, 14.0) + 0.3 * np.sin(k)
    wait = np.zeros(90)
    wait[rng.choice(90, 20, replace=False)] = 8.0
    d = diagnose(_bundle(tmp_path / "b", own, wait), warnings=False)
    values = light_values(d.analysis)
    assert values["slow_step_cpu_wait_ratio"].value >= 0.5  # "contended" holds too
    assert values["slow_step_regime_ratio"].value >= 0.5
    f = _uneven(d)
    assert "regimes" in f.context and f.title == "Uneven steps: the run changed pace, a stretch of slower steps"


def test_a_neighbours_stretch_is_no_pace_of_the_programs(tmp_path: Path) -> None:
    # the program's steps even; another process took the CPUs for a stretch of 30 steps
    k = np.arange(90)
    own = 10.0 + 0.3 * np.sin(k)
    wait = np.where((k >= 40) & (k < 70), 4.0, 0.0)
    d = diagnose(_bundle(tmp_path / "b", own, wait), warnings=False)
    assert "slow_step_regime_ratio" not in light_values(d.analysis)
    f = _uneven(d)
    assert "contended" in f.context and "regimes" not in f.context
    assert f.title == "Uneven steps: another process took the CPUs in the slow steps"


def test_a_neighbours_stretch_that_also_slowed_the_work_it_let_run_is_no_pace(tmp_path: Path) -> None:
    # two busy loops on the program's one CPU for its last third (test_run_hard's shared_cpu.py
    # under a loaded CI box): each step there ~3x, two thirds of it waiting for the CPU, and
    # the rest ~35 % slower than before (caches, switches): less the waits still a stretch
    k = np.arange(90)
    own = np.where(k < 60, 10.0, 13.5) + 0.3 * np.sin(k)
    wait = np.where(k >= 60, 20.0, 0.0)
    d = diagnose(_bundle(tmp_path / "b", own, wait), warnings=False)
    assert "slow_step_regime_ratio" not in light_values(d.analysis)
    assert _uneven(d).title == "Uneven steps: another process took the CPUs in the slow steps"
