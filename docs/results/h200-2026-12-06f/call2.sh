# 2026-12-06 (session 28) call 2: call 1's A/B again, each version run from its own folder
# (call 1's "old" imported ./perfdoctor: python puts the working folder first), and
# train_r18_compiled_ro's bundle back (ratio 0.22 in call 1).
set -u
pip install -q --no-deps --no-build-isolation -e . >/tmp/install.log 2>&1
export PYTHONPATH=$PWD
DEVICE_LOG=/tmp/install.log . scripts/device-env.sh
R=$PWD
P=$R/tests/programs/real
for v in old new new old; do
  d=$R; [ $v = old ] && d=$R/old
  for cfg in "resnet50_b1|image_infer.py --batch 1 --warmup 10 --iters 100" \
             "decode_1b_compiled|compiled_decode.py --layers 16 --dim 2048 --tokens 64 --generations 3"; do
    IFS='|' read -r name cmd <<<"$cfg"
    t0=$(date +%s.%N)
    # shellcheck disable=SC2086
    (cd $d && PYTHONPATH=$d:/tmp/site timeout 100 python3 -m perfdoctor run --collect torch --out /tmp/ab/$v-$name $P/$cmd > /tmp/ab-$v-$name.log 2>&1)
    rc=$?
    echo "$v $name rc=$rc $(python3 -c "import time;print(round(time.time()-$t0,1))") s; $(cd $d && PYTHONPATH=$d python3 -c 'import perfdoctor;print(perfdoctor.__file__)')"
    grep -E 'pass: .*exit' /tmp/ab-$v-$name.log | cut -c1-160
  done
done | tee "$OUT/ab.txt"
cd $R && timeout 120 python3 -m perfdoctor run --collect torch --out /tmp/r18 $P/train_loop.py --model resnet18 --batch 128 --warmup 8 --iters 20 \
  --num-workers 4 --pin-memory --compile reduce-overhead > "$OUT/r18-run.log" 2>&1
b=$(ls -d /tmp/r18/*/ | head -1)
python3 -m perfdoctor analyze "$b" > "$OUT/r18-analyze.txt" 2>&1
tar czf "$OUT/r18-bundle.tgz" -C /tmp r18
