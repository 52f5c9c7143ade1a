# 2026-12-06 (session 28) call 1: the traced pass's profiler start without torch importing its
# compiler (01bcd9c) on a GPU. The acceptance shapes with compiled / graph-replayed steps at
# 42aacb3 (real-programs-check), then the same two `perfdoctor run`s with the package as it
# was before the change (3d23ed2, unpacked in old/ for this call only): run seconds of each.
set -u
pip install -q --no-deps --no-build-isolation -e . >"$OUT/install.log" 2>&1
export PYTHONPATH=$PWD
DEVICE_LOG="$OUT/install.log" . scripts/device-env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
RUN_TIMEOUT=150 OUT=/tmp/rp timeout 330 scripts/real-programs-check --no-default \
  --only 'decode_1b_compiled,resnet50_b1,resnet50_b1_graphed,graph_resnet50_b1,train_r18_compiled_ro' \
  --pack "$OUT" > "$OUT/real-console.log" 2>&1
grep -E '^== |perfdoctor run:' "$OUT/real-console.log"
tail -9 /tmp/rp/real/table.txt
P=tests/programs/real
for v in old new; do
  pp=$PWD; [ $v = old ] && pp=$PWD/old
  for cfg in "resnet50_b1|image_infer.py --batch 1 --warmup 10 --iters 100" \
             "decode_1b_compiled|compiled_decode.py --layers 16 --dim 2048 --tokens 64 --generations 3"; do
    IFS='|' read -r name cmd <<<"$cfg"
    t0=$(date +%s.%N)
    # shellcheck disable=SC2086
    PYTHONPATH=$pp:/tmp/site timeout 100 python3 -m perfdoctor run --collect torch --out /tmp/ab/$v-$name $P/$cmd > "$OUT/ab-$v-$name.log" 2>&1
    rc=$?
    echo "$v $name rc=$rc $(python3 -c "import time;print(round(time.time()-$t0,1))") s; $(PYTHONPATH=$pp python3 -c 'import perfdoctor;print(perfdoctor.__file__)')"
    grep -E 'pass: [0-9]+ steps|pass: .*exit|light pass: step' "$OUT/ab-$v-$name.log" | cut -c1-160
  done
done | tee "$OUT/ab.txt"
