# 2026-12-07 (session 36) call 3: what each edge's CUDA event costs at a loop's cadence. Call 2
# (compact.py, blocks of 4) put the shipped wrapper at +47.8 us a ViT-small b1 forward with its
# events and +28.4 without ("host clock"), so the edges' driver calls are ~20 of it when the stream
# is busy at both edges. Here --alternate --block 4: the shipped Timer ("events"), an event at the
# end only with the host time at the start ("end event"), and none ("host clock"), two processes.
# Prediction: end event about halfway between the two (one query and one record fewer a step).
set -u
pip install -q --no-deps --no-build-isolation -e . >"$OUT/install.log" 2>&1
export PYTHONPATH=$PWD
for p in 1 2; do
  timeout 150 python bench/light_pass.py --alternate 600 --block 4 --device cuda --trees vit_small,resnet50 \
    --variants "events,end event,host clock" --json "$OUT/edges-$p.json" > "$OUT/edges-$p.log" 2>&1
  tail -7 "$OUT/edges-$p.log"
done
