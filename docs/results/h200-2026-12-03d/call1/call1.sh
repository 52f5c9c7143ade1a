#!/usr/bin/env bash
# call 1 (2026-12-03 session 3): scripts/gpu-check --part 3 on main
set -u
R=/tmp/r1; mkdir -p $R
git log --oneline -1 > $R/commit.txt
OUT=$R timeout 570 scripts/gpu-check --part 3 > $R/gpu-check.log 2>&1; echo "rc $?" >> $R/gpu-check.log
tail -60 $R/gpu-check.log
tar czf $OUT/r1.tgz -C /tmp r1
