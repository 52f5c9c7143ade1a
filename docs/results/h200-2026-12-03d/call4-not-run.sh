#!/usr/bin/env bash
# call 4: the two wrong readings fixed this session, on the H200 (packed after each program)
set -u
R=/tmp/r4; mkdir -p $R
git log --oneline -1 > $OUT/commit.txt
RUN_TIMEOUT=100 OUT=$R/rp timeout 235 scripts/real-programs-check --no-default --only 'train_eval_mlp_epoch_step,diffusion_64_cfg_separate' --pack $OUT > $OUT/rp.log 2>&1
tail -15 $OUT/rp.log
