"""``perfdoctor doctor``: what this machine offers perfdoctor, and why a collector is not there.

GPUs (NVML: name, driver, memory, GPM support), Nsight Systems and Nsight Compute (where
found, else where perfdoctor looked), the torch build, the cached calibration, Python and
perfdoctor. Every check is read-only and quick; nothing fails the command (exit 0): a
missing piece is a line that says what is missing and how to get it. ``--json`` prints the
same facts for machines. Also here: the root ``--version`` option.
"""

from __future__ import annotations

import platform
import sys
import textwrap
from pathlib import Path
from typing import Any

from perfdoctor import __version__
from perfdoctor.console import LAYOUT_WIDTH as WIDTH
from perfdoctor.text import nbytes, value

LABEL = 13  # width of the label column


def _torch() -> dict[str, Any]:
    """torch's version and CUDA build, imported only now (it takes a second or two)."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return {"installed": False, "reason": f"torch is not installed for {sys.executable} (pip install torch==2.13.0)"}
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - a broken install is a finding, not a crash
        return {"installed": False, "reason": f"import torch failed: {type(exc).__name__}: {exc}"}
    info: dict[str, Any] = {"installed": True, "version": torch.__version__, "cuda": torch.version.cuda}
    try:
        info["cuda_available"] = bool(torch.cuda.is_available())
        info["cuda_devices"] = torch.cuda.device_count() if info["cuda_available"] else 0
    except Exception as exc:  # noqa: BLE001
        info["cuda_available"] = False
        info["cuda_error"] = str(exc)
    return info


def _gpus() -> dict[str, Any]:
    """Every GPU NVML sees, with GPM support; or why NVML cannot tell."""
    from perfdoctor.collectors import nvml
    from perfdoctor.record.tools import gpu_present

    out: dict[str, Any] = {"present": gpu_present(), "devices": []}
    try:
        import pynvml
    except ImportError:
        out["nvml"] = "unavailable: pynvml is not installed (pip install nvidia-ml-py)"
        return out
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        out["nvml"] = f"unavailable: NVML cannot start: {exc}" + ("" if out["present"] else " (no NVIDIA driver here)")
        return out
    out["nvml"] = "ok"
    try:
        count = pynvml.nvmlDeviceGetCount()
    except pynvml.NVMLError as exc:
        out["nvml"] = f"failed: nvmlDeviceGetCount: {exc}"
        return out
    for index in range(count):
        device: dict[str, Any] = {"index": index}
        try:
            device.update(nvml.device_info(index))
        except Exception as exc:  # noqa: BLE001
            device["error"] = str(exc)
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            supported = bool(pynvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice)
            device["gpm_supported"] = supported
            device["gpm"] = "supported" if supported else "not supported by this GPU (GPM needs Hopper or later)"
        except Exception as exc:  # noqa: BLE001 - an old driver has no GPM query
            device["gpm_supported"] = False
            device["gpm"] = f"unknown: nvmlGpmQueryDeviceSupport failed ({exc})"
        out["devices"].append(device)
    return out


def _calibration(gpus: dict[str, Any]) -> dict[str, Any]:
    from perfdoctor.record.calibrate import cache_path, load_calibration

    out: dict[str, Any] = {"cache": str(cache_path()), "devices": {}}
    for device in gpus["devices"]:
        uuid = device.get("uuid")
        if uuid:
            out["devices"][uuid] = load_calibration(uuid)
    return out


def gather() -> dict[str, Any]:
    """Everything ``perfdoctor doctor`` reports, as JSON-ready data."""
    from perfdoctor.collectors.tools import find_tool, where_looked
    from perfdoctor.record.tools import availability

    gpus = _gpus()
    return {
        "schema": "perfdoctor.doctor/1",
        "perfdoctor": {"version": __version__, "path": str(Path(__file__).resolve().parents[1])},
        "python": {"version": platform.python_version(), "executable": sys.executable},
        "platform": platform.platform(),
        "gpus": gpus,
        "torch": _torch(),
        "tools": {
            name: {"path": find_tool(name), "looked_in": where_looked(name)} for name in ("nsys", "ncu")
        },
        "calibration": _calibration(gpus),
        "collectors": {name: {"available": why is None, "reason": why} for name, why in availability().items()},
    }


def _line(label: str, text: str) -> str:
    return textwrap.fill(
        text, WIDTH, initial_indent=f"{label:<{LABEL}}", subsequent_indent=" " * LABEL, break_on_hyphens=False
    )


def render(facts: dict[str, Any]) -> str:
    """The plain-text report (80 columns, no colour, no box drawing)."""
    lines = ["perfdoctor doctor: what this machine offers perfdoctor", ""]
    pd = facts["perfdoctor"]
    lines.append(_line("perfdoctor", f"{pd['version']} ({pd['path']})"))
    py = facts["python"]
    lines.append(_line("python", f"{py['version']} ({py['executable']})"))
    t = facts["torch"]
    if not t["installed"]:
        lines.append(_line("torch", t["reason"]))
    else:
        build = f"CUDA {t['cuda']} build" if t.get("cuda") else "CPU build (no CUDA)"
        usable = ""
        if t.get("cuda"):
            usable = f", {t.get('cuda_devices', 0)} CUDA device(s) usable" if t.get("cuda_available") else ", CUDA not usable here"
            if t.get("cuda_error"):
                usable += f" ({t['cuda_error']})"
        lines.append(_line("torch", f"{t['version']}, {build}{usable}"))
    g = facts["gpus"]
    if g["devices"]:
        for d in g["devices"]:
            mem = f", {nbytes(d['memory_bytes'], binary=True)}" if d.get("memory_bytes") else ""
            driver = f", driver {d['driver_version']}" if d.get("driver_version") else ""
            lines.append(_line(f"GPU {d['index']}", f"{d.get('name', '?')}{driver}{mem}" + (f" ({d['error']})" if d.get("error") else "")))
            lines.append(_line("  GPM", str(d.get("gpm"))))
            peak = d.get("peak_dram_bw_gbps")
            if peak:
                lines.append(_line("  peak DRAM", f"{value(peak, 'GB/s')} (NVML memory clock × bus width)"))
    else:
        why = "no NVIDIA GPU on this machine (no /proc/driver/nvidia/gpus, no /dev/nvidiaN)" if not g["present"] else "an NVIDIA device is present but NVML lists no GPU"
        lines.append(_line("GPU", f"none: {why}"))
    lines.append(_line("NVML", g.get("nvml", "?")))
    for name, tool in facts["tools"].items():
        text = tool["path"] if tool["path"] else f"not found; looked in {tool['looked_in']}"
        lines.append(_line(name, text))
    cal = facts["calibration"]
    if cal["devices"]:
        for uuid, entry in cal["devices"].items():
            if entry:
                text = f"{uuid}: cached ({entry.get('dram_read_gbps', '?')} GB/s read, {entry.get('bf16_matmul_tflops', '?')} TFLOP/s bf16, measured {entry.get('measured_at', '?')})"
            else:
                text = f"{uuid}: not cached (perfdoctor calibrate measures it once)"
            lines.append(_line("calibration", text))
    else:
        lines.append(_line("calibration", f"no GPU to calibrate (cache: {cal['cache']})"))
    lines += ["", "collectors of perfdoctor run on this machine:"]
    for name, c in facts["collectors"].items():
        reason = str(c["reason"])
        if name in facts["tools"] and not facts["tools"][name]["path"] and " (" in reason:
            reason = reason[: reason.index(" (")] + " (where perfdoctor looked: above)"
        lines.append(_line(f"  {name}", "available" if c["available"] else f"unavailable: {reason}"))
    if not g["devices"]:
        lines += [
            "",
            textwrap.fill(
                "Without a GPU, perfdoctor still reads traces (perfdoctor analyze), diffs and "
                "gates runs, and perfdoctor run times CPU programs; perfdoctor demo shows a "
                "recording made on a GPU.",
                WIDTH,
            ),
        ]
    return "\n".join(lines) + "\n"


__all__ = ["gather", "render"]
