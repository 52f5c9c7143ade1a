#!/usr/bin/env bash
# item 6: the flat edge (shipped "events") against the edge through methods ("methods", as before), same process
export PYTHONPATH=$PWD
for p in 1 2 3; do
  timeout 170 python3 bench/light_pass.py --alternate 3000 --trees "vit_small,noop tree" \
    --variants "events,methods,host clock" --json $OUT/alt$p.json > $OUT/alt$p.log 2>&1
  tail -7 $OUT/alt$p.log
done
