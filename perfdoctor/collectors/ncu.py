"""Nsight Compute: a bounded replay pass for per-kernel hardware counters.

ncu replays every kernel it profiles several times, so it is pointed at a few steps only:
the bootstrap pushes an NVTX range ``perfdoctor_ncu`` around the first ``--ncu-steps`` steps
after the warm-up, ``--nvtx-include perfdoctor_ncu/`` keeps the kernels inside it (the
trailing slash means a push/pop range), and ``-c`` caps the kernel count. Clocks are left
alone (``--clock-control none``): ncu would otherwise lock them to base clocks, and the
numbers would describe a different card from the one the program runs on.

The ``--csv`` output has one row per (kernel, metric); :func:`parse_csv` turns it into the
``counters`` table (one row per kernel and metric, ``duration_ns`` from
``gpu__time_duration.sum``). ncu kernel IDs stand in for correlation ids: this pass is a
separate run of the program, so its kernels do not link to the trace's.
"""

from __future__ import annotations

import csv
import glob
import io
import os
import shutil
from pathlib import Path

import pandas as pd

from perfdoctor.profile import COUNTER_COLUMNS, frame

NVTX_RANGE = "perfdoctor_ncu"
DURATION = "gpu__time_duration.sum"
METRICS = (
    DURATION,
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "lts__t_sector_hit_rate.pct",
    "smsp__thread_inst_executed_per_inst_executed.ratio",
)
# ncu prints values in the unit it likes; the counters table keeps bytes and nanoseconds.
UNIT_SCALE = {
    "byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "Tbyte": 1e12,
    "nsecond": 1, "usecond": 1e3, "msecond": 1e6, "second": 1e9,
}


def find_ncu() -> str | None:
    """Path of ncu: ``$NCU``, PATH, then /opt/nvidia/nsight-compute and CUDA folders."""
    candidates = [os.environ.get("NCU", ""), shutil.which("ncu") or ""]
    for pattern in ("/opt/nvidia/nsight-compute/*/ncu", "/usr/local/cuda*/bin/ncu"):
        candidates += sorted(glob.glob(pattern), reverse=True)
    for path in candidates:
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def command(ncu: str, max_kernels: int, log: Path) -> list[str]:
    """ncu options; the program's command line is appended by the caller."""
    return [
        ncu,
        "--clock-control", "none",
        "--nvtx", "--nvtx-include", f"{NVTX_RANGE}/",
        "-c", str(max_kernels),
        "--csv", "--print-units", "base",
        "--metrics", ",".join(METRICS),
        "--log-file", str(log),
    ]


def parse_csv(text: str) -> pd.DataFrame:
    """ncu ``--csv`` rows (one per kernel and metric) as a ``counters`` table.

    Lines before the CSV header (ncu's own ``==PROF==`` messages) are skipped. Values
    with thousands separators or units are normalised to plain floats in bytes / ns.
    """
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return frame(COUNTER_COLUMNS)
    rows = list(csv.DictReader(io.StringIO("\n".join(lines[start:]))))
    records: list[tuple[int, str, str, float]] = []
    for row in rows:
        try:
            value = float(row["Metric Value"].replace(",", ""))
            kernel = int(row["ID"])
        except (KeyError, ValueError):
            continue
        value *= UNIT_SCALE.get(row.get("Metric Unit", ""), 1)
        records.append((kernel, row.get("Kernel Name", ""), row["Metric Name"], value))
    if not records:
        return frame(COUNTER_COLUMNS)
    table = pd.DataFrame(records, columns=["correlation", "name", "metric", "value"])
    duration = table[table["metric"] == DURATION].set_index("correlation")["value"]
    return frame(
        COUNTER_COLUMNS,
        {
            "correlation": table["correlation"].to_numpy(),
            "name": table["name"].to_numpy(),
            "metric": table["metric"].to_numpy(),
            "value": table["value"].to_numpy(),
            "duration_ns": table["correlation"].map(duration).fillna(-1).astype("int64").to_numpy(),
        },
    )
