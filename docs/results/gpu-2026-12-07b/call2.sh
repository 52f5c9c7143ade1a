# 2026-12-07 (session 32) call 2: call 1 never ran (no machine started in five tries, 1,066 s
# of device time spent on them); four of issue 29's acceptance shapes in what is left:
# (a) compiled decode, (b) HF generate, (c) ResNet-50 at batch 256 with AMP, (d) a training
# loop with a DataLoader (4 pinned workers), each unmodified with its own timer.
set -u
pip install -q --no-deps --no-build-isolation -e . >"$OUT/install.log" 2>&1
export PYTHONPATH=$PWD
DEVICE_LOG="$OUT/install.log" . scripts/device-env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
RUN_TIMEOUT=120 OUT=/tmp/rp timeout 400 scripts/real-programs-check --no-default \
  --only 'decode_1b_compiled,hf_generate_1b,resnet50_b256_amp,train_r50_w4_pin' \
  --pack "$OUT" > "$OUT/real-console.log" 2>&1
grep -E '^== |perfdoctor run:' "$OUT/real-console.log"
tail -10 /tmp/rp/real/table.txt
