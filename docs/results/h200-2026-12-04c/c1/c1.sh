#!/usr/bin/env bash
# item 6: the light pass's cost on ViT-small b1, with and without the run-queue read
export PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt
for p in 1 2; do
  timeout 260 python3 bench/light_pass.py --alternate 3000 --trees "vit_small,noop tree" \
    --variants "events,no delay,host clock,host no delay" --json $OUT/alt$p.json > $OUT/alt$p.log 2>&1
  tail -12 $OUT/alt$p.log
done
