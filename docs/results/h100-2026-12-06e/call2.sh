# 2026-12-06 (session 26) call 2: this session's changes on a GPU: the torch pass's window
# of a training fetch step counts training iterations (893cf5a), analyze ends a call's
# iteration at a pause (613788c): the training loops with validation or workers, and the
# call-stepped programs with pauses between their loops (prefills, encoders), with issue 29's
# acceptance shapes (a)-(d).
set -u
pip install -q --no-deps --no-build-isolation -e . >"$OUT/install.log" 2>&1
export PYTHONPATH=$PWD
DEVICE_LOG="$OUT/install.log" . scripts/device-env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
RUN_TIMEOUT=150 OUT=/tmp/rp timeout 540 scripts/real-programs-check --no-default \
  --only 'decode_1b_compiled,hf_generate_1b,resnet50_b1,resnet50_b256_amp,train_r50_w4_pin,train_eval_mlp,whisper_small_greedy,lit_train_mlp' \
  --pack "$OUT" > "$OUT/real-console.log" 2>&1
tail -14 /tmp/rp/real/table.txt
for b in /tmp/rp/real/*/runs/*; do
  python3 - "$b" <<'PY'
import sys
from perfdoctor.pipeline import diagnose
a = diagnose(sys.argv[1], warnings=False).analysis
t = a.steps.table
ms = ((t["host_end_ns"] - t["host_start_ns"]) / 1e6).round(2).tolist()
print(sys.argv[1].split("/")[-3], a.steps.name[:40], a.steps.count, "traced host ms", ms,
      "overhead", a.value("profiler_overhead_ratio"), "backward ops" if "training" in a.workload.kind else a.workload.kind)
PY
done 2>/dev/null | tee "$OUT/traced.txt"
