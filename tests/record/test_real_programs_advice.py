"""Real programs whose readings were right and whose advice was not (session 33's probes:
PyKEEN's epoch-end garbage collection, REINFORCE's episodes of varying length, a DataLoader
whose workers were ahead): what a finding says, checked against the program's own timers.
(A file of its own so the suite's two workers share the real programs.)"""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import REAL_PROGRAMS as REAL, program_results, run_cli_fds
from real_helpers import light_run
from perfdoctor.pipeline import diagnose

torch = pytest.importorskip("torch")
# As in test_real_programs_more.py: the other worker's load now and then stretches a run's
# steps; a failed assertion runs the test once more, a new run of the program
pytestmark = pytest.mark.flaky(reruns=1, only_rerun=["AssertionError"])


def test_a_loop_that_collects_garbage_at_each_epoch_end_is_told_so(tmp_path: Path) -> None:
    # PyKEEN's training loop calls gc.collect() at the end of every epoch: ~200 ms each over its
    # triples factory's labels. time-between-steps measured those stretches right and named
    # persistent workers, OpenMMLab's sleep and evaluations, none of which the program had,
    # though the light pass had recorded each collection. Now the evidence has each stretch's
    # full GC ms (checked against the program's own timer of each collection) and the advice
    # names the collector
    from perfdoctor.rules.engine import evaluate, light_values, load_rules
    from perfdoctor.rules.evidence import EVIDENCE

    light, series, result = light_run(tmp_path, "kge_train.py", "--epochs", "5", "--batches", "20", env={"OMP_NUM_THREADS": "1"})
    assert light["steps_seen"] == result["steps"] == 100
    (bundle,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    analysis = diagnose(bundle, warnings=False).analysis
    ev = EVIDENCE["time_between_steps"](analysis)
    assert ev.columns[-1] == "full GC ms", ev.columns
    # the four epoch ends between steps (the fifth is after the last step), each mostly the
    # program's gc.collect(), as long as the program timed it
    ends = {row[0]: row for row in ev.rows if row[0] % 20 == 0}
    assert sorted(ends) == [20, 40, 60, 80], ev.rows
    for after, row in ends.items():
        own = result["epoch_end_ms"][after // 20 - 1]
        assert row[-1] == pytest.approx(own, rel=0.1, abs=2.0) and row[-1] >= 0.5 * row[2], (row, own)
    assert light_values(analysis)["paused_gc_ratio"].value >= 0.5
    (finding,) = [f for f in evaluate(load_rules(()), analysis) if f.rule_id == "time-between-steps"]
    assert finding.status == "fail" and any("gc.freeze()" in step for step in finding.remediation.steps), finding.remediation.steps


def test_episodes_of_varying_length_are_their_own_work_not_a_stall(tmp_path: Path) -> None:
    # pytorch/examples' REINFORCE: one Adam step per CartPole episode, 12 to 2,703 policy calls
    # an episode as the pole stays up longer. uneven-steps read the long episodes as stalls
    # ("~36 ms per step recoverable": gc.freeze, swapping, other processes). The light pass
    # notes each policy call (a loop range, zero_grad, is the step): each step's calls, checked
    # against the program's own episode lengths, explain its time, and the variant says so,
    # at info, with no time to win back
    from perfdoctor.analysis import steady
    from perfdoctor.rules.engine import evaluate, light_values, load_rules
    from perfdoctor.rules.evidence import EVIDENCE

    light, series, result = light_run(tmp_path, "reinforce.py", "--episodes", "80", env={"OMP_NUM_THREADS": "1"})
    # the first episode's rollout runs before the first zero_grad: 79 steps of 80 episodes
    assert light["step_name"] == "Optimizer.zero_grad#Adam.zero_grad" and light["steps_seen"] == result["steps"] - 1 == 79
    (bundle,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    analysis = diagnose(bundle, warnings=False).analysis
    # step k: episode k's update, then episode k+1's rollout, one policy call per environment
    # step (the light pass notes calls from the loop range's second start: none in the first)
    calls = analysis.light.work_calls
    assert calls[0] == 0 and calls[1:].tolist() == result["lengths"][2:], (calls.tolist(), result["lengths"])
    steady_calls = calls[analysis.light_series.steps]
    assert steady.calls_vary(steady_calls)
    # by hand: each steady step's calls at the median ms per call (of the steps with calls
    # noted), beyond the median step, over the steps' time beyond it (steady.held_share's measure)
    cp = analysis.light_series.critical_path_ms
    made = steady_calls > 0
    beyond = np.clip(cp - np.median(cp) - steady.RESOLUTION_MS, 0, None)
    expected = np.clip(steady_calls * np.median(cp[made] / steady_calls[made]) - np.median(cp), 0, None)
    ratio = light_values(analysis)["slow_step_work_ratio"].value
    assert ratio == pytest.approx(np.minimum(expected, beyond).sum() / beyond.sum()) and ratio >= 0.5, ratio
    (finding,) = [f for f in evaluate(load_rules(()), analysis) if f.rule_id == "uneven-steps"]
    assert finding.status == "fail" and finding.severity == "info" and finding.estimate is None
    assert finding.title == "Uneven steps: the slow steps do more work (more model calls)"
    ev = EVIDENCE["slow_untraced_steps"](analysis)
    assert ev.columns[-1] == "model calls" and all(row[-1] == result["lengths"][row[0] + 1] for row in ev.rows), ev.rows


@pytest.mark.parametrize("sample_ms", [0, 4])
def test_a_fetch_that_takes_in_ready_batches_is_not_told_to_add_workers(tmp_path: Path, sample_ms: int) -> None:
    # An HF pipeline with num_workers=2: the workers' queue held a batch at every fetch, and the
    # fetch's time was this process unpickling it; the report said "the step waits for its
    # data ... add workers". The traced pass now marks each wait for a worker's batch (a
    # multiprocessing queue's poll) inside the fetch: with the workers ahead (sample_ms 0) the
    # fetch is mostly taking batches in, and the advice is to send tensors; with slow samples
    # (4 ms each, 32 ms a batch over 2 workers) it is mostly waiting, and the advice is the
    # workers'. Both checked against the program's own timer of its polls
    from dataclasses import replace

    from perfdoctor.analysis.cpu import READY_SHARE, RECEIVE_ADVICE, WORKERS_ADVICE, observations
    from perfdoctor.rules.engine import PREDICATES
    from perfdoctor.rules.signals import inputs

    r = run_cli_fds("run", "--collect", "torch", "--timeout", "240", "--out", tmp_path, REAL / "text_batches.py", "--batches", "30",
                    "--sample-ms", str(sample_ms), env={"OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    own = program_results(r.stdout)[-1]  # the torch pass's
    own_share = sum(own["wait_ms"][5:]) / sum(own["fetch_ms"][5:])
    (bundle,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    analysis = diagnose(bundle, warnings=False).analysis
    view = analysis.cpu
    assert view.loader_workers and view.data_waiting_ms is not None and 0 <= view.data_waiting_ms <= view.data_loading_ms
    share = view.data_waiting_ms / view.data_loading_ms
    values = inputs(analysis)
    assert values["loader_wait_share"].value == pytest.approx(share, rel=1e-6)
    (seen,) = [o for o in view.observations if o.kind == "data-loading"]
    ready = sample_ms == 0
    # the program's own poll timer agrees on which side of the line the fetches fall
    assert (own_share < READY_SHARE) == ready and (share < READY_SHARE) == ready, (own_share, share)
    assert PREDICATES["batches-ready"][0](values) == ready and PREDICATES["workers-behind"][0](values) != ready
    assert seen.advice == (RECEIVE_ADVICE if ready else WORKERS_ADVICE) and "waiting for the workers" in seen.evidence
    # the fetch's share is judged untraced where the light pass timed each fetch alone (its
    # call_series): by hand, each steady step's fetch and step, their medians
    calls = json.loads((bundle / "raw" / "light.json").read_text())["call_series"][analysis.profile.light.name]
    alone = dict(zip(calls["host_start_ns"], np.array(calls["host_end_ns"]) - np.array(calls["host_start_ns"])))
    light = analysis.profile.light
    first = light.steady_start or 0
    by_hand = [alone[h] for h in light.host_start_ns[first:].tolist()]
    assert view.untraced_fetch == pytest.approx((np.median(by_hand) / 1e6, np.median(light.gpu_end_ns[first:] - light.host_start_ns[first:]) / 1e6))
    assert f"untraced, the light pass's median fetch" in seen.evidence
    # a fetch the tracer stretched past 5 % of the step, under it untraced (poutyne's fit on
    # numpy arrays: 6.2 % traced, its samples indexed one by one), is no finding; over it, is
    assert not [o for o in observations(replace(view, untraced_fetch=(0.04, 1.0))) if o.kind == "data-loading"]
    assert [o for o in observations(replace(view, untraced_fetch=(0.06, 1.0))) if o.kind == "data-loading"]
