"""Host API names across vendors and tracers: which calls launch, block, copy or capture.

Tracers spell one API several ways. nsys appends the API version (``cudaMemcpy_v3020``),
per-thread-default-stream builds add ``_ptsz`` / ``_ptds`` (CUDA) or ``_spt`` (HIP), and
ROCm names every runtime call ``hip*`` where CUDA says ``cuda*``. This module maps each
spelling to one set of roles:

``launch``        enqueues a kernel or a whole graph (a graph launch is ONE launch)
``graph_launch``  replays a CUDA/HIP graph (``cudaGraphLaunch``, ``cuGraphLaunch``, ``hipGraphLaunch``)
``sync``          blocks the host until the device catches up (device/stream/event
                  synchronize, the synchronous ``cudaMemcpy`` / ``hipMemcpy`` family)
``copy``          any memcpy API call (sync or async)
``memset``        any memset API call
``capture``       records a graph instead of running it: begin/end capture, instantiate
``capture_begin`` / ``capture_end``  the two ends of a stream capture

Everything is vectorised over the UNIQUE names of a column: the column is factorized once,
each distinct name is classified once (a trace has a few dozen distinct API names and
millions of calls), and the roles are mapped back by code. No per-event regex.
"""

from __future__ import annotations

import re
from functools import lru_cache

import numpy as np
import pandas as pd

from perfdoctor.names.codes import factorize

ROLES = ("launch", "graph_launch", "sync", "copy", "memset", "capture", "capture_begin", "capture_end")

# nsys version suffix (_v3020, _v7000, _v12000), per-thread default stream variants.
_SUFFIX = re.compile(r"(?:_v\d+|_ptsz|_ptds|_spt)+$")

# Kernel launches: prefixes (cudaLaunchKernelExC, cuLaunchKernelEx, ... are launches too).
LAUNCH_PREFIXES = (
    # CUDA runtime / driver
    "cudaLaunchKernel",
    "cudaLaunchCooperativeKernel",
    "cuLaunchKernel",
    "cuLaunchCooperativeKernel",
    # HIP / ROCm
    "hipLaunchKernel",
    "hipExtLaunchKernel",
    "hipExtModuleLaunchKernel",
    "hipModuleLaunchKernel",
    "hipHccModuleLaunchKernel",
    "hipLaunchCooperativeKernel",
    "hipModuleLaunchCooperativeKernel",
    "hipExtLaunchMultiKernelMultiDevice",
)
GRAPH_LAUNCH_NAMES = frozenset({"cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch"})

# Calls that block the host until the device has finished (part of) its work. The plain
# memcpy calls are synchronous; their *Async variants are not. hipMemcpyWithStream is
# synchronous despite taking a stream (HIP docs).
SYNC_NAMES = frozenset(
    {
        "cudaDeviceSynchronize",
        "cudaStreamSynchronize",
        "cudaEventSynchronize",
        "cudaThreadSynchronize",
        "cudaMemcpy",
        "cudaMemcpy2D",
        "cudaMemcpy3D",
        "cudaMemcpyToSymbol",
        "cudaMemcpyFromSymbol",
        "cuCtxSynchronize",
        "cuStreamSynchronize",
        "cuEventSynchronize",
        "cuMemcpy",
        "cuMemcpyHtoD",
        "cuMemcpyDtoH",
        "cuMemcpyDtoD",
        "hipDeviceSynchronize",
        "hipStreamSynchronize",
        "hipEventSynchronize",
        "hipCtxSynchronize",
        "hipMemcpy",
        "hipMemcpyWithStream",
        "hipMemcpy2D",
        "hipMemcpy3D",
        "hipMemcpyToSymbol",
        "hipMemcpyFromSymbol",
        "hipMemcpyHtoD",
        "hipMemcpyDtoH",
        "hipMemcpyDtoD",
    }
)
CAPTURE_BEGIN_NAMES = frozenset(
    {
        "cudaStreamBeginCapture",
        "cudaStreamBeginCaptureToGraph",
        "cuStreamBeginCapture",
        "cuStreamBeginCaptureToGraph",
        "hipStreamBeginCapture",
        "hipStreamBeginCaptureToGraph",
    }
)
CAPTURE_END_NAMES = frozenset({"cudaStreamEndCapture", "cuStreamEndCapture", "hipStreamEndCapture"})
INSTANTIATE_PREFIXES = ("cudaGraphInstantiate", "cuGraphInstantiate", "hipGraphInstantiate")


def base_name(name: str) -> str:
    """The API name without tracer suffixes: ``cudaMemcpy_v3020`` → ``cudaMemcpy``,
    ``cudaLaunchKernel_ptsz`` → ``cudaLaunchKernel``, ``hipMemcpy_spt`` → ``hipMemcpy``."""
    return _SUFFIX.sub("", name.strip()) if isinstance(name, str) else ""


def vendor(name: str) -> str:
    """``"cuda"`` (runtime ``cuda*`` or driver ``cu*``), ``"hip"`` or ``""``."""
    b = base_name(name)
    if b.startswith("hip"):
        return "hip"
    if b.startswith("cu"):
        return "cuda"
    return ""


@lru_cache(maxsize=8192)
def roles(name: str) -> tuple[bool, ...]:
    """The roles of one API name, in the order of :data:`ROLES`."""
    b = base_name(name)
    graph = b in GRAPH_LAUNCH_NAMES
    launch = graph or b.startswith(LAUNCH_PREFIXES)
    sync = b in SYNC_NAMES
    copy = "Memcpy" in b  # cudaMemcpy*, cuMemcpy*, hipMemcpy* (sync and async, peer included)
    memset = "Memset" in b
    begin = b in CAPTURE_BEGIN_NAMES
    end = b in CAPTURE_END_NAMES
    capture = begin or end or b.startswith(INSTANTIATE_PREFIXES)
    return (launch, graph, sync, copy, memset, capture, begin, end)


def classify(names: pd.Series | np.ndarray | list[str]) -> pd.DataFrame:
    """Roles of every name: a DataFrame of booleans (columns :data:`ROLES`) plus ``base``
    and ``vendor``, aligned with ``names`` (same index when ``names`` is a Series).

    Vectorised over unique names: one factorize, one classification per distinct name.
    """
    series = names if isinstance(names, pd.Series) else pd.Series(list(names), dtype=object)
    codes, uniques = factorize(series)  # a missing name is a unique of its own: the neutral row
    table = pd.DataFrame(
        [roles(u) if isinstance(u, str) else (False,) * len(ROLES) for u in uniques] or np.zeros((0, len(ROLES)), bool),
        columns=list(ROLES),
        dtype=bool,
    )
    table["base"] = [base_name(u) for u in uniques]
    table["vendor"] = [vendor(u) for u in uniques]
    out = table.iloc[codes].reset_index(drop=True)
    out.index = series.index
    return out


def _role(names: pd.Series | np.ndarray | list[str], role: str) -> np.ndarray:
    codes, uniques = factorize(names, copy=False)  # only read
    i = ROLES.index(role)
    per_unique = np.fromiter((isinstance(u, str) and roles(u)[i] for u in uniques), dtype=bool, count=len(uniques))
    return per_unique[codes]


def has_role(names: pd.Series | np.ndarray | list[str], role: str) -> np.ndarray:
    """Which names have ``role`` (one of :data:`ROLES`): :func:`classify`'s column of it as a
    boolean array, without building the whole table (a row per name, ten columns)."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}: one of {', '.join(ROLES)}")
    return _role(names, role)


def is_launch(names: pd.Series | np.ndarray | list[str]) -> np.ndarray:
    """Calls that enqueue a kernel or replay a graph (boolean array aligned with ``names``)."""
    return _role(names, "launch")


def is_graph_launch(names: pd.Series | np.ndarray | list[str]) -> np.ndarray:
    return _role(names, "graph_launch")


def is_sync(names: pd.Series | np.ndarray | list[str]) -> np.ndarray:
    """Calls that block the host until the device catches up."""
    return _role(names, "sync")


def is_copy(names: pd.Series | np.ndarray | list[str]) -> np.ndarray:
    return _role(names, "copy")


def is_capture(names: pd.Series | np.ndarray | list[str]) -> np.ndarray:
    """Begin/end capture and graph instantiation calls."""
    return _role(names, "capture")


def counts(names: pd.Series | np.ndarray | list[str]) -> dict[str, int]:
    """How many calls have each role: ``{"launch": 3318, "sync": 14, ...}``."""
    series = names if isinstance(names, pd.Series) else pd.Series(list(names), dtype=object)
    vc = series.value_counts(dropna=True)
    out = dict.fromkeys(ROLES, 0)
    for name, n in vc.items():
        for role, flag in zip(ROLES, roles(name) if isinstance(name, str) else ()):
            if flag:
                out[role] += int(n)
    return out
