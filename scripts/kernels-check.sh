#!/usr/bin/env bash
# GPU check of the fused Triton kernels (issue 7), meant for the H200 via `run`:
# the kernel tests at real shapes plus the fused-vs-eager end-to-end test, then the
# per-kernel timing table and the decode speed of eager / graph / fused / fused-int8.
#   scripts/kernels-check.sh [--int8] [--tune]   (logs in $OUT, default ./out; --int8: the
#   fused-int8 kernels in the per-kernel table)
set -uo pipefail
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
OUT=${OUT:-out}
mkdir -p "$OUT"
python3 -m pytest tests/engine/test_kernels.py -q -s -p no:cacheprovider 2>&1 | tee "$OUT/kernels-pytest.log" | tail -25
python3 bench/kernels.py "$@" 2>&1 | tee "$OUT/kernels-bench.log"
