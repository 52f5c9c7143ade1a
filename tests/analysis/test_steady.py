"""steady.py and the timeline's step table: critical path, host lead, cadence, steady state.

Expected values are hand computations on small arrays (written out in the comments), plain
loops over the raw JSON of a real H200 trace, or the program's own timer
(tests/fixtures/series/README.md).
"""

from __future__ import annotations

import gzip
import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES
from perfdoctor.analysis import steady
from perfdoctor.pipeline import load_trace
from perfdoctor.analysis.metrics import analyze

SERIES = sorted((FIXTURES / "series").glob("*.json"))
GRAPH = FIXTURES / "h200-decode-graph-10steps.kineto.json.gz"
MS = 1_000_000


# --- small arrays, by hand -------------------------------------------------------------------


def test_critical_path_synchronous_loop_is_host_start_to_gpu_end() -> None:
    # The host waits for each step: h[k] > g[k-1], so cp = g - h.
    h = [0, 100, 200]
    g = [40, 150, 260]
    assert steady.critical_path_ns(h, g).tolist() == [40, 50, 60]
    assert steady.host_lead_ns(h, g).tolist() == [0, 0]


def test_critical_path_host_running_ahead_is_the_completion_interval() -> None:
    # The host issues all three steps at once (0, 1, 2); each step takes 10 on the GPU.
    # Host start -> GPU end would say 10, 19, 28 (queueing counted as latency);
    # the critical path is g[k] - max(h[k], g[k-1]) = 10, 20-10, 30-20.
    h = [0, 1, 2]
    g = [10, 20, 30]
    assert steady.critical_path_ns(h, g).tolist() == [10, 10, 10]
    # host lead: g[k-1] - h[k] = 10 - 1, 20 - 2
    assert steady.host_lead_ns(h, g).tolist() == [9, 18]


def test_critical_path_of_a_step_that_ran_beside_the_one_before_is_its_own_span() -> None:
    # Two pool workers: step 1 (thread B, 5-40) started and ended inside step 0 (thread A,
    # 0-60); queued behind it would read 40 - 60 = -20. Step 2 (A again, 70-100) is queued
    # behind nothing: 30. Step 3 (B, 80-110) ended after step 2: behind it, 110 - 100.
    h = [0, 5, 70, 80]
    g = [60, 40, 100, 110]
    assert steady.critical_path_ns(h, g).tolist() == [60, 35, 30, 10]


def test_critical_path_of_empty_and_single_series() -> None:
    assert steady.critical_path_ns([], []).size == 0
    assert steady.critical_path_ns([5], [12]).tolist() == [7]
    assert steady.host_lead_ns([5], [12]).size == 0


def test_cadence_leaves_out_pauses_longer_than_a_median_step() -> None:
    # Four steps of 5 ns, issued 10 ns apart, then a pause (a prefill) of 75 ns before the last.
    h = [0, 10, 20, 100]
    g = [5, 15, 25, 105]
    # cp = [5, 5, 5, 5]; intervals g[k]-g[k-1] = [10, 10, 80]; idle before = [5, 5, 75];
    # 75 > median cp 5 -> left out; kept 10 + 10 ns for 2 intervals -> 1e8 steps/s.
    c = steady.cadence(h, g)
    assert (c.intervals, c.pauses) == (2, 1)
    assert c.steps_per_s == pytest.approx(2 / 20e-9)
    # with the pause in: every interval, (n - 1) / (last end - first end), what a timer
    # around the whole loop reads; the interval left out is the 80 ns one
    assert c.with_pauses_per_s == pytest.approx(3 / 100e-9)
    assert c.paused_ms == pytest.approx(80e-6)


def test_cadence_back_to_back_equals_the_contract_rate() -> None:
    h = [0, 1, 2, 3]
    g = [10, 20, 30, 40]
    c = steady.cadence(h, g)
    assert c.pauses == 0 and c.steps_per_s == pytest.approx(3 / 30e-9)  # (n-1) / (last - first)
    assert c.with_pauses_per_s is None and c.paused_ms == 0  # nothing left out: one rate


def test_cadence_leaves_out_a_pass_between_steps_however_short() -> None:
    # Three epochs of 2 steps of 10 ms, back to back; between epochs a 4 ms validation (a pass
    # ended): shorter than a median step, so no pause by the time rule.
    h = _ms([0, 10, 24, 34, 48, 58])
    g = _ms([10, 20, 34, 44, 58, 68])
    ended = [False, False, True, False, True, False]
    # before (no flag): every interval, 5 / (68 - 10 ms) = 86.2/s, 11.6 ms per step
    assert steady.cadence(h, g).pauses == 0 and steady.cadence(h, g).steps_per_s == pytest.approx(5 / 58e-3)
    # intervals 10, 14, 10, 14, 10 ms; the two after an end of pass lose the 4 ms gap (the
    # validation), their steps kept: 5 / 50 ms = 100/s, the 10 ms a step takes
    c = steady.cadence(h, g, None, None, ended)
    assert (c.intervals, c.pauses, c.pass_ends, c.waits) == (5, 2, 2, 0)
    assert c.steps_per_s == pytest.approx(100.0)
    assert c.pass_end_ms == pytest.approx(8.0) and c.paused_ms == pytest.approx(8.0)
    assert c.with_pauses_per_s == pytest.approx(5 / 58e-3)  # what a timer around the epochs reads
    # the steady state's cut: the flags are sliced with the steps (from step 2: intervals 10,
    # 14, 10 ms, the middle one after a pass: 3 / 30 ms)
    assert steady.steady_series(h, g, 2, None, None, ended).cadence.steps_per_s == pytest.approx(100.0)
    # and the steady-state rule sees them as pauses
    assert steady.paused_before(h, g, None, None, ended).tolist() == ended
    assert steady.paused_before(h, g).tolist() == [False] * 6


def test_cadence_with_one_step_per_epoch_keeps_every_step() -> None:
    # one optimizer step per epoch: every interval follows an end of pass. Steps of 10 ms with
    # a 4 ms validation before each but the first: 2 / 20 ms (before: 2 / 28 ms = 14 ms per step)
    h, g = _ms([0, 14, 28]), _ms([10, 24, 38])
    c = steady.cadence(h, g, None, None, [False, True, True])
    assert (c.intervals, c.pass_ends) == (2, 2) and c.steps_per_s == pytest.approx(100.0)
    # a pass longer than a step: as every gap is one, it was the usual gap, no pause (2 / 80
    # ms: 40 ms per 10 ms step); now its time alone is left out (steps of 10 ms, validations
    # of 30 ms)
    h, g = _ms([0, 40, 80]), _ms([10, 50, 90])
    assert steady.cadence(h, g).steps_per_s == pytest.approx(25.0)
    c = steady.cadence(h, g, None, None, [False, True, True])
    assert c.steps_per_s == pytest.approx(100.0) and c.pass_end_ms == pytest.approx(60.0)
    # on a GPU the step begins at the later of its host start and the stream reaching it
    c = steady.cadence(h, g, _ms([1, 42, 81]), None, [False, True, True])
    # (42 - 10 and 81 - 50 ms: intervals of 40 ms less 32 and 31)
    assert c.pass_end_ms == pytest.approx(32.0 + 31.0) and c.steps_per_s == pytest.approx(2 / 17e-3)


def test_cadence_needs_two_steps() -> None:
    c = steady.cadence([0], [5])
    assert c.steps_per_s is None and c.reason


# --- the steady-state rule on real-shaped series ----------------------------------------------


def _ms(values: list[float]) -> np.ndarray:
    return (np.asarray(values) * MS).astype(np.int64)


def test_cold_first_call_is_warm_up() -> None:
    cp = _ms([120.0] + [4.3, 4.2, 4.4, 4.3, 4.25, 4.35, 4.3, 4.2, 4.4])
    s = steady.steady_start(cp)
    assert s.start == 1 and "warm-up" in s.reason


def test_eager_steps_and_graph_capture_before_replays_are_warm_up() -> None:
    # 3 eager warm-up steps (4.3 ms), the capture step (60 ms), then graph replays (1.9 ms).
    cp = _ms([4.3, 4.2, 4.4, 60.0] + [1.9, 1.92, 1.88, 1.9, 1.91, 1.89, 1.9, 1.9, 1.93, 1.9])
    assert steady.steady_start(cp).start == 4


def test_a_whole_warm_up_generate_call_of_slow_steps_is_warm_up() -> None:
    # generate() #1 (32 tokens) runs at 2.6 ms while allocator and caches settle; #2-#4 at 1.9.
    cp = _ms([2.6] * 32 + [1.9] * 96)
    assert steady.steady_start(cp).start == 32


def _noisy(ms: float, n: int, seed: int) -> list[float]:
    # host-bound steps vary by a few per cent around their level
    rng = np.random.default_rng(seed)
    return (ms * (1 + 0.04 * rng.standard_normal(n))).tolist()


def test_a_slow_regime_after_fast_first_steps_is_warm_up() -> None:
    # HF generate on the H200 (run2/hf_generate_1b): a warm-up generate of 8 tokens (the
    # first cold), then generate 1 of 64 tokens whose first 8 forwards reuse the warm-up's
    # context lengths (20 ms) and whose 56 others load kernels for new ones (60 ms), then
    # generates 2 and 3 at 14.4 ms. The old rule began the steady state at step 8, the first
    # 3 fast steps, and its median (19.5 ms) mixed both regimes.
    cp = _ms([200.0] + _noisy(14.4, 7, 1) + _noisy(14.4, 8, 2) + _noisy(60.0, 56, 3) + _noisy(14.4, 128, 4))
    s = steady.steady_start(cp)
    assert s.start == 72 and s.slow_stretch == (0, 71)
    assert "two regimes" in s.reason and "steps 0-71" in s.reason
    assert float(np.median(cp[s.start :])) / MS == pytest.approx(14.4, rel=0.02)


def test_a_slower_middle_generate_is_a_regime_too() -> None:
    # generate 2 at 19.5 ms, generate 3 at 14.4: the reference (median of the second half)
    # is 14.4, every step of generate 2 is over 1.25 x 14.4 = 18 ms: the steady state is
    # generate 3 (step 136, after its prefill: a pause), whose own ms/token is the number to match.
    cp = _ms([200.0] + [20.0] * 15 + [60.0] * 56 + [19.5] * 64 + [14.4] * 64)
    paused = np.zeros(len(cp), dtype=bool)
    paused[[16, 72, 136]] = True  # each generate's prefill
    s = steady.steady_start(cp, paused)
    assert s.start == 136 and np.median(cp[s.start :]) == 14.4 * MS


def test_a_slow_stretch_past_the_middle_of_a_loop_that_never_pauses_is_kept() -> None:
    # The same speeds in one loop with no pause: nothing says the slow steps were a warm-up
    # call, and they run past the middle of the run: the program's own variation, kept.
    cp = _ms([200.0] + [20.0] * 15 + [60.0] * 56 + [19.5] * 64 + [14.4] * 64)
    s = steady.steady_start(cp, np.zeros(len(cp), dtype=bool))
    # (the slow stretch's edge comes from centred windows: at most half a window of it is cut)
    assert s.start <= steady.REGIME_WINDOW // 2 and "both kept" in s.reason
    assert np.median(cp[s.start :]) == 19.5 * MS  # not generate 3's 14.4 alone
    # the same with no pause information at all (a trace's steps)
    assert steady.steady_start(cp).start == s.start


def test_a_warm_up_far_slower_than_a_later_drift_across_the_middle_is_still_cut() -> None:
    # HF generate on the H200 (2026-12-04): a warm-up call of 32 tokens at ~70 ms, then three
    # timed calls at ~20 ms with a 28 ms stretch across the middle of the run. That stretch is
    # the program's variation, kept; the warm-up before it is not the same drift (70 > 1.25 x
    # 28 = 35 ms) and is cut. The rule before read steady from step 1: 24.8 tokens/s for 44.2.
    cp = _ms(_noisy(70.0, 32, 1) + _noisy(20.0, 23, 2) + _noisy(28.0, 21, 3) + _noisy(20.0, 52, 4))
    s = steady.steady_start(cp)
    assert 32 <= s.start <= 34 and s.slow_stretch == (0, s.start - 1), s
    assert "both kept" in s.reason  # the stretch across the middle stays in
    # a stretch before the drift at the drift's own speed is still the same drift, kept
    cp = _ms([200.0] + _noisy(28.0, 31, 1) + _noisy(20.0, 23, 2) + _noisy(28.0, 21, 3) + _noisy(20.0, 52, 4))
    assert steady.steady_start(cp).start <= 1


def test_a_host_paced_benchmark_drifting_between_two_speeds_matches_its_own_timer() -> None:
    # ViT-small at batch 1 on the H200 (tests/fixtures/series/vit-small-b1-h200.json): one
    # loop, steps 24-70 mostly at ~4.0 ms, the rest at ~3.1, the program's timer over both
    # (3.480 ms). Taking the later speed alone as the steady state read 0.86 of it.
    d = json.loads((FIXTURES / "series" / "vit-small-b1-h200.json").read_text())
    h, gs, g = d["host_start_ns"], d["gpu_start_ns"], d["gpu_end_ns"]
    s = steady.steady_start(steady.critical_path_ns(h, g), steady.paused_before(h, g, gs))
    assert s.start <= 11 and s.slow_stretch is None and "both kept" in s.reason, s
    series = steady.steady_series(h, g, s.start, gs)
    own = d["own_ms_per_step"]
    assert float(np.median(series.critical_path_ms)) == pytest.approx(own, rel=0.03)
    assert 1e3 / series.cadence.steps_per_s == pytest.approx(own, rel=0.01)


def test_a_slow_stretch_the_program_falls_back_to_later_is_not_a_warm_up() -> None:
    # the first half slow, then fast, then as slow again, then fast: cutting the first half
    # would leave the later slow stretch in and read the fast speed alone
    cp = _ms([50.0] + [2.1] * 59 + [1.5] * 30 + [2.1] * 15 + [1.5] * 45)
    s = steady.steady_start(cp)
    assert s.start <= 5 and s.slow_stretch is None, s  # the first kept stretch's centred edge
    assert "runs as slowly again later (steps 90-104)" in s.reason
    # a true warm-up, much slower than the slow stretch that comes back, is still cut
    cp = _ms([50.0] + [6.0] * 59 + [1.5] * 30 + [2.1] * 15 + [1.5] * 45)
    assert steady.steady_start(cp).start == 60


def test_a_training_loop_that_validates_each_epoch_reads_its_own_mean_on_the_h200() -> None:
    # tests/fixtures/series/train-eval-mlp-h200.json: host-paced iterations at ~2 ms and ~1.5 ms
    # in turns; steps 16-85 slow ended in the first half (and at the first epoch's end),
    # 122-135 slow again. Cutting the first 86 read 0.90 of the program's mean (0.84 at p50).
    d = json.loads((FIXTURES / "series" / "train-eval-mlp-h200.json").read_text())
    h, gs, g = d["host_start_ns"], d["gpu_start_ns"], d["gpu_end_ns"]
    s = steady.series_steady_start(h, g, gs)
    assert s.start <= 4 and s.slow_stretch is None, s
    cp = steady.critical_path_ns(h, g)
    assert float(np.mean(cp[s.start :])) / 1e6 == pytest.approx(d["own_ms_per_step"], rel=0.03)


def test_a_short_wait_for_a_bursty_producer_ends_no_warm_up() -> None:
    # pool_classify.py (a loop fed by a multiprocessing Pool in bursts) on the loaded CI box:
    # its light-pass steps, back to back, and the step thread's idle waits before steps 4, 12,
    # 24 and 31. Half the steps take the next batch of a burst (~0.15 ms), the others wait for
    # the next burst. The 0.09 ms wait before step 24, near the end of a stretch of mostly slow
    # steps, made the stretch a call of its own ended by a pause: 28 steps were cut as warm-up,
    # 4.4 ms per step read for the program's 7.92 (its timer: the mean iteration after 3)
    cp = _ms([9.23, 0.31, 32.79, 0.27, 0.75, 19.31, 4.0, 7.92, 20.05, 7.38, 0.17, 0.13, 11.02, 9.15, 4.0, 16.11, 23.89, 0.18,
              15.88, 0.19, 0.12, 15.74, 0.16, 0.12, 13.06, 6.5, 0.17, 27.85, 0.18, 0.12, 0.12, 15.94, 0.16, 3.82, 10.82, 9.24,
              0.19, 7.95, 0.17, 0.11])
    h = np.r_[0, np.cumsum(cp)[:-1]]
    waited = np.zeros(cp.size, dtype=np.int64)
    waited[[4, 12, 24, 31]] = _ms([3.68, 0.1, 0.09, 3.66])
    s = steady.series_steady_start(h, h + cp, None, waited)
    assert s.start <= 1 and s.slow_stretch is None, s
    c = steady.steady_series(h, h + cp, s.start, None, waited).cadence
    assert 1e3 / c.steps_per_s == pytest.approx(7.92, rel=0.1)
    # a wait longer than a step is still a pause: the stretch ended by it is a call of its own
    waited[24] = _ms([5.0])[0]
    assert steady.series_steady_start(h, h + cp, None, waited).start == 28


def test_slow_windows_in_steps_not_slower_as_a_whole_are_not_a_warm_up() -> None:
    # A noisy host-paced loop (ViT-small b1 on the H200, 2026-12-02 run 6: "steps 0-50 at
    # 3.271 ms (median), then 3.09" were left out as warm-up): a stretch in the first half
    # where most steps of each window are slow, among fast steps. What a cut after it would
    # leave out is no slower as a whole than the rest: not a warm-up, nothing dropped.
    cp = _ms([30.0] + [3.1] * 19 + ([4.2, 4.2, 3.1] * 7) + [3.1] * 69)
    s = steady.steady_start(cp)
    assert s.start == 1 and s.slow_stretch is None, s
    assert "both kept" in s.reason and "no slower as a whole" in s.reason


def test_paused_before_marks_the_step_after_a_pause() -> None:
    # three 1 ms steps back to back, then 50 ms of something else, then two more
    host = [0, 1, 2, 53, 54]
    end = [1, 2, 3, 54, 55]
    got = steady.paused_before(_ms(host), _ms(end))
    assert got.tolist() == [False, False, False, True, False]
    # the stream reaching step 3 late (queued behind a prefill) is a pause too
    got = steady.paused_before(_ms([0, 1, 2, 3, 4]), _ms([1, 2, 3, 54, 55]), _ms([0, 1, 2, 53, 54]))
    assert got.tolist() == [False, False, False, True, False]
    # without the GPU starts the host alone saw no pause there
    assert not steady.paused_before(_ms([0, 1, 2, 3, 4]), _ms([1, 2, 3, 54, 55])).any()


def test_bursts_of_noise_in_a_host_bound_loop_are_not_a_regime() -> None:
    # 4 slow steps in 7 (a noisy host), never most of 11: the first settled run stays the start
    cp = _ms([50.0] + ([1.0, 1.0, 1.0, 1.0, 1.5, 1.0, 1.5, 1.5, 1.0, 1.5, 1.0, 1.0] * 6))
    s = steady.steady_start(cp)
    assert s.start == 1 and s.slow_stretch is None and "two regimes" not in s.reason


def test_a_short_cold_start_is_not_two_regimes() -> None:
    s = steady.steady_start(_ms([120.0, 40.0] + [4.3] * 30))
    assert s.start == 2 and s.slow_stretch is None
    # 7 slow steps (a regime's window is 11): warm-up, not a regime of its own
    s = steady.steady_start(_ms([9.0] * 7 + [4.3] * 41))
    assert s.start == 7 and s.slow_stretch is None and "two regimes" not in s.reason


def test_a_slow_regime_in_the_second_half_is_workload() -> None:
    # a slow stretch starting after the middle (throttling, a longer context) is not warm-up
    cp = _ms([1.0] * 36 + [3.0] * 12 + [1.0] * 20)
    assert steady.steady_start(cp).start == 0


def test_periodic_prefills_after_the_start_are_not_warm_up() -> None:
    # A slow first step, then generate() calls of 31 tokens each starting with a 15 ms prefill step.
    cp = _ms([80.0] + ([15.0] + [1.9] * 31) * 4)
    s = steady.steady_start(cp)
    # index 1 is a prefill (15 ms): not 3 fast steps in a row from there; index 2 is.
    assert s.start == 2
    # The later prefills stay in the steady series: dropping them would flatter the engine.
    assert (np.asarray(cp[s.start :]) == 15 * MS).sum() == 3


def test_a_series_that_never_settles_is_used_whole() -> None:
    cp = _ms([1.0, 3.0] * 10)  # median of the second half 2.0: every other step > 2.5
    s = steady.steady_start(cp)
    assert s.start == 0 and "never settle" in s.reason


@pytest.mark.parametrize("n", [0, 1, 2, 3])
def test_fewer_than_four_steps_are_used_whole(n: int) -> None:
    s = steady.steady_start(_ms([50.0, 1.0, 1.0][:n] + [1.0] * 0))
    assert s.start == 0 and "too few" in s.reason


def test_no_warm_up_when_the_first_steps_are_fast() -> None:
    assert steady.steady_start(_ms([1.9, 1.95, 1.9, 1.92, 1.9, 1.91])).start == 0


# --- a trace's warm-up shown by its device work (steady.device_warmup) ----------------------------


def test_a_first_step_slow_in_time_and_in_device_work_is_warm_up() -> None:
    # The TensorBoard ResNet-50 autograd trace's shape: step 0 is 4489 ms with 468 ms of GPU
    # work, then ~165 ms steps with ~102 ms of GPU work each (cuDNN autotuning, first calls).
    w = steady.device_warmup(_ms([4489.4, 175.1, 140.2, 154.1, 192.7]), _ms([467.6, 102.9, 102.1, 102.3, 102.4]))
    assert w.start == 1 and "the first step" in w.reason and "468 ms of GPU work" in w.reason


def test_a_host_stall_with_the_same_device_work_is_not_warm_up() -> None:
    # h200-serve-graph's shape: a prefill, then a decode step whose host is 20 ms late, then
    # steady 0.2 ms steps; every step does the same 0.1 ms of GPU work. steady_start on the
    # step times alone would leave out the first three steps, the stall with them.
    cp = _ms([2.9, 20.7, 0.3, 0.2, 0.1, 0.2, 0.9, 0.2, 0.2, 0.2, 0.2, 0.2])
    busy = _ms([0.108, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1])
    assert steady.steady_start(cp).start == 3
    assert steady.device_warmup(cp, busy).start == 0


def test_more_device_work_at_the_same_step_time_is_not_warm_up() -> None:
    # vLLM on MI300X: step 1 runs 31 % more GPU work (a bigger batch) in the same 45 ms step.
    cp = _ms([45.5, 46.9, 44.5, 44.3, 44.3, 47.0, 44.4, 44.3, 44.3])
    busy = _ms([15.6, 23.2, 18.4, 18.3, 17.7, 18.5, 15.4, 15.9, 17.2])
    assert steady.steady_start(busy).start == 2
    assert steady.device_warmup(cp, busy).start == 0


# --- the real graph fixture: the timeline's step table vs plain loops over the raw JSON --------


def _raw_graph_steps() -> tuple[list[int], list[int], list[int]]:
    """Host start, GPU busy (union) and GPU end per decode_step, from the raw events."""
    doc = json.loads(gzip.decompress(GRAPH.read_bytes()))
    ev = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e["name"] == "decode_step" and e["cat"] == "user_annotation")
    owner = {}
    for e in ev:
        if e["cat"] == "cuda_runtime" and e["name"] == "cudaGraphLaunch":
            for i, (s, t) in enumerate(steps):
                if s <= e["ts"] <= t:
                    owner[e["args"]["correlation"]] = i
    per_step: dict[int, list[tuple[float, float]]] = {}
    for e in ev:
        if e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset") and e["args"].get("correlation") in owner:
            # ns as the contract converts: start and duration each from µs, end = start + duration
            a, d = round(e["ts"] * 1000), round(e["dur"] * 1000)
            per_step.setdefault(owner[e["args"]["correlation"]], []).append((a, a + d))
    host, busy, end = [], [], []
    for i, (s, _) in enumerate(steps):
        total, reach = 0.0, None
        for a, b in sorted(per_step[i]):
            if reach is None or a >= reach:
                total += b - a
                reach = b
            elif b > reach:
                total += b - reach
                reach = b
        host.append(round(s * 1000))
        busy.append(int(total))
        end.append(int(max(b for _, b in per_step[i])))
    return host, busy, end


def test_graph_fixture_step_table_matches_plain_loops() -> None:
    a = analyze(load_trace(GRAPH))
    t = a.timeline.steps
    host, busy, end = _raw_graph_steps()
    assert t["host_start_ns"].tolist() == host
    assert t["gpu_end_ns"].astype("int64").tolist() == end
    assert t["busy_ns"].tolist() == busy
    cp, lead = [], []
    for k in range(len(host)):
        start = host[k] if k == 0 else max(host[k], end[k - 1])
        cp.append(end[k] - start)
        if k:
            lead.append(max(0, end[k - 1] - host[k]))
    assert t["critical_path_ns"].astype("int64").tolist() == cp
    assert t["host_lead_ns"].iloc[1:].astype("int64").tolist() == lead
    assert a.value("step_latency_ms_p50") == pytest.approx(float(np.median(cp)) / 1e6, rel=1e-12)
    assert a.value("host_lead_ms_p50") == pytest.approx(float(np.median(lead)) / 1e6, rel=1e-12)
    assert (t["idle_ns"] == (t["gpu_end_ns"] - t["gpu_start_ns"]).astype("int64") - t["busy_ns"]).all()


def test_graph_fixture_steady_state_and_cadence() -> None:
    host, _, end = _raw_graph_steps()
    cp = [end[0] - host[0]] + [end[k] - max(host[k], end[k - 1]) for k in range(1, len(host))]
    # The first replay under the profiler is slow (program facts: 9.1 ms vs ~4.3 ms).
    reference = float(np.median(cp[len(cp) // 2 :]))
    assert cp[0] > 1.25 * reference and all(c <= 1.25 * reference for c in cp[1:4])
    assert steady.steady_start(cp).start == 1
    # The loop synchronises after every step: host starts after the previous GPU end, so the
    # pause threshold (a median step) decides; by hand: pauses = idle gaps longer than median cp.
    idle = [host[k] - end[k - 1] for k in range(1, len(host))]
    keep = [end[k] - end[k - 1] for k in range(1, len(host)) if idle[k - 1] <= np.median(cp)]
    c = steady.cadence(host, end)
    assert c.intervals == len(keep)
    assert c.steps_per_s == pytest.approx(len(keep) / (sum(keep) / 1e9))


def test_a_trace_points_out_a_slow_first_step_and_keeps_it() -> None:
    a = analyze(load_trace(GRAPH))
    note = a.first_step_note()
    assert note and "first step" in note and "included" in note
    assert a.value("steps") == 10  # nothing dropped
    cp = a.timeline.critical_path_ms()
    assert a.value("step_latency_ms_p99") == pytest.approx(float(np.percentile(cp, 99)))


# --- series fixtures: critical path vs the program's own time ----------------------------------


@pytest.mark.parametrize("path", SERIES, ids=[p.stem for p in SERIES])
def test_series_fixture_critical_path_matches_the_programs_own_time(path: Path) -> None:
    d = json.loads(path.read_text())
    h, g = d["host_start_ns"], d["gpu_end_ns"]
    assert len(h) == len(g) >= 2
    if d.get("gpu_start_ns") is not None:
        # CUDA-event times reach the host clock through one reference event: a start event
        # on an idle GPU can read a few us before the host's own perf_counter (seen: 5.4 us).
        assert all(hs - 20_000 <= gs <= ge for hs, gs, ge in zip(h, d["gpu_start_ns"], g))
    if d.get("step_kind") == "module-call":  # an automatic step spans the loop iteration
        g = steady.iteration_ends_ns(d["gpu_start_ns"], g)
    cp = steady.critical_path_ns(h, g)
    s = steady.steady_start(cp)
    assert 0 <= s.start < len(h) and s.reason
    cp_ms = cp[s.start :] / 1e6
    # The program's timer is a mean over its timed loop: the mean critical path of the
    # steady steps is the like-for-like number; the median too when the steps are even.
    assert float(np.mean(cp_ms)) == pytest.approx(d["own_ms_per_step"], rel=0.05)
    if d.get("step_kind") != "module-call":
        assert float(np.median(cp_ms)) == pytest.approx(d["own_ms_per_step"], rel=0.05)


def test_module_call_series_spans_the_iteration() -> None:
    # Calls at h = 0, 100, 200; each call's GPU work ends at 40, 140, 240, and the host
    # began the next call at 100, 200 (GPU idle): the GPU start events of calls 1 and 2
    # complete at 101, 201. Iteration k ends at max(g[k], gpu_start[k+1]): 101, 201, 240.
    ends = steady.iteration_ends_ns([1, 101, 201], [40, 140, 240])
    assert ends.tolist() == [101, 201, 240]
    assert steady.critical_path_ns([0, 100, 200], ends).tolist() == [101, 100, 39]
    # Host ahead of the GPU: the next call's start event completes when the GPU reaches it,
    # right after this call's work: the end does not move.
    assert steady.iteration_ends_ns([1, 2], [50, 90]).tolist() == [50, 90]


def test_time_another_process_took_between_two_calls_is_no_pause() -> None:
    # Calls every 100 ns, 40 long; after call 3 the next comes 660 ns after its end: a pause
    # (longer than a step, many times the usual 60), so call 3 keeps its own end. When the
    # thread waited 600 of those ns for a CPU (the run delay at each call's start), the
    # program did nothing else there: the iteration runs to the next call.
    starts = [0, 100, 200, 300, 1000, 1100]
    ends = [s + 40 for s in starts]
    assert steady.iteration_ends_ns(starts, ends).tolist() == [100, 200, 300, 340, 1100, 1140]
    delayed = steady.iteration_ends_ns(starts, ends, run_delay=[0, 0, 5, 5, 605, 605])
    assert delayed.tolist() == [100, 200, 300, 1000, 1100, 1140]
    # waited for a CPU only part of it, 100 of 660: still a pause of the program's own
    assert steady.iteration_ends_ns(starts, ends, run_delay=[0, 0, 0, 0, 100, 100]).tolist()[3] == 340
    # litgpt's tokens on a shared CPU: 100 ns calls 5 apart, a neighbour's 600 in the gap
    # after call 3. The light pass read the counter at call 0 and after the gap (call 4)
    # only, the starts between interpolated in time: the gap kept 600 * 705 / 1020 = 415 of
    # it, and read 605 - 415 = 190 ns, longer than a step: a pause of the program's (11 of
    # litgpt's 1 ms tokens). Read as read, the gap may hold all 600: no pause
    starts = [0, 105, 210, 315, 1020, 1125]
    ends = [s + 100 for s in starts]
    interpolated = [0, 62, 124, 185, 600, 600]
    read = [True, False, False, False, True, True]
    assert steady.iteration_ends_ns(starts, ends, run_delay=interpolated).tolist()[3] == 415
    assert steady.iteration_ends_ns(starts, ends, run_delay=interpolated, run_delay_read=read).tolist() == [105, 210, 315, 1020, 1125, 1225]
    assert steady.cpu_waits_after(interpolated, read).tolist() == [62, 62, 61, 600, 0]
    # a pause of the program's own beside a neighbour's 100 ns stays one, however read
    assert steady.iteration_ends_ns(starts, ends, run_delay=[0, 10, 21, 31, 100, 100], run_delay_read=read).tolist()[3] == 415


def test_an_evaluation_before_an_iterations_training_is_left_out_of_its_step() -> None:
    # Steps (optimizer marks' iterations) begin at 0, 100, 200, 300, 400; the model's calls
    # are 4 training forwards per step, and step 2 first holds 3 calls under no_grad (an
    # evaluation): it begins at its first training forward after them, a pass ended before it
    starts = [0, 100, 200, 300, 400]
    train = [[s + 10 * j for j in range(4)] for s in starts]
    train[2] = [240, 250, 260, 270]
    work = [h for calls in train for h in calls] + [205, 215, 225]  # in any order
    grad = [True] * 20 + [False] * 3
    begins, ended = steady.evaluation_passes(starts, work, grad)
    assert begins.tolist() == [0, 100, 240, 300, 400] and ended.tolist() == [False, False, True, False, False]
    # no_grad calls in every iteration (a rollout before each update, a teacher's forward):
    # the iteration's own, nothing moves
    rollout = [s + j for s in starts for j in range(3)] + [s + 50 for s in starts]
    moded = [False] * 15 + [True] * 5
    begins, ended = steady.evaluation_passes(starts, rollout, moded)
    assert begins.tolist() == starts and not ended.any()
    # a teacher's forward under no_grad before each step's training ones (kornia's augmentation
    # alike), and step 2's evaluation before it: that step begins at its teacher's call
    distil = [s + j for s in starts for j in (1, 10, 20, 30, 40)]
    distil[10:15] = [235, 240, 250, 260, 270]  # step 2: its teacher's call and training after the evaluation's
    distil += [205, 215, 225]
    moded = [False, True, True, True, True] * 5 + [False] * 3
    begins, ended = steady.evaluation_passes(starts, distil, moded)
    assert begins.tolist() == [0, 100, 235, 300, 400] and ended.tolist() == [False, False, True, False, False]
    # more calls with grad disabled in every other step (TD3's: the actor's delayed update opens
    # every 2nd step with grad enabled): the loop's own, nothing moves
    alternate = [s + j for s in starts for j in (1, 2, 10)]
    begins, ended = steady.evaluation_passes(starts, alternate, [True, True, True, False, False, True] * 2 + [True] * 3)
    assert begins.tolist() == starts and not ended.any()


def _traced_iterations(forward_ops: dict[int, list[int]]) -> tuple[list[int], list[int], list[int], list[int]]:
    """Iterations [0, 99] ... [400, 499], each 4 forward ops (or ``forward_ops[start]``), then
    3 ops of its backward: starts, ends, the forward ops' starts and the backward's (each
    reversed: any order)."""
    starts = [0, 100, 200, 300, 400]
    forward, backward = [], []
    for s in starts:
        forward += forward_ops.get(s, [s + 10 * j for j in range(4)])
        backward += [s + 80, s + 85, s + 90]
    return starts, [s + 99 for s in starts], forward[::-1], backward[::-1]


def test_a_traced_evaluation_before_an_iterations_training_is_left_out_by_its_backward() -> None:
    # Iteration 2 first runs 6 forward ops of an evaluation (no_grad, which a trace does not
    # mark): 10 before its backward against the usual 4 (>= 4 + half of 4), so it begins 4 ops
    # before its backward, at 260, its training forward's first op. Iteration 3 runs one op
    # more (a log line's .item()): its own
    starts, ends, work, backward = _traced_iterations({200: [205, 215, 225, 235, 245, 255, 260, 265, 270, 275],
                                                       300: [300, 305, 310, 320, 330]})
    assert steady.evaluation_starts(starts, ends, work, backward).tolist() == [0, 100, 260, 300, 400]
    # more forward work than usual in half the iterations or more is theirs: nothing moves
    more = {s: [s + 5 * j for j in range(10)] for s in (0, 200, 400)}
    assert steady.evaluation_starts(*_traced_iterations(more)).tolist() == [0, 100, 200, 300, 400]
    # no backward in a trace (an inference loop): nothing to tell by
    starts, ends, work, _ = _traced_iterations({200: list(range(205, 280, 5))})
    assert steady.evaluation_starts(starts, ends, work, []).tolist() == starts
    # the backward on another thread (autograd's, on a GPU): the same, by its first op's time
    starts, ends, work, backward = _traced_iterations({200: [205, 215, 225, 235, 245, 255, 260, 265, 270, 275]})
    assert steady.evaluation_starts(starts, ends, work, [b + 1 for b in backward]).tolist() == [0, 100, 260, 300, 400]


def test_hf_generate_steps_are_as_long_as_the_programs_tokens() -> None:
    """On the real HF series the forward alone is 12.3 ms, 11 % under the program's own
    13.77 ms/token; the iteration (forward + the host work to the next forward) is the token."""
    d = json.loads((FIXTURES / "series" / "hf.json").read_text())
    forward = steady.critical_path_ns(d["host_start_ns"], d["gpu_end_ns"])
    iteration = steady.critical_path_ns(d["host_start_ns"], steady.iteration_ends_ns(d["gpu_start_ns"], d["gpu_end_ns"]))
    start = steady.steady_start(iteration).start
    own = d["own_ms_per_step"]
    assert float(np.mean(forward[start:])) / 1e6 < 0.95 * own  # the forward misses the host work
    assert float(np.mean(iteration[start:])) / 1e6 == pytest.approx(own, rel=0.05)


def test_there_are_series_fixtures() -> None:
    assert len(SERIES) >= 4  # the parametrized test above must not pass vacuously


def test_steady_series_keeps_the_predecessor_of_the_first_steady_step() -> None:
    # Host ran ahead: h = 0, 1, 2, 3; the GPU finishes every 10 ns. From step 2 on:
    # cp[2] = 30 - max(2, 20) = 10 (it was queued behind step 1, a warm-up step), cp[3] = 10;
    # lead[2] = 20 - 2 = 18, lead[3] = 30 - 3 = 27; one steady interval of 10 ns.
    s = steady.steady_series([0, 1, 2, 3], [10, 20, 30, 40], start=2)
    assert s.critical_path_ms.tolist() == [10e-6, 10e-6]
    assert s.host_lead_ms.tolist() == [18e-6, 27e-6]
    assert s.cadence.intervals == 1 and s.cadence.steps_per_s == pytest.approx(1e8)


def test_cadence_keeps_the_usual_host_time_between_steps() -> None:
    # A generate loop: each step is 4 ns of critical path, then 6 ns of host work (sampling)
    # before the next one — every gap is longer than a median step, but it is the usual gap,
    # not a pause; one prefill of 100 ns between two generate() calls is.
    h, g, t = [], [], 0
    for k in range(9):
        if k == 5:
            t += 100
        h.append(t)
        g.append(t + 4)
        t += 4 + 6
    # gaps before steps 1..8: 6, 6, 6, 6, 106, 6, 6, 6 -> median 6; 106 > 3 x 6 and > 4
    c = steady.cadence(h, g)
    assert (c.intervals, c.pauses) == (7, 1)
    assert c.steps_per_s == pytest.approx(7 / (7 * 10e-9))  # 10 ns per step, host time included


@pytest.mark.parametrize("synced", [True, False], ids=["synced", "queued"])
def test_a_host_ahead_decode_loop_pauses_for_the_prefill_between_generations(synced: bool) -> None:
    """The H200 shape of a gpt-fast decode loop (tests/programs/real/compiled_decode.py,
    2026-12-02): CUDA-graph replays of 1.39 ms issued far ahead of the GPU, and between
    generations an eager prefill of 24.5 ms. The step is timed as the loop iteration (the
    next call's GPU start ends it); the prefill belongs to no iteration, so the rate is the
    decode loop's, as the program's own timer around its decode loop reads it (there:
    1.407 ms/token; perfdoctor read 1.68 ms, the prefills counted in three iterations).
    ``synced``: the program synchronises around the prefill (that program), so host and GPU
    meet; ``queued``: it queues the prefill behind the replays and runs on, so only the
    stream reaching the next call shows the pause."""
    step, prefill, launch, per_gen, gens = 1_390_000, 24_500_000, 20_000, 63, 3
    h, gs, g = [], [], []
    gpu = host = 0
    for gen in range(gens):
        if gen:
            if synced:
                gpu += prefill
                host = gpu
            else:
                host += 3_000_000  # the host launches the eager prefill and goes on
                gpu = max(gpu, host) + prefill
        for _ in range(per_gen):
            h.append(host)
            gs.append(max(host, gpu))  # the stream reaches the call after what came before
            gpu = max(host, gpu) + step
            g.append(gpu)
            host += launch  # a replay costs the host far less than the GPU: it runs ahead
    ends = steady.iteration_ends_ns(gs, g)
    boundary = {per_gen * (i + 1) - 1 for i in range(gens)}
    for k in range(len(g) - 1):
        assert ends[k] == (g[k] if k in boundary else max(g[k], gs[k + 1]))
    c = steady.cadence(h, ends, gs)
    assert c.pauses == gens - 1
    assert 1e3 / c.steps_per_s == pytest.approx(step / 1e6, rel=0.01)
    if not synced:
        # the host alone sees no pause: it issued the next call long before the prefill ran
        assert steady.cadence(h, ends).pauses == 0


def test_a_data_loader_iteration_is_never_cut_at_a_pause() -> None:
    # torch's DataLoader fetch is only the head of the loop's body: fetches of 2 ns at 0,
    # 100, 400, 500. With pauses the slow second iteration (298 ns after its fetch, over 3x
    # the usual 98) would lose its body; as the loop's body it is the iteration, however
    # uneven (the CPU test loop on a loaded box: some iterations 3x the median).
    starts, ends = [0, 100, 400, 500], [2, 102, 402, 502]
    assert steady.iteration_ends_ns(starts, ends, stop_at_pauses=False).tolist() == [100, 400, 500, 502]
    assert steady.iteration_ends_ns(starts, ends).tolist() == [100, 102, 500, 502]


def test_slow_steps_counts_the_time_beyond_the_median_step():
    # Four 10 ms steps and a 40 ms one: 30 ms of the 80 lie beyond the median pace, less the
    # light pass's resolution (0.05 ms).
    s = steady.slow_steps(np.array([10.0, 10.0, 40.0, 10.0, 10.0]))
    assert (s.steps, s.median_ms, s.total_ms) == (5, 10.0, 80.0)
    assert s.beyond_ms == pytest.approx(30.0 - steady.RESOLUTION_MS)
    assert (s.slow, s.slow_min_ms, s.slow_max_ms) == (1, 40.0, 40.0)
    # Steps faster than the median cost nothing; 1.25x the median is not yet "slow".
    even = steady.slow_steps(np.array([8.0, 10.0, 12.5]))
    assert even.beyond_ms == pytest.approx(2.5 - steady.RESOLUTION_MS) and even.slow == 0 and even.slow_min_ms is None
    # Microsecond steps: a 100 us step among 57 us ones is 43 us past the median, within the
    # resolution: neither slow nor counted; a 200 us one is slow.
    tiny = steady.slow_steps(np.array([0.057] * 9 + [0.1]))
    assert tiny.beyond_ms == 0 and tiny.slow == 0
    assert steady.slow_steps(np.array([0.057] * 9 + [0.2])).slow == 1
    assert steady.slow_steps(np.array([])).steps == 0


# ---- torch loop ranges: the data loader's passes, the training iterations --------------


def _series(starts, ends=None):
    return {"host_start_ns": list(starts), "gpu_start_ns": None, "gpu_end_ns": list(ends if ends is not None else [s + 1 for s in starts])}


def test_loop_iterations_end_at_the_end_of_a_pass_and_leave_evaluation_batches_out() -> None:
    # two epochs of 3 training batches (fetches at 0, 10, 20 | 100, 110, 120), each followed by
    # an evaluation loop of 2 batches (fetches 40, 45 | 140, 145); every loader's pass ends
    # with a fetch that raised StopIteration (30 | 50 | 130 | 150); the optimizer steps at
    # 5, 15, 25, 105, 115, 125
    fetches = _series([0, 10, 20, 40, 45, 100, 110, 120, 140, 145])
    ended = _series([30, 50, 130, 150])
    marks = [5, 15, 25, 105, 115, 125]
    out = steady.loop_iterations(fetches, ended, marks)
    # each training batch runs to the next fetch, the last of an epoch to its loader's end
    assert out["host_start_ns"] == [0, 10, 20, 100, 110, 120]
    assert out["gpu_end_ns"] == [10, 20, 30, 110, 120, 130]
    assert steady.training_batches(fetches["host_start_ns"], ended["host_start_ns"], marks) == 6
    # before: the last batch of an epoch ran through the evaluation loop (20 -> 40), and the
    # evaluation batches were steps
    assert steady.loop_iterations(fetches, None, None)["gpu_end_ns"][:4] == [10, 20, 40, 45]
    # the second epoch's first batch (100) comes after the first epoch's end of pass (30) and
    # the evaluation loop's (50): a pass ended between it and the step before (20), no other
    assert out["pass_ended"] == [False, False, False, True, False, False]
    # without the ends of passes (Lightning's loops stop at the loader's length, never
    # exhausting it) the evaluation's fetches, which train nothing, say the same
    assert steady.loop_iterations(fetches, None, marks)["pass_ended"] == [False, False, False, True, False, False]
    # without either nothing is said
    assert "pass_ended" not in steady.loop_iterations(fetches, None, None)


def test_an_epoch_ended_by_break_keeps_its_training_batches_only() -> None:
    # `if i == 2: break`: the third fetch (20) returned a batch that never trained; the
    # training loader is never exhausted, the evaluation loader is (fetches 30, 35, end 40)
    fetches = _series([0, 10, 20, 30, 35, 100, 110, 120, 130, 135])
    ended = _series([40, 140])
    marks = [5, 15, 105, 115]
    out = steady.loop_iterations(fetches, ended, marks)
    assert out["host_start_ns"] == [0, 10, 100, 110]
    assert out["gpu_end_ns"] == [10, 20, 110, 120]
    # batches per optimizer step: 4 of 4, not the 10 fetches of each pass
    assert steady.training_batches(fetches["host_start_ns"], ended["host_start_ns"], marks) == 4



def test_a_prefetchers_last_batch_trains_after_the_end_of_its_pass() -> None:
    # Apex's data_prefetcher, two epochs of 4 batches: it fetches batch k+1 (F) before
    # training batch k (T, its optimizer marks): F0 0, F1 10, T0 12, F2 20, T1 22, F3 30,
    # T2 32, then the fetch that raises StopIteration (40), T3 42, and the prefetcher's next
    # next() raising again (50); the next epoch 100 later
    fetches = _series([0, 10, 20, 30, 100, 110, 120, 130])
    ended = _series([40, 50, 140, 150])
    marks = [12, 22, 32, 42, 112, 122, 132, 142]
    out = steady.loop_iterations(fetches, ended, marks)
    # the iteration from the first end of pass holds T3: a step, to the second end (before:
    # no step, 6 for 8 batches); F0's iteration holds no mark: none
    assert out["host_start_ns"] == [10, 20, 30, 40, 110, 120, 130, 140]
    assert out["gpu_end_ns"] == [20, 30, 40, 50, 120, 130, 140, 150]
    # the epoch's end lies between the step begun at 40 and the next epoch's first
    assert out["pass_ended"] == [False, False, False, False, True, False, False, False]
    assert steady.training_batches(fetches["host_start_ns"], ended["host_start_ns"], marks) == 8
    # the evaluation loop's prefetcher: its model's calls (3 after each batch's fetch) hold the work
    calls = {**_series([0, 10, 20, 30]), "host_end_ns": [2, 12, 22, 32]}
    assert steady.loop_iterations(calls, _series([40, 50]), None, [13, 23, 33, 43])["host_start_ns"] == [10, 20, 30, 40]

def _groups(steps: list[int], fetches: list[int], ended: list[int]) -> list[tuple[int, int]]:
    """Each optimizer step's iteration as (its group's first fetch, the first fetch after it)."""
    every = sorted(fetches + ended)
    _, first, after, _ = steady.step_groups(steps, every, [f in ended for f in every])
    return [(every[a], every[b]) for a, b in zip(first, after)]


def _pass_ended(steps: list[int], fetches: list[int], ended: list[int]) -> list[bool]:
    """Per optimizer step kept, whether a pass ended between the step before and its group."""
    every = sorted(fetches + ended)
    return steady.step_groups(steps, every, [f in ended for f in every])[3].tolist()


def test_gradient_accumulation_counts_every_batch_and_its_steps_are_their_groups() -> None:
    # 2 epochs of 4 batches, the optimizer every 2nd batch (steps at 15, 35 | 115, 135)
    fetches = _series([0, 10, 20, 30, 100, 110, 120, 130])
    ended = _series([40, 140])
    steps = _series([15, 35, 115, 135])
    assert steady.training_batches(fetches["host_start_ns"], ended["host_start_ns"], steps["host_start_ns"]) == 8
    # an optimizer step closes its group: its iteration runs from the group's first fetch to
    # the first fetch after the step (the next group's, or its pass's end: 35 -> 40), never
    # through the gap between the epochs (before: 15 to 35, 35 to 40, each epoch's first
    # group in no step)
    assert _groups(steps["host_start_ns"], fetches["host_start_ns"], ended["host_start_ns"]) == [(0, 20), (20, 40), (100, 120), (120, 140)]
    # the epoch's end (40) lies between the second step's iteration and the third's only
    assert _pass_ended(steps["host_start_ns"], fetches["host_start_ns"], ended["host_start_ns"]) == [False, False, True, False]


def test_an_optimizer_step_never_spans_the_validation_after_a_break() -> None:
    # train_eval.py --max-iters 4 --accum-steps 2: steps at 15, 35 | 115, 135; each epoch's
    # 5th fetch (40 | 140) meets `break`, then 2 validation batches (50, 60 | 150, 160) and the
    # fetch that raised StopIteration (70 | 170). The break's fetch ends the epoch's last step,
    # and the next epoch's first group begins after the validation's end of pass: before,
    # 35 ran to 115 through the validation
    fetches, raised, steps = [0, 10, 20, 30, 40, 50, 60, 100, 110, 120, 130, 140, 150, 160], [70, 170], [15, 35, 115, 135]
    assert _groups(steps, fetches, raised) == [(0, 20), (20, 40), (100, 120), (120, 140)]
    # the validation's end of pass (70) between the epochs; the break's fetch (40) ended none
    assert _pass_ended(steps, fetches, raised) == [False, False, True, False]
    # not told which fetch raised (a trace that shows no end of pass), a group is the median
    # count of fetches between steps: the same iterations
    assert _groups(steps, fetches + raised, []) == [(0, 20), (20, 40), (100, 120), (120, 140)]
    # an epoch's remainder stepped at its end (after 4, 4 and 2 batches) is a short group; the
    # run's last step, no fetch after it, has no iteration
    assert _groups([35, 75, 95], [0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100], []) == [(0, 40), (40, 80), (80, 100)]
    assert _groups([5, 15], [0, 10], []) == [(0, 10)]


def test_a_validation_that_never_exhausts_its_loader_parts_two_groups() -> None:
    # Lightning, accumulate_grad_batches=2, a validation of 2 batches every 4 training
    # batches: fetches 0, 10 (step 15), 20, 30 (step 35), validation 40, 45, then 50, 60
    # (step 65), 70, 80 (step 85), a fetch at 90 after; Lightning's loops stop at the
    # loaders' lengths, so no fetch raises StopIteration
    fetches, steps = [0, 10, 20, 30, 40, 45, 50, 60, 70, 80, 90], [15, 35, 65, 85]
    assert _groups(steps, fetches, []) == [(0, 20), (20, 40), (50, 70), (70, 90)]
    # the validation's fetches are in no group: a pass ended before the third (before: no
    # pass ended anywhere, and the validation was inside the rate's intervals)
    assert _pass_ended(steps, fetches, []) == [False, False, True, False]


def test_evaluation_fetches_hold_work_and_none_that_trains() -> None:
    # fetches at 0, 10 (training: a grad call at 2, 12), 20, 30 (validation: no-grad calls at
    # 22, 32), 40 (a fetch with no work after it), 50 (training: 52)
    fetches, work, grad = [0, 10, 20, 30, 40, 50], [2, 12, 22, 32, 52], [2, 12, 52]
    assert steady.evaluation_fetches(fetches, work, grad).tolist() == [False, False, True, True, False, False]
    assert not steady.evaluation_fetches(fetches, work, []).any()  # nothing trains: nothing said
    # Lightning, accumulation 2, validation after every optimizer step: fetches 0, 10 (step
    # 15), validation 20, 25, then 30, 40 (step 45), validation 50, 55, then 60, 70 (step 75),
    # 80: counted as ends of passes the validation's fetches leave groups of 2 (before: each
    # group held the validation before it, and the first, shorter, was left out)
    fetches, steps = [0, 10, 20, 25, 30, 40, 50, 55, 60, 70, 80], [15, 45, 75]
    evaluating = [20, 25, 50, 55]
    assert _groups(steps, fetches, []) == [(20, 50), (50, 80)]
    apart = [f in evaluating for f in fetches]
    _, first, after, ended = steady.step_groups(steps, fetches, apart)
    assert [(fetches[a], fetches[b]) for a, b in zip(first, after)] == [(0, 20), (30, 50), (60, 80)]
    assert ended.tolist() == [False, True, True]
    assert steady.training_batches([f for f in fetches if f not in evaluating], evaluating, steps) == 6


def test_one_optimizer_step_per_epoch_is_its_epochs_batches() -> None:
    # train_eval.py --batches 4 --accum-steps 4: each epoch's 4 batches (0..30 | 100..130),
    # its step (35 | 135), the fetch that raised (40 | 140), 2 validation batches and their
    # end of pass (50, 60, 70 | 150, 160, 170). Every span between two steps ends a pass: the
    # group is the fetches after its last end. Before: each step ran to the next, through the
    # validation and the next epoch, and the last was its own optimizer step
    fetches, raised, steps = [0, 10, 20, 30, 50, 60, 100, 110, 120, 130, 150, 160], [40, 70, 140, 170], [35, 135]
    assert _groups(steps, fetches, raised) == [(0, 40), (100, 140)]
    assert steady.training_batches(fetches, raised, steps) == 8
    # the training pass's end (40), the validation and its end (70) lie between the two
    assert _pass_ended(steps, fetches, raised) == [False, True]
    assert _pass_ended([], fetches, raised) == [] and _pass_ended(steps, [], []) == []


def test_a_loop_without_a_data_loader_has_one_iteration_per_optimizer_step() -> None:
    # for step in range(4), no DataLoader: a forward (work) at 0, 10, 20, 30, the optimizer's
    # step at 6, 16, 26, 36 (each 2 long), zero_grad at the iteration's end: 8, 18, 28, 38
    work = [0, 10, 20, 30]
    opt = _series([6, 16, 26, 36], [8, 18, 28, 38])
    out = steady.optimizer_iterations(_series([8, 18, 28, 38]), opt, work)
    # the first iteration, before any zero_grad, from its forward to the first zero_grad
    # (before: 3 steps for 4 iterations, from one zero_grad to the next)
    assert out["host_start_ns"] == [0, 8, 18, 28]
    assert out["gpu_end_ns"] == [8, 18, 28, 38]
    assert steady.loop_iterations(_series([8, 18, 28, 38]))["host_start_ns"] == [8, 18, 28]
    # zero_grad at the iteration's start (the common shape): 0, 10, 20, 30, the forward at
    # 1, 11, 21, 31: the last iteration runs from its zero_grad to its optimizer step's end
    out = steady.optimizer_iterations(_series([0, 10, 20, 30]), opt, [1, 11, 21, 31])
    assert out["host_start_ns"] == [0, 10, 20, 30]
    assert out["gpu_end_ns"] == [10, 20, 30, 38]
    # zero_grad after the forward (forward 0, zero_grad 2, backward, step 6): the same
    # (steady.closed_by_steps, where a zero_grad is chosen, has them begin at the forward)
    out = steady.optimizer_iterations(_series([2, 12, 22, 32]), opt, work)
    assert out["host_start_ns"] == [2, 12, 22, 32]
    assert out["gpu_end_ns"] == [12, 22, 32, 38]
    # model.zero_grad() (no optimizer range): the optimizer's step marks the iteration; a
    # forward before the loop (-50: a sanity check) is no part of the first iteration
    out = steady.optimizer_iterations(opt, _series([]), [-50, 0, 10, 20, 30])
    assert out["host_start_ns"] == [0, 6, 16, 26]
    assert out["gpu_end_ns"] == [6, 16, 26, 36]
    # an evaluation after the loop (forwards at 50, 60), no optimizer step: no iteration
    out = steady.optimizer_iterations(_series([0, 10, 20, 30]), opt, [1, 11, 21, 31, 50, 60])
    assert len(out["host_start_ns"]) == 4
    # no work known: nothing says where the first iteration began, today's reading
    assert steady.optimizer_iterations(_series([8, 18, 28, 38]), opt, [])["host_start_ns"] == [8, 18, 28]
    # ... but the last one's optimizer step ends it, from its zero_grad at the loop's top
    # (higher's MAML loop, a new module class per task, notes no work: 199 steps for 200)
    out = steady.optimizer_iterations(_series([0, 10, 20, 30]), opt, [])
    assert out["host_start_ns"] == [0, 10, 20, 30] and out["gpu_end_ns"] == [10, 20, 30, 38]


def test_an_optimizer_step_ends_its_iteration_though_fewer_marks_come_before_the_first() -> None:
    # zero_grad at the top (0, 10, 20, 30) and again after the step (8, 18, 28, 38), a forward
    # at 1, 11, 21, 31, the optimizer's step (the mark, closing) at 6, 16, 26, 36: two zero_grads
    # between two steps, one before the first. The first iteration is its forward and the
    # zero_grad before it; the last step ends the last (before: the first in none, and a
    # fourth step of the trailing zero_grad alone)
    steps, zero_grads = _series([6, 16, 26, 36], [8, 18, 28, 38]), _series([0, 8, 10, 18, 20, 28, 30, 38])
    out = steady.optimizer_iterations(steps, zero_grads, [1, 11, 21, 31], closing=True)
    assert out["host_start_ns"] == [0, 6, 16, 26] and out["gpu_end_ns"][0] == 6
    # a forward before the loop (-50, a sanity check) is no part of the first; SAM zeroes only
    # after work (first_step after the first backward, second_step after the update): the
    # first iteration from its first forward
    out = steady.optimizer_iterations(steps, zero_grads, [-50, 1, 11, 21, 31], closing=True)
    assert out["host_start_ns"] == [0, 6, 16, 26]
    sam = _series([3, 8, 13, 18, 23, 28, 33, 38])  # the step at 6, 16, ... (base SGD), zero_grads after each pass
    out = steady.optimizer_iterations(steps, sam, [1, 4, 11, 14, 21, 24, 31, 34], closing=True)
    assert out["host_start_ns"] == [1, 6, 16, 26] and len(out["gpu_end_ns"]) == 4


def test_marks_inside_the_iterations_give_iterations_closed_by_the_optimizer_steps() -> None:
    # forward (work) at 5, 27, 47, zero_grad at 10, 30, 50, the step at 20-25, 40-45, 60-65
    zero_grad, step = _series([10, 30, 50], [11, 31, 51]), _series([20, 40, 60], [25, 45, 65])
    out = steady.closed_by_steps(zero_grad, step, [5, 27, 47])
    assert out == {"host_start_ns": [5, 25, 45], "gpu_start_ns": None, "gpu_end_ns": [25, 45, 65], "mark": [0, 1, 2]}
    # optimizer_iterations' loop (forward 0, zero_grad 2, step 6-8): from the step before's
    # end, the first from its forward (before: from one zero_grad to the next, [2, 12),
    # holding the next iteration's forward, the first forward in none)
    out = steady.closed_by_steps(_series([2, 12, 22, 32]), _series([6, 16, 26, 36], [8, 18, 28, 38]), [0, 10, 20, 30])
    assert out["host_start_ns"] == [0, 8, 18, 28] and out["gpu_end_ns"] == [8, 18, 28, 38]
    # on a GPU: the step's host end begins the next iteration, its GPU end ends the one before
    # (the stream reaching the next: it finished that step)
    gpu = {**_series([20, 40, 60], [28, 48, 68]), "host_end_ns": [25, 45, 65]}
    out = steady.closed_by_steps({**zero_grad, "gpu_start_ns": [10, 30, 50]}, gpu, [5, 27, 47])
    assert out["host_start_ns"] == [5, 25, 45] and out["gpu_start_ns"] == [5, 28, 48] and out["gpu_end_ns"] == [28, 48, 68]
    # two calls of work per iteration (a model and its loss): the first iteration from the
    # earliest, after a gap longer than the median iteration (20: a warm-up long before is
    # not in it); a record that begins after the first forward (a trace's window) leaves it out
    out = steady.closed_by_steps(zero_grad, step, [-8, 7, 26, 27, 46, 47])
    assert out["host_start_ns"] == [-8, 25, 45]
    out = steady.closed_by_steps(zero_grad, step, [-1000, 7, 26, 27, 46, 47])
    assert out["host_start_ns"] == [7, 25, 45]
    # ... unless that work ran until the next began (its ends known: a trace's first forward,
    # one slow op, 1 ms of it with no other op starting): no gap, the first from it
    ends = [6, 9, 26, 28, 46, 48]
    assert steady.closed_by_steps(zero_grad, step, [-1000, 7, 26, 27, 46, 47], ends)["host_start_ns"] == [-1000, 25, 45]
    ends[0] = -990  # it ended long before the next: a gap
    assert steady.closed_by_steps(zero_grad, step, [-1000, 7, 26, 27, 46, 47], ends)["host_start_ns"] == [7, 25, 45]
    out = steady.closed_by_steps(zero_grad, step, [5, 26, 27, 46, 47])
    assert out["host_start_ns"] == [25, 45] and out["mark"] == [1, 2]
    # the last mark with no step after it (the record ends): no iteration
    assert steady.closed_by_steps(_series([10, 30, 50, 70]), step, [5, 27, 47, 67])["mark"] == [0, 1, 2]
    # zero_grad at the iteration's start (forward after it) or its end: another shape
    assert steady.closed_by_steps(_series([10, 30, 50]), step, [12, 32, 52]) is None
    assert steady.closed_by_steps(_series([30, 50]), step, [5, 35]) is None
    # no work, one mark, no step: nothing known
    assert steady.closed_by_steps(zero_grad, step, []) is None
    assert steady.closed_by_steps(_series([10]), step, [5]) is None
    assert steady.closed_by_steps(zero_grad, _series([]), [5, 27, 47]) is None


def test_an_optimizer_step_with_a_closure_holds_its_iteration() -> None:
    # optimizer.step(closure) at 0, 10, 20, 30 (each 8 long), the closure's zero_grad inside
    # it at 1, 11, 21, 31 (Adam: one call per step), no work known (a trace's work leaves out
    # what runs inside the optimizer's ranges): each step to the next, the last to its end
    step = _series([0, 10, 20, 30], [8, 18, 28, 38])
    out = steady.optimizer_iterations(step, _series([1, 11, 21, 31]), [])
    assert out["host_start_ns"] == [0, 10, 20, 30] and out["gpu_end_ns"] == [10, 20, 30, 38]
    # LBFGS: several closure calls per step, the last step fewer (it converged): the same
    out = steady.optimizer_iterations(step, _series([1, 3, 5, 11, 13, 15, 21, 23, 25, 31]), [])
    assert out["host_start_ns"] == [0, 10, 20, 30] and out["gpu_end_ns"] == [10, 20, 30, 38]
    # on a GPU, zero_grad at the iteration's start (0, 10, 20, 30), a forward (1, 11, ...), the
    # step at 6, 16, ...: its GPU end (12) lies past the next zero_grad (10) when the host runs
    # ahead, its host end (7) does not: no closure, the step closes its iteration
    gpu = {**_series([6, 16, 26, 36], [12, 22, 32, 42]), "host_end_ns": [7, 17, 27, 37]}
    out = steady.optimizer_iterations(gpu, _series([0, 10, 20, 30]), [1, 11, 21, 31])
    assert out["host_start_ns"] == [0, 6, 16, 26]


def test_time_inside_sums_each_ranges_overlap_with_each_span() -> None:
    # ranges [10, 15] (5 ns) and [20, 30] (10 ns): from 0 to 0 and 10 nothing, to 12 two of the
    # first, to 15 and 18 all 5 of it, to 25 five more, to 40 all 15
    ranges = {"start_ns": [10, 20], "end_ns": [15, 30]}
    got = steady.time_inside([0] * 7, [0, 10, 12, 15, 18, 25, 40], ranges)
    assert got.tolist() == [0, 0, 2, 5, 5, 10, 15]
    assert steady.time_inside([5, 6], [6, 7], {"start_ns": [], "end_ns": []}).tolist() == [0, 0]
    # between 0 and 15 all of the first (5); between 12 and 40, 3 of it and all 10 of the second
    assert steady.time_inside([0, 12], [15, 40], ranges).tolist() == [5, 13]


def test_within_says_which_times_lie_inside_one_of_the_ranges() -> None:
    # ranges [10, 20] and [30, 40]: their ends included, the gap between them and before
    # the first outside
    assert steady.within([5, 10, 15, 20, 25, 30, 40, 45], [10, 30], [20, 40]).tolist() == [
        False, True, True, True, False, True, True, False]
    assert steady.within([5], [], []).tolist() == [False]


def test_steps_that_compiled_leave_the_rate_and_the_p50_unless_most_steps_compile() -> None:
    # steps of 10 ms back to back (0-10, 10-20, ...); torch.compile compiled from 33 to 37
    # (inside the 4th step) and from 95 to 200 (the 10th's end and after: 5 ns of it inside)
    h = [10 * k for k in range(10)]
    g = [10 * (k + 1) for k in range(10)]
    g[3] = 38  # the step that compiled
    compiled = steady.time_inside(h, g, {"start_ns": [33, 95], "end_ns": [37, 200]})
    assert compiled.tolist() == [0, 0, 0, 4, 0, 0, 0, 0, 0, 5]
    assert steady.time_inside(h, g, None).tolist() == [0] * 10
    s = steady.steady_series(h, g, 0, compiled_ns=[0, 0, 0, 4, 0, 0, 0, 0, 0, 0])
    # the 4th step's interval (30 -> 38) left out, and its critical path
    assert s.cadence.compiles == 1 and s.cadence.compiled_ms == pytest.approx(8e-6)
    assert s.cadence.intervals == 8 and s.critical_path_ms.size == 9
    # half the steps compile or more: recompiling is the program's steady work, kept
    s = steady.steady_series(h, g, 0, compiled_ns=[1] * 5 + [0] * 5)
    assert s.cadence.compiles == 0 and s.cadence.compiles_kept == 5 and s.critical_path_ms.size == 10
    # from the steady start on only: a compiling warm-up step is no steady step anyway
    s = steady.steady_series(h, g, 4, compiled_ns=[1, 1, 1, 1] + [0] * 6)
    assert s.cadence.compiles == 0 and s.cadence.compiles_kept == 0 and s.critical_path_ms.size == 6


def test_training_batches_leave_out_an_evaluation_loop_that_did_not_end_its_pass() -> None:
    # Lightning's fit: a sanity check of 2 validation batches (fetches 0, 5) before training,
    # 4 training batches (10..40, optimizer steps at 12..42), 3 validation batches at the
    # epoch's end (50, 55, 60), 4 more (70..100, steps at 72..102); no loader raises
    # StopIteration, so all are one pass. 8 trained (13 before: every fetch up to the last step)
    fetches = [0, 5, 10, 20, 30, 40, 50, 55, 60, 70, 80, 90, 100]
    assert steady.training_batches(fetches, [], [12, 22, 32, 42, 72, 82, 92, 102]) == 8
    # with gradient accumulation over 2 batches (steps at 22, 42 | 82, 102): the groups hold
    # 4, 2, 5, 2 fetches; a step takes 2 batches, so 8 trained
    assert steady.training_batches(fetches, [], [22, 42, 82, 102]) == 8
    # a last group short of the rest (an epoch's remainder stepped): every batch trained
    assert steady.training_batches([0, 10, 20, 30, 40], [], [15, 35, 45]) == 5


def test_loop_iterations_without_ends_of_passes_or_marks_are_the_plain_iterations() -> None:
    calls = {"host_start_ns": [0, 10, 25], "gpu_start_ns": [2, 12, 30], "gpu_end_ns": [8, 20, 40]}
    out = steady.loop_iterations(calls)
    want = steady.iteration_ends_ns(calls["gpu_start_ns"], calls["gpu_end_ns"], stop_at_pauses=False)[:-1].tolist()
    assert out == {"host_start_ns": [0, 10], "gpu_start_ns": [2, 12], "gpu_end_ns": want}
    # marks in fewer than two iterations: the loop is kept whole (an evaluation-only loop
    # of a program that stepped an optimizer once elsewhere)
    assert steady.loop_iterations(calls, None, [11])["host_start_ns"] == [0, 10]
    assert steady.training_batches([0, 10, 25], [], []) == 3


def test_a_joined_gap_is_never_a_pause() -> None:
    # Calls of 10 ns, 5 ns of host work after each but one, where 100 ns of the iteration's
    # own work (an assisted generate's draft forwards) came before the next call: a pause by
    # the rule, unless the caller knows that gap holds the iteration's work.
    gs = [0, 15, 30, 145, 160]
    ge = [10, 25, 40, 155, 170]
    assert steady.iteration_ends_ns(gs, ge).tolist() == [15, 30, 40, 160, 170]
    joined = [False, False, True, False]
    assert steady.iteration_ends_ns(gs, ge, joined=joined).tolist() == [15, 30, 145, 160, 170]


def test_a_workers_waits_for_another_thread_end_its_iterations_and_are_pauses_of_its_rate() -> None:
    # a server's worker: calls of 0.1 ms at 0, 1, 2, 3 ms; it waits on its queue from 0.2 ms
    # after each call to 0.1 ms before the next (another thread's wait, at 0.5-0.9 ms, is not its)
    h, g = [0, 1_000_000, 2_000_000, 3_000_000], [100_000, 1_100_000, 2_100_000, 3_100_000]
    waits = {"tid": [7, 7, 7, 8], "start_ns": [200_000, 1_200_000, 2_200_000, 500_000],
             "end_ns": [900_000, 1_900_000, 2_900_000, 900_000]}
    idle, waited, resumed = steady.waits_between(h, [7] * 4, waits)
    assert idle.tolist() == [200_000, 1_200_000, 2_200_000, -1] and waited.tolist() == [0, 700_000, 700_000, 700_000]
    assert resumed.tolist() == [-1, 900_000, 1_900_000, 2_900_000]  # where the next request's service begins
    ends = steady.iteration_ends_ns(h, g, idle_from=idle)
    assert ends.tolist() == [200_000, 1_200_000, 2_200_000, 3_100_000]  # before: each ran to the next call
    c = steady.cadence(h, ends, h, waited)
    # every interval holds a 0.7 ms wait: left out, the rest kept (0.3, 0.3 and 0.2 ms: the
    # last step has no wait after it, its iteration its own call)
    assert (c.pauses, c.waits, c.intervals) == (3, 3, 3) and c.steps_per_s == pytest.approx(3 / 0.8e-3)
    assert c.waited_ms == pytest.approx(2.1) and c.with_pauses_per_s == pytest.approx(3 / 2.9e-3)
    # without the waits (a trace of another tool, an older bundle) nothing changes
    assert steady.waits_between(h, None, waits)[0].tolist() == [-1] * 4


def test_a_wait_while_the_rest_of_the_process_worked_is_the_steps_own() -> None:
    # the worker above, but its second wait is for a producer thread that worked meanwhile
    # (worked 1): the step's own wait for its input, kept in its iteration; the others as before
    h = [0, 1_000_000, 2_000_000, 3_000_000]
    waits = {"tid": [7, 7, 7], "start_ns": [200_000, 1_200_000, 2_200_000], "end_ns": [900_000, 1_900_000, 2_900_000],
             "worked": [0, 1, 0]}
    idle, waited, resumed = steady.waits_between(h, [7] * 4, waits)
    assert idle.tolist() == [200_000, -1, 2_200_000, -1] and waited.tolist() == [0, 700_000, 0, 700_000]
    assert resumed.tolist() == [-1, 900_000, -1, 2_900_000]
    # every wait worked: none is idle, as with no waits at all
    busy = {**waits, "worked": [1, 1, 1]}
    assert [a.tolist() for a in steady.waits_between(h, [7] * 4, busy)] == [a.tolist() for a in steady.waits_between(h, [7] * 4, None)]
    # two workers of a pool run the step: the other's work is no producer's, every wait idle
    pool = {"tid": [7, 7, 8], "start_ns": [200_000, 2_200_000, 1_200_000], "end_ns": [900_000, 2_900_000, 1_900_000], "worked": [1, 1, 1]}
    assert steady.waits_between(h, [7, 8, 7, 8], pool)[0].tolist() == [200_000, 1_200_000, -1, -1]


def test_an_evaluation_loops_fetch_that_a_break_left_begins_no_iteration() -> None:
    # `for i, x in enumerate(loader): if i == 2: break; model(x)`, twice: fetches at 0, 10,
    # 20 (break) | 30, 40, 50 (break), each 2 long; the model's calls at 3, 13 | 33, 43. The
    # break's fetch holds no work after it (its iteration runs into the next pass): no step
    fetches = {**_series([0, 10, 20, 30, 40, 50]), "host_end_ns": [2, 12, 22, 32, 42, 52]}
    out = steady.loop_iterations(fetches, None, None, [3, 13, 33, 43])
    assert out["host_start_ns"] == [0, 10, 30, 40]
    # the work inside a fetch (a transform that is a module) is not the loop's: the same
    assert steady.loop_iterations(fetches, None, None, [1, 3, 13, 21, 33, 43])["host_start_ns"] == [0, 10, 30, 40]
    # without work seen (a loop of no module), every iteration, as before
    assert steady.loop_iterations(fetches, None, None, [])["host_start_ns"] == [0, 10, 20, 30, 40]


def test_a_pools_workers_steps_are_each_threads_own_series() -> None:
    # two workers of a pool, their 0.5 ms calls interleaved: thread 7 at 0, 2, 4 ms, thread 8
    # at 1, 3, 5 ms; each waits on the work queue from 0.6 ms after its call to 0.1 ms
    # before its next. Before, thread 7's step 0 "resumed" on thread 7's wait for step 1 (8's)
    h = [0, 1_000_000, 2_000_000, 3_000_000, 4_000_000, 5_000_000]
    tid = [7, 8, 7, 8, 7, 8]
    waits = {"tid": [7, 7, 8, 8], "start_ns": [600_000, 2_600_000, 1_600_000, 3_600_000],
             "end_ns": [1_900_000, 3_900_000, 2_900_000, 4_900_000]}
    idle, waited, resumed = steady.waits_between(h, tid, waits)
    assert idle.tolist() == [600_000, 1_600_000, 2_600_000, 3_600_000, -1, -1]
    assert waited.tolist() == [0, 0, 1_300_000, 1_300_000, 1_300_000, 1_300_000]
    assert resumed.tolist() == [-1, -1, 1_900_000, 2_900_000, 3_900_000, 4_900_000]
    # one thread alone reads as before
    assert steady.waits_between(h[::2], tid[::2], waits)[1].tolist() == [0, 1_300_000, 1_300_000]


def test_the_light_pass_ends_a_pool_workers_iteration_at_its_own_threads_next_call() -> None:
    from perfdoctor.record.light import call_iterations

    # the pool above on a CPU (host clock): each call's iteration ends where its thread began
    # to wait, never at the other thread's next call (1 ms: the other worker's request)
    h = [0, 1_000_000, 2_000_000, 3_000_000, 4_000_000, 5_000_000]
    calls = {"host_start_ns": h, "gpu_start_ns": None, "gpu_end_ns": [t + 500_000 for t in h], "tid": [7, 8, 7, 8, 7, 8]}
    waits = {"tid": [7, 7, 8, 8], "start_ns": [600_000, 2_600_000, 1_600_000, 3_600_000],
             "end_ns": [1_900_000, 3_900_000, 2_900_000, 4_900_000]}
    it = call_iterations(calls, None, waits)
    assert it["host_start_ns"] == [0, 1_000_000, 1_900_000, 2_900_000, 3_900_000, 4_900_000]
    assert it["gpu_end_ns"] == [600_000, 1_600_000, 2_600_000, 3_600_000, 4_500_000, 5_500_000]


def test_a_wait_while_a_process_pool_worked_is_the_iterations_not_a_pause() -> None:
    from perfdoctor.record.light import call_iterations

    # pool_classify.py on the H100: 4 workers deliver their batches 4 at a time, so the
    # main thread's forward (0.5 ms) is followed by ~0.5 ms of host work three times in four
    # and once by a ~120 ms wait in imap's next() while the workers tokenize (worked: 1).
    # That wait is 3x the usual time between calls: read as a pause, each such iteration
    # ended at its forward (p50 0.70 ms for the program's 39 ms mean)
    h, t = [], 0
    for k in range(16):
        h.append(t)
        t += 1_000_000 if k % 4 != 3 else 121_000_000
    calls = {"host_start_ns": h, "gpu_start_ns": None, "gpu_end_ns": [x + 500_000 for x in h], "tid": [7] * len(h)}
    waits = {"tid": [7] * 4, "start_ns": [h[k] + 600_000 for k in (3, 7, 11, 15)],
             "end_ns": [h[k] + 120_800_000 for k in (3, 7, 11, 15)], "worked": [1, 1, 1, 0]}
    it = call_iterations(calls, None, waits)
    ms = [(e - s) / 1e6 for s, e in zip(it["host_start_ns"], it["gpu_end_ns"])]
    assert ms[:15] == [1.0, 1.0, 1.0, 121.0] * 3 + [1.0, 1.0, 1.0]
    assert steady.fed_between(h, calls["tid"], waits).tolist() == [k % 4 == 3 and k < 12 for k in range(16)]
    # an idle wait (worked 0: a server's worker blocked on its request queue) still ends it
    waits["worked"] = [0, 0, 0, 0]
    it = call_iterations(calls, None, waits)
    assert [(e - s) / 1e6 for s, e in zip(it["host_start_ns"], it["gpu_end_ns"])][3] == 0.6


def test_batches_sorted_longest_first_get_faster_step_by_step_and_are_no_warm_up() -> None:
    # embed_retrieval.py (sentence-transformers' encode sorts its inputs longest first): 32
    # batches of 8 queries, 128 down to 8 tokens, on this CPU box. The later steps are a kept
    # regime of the program's own, and the rule left out the first 5 (16.7-7.7 ms) as warm-up
    # though nothing sets them apart from the 6.9 ms after them: the rate read 2.96 ms for the
    # program's 3.65. Only a step slower than each of the next few is cold.
    ms = [16.68, 9.92, 8.95, 8.74, 7.71, 6.91, 6.29, 6.0, 5.51, 5.47, 5.02, 4.32, 4.07, 4.01, 3.62, 3.51, 3.41, 2.96,
          2.86, 2.69, 2.41, 2.22, 2.02, 2.02, 1.67, 1.55, 1.3, 1.08, 0.98, 0.8, 0.68, 0.55]
    s = steady.steady_start(_ms(ms))
    assert s.start == 1 and s.slow_stretch is None
    assert "get faster step by step" in s.reason and "each of the 5 steps after them" in s.reason
    # the same decline after a cold start far slower than all of it: the cold steps only
    s = steady.steady_start(_ms([400.0, 150.0] + ms[1:]))
    assert s.start == 2
    # a noisy run of it on this loaded box: step 3 is 1.25x each of the next three, not of the next five
    noisy = [15.98, 14.34, 10.15, 10.64, 8.34, 7.53, 7.14, 7.21, 8.92, 6.74, 9.06, 4.94, 4.52, 4.34, 5.68, 5.65, 4.18,
             5.46, 3.06, 2.68, 2.91, 3.06, 2.79, 2.67, 2.36, 6.38, 1.79, 2.29, 1.15, 0.93, 0.9, 0.59]
    assert steady.steady_start(_ms(noisy)).start == 2
    # and under the suite's load, torch's two threads fighting the box's other work: a spike
    # (22.7 ms) just before the kept regime is 1.25x each of the next five, not a drop
    spiky = [90.0, 15.7, 11.0, 11.7, 22.7, 9.6, 13.4, 7.4, 3.0, 7.3, 7.4, 7.2, 2.5, 6.4, 6.0, 1.9, 1.7, 5.7, 1.6, 5.5, 1.3,
             1.2, 5.2, 1.1, 1.0, 0.9, 4.9, 0.8, 0.6, 0.6, 0.5, 0.4]
    assert steady.steady_start(_ms(spiky)).start == 1


def test_a_warm_up_drop_before_a_kept_regime_still_ends_the_warm_up() -> None:
    # a kept slow stretch that begins right after a warm-up which does drop into it: the
    # warm-up's steps are each slower than the next few, so the cut stays where it was
    cp = _ms([200.0, 90.0, 60.0] + _noisy(14.4, 13, 1) + _noisy(20.0, 16, 2) + _noisy(14.4, 16, 3))
    plain = steady.steady_start(cp)
    assert plain.start == 3


def test_a_loader_that_fetches_ahead_steps_its_last_group_after_the_end_of_its_pass() -> None:
    # accelerate's DataLoaderShard, 2 epochs of 6 batches, the optimizer every 4th and at the
    # loader's end: it fetches batch k+1 before yielding batch k, so the epoch's fetches are
    # 0, 10, 20, 30, 40 (step after batch 3: 45), 50, the fetch that raised at 60 and then
    # batch 5 trains and steps (65); the evaluation's loader (70, raised 80) and the next
    # epoch 100 later
    fetches = [0, 10, 20, 30, 40, 50, 70, 100, 110, 120, 130, 140, 150, 170]
    raised, steps = [60, 80, 160, 180], [45, 65, 145, 165]
    # the last step's group is 50 and the end of pass at 60, to the evaluation's first fetch
    # (before: that end cut it, the group empty, the step left out: 2 steps for 4); the
    # epoch's remainders (2 batches) do not set the group's size: the first group holds all
    # 5 fetches before its step, batch 0's too
    assert _groups(steps, fetches, raised) == [(0, 50), (50, 70), (100, 150), (150, 170)]
    # the evaluation's end of pass (80) between the epochs, not the training loader's (60)
    assert _pass_ended(steps, fetches, raised) == [False, False, True, False]


def test_a_loader_that_fetches_ahead_trains_as_many_batches_as_it_fetched() -> None:
    # accel_train.py's test config: 2 epochs of 10 batches, accumulation 4 counted across
    # epochs (steps after batches 3, 7, 9 | 11, 15, 19: groups of 4, 4, 2 | 2, 4, 4), its
    # DataLoaderShard fetching batch k+1 (10 apart) before batch k trains (k's step 5 after
    # k+1's fetch), the fetch that raised at 100 before batch 9 trains; then 3 evaluation
    # batches (200..220, raised 230), the next epoch 1000 later. The program's RESULT: 20
    # micro-batches. Before: 21, the raised fetch counted as a batch and the second epoch's
    # first group (3 fetches: 2 batches and the next one fetched ahead) kept whole
    fetches, raised, steps = [], [], []
    for epoch, stepped in enumerate(((3, 7, 9), (1, 5, 9))):
        base = 1000 * epoch
        fetches += [base + 10 * k for k in range(10)] + [base + 200, base + 210, base + 220]
        raised += [base + 100, base + 230]
        steps += [base + 10 * (k + 1) + 5 for k in stepped]
    assert steady.training_batches(fetches, raised, steps) == 20
    # no evaluation loop: no end of pass but the training loader's own, each followed by its step
    train = [f for f in fetches if f % 1000 < 200]
    assert steady.training_batches(train, [r for r in raised if r % 1000 == 100], steps) == 20


def test_an_iteration_of_several_optimizer_steps_after_a_rollout_is_one_step() -> None:
    # CleanRL's PPO, 3 iterations 20 apart: a rollout of 10 forwards (0..9), then 2
    # minibatch updates, each a forward (10, 13), zero_grad (11, 14) and the optimizer's
    # step (12, 15). Between two zero_grads 1 call, or 11 across the rollout (10 + the next
    # update's forward): 22 of the 25 calls between the first mark and the last
    work = [i + 20 * k for k in range(3) for i in (*range(10), 10, 13)]
    zero_grad = [11, 14, 31, 34, 51, 54]
    assert steady.mark_groups(zero_grad, work).tolist() == [0, 2, 4]
    out = steady.optimizer_iterations(_series(zero_grad, zero_grad), _series([12, 15, 32, 35, 52, 55]), work)
    # each from its rollout's first forward (the first work after the previous group's last
    # mark, 15 -> 20) to the next; the first from as many calls before its first mark as the
    # others hold (11: from 0), the last to its last step's end (before: 6 steps, one per
    # zero_grad, each update's the next rollout's too)
    assert out["host_start_ns"] == [0, 20, 40]
    assert out["gpu_end_ns"] == [20, 40, 56] and out["mark"] == [0, 2, 4]
    # zero_grad after each update's forward is the quickstart's shape too (x10, each optimizer
    # step 120-125, the next forward at 130), but grouped: the choice both run and analyze make
    # reads the groups (before: 6 iterations, one per update)
    marks, steps = _series([10 * t for t in zero_grad]), _series([10 * t for t in (12, 15, 32, 35, 52, 55)], [10 * t + 5 for t in (12, 15, 32, 35, 52, 55)])
    assert steady.closed_by_steps(marks, steps, [10 * t for t in work]) is None
    assert steady.optimizer_loop(marks, steps, [10 * t for t in work], zero_grad=True)["host_start_ns"] == [0, 200, 400]
    # a trace's window from the first rollout's 6th forward to the last update's zero_grad:
    # the first group without its whole rollout and the last without its second update are
    # cut, left out
    out = steady.optimizer_iterations(_series(zero_grad[:-1], zero_grad[:-1]), _series([12, 15, 32, 35, 52]), work[5:])
    assert out["host_start_ns"] == [20] and out["gpu_end_ns"] == [40]
    # a plain loop (one forward between two marks), gradient accumulation (4 alike): none
    assert steady.mark_groups([1, 11, 21, 31], [0, 10, 20, 30]) is None
    assert steady.mark_groups([9, 19, 29, 39], [0, 2, 4, 6, 10, 12, 14, 16, 20, 22, 24, 26, 30, 32, 34, 36]) is None
    # a training loop evaluating every 4 steps (10 forwards, 40..49 and 90..99): 22 of the 31
    # calls between the first mark and the last, not three quarters: a pause, not the loop
    train = [0, 10, 20, 30, 50, 60, 70, 80, 100, 110, 120, 130]
    assert steady.mark_groups([t + 2 for t in train], sorted(train + list(range(40, 50)) + list(range(90, 100)))) is None


def _marks_between(calls: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Marks with ``calls[i]`` work calls between mark i and mark i + 1 (one per ns)."""
    h = np.r_[0, np.cumsum(calls)] * 2 + 1
    return h, np.arange(0, h[-1], 2)


def test_groups_of_groups_of_marks_are_one_iteration_when_the_outer_gaps_hold_most_calls() -> None:
    # torchrl's PPO tutorial traced (its probe, 10 iterations): minibatch updates 1,132 ops
    # apart, the advantages before each of 4 epochs 5,050, the rollout 104,132. Grouped by
    # the epochs' gaps alone: 40 groups of 6 (39 steps); their own gaps part them again, 24
    # marks per iteration, the rollout 87 % of the calls between groups
    epoch = [1132] * 5
    calls = ((epoch + [5050]) * 3 + epoch + [104132]) * 10
    h, w = _marks_between(calls[:-1])
    assert np.diff(steady.mark_groups(h, w)).tolist() == [24] * 9
    # the same updates with an evaluation of 4x a rollout's calls after every 6th iteration:
    # 44 %, a pause of the loop, not its iteration (each iteration is one step, as before)
    calls = [(epoch + [5050]) * 3 + epoch + [4 * 104132 if (i + 1) % 6 == 0 else 104132] for i in range(18)]
    h, w = _marks_between([c for it in calls for c in it][:-1])
    assert np.diff(steady.mark_groups(h, w)).tolist() == [24] * 17


def test_a_pass_that_ends_at_its_loaders_length_ends_where_its_last_batch_trained() -> None:
    # Lightning's loop: fetches at 0, 10, 20 (the pass's last batch), then a checkpoint, the
    # next pass's fetches at 40, 50; each iteration an optimizer step (start +2, end +8, its
    # GPU end 1 later) with a backward inside it (+3 to +6). The last batch's training ends
    # at 28 (its GPU at 29): the end of pass lies there, not at the next fetch (40)
    fetches = [0, 10, 20, 40, 50]
    marks = {"host_start_ns": [2, 12, 22, 42, 52, 3, 13, 23, 43, 53], "host_end_ns": [8, 18, 28, 48, 58, 6, 16, 26, 46, 56],
             "gpu_end_ns": [9, 19, 29, 49, 59, 7, 17, 27, 47, 57]}
    ends = steady.training_ends([20], fetches, [], marks)
    assert ends == {"host_start_ns": [28], "gpu_start_ns": [29], "gpu_end_ns": [29], "last_ns": [20]}
    # as a fetch that raised StopIteration there would: the iteration of fetch 20 ends at 29,
    # the next step begins a new pass
    it = steady.loop_iterations({"host_start_ns": fetches, "gpu_start_ns": fetches, "gpu_end_ns": [1, 11, 21, 41, 51]},
                                {"host_start_ns": ends["host_start_ns"], "gpu_start_ns": ends["gpu_start_ns"], "gpu_end_ns": ends["gpu_end_ns"]})
    assert it["host_start_ns"] == [0, 10, 20, 40] and it["gpu_end_ns"] == [10, 20, 29, 50]
    assert it["pass_ended"] == [False, False, False, True]
    # a pass whose iterator raised StopIteration before the next fetch (a plain for loop, a
    # prefetcher) has its end already; an iteration with no training mark (an evaluation
    # loop) leaves it unknown; the run's last pass ends at its last mark too
    assert steady.training_ends([20], fetches, [30], marks)["host_start_ns"] == []
    assert steady.training_ends([20], fetches, [], {"host_start_ns": [2], "host_end_ns": [8], "gpu_end_ns": [9]})["host_start_ns"] == []
    assert steady.training_ends([50], fetches, [], marks)["host_start_ns"] == [58]


def test_the_runs_last_fetch_ends_where_its_one_iterations_training_ended() -> None:
    # fetches at 0, 10, 20, each iteration's marks (an optimizer step +2..+8, a backward
    # +3..+6) after its fetch: the last fetch's iteration ends at its step's end, 28, whether
    # that fetch raised StopIteration (a loader fetching a batch ahead, HF's Trainer) or a
    # `break` after the training left the loop
    fetches = [0, 10, 20]
    marks = {"host_start_ns": [2, 12, 22, 3, 13, 23], "host_end_ns": [8, 18, 28, 6, 16, 26], "gpu_end_ns": [9, 19, 29, 7, 17, 27]}
    assert steady.last_fetch_trained(fetches, marks["host_start_ns"]) == 20
    assert steady.training_ends([20], fetches, [], marks) == {"host_start_ns": [28], "gpu_start_ns": [29], "gpu_end_ns": [29], "last_ns": [20]}
    # nothing trains after it (the fetch that raised in a plain for loop): no end
    assert steady.last_fetch_trained([0, 10, 20, 30], marks["host_start_ns"]) is None
    # more marks after it than any iteration between two fetches holds (two): a training with
    # no loader after the loop's, no iteration of it
    more = marks["host_start_ns"] + [32, 42]
    assert steady.last_fetch_trained(fetches, more) is None
    assert steady.last_fetch_trained([], marks["host_start_ns"]) is None


def test_the_share_of_the_time_beyond_the_median_a_cause_holds() -> None:
    # steps 10, 10, 10, 30, 50 ms: median 10, beyond it (less 0.05 ms) 19.95 and 39.95 ms.
    # A save of 25 ms in the 30 ms step counts its 19.95 beyond the median, one of 30 in the
    # 50 ms step its 30: (19.95 + 30) / 59.9
    cp = np.array([10.0, 10.0, 10.0, 30.0, 50.0])
    assert steady.held_share(cp, np.array([0, 0, 0, 25.0, 30.0])) == pytest.approx((19.95 + 30) / 59.9)
    assert steady.held_share(cp, np.zeros(5)) == 0.0
    assert steady.held_share(np.full(4, 10.0), np.full(4, 5.0)) is None  # nothing beyond the median


def test_slow_steps_on_a_schedule_have_a_period() -> None:
    # the loop's own work every k-th step (a log line's sync, a delayed update, a save):
    # the slow steps at a fixed interval, most of them; at random, or too few: none
    assert steady.slow_period(np.array([1.0, 1.0, 3.0] * 10)) == 3
    cp = np.ones(50)
    cp[[9, 19, 29, 39, 49]] = 5.0
    assert steady.slow_period(cp) == 10
    assert "one every 10 steps" in steady.slow_steps(cp).summary
    cp[29] = 1.0
    cp[33] = 5.0  # one of four intervals off the schedule: 2 of 3 the period, under 80 %
    assert steady.slow_period(cp) is None
    rng = np.random.default_rng(0)
    cp = np.ones(60)
    cp[rng.choice(60, 8, replace=False)] = 3.0
    assert steady.slow_period(cp) is None
    assert steady.slow_period(np.array([1.0] * 20 + [3.0, 1.0, 3.0])) is None  # two slow steps
    assert steady.slow_period(np.full(30, 3.0)) is None  # none slower than the median
    assert "every" not in steady.slow_steps(np.ones(30)).summary
    # a schedule riding on a drift (torchdiffeq's ode_demo: an evaluation every 20 iterations,
    # 263-513 ms, while the adaptive solver's work grows over training and half the steps pass
    # 1.25x the median): still every 20; the drift alone, none
    drift = np.linspace(20.0, 45.0, 100)
    cp = drift.copy()
    cp[[19, 39, 59, 79]] = [263.0, 330.0, 420.0, 513.0]
    assert steady.slow_period(cp) == 20 and "one every 20 steps" in steady.slow_steps(cp).summary
    assert steady.slow_period(drift) is None
    cp[59] = 30.0  # one of the schedule's steps not slow: no schedule
    assert steady.slow_period(cp) is None


def test_a_schedule_hidden_by_a_neighbours_cpu_time_is_read_without_it() -> None:
    # CleanRL's SAC on a loaded machine: every 3rd step's policy update (7.5 ms among 1.8 ms
    # steps), and a neighbour's time (the step's thread waiting for a CPU) on random steps,
    # slow enough that the gaps between slow steps are no longer mostly 3
    rng = np.random.default_rng(1)
    own = np.tile([1.8, 1.8, 7.5], 100)
    wait = np.zeros(own.size)
    wait[rng.choice(own.size, 80, replace=False)] = rng.uniform(4.0, 16.0, 80)
    cp = own + wait
    assert steady.slow_period(cp) is None
    assert steady.slow_period(cp, wait) == 3 and "one every 3 steps" in steady.slow_steps(cp, wait).summary
    # the waits do not make a schedule: random slow steps stay random without them
    noisy = np.ones(300)
    noisy[rng.choice(300, 40, replace=False)] = 4.0
    assert steady.slow_period(noisy + wait, wait) is None


def test_a_series_fast_only_before_its_slow_stretches_keeps_every_step_and_warns_nothing() -> None:
    # the traced steps (µs) of a ResNet-18 trained under torch.compile "reduce-overhead" on an
    # H100 (train_loop.py, 4 workers): batches prefetched during the compile, then each waits
    # for the workers. No settled run follows the slow stretches, so the start falls back to
    # step 0; the median of the steps before it was taken over none, and analyze printed
    # numpy's "Mean of empty slice" to the user
    cp = np.array([19184, 10030, 10061, 10089, 10020, 9958, 9997, 78029, 52281, 22245, 22123, 71873, 53336, 22267, 22845,
                   67952, 54400, 24614, 22051, 64804, 72823, 23251, 21584, 57979, 80130, 21124], dtype=np.int64) * 1000
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        found = steady.steady_start(cp)
    assert found.start == 0


def test_steps_slowed_by_another_process_are_no_warm_up() -> None:
    # accelerate's loop on a shared CPU (probe, 2026-12-07): neighbours slowed its first
    # steps, each waiting 70 ms for a CPU (the light pass's cpu_wait_ns), and those were left
    # out as warm-up. Here 20 steps of 220 ms (70 of them a CPU wait), then 28 of 150 ms
    h, g, t = [], [], 0
    for k in range(48):
        h.append(t)
        t += (220 if k < 20 else 150) * 1_000_000 + 1000 * (k % 3)
        g.append(t)
        t += 50_000
    assert steady.series_steady_start(h, g).start == 20
    wait = [70_000_000 if k < 20 else 0 for k in range(48)]
    found = steady.series_steady_start(h, g, cpu_wait=wait)
    assert found.start == 0 and "wait for a CPU left out, 1,400 ms" in found.reason, found.reason


@pytest.mark.parametrize(("sizes", "most"), [
    ([4] * 24 + [5] * 15 + [6], 5),  # Poisson-sampled logical batches in 4 or 5 physical ones; a rare 6 is not a size
    ([4] * 36 + [4 + 3] * 4, 4),  # a fixed accumulation, a 3-batch validation's fetches in every 10th group
    ([1] * 50 + [3], 1),  # one batch per step, a sanity check's 2 batches before the first
    ([2, 3] * 10, 3),  # the upper median of two sizes is the larger
])
def test_a_group_holds_the_median_batches_or_a_size_above_that_enough_groups_hold(sizes: list[int], most: int) -> None:
    assert steady.group_size(np.array(sizes)) == most


def test_back_to_back_stretches_at_paces_of_their_own_are_each_a_stretch() -> None:
    # an Optuna study's trials: 60 batches at 40 ms, 60 at 8 ms, then faster trials; the two
    # slow trials read as one stretch with no pace of its own (p90/p10 5 > 1.5), so none
    rng = np.random.default_rng(0)
    cp = np.concatenate([40 + rng.normal(0, 1, 60), 8 + rng.normal(0, 0.2, 60), 3 + rng.normal(0, 0.1, 200)])
    inside = steady.slow_stretches(cp)
    assert inside[:120].all() and not inside[130:].any()
    # one stretch at one pace stays whole, and a noisy one is no stretch
    flat = np.concatenate([8 + rng.normal(0, 0.2, 60), 3 + rng.normal(0, 0.1, 100)])
    assert steady.slow_stretches(flat)[:60].all()


def test_a_slow_stretch_a_new_optimizer_ends_is_no_warmup() -> None:
    # a search's first trial, the largest model, then the others: a new configuration, kept
    cp = np.concatenate([np.full(60, 40.0), np.full(100, 3.0)])
    assert steady.steady_start(cp).start >= 60
    fresh = np.zeros(cp.size, dtype=bool)
    fresh[60] = True
    assert steady.steady_start(cp, fresh=fresh).start < 5


def test_the_rate_of_steps_on_several_threads_counts_the_time_any_step_was_under_way() -> None:
    # an asyncio service's requests on 4 executor threads, in waves of 4 every 10 ms, each
    # 2-3 ms: in series (start) order the completion intervals came out negative, and each
    # thread's own wait for work, while the others served, was left out
    rng = np.random.default_rng(3)
    waves = np.repeat(np.arange(30) * 10_000_000, 4)
    h = waves + rng.integers(0, 300_000, waves.size)
    g = h + rng.integers(2_000_000, 3_000_000, waves.size)
    tids = np.tile([11, 12, 13, 14], 30)
    cad = steady.cadence(h, g, threads=tids)
    # by hand: the completions after the first, over the time between the first completion
    # and the last in which some step was under way
    first, last = np.sort(g)[0], np.sort(g)[-1]
    t = np.arange(first, last, 10_000)  # a 10 us grid
    busy = ((h[None, :] <= t[:, None]) & (g[None, :] > t[:, None])).any(axis=1).sum() * 10_000
    assert cad.steps_per_s == pytest.approx((h.size - 1) / (busy / 1e9), rel=0.01)
    assert cad.waits == 29  # the gaps between waves
    assert steady.cadence(h, g).steps_per_s != pytest.approx(cad.steps_per_s, rel=0.1)  # in series order


def test_gaps_emptied_by_a_neighbours_spread_waits_leave_no_pause() -> None:
    # Karpathy's makemore MLP (scratch_mlp.py) beside two busy loops on the 2-CPU VM: the step
    # is each backward call, timed as the iteration to the next. Between two reads of the run
    # queue a wait is spread in time over each call and the gap after it, so every short gap
    # lost all of its time, the usual gap read 0, and three gaps that had lost a 4 ms
    # preemption but for 0.1 ms were pauses: 12.8 ms left out of the rate (0.29 ms per step
    # for the program's own 0.36 in the run that failed its test)
    d = json.loads((FIXTURES / "light" / "makemore-cpu-contended.json").read_text())
    c = d["calls"]
    h = np.asarray(c["host_start_ns"], dtype=np.int64)
    ends = steady.iteration_ends_ns(h, c["gpu_end_ns"], run_delay=c["run_delay_ns"], run_delay_read=c["run_delay_read"])
    assert (ends[:-1] == h[1:]).all()  # every iteration runs to the next call: no pause
    own = np.asarray(d["own_ms_each"])  # the program's last 180 iterations, by its own timer
    assert ((ends - h)[:-1][-own.size:] / 1e6).sum() == pytest.approx(own.sum(), rel=0.01)
    # the fixture holds the case: three gaps of the program's own ~0.1 ms and a preemption of ~4 ms
    gaps = h[1:] - np.asarray(c["gpu_end_ns"][:-1], dtype=np.int64)
    assert np.count_nonzero(gaps > 4_000_000) == 3


def test_one_slow_step_reads_as_one_time_not_a_range() -> None:
    # torch.func's DP-SGD probe: one full collection's step among 148 read "(62.7-62.7 ms)"
    one = steady.slow_steps(np.r_[np.full(40, 4.87), 62.7])
    assert one.summary == "1 of 41 steps slower than 1.25x the median 4.87 ms (62.7 ms)"
    two = steady.slow_steps(np.r_[np.full(40, 4.87), 58.8, 202.0])
    assert two.summary.endswith("(58.8-202 ms)")
