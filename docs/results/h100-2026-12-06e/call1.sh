# 2026-12-06 (session 26) call 1: issue 29's acceptance shapes at 8208994 on whatever card
# comes; on an H200 also issue 31's engine CLI (megakernel and fused, median of 3).
set -u
pip install -q --no-deps --no-build-isolation -e . >"$OUT/install.log" 2>&1
export PYTHONPATH=$PWD
DEVICE_LOG="$OUT/install.log" . scripts/device-env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  for v in megakernel fused; do for i in 1 2 3; do
    timeout 120 python3 -m perfdoctor.engine --variant $v --tokens 256 --ctx 2048 2>&1 | tail -2
  done; done | tee "$OUT/engine.txt"
fi
RUN_TIMEOUT=200 OUT=/tmp/rp timeout 420 scripts/real-programs-check --no-default \
  --only 'decode_1b_compiled,hf_generate_1b,resnet50_b1,resnet50_b256_amp,train_r50_w4_pin' \
  --pack "$OUT" > "$OUT/real-console.log" 2>&1
tail -12 /tmp/rp/real/table.txt
