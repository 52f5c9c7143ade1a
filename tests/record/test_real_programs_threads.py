"""A model called from the threads of a pool at once (session 34's probe: a script's
``ThreadPoolExecutor.map(predict, inputs)``): each request is a step, the steps of 8 threads
overlap, and each is checked against the program's own timer of its call. (A file of its own
so the suite's two workers share the real programs.)"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from conftest import REAL_PROGRAMS as REAL
from real_helpers import light_run
from perfdoctor.pipeline import diagnose

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.flaky(reruns=1, only_rerun=["AssertionError"])

THREADS, REQUESTS = 8, 400


def test_a_thread_pools_requests_are_each_their_own_step(tmp_path: Path) -> None:
    # The light pass noted ends as steps ended and paired the i-th start with the i-th end:
    # on 8 threads at once that paired one request's start with another's end (half of each
    # thread's steps "ended" after its next one began), and the critical path queued each
    # request behind whichever ended last: p50 0.59 of the program's own timer. One thread's
    # counter of CPU waits over all the steps read cpu_wait_ratio 112 %, and uneven-steps said
    # another process took the CPUs: it was the program's own 8 threads on 2 cores
    from perfdoctor.analysis import steady
    from perfdoctor.reports.summary import uneven_steps_lines
    from perfdoctor.rules.engine import OVERSUBSCRIBED, evaluate, light_values, load_rules
    from perfdoctor.rules.signals import cpu_wait_ratio

    light, series, result = light_run(tmp_path, "pool_predict.py", "--device", "cpu", "--requests", str(REQUESTS),
                                      "--threads", str(THREADS), "--width", "2048", env={"OMP_NUM_THREADS": "1"})
    assert light["step_name"] == "Sequential.forward" and light["steps_seen"] == result["steps"] == REQUESTS
    starts, ends, tids = (np.asarray(series[k], dtype=np.int64) for k in ("host_start_ns", "gpu_end_ns", "tid"))
    calls = np.asarray(result["calls"], dtype=np.int64)  # the program's own (thread, start, end) of each call
    assert set(tids.tolist()) == set(calls[:, 0].tolist()) and len(set(tids.tolist())) > 1
    for thread in set(tids.tolist()):
        mine, own = np.flatnonzero(tids == thread), calls[calls[:, 0] == thread]
        own = own[np.argsort(own[:, 1])]
        # each step of a thread begins after that thread's previous call ended (timed as the
        # iteration, where the thread took the request off the pool's queue) and before its
        # own call ended, in order, and ends before the thread's next step begins (a thread
        # runs one request at a time)
        assert mine.size == len(own)
        assert (starts[mine] < own[:, 2]).all() and (starts[mine][1:] >= own[:-1, 2]).all()
        assert (ends[mine][:-1] <= starts[mine][1:]).all()
    (bundle,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    analysis = diagnose(bundle, warnings=False).analysis
    assert analysis.value("step_latency_ms_p50") == pytest.approx(result["ms_median"], rel=0.15)
    wait = cpu_wait_ratio(analysis).value
    assert wait is not None and 0 <= wait <= 1
    # steps at once, by hand: per steady step, every step's time inside its span over the span
    steady_rows = np.flatnonzero(analysis.light_series.steps) if analysis.light_series.steps.dtype == bool else analysis.light_series.steps
    by_hand = [np.clip(np.minimum(ends, ends[k]) - np.maximum(starts, starts[k]), 0, None).sum() / (ends[k] - starts[k]) for k in steady_rows]
    assert steady.in_flight(starts, ends)[steady_rows] == pytest.approx(by_hand)
    # the rate: completions in the order they came, over the time steps were under way (in
    # series order the intervals came out negative, each thread's wait for work left out)
    assert analysis.value("steps_per_s") == pytest.approx(result["requests_per_s"], rel=0.15)
    cpus = len(os.sched_getaffinity(0))
    per_cpu = light_values(analysis)["steps_per_cpu"].value
    waits = analysis.light.cpu_wait_ns[steady_rows]
    expected = np.average(by_hand, weights=waits) if waits.sum() > 0 else np.median(by_hand)  # where the steps waited
    assert per_cpu == pytest.approx(expected / cpus)
    assert any(line.startswith("steps at once: ") for line in uneven_steps_lines(analysis))
    if per_cpu >= OVERSUBSCRIBED:
        findings = {f.rule_id: f for f in evaluate(load_rules(()), analysis)}
        contention = findings["cpu-contention"]
        if contention.status == "fail":
            assert contention.title.endswith("the program runs more steps at once than it has CPUs"), contention.title
            assert any("dynamic batcher" in step for step in contention.remediation.steps)
        uneven = findings["uneven-steps"]
        assert "another process" not in uneven.title, uneven.title
