# 2026-12-07 (session 33) call 1: issue 29 item 6 on this session's code (17f8a9e), what the
# light pass's narrowed module step costs a launch-bound batch-1 forward, forward by forward
# (--alternate: plain and light forwards alternating in one process), in three processes so
# the process-to-process spread shows; then three acceptance shapes: (a) compiled decode,
# (b) HF generate, (c) ViT-small at batch 1, each unmodified with its own timer.
set -u
pip install -q --no-deps --no-build-isolation -e . >"$OUT/install.log" 2>&1
export PYTHONPATH=$PWD
DEVICE_LOG="$OUT/install.log" . scripts/device-env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
for p in 1 2 3; do
  timeout 100 python bench/light_pass.py --alternate 3000 --device cuda --trees vit_small,resnet50 \
    --variants events --json "$OUT/alternate-$p.json" > "$OUT/alternate-$p.log" 2>&1
  tail -3 "$OUT/alternate-$p.log"
done
RUN_TIMEOUT=150 OUT=/tmp/rp timeout 330 scripts/real-programs-check --no-default \
  --only 'decode_1b_compiled,hf_generate_1b,vit_small_b1' \
  --pack "$OUT" > "$OUT/real-console.log" 2>&1
grep -E '^== |perfdoctor run:' "$OUT/real-console.log"
tail -10 /tmp/rp/real/table.txt
