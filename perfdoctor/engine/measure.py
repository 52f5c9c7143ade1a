"""Turn a timed decode loop into ms/token, tokens/s and bandwidth against the device peak."""

from __future__ import annotations

from dataclasses import dataclass


def peak_dram_bandwidth(device_index: int = 0) -> float | None:
    """Peak DRAM bandwidth in bytes/s of CUDA device ``device_index``, or None when NVML
    cannot say (no driver, no pynvml, MIG, an old driver).

    The one definition is :func:`perfdoctor.collectors.nvml.device_info`'s (2 x max memory
    clock x bus width / 8). The device is matched by UUID so CUDA_VISIBLE_DEVICES
    renumbering cannot pick the wrong card.
    """
    from perfdoctor.collectors import nvml

    try:
        import torch

        target: int | str = f"GPU-{torch.cuda.get_device_properties(device_index).uuid}"
    except Exception:  # older torch without .uuid: NVML's numbering
        target = device_index
    try:
        gbps = nvml.device_info(target).get("peak_dram_bw_gbps")
    except Exception:  # noqa: BLE001 - no pynvml / driver: the peak is unknown, not an error
        return None
    return None if gbps is None else gbps * 1e9


@dataclass(frozen=True)
class Speed:
    """Decode speed of one run."""

    ms_per_token: float
    tokens_per_s: float
    gb_per_s: float  # declared bytes per step / step time, 1 GB = 1e9 bytes
    peak_gb_per_s: float | None
    pct_of_peak: float | None
    floor_ms: float | None  # bytes per step at peak bandwidth: no batch-1 step is faster

    @classmethod
    def of(cls, seconds: float, steps: int, bytes_per_step: int, peak: float | None) -> Speed:
        per_step = seconds / steps
        bw = bytes_per_step / per_step
        return cls(
            ms_per_token=per_step * 1e3,
            tokens_per_s=1 / per_step,
            gb_per_s=bw / 1e9,
            peak_gb_per_s=None if peak is None else peak / 1e9,
            pct_of_peak=None if peak is None else 100 * bw / peak,
            floor_ms=None if peak is None else 1e3 * bytes_per_step / peak,
        )

    def line(self) -> str:
        if self.pct_of_peak is None:
            peak = "peak unknown"
        else:
            peak = f"{self.pct_of_peak:.1f} % of the {self.peak_gb_per_s:.0f} GB/s peak"
        return f"{self.ms_per_token:.3f} ms/token, {self.tokens_per_s:.1f} tokens/s, {self.gb_per_s:.1f} GB/s ({peak})"
