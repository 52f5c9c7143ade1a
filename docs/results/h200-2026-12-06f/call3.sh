# 2026-12-06 (session 28) call 3, at 01439dd: this session's step changes on a GPU. A call step's wait
# for its loader's next batch is the iteration's (steady.fetched_between: train_r18_compiled_ro
# read 0.22 of the program's ms in call 1), a window of --steps N holds N whole iterations of
# a loop mark (traced steps: 9 of 10 before), the Trainer's last step; with the acceptance
# shapes around them.
set -u
pip install -q --no-deps --no-build-isolation -e . >"$OUT/install.log" 2>&1
export PYTHONPATH=$PWD
DEVICE_LOG="$OUT/install.log" . scripts/device-env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
RUN_TIMEOUT=120 OUT=/tmp/rp timeout 240 scripts/real-programs-check --no-default \
  --only 'train_r18_compiled_ro,train_r50_w4_pin,train_eval_mlp' \
  --pack "$OUT" > "$OUT/real-console.log" 2>&1
grep -E '^== |perfdoctor run:' "$OUT/real-console.log"
tail -8 /tmp/rp/real/table.txt
for b in /tmp/rp/real/*/runs/*; do
  python3 - "$b" <<'PY'
import sys
from perfdoctor.pipeline import diagnose
a = diagnose(sys.argv[1], warnings=False).analysis
print(sys.argv[1].split("/")[-3], a.steps.name[:40], "traced steps", a.steps.count, "steps_per_s", a.value("steps_per_s"))
PY
done
