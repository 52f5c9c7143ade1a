"""Communication metrics (perfdoctor.analysis.comms) on a CRAFTED trace.

None of our real traces runs a communication kernel (NCCL launches none at world size 1),
so this test CRAFTS a labelled one from a real H200 trace: in ``h200-threads`` a worker
thread launches 3 kernels per step on a second stream (stream 13) while the main thread's
kernels run on stream 7. Those side-stream kernels are renamed
``ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)``; their times
are untouched in the first variant (there the worker's kernels happen to run serialized
with the main stream: overlap 0), and in the second variant they are also moved 1500 µs
later so they run under the main stream's kernels (partial overlap). The expected numbers
are a hand computation on a nanosecond boolean timeline built straight from the JSON (no
interval arithmetic shared with the module).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from perfdoctor.analysis import comms

from perfdoctor.analysis import ownership
from perfdoctor.pipeline import load_trace
from perfdoctor.analysis.steps import find_steps

WILD = Path(__file__).parents[1] / "fixtures" / "wild"
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
SIDE_STREAM = 13


SHIFTS_US = (0.0, 1500.0)


@pytest.fixture(scope="module", params=SHIFTS_US, ids=lambda s: f"shift{s:g}us")
def crafted(tmp_path_factory, request):
    doc = json.loads(gzip.decompress((WILD / "h200-threads.kineto.json.gz").read_bytes()))
    renamed = 0
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") == "kernel" and e["args"].get("stream") == SIDE_STREAM:
            e["name"] = NCCL
            e["ts"] += request.param
            renamed += 1
    assert renamed == 15  # 3 per step x 5 steps
    path = tmp_path_factory.mktemp("comms") / f"threads-nccl-{request.param:g}.json"
    path.write_text(json.dumps(doc))
    gpu = [
        (round(e["ts"] * 1000), round(e["ts"] * 1000) + round(e["dur"] * 1000), e["name"] == NCCL, e["args"].get("correlation"))
        for e in doc["traceEvents"]
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
    ]
    return path, gpu, request.param


def _hand(gpu, lo, hi):
    """Boolean timeline of [lo, hi): comm, compute (non-comm kernels; this trace has no copies)."""
    comm = np.zeros(hi - lo, dtype=bool)
    comp = np.zeros(hi - lo, dtype=bool)
    for s, e, is_comm, _ in gpu:
        s, e = max(s, lo) - lo, min(e, hi) - lo
        if e > s:
            (comm if is_comm else comp)[s:e] = True
    busy = comm | comp
    return {
        "comm_ns": int(comm.sum()),
        "compute_ns": int(comp.sum()),
        "busy_ns": int(busy.sum()),
        "overlap_ns": int((comm & comp).sum()),
        "exposed_ns": int((comm & ~comp).sum()),
    }


def test_whole_trace(crafted):
    path, gpu, shift = crafted
    p = load_trace(path)
    lo, hi = min(s for s, *_ in gpu), max(e for _, e, *_ in gpu)
    got = comms.profile_metrics(p)
    want = _hand(gpu, lo, hi)
    for k, v in want.items():
        assert got[k] == v, k
    assert got["collectives"] == 15
    assert got["comm_share"] == pytest.approx(want["comm_ns"] / want["busy_ns"])
    assert got["overlap"] == pytest.approx(want["overlap_ns"] / want["comm_ns"])
    assert 0 < got["comm_share"] < 1
    if shift:
        assert 0 < got["overlap"] < 1  # the shifted collectives run partly under compute
    else:
        assert got["overlap"] == 0  # as recorded: the side stream never overlaps the main one


def test_per_step(crafted):
    path, gpu, shift = crafted
    p = load_trace(path)
    s = find_steps(p)
    own = ownership.assign(p, s.table)
    table = ownership.step_counts(p, s.table, own)
    per = comms.step_metrics(p, table, own.activity_step)
    assert per["collectives"].tolist() == [3] * 5
    # hand: each step's window from the JSON = span of the kernels launched in its host window
    owner = dict(zip(p.calls["correlation"], own.call_step))
    for i in range(5):
        mine = [g for g in gpu if owner.get(g[3], -1) == i]
        lo, hi = min(g[0] for g in mine), max(g[1] for g in mine)
        want = _hand(gpu, lo, hi)
        for k, v in want.items():
            assert per.loc[i, k] == v, (i, k)
        assert per.loc[i, "overlap"] == pytest.approx(want["overlap_ns"] / want["comm_ns"])
        assert per.loc[i, "mean_collective_us"] == pytest.approx(
            sum(g[1] - g[0] for g in mine if g[2]) / 3 / 1e3
        )
    # without ownership: the collectives that START inside each step's GPU window
    by_window = comms.step_metrics(p, table)
    starts = {i: sum(1 for g in gpu if g[2] and table.loc[i, "gpu_start_ns"] <= g[0] < table.loc[i, "gpu_end_ns"]) for i in range(5)}
    assert by_window["collectives"].tolist() == [starts[i] for i in range(5)]
    assert by_window["comm_ns"].tolist() == per["comm_ns"].tolist()
    summ = comms.summary(per)
    assert summ["collectives_per_step"] == 3
    assert summ["comm_overlap"] == pytest.approx(float(per["overlap"].median()))


def test_no_communication_is_nan_not_perfect():
    """A real trace without collectives: overlap is NaN (not 1.0) and share is 0."""
    p = load_trace(WILD / "h200-train-ddp.kineto.json.gz")
    got = comms.profile_metrics(p)
    assert got["comm_ns"] == 0 and got["collectives"] == 0
    assert got["comm_share"] == 0.0
    assert np.isnan(got["overlap"])
    s = find_steps(p)
    summ = comms.summary(comms.step_metrics(p, s.table, s.activity_step))
    assert summ["collectives_per_step"] == 0 and np.isnan(summ["comm_overlap"])


def test_union_clipping():
    assert comms.union_ns(np.array([0, 5, 20]), np.array([10, 15, 30])) == 25
    assert comms.union_ns(np.array([0, 5, 20]), np.array([10, 15, 30]), 8, 25) == 12
    assert comms.union_ns(np.array([], dtype=np.int64), np.array([], dtype=np.int64)) == 0
