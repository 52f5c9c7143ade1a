#!/usr/bin/env bash
# H200 call 1 (2026-12-03 session 2): item 6 on ResNet-50 b1 (idle-end clock); HF auto-compile (fixed after last call), assisted 1B (first run), train accum4, train+validate.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 COLUMNS=200
R=$OUT/c1; mkdir -p $R
DEVICE_LOG=$R/install.log . scripts/device-env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/gpu.txt
python3 -c "import torch, transformers; print(torch.__version__, transformers.__version__)" >> $R/gpu.txt
for i in 1 2; do
  timeout 100 python3 bench/light_pass.py --alternate 4000 --trees resnet50 --variants "events,busy end" > $R/alt$i.log 2>&1
  tail -3 $R/alt$i.log
done
(cd $R && tar czf $OUT/c1.tgz .)
RUN_TIMEOUT=150 OUT=$R/rp timeout 360 scripts/real-programs-check --no-default --only 'hf_generate_1b_autocompile,hf_assisted_1b,train_r50_accum4,train_eval_mlp' > $R/rp.log 2>&1
echo "rp rc $?"; tail -16 $R/rp.log
(cd $R && tar czf $OUT/c1.tgz --exclude=runs --exclude='*.json.gz' --exclude='*.pt.trace.json' .; tar czf $OUT/c1-runs.tgz .)
ls -la $OUT
