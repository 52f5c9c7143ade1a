# 2026-12-07 (session 34) call 3: the programs whose steps run on other threads, on this
# session's final code (each step end paired with its own thread's start; the critical path,
# CPU waits and rate per thread): the streaming chat reply (generate in a Thread), the queue
# server and its pool variant, the asyncio executor server, the 8-thread pool; and the
# hyperparameter search (a batch is a step whatever optimizer a trial draws; no trial left out
# as warm-up). Expected: each within 5 % of its own timer (ratio@lp / p50@lp), as before for
# the first four (session 31's table), and hpo_search one step per batch, all trials kept.
set -u
pip install -q --no-deps --no-build-isolation -e . >"$OUT/install.log" 2>&1
export PYTHONPATH=$PWD
DEVICE_LOG="$OUT/install.log" . scripts/device-env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
RUN_TIMEOUT=150 OUT=/tmp/rp timeout 520 scripts/real-programs-check --no-default \
  --only 'hf_stream_1b,threaded_server_mlp,threaded_server_mlp_pool,async_server_mlp_executor,pool_predict_8t,hpo_search_8trials' \
  --pack "$OUT" > "$OUT/real-console.log" 2>&1
grep -E '^== |perfdoctor run:' "$OUT/real-console.log"
grep -A9 '^config' /tmp/rp/real/table.txt
for b in /tmp/rp/real/hpo_search_8trials/runs/*/; do python -c "import json,sys; m=json.load(open(sys.argv[1]+'manifest.json'))['light_pass']; print('hpo light:', m['step_name'], m['steps_seen'], 'steady from', m['steady_start'])" "$b"; done
