# 2026-12-06 call 1: the trace budget (e48ada8) on a GPU: the no-step real programs
# (k-means, Jacobi) before/after numbers, the new CPU test there, and last session's
# unverified graphed-training test fix (42f9b50).
set -u
pip install -q --no-deps --no-build-isolation -e . >"$OUT/install.log" 2>&1
export PYTHONPATH=$PWD
DEVICE_LOG="$OUT/install.log" . scripts/device-env.sh
RUN_TIMEOUT=240 OUT=/tmp/rp scripts/real-programs-check --no-default --only 'kmeans*,jacobi*' --pack "$OUT" > "$OUT/real-console.log" 2>&1
tail -12 /tmp/rp/real/table.txt
for b in /tmp/rp/real/*/runs/*; do
  python3 - "$b" <<'PY'
import json, sys, pathlib
b = pathlib.Path(sys.argv[1]); m = json.loads((b / "manifest.json").read_text())
l = json.loads((b / "raw/light.json").read_text()); t = json.loads((b / "raw/torch.json").read_text())
tr = b / "raw/torch-trace.json.gz"
print(b.parent.parent.name, "light rss", l.get("max_rss_mb"), "torch rss", t.get("max_rss_mb"), "cut", t.get("trace_cut"),
      "passes", [(p["name"], p["seconds"]) for p in m["passes"]], "trace MB", round(tr.stat().st_size / 1e6, 1) if tr.exists() else None)
PY
done | tee "$OUT/rss.txt"
PYTHONUNBUFFERED=1 timeout 300 python3 -m pytest -v -rA -p no:cacheprovider tests/record/test_trace_budget.py \
  "tests/record/test_run_gpu.py::test_graphed_training_iterations_are_the_step" > "$OUT/pytest.log" 2>&1
tail -8 "$OUT/pytest.log"
