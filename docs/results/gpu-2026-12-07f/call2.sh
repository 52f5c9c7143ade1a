# 2026-12-07 (session 37) call 2: issue 29's acceptance shapes (c) and (d) on the code of call 1
# (sparse lanes), each unmodified with its own timer: ResNet-50 at batch 256 with AMP, a
# ResNet-50 training loop with a DataLoader (workers 0, and 4 with pinned memory); then the
# light-pass latency test (bench/light_pass.py's three sizes against the program's own timer:
# a synchronous loop, whose edges are on an idle stream: lag 0, steady, so sparse after 32 steps).
set -u
W=$OUT/w; mkdir -p "$W"
pip install -q --no-deps --no-build-isolation -e . >"$W/install.log" 2>&1
export PYTHONPATH=$PWD
DEVICE_LOG="$W/install.log" . scripts/device-env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$W/gpu.txt"
RUN_TIMEOUT=150 OUT=/tmp/rp timeout 330 scripts/real-programs-check --no-default \
  --only 'resnet50_b256_amp,train_r50_w0,train_r50_w4_pin' --pack "$W/pack" > "$W/real-console.log" 2>&1
rm -f "$W/pack/real-runs.tgz"
grep -E '^== |perfdoctor run:' "$W/real-console.log" | head -20
tail -5 /tmp/rp/real/table.txt
PERFDOCTOR_NUMBERS=$W/numbers.jsonl timeout 200 python -m pytest -q -p no:cacheprovider tests/record/test_run_gpu.py \
  -k "latency_matches" > "$W/pytest.log" 2>&1
tail -3 "$W/pytest.log"; cat "$W/numbers.jsonl"
tar czf "$OUT/call2.tgz" -C "$OUT" w && rm -rf "$W"
