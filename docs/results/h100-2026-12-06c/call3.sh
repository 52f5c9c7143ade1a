# 2026-12-06 call 3: issue 29's acceptance shapes and the instance-keyed programs at this
# session's code (the module scout now ends on one instance's fifth call: 7080319).
set -u
pip install -q --no-deps --no-build-isolation -e . >"$OUT/install.log" 2>&1
export PYTHONPATH=$PWD
DEVICE_LOG="$OUT/install.log" . scripts/device-env.sh
RUN_TIMEOUT=200 OUT=/tmp/rp timeout 560 scripts/real-programs-check --no-default \
  --only 'decode_1b_compiled,hf_generate_1b,hf_assisted_1b,resnet50_b1,resnet50_b256_amp,train_r50_w4_pin,monai_unet3d_sliding,diffusion_64_cfg_separate' \
  --pack "$OUT" > "$OUT/real-console.log" 2>&1
tail -12 /tmp/rp/real/table.txt
