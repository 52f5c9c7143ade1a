#!/usr/bin/env bash
# H200 call 1 (2026-12-03 session): light-pass cost with the idle-end clock; train+validate; own profiler on CUDA.
set -uo pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 COLUMNS=200
R=$OUT/c1; mkdir -p $R
DEVICE_LOG=$R/install.log . scripts/device-env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $R/gpu.txt
python3 -c "import torch; print(torch.__version__)" >> $R/gpu.txt
for i in 1 2 3; do
  timeout 110 python3 bench/light_pass.py --alternate 4000 --trees vit_small --variants "events,busy end" > $R/alt$i.log 2>&1
  tail -3 $R/alt$i.log
done
timeout 60 python3 bench/light_pass.py --edges 2000 > $R/edges.log 2>&1; tail -6 $R/edges.log
for m in top exit schedule; do
  d=$R/own_$m; mkdir -p $d
  (cd $d && timeout 60 python3 -m perfdoctor run --collect torch --out runs $OLDPWD/tests/programs/own_profiler.py --device cuda --mode $m --steps 20 > run.log 2>&1; echo "rc $?" >> run.log
   b=$(ls -d runs/*/ | head -1); python3 -m perfdoctor analyze "$b" --json metrics.json > analyze.log 2>&1; echo "analyze rc $?" >> analyze.log)
  grep -E "RESULT|steps|rc" $d/run.log | tail -5; tail -1 $d/analyze.log
done
(cd $R && tar czf $OUT/c1.tgz --exclude=runs .) 
RUN_TIMEOUT=120 OUT=$R/rp timeout 240 scripts/real-programs-check --no-default --only 'train_eval*' > $R/rp.log 2>&1
tail -12 $R/rp.log
(cd $R && tar czf $OUT/c1.tgz --exclude=runs .; tar czf $OUT/c1-runs.tgz .)
