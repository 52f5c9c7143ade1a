"""Nsight Systems: read its SQLite export into a Profile.

``nsys export --type sqlite`` writes one table per activity kind. Strings (kernel names,
API names, NVTX text) are ids into ``StringIds``, and enumerations (copy kinds, memory
kinds, NVTX event types) are decoded through the export's own ``ENUM_*`` tables, so the
loader follows whatever numbering the nsys version wrote. A ``.nsys-rep`` is exported
first with the ``nsys`` binary when one is found.
"""

from __future__ import annotations

import gzip
import shutil
import sqlite3
import subprocess
import tempfile
import zlib
from contextlib import closing
from pathlib import Path

import numpy as np
import pandas as pd

from perfdoctor.errors import UsageError
from perfdoctor.profile import (
    ACTIVITY_COLUMNS,
    CALL_COLUMNS,
    RANGE_COLUMNS,
    SAMPLE_COLUMNS,
    Profile,
    frame,
    parse_declarations,
)

NSYS_CANDIDATES = (
    "/opt/nvidia/nsight-systems*/bin/nsys",
    "/opt/nvidia/nsight-systems*/*/bin/nsys",
    "/opt/nvidia/nsight-systems*/*/target-linux-x64/nsys",
    "/usr/local/cuda*/bin/nsys",
    "/opt/nvidia/nsight-compute*/*/host/target-linux-x64/nsys",
)
NVTX_RANGE_TYPES = ("NvtxPushPopRange", "NvtxStartEndRange")
DRAM_THROUGHPUT = ("DRAM Read Bandwidth", "DRAM Write Bandwidth")


def find_nsys() -> str | None:
    """The nsys binary: ``$NSYS``, PATH, then the usual install folders (Nsight Compute ships one)."""
    import glob
    import os

    env = os.environ.get("NSYS")
    if env and Path(env).is_file():
        return env
    found = shutil.which("nsys")
    if found:
        return found
    for pattern in NSYS_CANDIDATES:
        hits = sorted(glob.glob(pattern), reverse=True)
        if hits:
            return hits[0]
    return None


def export_sqlite(rep: Path, out: Path) -> Path:
    """Run ``nsys export --type sqlite`` on a ``.nsys-rep``."""
    nsys = find_nsys()
    if nsys is None:
        raise UsageError(f"{rep}: reading .nsys-rep needs nsys (not found on PATH, $NSYS or /opt/nvidia); export it with `nsys export --type sqlite`")
    done = subprocess.run(
        [nsys, "export", "--type", "sqlite", "--force-overwrite", "true", "-o", str(out), str(rep)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0 or not out.exists():
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise UsageError(f"{rep}: nsys export failed: {tail[0]}")
    return out


def load(path: str | Path) -> Profile:
    """Read an Nsight Systems export (``.sqlite``, ``.sqlite.gz`` or ``.nsys-rep``)."""
    path = Path(path)
    with tempfile.TemporaryDirectory(prefix="perfdoctor-nsys-") as tmp:
        db = _materialize(path, Path(tmp))
        try:
            with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as con:
                return _read(con, path)
        except sqlite3.DatabaseError as exc:
            raise UsageError(f"{path}: not an SQLite database ({exc})") from None


def _materialize(path: Path, tmp: Path) -> Path:
    name = path.name.lower()
    if name.endswith(".nsys-rep"):
        return export_sqlite(path, tmp / "export.sqlite")
    if name.endswith(".gz"):
        out = tmp / "export.sqlite"
        try:
            with gzip.open(path) as src, out.open("wb") as dst:
                shutil.copyfileobj(src, dst)
        except (EOFError, OSError, zlib.error) as exc:
            raise UsageError(f"{path}: damaged gzip file ({exc})") from None
        return out
    return path


def _tables(con: sqlite3.Connection) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}


def _enum(con: sqlite3.Connection, tables: set[str], table: str) -> dict[int, str]:
    if table not in tables:
        return {}
    return {int(i): str(n) for i, n in con.execute(f"SELECT id, name FROM {table}")}


def _read(con: sqlite3.Connection, path: Path) -> Profile:
    tables = _tables(con)
    if "StringIds" not in tables:
        raise UsageError(f"{path}: not an Nsight Systems export (no StringIds table)")
    if "CUPTI_ACTIVITY_KIND_RUNTIME" not in tables:
        raise UsageError(
            f"{path}: Nsight Systems export without the CUPTI_ACTIVITY_KIND_RUNTIME table (record with `nsys profile -t cuda`)"
        )
    strings = pd.read_sql_query("SELECT id, value FROM StringIds", con).set_index("id")["value"]
    activities = pd.concat(
        [_kernels(con, tables, strings), _memcpy(con, tables), _memset(con, tables)], ignore_index=True
    ).sort_values("start_ns", kind="stable", ignore_index=True)
    calls = _calls(con, tables, strings)
    ranges = _ranges(con, tables, strings)
    return Profile(
        activities=activities,
        calls=calls,
        ranges=ranges,
        samples=_gpu_metrics(con, tables),
        device=_device(con, tables),
        meta={"source": "nsys", "path": str(path), "declared": parse_declarations(ranges)},
    )


def _activity_columns(t: pd.DataFrame, kind: str) -> dict[str, np.ndarray]:
    """The columns every CUPTI activity table shares, in Profile terms."""
    return {
        "kind": np.full(len(t), kind, dtype=object),
        "start_ns": t["start"].to_numpy(np.int64),
        "end_ns": t["end"].to_numpy(np.int64),
        "device": t["deviceId"].to_numpy(np.int64),
        "stream": t["streamId"].to_numpy(np.int64),
        "correlation": t["correlationId"].to_numpy(np.int64),
        "graph_id": t["graphNodeId"].fillna(-1).to_numpy(np.int64),
    }


def _kernels(con: sqlite3.Connection, tables: set[str], strings: pd.Series) -> pd.DataFrame:
    if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables:
        return frame(ACTIVITY_COLUMNS)
    k = pd.read_sql_query(
        "SELECT start, end, deviceId, streamId, correlationId, demangledName, registersPerThread, "
        "gridX, gridY, gridZ, blockX, blockY, blockZ, staticSharedMemory, dynamicSharedMemory, graphNodeId "
        "FROM CUPTI_ACTIVITY_KIND_KERNEL",
        con,
    )
    dims = lambda x, y, z: (k[x].astype(str) + "," + k[y].astype(str) + "," + k[z].astype(str)).to_numpy()  # noqa: E731
    return frame(
        ACTIVITY_COLUMNS,
        {
            **_activity_columns(k, "kernel"),
            "name": k["demangledName"].map(strings).fillna("").to_numpy(),
            "grid": dims("gridX", "gridY", "gridZ"),
            "block": dims("blockX", "blockY", "blockZ"),
            "registers": k["registersPerThread"].to_numpy(np.float64),
            "shared_mem": (k["staticSharedMemory"] + k["dynamicSharedMemory"]).to_numpy(np.float64),
        },
    )


def _memcpy(con: sqlite3.Connection, tables: set[str]) -> pd.DataFrame:
    if "CUPTI_ACTIVITY_KIND_MEMCPY" not in tables:
        return frame(ACTIVITY_COLUMNS)
    m = pd.read_sql_query(
        "SELECT start, end, deviceId, streamId, correlationId, bytes, copyKind, srcKind, dstKind, graphNodeId "
        "FROM CUPTI_ACTIVITY_KIND_MEMCPY",
        con,
    )
    # CUDA_MEMCPY_KIND_HTOD -> HtoD; CUDA_MEMOPR_MEMORY_KIND_PAGEABLE -> pageable
    oper = {i: _copy_kind(n) for i, n in _enum(con, tables, "ENUM_CUDA_MEMCPY_OPER").items()}
    mem = {i: n.rsplit("_", 1)[-1].lower() for i, n in _enum(con, tables, "ENUM_CUDA_MEM_KIND").items()}
    copy_kind = m["copyKind"].map(oper).fillna("")
    host_side = np.where(copy_kind.str.startswith("H"), m["srcKind"], m["dstKind"])
    host_mem = pd.Series(host_side).map(mem).fillna("").replace({"device": ""})
    return frame(
        ACTIVITY_COLUMNS,
        {
            **_activity_columns(m, "memcpy"),
            "name": ("Memcpy " + copy_kind).to_numpy(),
            "bytes": m["bytes"].to_numpy(np.float64),
            "copy_kind": copy_kind.to_numpy(),
            "host_mem": host_mem.to_numpy(),
        },
    )


def _copy_kind(enum_name: str) -> str:
    """``CUDA_MEMCPY_KIND_HTOD`` → ``HtoD`` (Kineto's spelling), others title-cased."""
    kind = enum_name.rsplit("_", 1)[-1]
    if len(kind) == 4 and kind[1:3] == "TO":
        return kind[0] + "to" + kind[3]
    return kind.title()


def _memset(con: sqlite3.Connection, tables: set[str]) -> pd.DataFrame:
    if "CUPTI_ACTIVITY_KIND_MEMSET" not in tables:
        return frame(ACTIVITY_COLUMNS)
    m = pd.read_sql_query(
        "SELECT start, end, deviceId, streamId, correlationId, bytes, graphNodeId FROM CUPTI_ACTIVITY_KIND_MEMSET", con
    )
    return frame(
        ACTIVITY_COLUMNS,
        {
            **_activity_columns(m, "memset"),
            "name": np.full(len(m), "Memset", dtype=object),
            "bytes": m["bytes"].to_numpy(np.float64),
        },
    )


def _calls(con: sqlite3.Connection, tables: set[str], strings: pd.Series) -> pd.DataFrame:
    parts = [
        pd.read_sql_query(f"SELECT start, end, globalTid, correlationId, nameId FROM {t}", con)
        for t in ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER")
        if t in tables
    ]
    c = pd.concat(parts, ignore_index=True).sort_values("start", kind="stable", ignore_index=True)
    return frame(
        CALL_COLUMNS,
        {
            "name": c["nameId"].map(strings).fillna("").to_numpy(),
            "start_ns": c["start"].to_numpy(np.int64),
            "end_ns": c["end"].to_numpy(np.int64),
            "tid": c["globalTid"].to_numpy(np.int64),
            "correlation": c["correlationId"].fillna(-1).to_numpy(np.int64),
        },
    )


def _ranges(con: sqlite3.Connection, tables: set[str], strings: pd.Series) -> pd.DataFrame:
    if "NVTX_EVENTS" not in tables:
        return frame(RANGE_COLUMNS)
    types = {n: i for i, n in _enum(con, tables, "ENUM_NSYS_EVENT_TYPE").items()}
    wanted = [types[n] for n in NVTX_RANGE_TYPES if n in types]
    if not wanted:
        return frame(RANGE_COLUMNS)
    r = pd.read_sql_query(
        f"SELECT start, end, text, textId, globalTid FROM NVTX_EVENTS "
        f"WHERE eventType IN ({','.join(map(str, wanted))}) AND end IS NOT NULL",
        con,
    )
    text = r["text"].where(r["text"].notna(), r["textId"].map(strings)).fillna("")
    return frame(
        RANGE_COLUMNS,
        {
            "name": text.to_numpy(),
            "start_ns": r["start"].to_numpy(np.int64),
            "end_ns": r["end"].to_numpy(np.int64),
            "tid": r["globalTid"].fillna(-1).to_numpy(np.int64),
            "source": np.full(len(r), "nvtx", dtype=object),
        },
    )


def _gpu_metrics(con: sqlite3.Connection, tables: set[str]) -> pd.DataFrame:
    """DRAM read + write throughput % samples (``--gpu-metrics-devices``) as ``dram_bw_util``."""
    if "GPU_METRICS" not in tables or "TARGET_INFO_GPU_METRICS" not in tables:
        return frame(SAMPLE_COLUMNS)
    names = pd.read_sql_query("SELECT DISTINCT metricId, metricName FROM TARGET_INFO_GPU_METRICS", con)
    ids = names.loc[names["metricName"].str.startswith(DRAM_THROUGHPUT), "metricId"].tolist()
    if not ids:
        return frame(SAMPLE_COLUMNS)
    g = pd.read_sql_query(
        f"SELECT timestamp, SUM(value) AS value FROM GPU_METRICS WHERE metricId IN ({','.join(map(str, ids))}) "
        "GROUP BY timestamp ORDER BY timestamp",
        con,
    )
    return frame(
        SAMPLE_COLUMNS,
        {
            "time_ns": g["timestamp"].to_numpy(np.int64),
            "metric": np.full(len(g), "dram_bw_util", dtype=object),
            "value": g["value"].to_numpy(np.float64) / 100.0,
            "source": np.full(len(g), "nsys-gpu-metrics", dtype=object),
        },
    )


def _device(con: sqlite3.Connection, tables: set[str]) -> dict:
    if "TARGET_INFO_GPU" not in tables:
        return {}
    row = con.execute(
        "SELECT name, smCount, memoryBandwidth, l2CacheSize, totalMemory, computeMajor, computeMinor FROM TARGET_INFO_GPU LIMIT 1"
    ).fetchone()
    if row is None:
        return {}
    name, sms, bw, l2, mem, major, minor = row
    dev = {"name": name, "sm_count": sms, "l2_bytes": l2, "total_memory_bytes": mem, "compute_capability": f"{major}.{minor}"}
    if bw:
        dev["peak_dram_bw_gbps"] = bw / 1e9
        dev["peak_source"] = "nsys"
    return dev
