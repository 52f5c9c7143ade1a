# 2026-12-07 (session 33) call 3: item 6 after the input-window check's fast path (a model
# called on the same tensor as its last call skips the storage, shape and data_ptr reads):
# --alternate as in call 1, two processes. Prediction: the check was ~0.7 of the wrapper's
# ~3-5 us of Python per forward on the VM's CPU (a fifth); if the in-forward inflation that
# made 43 us of them on this card applies alike, ViT-small b1 +2.19 % -> ~+1.8 %, ResNet-50 b1
# +1.96 % -> ~+1.7 %.
pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1; export PYTHONPATH=$PWD; DEVICE_LOG=/tmp/i.log . scripts/device-env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for p in 1 2; do
  timeout 100 python bench/light_pass.py --alternate 3000 --device cuda --trees vit_small,resnet50 --variants events \
    --json "$OUT/alternate-$p.json" > "$OUT/alternate-$p.log" 2>&1
  tail -3 "$OUT/alternate-$p.log"
done
