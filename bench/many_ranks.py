"""Scale of ``perfdoctor analyze`` over a folder of many per-rank traces (issue 30, item 9).

Builds a folder of N small Kineto traces, ``rank<k>.pt.trace.json`` as
``tensorboard_trace_handler`` names them, each one rank of one job (``distributedInfo``
rank k of N): 5 ``ProfilerStep#`` steps, each a CPU op launching one kernel and an NCCL
all-reduce. Then times ``python -m perfdoctor analyze FOLDER --json OUT`` in a subprocess
and checks the reading is whole: every rank in the view.

    python bench/many_ranks.py --ranks 10000          # the issue's acceptance: under 60 s

Prints one JSON line: ranks, seconds, exit code, ranks read back (rows of ``ranks``), ranks
analysed in full (``per_rank``: above 64 ranks one per trace structure and the ranks the
view singles out, perfdoctor.analysis.ranks.grouped_view).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STEPS = 5
STEP_US = 1000


def rank_trace(rank: int, world: int) -> dict:
    """One rank's small trace: STEPS steps, a GEMM and an all-reduce each."""
    events: list[dict] = []
    for s in range(STEPS):
        t0 = 1_000_000 + s * STEP_US
        events += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": 1, "tid": 1, "ts": t0, "dur": STEP_US - 50},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t0 + 10, "dur": 30},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t0 + 15, "dur": 5,
             "args": {"correlation": 2 * s + 1}},
            {"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm_bf16", "pid": 0, "tid": 7, "ts": t0 + 40, "dur": 400,
             "args": {"correlation": 2 * s + 1, "device": 0, "stream": 7}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t0 + 50, "dur": 5,
             "args": {"correlation": 2 * s + 2}},
            {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "pid": 0, "tid": 7,
             "ts": t0 + 450, "dur": 300 + (rank % 7) * 10, "args": {"correlation": 2 * s + 2, "device": 0, "stream": 7}},
        ]
    return {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world},
            "deviceProperties": [{"id": 0, "name": "NVIDIA H200"}], "traceEvents": events}


def build(folder: Path, ranks: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for k in range(ranks):
        (folder / f"rank{k}.pt.trace.json").write_text(json.dumps(rank_trace(k, ranks)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=10_000)
    parser.add_argument("--folder", type=Path, help="build here (default: a temporary folder, removed after)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.folder or Path(tmp) / "ranks"
        t0 = time.perf_counter()
        build(folder, args.ranks)
        built = time.perf_counter() - t0
        out = Path(tmp) / "analysis.json"
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "perfdoctor", "analyze", str(folder), "--json", str(out)],
                              capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
        seconds = time.perf_counter() - t0
        read = analysed = None
        if out.exists():  # perfdoctor.ranks/1: "ranks" has every rank's row, "per_rank" the full analyses
            doc = json.loads(out.read_text())
            read = len(doc["ranks"]) if isinstance(doc, dict) and isinstance(doc.get("ranks"), list) else None
            analysed = len(doc["per_rank"]) if isinstance(doc, dict) and isinstance(doc.get("per_rank"), dict) else None
        print(json.dumps({"ranks": args.ranks, "build_s": round(built, 1), "analyze_s": round(seconds, 1),
                          "exit_code": done.returncode, "ranks_read": read, "analysed_in_full": analysed, "stderr_tail": done.stderr[-400:]}))
    return 0 if done.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
