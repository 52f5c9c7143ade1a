"""API-name roles across CUDA, HIP and nsys spellings (perfdoctor.names.api).

The expected counts come from a direct scan of the trace JSON with the test's own name
lists, not from the module under test.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfdoctor.names import api as apinames
from perfdoctor.pipeline import load_trace

WILD = Path(__file__).parents[1] / "fixtures" / "wild"
FIX = Path(__file__).parents[1] / "fixtures"

# The test's own truth, written out name by name.
CUDA_LAUNCH = {"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx", "cudaGraphLaunch"}
CUDA_SYNC = {"cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaMemcpy"}

# CUDA → HIP as ROCm's runtime names them. The driver launches cuLaunchKernel(Ex) (Triton,
# cuBLASLt) become module launches on ROCm.
CUDA_TO_HIP = {
    "cudaLaunchKernel": "hipLaunchKernel",
    "cudaLaunchKernelExC": "hipExtLaunchKernel",
    "cuLaunchKernel": "hipModuleLaunchKernel",
    "cuLaunchKernelEx": "hipExtModuleLaunchKernel",
    "cudaGraphLaunch": "hipGraphLaunch",
    "cudaDeviceSynchronize": "hipDeviceSynchronize",
    "cudaStreamSynchronize": "hipStreamSynchronize",
    "cudaEventSynchronize": "hipEventSynchronize",
    "cudaMemcpy": "hipMemcpyWithStream",  # PyTorch on ROCm copies synchronously with hipMemcpyWithStream
    "cudaMemcpyAsync": "hipMemcpyAsync",
    "cudaStreamBeginCapture": "hipStreamBeginCapture",
    "cudaStreamEndCapture": "hipStreamEndCapture",
    "cudaGraphInstantiateWithFlags": "hipGraphInstantiateWithFlags",
}


def _hip_name(name: str) -> str:
    if name in CUDA_TO_HIP:
        return CUDA_TO_HIP[name]
    if name.startswith("cuda"):
        return "hip" + name[4:]
    if name.startswith("cu"):
        return "hip" + name[2:]
    return name


def _events(path: Path) -> list[dict]:
    return json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]


def _host_names(events: list[dict]) -> list[str]:
    return [e["name"] for e in events if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver")]


def test_spellings():
    names = [
        "cudaLaunchKernel",
        "cudaLaunchKernel_v7000",
        "cudaLaunchKernel_ptsz_v7000",
        "cuLaunchKernelEx",
        "cudaLaunchCooperativeKernel",
        "cudaGraphLaunch_v10000",
        "cuGraphLaunch",
        "hipLaunchKernel",
        "hipExtLaunchKernel",
        "hipExtModuleLaunchKernel",
        "hipModuleLaunchKernel",
        "hipGraphLaunch",
        "hipLaunchKernel_spt",
    ]
    assert apinames.is_launch(names).all()
    assert list(apinames.is_graph_launch(names)) == [n.split("_")[0] in {"cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch"} for n in names]
    sync = ["cudaDeviceSynchronize", "cudaStreamSynchronize_v3020", "cudaEventSynchronize", "cudaMemcpy_v3020",
            "hipDeviceSynchronize", "hipStreamSynchronize", "hipEventSynchronize", "hipMemcpy", "hipMemcpyWithStream"]
    assert apinames.is_sync(sync).all()
    not_sync = ["cudaMemcpyAsync", "cudaMemcpyAsync_v3020", "hipMemcpyAsync", "cudaStreamWaitEvent", "cudaEventQuery",
                "cudaLaunchKernel", "cudaStreamIsCapturing"]
    assert not apinames.is_sync(not_sync).any()
    assert apinames.is_copy(["cudaMemcpyAsync", "hipMemcpyWithStream", "cuMemcpyDtoH_v2"]).all()
    cap = ["cudaStreamBeginCapture_v10000", "cudaStreamEndCapture", "cudaGraphInstantiateWithFlags",
           "hipStreamBeginCapture", "hipStreamEndCapture", "hipGraphInstantiate"]
    assert apinames.is_capture(cap).all()
    # Capture-mode queries run in every eager PyTorch trace: they are not a capture.
    assert not apinames.is_capture(["cudaStreamIsCapturing", "cudaThreadExchangeStreamCaptureMode",
                                    "cudaStreamGetCaptureInfo_v12030", "cudaGraphDestroy"]).any()
    # Missing names are neutral, index is kept.
    s = pd.Series(["cudaLaunchKernel", None, "x"], index=[10, 11, 12], dtype=object)
    roles = apinames.classify(s)
    assert list(roles.index) == [10, 11, 12]
    assert roles["launch"].tolist() == [True, False, False]
    assert roles["vendor"].tolist() == ["cuda", "", ""]


@pytest.mark.parametrize("fixture", sorted(p.name for p in WILD.glob("*.kineto.json.gz")))
def test_counts_match_direct_scan(fixture):
    names = _host_names(_events(WILD / fixture))
    got = apinames.counts(names)
    c = Counter(names)
    assert got["launch"] == sum(n for k, n in c.items() if k in CUDA_LAUNCH)
    assert got["graph_launch"] == c["cudaGraphLaunch"]
    assert got["sync"] == sum(n for k, n in c.items() if k in CUDA_SYNC)
    assert got["capture"] == sum(n for k, n in c.items() if k in {"cudaStreamBeginCapture", "cudaStreamEndCapture"} or k.startswith("cudaGraphInstantiate"))


@pytest.mark.parametrize("fixture", ["h200-serve-graph", "h200-train-ddp", "h200-capture", "h200-hf-unannotated"])
def test_crafted_hip_trace_same_counts(fixture, tmp_path):
    """CRAFTED: a real CUDA trace with every host call renamed to its HIP name and the
    categories written as the ROCm (roctracer) Kineto writes them: all host API calls under
    ``cuda_runtime`` (there is no ``cuda_driver`` on ROCm). Launch/sync/capture counts must
    equal the CUDA original's, and the loader must keep every call."""
    events = _events(WILD / f"{fixture}.kineto.json.gz")
    cuda_names = _host_names(events)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver"):
            e["name"] = _hip_name(e["name"])
            e["cat"] = "cuda_runtime"
    hip_path = tmp_path / f"{fixture}-hip.json"
    hip_path.write_text(json.dumps({"traceEvents": events}))
    hip_names = _host_names(events)
    assert all(not n.startswith("cu") for n in hip_names)

    cuda, hip = apinames.counts(cuda_names), apinames.counts(hip_names)
    for role in ("launch", "graph_launch", "sync", "copy", "capture", "capture_begin", "capture_end"):
        assert hip[role] == cuda[role], role
    assert cuda["launch"] == sum(1 for n in cuda_names if n in CUDA_LAUNCH)

    # Through the loader: the HIP calls land in profile.calls, and the roles agree with the
    # original profile's row by row.
    hip_profile = load_trace(hip_path)
    cuda_profile = load_trace(WILD / f"{fixture}.kineto.json.gz")
    assert len(hip_profile.calls) == len(cuda_profile.calls)
    # The loader appends cuda_driver calls after cuda_runtime ones, so compare in time order.
    key = ["start_ns", "correlation", "tid"]
    a = apinames.classify(cuda_profile.calls.sort_values(key, kind="stable")["name"])
    b = apinames.classify(hip_profile.calls.sort_values(key, kind="stable")["name"])
    for role in ("launch", "graph_launch", "sync", "capture"):
        assert np.array_equal(a[role].to_numpy(), b[role].to_numpy()), role
    assert (b["vendor"][b["launch"]] == "hip").all()


def test_nsys_versioned_names():
    """nsys names carry ``_vNNNN``: the same roles as the bare names (the capture in the
    graph fixture is recorded by nsys as ``cudaStreamBeginCapture_v10000``)."""
    p = load_trace(FIX / "h200-decode-graph-10steps.nsys.sqlite.gz")
    roles = apinames.classify(p.calls["name"])
    bare = p.calls["name"].str.replace(r"_v\d+$", "", regex=True)
    assert roles["graph_launch"].sum() == (bare == "cudaGraphLaunch").sum() > 0
    assert roles["capture_begin"].sum() == (bare == "cudaStreamBeginCapture").sum() >= 1
    assert roles["sync"].sum() == bare.isin(CUDA_SYNC).sum()
