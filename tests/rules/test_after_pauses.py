"""Uneven steps whose slow ones are each loop's first, after the program's other work.

openai-whisper's decode on the CPU (20250625, 2026-12-06): each clip's first decoder call
(the prompt's tokens and the cross-attention keys over 1,500 audio frames) took 50-94 ms
among 11 ms token steps, after the encoder's pause; uneven-steps blamed garbage collection
and swapping and estimated 3.4 ms per step "recoverable". The light series here is that
shape, written by hand: 4 loops of 24 steps with a pause before each loop."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from light_bundles import light_only_bundle
from perfdoctor.pipeline import diagnose
from perfdoctor.rules.engine import light_values

STEP = "TextDecoder.forward"
LOOPS, PER_LOOP, PAUSE_MS = 4, 24, 200.0


STALLS = (5, 17, 30, 45, 60, 80)  # steps inside the loops, no pause before them


def _series(first_ms: float, stall_ms: float = 10.0) -> tuple[list[int], list[int], np.ndarray, np.ndarray]:
    """Host starts and ends (ns) of every step, each step's ms, and whether a pause came before it."""
    ms, paused = [], []
    for loop in range(LOOPS):
        for i in range(PER_LOOP):
            k = loop * PER_LOOP + i
            ms.append(first_ms if i == 0 else stall_ms if k in STALLS else 10.0 + 0.4 * np.sin(k))
            paused.append(i == 0 and loop > 0)
    h, g, t = [], [], 1_000_000_000
    for k, v in enumerate(ms):
        if paused[k]:
            t += int(PAUSE_MS * 1e6)
        h.append(t)
        g.append(t + int(round(v * 1e6)))
        t = g[-1] + 30_000  # the loop's own 30 us between calls
    return h, g, np.asarray(ms), np.asarray(paused)


def _bundle(dst: Path, first_ms: float, stall_ms: float = 10.0) -> Path:
    h, g, _, _ = _series(first_ms, stall_ms)
    return light_only_bundle(dst, STEP, h, g, steady_start=1)


def _uneven(d):
    return next(f for f in d.findings if f.rule_id == "uneven-steps")


def test_slow_first_steps_after_pauses_are_said_as_such_with_no_time_promised(tmp_path: Path) -> None:
    d = diagnose(_bundle(tmp_path / "b", first_ms=70.0), warnings=False)
    _, _, ms, paused = _series(70.0)
    steady, after = ms[1:], paused[1:]
    beyond = np.clip(steady - np.median(steady) - 0.05, 0, None)  # the light pass's 50 us resolution
    share = light_values(d.analysis)["slow_step_after_pause_ratio"].value
    assert share == pytest.approx(float(beyond[after].sum() / beyond.sum()), rel=1e-6) and share > 0.5
    f = _uneven(d)
    assert f.status == "fail" and f.severity == "info"
    assert f.title == "Uneven steps: each loop's first step, after the program's other work"
    assert f.estimate is None and "first step's own work" in str(f.estimate_reason)
    assert any("first after each pause" in s for s in f.remediation.steps)
    assert not any("gc.freeze" in s for s in f.remediation.steps)
    (ev,) = [e for e in f.evidence if e.kind == "slow_untraced_steps"]
    assert ev.columns[-1] == "after a pause"
    # the three slowest are the three loops' first steps (the first loop's is the warm-up)
    assert [r[0] for r in ev.rows[:3]] == [PER_LOOP * k for k in (1, 2, 3)] and all(r[-1] == "yes" for r in ev.rows[:3])


def test_slow_steps_inside_the_loops_keep_the_general_advice(tmp_path: Path) -> None:
    # the same loops with even first steps and six slow steps amid them: no pause explains those
    d = diagnose(_bundle(tmp_path / "b", first_ms=10.0, stall_ms=40.0), warnings=False)
    # the steps after the pauses are no slower than the others: no input, so no variant
    assert "slow_step_after_pause_ratio" not in light_values(d.analysis)
    f = _uneven(d)
    assert f.status == "fail" and f.title == "Uneven steps: the slow ones hold much of the run's time"
    assert f.estimate is not None and f.estimate.ms_per_step > 0
    assert any("gc.freeze" in s for s in f.remediation.steps)
    (ev,) = [e for e in f.evidence if e.kind == "slow_untraced_steps"]
    assert sorted(r[0] for r in ev.rows[:6]) == list(STALLS) and all(r[-1] == "no" for r in ev.rows[:6])


def test_the_pauses_between_the_loops_are_the_loops_time_between_steps(tmp_path: Path) -> None:
    # time-between-steps weighs the same pauses: each pause's interval (the pause and the
    # loop's first step after it) over every interval from the first steady step on, by hand
    from perfdoctor.rules.evidence import EVIDENCE
    from perfdoctor.rules.signals import paused_time_ratio

    d = diagnose(_bundle(tmp_path / "b", first_ms=10.0), warnings=False)
    h, g, _, paused = _series(10.0)
    g = np.asarray(g)
    own = [g[k] - g[k - 1] for k in np.flatnonzero(paused)]
    assert paused_time_ratio(d.analysis).value == pytest.approx(sum(own) / (g[-1] - g[1]), rel=1e-9)
    f = next(f for f in d.findings if f.rule_id == "time-between-steps")
    assert f.status == "fail" and f.severity == "warning" and f.estimate is None
    ev = EVIDENCE["time_between_steps"](d.analysis)
    assert [(r[0], r[1]) for r in ev.rows] == [(PER_LOOP * k, "pause") for k in (1, 2, 3)]
    assert [r[2] for r in ev.rows] == pytest.approx([x / 1e6 for x in own], rel=1e-3)


def test_a_decode_loop_s_prefill_between_generations_is_said_as_each_generation_s_own_work() -> None:
    # the shipped megakernel recording (two generations): the second generation's prefill
    # holds 32 % of its short loop; for a decode that is each request's own work, said at info
    f = next(f for f in diagnose(Path(__file__).parents[2] / "perfdoctor" / "demo" / "data" / "megakernel", warnings=False).findings
             if f.rule_id == "time-between-steps")
    assert f.status == "fail" and f.severity == "info" and "llm-decode" in f.context
    assert f.title == "Time between steps: each generation's prefill and set-up, between its decode loops"
    assert "prefill" in f.remediation.steps[0] and not any("persistent_workers" in s for s in f.remediation.steps)
