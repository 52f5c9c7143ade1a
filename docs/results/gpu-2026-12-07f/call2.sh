# 2026-12-07 (session 37) call 2, not run: the session's device time ran out. The next session's
# first call. Call 1's H100 host was slow (ViT-small b1 4.0-4.2 ms a forward, 1.55 on 12-07e's):
# the GPU drained at every edge, so no event was recorded and, lanes being judged only at settles
# counted on event ends, no lane sampled (the GPU test failed: no gpu_measured). Since then every
# measured end counts (an idle stream's host time too), a judgement waits for 16 measured edges and
# leaves out the steps from before the GPU clock (5ae264d, 531e811, 854542e).
# Prediction: the GPU test passes; "events" samples (ends_measured ~0.13-0.2 over a run of ~2,400
# light forwards) and, on a host as fast as 12-07e's, ViT-small b1 reads +1.5-1.9 % against "dense"
# +2.9-3.4 %, ResNet-50 b1 +1.2-1.6 % against +2.0-2.5 %; then three acceptance shapes.
set -u
W=$OUT/w; mkdir -p "$W"
pip install -q --no-deps --no-build-isolation -e . >"$W/install.log" 2>&1
export PYTHONPATH=$PWD
DEVICE_LOG="$W/install.log" . scripts/device-env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$W/gpu.txt"
PERFDOCTOR_NUMBERS=$W/numbers.jsonl timeout 90 python -m pytest -q -p no:cacheprovider tests/record/test_run_gpu.py \
  -k "samples_a_steady or idle_stream or event_record" > "$W/pytest.log" 2>&1
tail -1 "$W/pytest.log"; grep -E "^E " "$W/pytest.log" | head -5; cat "$W/numbers.jsonl"
for p in 1 2; do
  for tree in vit_small resnet50; do
    timeout 100 python bench/light_pass.py --alternate 600 --block 4 --device cuda --trees $tree \
      --variants "events,dense,host clock" --json "$W/alt-$p-$tree.json" > "$W/alt-$p-$tree.log" 2>&1
    grep -o '"variant": "[a-z ]*", [^}]*' "$W/alt-$p-$tree.log" | sed 's/"device.*block": 4, //; s/"steps_timed": [0-9]*, //'
  done
done
RUN_TIMEOUT=100 OUT=/tmp/rp timeout 150 scripts/real-programs-check --no-default \
  --only 'vit_small_b1,hf_generate_1b' --pack "$W/pack" > "$W/real-console.log" 2>&1
rm -f "$W/pack/real-runs.tgz"
tail -5 /tmp/rp/real/table.txt
tar czf "$OUT/call2.tgz" -C "$OUT" w && rm -rf "$W"
