"""``perfdoctor run`` on programs that are hard to run (issue 12 on), the CPU contention
and the default run's bounds: the second half of test_run.py's, in a file of its own so the
suite's two workers share them (loadfile runs a file on one worker).
"""

from __future__ import annotations

import json
import re
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import program_result, run_cli
from perfdoctor.text import value
from test_run import PROGRAMS, ROOT, manifest, metrics, no_gpu, only_bundle, perfdoctor_run


# --- issue 12: programs that are hard to run ----------------------------------------------


def test_steps_on_a_worker_thread(tmp_path):
    done = perfdoctor_run(str(PROGRAMS / "worker_steps.py"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    bundle = only_bundle(tmp_path)
    m = manifest(bundle)
    assert m["light_pass"]["step_thread"] == "worker"
    assert m["collectors"]["torch"]["status"] == "ok", m["collectors"]["torch"]
    assert "worker thread" in m["passes"][1]["trace_scope"]
    assert metrics(bundle)["metrics"]["steps"]["value"] == 12  # the whole program: every step


def test_forking_program_neither_hangs_nor_mixes_results(tmp_path):
    done = perfdoctor_run(str(PROGRAMS / "forker.py"), cwd=tmp_path, timeout=90)
    assert done.returncode == 0, done.stderr
    assert "child exit status 0" in done.stdout
    bundle = only_bundle(tmp_path)
    m = manifest(bundle)
    assert m["collectors"]["torch"]["status"] == "ok", m["collectors"]["torch"]
    light = json.loads((bundle / "raw" / "light.json").read_text())
    assert light["step_counts"] == {"parent_step": 8}  # the child's steps are not the parent's
    assert "child_step" not in light["series"]
    assert "child exit status 0" in (bundle / "raw" / "torch.log").read_text()
    assert json.loads((bundle / "raw" / "torch.json").read_text())["step_counts"] == {"parent_step": 8}


@pytest.mark.parametrize(("program", "code", "status"), [("exit3.py", 3, "failed: the program exited 3"),
                                                          ("raises.py", 1, "failed: the program exited 1 (RuntimeError")])
def test_a_pass_whose_program_failed_is_not_ok(tmp_path, program, code, status):
    done = perfdoctor_run(str(PROGRAMS / program), cwd=tmp_path)
    assert done.returncode == code
    m = manifest(only_bundle(tmp_path))
    assert m["exit_code"] == code and [p["exit_code"] for p in m["passes"]] == [code, code]
    assert m["collectors"]["torch"]["status"].startswith(status), m["collectors"]["torch"]
    if program == "raises.py":  # the program's traceback as python prints it: none of perfdoctor's frames
        trace = done.stderr[done.stderr.index("Traceback"):]
        assert f'File "{PROGRAMS / program}", line 10' in trace and "RuntimeError: the program failed on purpose" in trace
        assert "bootstrap" not in trace.split("RuntimeError")[0] and "runpy" not in trace, trace


def test_a_program_that_fails_before_any_step_is_run_once(tmp_path):
    # a missing model file, a bad argument, an import error: the traced passes would fail
    # the same way after the same start-up (a model's load, minutes on a GPU). The program
    # ran once; the bundle says why nothing else ran, and the exit status is the program's
    (tmp_path / "loads.py").write_text("import torch\n\ntorch.load('no-such-checkpoint.pt')\n")
    done = perfdoctor_run(str(tmp_path / "loads.py"), cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    m = manifest(only_bundle(tmp_path))
    assert [p["name"] for p in m["passes"]] == ["light"] and m["status"] == "done"
    assert m["light_pass"]["reason"].startswith("no step seen: the program exited 1 (FileNotFoundError")
    assert m["collectors"]["torch"]["status"].startswith("failed: not run, the program failed in the light pass before any step: "
                                                         "the program exited 1 (FileNotFoundError"), m["collectors"]["torch"]
    assert "the traced passes are not run" in done.stderr
    # a program that ran steps before it failed is traced: the steps are there to see (raises.py above)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--step-fn", "json:nope", "x.py"], "--step-fn json:nope: json has no attribute nope"),
        (["--step-fn", "no_such_module:f", "x.py"], "no module named no_such_module"),
        (["-m", "no_such_module"], "-m no_such_module: no module named no_such_module"),
        (["--out", "afile", "x.py"], "cannot write the run bundle"),
        (["--out", "/proc/perfdoctor-runs", "x.py"], "cannot write the run bundle"),
    ],
)
def test_bad_target_or_out_is_one_line_and_exit_2(tmp_path, args, message):
    (tmp_path / "x.py").write_text("print('ran')\n")
    (tmp_path / "afile").write_text("")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "perfdoctor.record.run", *args], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [done.stderr.strip()] and done.stderr.startswith("error: ")
    assert message in done.stderr
    assert "ran" not in done.stdout


def test_full_disk_while_writing_the_bundle_is_one_line(tmp_path):
    import resource

    def small_files() -> None:  # writes past 1 KB fail with EFBIG (Python ignores SIGXFSZ)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    (tmp_path / "x.py").write_text("print('ran')\n")
    done = subprocess.run([sys.executable, "-m", "perfdoctor.record.run", "--out", "runs", "x.py"], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=120, preexec_fn=small_files)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == ["error: cannot write the run bundle in runs (File too large)"]


class FakeCuda:
    """A stand-in for torch's CUDA events, labelled as such: it lets the light pass's GPU
    bookkeeping (event pool, settling, graph-capture marks) run on a CPU-only machine. The
    real thing runs in tests/record/test_run_gpu.py on the H200."""

    def __init__(self) -> None:
        self.now_ms = 0.0
        self.capturing = False
        self.idle = False  # the current stream has nothing left to run
        self.created = 0
        fake = self

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                fake.created += 1
                self.t = None

            def record(self, stream: object = None) -> None:
                fake.now_ms += 0.5
                self.t = fake.now_ms

            def query(self) -> bool:
                return self.t is not None

            def synchronize(self) -> None:
                pass

            def elapsed_time(self, other: "Event") -> float:
                return other.t - self.t

        self.Event = Event
        self.synchronize = lambda: None
        self.current_stream = lambda: type("Stream", (), {"query": staticmethod(lambda: fake.idle)})
        self.is_current_stream_capturing = lambda: fake.capturing
        self._C = type("C", (), {"_cuda_isCurrentStreamCapturing": staticmethod(lambda: fake.capturing)})
        self.cuda = self


def test_light_pass_gpu_bookkeeping_with_fake_events():
    from perfdoctor.record.bootstrap import clock

    fake = FakeCuda()
    timer = clock.Timer()
    timer.clock = clock.GpuClock(fake)
    made_before_the_steps = fake.created
    times = clock.StepTimes(timer)
    for i in range(300):
        fake.capturing = i == 150  # one step inside a CUDA graph capture
        times.start("step")
        times.end("step")
    fake.capturing = False
    series, error = times.series()
    assert error is None
    s = series["step"]
    assert len(s["host_start_ns"]) == len(s["gpu_start_ns"]) == len(s["gpu_end_ns"]) == 299  # the captured one dropped
    assert all(a < b for a, b in zip(s["gpu_start_ns"], s["gpu_end_ns"]))
    assert all(e <= b for e, b in zip(s["gpu_end_ns"][:-1], s["gpu_start_ns"][1:]))  # each end precedes the next start
    assert s["gpu_end_ns"][1] - s["gpu_end_ns"][0] == 1_000_000  # 1 ms of fake GPU time per step
    # The pool is made before the first step and settled events go back to it: no step
    # creates an event (creating one on the H200 is what a short run paid per step).
    assert made_before_the_steps >= clock.GpuClock.POOL
    assert fake.created == made_before_the_steps


def test_full_collections_are_recorded_young_ones_not():
    """FullCollections: each full collection's host start and end (a gc.collect() of
    generation 2, and of generation 0, which it leaves out), none after uninstall."""
    import gc

    from perfdoctor.record.bootstrap import clock

    full = clock.FullCollections()
    try:
        before = time.perf_counter_ns()
        gc.collect(0)
        gc.collect()
        after = time.perf_counter_ns()
        got = full.series()
        assert got is not None and len(got["start_ns"]) == len(got["end_ns"]) == 1
        assert before <= got["start_ns"][0] <= got["end_ns"][0] <= after
    finally:
        full.uninstall()
    gc.collect()
    assert full.series() == got and full.seen not in gc.callbacks


def test_each_step_start_reads_its_threads_wait_for_a_cpu():
    """RunQueue: each thread reads its own schedstat (a file opened by that thread), the
    series carries the readings as ns, and a system without the file gives None, never a
    wrong number."""
    import threading

    from perfdoctor.record.bootstrap import clock

    timer = clock.Timer()
    if not timer.run_queue.ok:
        pytest.skip("no /proc/thread-self/schedstat here")
    times = clock.StepTimes(timer)
    for _ in range(3):
        times.start("main")
        times.end("main")
    worker = threading.Thread(target=lambda: (times.start("worker"), times.end("worker")))
    worker.start()
    worker.join()
    series, error = times.series()
    assert error is None
    delays = series["main"]["run_delay_ns"]
    assert len(delays) == 3 and all(isinstance(d, int) for d in delays) and delays == sorted(delays)
    assert isinstance(series["worker"]["run_delay_ns"][0], int)
    assert len(timer.run_queue.fds) == 2  # one file per thread
    # a thread per request, all alive at once (distinct idents): OPEN files held, the
    # threads past them read None (one file is the main thread's; the ended worker's is
    # reopened by a thread that got its ident, or stays)
    opened, done = [], threading.Event()

    def request() -> None:
        opened.append(timer.run_queue.read(threading.get_ident()) is not None)
        done.wait(timeout=30)

    threads = [threading.Thread(target=request, daemon=True) for _ in range(clock.RunQueue.OPEN + 8)]
    try:
        for t in threads:
            t.start()
        while len(opened) < len(threads):
            time.sleep(0.001)
        assert len(timer.run_queue.fds) == clock.RunQueue.OPEN
        assert clock.RunQueue.OPEN - 2 <= sum(opened) <= clock.RunQueue.OPEN - 1
    finally:
        done.set()
        for t in threads:
            t.join()
    # this thread's reading is its run delay (field 2), at most what the file says after it
    (first,) = clock.run_delays_ns([timer.run_queue.read(threading.get_ident())])
    assert 0 <= first <= int(Path("/proc/thread-self/schedstat").read_text().split()[1])
    off = clock.Timer()
    off.run_queue.ok = False
    times = clock.StepTimes(off)
    times.start("main")
    times.end("main")
    assert times.series()[0]["main"]["run_delay_ns"] is None
    assert clock.run_delays_ns([b"1 2 3\n", b"garbage"]) is None and clock.run_delays_ns([b"1 2 3\n"]) == [2]


def test_a_lane_reads_the_run_queue_every_few_ms_and_after_gaps():
    """RunQueue.EVERY_NS: a lane reads its thread's wait for a CPU at a start when it last
    read it EVERY_NS ago or more, or after a gap of GAP_NS since its last step ended; the
    starts between come back interpolated in host time, per thread, and a thread with no
    reading at all makes the series None."""
    from perfdoctor.record.bootstrap import clock

    timer = clock.Timer()
    if not timer.run_queue.ok:
        pytest.skip("no /proc/thread-self/schedstat here")
    reads = []
    real = timer.run_queue.read
    timer.run_queue.fds.clear()
    timer.run_queue.read = lambda ident: reads.append(ident) or real(ident)
    times = clock.StepTimes(timer)
    start, end = times.lane("step")
    t0 = time.perf_counter_ns()
    for _ in range(50):  # 50 back-to-back steps well under EVERY_NS: the first start reads
        start()
        end()
    quick = time.perf_counter_ns() - t0
    raw = times.delay["step"]
    assert quick < clock.RunQueue.EVERY_NS and raw[0] is not None and raw[1:].count(None) == 49
    time.sleep(clock.RunQueue.GAP_NS / 1e9 * 1.5)  # a gap: the next start reads
    start()
    end()
    assert raw[-1] is not None
    series = times.series()[0]["step"]["run_delay_ns"]
    assert len(series) == 51 and all(isinstance(v, int) for v in series) and series == sorted(series)
    assert len(reads) == 2  # the first start and the one after the gap, no other

    # the interpolation itself: linear in host time between a thread's readings, held after the last
    raw = [b"0 100 0", None, None, b"0 400 0", None, b"0 50 0", None]
    at = [0, 10, 20, 30, 40, 0, 5]
    tid = [1, 1, 1, 1, 1, 2, 2]
    assert clock.run_delays_ns(raw, at, tid) == [100, 200, 300, 400, 400, 50, 50]
    assert clock.run_delays_ns([None, b"0 7 0"], [0, 1], [1, 2]) is None  # thread 1 never read
    assert clock.run_delays_ns([b"0 7 0", None]) is None  # no host times to place it by


def test_a_step_edge_on_an_idle_stream_records_no_event():
    """A step that starts while the stream has nothing left to run takes its host start as
    its GPU start (an event recorded there would complete at once); one that ends on an idle
    stream takes its host end as its GPU end (the stream finished the step's work before it).
    On a busy stream each edge records an event."""
    import time

    from perfdoctor.record.bootstrap import clock

    fake = FakeCuda()
    timer = clock.Timer()
    timer.clock = clock.GpuClock(fake)
    times = clock.StepTimes(timer)
    idle_start = [i % 2 == 0 for i in range(12)]
    idle_end = [i % 3 == 0 for i in range(12)]
    records, host_ends = [], []
    for i in range(12):
        fake.idle = idle_start[i]
        before = fake.now_ms
        times.start("step")
        started = fake.now_ms
        fake.idle = idle_end[i]
        before_end = time.perf_counter_ns()
        times.end("step")
        host_ends.append((before_end, time.perf_counter_ns()))
        records.append((started > before, fake.now_ms > started))  # the fake's clock moves at each record
    series, error = times.series()
    assert error is None
    s = series["step"]
    assert records == [(not a, not b) for a, b in zip(idle_start, idle_end)]
    assert [s["gpu_start_ns"][i] == s["host_start_ns"][i] for i in range(12)] == idle_start
    # An idle end is the host's clock read inside end(); a busy one the event's time, on
    # the fake's 0.5 ms grid from the clock's origin (not a host reading: a preempted
    # end() on a loaded box may span any time)
    t0 = timer.clock.t0_ns
    for i, (lo, hi) in enumerate(host_ends):
        end = s["gpu_end_ns"][i]
        assert (lo <= end <= hi) if idle_end[i] else (end - t0) % 500_000 == 0, (i, end - t0)
    assert all(isinstance(v, int) for v in s["gpu_start_ns"] + s["gpu_end_ns"])


def test_stream_ops_read_the_current_stream_every_time_and_fall_back():
    """The light pass's event record and stream query without torch's Python lookup of the
    current stream, against a labelled stand-in for torch's private CUDA API (the real one:
    test_run_gpu.py on the H200): every record and query goes to the stream current at that
    moment, the Stream objects are kept, and a torch whose private API differs gets the
    public Event.record and current_stream().query()."""
    import types

    from perfdoctor.record.bootstrap import clock

    made, recorded, queried = [], [], []
    busy = {3}  # streams with work left

    class Stream:
        def __init__(self, stream_id: int, device_index: int, device_type: int) -> None:
            made.append(stream_id)
            self.id = stream_id

    class Event:
        def __init__(self, enable_timing: bool = False) -> None:
            self.public = 0

        def record(self, stream: object = None) -> None:
            self.public += 1

    current = [0]

    def query(stream):
        queried.append(stream.id)
        return stream.id not in busy

    fake = types.SimpleNamespace(
        _C=types.SimpleNamespace(_cuda_getDevice=lambda: 0, _cuda_getCurrentStream=lambda d: (current[0], d, 1),
                                 _CudaEventBase=types.SimpleNamespace(record=lambda event, stream: recorded.append((event, stream.id))),
                                 _CudaStreamBase=types.SimpleNamespace(query=query)),
        cuda=types.SimpleNamespace(Stream=Stream, Event=Event,
                                   current_stream=lambda: types.SimpleNamespace(query=lambda: current[0] not in busy, public=True)),
    )
    stream, record, query = clock.stream_ops(fake)
    recorded.clear()
    queried.clear()
    e = Event()
    idles = []
    for sid in (0, 0, 3, 3, 0):
        current[0] = sid
        on = stream()
        record(e, on)
        idles.append(query(on))
    assert [r[1] for r in recorded] == [0, 0, 3, 3, 0] and e.public == 0
    assert queried == [0, 0, 3, 3, 0] and idles == [True, True, False, False, True]
    assert sorted(made) == [0, 3]  # one Stream object per stream (the scratch record made 0)

    def broken(event, stream):
        raise TypeError("record() takes 1 argument")

    fake._C._CudaEventBase = types.SimpleNamespace(record=broken)
    stream, record, query = clock.stream_ops(fake)
    on = stream()
    assert getattr(on, "public", False)  # torch.cuda.current_stream()'s
    record(e, on)
    assert e.public == 1  # the public path
    asked = len(queried)
    current[0] = 3
    assert query(stream()) is False and len(queried) == asked  # the public query, not the private one
    del fake._C._CudaStreamBase
    stream, record, query = clock.stream_ops(fake)
    record(e, stream())
    assert e.public == 2 and query(stream()) is False
    current[0] = 0
    assert query(stream()) is True


def test_nvml_sampler_gpm_intervals_with_a_fake_nvml(tmp_path, monkeypatch):
    """The sampler's loop against a labelled stand-in for pynvml (the real one runs on the
    H200): GPM lines carry their interval, at least 100 ms apart, and read back as intervals."""
    import types

    from perfdoctor.collectors import nvml

    class Metric:
        def __init__(self) -> None:
            self.metricId, self.nvmlReturn, self.value = 0, 0, 0.0

    class Request:
        def __init__(self) -> None:
            self.metrics = [Metric() for _ in range(8)]

    def metrics_get(request):
        for m in request.metrics[: request.numMetrics]:
            m.value = 42.0 if m.metricId == 10 else float("nan")

    fake = types.SimpleNamespace(
        nvmlInit=lambda: None, nvmlDeviceGetCount=lambda: 1, nvmlDeviceGetHandleByIndex=lambda i: "h",
        nvmlGpmQueryDeviceSupport=lambda h: types.SimpleNamespace(isSupportedDevice=1),
        nvmlGpmSampleAlloc=lambda: object(), nvmlGpmSampleGet=lambda h, s: None, nvmlGpmSampleFree=lambda s: None,
        c_nvmlGpmMetricsGet_t=Request, NVML_GPM_METRICS_GET_VERSION=1, NVML_SUCCESS=0, nvmlGpmMetricsGet=metrics_get,
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=50, memory=20),
        nvmlDeviceGetCurrentClocksThrottleReasons=lambda h: 0, nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(used=1),
        nvmlDeviceGetClockInfo=lambda h, k: 1000, NVML_CLOCK_SM=0, NVML_CLOCK_MEM=1, nvmlDeviceGetPowerUsage=lambda h: 100000,
        nvmlDeviceGetTemperature=lambda h, k: 40, NVML_TEMPERATURE_GPU=0, nvmlDeviceGetPcieThroughput=lambda h, k: 1,
        NVML_PCIE_UTIL_TX_BYTES=0, NVML_PCIE_UTIL_RX_BYTES=1, NVMLError=Exception,
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    path = tmp_path / "s.jsonl"
    sampler = nvml.Sampler(path, 0.02, index=0, gpm_interval_s=0.01)
    assert sampler.gpm and sampler.gpm_interval_s == nvml.GPM_MIN_INTERVAL_S
    sampler.start()
    time.sleep(0.75)
    sampler.stop()
    assert sampler.error is None
    intervals = nvml.read_intervals(path)
    dram = intervals["dram_bw_util"]
    assert len(dram) >= 4 and all(v == 0.42 for _, _, v in dram)
    assert all(t1 - t0 >= 0.095e9 for t0, t1, _ in dram)
    assert all(a[1] == b[0] for a, b in zip(dram, dram[1:]))  # back to back
    occupancy = nvml.steps_mean(intervals["sm_occupancy"], [(dram[0][0], dram[-1][1])])
    assert occupancy["value"] is None and occupancy["dropped_nan"] == len(dram)
    assert nvml.steps_mean(dram, [(dram[0][0], dram[-1][1])])["value"] == pytest.approx(0.42)


def test_find_step_times_loop_ranges_as_iterations_and_merges_serving_ranges():
    # torch's data-loader range is the fetch: the step runs from one fetch's start to the
    # next, the last fetch (StopIteration) starts no iteration; serving ranges of one engine
    # (SGLang also writes vLLM-style names around its own) become one series in time order
    from perfdoctor.bundle.protocol import PassResults
    from perfdoctor.record.light import find_step
    from perfdoctor.record.options import RunOptions

    fetch = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    results = PassResults(series={fetch: {"host_start_ns": [0, 100, 250, 330], "gpu_start_ns": None, "gpu_end_ns": [2, 103, 251, 331]}})
    name, how, module, rewritten = find_step(results, RunOptions(target=["x.py"]))
    assert (name, module, rewritten) == (fetch, None, True)
    assert "iteration" in how
    assert results.series[fetch]["host_start_ns"] == [0, 100, 250]
    assert results.series[fetch]["gpu_end_ns"] == [100, 250, 330]
    # the fetches as measured stay beside the iteration (raw/light.json keeps both)
    assert results.call_series[fetch]["gpu_end_ns"] == [2, 103, 251, 331]

    decode, extend = "step[DECODE bs=32]", "step[EXTEND bs=4 toks=512]"
    outer = "execute_32_context_0(sq0sk0sqsq0sqsk0)_generation_32(sq32sk1sqsq32sqsk1)"
    series = {
        outer: {"host_start_ns": [9, 49], "gpu_start_ns": None, "gpu_end_ns": [31, 71]},
        decode: {"host_start_ns": [10, 50], "gpu_start_ns": None, "gpu_end_ns": [30, 70]},
        extend: {"host_start_ns": [0], "gpu_start_ns": None, "gpu_end_ns": [8]},
    }
    results = PassResults(series=series)
    name, how, module, rewritten = find_step(results, RunOptions(target=["x.py"]))
    assert (name, rewritten) == ("serving step", True)
    assert results.series[name] == {"host_start_ns": [0, 10, 50], "gpu_start_ns": None, "gpu_end_ns": [8, 30, 70]}


def test_the_traced_window_opens_at_the_call_that_begins_the_light_pass_steady_step():
    # a training loop with no data loader, zero_grad at the iteration's end: the light pass's
    # series holds the iteration before the first zero_grad (steady.optimizer_iterations),
    # so its step k begins at the call k - 1, and a window counted in calls opens there
    from perfdoctor.bundle.protocol import LightPass, PassResults
    from perfdoctor.record.light import find_step, window_warmup
    from perfdoctor.record.options import RunOptions

    zero, step = "Optimizer.zero_grad#AdamW.zero_grad", "Optimizer.step#AdamW.step"
    n, period = 8, 100
    def marks(at: int, k: int = n) -> dict:
        return {"host_start_ns": [i * period + at for i in range(k)], "gpu_start_ns": None, "gpu_end_ns": [i * period + at + 5 for i in range(k)]}
    for shape, zero_at, leading in (("end", 90, 1), ("start", 0, 0)):
        results = PassResults(series={zero: marks(zero_at), step: marks(70)}, modules={"0": {"Net.forward": marks(10)}})
        name, *_ = find_step(results, RunOptions(target=["x.py"]))
        assert name == zero and len(results.series[zero]["host_start_ns"]) == n, shape
        for warmup in (0, 3):
            w = window_warmup(results, LightPass(step_name=name, warmup=warmup))
            assert w == max(0, warmup - leading), shape
            if warmup:  # the window's first call begins the light pass's step `warmup`
                assert results.call_series[zero]["host_start_ns"][w] == results.series[zero]["host_start_ns"][warmup]
    # gradient accumulation: each optimizer step from its group's first fetch, before its
    # call: the window opens at the call before, after which the group's fetches come
    fetch = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    fetches = [g * period + i * 20 for g in range(n) for i in range(3)]
    results = PassResults(series={fetch: {"host_start_ns": fetches, "gpu_start_ns": None, "gpu_end_ns": [f + 5 for f in fetches]},
                                  step: marks(70)})
    name, *_ = find_step(results, RunOptions(target=["x.py"]))
    assert name == step and results.series[step]["host_start_ns"][3] == 3 * period
    w = window_warmup(results, LightPass(step_name=name, warmup=3))
    assert w == 2 and results.call_series[step]["host_start_ns"][w] < 3 * period < results.call_series[step]["host_start_ns"][w + 1]
    # a data loader's steps begin at their fetches: the window as before
    results = PassResults(series={fetch: marks(0)})
    name, *_ = find_step(results, RunOptions(target=["x.py"]))
    assert window_warmup(results, LightPass(step_name=name, warmup=3)) == 3


# prefetch_train.py's light pass on the H200 (2026-12-05), ms per step: the first iteration,
# four on batches its producer made meanwhile, then the steady ones
PREFETCHED = [521.4, 7.7, 5.3, 4.6, 4.3, 42.8, 58.7, 59.3, 59.3, 59.4, 72.3, 59.2, 61.1, 59.0, 59.7, 60.3, 59.5, 61.3, 60.2,
              61.1, 57.8, 58.2, 59.8, 59.0, 60.3, 61.8, 56.9, 56.2, 56.2, 56.1, 57.2, 57.5, 57.8, 56.9, 57.3, 57.1, 60.7, 60.9]


def test_the_traced_window_opens_past_fast_leading_steps():
    # The steady state (from step 1) leaves out slower first steps only: a window of 10 from
    # step 1 held the four prefetched batches, a traced p50 of 22.5 ms against 59.2 untraced.
    # It opens at step 6 now, the first of three in a row at 0.8 of the steady median or more
    from perfdoctor.bundle.protocol import LightPass, PassResults
    from perfdoctor.record.light import TYPICAL, window_start, window_warmup

    cp = np.array(PREFETCHED)
    steady_ms = cp[1:]  # the light pass's step_latency_ms: from its steady start, step 1
    median = np.median(steady_ms)
    first = next(k for k in range(1, len(cp)) if (cp[k:k + 3] >= TYPICAL * median).all())
    assert first == 6 and 1 + window_start(steady_ms, 10) == 6 and 1 + window_start(steady_ms, 0) == 6
    assert 1 + window_start(steady_ms, len(cp) - 2) == 1  # no window of that many fits after them: as before
    assert window_start(cp[6:], 10) == 0  # no fast lead: the steady start
    assert window_start(np.array([1.0, 9.0, 1.0, 9.0, 1.0, 9.0]), 2) == 0  # never three in a row: as before
    # through the traced passes' warm-up, in steps of a call series (a module step) ...
    at = np.concatenate([[0.0], np.cumsum(cp)]) * 1e6
    series = {"host_start_ns": at[:-1].astype(int).tolist(), "gpu_start_ns": None, "gpu_end_ns": at[1:].astype(int).tolist()}
    results = PassResults(series={"Net.forward": series})
    light = LightPass(step_name="Net.forward", warmup=1, step_latency_ms=steady_ms.tolist())
    assert window_warmup(results, light, 10) == 6
    # ... and never past a warm-up the user gave
    assert window_warmup(results, LightPass(step_name="Net.forward", warmup=1, warmup_explicit=True,
                                            step_latency_ms=steady_ms.tolist()), 10) == 1


def test_the_traced_window_of_a_ppo_iteration_opens_at_the_mark_before_its_rollout():
    # CleanRL's PPO, 8 iterations 100 apart: a rollout of 10 forwards (0..9), then 4 minibatch
    # updates, each a forward, zero_grad and the optimizer's step (20, 22, 24; 35, ...). The
    # light pass's step is the iteration (steady.mark_groups), from the rollout's first forward;
    # the traced passes count zero_grads, 4 per iteration: its step 3 begins after zero_grad
    # 11, group 2's last, so a window counted in marks opens there (before: at 2, the warm-up
    # counted in steps, less the one before the first mark: inside iteration 0's updates)
    from perfdoctor.bundle.protocol import LightPass, PassResults
    from perfdoctor.record.light import find_step, window_warmup
    from perfdoctor.record.options import RunOptions

    zero, step = "Optimizer.zero_grad#Adam.zero_grad", "Optimizer.step#Adam.step"
    n, per = 8, 4

    def at(offsets: list[int]) -> dict:
        starts = [100 * k + o for k in range(n) for o in offsets]
        return {"host_start_ns": starts, "gpu_start_ns": None, "gpu_end_ns": [t + 1 for t in starts]}

    updates = [20 + 15 * j for j in range(per)]
    results = PassResults(series={zero: at([u + 2 for u in updates]), step: at([u + 4 for u in updates])},
                          modules={"0": {"Net.forward": at(list(range(10)) + updates)}})
    name, how, *_ = find_step(results, RunOptions(target=["x.py"]))
    assert name == zero and results.series[zero]["host_start_ns"] == [100 * k for k in range(n)]
    assert f"({n * per}x), {per} per iteration" in how and f"{n} iterations" in how
    w = window_warmup(results, LightPass(step_name=name, warmup=3))
    calls = results.call_series[zero]["host_start_ns"]
    assert w == 3 * per - 1 and calls[w] < results.series[zero]["host_start_ns"][3] < calls[w + 1]
    # a training loader's fetches: the traced passes count every one, the validation's and
    # those that raised StopIteration (30, 50 | 130, 150) too: step 4 (110) is their 9th
    fetch = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    results = PassResults(series={fetch: at([0, 10, 20, 40, 45]), step: at([5, 15, 25])}, exhausted={fetch: at([30, 50])})
    name, *_ = find_step(results, RunOptions(target=["x.py"]))
    assert name == fetch and results.series[fetch]["host_start_ns"][:6] == [0, 10, 20, 100, 110, 120]
    assert window_warmup(results, LightPass(step_name=name, warmup=4)) == 8


# --- issue 32, item 9: a default run finishes in bounded time and says how long -----------------


@pytest.mark.parametrize("name, inside", [
    # a module call's range holds its kernels: the range is the call, steps 2 and 3
    ("ResNet.forward", ["fetch 2", "work 2", "fetch 3", "work 3"]),
    # the data loader's fetch holds none (H100: "no kernel profiled"): from the fetch of step 2
    # to the fetch after step 3, the iterations' work included
    ("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", ["fetch 2", "work 2", "fetch 3", "work 3"]),
])
def test_the_ncu_range_holds_the_steps_work_whatever_marks_the_step(monkeypatch, name, inside):
    import torch
    from perfdoctor.bundle.protocol import PassConfig
    from perfdoctor.record.bootstrap.session import Session

    log, depth = [], []
    monkeypatch.setattr(torch.cuda.nvtx, "range_push", lambda msg: depth.append(msg))
    monkeypatch.setattr(torch.cuda.nvtx, "range_pop", lambda: depth.pop())
    session = Session(PassConfig(pass_="ncu", warmup=2, steps=4, ncu_steps=2, windowed=True))
    loop = name.startswith("enumerate")
    for i in range(6):
        session.begin_step(name)
        if depth:
            log.append(f"fetch {i}")
        if loop:  # the fetch's range ends before the iteration's work
            session.end_step(name)
        if depth:
            log.append(f"work {i}")
        if not loop:
            session.end_step(name)
    assert log == inside and depth == []


def test_ncu_replays_each_distinct_launch_of_the_step_once():
    from perfdoctor.collectors import ncu
    from perfdoctor.pipeline import load_trace

    kernels = load_trace(ROOT / "tests" / "fixtures" / "h200-decode-eager-5steps.kineto.json.gz").kernels
    ks = ncu.kernel_set(kernels)
    # Counted by hand from the trace's kernel rows: 4315 launches, 29 kernel names, 38
    # distinct (name, grid, block) launches; every one kept (under the caps), so no name filter.
    assert len(kernels) == 4315 and ks.launches == 38 and len(ks.names) == 29 and ks.capped == 0
    assert ks.regex() is None
    cmd = ncu.command("ncu", Path("ncu.log"), ks)
    assert cmd[cmd.index("--filter-mode") + 1] == "per-launch-config" and cmd[cmd.index("--launch-count") + 1] == "1"
    assert "-c" not in cmd and "--kernel-name" not in cmd
    assert cmd[cmd.index("--nvtx-include") + 1] == "perfdoctor_ncu/"  # still inside the step window
    # Names ranked by GPU time: the cap keeps the largest.
    time = (kernels["end_ns"] - kernels["start_ns"]).groupby(kernels["name"]).sum().sort_values(ascending=False)
    top = ncu.kernel_set(kernels, cap=3)
    assert top.names == tuple(time.index[:3]) and top.capped == 26
    import re

    rx = top.regex()
    assert [n for n in kernels["name"].unique() if re.fullmatch(rx, n)] == [n for n in kernels["name"].unique() if n in top.names]
    cmd = ncu.command("ncu", Path("ncu.log"), top)
    assert cmd[cmd.index("--kernel-name") + 1] == f"regex:{rx}" and cmd[cmd.index("--kernel-name-base") + 1] == "demangled"
    # The regex stays an argument Linux accepts: a character cap drops the rest.
    assert len(ncu.kernel_set(kernels, max_chars=200).names) < 29
    # Without a torch or nsys trace: the capped replay of the window, as before.
    assert ncu.command("ncu", Path("ncu.log"), None, 2000)[6:8] == ["-c", "2000"]


def test_ncu_plan_says_what_the_pass_replays():
    from perfdoctor.collectors.ncu import KernelSet
    from perfdoctor.record.passes import ncu_plan

    assert ncu_plan(KernelSet(("a", "b"), 3), "torch", 2000) == (
        "each distinct launch (kernel, grid, block) of the step once: up to 3 launches of 2 kernels, from the torch pass")
    assert "the 2 largest by GPU time (5 more left out: at most 200 kernels)" in ncu_plan(KernelSet(("a", "b"), 9, capped=5), "nsys", 2000)
    assert ncu_plan(None, None, 2000).startswith("the first 2000 kernel launches of the step window (no torch or nsys trace")


def test_a_torch_pass_whose_window_never_opened_says_what_it_waited_for(tmp_path):
    # CI: a torchrun job stopped at --duration 6 s read "no step reached the window (warmup
    # None: {...: 33})", None being the name of the window that never opened
    from perfdoctor.bundle.protocol import PassConfig, PassResults
    from perfdoctor.record.passes import torch_status
    from perfdoctor.record.runner import PassResult

    seen = PassResults(step_counts={"train_step": 33}, window_state="before", exit_code=0)
    base = PassConfig(step="train_step", warmup=40, steps=10)
    stopped = PassResult("torch", [], -15, results=seen, stopped="at --duration 6 s")
    assert torch_status(stopped, tmp_path / "torch.json", None, base) == (
        "failed: no step reached the window, which opens after 40 warm-up steps of 'train_step' (steps begun: "
        "{'train_step': 33}); the program was stopped at --duration 6 s first: a longer --duration lets it reach the window")
    ended = PassResult("torch", [], 0, results=PassResults(window_state="before", exit_code=0))
    assert torch_status(ended, tmp_path / "torch.json") == "failed: no step reached the window (steps begun: none)"


def test_progress_line_and_time_left():
    from perfdoctor.bundle.protocol import LightPass
    from perfdoctor.record.progress import Expected, Ticks, expected_of, line, time_left_s
    from perfdoctor.text import elapsed

    light = Expected(steps=40, step_s=0.5, total_s=30.0)
    ticks = Ticks()
    assert time_left_s(ticks, 5.0, light) == pytest.approx(25.0)  # no tick yet: the light pass's 30 s, 5 s gone
    assert time_left_s(ticks, 31.0, light) is None
    ticks.add(2, at_s=10.0)  # start-up took 10 s: the first ticks, 2 steps
    assert time_left_s(ticks, 10.5, light) == pytest.approx(38 * 0.5)  # one batch: the light pass's step time
    ticks.add(2, at_s=14.0)  # 2 steps in 4 s: 2 s a step, start-up left out
    assert time_left_s(ticks, 14.0, light) == pytest.approx(36 * 2.0)
    ticks.add(6, at_s=18.0)  # the pace of the last 5 s: 14 -> 18 s, 6 steps (the batch at 10 s is older)
    assert ticks.pace_s() == pytest.approx(4 / 6)
    assert line("torch", ticks, 18.0, light) == "torch pass: 10 of 40 steps, 18 s elapsed, about 20 s left"
    assert line("light", Ticks(), 3.2, None) == "light pass: 3 s elapsed"
    assert line("ncu", Ticks(), 125.0, Expected(40, 4.0, 160.0)) == "ncu pass: 0 of 40 steps, 2 min 5 s elapsed, about 35 s left"
    ticks.add(30, at_s=40.0)
    assert time_left_s(ticks, 40.0, light) is None and time_left_s(Ticks(), 1.0, None) is None
    assert elapsed(59.6) == "1 min 0 s"
    # a step of 4 ticks (an optimizer's 4 steps per PPO iteration): 10 ticks are 2 steps done
    grouped = Ticks(per=4)
    grouped.add(10, at_s=5.0)
    assert grouped.done == 2 and line("torch", grouped, 5.0, None) == "torch pass: 2 steps, 5 s elapsed"
    assert expected_of(LightPass(steps_seen=3, step_latency_ms=[30.0, 10.0, 20.0]), 4.0) == Expected(3, 0.02, 4.0)
    assert expected_of(LightPass(steps_seen=0, step_latency_ms=[]), 4.0) is None and expected_of(None, None) is None
    # --duration 60: a traced pass that stops the program after its window (12 steps of the
    # light pass's 3,000) expects those; no pass is expected past the 60 s
    stops = expected_of(LightPass(steps_seen=3000, step_latency_ms=[20.0] * 3), 60.0, until=12, limit_s=60.0)
    assert stops == Expected(12, 0.02, 60.0, 60.0)
    assert line("torch", Ticks(), 2.0, stops) == "torch pass: 0 of 12 steps, 2 s elapsed, about 58 s left"
    slow = Ticks()
    slow.add(1, at_s=10.0)
    slow.add(2, at_s=14.0)  # 4 s a step: 10 steps left would be 40 s, 46 s after the 60
    assert time_left_s(slow, 56.0, stops) == pytest.approx(4.0) and time_left_s(slow, 61.0, stops) is None


def test_step_ticks_reach_only_the_pipe_perfdoctor_run_made():
    from perfdoctor.record.bootstrap.session import progress_pipe

    r, w = os.pipe()
    other_r, other_w = os.pipe()
    try:
        st = os.fstat(w)
        assert progress_pipe(w, [st.st_dev, st.st_ino]) == w
        assert progress_pipe(other_w, [st.st_dev, st.st_ino]) is None  # another pipe at that number, under a tool
        assert progress_pipe(None, None) is None and progress_pipe(987654, [st.st_dev, st.st_ino]) is None
    finally:
        for fd in (r, w, other_r, other_w):
            os.close(fd)


@no_gpu
def test_a_cpu_run_shows_progress_on_stderr_and_says_why_ncu_is_absent(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFDOCTOR_PROGRESS_S", "0.5")  # a line every half second: the program runs a few
    done = perfdoctor_run(str(PROGRAMS / "cpu_steps.py"), "--steps", "60", "--size", "128", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    light = [line for line in lines if re.fullmatch(r"light pass: (\d+ steps, )?\d+ s elapsed", line)]
    torch_lines = [re.fullmatch(r"torch pass: (\d+) of 60 steps, (\d+) s elapsed(, about (\d+) s left)?", line) for line in lines]
    torch_lines = [m for m in torch_lines if m]
    assert light and torch_lines, done.stderr
    done_steps = [int(m.group(1)) for m in torch_lines]
    assert done_steps == sorted(done_steps)  # steps done only grow
    assert any(m.group(4) for m in torch_lines)  # an estimate of the time left, from the light pass's step time
    m = manifest(only_bundle(tmp_path))
    assert m["collectors"]["ncu"]["status"].startswith("unavailable: ")


# A loop's own host work between two model calls (a sampler's, here in pure Python), the
# loop timing each iteration itself: the shape of a generate loop on a CPU.
_SAMPLING_LOOP = """import json, sys, time
import torch
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64))
x, ms_each = torch.randn(4, 64), []
with torch.no_grad():
    for i in range(120):
        t = time.perf_counter()
        y = model(x)
        acc = 0
        for k in range(30000):  # the sampler: ~2 ms of the host's own work after each call
            acc += k * k % 7
        ms_each.append((time.perf_counter() - t) * 1e3)
print("RESULT " + json.dumps({"ms_each": ms_each}))
"""


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or not os.path.exists("/proc/thread-self/schedstat"),
                    reason="needs Linux's CPU affinity and per-thread schedstat")
def test_a_busy_neighbour_on_the_programs_cpu_stretches_its_steps_and_cuts_none(tmp_path: Path) -> None:
    # The loop above with a busy process on its one CPU: the scheduler takes the CPU from it
    # for a few ms at a time, now in a call, now in the host work after it. A gap stretched so
    # read as a pause (longer than a step, many times the usual), and its step kept the call
    # alone. The light pass reads each thread's time waiting for a CPU, which is no pause.
    cpu = min(os.sched_getaffinity(0))

    def pinned() -> None:
        os.sched_setaffinity(0, {cpu})

    program = tmp_path / "sampling_loop.py"
    program.write_text(_SAMPLING_LOOP)
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=pinned)
    try:
        r = subprocess.run([sys.executable, "-m", "perfdoctor", "run", "--collect", "nvml", "--out", str(tmp_path / "runs"), str(program)],
                           capture_output=True, text=True, timeout=240, preexec_fn=pinned,
                           env={**os.environ, "COLUMNS": "200", "OMP_NUM_THREADS": "1"})
    finally:
        busy.kill()
        busy.wait()
    assert r.returncode == 0, r.stderr[-2000:]
    own = np.array(program_result(r.stdout)["ms_each"])
    (bundle,) = (tmp_path / "runs").iterdir()
    light = json.loads((bundle / "manifest.json").read_text())["light_pass"]
    series = json.loads((bundle / "raw" / "light.json").read_text())["series"][light["step_name"]]
    assert light["step_name"] == "Sequential.forward" and light["steps_seen"] == own.size
    delay = np.array(series["run_delay_ns"])
    assert (delay[-1] - delay[0]) / 1e6 > 0.2 * own.sum()  # the neighbour did take the CPU
    ms = (np.array(series["gpu_end_ns"]) - np.array(series["host_start_ns"])) / 1e6
    # each iteration from its call to the next: the program's own per-iteration time, the
    # last one's end aside (its own call's end: nothing follows it)
    assert ms[:-1].sum() == pytest.approx(own[1:].sum(), rel=0.1)
    # every step waits alike, so no step is slow and uneven-steps cannot say it (nanoGPT's
    # train.py beside a neighbour: 46 % of each iteration, every check passing): cpu-contention
    # does, its ratio and estimate the steady steps' recorded waits, by hand
    from perfdoctor.pipeline import diagnose
    from perfdoctor.rules.signals import cpu_wait_ratio

    d = diagnose(bundle, warnings=False)
    (f,) = [x for x in d.findings if x.rule_id == "cpu-contention"]
    steady = np.arange(light["steady_start"], ms.size)
    waits = np.array(series["cpu_wait_ns"])[steady] / 1e6
    ratio = cpu_wait_ratio(d.analysis).value
    assert ratio == pytest.approx(waits.sum() / ms[steady].sum(), rel=0.02) and ratio > 0.2
    assert f.status == "fail" and f.estimate.ms_per_step == pytest.approx(waits.mean(), rel=1e-6)


_SHARED_CPU_LOOP = """import json, os, subprocess, sys, time
import torch
cpu = min(os.sched_getaffinity(0))
os.sched_setaffinity(0, {cpu})  # one CPU, as a small runner's job has
pinned = lambda: os.sched_setaffinity(0, {cpu})
def waited():  # the kernel's count of this thread's time ready to run but not running
    with open("/proc/thread-self/schedstat") as f:
        return int(f.read().split()[1])
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64))
x, ms_each, wait_ms, busy = torch.randn(4, 64), [], [], []
with torch.no_grad():
    for i in range(90):
        if i == 60:  # two other jobs land on the CPU for the run's last third: fewer than half
            # the steps, so the median stays a fast one (with half and one job, it read a slow one
            # under load and the slow steps' excess was their own jitter)
            busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=pinned) for _ in range(2)]
        t, w = time.perf_counter(), waited()
        y = model(x)
        acc = 0
        for k in range(30000):  # ~2 ms of the host's own work
            acc += k * k % 7
        ms_each.append((time.perf_counter() - t) * 1e3)
        wait_ms.append((waited() - w) / 1e6)
for b in busy:
    b.kill()
    b.wait()
print("RESULT " + json.dumps({"ms_each": ms_each, "wait_ms": wait_ms}))
"""


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or not os.path.exists("/proc/thread-self/schedstat"),
                    reason="needs Linux's CPU affinity and per-thread schedstat")
def test_slow_steps_that_waited_for_a_cpu_are_named_as_another_processs(tmp_path: Path) -> None:
    # The timm benchmark on the shared VM: 17 of 44 steps at ~2x the median while other jobs
    # ran, and uneven-steps sent the user to the data loader, the garbage collector, swapping
    # and the CUDA allocator of a CPU run. The light pass reads each thread's run-queue delay;
    # each step now notes its thread's wait for a CPU (cpu_wait_ns), the evidence shows it, and
    # where it explains the slow steps, uneven-steps says another process took the CPUs. Here
    # two busy processes join the program's one CPU for the last third of the run; the program
    # reads its own thread's schedstat around each step, the count checked against cpu_wait_ns.
    program = tmp_path / "shared_cpu.py"
    program.write_text(_SHARED_CPU_LOOP)
    r = run_cli("run", "--collect", "nvml", "--out", tmp_path / "runs", program, timeout=240, env={"OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    own = program_result(r.stdout)
    (bundle,) = (tmp_path / "runs").iterdir()
    light = json.loads((bundle / "manifest.json").read_text())["light_pass"]
    series = json.loads((bundle / "raw" / "light.json").read_text())["series"][light["step_name"]]
    assert light["step_name"] == "Sequential.forward" and light["steps_seen"] == len(own["ms_each"]) == 90
    waits = np.array(series["cpu_wait_ns"]) / 1e6
    # each step from one call to the next, its wait too: the program's own count, summed over the shared third
    assert waits[60:-1].sum() == pytest.approx(sum(own["wait_ms"][60:-1]), rel=0.15)
    assert waits[60:-1].sum() > 0.3 * sum(own["ms_each"][60:-1])  # the neighbour did take the CPU
    from perfdoctor.pipeline import diagnose

    f = next(f for f in diagnose(bundle, warnings=False).findings if f.rule_id == "uneven-steps")
    assert f.status == "fail" and f.title == "Uneven steps: another process took the CPUs in the slow steps", f.title
    (ev,) = [e for e in f.evidence if e.kind == "slow_untraced_steps"]
    assert "CPU wait ms" in ev.columns
    # the slowest steps listed are the shared third's (a step before it may join them when the
    # machine's other work preempted it: the suite's other worker does)
    assert sum(row[0] >= 60 for row in ev.rows) >= 0.8 * len(ev.rows), [row[:2] for row in ev.rows]


def test_process_work_names_what_a_child_runs_and_leaves_the_loop_s_helpers_out():
    # what the light pass reports as work in child processes: the target (torch's spawn:
    # the function it wraps), by start method; DataLoader workers and inductor's compile pool
    # are the program's own loop, not its work moved out of sight
    import importlib
    import multiprocessing
    from concurrent.futures.process import _process_worker

    from torch._inductor.async_compile import _async_compile_initializer
    from torch.utils.data._utils.worker import _worker_loop

    from perfdoctor.record.bootstrap.main import process_work

    class Server(multiprocessing.Process):
        def run(self) -> None:
            pass

    wrap = importlib.import_module("torch.multiprocessing.spawn")._wrap
    default = multiprocessing.get_all_start_methods()[0]
    spawn = multiprocessing.get_context("spawn")
    assert process_work(spawn.Process(target=wrap, args=(print, 0, (), None))) == "builtins.print (spawn)"
    assert process_work(multiprocessing.get_context("forkserver").Process(target=print)) == "builtins.print (forkserver)"
    assert process_work(Server()) == f"{__name__}.test_process_work_names_what_a_child_runs_and_leaves_the_loop_s_helpers_out.<locals>.Server.run ({default})"
    assert process_work(multiprocessing.Process(target=_worker_loop)) is None
    assert process_work(multiprocessing.Process(target=_process_worker, args=(None, None, _async_compile_initializer, (), None))) is None
    assert process_work(multiprocessing.Process(target=_process_worker, args=(None, None, None, (), None))) == (
        f"concurrent.futures.process._process_worker ({default})")


def test_program_work_names_the_python_program_a_subprocess_runs():
    from perfdoctor.record.bootstrap.main import program_work

    assert program_work([sys.executable, "train.py", "--epochs", "2"]) == f"{Path(sys.executable).name} train.py"
    assert program_work(["python3", "-u", "-m", "pkg.train"]) == "python3 -m pkg.train"
    assert program_work("python train.py --lr 0.1") == "python train.py"  # a shell string
    assert program_work([Path("/usr/bin/python3.11"), Path("run.py")]) == "python3.11 run.py"
    assert program_work(["torchrun", "--nproc-per-node", "2", "train.py"]) == "torchrun"
    assert program_work(["git", "rev-parse", "HEAD"]) is None and program_work("nvidia-smi -q") is None and program_work([]) is None


LAUNCHER = """import subprocess, sys
sys.exit(subprocess.run([sys.executable, sys.argv[1]]).returncode)  # set up, then run the training script
"""
TRAINS_AND_ASKS_GIT = """import subprocess, torch
subprocess.run(["git", "--version"], capture_output=True)  # the commit for the log: not the program's work
layer = torch.nn.Linear(8, 8)
for _ in range(20):
    layer(torch.ones(2, 8)).sum().backward()
"""


def test_a_launcher_that_runs_the_training_script_is_named_not_missed(tmp_path: Path):
    # launch.py runs `python train.py` through subprocess: the light pass saw no step and said
    # to name one with --step-fn; the work was in another program
    (tmp_path / "train.py").write_text(TRAINS_AND_ASKS_GIT)
    (tmp_path / "launch.py").write_text(LAUNCHER)
    r = run_cli("run", "--collect", "nvml", "--out", tmp_path / "runs", tmp_path / "launch.py", tmp_path / "train.py")
    assert r.returncode == 0, r.stderr[-2000:]
    said = " ".join(r.stderr.split())
    assert f"no step seen: the program ran work in child processes ({Path(sys.executable).name} {tmp_path / 'train.py'} (a program) x1)" in said
    assert "run the program that does the work under perfdoctor itself: perfdoctor run SCRIPT ARGS" in said
    # the training script run alone: its step, and its git call counted as no child
    r = run_cli("run", "--collect", "nvml", "--out", tmp_path / "alone", tmp_path / "train.py")
    assert r.returncode == 0, r.stderr[-2000:]
    (bundle,) = (tmp_path / "alone").iterdir()
    assert json.loads((bundle / "raw" / "light.json").read_text()).get("children") is None
    assert json.loads((bundle / "manifest.json").read_text())["light_pass"]["steps_seen"] == 20


STDIN_PROGRAM = """import sys, json, torch
lines = [l for l in sys.stdin if l.strip()]
layer = torch.nn.Linear(16, 16)
with torch.no_grad():
    for line in lines:
        layer(torch.full((4, 16), float(len(line))))
print("RESULT " + json.dumps({"lines": len(lines), "first": lines[0].strip() if lines else None}))
"""


@pytest.mark.parametrize("given", ["pipe", pytest.param("file", marks=pytest.mark.extended)])
def test_every_pass_reads_the_stdin_the_first_one_read(tmp_path: Path, given: str):
    # `cat prompts.txt | perfdoctor run infer.py` (or `< prompts.txt`): the traced pass read an
    # empty stdin, ran no step and left no trace, silently. Now it reads the same lines
    prog = tmp_path / "from_stdin.py"
    prog.write_text(STDIN_PROGRAM)
    text = "".join(f"prompt {i} {'x' * i}\n" for i in range(30))
    (tmp_path / "prompts.txt").write_text(text)
    out, tmp = tmp_path / "runs", tmp_path / "tmp"  # perfdoctor's own temporary folder: no other test's files in it
    tmp.mkdir()
    r = run_cli("run", "--collect", "torch", "--out", out, prog, env={"OMP_NUM_THREADS": "1", "TMPDIR": str(tmp)},
                stdin=text if given == "pipe" else tmp_path / "prompts.txt")
    assert r.returncode == 0, r.stderr[-2000:]
    assert program_result(r.stdout) == {"lines": 30, "first": "prompt 0"}
    (bundle,) = out.iterdir()
    assert program_result((bundle / "raw" / "torch.log").read_text()) == {"lines": 30, "first": "prompt 0"}
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["light_pass"]["steps_seen"] == 30
    assert manifest["collectors"]["torch"]["status"] == "ok"
    assert not list(tmp.glob("perfdoctor-stdin-*"))  # the recorded input is deleted


@pytest.mark.parametrize("command", ["run", pytest.param("compare-programs", marks=pytest.mark.extended)])
def test_every_process_of_a_repeated_run_reads_the_piped_stdin(tmp_path: Path, command: str):
    # `cat prompts.txt | perfdoctor run --repeat 3 infer.py`: the further processes read
    # nothing, ran no step and were left out ("its step was None"); compare-programs' B read
    # what A had left of the pipe (nothing) and compared A against an empty run
    prog = tmp_path / "from_stdin.py"
    prog.write_text(STDIN_PROGRAM)
    text = "".join(f"prompt {i}\n" for i in range(30))
    out, tmp = tmp_path / "runs", tmp_path / "tmp"
    tmp.mkdir()
    args = ["--repeat", "2", "--collect", "nvml", "--out", out, prog] if command == "run" else ["--repeat", "2", "--out", out, "--", prog, prog]
    r = run_cli(command, *args, env={"OMP_NUM_THREADS": "1", "TMPDIR": str(tmp)}, stdin=text)
    assert r.returncode == 0, r.stderr[-2000:]
    bundles = sorted(out.iterdir())
    assert len(bundles) == (1 if command == "run" else 2)
    for bundle in bundles:
        processes = json.loads((bundle / "manifest.json").read_text())["repeat"]["processes"]
        assert [(p["pass"], p["steps_seen"], p.get("excluded")) for p in processes] == [("light", 30, None), ("light-2", 30, None)]
    assert not list(tmp.glob("perfdoctor-stdin-*"))  # the recorded input is deleted


WARNINGS_ARE_ERRORS = """import warnings
warnings.simplefilter("error")  # the author makes every warning fatal, perfdoctor's included
import json, torch
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 4))
opt = torch.optim.Adam(model.parameters())
x, y = torch.randn(32, 64), torch.randint(0, 4, (32,))
for _ in range(30):
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
print("RESULT " + json.dumps({"iterations": 30}))
"""


def test_a_program_that_makes_every_warning_an_error_runs_in_every_pass(tmp_path: Path):
    # warnings.simplefilter("error") (or python -W error) turns any warning the bootstrap, the
    # light pass's timers or the torch profiler raise inside the program into its exception:
    # the program must run in every pass as it runs alone
    prog = tmp_path / "strict.py"
    prog.write_text(WARNINGS_ARE_ERRORS)
    r = run_cli("run", "--collect", "torch", "--out", tmp_path / "runs", prog, env={"OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    assert program_result(r.stdout) == {"iterations": 30}
    (bundle,) = (tmp_path / "runs").iterdir()
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert [(p["name"], p["exit_code"]) for p in manifest["passes"]] == [("light", 0), ("torch", 0)]
    assert manifest["light_pass"]["steps_seen"] == 30 and manifest["collectors"]["torch"]["status"] == "ok"


def test_a_traced_pass_stopped_by_what_the_first_pass_left_says_so(tmp_path: Path):
    # a training script that makes its run folder with os.makedirs (no exist_ok): the light
    # pass made it, the torch pass died of FileExistsError, and the run said only "exit 1"
    prog = tmp_path / "makes_its_folder.py"
    prog.write_text("import os, sys, torch\nos.makedirs(sys.argv[1])\nlayer = torch.nn.Linear(8, 8)\n"
                    "for _ in range(20):\n    layer(torch.ones(2, 8)).sum().backward()\n")
    out = tmp_path / "runs"
    r = run_cli("run", "--collect", "torch", "--out", out, prog, tmp_path / "exp1", env={"OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-2000:]  # the program's exit code: the first pass's
    said = " ".join(r.stderr.split())
    assert "torch pass: the program failed here (FileExistsError: [Errno 17] File exists:" in said
    assert "but ran to its end in the first pass: something an earlier pass left" in said


def test_a_pass_s_peak_memory_is_its_programs_not_what_the_parent_held(tmp_path):
    # Linux's ru_maxrss of a forked and exec'd program starts at the parent's resident memory
    # at the fork: started by a process holding 1.5 GB, a pass of a small program read a peak
    # of 1.5 GB. The peak is the program's own now (VmHWM): under what torch alone takes
    parent = textwrap.dedent(f"""
        import sys
        held = bytearray(1536 * 1024 * 1024)
        for i in range(0, len(held), 4096):
            held[i] = 1
        from perfdoctor.cli.commands import main
        main(["run", "-q", "--collect", "nvml", "--out", {str(tmp_path / "runs")!r}, {str(PROGRAMS / "cpu_steps.py")!r}, "--steps", "5"])
    """)
    done = subprocess.run([sys.executable, "-c", parent], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    peak = json.loads((only_bundle(tmp_path) / "raw" / "light.json").read_text())["max_rss_mb"]
    assert 50 < peak < 1000, peak
