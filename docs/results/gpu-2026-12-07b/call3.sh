# 2026-12-07 (session 32) call 3, on call 2's warm H100: issue 29 item 6, what the light pass
# costs a launch-bound batch-1 program: the module-call step's cost per call in one process
# (--calls, 15 interleaved rounds) and ViT-small at batch 1 alone vs under the light pass in
# 6 alternating process pairs (--program).
pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1; export PYTHONPATH=$PWD; DEVICE_LOG=/tmp/i.log . scripts/device-env.sh; timeout 150 python bench/light_pass.py --calls --device cuda --rounds 15 --json $OUT/calls.json 2>&1 | tail -25; timeout 230 python bench/light_pass.py --program --device cuda --pairs 6 --models vit_small --json $OUT/pairs.json 2>&1 | tail -15
