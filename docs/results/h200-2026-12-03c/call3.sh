#!/usr/bin/env bash
# H200 call 3 (2026-12-03 session 2): the six programs of shapes not tested before (probe merge), GPU sizes.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 COLUMNS=200
R=$OUT/c3; mkdir -p $R
RUN_TIMEOUT=75 OUT=$R/rp timeout 320 scripts/real-programs-check --no-default --only 'diffusion_64_50steps,bert_base_b32_tokenize,bench_timer_mlp,whisper_small_greedy,lit_train_mlp,spec_decode_1b' --pack $OUT > $R/rp.log 2>&1
echo "rp rc $?"; tail -14 $R/rp.log
