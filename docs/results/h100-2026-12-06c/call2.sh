# 2026-12-06 call 2: Ultralytics-style YOLO predict on a GPU (7080319), the torch-pass
# fallback test (daa5800), and the trace budget's before number: jacobi_64_tight traced to
# its end (--trace-budget 0), against call 1's cut run.
set -u
pip install -q --no-deps --no-build-isolation -e . >"$OUT/install.log" 2>&1
export PYTHONPATH=$PWD
DEVICE_LOG="$OUT/install.log" . scripts/device-env.sh
RUN_TIMEOUT=240 OUT=/tmp/rp scripts/real-programs-check --no-default --only 'yolo*' --pack "$OUT" > "$OUT/real-console.log" 2>&1
tail -6 /tmp/rp/real/table.txt
PYTHONUNBUFFERED=1 timeout 200 python3 -m pytest -v -rA -p no:cacheprovider tests/record/test_traces_from_start.py \
  "tests/record/test_real_programs.py::test_yolo_predict_steps_per_frame_though_the_model_calls_its_own_forward_when_built" \
  > "$OUT/pytest.log" 2>&1
tail -6 "$OUT/pytest.log"
# the before number: the whole program traced (timeout: at most 280 s)
start=$(date +%s)
timeout 280 python3 -m perfdoctor run -q --collect torch --trace-budget 0 --out /tmp/j0 tests/programs/real/jacobi_solve.py \
  --n 64 --sweeps 100000 --solves 1 > "$OUT/jacobi-uncut.log" 2>&1
echo "jacobi_64_tight --trace-budget 0: rc $? in $(( $(date +%s) - start )) s" | tee -a "$OUT/jacobi-uncut.log"
python3 - <<'PY' | tee -a "$OUT/jacobi-uncut.log"
import json, pathlib
for b in pathlib.Path("/tmp/j0").glob("*"):
    m = json.loads((b / "manifest.json").read_text())
    t = b / "raw/torch-trace.json.gz"
    print([(p["name"], p["seconds"]) for p in m["passes"]], m["collectors"].get("torch", {}).get("status"),
          "trace MB", round(t.stat().st_size / 1e6, 1) if t.exists() else None)
PY
