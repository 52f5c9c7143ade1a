#!/usr/bin/env bash
export PYTHONPATH=$PWD
for p in 1 2; do
  timeout 200 python3 scratch/parts.py cuda vit_small 1800 $OUT/parts$p.json > $OUT/parts$p.log 2>&1
  cat $OUT/parts$p.log | tail -14
done
