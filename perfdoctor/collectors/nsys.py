"""Nsight Systems: read its SQLite export into a Profile.

``nsys export --type sqlite`` writes one table per activity kind. Strings (kernel names,
API names, NVTX text) are ids into ``StringIds``, and enumerations (copy kinds, memory
kinds, NVTX event types) are decoded through the export's own ``ENUM_*`` tables, so the
loader follows whatever numbering the nsys version wrote. A ``.nsys-rep`` is exported
first with the ``nsys`` binary when one is found.

An export of several processes (``nsys profile torchrun ...``: one process per GPU) holds
several timelines whose correlation ids overlap: :func:`load` keys the ids by process in one
Profile, :func:`load_processes` gives one Profile per process (``perfdoctor analyze`` shows
them as ranks).
"""

from __future__ import annotations

import sqlite3
import subprocess
import tempfile
from contextlib import closing
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from perfdoctor.collectors.checks import finish
from perfdoctor.collectors.tools import find_tool
from perfdoctor.errors import UsageError
from perfdoctor.io import gunzip_to, regular_file
from perfdoctor.schema import repeated
from perfdoctor.profile import (
    ACTIVITY_COLUMNS,
    CALL_COLUMNS,
    RANGE_COLUMNS,
    SAMPLE_COLUMNS,
    Origin,
    Profile,
    frame,
    parse_declarations,
)

NVTX_RANGE_TYPES = ("NvtxPushPopRange", "NvtxStartEndRange")
# The numbers nsys writes for the enumerations it also names in its ENUM_* tables (its
# SQLite export schema): used when an export lacks the table, so a pageable copy does not
# silently become an unknown one, nor the NVTX ranges (and with them the steps) vanish.
KNOWN_ENUMS = {
    "ENUM_CUDA_MEMCPY_OPER": dict(enumerate((
        "CUDA_MEMCPY_KIND_UNKNOWN", "CUDA_MEMCPY_KIND_HTOD", "CUDA_MEMCPY_KIND_DTOH", "CUDA_MEMCPY_KIND_HTOA",
        "CUDA_MEMCPY_KIND_ATOH", "CUDA_MEMCPY_KIND_ATOA", "CUDA_MEMCPY_KIND_ATOD", "CUDA_MEMCPY_KIND_DTOA",
        "CUDA_MEMCPY_KIND_DTOD", "CUDA_MEMCPY_KIND_HTOH", "CUDA_MEMCPY_KIND_PTOP", "CUDA_MEMCPY_KIND_UVM_HTOD",
        "CUDA_MEMCPY_KIND_UVM_DTOH", "CUDA_MEMCPY_KIND_UVM_DTOD",
    ))),
    "ENUM_CUDA_MEM_KIND": dict(enumerate((
        "CUDA_MEMOPR_MEMORY_KIND_PAGEABLE", "CUDA_MEMOPR_MEMORY_KIND_PINNED", "CUDA_MEMOPR_MEMORY_KIND_DEVICE",
        "CUDA_MEMOPR_MEMORY_KIND_ARRAY", "CUDA_MEMOPR_MEMORY_KIND_MANAGED", "CUDA_MEMOPR_MEMORY_KIND_DEVICE_STATIC",
        "CUDA_MEMOPR_MEMORY_KIND_MANAGED_STATIC", "CUDA_MEMOPR_MEMORY_KIND_UNKNOWN",
    ))),
    "ENUM_NSYS_EVENT_TYPE": {59: "NvtxPushPopRange", 60: "NvtxStartEndRange"},
}
# Columns some nsys versions do not write (older exports, other activity kinds): read as
# missing, never a reason to refuse the export.
OPTIONAL_COLUMNS = frozenset({
    "graphNodeId", "textId", "text", "dynamicSharedMemory", "staticSharedMemory", "registersPerThread",
    "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ", "srcKind", "dstKind", "bytes", "globalPid",
})
DRAM_THROUGHPUT = ("DRAM Read Bandwidth", "DRAM Write Bandwidth")
NSYS_ACTIVITIES = {**ACTIVITY_COLUMNS, "process": "int64"}  # the Profile's columns + the process, dropped once split
PID_SHIFT = 24  # globalTid = (hardware, VM, pid) << 24 | tid; globalPid = the same with tid 0


def export_sqlite(rep: Path, out: Path) -> Path:
    """Run ``nsys export --type sqlite`` on a ``.nsys-rep``."""
    nsys = find_tool("nsys")
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
    """Read an Nsight Systems export (``.sqlite``, ``.sqlite.gz`` or ``.nsys-rep``): every
    process in one Profile, correlation ids keyed by process (:func:`_key_by_process`)."""
    return _open(path, lambda con, p: _merged(_read(con, p)))


def load_processes(path: str | Path) -> dict[int, Profile]:
    """One Profile per process with GPU work, by OS process id. A job of several processes
    (one per GPU, ``torchrun`` under ``nsys profile``) is several timelines: each idles,
    steps and launches on its own, like the ranks of :mod:`perfdoctor.analysis.ranks`."""
    return _open(path, lambda con, p: _split(_read(con, p)))


def load_views(path: str | Path) -> tuple[Profile, dict[int, Profile]]:
    """:func:`load` and :func:`load_processes` from one read of the export (``perfdoctor
    analyze`` needs the per-process view to decide, and the merged one when there is one
    process: reading twice would export a .nsys-rep twice)."""
    def both(con, p):
        parts = _read(con, p)
        return _merged(parts), _split(parts)

    return _open(path, both)


def _open(path: str | Path, read):
    path = Path(path)
    regular_file(path)
    with tempfile.TemporaryDirectory(prefix="perfdoctor-nsys-") as tmp:
        db = _materialize(path, Path(tmp))
        try:
            # Read-only and immutable: no lock is taken (a database another process holds
            # locked still reads) and no -wal/-shm file is ever created beside the user's file.
            with closing(sqlite3.connect(Path(db).resolve().as_uri() + "?mode=ro&immutable=1", uri=True)) as con:
                try:
                    con.execute("SELECT count(*) FROM sqlite_master").fetchone()
                except sqlite3.DatabaseError as exc:
                    raise UsageError(f"{path}: not an SQLite database ({exc})") from None
                try:
                    return read(con, path)
                # The export is untrusted input: a missing or renamed column, a damaged page or a
                # cell of the wrong type in it is the file's problem, said in one line.
                except (sqlite3.Error, pd.errors.DatabaseError, KeyError, ValueError, TypeError, OverflowError) as exc:
                    raise UsageError(f"{path}: unexpected content in the Nsight Systems export ({_why(exc)})") from None
        except sqlite3.Error as exc:
            raise UsageError(f"{path}: cannot read the SQLite database ({exc})") from None


def _why(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}"


def _materialize(path: Path, tmp: Path) -> Path:
    name = path.name.lower()
    if name.endswith(".nsys-rep"):
        return export_sqlite(path, tmp / "export.sqlite")
    if name.endswith(".gz"):
        out = tmp / "export.sqlite"
        gunzip_to(path, out)  # streamed and capped (PERFDOCTOR_MAX_TRACE_BYTES)
        return out
    return path


def _tables(con: sqlite3.Connection) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}


def _enum(con: sqlite3.Connection, tables: set[str], table: str) -> dict[int, str]:
    """The export's own ``ENUM_*`` table, or nsys's known numbering where it has none."""
    if table not in tables:
        return dict(KNOWN_ENUMS.get(table, {}))
    return {i: str(n) for i, n in con.execute(f"SELECT id, name FROM {table}") if isinstance(i, int)}


def _picked(con: sqlite3.Connection, table: str, columns: str, optional: frozenset[str] = OPTIONAL_COLUMNS) -> str:
    """``columns`` as a SELECT list on ``table``, an ``optional`` one the table lacks read
    as NULL (a required one missing still fails, as the export's problem)."""
    have = {r[1] for r in con.execute(f"PRAGMA table_info({table})")}
    return ", ".join(c if c in have or c not in optional else f"NULL AS {c}" for c in (c.strip() for c in columns.split(",")))


def _select(con: sqlite3.Connection, table: str, columns: str, where: str = "") -> pd.DataFrame:
    return pd.read_sql_query(f"SELECT {_picked(con, table, columns)} FROM {table} {where}", con)


def _numeric(t: pd.DataFrame, table: str, warnings: list[str], required: tuple[str, ...] = ("start", "end")) -> pd.DataFrame:
    """Numeric columns as numbers (a text or blob cell becomes missing); rows missing a
    required time are dropped and counted; other missing ids become -1 later."""
    t = t.copy()
    for col in t.columns:
        if col == "text":
            continue  # NVTX text is text
        if pd.api.types.is_integer_dtype(t[col]):
            if col in required:  # an unfinished record's end: INT64_MAX (it would cover the whole timeline)
                t[col] = t[col].where(t[col].abs() < 2**62)
            continue  # an all-integer column is otherwise what we need
        v = pd.to_numeric(t[col], errors="coerce").astype(np.float64)
        t[col] = v.where(np.isfinite(v) & (v.abs() < 2.0**62))
    bad = t[list(required)].isna().any(axis=1)
    if bad.any():
        warnings.append(f"skipped {int(bad.sum())} rows of {table}: no valid {' / '.join(required)}")
        t = t[~bad].reset_index(drop=True)
    return t


def _i64(col: pd.Series) -> np.ndarray:
    return col.fillna(-1).to_numpy(np.int64)


def _read(con: sqlite3.Connection, path: Path) -> Profile:
    tables = _tables(con)
    if "StringIds" not in tables:
        raise UsageError(f"{path}: not an Nsight Systems export (no StringIds table)")
    if "CUPTI_ACTIVITY_KIND_RUNTIME" not in tables:
        raise UsageError(
            f"{path}: Nsight Systems export without the CUPTI_ACTIVITY_KIND_RUNTIME table (record with `nsys profile -t cuda`)"
        )
    strings = pd.read_sql_query("SELECT id, value FROM StringIds", con).set_index("id")["value"]
    strings = strings[~strings.index.duplicated()].map(lambda v: v if isinstance(v, str) else "" if v is None else str(v))
    warnings: list[str] = []
    activities = pd.concat(
        [_kernels(con, tables, strings, warnings), _memcpy(con, tables, warnings), _memset(con, tables, warnings)],
        ignore_index=True,
    ).sort_values("start_ns", kind="stable", ignore_index=True)
    calls = _calls(con, tables, strings, warnings)
    ranges = _ranges(con, tables, strings, warnings)
    origin = Origin(source="nsys", path=str(path), thread_names=tuple(_thread_names(con, tables, strings)), warnings=tuple(warnings))
    return _Parts(activities, calls, ranges, _gpu_metrics(con, tables), _device(con, tables), origin)


@dataclass
class _Parts:
    """The tables of one export; activities carry ``process`` (globalPid >> 24); calls and
    ranges carry it in their globalTid (``tid >> 24``: nsys packs the pid above the tid)."""

    activities: pd.DataFrame
    calls: pd.DataFrame
    ranges: pd.DataFrame
    samples: pd.DataFrame
    device: dict
    origin: Origin  # the export's: each timeline adds the declarations of its own ranges

    def profile(self, activities: pd.DataFrame, calls: pd.DataFrame, ranges: pd.DataFrame, process: int | None = None) -> Profile:
        ranges = ranges.reset_index(drop=True)
        return finish(Profile(
            activities=activities.drop(columns="process").reset_index(drop=True), calls=calls.reset_index(drop=True),
            ranges=ranges, samples=self.samples, device=self.device,
            origin=replace(self.origin, declared=parse_declarations(ranges), process=process),
        ))


def _key_by_process(parts: _Parts) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Activities and calls with correlation ids unique across processes. CUPTI numbers
    correlations per process, so in a two-process export the same id names two launches
    (nsysai__mfu_2gpu_before: 264 ids collide); the process's index goes above bit 40."""
    a, c = parts.activities, parts.calls
    procs = np.unique(np.r_[a["process"].to_numpy(np.int64), c["tid"].to_numpy(np.int64) >> PID_SHIFT])
    if len(procs) < 2:
        return a, c
    def keyed(corr: pd.Series, proc: np.ndarray) -> np.ndarray:
        v = corr.to_numpy(np.int64)
        return np.where(v >= 0, (np.searchsorted(procs, proc).astype(np.int64) << 40) | v, v)
    return (a.assign(correlation=keyed(a["correlation"], a["process"].to_numpy(np.int64))),
            c.assign(correlation=keyed(c["correlation"], c["tid"].to_numpy(np.int64) >> PID_SHIFT)))


def _merged(parts: _Parts) -> Profile:
    acts, calls = _key_by_process(parts)
    return parts.profile(acts, calls, parts.ranges)


def _split(parts: _Parts) -> dict[int, Profile]:
    a = parts.activities
    out = {}
    for proc in np.unique(a["process"].to_numpy(np.int64)):
        mine = lambda t: t[(t["tid"].to_numpy(np.int64) >> PID_SHIFT) == proc]  # noqa: E731
        pid = int(proc) & 0xFFFFFF
        out[pid] = parts.profile(a[a["process"].to_numpy(np.int64) == proc], mine(parts.calls), mine(parts.ranges), process=pid)
    return out


def _thread_names(con: sqlite3.Connection, tables: set[str], strings: pd.Series) -> list[str]:
    """Host thread names (``ThreadNames.nameId`` → ``StringIds``); empty when the export has none."""
    if "ThreadNames" not in tables:
        return []
    try:
        ids = pd.read_sql_query("SELECT nameId FROM ThreadNames", con)["nameId"]
    except (sqlite3.Error, pd.errors.DatabaseError, KeyError):
        return []
    return sorted({str(v) for v in ids.map(strings).dropna()})


def _activity_columns(t: pd.DataFrame, kind: str) -> dict[str, np.ndarray]:
    """The columns every CUPTI activity table shares, in Profile terms."""
    return {
        "kind": repeated(kind, len(t)),
        "start_ns": t["start"].to_numpy(np.int64),
        "end_ns": t["end"].to_numpy(np.int64),
        "device": _i64(t["deviceId"]),
        "stream": _i64(t["streamId"]),
        "correlation": _i64(t["correlationId"]),
        "graph_id": _i64(t["graphNodeId"]),
        "process": _i64(t["globalPid"]) >> PID_SHIFT,
    }


def _kernels(con: sqlite3.Connection, tables: set[str], strings: pd.Series, warnings: list[str]) -> pd.DataFrame:
    if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables:
        return frame(NSYS_ACTIVITIES)
    k = _select(
        con,
        "CUPTI_ACTIVITY_KIND_KERNEL",
        "start, end, deviceId, streamId, correlationId, demangledName, registersPerThread, "
        "gridX, gridY, gridZ, blockX, blockY, blockZ, staticSharedMemory, dynamicSharedMemory, graphNodeId, globalPid",
    )
    k = _numeric(k, "CUPTI_ACTIVITY_KIND_KERNEL", warnings)
    dims = lambda x, y, z: (k[x].astype(str) + "," + k[y].astype(str) + "," + k[z].astype(str)).to_numpy()  # noqa: E731
    return frame(
        NSYS_ACTIVITIES,
        {
            **_activity_columns(k, "kernel"),
            "name": k["demangledName"].map(strings).fillna("").to_numpy(),
            "grid": dims("gridX", "gridY", "gridZ"),
            "block": dims("blockX", "blockY", "blockZ"),
            "registers": k["registersPerThread"].to_numpy(np.float64),
            "shared_mem": k["staticSharedMemory"].add(k["dynamicSharedMemory"], fill_value=0).to_numpy(np.float64),
        },
    )


def _memcpy(con: sqlite3.Connection, tables: set[str], warnings: list[str]) -> pd.DataFrame:
    if "CUPTI_ACTIVITY_KIND_MEMCPY" not in tables:
        return frame(NSYS_ACTIVITIES)
    m = _select(
        con, "CUPTI_ACTIVITY_KIND_MEMCPY", "start, end, deviceId, streamId, correlationId, bytes, copyKind, srcKind, dstKind, graphNodeId, globalPid"
    )
    m = _numeric(m, "CUPTI_ACTIVITY_KIND_MEMCPY", warnings)
    # CUDA_MEMCPY_KIND_HTOD -> HtoD; CUDA_MEMOPR_MEMORY_KIND_PAGEABLE -> pageable
    oper = {i: _copy_kind(n) for i, n in _enum(con, tables, "ENUM_CUDA_MEMCPY_OPER").items()}
    mem = {i: n.rsplit("_", 1)[-1].lower() for i, n in _enum(con, tables, "ENUM_CUDA_MEM_KIND").items()}
    if m.empty:
        return frame(NSYS_ACTIVITIES)
    copy_kind = pd.Series([oper.get(v, "") for v in m["copyKind"]], dtype=object)
    host_side = np.where(copy_kind.str.startswith("H").to_numpy(bool), m["srcKind"], m["dstKind"])
    host_mem = pd.Series([mem.get(v, "") for v in host_side], dtype=object).replace({"device": ""})
    unknown = int((copy_kind.isin(("", "Unknown")) | (copy_kind.str.contains("H") & (host_mem == ""))).sum())
    if unknown:  # said, not silently counted as neither pageable nor pinned
        warnings.append(f"{unknown} memcpys whose direction or host memory kind the export does not say: not counted as pageable")
    return frame(
        NSYS_ACTIVITIES,
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


def _memset(con: sqlite3.Connection, tables: set[str], warnings: list[str]) -> pd.DataFrame:
    if "CUPTI_ACTIVITY_KIND_MEMSET" not in tables:
        return frame(NSYS_ACTIVITIES)
    m = _select(con, "CUPTI_ACTIVITY_KIND_MEMSET", "start, end, deviceId, streamId, correlationId, bytes, graphNodeId, globalPid")
    m = _numeric(m, "CUPTI_ACTIVITY_KIND_MEMSET", warnings)
    return frame(
        NSYS_ACTIVITIES,
        {
            **_activity_columns(m, "memset"),
            "name": repeated("Memset", len(m)),
            "bytes": m["bytes"].to_numpy(np.float64),
        },
    )


def _calls(con: sqlite3.Connection, tables: set[str], strings: pd.Series, warnings: list[str]) -> pd.DataFrame:
    parts = [
        _numeric(pd.read_sql_query(f"SELECT start, end, globalTid, correlationId, nameId FROM {t}", con), t, warnings)
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
            "tid": _i64(c["globalTid"]),
            "correlation": _i64(c["correlationId"]),
        },
    )


def _ranges(con: sqlite3.Connection, tables: set[str], strings: pd.Series, warnings: list[str]) -> pd.DataFrame:
    if "NVTX_EVENTS" not in tables:
        return frame(RANGE_COLUMNS)
    types = {n: i for i, n in _enum(con, tables, "ENUM_NSYS_EVENT_TYPE").items()}
    wanted = [types[n] for n in NVTX_RANGE_TYPES if n in types]
    if not wanted:
        return frame(RANGE_COLUMNS)
    r = _select(
        con, "NVTX_EVENTS", "start, end, text, textId, globalTid", f"WHERE eventType IN ({','.join(map(str, wanted))}) AND end IS NOT NULL"
    )
    r = _numeric(r, "NVTX_EVENTS", warnings)
    text = r["text"].where(r["text"].notna(), r["textId"].map(strings)).fillna("")
    return frame(
        RANGE_COLUMNS,
        {
            "name": text.to_numpy(),
            "start_ns": r["start"].to_numpy(np.int64),
            "end_ns": r["end"].to_numpy(np.int64),
            "tid": _i64(r["globalTid"]),
            "source": repeated("nvtx", len(r)),
        },
    )


def _gpu_metrics(con: sqlite3.Connection, tables: set[str]) -> pd.DataFrame:
    """DRAM read + write throughput % samples (``--gpu-metrics-devices``) as ``dram_bw_util``."""
    if "GPU_METRICS" not in tables or "TARGET_INFO_GPU_METRICS" not in tables:
        return frame(SAMPLE_COLUMNS)
    names = pd.read_sql_query("SELECT DISTINCT metricId, metricName FROM TARGET_INFO_GPU_METRICS", con)
    ids = [i for i in names.loc[names["metricName"].astype(str).str.startswith(DRAM_THROUGHPUT), "metricId"] if isinstance(i, int)]
    if not ids:
        return frame(SAMPLE_COLUMNS)
    g = pd.read_sql_query(
        f"SELECT timestamp, SUM(value) AS value FROM GPU_METRICS WHERE metricId IN ({','.join(map(str, ids))}) "
        "GROUP BY timestamp ORDER BY timestamp",
        con,
    )
    g = _numeric(g, "GPU_METRICS", warnings=[], required=("timestamp", "value"))
    return frame(
        SAMPLE_COLUMNS,
        {
            "time_ns": g["timestamp"].to_numpy(np.int64),
            "metric": repeated("dram_bw_util", len(g)),
            "value": g["value"].to_numpy(np.float64) / 100.0,
            "source": repeated("nsys-gpu-metrics", len(g)),
        },
    )


def _device(con: sqlite3.Connection, tables: set[str]) -> dict:
    if "TARGET_INFO_GPU" not in tables:
        return {}
    columns = "name, smCount, memoryBandwidth, l2CacheSize, totalMemory, computeMajor, computeMinor"
    every = frozenset(c.strip() for c in columns.split(","))  # each one optional: the device is described as far as it is
    row = con.execute(f"SELECT {_picked(con, 'TARGET_INFO_GPU', columns, every)} FROM TARGET_INFO_GPU LIMIT 1").fetchone()
    if row is None:
        return {}
    row = [v if isinstance(v, (str, int, float)) and not (isinstance(v, float) and not np.isfinite(v)) else None for v in row]
    name, sms, bw, l2, mem, major, minor = row
    if not isinstance(bw, (int, float)) or bw <= 0:
        bw = None
    dev = {"name": name if name is None else str(name), "sm_count": sms, "l2_bytes": l2, "total_memory_bytes": mem, "compute_capability": f"{major}.{minor}"}
    if bw:
        dev["peak_dram_bw_gbps"] = bw / 1e9
        dev["peak_source"] = "nsys"
    return dev
