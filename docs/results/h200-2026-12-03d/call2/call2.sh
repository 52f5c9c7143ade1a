#!/usr/bin/env bash
# call 2: scripts/gpu-check --part 1, then the caches tests again (regex fix c682113)
set -u
R=/tmp/r2; mkdir -p $R/p1 $R/caches
git log --oneline -1 > $R/commit.txt
OUT=$R/p1 timeout 420 scripts/gpu-check --part 1 > $R/p1/gpu-check.log 2>&1; echo "rc $?" >> $R/p1/gpu-check.log
OUT=$R/caches PYTEST_BASETEMP=/tmp/pd-c timeout 150 scripts/gpu-check --tests-only tests/record/test_caches_gpu.py > $R/caches/gpu-check.log 2>&1; echo "rc $?" >> $R/caches/gpu-check.log
grep -E "^(ok|FAIL|skip) |rc |passed|failed" $R/p1/gpu-check.log | tail -40
grep -E "^(ok|FAIL|skip) |rc |passed|failed" $R/caches/gpu-check.log | tail -12
tar czf $OUT/r2.tgz -C /tmp r2
