# 2026-12-06 (session 26) call 3, after the review (a8d56e8): the window of a training fetch
# step and the pause cut, on whatever card comes (an H200 was asked for).
set -u
pip install -q --no-deps --no-build-isolation -e . >"$OUT/install.log" 2>&1
export PYTHONPATH=$PWD
DEVICE_LOG="$OUT/install.log" . scripts/device-env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
RUN_TIMEOUT=150 OUT=/tmp/rp timeout 330 scripts/real-programs-check --no-default \
  --only 'train_eval_mlp,whisper_small_greedy,train_r50_w4_pin' --pack "$OUT" > "$OUT/real-console.log" 2>&1
tail -8 /tmp/rp/real/table.txt
