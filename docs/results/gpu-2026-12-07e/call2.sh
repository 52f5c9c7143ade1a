# 2026-12-07 (session 36) call 2: item 6 at a loop's cadence (blocks of 4 forwards, no synchronize
# inside), the shipped narrowed wrapper against a compact one with the same facts written as one
# tuple per edge, everything inline (compact.py beside this). Prediction from the CPU VM (vit_tiny,
# blocks of 4: shipped +13.7 us, compact +11.2): compact ~20 % cheaper; on this card's ViT-small b1
# (+2.2-3.0 % at block 4 in call 1) ~+1.8 %.
set -u
pip install -q --no-deps --no-build-isolation -e . >"$OUT/install.log" 2>&1
export PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
for p in 1 2; do
  for tree in vit_small resnet50; do
    timeout 120 python docs/results/gpu-2026-12-07e/compact.py cuda $tree 1200 4 "$OUT/compact-$p-$tree.json" > "$OUT/compact-$p-$tree.log" 2>&1
    cat "$OUT/compact-$p-$tree.log" | tail -5
  done
done
