# 2026-12-07 (session 32) call 1: issue 29's seven acceptance shapes in one call (an H200 if
# one comes, else an H100), unmodified programs with their own timers: (a) compiled decode,
# (b) HF generate, (c) image inference at batch 256 AMP and batch 1 (ResNet-50, ViT-small),
# (d) a training loop with a DataLoader, 4 pinned workers and on the main process.
set -u
pip install -q --no-deps --no-build-isolation -e . >"$OUT/install.log" 2>&1
export PYTHONPATH=$PWD
DEVICE_LOG="$OUT/install.log" . scripts/device-env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
RUN_TIMEOUT=150 OUT=/tmp/rp timeout 540 scripts/real-programs-check --no-default \
  --only 'decode_1b_compiled,hf_generate_1b,resnet50_b256_amp,resnet50_b1,vit_small_b1,train_r50_w4_pin,train_r50_w0' \
  --pack "$OUT" > "$OUT/real-console.log" 2>&1
grep -E '^== |perfdoctor run:' "$OUT/real-console.log"
tail -14 /tmp/rp/real/table.txt
