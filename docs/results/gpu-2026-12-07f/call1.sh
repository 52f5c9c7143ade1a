# 2026-12-07 (session 37) call 1: issue 29 item 6 with sparse lanes (clock.StepTimes.settle: once a
# lane's GPU lags are steady, one step in 8 measured, the others read between). In one process per
# run, --alternate 600 --block 4 (a loop's cadence), ViT-small b1 and ResNet-50 b1: the shipped
# Timer ("events", sparse), the same measuring every step ("dense", the Timer before this session)
# and no events ("host clock"), two processes. Then the GPU test comparing a sparse and a dense
# lane on one loop, and two acceptance shapes with their own timers.
# Prediction, written before the call: session 36 read on an H100 at block 4 events +2.9-3.4 %
# (ViT) and +2.0-2.5 % (ResNet), host clock +1.3-1.6 % / +1.1-1.5 %. Sparse should read the host
# clock plus ~1/8 of the events' ~25 us plus ~1 us for the lane's sampling check: ViT +1.5-1.9 %,
# ResNet +1.2-1.6 %; dense as in session 36. "no delay": the shipped Timer without the run-queue read (how much of the rest it is).
set -u
W=$OUT/w; mkdir -p "$W"
pip install -q --no-deps --no-build-isolation -e . >"$W/install.log" 2>&1
export PYTHONPATH=$PWD
DEVICE_LOG="$W/install.log" . scripts/device-env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$W/gpu.txt"
PERFDOCTOR_NUMBERS=$W/numbers.jsonl timeout 120 python -m pytest -q -p no:cacheprovider tests/record/test_run_gpu.py \
  -k "samples_a_steady or idle_stream or event_record" > "$W/pytest.log" 2>&1
tail -3 "$W/pytest.log"; cat "$W/numbers.jsonl"
for p in 1 2; do
  timeout 150 python bench/light_pass.py --alternate 600 --block 4 --device cuda --trees vit_small,resnet50 \
    --variants "events,dense,host clock,no delay" --json "$W/alt-$p.json" > "$W/alt-$p.log" 2>&1
  tail -7 "$W/alt-$p.log"
  grep -o '"variant": "[a-z ]*", [^}]*"period_us": [0-9.]*' "$W/alt-$p.log" | sed 's/"device.*block": 4, //; s/"steps_timed": [0-9]*, //' | head -8
done
RUN_TIMEOUT=100 OUT=/tmp/rp timeout 200 scripts/real-programs-check --no-default \
  --only 'vit_small_b1,decode_1b_compiled' --pack "$W/pack" > "$W/real-console.log" 2>&1
rm -f "$W/pack/real-runs.tgz"
grep -E '^== |perfdoctor run:' "$W/real-console.log" | head -20
tail -6 /tmp/rp/real/table.txt
tar czf "$OUT/call1.tgz" -C "$OUT" w && rm -rf "$W"
