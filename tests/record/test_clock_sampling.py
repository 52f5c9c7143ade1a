"""The light pass's sparse lanes (clock.StepTimes.settle): once a lane's GPU lags are steady it
measures one step in SPARSE_EVERY, and the steps between get their GPU edges from their host
times plus the lags measured around them. Driven through the real lane, Timer and settle, on
a GPU clock whose events are host times plus a lag the test chooses (no CUDA here): a random
lag of a few us on a 2 ms loop goes sparse and reads every step within the spread; a lag that
wanders, a lane on two threads, or a slow GPU step every eighth step, stay measured."""

from __future__ import annotations

import random
import threading

from perfdoctor.record.bootstrap import clock


class Event:
    """A CUDA event as GpuClock.settle sees one: complete, and its time once resolved."""

    def __init__(self, ns: int) -> None:
        self.ns = ns

    def query(self) -> bool:
        return True


class FakeClock:
    """GpuClock's settle and resolve on :class:`Event`; the skip it gives sparse lanes."""

    settle = clock.GpuClock.settle
    t0_ns = 0  # when it was set up, host ns

    def __init__(self) -> None:
        self.skip = lambda: clock.UNSAMPLED
        self.recorded = 0

    def resolve(self, event: Event, complete: bool = False) -> int:
        return event.ns


def run_loop(lags, steps: int = 2000, period: int = 2_000_000, threads=None, cuda_from: int = 0, kept=None):
    """``steps`` steps of one lane, each ``period`` ns apart in host time, its end's GPU time
    ``lags(i, "end")`` after its host end (the start's ``lags(i, "start")``), from step
    ``cuda_from`` on (before it, no GPU clock: host times). Returns the series, the true GPU
    ends and starts, and how many edges recorded an event (the StepTimes appended to ``kept``)."""
    timer = clock.Timer()
    timer.run_queue.ok = False
    fake = FakeClock()
    times = clock.StepTimes(timer)
    if kept is not None:
        kept.append(times)
    now, edge = [0], ["start", 0]
    truth: dict[str, list[int]] = {"start": [], "end": []}

    def mark(host_ns: int) -> Event | int:
        if timer.clock is None:
            return host_ns
        fake.recorded += 1
        lag = lags(edge[1], edge[0])
        if lag == clock.CAPTURED:
            return lag
        return host_ns if lag is None else Event(host_ns + lag)  # None: the stream idle there (GpuClock.edges)

    def lag_ns(i: int, e: str) -> int:
        lag = lags(i, e)
        return lag if type(lag) is int else 0  # an idle stream's or a capture's: the host time

    timer.mark = mark
    real_clock, real_ident = clock.time.perf_counter_ns, clock.threading.get_ident
    clock.time.perf_counter_ns = lambda: now[0]  # the lane binds both as it is made
    clock.threading.get_ident = lambda: 1 if threads is None else threads(edge[1])
    try:
        start, end = times.lane("step")
        for i in range(steps):
            edge[:] = ["start", i]
            now[0] = i * period
            if i == cuda_from:
                timer.clock, fake.t0_ns = fake, now[0]
            truth["start"].append(now[0] + lag_ns(i, "start"))
            start()
            edge[:] = ["end", i]
            now[0] = i * period + period // 2
            truth["end"].append(now[0] + lag_ns(i, "end"))
            end()
    finally:
        clock.time.perf_counter_ns = real_clock
        clock.threading.get_ident = real_ident
    series, error = times.series()
    assert error is None
    return series["step"], truth, fake.recorded


def test_a_steady_lane_measures_one_step_in_eight_and_reads_the_rest_within_the_spread():
    jitter = random.Random(1)
    table = {(i, e): 30_000 + jitter.randrange(-10_000, 10_000) for i in range(2000) for e in ("start", "end")}
    series, truth, recorded = run_loop(lambda i, e: table[i, e])
    # the first settle (SETTLE_EVERY event ends) sees steady lags: from there one step in 8 is measured
    first = clock.Timer.SETTLE_EVERY
    measured = series["gpu_measured"]
    assert len(measured) == 2000 and all(measured[:first]) and not all(measured[first:first + 32])
    later = measured[256:]
    assert abs(sum(later) / len(later) - 1 / clock.SPARSE_EVERY) < 0.01
    assert recorded < 2 * (first + (2000 - first) / clock.SPARSE_EVERY + 20)
    # every step's GPU edges: exact where measured, within the lags' spread (20 us) elsewhere
    for key, edge in (("gpu_end_ns", "end"), ("gpu_start_ns", "start")):
        errors = [abs(a - b) for a, b in zip(series[key], truth[edge])]
        assert max(e for e, m in zip(errors, measured) if m) == 0
        assert max(errors) <= 20_000
    # the step times the light pass reads from them, against the truth, on average
    lat = [e - s for e, s in zip(series["gpu_end_ns"], series["host_start_ns"])]
    true_lat = [e - s for e, s in zip(truth["end"], series["host_start_ns"])]
    assert abs(sum(lat) - sum(true_lat)) / sum(true_lat) < 0.002


def test_a_lane_whose_edges_find_the_stream_idle_samples_too():
    # a slow host's forward (the H100 of 2026-12-07f: ViT-small b1 at 4 ms) leaves the GPU idle
    # at both edges: no event, but a stream query at each, which sampling skips as well
    series, truth, recorded = run_loop(lambda i, e: None, steps=1000)
    measured = series["gpu_measured"]
    assert abs(sum(measured[100:]) / 900 - 1 / clock.SPARSE_EVERY) < 0.02 and recorded < 2 * (32 + 1000 / 8 + 20)
    assert series["gpu_end_ns"] == truth["end"] == series["host_end_ns"] and series["gpu_start_ns"] == series["host_start_ns"]


def test_lanes_whose_lags_wander_or_whose_odd_steps_lag_stay_measured():
    # a GPU-bound loop's queue: its lag wanders over a whole period
    walk = random.Random(2)
    table = {(i, e): walk.randrange(0, 2_000_000) for i in range(1000) for e in ("start", "end")}
    series, _, recorded = run_loop(lambda i, e: table[i, e], steps=1000)
    assert "gpu_measured" not in series and recorded == 2000
    # every eighth step's GPU work runs 0.5 ms past its host end: regular sampling every eighth
    # step could miss all of them; one random place per block of eight cannot
    series, _, _ = run_loop(lambda i, e: 500_000 if e == "end" and i % 8 == 3 else 20_000, steps=1000)
    assert "gpu_measured" not in series
    # a program's steps before it used CUDA (host times, lag 0) are no evidence for its GPU steps
    series, _, _ = run_loop(lambda i, e: table[i, e], steps=1000, cuda_from=300)
    assert "gpu_measured" not in series
    # steady lags, but on two threads (a pool's requests): no lags to read between
    series, _, _ = run_loop(lambda i, e: 20_000, steps=1000, threads=lambda i: 1 + i % 2)
    assert "gpu_measured" not in series


def test_a_lane_that_turns_unsteady_goes_back_to_measuring_every_step():
    lag = lambda i, e: 20_000 if i < 1000 else (i * 7919 % 13) * 100_000  # noqa: E731
    series, truth, _ = run_loop(lag, steps=3000)
    measured = series["gpu_measured"]
    assert sum(measured[200:1000]) < 200  # sparse while steady
    assert all(measured[1600:])  # measured again within a settle or two of the change


def test_a_judgement_weighs_the_latest_edges_only():
    # every start inside a capture (never measured), every end measured: no judgement can be
    # made, and the window it waits on keeps to JUDGED_MAX edges, not the whole run
    kept: list = []
    series, _, _ = run_loop(lambda i, e: clock.CAPTURED if e == "start" else 20_000, steps=5000, kept=kept)
    assert series == {k: [] if v is not None else None for k, v in series.items()}  # no step outside a capture
    (times,) = kept
    assert 5000 - clock.JUDGED_MAX - clock.Timer.SETTLE_EVERY <= times.judged["step"][1] < 5000
    assert times.sparse["step"] == [None]


def test_estimated_edges_read_the_lag_between_their_threads_samples():
    U = clock.UNSAMPLED
    ns = lambda m: m  # noqa: E731 - already host ns
    # thread 1: lag 100 at t=0, 300 at t=20: 200 at t=10; thread 2 never measured: its host time
    assert clock.estimated([100, U, 320, U], [0, 10, 20, 5], [1, 1, 1, 2], ns) == [100, 210, 320, 5]
    assert clock.estimated([5, 7], [1, 2], [1, 1], ns) == [5, 7]


def test_steady_lags_judges_the_middle_of_the_measured_lags_against_the_period():
    U = clock.UNSAMPLED
    host = list(range(0, 40_000, 1000))
    steady = [h + 100 + (i % 3) for i, h in enumerate(host)]
    assert clock.steady_lags(host, steady, [1] * 40, period_ns=1000) is True
    spread = [h + 100 + 25 * (i % 3) for i, h in enumerate(host)]  # 50 ns over a 1000 ns period
    assert clock.steady_lags(host, spread, [1] * 40, period_ns=1000) is False
    one_outlier = [*steady[:-1], steady[-1] + 900]
    assert clock.steady_lags(host, one_outlier, [1] * 40, period_ns=1000) is True
    assert clock.steady_lags(host, [U] * 30 + steady[30:], [1] * 40, period_ns=1000) is None  # 10 measured
    assert clock.steady_lags(host, steady, [1, 2] * 20, period_ns=1000) is False
    # an edge the stream was idle at reads its host time: a lag of 0, measured
    assert clock.steady_lags(host, host, [1] * 40, period_ns=1000) is True


def test_the_sampling_places_one_step_in_each_block_at_no_fixed_place():
    s, k = clock.SAMPLED, clock.SPARSE_EVERY
    blocks = [s[i:i + k] for i in range(0, len(s), k)]
    assert all(sum(b) == 1 for b in blocks)
    assert len({b.index(True) for b in blocks}) == k
    assert len(s) & (len(s) - 1) == 0  # a power of two: the lanes index it with a mask
    assert threading.get_ident()  # the fake ident is put back
