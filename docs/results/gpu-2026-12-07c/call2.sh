# 2026-12-07 (session 33) call 2: the other four acceptance shapes, (c) ResNet-50 at batch 256
# AMP and batch 1, (d) the training loop with a DataLoader on the main process and with 4
# pinned workers; then where item 6's ~50 us per ViT-small b1 forward goes on this card: the
# shipped Timer against no CUDA events ("host clock": the wrapper's bookkeeping alone), without
# the run-queue read ("no delay"), and an event at the end only ("end event").
set -u
pip install -q --no-deps --no-build-isolation -e . >"$OUT/install.log" 2>&1
export PYTHONPATH=$PWD
DEVICE_LOG="$OUT/install.log" . scripts/device-env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
RUN_TIMEOUT=150 OUT=/tmp/rp timeout 400 scripts/real-programs-check --no-default \
  --only 'resnet50_b256_amp,resnet50_b1,train_r50_w0,train_r50_w4_pin' \
  --pack "$OUT" > "$OUT/real-console.log" 2>&1
grep -E '^== |perfdoctor run:' "$OUT/real-console.log"
tail -10 /tmp/rp/real/table.txt
timeout 120 python bench/light_pass.py --alternate 2000 --device cuda --trees vit_small \
  --variants "events,host clock,no delay,end event" --json "$OUT/variants.json" > "$OUT/variants.log" 2>&1
tail -6 "$OUT/variants.log"
