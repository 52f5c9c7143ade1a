"""The Profile's tables as columns: their names and dtypes (:mod:`perfdoctor.profile`
documents what each means), and the value a loader fills for a column its source lacks.

Pandas-free on purpose: the forked decoders of a large Kineto trace
(:mod:`perfdoctor.collectors.torch_profiler`) build their columns as numpy arrays with it
before pandas is imported, which lets that import run while they decode.
"""

from __future__ import annotations

from typing import Any

import numpy as np

ACTIVITY_COLUMNS: dict[str, str] = {
    "kind": "object",
    "start_ns": "int64",
    "end_ns": "int64",
    "device": "int64",
    "stream": "int64",
    "name": "object",
    "correlation": "int64",
    "grid": "object",
    "block": "object",
    "registers": "float64",
    "shared_mem": "float64",
    "bytes": "float64",
    "copy_kind": "object",
    "host_mem": "object",
    "graph_id": "int64",
    "occupancy_pct": "float64",
}
CALL_COLUMNS: dict[str, str] = {
    "name": "object",
    "start_ns": "int64",
    "end_ns": "int64",
    "tid": "int64",
    "correlation": "int64",
}
RANGE_COLUMNS: dict[str, str] = {
    "name": "object",
    "start_ns": "int64",
    "end_ns": "int64",
    "tid": "int64",
    "source": "object",
}
# ranges.source of the DataLoader's __next__ (perfdoctor.collectors.kineto_events keeps it with
# its times, so the step attribution and the CPU breakdown can say how long a step waited for data)
DATA_LOADER_SOURCE = "data_loader"
SAMPLE_COLUMNS: dict[str, str] = {
    "time_ns": "int64",
    "metric": "object",
    "value": "float64",
    "source": "object",
}
# CPU ops with recorded shapes (torch.profiler record_shapes=True): their "Input Dims",
# "Input type" and "Concrete Inputs" arguments kept as the JSON text the trace wrote, parsed
# only for the few ops that launch the kernels perfdoctor.analysis.bounds costs.
OP_COLUMNS: dict[str, str] = {
    "name": "object",
    "start_ns": "int64",
    "end_ns": "int64",
    "tid": "int64",
    "dims": "object",
    "types": "object",
    "concrete": "object",
}
COUNTER_COLUMNS: dict[str, str] = {
    "correlation": "int64",
    "name": "object",
    "metric": "object",
    "value": "float64",
    "duration_ns": "int64",
}


def repeated(value: Any, n: int) -> np.ndarray:
    """An object column of ``n`` rows, each the one object ``value`` (a label, ""). Not
    ``np.full(n, value, dtype=object)``: for a string that casts through a fixed-width
    string array and makes a new object per row (HF 80 MB: 3 ms per 45k rows, and tests of
    the column (:func:`perfdoctor.names.codes.factorize`) then see one object per row)."""
    out = np.empty(n, dtype=object)
    out.fill(value)
    return out


def filled(columns: dict[str, str], data: dict[str, Any] | None = None) -> dict[str, Any]:
    """``data`` with exactly ``columns``, in order: each column ``data`` lacks is its dtype's
    neutral value (NaN for floats, "" for strings, -1 for integers) on every row."""
    data = data or {}
    n = len(next(iter(data.values()))) if data else 0
    out: dict[str, Any] = {}
    for col, dtype in columns.items():
        if col in data:
            out[col] = data[col]
        elif dtype == "float64":
            out[col] = np.full(n, np.nan)
        elif dtype == "int64":
            out[col] = np.full(n, -1, dtype=np.int64)
        else:
            out[col] = repeated("", n)
    return out
