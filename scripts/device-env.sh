# Sourced by scripts/gpu-check and scripts/real-programs-check on the device machine: the
# carried wheels and the libdw fix (scripts/device-deps fetches them), then a check that
# perfdoctor's runtime dependencies import, so a missing one stops the check at once with
# its name instead of every analysis failing later (2026-12-02: no msgspec on the H200,
# every `perfdoctor analyze` of a 9-minute run failed).
PY=${PYTHON:-python3}
if compgen -G ".whl/*.whl" >/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >>"${DEVICE_LOG:-/dev/null}" 2>&1 \
    && export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}/tmp/site
fi
if compgen -G ".debs/*.deb" >/dev/null; then
  mkdir -p /tmp/dw && for f in .debs/*.deb; do dpkg -x "$f" /tmp/dw; done
  export LD_LIBRARY_PATH=/tmp/dw/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
missing=$("$PY" - <<'PY'
import importlib.util
need = ["msgspec", "numpy", "pandas", "rich", "typer", "pynvml"]  # nvtx is optional (torch.cuda.nvtx)
print(" ".join(m for m in need if importlib.util.find_spec(m) is None))
PY
)
if [ -n "$missing" ]; then
  echo "$(basename "$0"): missing on this machine: $missing (run scripts/device-deps here and carry .whl)" >&2
  exit 2
fi
