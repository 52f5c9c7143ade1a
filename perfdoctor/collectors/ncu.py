"""Nsight Compute: a bounded replay pass for per-kernel hardware counters.

ncu replays every kernel it profiles several times, so it is pointed at a few steps only:
the bootstrap pushes an NVTX range ``perfdoctor_ncu`` around the first ``--ncu-steps`` steps
after the warm-up, ``--nvtx-include perfdoctor_ncu/`` keeps the kernels inside it (the
trailing slash means a push/pop range), and each distinct launch in it is replayed once
(:func:`command`, :func:`kernel_set`: the distinct kernels the torch or nsys pass traced). Clocks are left
alone (``--clock-control none``): ncu would otherwise lock them to base clocks, and the
numbers would describe a different card from the one the program runs on.

The ``--csv`` output has one row per (kernel, metric); :func:`parse_csv` turns it into the
``counters`` table (one row per kernel and metric, ``duration_ns`` from
``gpu__time_duration.sum``). ncu kernel IDs stand in for correlation ids: this pass is a
separate run of the program, so its kernels do not link to the trace's.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from perfdoctor.bundle.layout import NCU_RANGE
from perfdoctor.profile import COUNTER_COLUMNS, frame

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


# The kernels of a step are replayed once per distinct launch (kernel and launch
# configuration), not per launch: a decode step launches each of its few dozen kernels
# hundreds of times, and replaying each launch took the H200 past 264 s on HF generate.
# Above this many distinct kernels only the largest by GPU time are replayed (a name regex).
MAX_DISTINCT = 200
# Linux caps one argument at 128 KiB (MAX_ARG_STRLEN): the regex stays well below.
MAX_REGEX_CHARS = 100_000
REGEX_SPECIAL = set("\\^$.|?*+()[]{}")


@dataclass(frozen=True)
class KernelSet:
    """The distinct kernels of the traced steps (from the torch or nsys pass), for the ncu
    pass: ``launches`` distinct (kernel, grid, block) launches in all, the ``names`` to
    replay (every one, or the largest by GPU time up to the caps, then ``capped``)."""

    names: tuple[str, ...]
    launches: int
    capped: int = 0  # distinct kernels left out by the caps

    def regex(self) -> str | None:
        """``^(name|name...)$`` over the demangled names, or None when every kernel is kept
        (no name filter: ncu's own distinct launches are the set)."""
        if not self.capped:
            return None
        return "^(" + "|".join("".join("\\" + c if c in REGEX_SPECIAL else c for c in n) for n in self.names) + ")$"


def kernel_set(kernels: pd.DataFrame, cap: int = MAX_DISTINCT, max_chars: int = MAX_REGEX_CHARS) -> KernelSet | None:
    """The distinct kernels of ``kernels`` (a Profile's kernel rows: name, grid, block,
    start_ns, end_ns), the largest total GPU time first; None without kernels."""
    if kernels.empty:
        return None
    launches = int(kernels[["name", "grid", "block"]].drop_duplicates().shape[0])
    time = (kernels["end_ns"] - kernels["start_ns"]).groupby(kernels["name"], sort=False).sum().sort_values(ascending=False, kind="stable")
    names: list[str] = []
    chars = len("^()$")
    for name in time.index[:cap]:
        chars += len(name) * 2 + 1  # each character escaped at worst, and a "|"
        if chars > max_chars:
            break
        names.append(str(name))
    return KernelSet(tuple(names), launches, capped=len(time) - len(names))


def command(ncu: str, log: Path, kernels: KernelSet | None = None, max_kernels: int = 2000) -> list[str]:
    """ncu options; the program's command line is appended by the caller. Each distinct
    launch (kernel and launch configuration) inside the NVTX window once
    (``--filter-mode per-launch-config --launch-count 1``); past the caps of
    :func:`kernel_set`, only the kernels it kept (a demangled-name regex). Without a kernel
    set (no torch or nsys pass to take it from), ``max_kernels`` launches at most, globally."""
    filters = ["--filter-mode", "per-launch-config", "--launch-count", "1"]
    if kernels is None:
        filters = ["-c", str(max_kernels)]
    elif kernels.regex() is not None:
        filters += ["--kernel-name-base", "demangled", "--kernel-name", f"regex:{kernels.regex()}"]
    return [
        ncu,
        "--clock-control", "none",
        "--nvtx", "--nvtx-include", f"{NCU_RANGE}/",
        *filters,
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
