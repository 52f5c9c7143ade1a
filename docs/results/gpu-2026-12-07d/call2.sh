# 2026-12-07 (session 34) call 2: the other four acceptance shapes on this session's code
# (the light pass now notes each step end's thread: one get_ident and an append per step),
# (c) ResNet-50 b256 AMP and b1, (d) the training loop with 0 and 4 pinned workers; the new
# thread-pool program on the GPU (8 threads' requests at once: each step paired with its own
# thread's start); then item 6 forward by forward in two processes (--alternate 3000).
# Expected: steps l/t N/10 where session 33 read N/9..10; item 6 as call 1's "shipped events"
# (ViT +2.4-2.9 % on this host; the end-thread note adds ~0.1 us on the VM, <1 us in-forward).
set -u
pip install -q --no-deps --no-build-isolation -e . >"$OUT/install.log" 2>&1
export PYTHONPATH=$PWD
DEVICE_LOG="$OUT/install.log" . scripts/device-env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
RUN_TIMEOUT=150 OUT=/tmp/rp timeout 420 scripts/real-programs-check --no-default \
  --only 'resnet50_b256_amp,resnet50_b1,train_r50_w0,train_r50_w4_pin,pool_predict_8t' \
  --pack "$OUT" > "$OUT/real-console.log" 2>&1
grep -E '^== |perfdoctor run:' "$OUT/real-console.log"
grep -A8 '^config' /tmp/rp/real/table.txt
for p in 1 2; do
  timeout 70 python bench/light_pass.py --alternate 3000 --device cuda --trees vit_small,resnet50 \
    --variants events --json "$OUT/alternate-$p.json" > "$OUT/alternate-$p.log" 2>&1
  tail -3 "$OUT/alternate-$p.log"
done
