#!/usr/bin/env bash
# H200 call 2: gpu-check part 1 (the light pass's clock, collectors) + the light-pass latency test.
set -uo pipefail
R=$OUT/c2; mkdir -p $R
OUT=$R timeout 540 scripts/gpu-check --tests-only tests/record/test_run_gpu.py -k "not acceptance" --durations=15 > $R/gpu-check.log 2>&1
echo "gpu-check rc $?"
grep -E "PASSED|FAILED|ERROR|SKIPPED|XFAIL|passed|failed" $R/pytest.log | tail -40
tar czf $OUT/c2.tgz -C $OUT c2
