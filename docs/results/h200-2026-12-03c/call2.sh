#!/usr/bin/env bash
# H200 call 2 (2026-12-03 session 2): the loop fixes merged (step groups, holds_work, waits) on their GPU configs.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 COLUMNS=200
R=$OUT/c2; mkdir -p $R
RUN_TIMEOUT=90 OUT=$R/rp timeout 400 scripts/real-programs-check --no-default --only 'threaded_server_mlp,threaded_server_mlp_pool,eval_mlp_3passes_break,train_eval_mlp_epoch_step,train_r50_accum4' --pack $OUT > $R/rp.log 2>&1
echo "rp rc $?"; tail -14 $R/rp.log
ls -la $OUT
