"""Issue 30, item 12 on the H200: the cache attacks through the real commands.

The calibration cache (``$XDG_CACHE_HOME/perfdoctor/calibration.json``) through
``perfdoctor calibrate`` and ``perfdoctor run``/``analyze``, the cubin cache
(``$XDG_CACHE_HOME/perfdoctor/cubin``) through the megakernel engine
(``python -m perfdoctor.engine --variant megakernel``). Every command is a subprocess with a
timeout (a FIFO must not hang it), and none may print a traceback. The CPU side of the same
contract (docs/safety.md, "Caches") is tests/e2e/test_hostile2.py and test_hostile3.py.

Small sizes (a 512 MB read, a 4096 matmul, the tiny model): about a minute and a half of GPU time.
Run on the H200 by ``scripts/gpu-check`` (``--tests-only tests/record/test_caches_gpu.py``).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

ROOT = Path(__file__).parents[2]
CALIBRATE = ("calibrate", "--sizes-mb", "512", "--matmul-n", "4096")
GOOD = {"dram_read_gbps": 4100.0, "bf16_matmul_tflops": 700.0, "measured_at": "2026-12-01T00:00:00Z"}

# A few matmuls a step, each step a perfdoctor.region (the step `perfdoctor run` finds by default).
PROGRAM = """
import torch
import perfdoctor.api as perfdoctor

a = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
for _ in range(40):
    with perfdoctor.region("step"):
        for _ in range(4):
            a = torch.tanh(a @ a)
        torch.cuda.synchronize()
print("done", float(a.float().abs().mean()))
"""


def command(xdg: Path, *args: str, module: str = "perfdoctor", cwd: Path | None = None,
            timeout: float = 180) -> subprocess.CompletedProcess:
    """``python -m MODULE ARGS`` with its caches under ``xdg`` (never the machine's own)."""
    env = {k: v for k, v in os.environ.items() if k != "PERFDOCTOR_CACHE"}
    env.update(XDG_CACHE_HOME=str(xdg), COLUMNS="200",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True,
                          cwd=cwd or xdg.parent, env=env, timeout=timeout)


def warnings_of(done: subprocess.CompletedProcess) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.startswith("warning:")]


def no_traceback(done: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in done.stderr and "Traceback" not in done.stdout, done.stderr[-3000:]


def printed_measurement(done: subprocess.CompletedProcess) -> dict[str, float]:
    """The two numbers ``calibrate`` printed on stdout."""
    # text.value writes thousands with a comma ("3,923 GB/s")
    dram = re.search(r"^DRAM read \(measured\): ([\d,]+) GB/s", done.stdout, re.M)
    mm = re.search(r"^bf16 matmul \(measured\): ([\d,]+) TFLOP/s", done.stdout, re.M)
    assert dram and mm, done.stdout + done.stderr[-2000:]
    return {"dram_read_gbps": float(dram[1].replace(",", "")), "bf16_matmul_tflops": float(mm[1].replace(",", ""))}


def cache_file(xdg: Path) -> Path:
    return xdg / "perfdoctor" / "calibration.json"


def cached(xdg: Path) -> dict:
    """The calibration cache as written: a regular file (not a link, not a FIFO) of JSON."""
    path = cache_file(xdg)
    assert stat.S_ISREG(os.lstat(path).st_mode), oct(os.lstat(path).st_mode)
    return json.loads(path.read_text())


def valid(entry: dict) -> bool:
    return all(isinstance(entry.get(k), float) and math.isfinite(entry[k]) and entry[k] > 0
               for k in ("dram_read_gbps", "bf16_matmul_tflops"))


def gpu_uuid() -> str:
    """The UUID both `calibrate` and `run` file this GPU under (NVML's)."""
    from perfdoctor.collectors import nvml

    return nvml.device_info()["uuid"]


# ---- calibration.json that is not a cache: calibrate measures, warns once, rewrites it ----


@pytest.mark.parametrize("attack", ["fifo", "dev_zero", "deep"])
def test_calibrate_over_a_hostile_cache_file(tmp_path, attack):
    """A FIFO (reading it would block for ever), a link to /dev/zero (never ends), JSON nested
    100,000 deep: calibrate finishes within its timeout, measures, prints the numbers, warns
    in one line that the cache was rewritten, exits 0, and leaves a regular file holding one
    valid entry (the link is replaced, /dev/zero is not written through)."""
    xdg = tmp_path / "xdg"
    path = cache_file(xdg)
    path.parent.mkdir(parents=True)
    if attack == "fifo":
        os.mkfifo(path)
    elif attack == "dev_zero":
        path.symlink_to("/dev/zero")
    else:
        path.write_text("[" * 100_000 + "]" * 100_000)
    done = command(xdg, *CALIBRATE, timeout=120)
    no_traceback(done)
    assert done.returncode == 0, done.stderr[-3000:]
    printed = printed_measurement(done)
    assert f"cached in {path}" in done.stdout, done.stdout
    reason = {"fifo": "is a FIFO", "dev_zero": "is a character device", "deep": "nested too deeply"}[attack]
    (warning,) = warnings_of(done)
    assert warning.startswith("warning: calibration cache rewritten: ") and reason in warning, warning
    data = cached(xdg)
    assert list(data) == [gpu_uuid()] and valid(data[gpu_uuid()]), data
    assert round(data[gpu_uuid()]["dram_read_gbps"]) == printed["dram_read_gbps"]


# ---- an unchecked entry: every bundle `run` wrote was unreadable by `analyze` ----------------


def run_and_analyze(xdg: Path, cwd: Path) -> tuple[Path, dict]:
    """`perfdoctor run --collect torch,nvml` of PROGRAM, then `perfdoctor analyze` of its
    bundle: both exit 0 without a traceback. The bundle and its manifest."""
    runs = cwd / "runs"
    before = set(runs.iterdir()) if runs.is_dir() else set()
    done = command(xdg, "run", "--collect", "torch,nvml", "--out", str(runs), "--steps", "5",
                   str(cwd / "prog.py"), cwd=cwd, timeout=240)
    no_traceback(done)
    assert done.returncode == 0, done.stderr[-3000:]
    (bundle,) = set(runs.iterdir()) - before
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["collectors"]["torch"]["status"] == "ok", manifest["collectors"]
    report = command(xdg, "analyze", str(bundle), cwd=cwd, timeout=120)
    no_traceback(report)
    assert report.returncode == 0, report.stdout[-2000:] + report.stderr[-3000:]
    return bundle, manifest


def test_a_bad_cached_entry_never_reaches_a_bundle(tmp_path):
    """This GPU's cached entry is a string, two others NaN and negative: `run` copies none of
    them into the bundle (which `analyze` reads, exit 0); `calibrate` drops all three with
    one warning and re-measures; the next bundle carries the new entry, and still analyzes."""
    xdg, cwd = tmp_path / "xdg", tmp_path / "work"
    cwd.mkdir()
    (cwd / "prog.py").write_text(PROGRAM)
    uuid = gpu_uuid()
    cache_file(xdg).parent.mkdir(parents=True)
    bad = {uuid: {**GOOD, "dram_read_gbps": "x"}, "GPU-nan": {**GOOD, "dram_read_gbps": float("nan")},
           "GPU-negative": {**GOOD, "bf16_matmul_tflops": -1.0}}
    cache_file(xdg).write_text(json.dumps(bad))  # NaN as JSON's NaN literal, which json.loads accepts

    _, manifest = run_and_analyze(xdg, cwd)
    assert manifest["gpu"]["uuid"] == uuid
    assert manifest.get("calibration") is None, manifest.get("calibration")

    done = command(xdg, *CALIBRATE, timeout=120)
    no_traceback(done)
    assert done.returncode == 0, done.stderr[-3000:]
    printed_measurement(done)
    (warning,) = warnings_of(done)
    assert warning.startswith("warning: calibration cache rewritten: ") and "3 invalid entries dropped" in warning, warning
    data = cached(xdg)
    assert list(data) == [uuid] and valid(data[uuid]), data

    _, manifest = run_and_analyze(xdg, cwd)
    assert manifest["calibration"] == data[uuid]


# ---- an unwritable cache: the measurement counts, "not cached" -----------------------------


@pytest.mark.parametrize("how", ["file_in_the_way", "read_only"])
def test_calibrate_with_an_unwritable_cache(tmp_path, how):
    """A regular file where the cache folder goes (fails for root too), or a read-only cache
    folder (mode 0o500; root ignores modes, so skipped as root): calibrate measures, prints
    both numbers and "not cached", warns once, exits 0; the cache is left as it was."""
    xdg = tmp_path / "xdg"
    xdg.mkdir()
    folder = xdg / "perfdoctor"
    if how == "file_in_the_way":
        folder.write_text("a file where the cache folder goes")
    else:
        if os.geteuid() == 0:
            pytest.skip("root writes into a read-only folder; file_in_the_way covers root")
        folder.mkdir()
        folder.chmod(0o500)
    try:
        done = command(xdg, *CALIBRATE, timeout=120)
    finally:
        if folder.is_dir():
            folder.chmod(0o700)
    no_traceback(done)
    assert done.returncode == 0, done.stderr[-3000:]
    printed = printed_measurement(done)
    assert printed["dram_read_gbps"] > 0 and printed["bf16_matmul_tflops"] > 0
    assert "not cached (see the warning above)" in done.stdout, done.stdout
    (warning,) = warnings_of(done)
    assert warning.startswith("warning: calibration not cached ("), warning
    if how == "file_in_the_way":
        assert folder.read_text() == "a file where the cache folder goes"
    else:
        assert list(folder.iterdir()) == []


# ---- the megakernel's cubin: a damaged one is rebuilt, never handed to the driver ---------


TOKENS = re.compile(r"^tokens: ([\d ]+)$", re.M)


def megakernel(xdg: Path, timeout: float) -> list[int]:
    """The tokens of the tiny model's megakernel decode (random weights, seed 0)."""
    done = command(xdg, "--variant", "megakernel", "--config", "tiny", "--tokens", "8", "--ctx", "64",
                   module="perfdoctor.engine", timeout=timeout)
    no_traceback(done)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "not cached" not in done.stderr, done.stderr[-2000:]  # the cache folder is writable
    found = TOKENS.search(done.stdout)
    assert found, done.stdout
    return [int(t) for t in found[1].split()]


def the_cubin(xdg: Path) -> tuple[Path, bytes]:
    """The one cached cubin; its digest file holds its SHA-256."""
    (path,) = sorted((xdg / "perfdoctor" / "cubin").glob("*.cubin"))
    data = path.read_bytes()
    assert data[:4] == b"\x7fELF" and len(data) > 1000, len(data)
    assert path.with_name(path.name + ".sha256").read_text().strip() == hashlib.sha256(data).hexdigest()
    return path, data


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
                    reason="the megakernel needs a Hopper GPU (sm_90)")
def test_a_damaged_cubin_is_rebuilt(tmp_path):
    """The engine builds the cubin once into the cache; truncated, then overwritten with
    garbage of the same length (the digest beside it left as it was), it is rebuilt on the
    next run: a valid cubin again, the same tokens, exit 0, no traceback."""
    from perfdoctor.engine.cubin import find_nvcc
    from perfdoctor.engine.config import BadInput

    try:
        find_nvcc()
    except BadInput as exc:
        pytest.skip(str(exc))
    xdg = tmp_path / "xdg"
    xdg.mkdir()
    want = megakernel(xdg, timeout=300)  # nvcc builds it here
    assert len(want) == 8
    path, built = the_cubin(xdg)
    for damage in (built[:100], os.urandom(len(built))):
        path.write_bytes(damage)
        assert megakernel(xdg, timeout=300) == want
        again, rebuilt = the_cubin(xdg)
        assert again == path and rebuilt != damage
