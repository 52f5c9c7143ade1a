#!/usr/bin/env bash
# H200 call 4: HF generate compiled transformers 5's way (a static cache; generate compiles the decode step).
set -uo pipefail
R=$OUT/c4; mkdir -p $R
RUN_TIMEOUT=135 OUT=$R timeout 285 scripts/real-programs-check --no-default --only 'hf_generate_1b_autocompile' --pack $OUT > $R/rp.log 2>&1
echo "rc $?"; tail -14 $R/rp.log
