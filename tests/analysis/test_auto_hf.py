"""An unmodified Hugging Face ``generate``, traced with no step markers at all (recorded on
the H200, tests/fixtures/wild/h200-hf-unannotated): the automatic step is one token.

The program generated 6 tokens: a prefill forward, then 5 decode forwards, each followed
by the sampling kernels and a host sync. The expected counts are read from the raw JSON
here (launches between host syncs), not from perfdoctor.
"""

from __future__ import annotations

import gzip
import json

import numpy as np

from conftest import FIXTURES
from perfdoctor.pipeline import load_trace
from perfdoctor.analysis.metrics import analyze

TRACE = FIXTURES / "wild" / "h200-hf-unannotated.kineto.json.gz"


def launches_between_syncs() -> list[int]:
    events = json.loads(gzip.decompress(TRACE.read_bytes()))["traceEvents"]
    runtime = sorted((e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver") and e.get("ph") == "X"), key=lambda e: e["ts"])
    counts, n = [], 0
    for e in runtime:
        if e["name"].startswith(("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchCooperativeKernel", "cudaGraphLaunch")):
            n += 1
        elif e["name"] in ("cudaStreamSynchronize", "cudaDeviceSynchronize"):
            counts.append(n)
            n = 0
    return [c for c in counts if c]


def test_unannotated_hf_generate_steps_are_tokens() -> None:
    facts = json.loads((FIXTURES / "wild" / "hf-unannotated.facts.json").read_text())
    parts = launches_between_syncs()  # [23, prefill 691, 5, 691, 5, ...]: forward, then sampling
    forward, sampling = parts[-1], parts[-2]
    a = analyze(load_trace(TRACE))
    assert a.steps.how.startswith("automatic")
    # The prefill forward runs other kernels than a decode forward: it is not part of the
    # repetition, so the steps are the decode tokens.
    assert a.steps.count == facts["forward_calls"] - 1
    launches = a.timeline.steps["launches"].to_numpy()
    assert np.all(launches == forward + sampling)
