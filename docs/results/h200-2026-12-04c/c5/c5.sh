#!/usr/bin/env bash
export PYTHONPATH=$PWD
for p in 1 2 3; do
  timeout 60 python3 scratch/ab.py cuda vit_small 2500 > $OUT/ab$p.log 2>&1; head -1 $OUT/ab$p.log
done
OUT=$OUT/g timeout 330 scripts/gpu-check --part 1 > /tmp/gc.log 2>&1; echo "gpu-check rc $?"
tail -25 /tmp/gc.log
cd $OUT && tar czf g.tgz g && rm -rf g
