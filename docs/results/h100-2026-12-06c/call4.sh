# 2026-12-06 call 4: the traced passes' ticks at backward() (8392590) on a GPU: d2l's train_ch3
# (its own sgd, a test pass per epoch): the torch pass's step count against the training batches.
set -u
pip install -q --no-deps --no-build-isolation -e . >"$OUT/install.log" 2>&1
export PYTHONPATH=$PWD
DEVICE_LOG="$OUT/install.log" . scripts/device-env.sh
timeout 150 python3 -m perfdoctor run --collect torch --out /tmp/d2l tests/programs/real/d2l_train.py --model module \
  --train 20000 --test 5000 --epochs 2 > "$OUT/d2l.log" 2>&1
echo "rc $?" >> "$OUT/d2l.log"
grep -E "light pass: step|torch pass: [0-9]|RESULT|^rc" "$OUT/d2l.log" | cut -c1-300
for b in /tmp/d2l/*; do
  python3 -c "import json,sys; m=json.load(open(sys.argv[1]+'/manifest.json')); print([(p['name'], p['steps']) for p in m['passes']], m['light_pass']['steps_seen'], m['collectors']['torch']['status'])" "$b"
done | tee -a "$OUT/d2l.log"
