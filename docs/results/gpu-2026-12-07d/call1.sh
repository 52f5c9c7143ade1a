# 2026-12-07 (session 34) call 1: item 6 taken apart on this card (parts.py: the shipped narrowed
# wrapper rebuilt piece by piece, forward by forward in one process, two processes), then three
# acceptance shapes on 6061cea: (a) compiled decode, (b) HF generate, (c) ViT-small at batch 1.
# Expected: "steps l/t" reads 110/10 for ViT (the module step's traced window now closes at the
# next call's end, 7d12108), where session 33's tables read 110/9.
set -u
pip install -q --no-deps --no-build-isolation -e . >"$OUT/install.log" 2>&1
export PYTHONPATH=$PWD
DEVICE_LOG="$OUT/install.log" . scripts/device-env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
for p in 1 2; do
  timeout 90 python docs/results/gpu-2026-12-07d/parts.py cuda vit_small 1500 "$OUT/parts-$p.json" > "$OUT/parts-$p.log" 2>&1
  cat "$OUT/parts-$p.log" | tail -10
done
RUN_TIMEOUT=150 OUT=/tmp/rp timeout 330 scripts/real-programs-check --no-default \
  --only 'decode_1b_compiled,hf_generate_1b,vit_small_b1' \
  --pack "$OUT" > "$OUT/real-console.log" 2>&1
grep -E '^== |perfdoctor run:' "$OUT/real-console.log"
tail -6 /tmp/rp/real/table.txt
