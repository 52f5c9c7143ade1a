# 2026-12-07 (session 37) call 2, not run (the session's device time ran out; the next session's
# first call): call 1's H100 host was slow (ViT-small b1 4.0-4.2 ms a forward, 1.55 there on
# 12-07e): the GPU drained at every edge, so no event was recorded and, lanes being judged only at
# settles counted on event ends, no lane sampled (the GPU test failed: no gpu_measured). Now every
# measured end counts (an idle stream's host time too), and a judgement waits for 16 measured
# edges. Prediction: the test passes; "events" samples (ends_measured ~0.13-0.2) and skips the
# stream queries (~2 a step) where it does not measure.
set -u
W=$OUT/w; mkdir -p "$W"
pip install -q --no-deps --no-build-isolation -e . >"$W/install.log" 2>&1
export PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
PERFDOCTOR_NUMBERS=$W/numbers.jsonl timeout 60 python -m pytest -q -p no:cacheprovider tests/record/test_run_gpu.py \
  -k "samples_a_steady" > "$W/pytest.log" 2>&1
tail -1 "$W/pytest.log"; grep -E "^E " "$W/pytest.log" | head -5; cat "$W/numbers.jsonl"
timeout 90 python bench/light_pass.py --alternate 300 --block 4 --device cuda --trees vit_small \
  --variants "events,dense" --json "$W/alt.json" > "$W/alt.log" 2>&1
grep -o '"variant": "[a-z ]*", [^}]*' "$W/alt.log" | sed 's/"device.*block": 4, //; s/"steps_timed": [0-9]*, //'
tar czf "$OUT/call2.tgz" -C "$OUT" w && rm -rf "$W"
