# 2026-12-07 (session 31) call 2, on call 1's warm H100: the two acceptance shapes call 1 left
# out for time: ViT-small at batch 1 (c) and the training loop with a DataLoader on the main
# process (d).
set -u
pip install -q --no-deps --no-build-isolation -e . >"$OUT/install.log" 2>&1
export PYTHONPATH=$PWD
DEVICE_LOG="$OUT/install.log" . scripts/device-env.sh
RUN_TIMEOUT=120 OUT=/tmp/rp2 timeout 230 scripts/real-programs-check --no-default \
  --only 'vit_small_b1,train_r50_w0' --pack "$OUT" > "$OUT/real-console.log" 2>&1
grep -E '^== |perfdoctor run:' "$OUT/real-console.log"
tail -8 /tmp/rp2/real/table.txt
