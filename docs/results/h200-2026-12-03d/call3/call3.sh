#!/usr/bin/env bash
# call 3: scripts/gpu-check --part 2 (the acceptances and the light-pass latency test)
set -u
R=/tmp/r3; mkdir -p $R
git log --oneline -1 > $R/commit.txt
OUT=$R timeout 560 scripts/gpu-check --part 2 > $R/gpu-check.log 2>&1; echo "rc $?" >> $R/gpu-check.log
grep -E "^(ok|FAIL|skip) |rc |passed|failed|^[a-z].*status=" $R/gpu-check.log | tail -40
tar czf $OUT/r3.tgz -C /tmp r3
