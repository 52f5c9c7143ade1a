# 2026-12-07 (session 36) call 1: issue 29 item 6 on main (the input-window fast path of 8e474b5
# in, never measured on an H200), --alternate 3000 in three processes, ViT-small b1 and ResNet-50
# b1, each process at --block 1 (every light forward reads the run queue: an upper bound) and
# --block 4 (near a loop's cadence of reads); then three acceptance shapes, (a) compiled decode,
# (b) HF generate, (c) ViT-small b1, each unmodified with its own timer. Prediction: the H200 read
# +1.67 % ± 0.05 (ViT) and +1.56 % ± 0.08 (ResNet) on 12-04 at block 1 without the fast path;
# now ~+1.5 % and ~+1.4 % at block 1, and ~0.2 % less at block 4 (half the reads; a read cost
# 8-17 us inside a forward there). Module steps trace N+1 calls for --steps N since 7d12108:
# "110/10" where the 12-06 H200 table read "110/9".
set -u
pip install -q --no-deps --no-build-isolation -e . >"$OUT/install.log" 2>&1
export PYTHONPATH=$PWD
DEVICE_LOG="$OUT/install.log" . scripts/device-env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
for p in 1 2 3; do
  for b in 1 4; do
    timeout 100 python bench/light_pass.py --alternate $((3000 / b)) --block $b --device cuda --trees vit_small,resnet50 \
      --variants events --json "$OUT/alt-$p-k$b.json" > "$OUT/alt-$p-k$b.log" 2>&1
    tail -2 "$OUT/alt-$p-k$b.log"
  done
done
RUN_TIMEOUT=150 OUT=/tmp/rp timeout 330 scripts/real-programs-check --no-default \
  --only 'decode_1b_compiled,hf_generate_1b,vit_small_b1' \
  --pack "$OUT" > "$OUT/real-console.log" 2>&1
grep -E '^== |perfdoctor run:' "$OUT/real-console.log"
tail -6 /tmp/rp/real/table.txt
