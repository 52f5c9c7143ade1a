"""The same straggler job on two GPUs with NCCL (nvidia-h200-x2): NCCL kernels are the
communication, and the slow rank is named with its delay within 10 %. Written on CPU,
not yet run: the lead runs it on a machine with two or more GPUs."""

import json
import sys

import pytest

torch = pytest.importorskip("torch")

from perfdoctor.analysis.ranks import cross_rank  # noqa: E402
from tests.analysis.test_ranks import JOB, bundle_of, perfdoctor  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs two CUDA GPUs"),
]


def test_nccl_straggler_on_two_gpus(tmp_path):
    done = perfdoctor("run", "-q", "--out", "runs", "--steps", "10", "--nproc-per-node", "2", "--timeout", "300", str(JOB),
                      "--backend", "nccl", "--width", "4096", "--steps", "30", "--slow-rank", "1", "--slow-ms", "20", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    bundle = bundle_of(tmp_path)
    m = json.loads((bundle / "manifest.json").read_text())
    assert m["world_size"] == 2 and all(e["device"].startswith(f"cuda:{k}") for k, e in m["ranks"].items())
    view = cross_rank(bundle)
    assert set(view.comm_source.values()) == {"communication kernels (GPU)"}
    assert view.straggler is not None and view.straggler.rank == 1
    assert view.straggler.delay_ms == pytest.approx(20.0, rel=0.10)
    assert "nccl" in view.straggler.collective.name.lower()
    print(json.dumps(view.to_json()["ranks"], indent=1), file=sys.stderr)
