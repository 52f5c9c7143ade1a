#!/usr/bin/env bash
# H200 call 3: HF generate with the transformers docs' compile recipe, alone and under perfdoctor.
set -uo pipefail
R=$OUT/c3; mkdir -p $R
RUN_TIMEOUT=270 OUT=$R timeout 570 scripts/real-programs-check --no-default --only 'hf_generate_1b_compiled' --pack $OUT > $R/rp.log 2>&1
echo "rc $?"; tail -14 $R/rp.log
