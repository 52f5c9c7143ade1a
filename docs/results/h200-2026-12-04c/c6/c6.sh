#!/usr/bin/env bash
export PYTHONPATH=$PWD
for p in 1 2 3; do
  timeout 80 python3 bench/light_pass.py --alternate 3000 --trees "vit_small,resnet50" --variants "events" --json $OUT/alt$p.json > $OUT/alt$p.log 2>&1
  tail -3 $OUT/alt$p.log
done
