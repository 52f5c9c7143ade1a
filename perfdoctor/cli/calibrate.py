"""``perfdoctor calibrate``: measure this GPU's DRAM read bandwidth and bf16 matmul rate,
and cache them (the measurements are :mod:`perfdoctor.record.calibrate`)."""

from __future__ import annotations

import typer

from perfdoctor.record.calibrate import MATMUL_N, READ_SIZES_MB, calibrate, save_calibration
from perfdoctor.errors import UsageError
from perfdoctor.text import percent, value


def calibrate_command(
    sizes_mb: str = typer.Option(",".join(map(str, READ_SIZES_MB)), "--sizes-mb", help="Buffer sizes of the read test, comma-separated MB; keep them well above L2."),
    matmul_n: int = typer.Option(MATMUL_N, "--matmul-n", min=256, help="Square matmul size for the bf16 rate."),
) -> None:
    """Measure this GPU's achievable DRAM read bandwidth and bf16 matmul rate, and cache them.

    Reports then show bandwidth utilization against both the theoretical peak (NVML) and this measured ceiling. The cache is $XDG_CACHE_HOME/perfdoctor/calibration.json (default ~/.cache).
    """
    try:
        sizes = tuple(int(s) for s in sizes_mb.split(",") if s.strip())
    except ValueError:
        raise UsageError(f"--sizes-mb {sizes_mb!r}: expected comma-separated integers") from None
    if not sizes or min(sizes) <= 0:
        raise UsageError("--sizes-mb: give at least one positive size")
    try:
        import torch
    except ImportError:
        raise UsageError("calibrate needs torch (pip install torch)") from None
    if not torch.cuda.is_available():
        raise UsageError("calibrate measures a GPU, and torch sees no CUDA device here")
    from rich.console import Console

    from perfdoctor.collectors import nvml

    device = torch.device("cuda")
    console = Console(stderr=True)
    console.print(f"calibrating {torch.cuda.get_device_name(device)}: read sizes {sizes} MB, matmul n={matmul_n}")
    entry = calibrate(device, sizes, matmul_n)
    try:
        info = nvml.device_info()
        uuid = info["uuid"]
        entry["theoretical_dram_gbps"] = info.get("peak_dram_bw_gbps")
    except Exception:  # noqa: BLE001 - no NVML here: torch knows the UUID too
        uuid = f"GPU-{torch.cuda.get_device_properties(device).uuid}"  # NVML's spelling
    path = save_calibration(uuid, entry)
    peak = entry.get("theoretical_dram_gbps")
    of_peak = f" ({percent(entry['dram_read_gbps'] / peak)} of the theoretical {value(peak, 'GB/s')}, NVML)" if peak else ""
    # The numbers whether or not they were cached (the conditional once took the whole
    # message: an unwritable cache printed "not cached" and no measurement).
    where = f"cached in {path}" if path is not None else "not cached (see the warning above)"
    Console().print(
        f"DRAM read (measured): {value(entry['dram_read_gbps'], 'GB/s')}{of_peak}\n"
        f"bf16 matmul (measured): {value(entry['bf16_matmul_tflops'], 'TFLOP/s')}\n{where}",
        highlight=False, markup=False, soft_wrap=True,  # a long cache path stays one line
    )
