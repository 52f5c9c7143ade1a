"""Serving-engine steps: recognise the step ranges vLLM and SGLang emit, and what they say.

Serving engines name each scheduler iteration after the batch it runs, so one trace holds
many different range names for one kind of step:

vLLM (``gpu_model_runner``, torch profiler): ``execute_context_<c>(<ct>)_generation_<g>(<gt>)``
    c requests in prefill (context) phase with ct tokens in total, g requests in decode
    (generation) phase with gt tokens. ``execute_context_0(0)_generation_32(32)`` is a
    decode step of 32 requests; ``execute_context_4(512)_generation_0(0)`` a prefill; a
    token field may carry more after the count (``execute_context_1(888_788544)...``).
    vLLM v1 writes ``execute_<n>_context_<c>(sq<q>sk<k>...)_generation_<g>(sq<q>sk<k>...)``:
    sq is the query tokens of those requests (``execute_32_context_0(sq0sk0sqsq0sqsk0)_
    generation_32(sq32sk55086sqsq32sqsk55086)``: a decode step of 32 requests, 32 tokens).
SGLang (scheduler, torch profiler): ``step[<MODE> bs=<n>]`` with an optional token count
    ``toks=<m>`` (also spelled ``tokens=<m>``): ``step[DECODE bs=32]``,
    ``step[EXTEND bs=17 toks=8192]``, ``step[PREFILL bs=4 tokens=512]``,
    ``step[MIXED bs=8 toks=100]``, ``step[IDLE bs=0]``, ``step[TARGET_VERIFY bs=4]``.

For each name: ``engine`` (vllm / sglang), ``kind`` (prefill / decode / mixed / idle),
``batch`` (requests in the step), ``tokens`` (tokens the step processes), and
``prefill_tokens`` / ``decode_tokens``. A decode step processes one token per request unless
the name says otherwise; an SGLang EXTEND without a token count is counted as ``bs``
tokens (a lower bound). All names parse once per distinct name.

:func:`step_ranges` picks every serving range of a trace as ONE step family (the names
differ, the steps are one loop); :func:`throughput` gives ms per token and tokens/s from
step times; :func:`queue_delay` gives, per step, how long its first GPU work waited after
the host launched it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from perfdoctor.declare import DECLARE_PREFIX
from perfdoctor.names import ranges
from perfdoctor.names.codes import equals, starts_with
from perfdoctor.profile import Profile

STEP_NAME = ranges.SERVING_STEP  # the step family's name in reports (Steps.name)
COLUMNS = ("engine", "kind", "batch", "tokens", "prefill_tokens", "decode_tokens")

# The names are read in one place, pandas-free, so the bootstrap can read them too.
parse_name = ranges.parse_serving


def parse(names: pd.Series) -> pd.DataFrame:
    """:data:`COLUMNS` for every name (engine "" and NaN numbers where it is not a serving
    step), aligned with ``names``; one parse per distinct name."""
    codes, uniques = pd.factorize(names, use_na_sentinel=True)
    rows = [parse_name(u) or ("", "", np.nan, np.nan, np.nan, np.nan) for u in uniques]
    rows.append(("", "", np.nan, np.nan, np.nan, np.nan))  # code -1
    table = pd.DataFrame(rows, columns=list(COLUMNS))
    out = table.iloc[np.where(codes < 0, len(table) - 1, codes)].reset_index(drop=True)
    out.index = names.index
    return out


def is_serving(names: pd.Series) -> np.ndarray:
    return (parse(names)["engine"] != "").to_numpy()


def step_ranges(profile: Profile, min_count: int = 1) -> pd.DataFrame:
    """Every serving step range of the trace, as one step family, in time order.

    Ranges nested inside another serving range on the same thread are dropped (the outer
    one is the step: SGLang's ``step[DECODE bs=32]`` sits inside a vLLM-style
    ``execute_32_context_0(...)_generation_32(...)`` of the same iteration). One range is
    enough: a serving trace often holds a single scheduler iteration. Returns an empty
    frame when fewer than ``min_count`` remain.
    """
    r = profile.ranges
    r = r[~equals(r["source"], "python") & ~starts_with(r["name"], DECLARE_PREFIX)]
    r = r[is_serving(r["name"])].sort_values(["tid", "start_ns"], kind="stable")
    if r.empty:
        return r
    keep = np.ones(len(r), dtype=bool)
    tid, start, end = r["tid"].to_numpy(), r["start_ns"].to_numpy(), r["end_ns"].to_numpy()
    reach, reach_tid = -1, None
    for i in range(len(r)):
        if tid[i] == reach_tid and end[i] <= reach:
            keep[i] = False  # inside the previous outer range
        elif tid[i] != reach_tid or end[i] > reach:
            reach, reach_tid = end[i], tid[i]
    r = r[keep].sort_values("start_ns", kind="stable")
    return r if len(r) >= min_count else r.iloc[0:0]


def describe(table: pd.DataFrame) -> pd.DataFrame:
    """The step table (``Steps.table`` or ranges: a ``name`` column) with :data:`COLUMNS` added."""
    return pd.concat([table, parse(table["name"]).set_axis(table.index)], axis=1)


def throughput(table: pd.DataFrame, step_ns: np.ndarray | pd.Series | None = None) -> pd.DataFrame:
    """Per step: tokens, step_ms, ms_per_token, tokens_per_s.

    ``step_ns``: each step's time (the caller's definition — the light pass's step time, the
    GPU span); default host_end_ns − host_start_ns. Steps without tokens get NaN.
    """
    info = parse(table["name"]).set_axis(table.index)
    if step_ns is None:
        step_ns = (table["host_end_ns"] if "host_end_ns" in table else table["end_ns"]) - (
            table["host_start_ns"] if "host_start_ns" in table else table["start_ns"]
        )
    ns = pd.Series(np.asarray(step_ns, dtype=np.float64), index=table.index)
    tokens = info["tokens"].astype("float64")
    ok = tokens > 0
    out = pd.DataFrame({"kind": info["kind"], "batch": info["batch"], "tokens": tokens, "step_ms": ns / 1e6}, index=table.index)
    out["ms_per_token"] = np.where(ok, ns / 1e6 / tokens.where(ok), np.nan)
    out["tokens_per_s"] = np.where(ok & (ns > 0), tokens / (ns / 1e9), np.nan)
    return out


def totals(per_step: pd.DataFrame) -> dict:
    """Totals per kind and overall: tokens, time, tokens/s, ms/token (sum of tokens over sum
    of time, so long steps weigh by their time)."""
    out: dict = {}
    for kind, g in [("all", per_step), *per_step.groupby("kind")]:
        g = g[g["tokens"] > 0]
        ms = float(g["step_ms"].sum())
        tok = float(g["tokens"].sum())
        out[kind] = {
            "steps": int(len(g)),
            "tokens": tok,
            "ms": ms,
            "tokens_per_s": tok / (ms / 1e3) if ms > 0 else float("nan"),
            "ms_per_token": ms / tok if tok > 0 else float("nan"),
        }
    return out


def _first_calls(calls: pd.DataFrame, wanted: np.ndarray) -> pd.Series:
    """The start of the first call (in the table's order) of each correlation id in ``wanted``
    that is ≥ 0 and has one, as an Int64 Series indexed by id: what the whole table's
    first-call-per-id Series gives for those ids (its ``reindex`` the same), found by a sorted
    search over the few ids wanted instead of hashing every call's id (~4 ms on HF 80 MB)."""
    ids = np.unique(wanted[wanted >= 0])
    corr = calls["correlation"].to_numpy(np.int64)
    if ids.size == 0 or corr.size == 0:
        return pd.Series(pd.array([], dtype="Int64"), index=np.zeros(0, dtype=np.int64))
    at = np.minimum(np.searchsorted(ids, corr), ids.size - 1)
    rows = np.flatnonzero(ids[at] == corr)  # the calls of a wanted id, in table order
    found, first = np.unique(at[rows], return_index=True)
    return pd.Series(pd.array(calls["start_ns"].to_numpy()[rows[first]], dtype="Int64"), index=ids[found])


def queue_delay(profile: Profile, table: pd.DataFrame, activity_step: pd.Series | np.ndarray) -> pd.DataFrame:
    """Per step: how long the step's first GPU activity waited after the host launched it.

    Columns: first_gpu_ns (start of the step's first activity), launch_ns (host start of the
    call that launched it, by correlation id), queue_delay_ns = first_gpu_ns − launch_ns
    (time in the stream's queue: the GPU was busy with earlier work, or the launch was slow
    to reach the device), host_to_gpu_ns = first_gpu_ns − host_start_ns (from the step range's
    start). NaN (<NA>) for a step without GPU work.
    """
    acts, calls = profile.activities, profile.calls
    step = np.asarray(activity_step, dtype=np.int64)
    n = len(table)
    first_gpu = np.full(n, -1, dtype=np.int64)
    first_corr = np.full(n, -1, dtype=np.int64)
    mine = np.flatnonzero(step >= 0)
    if mine.size:
        # each step's first activity by start (the first in the table among equal starts): a stable
        # sort by step, then start, and each step's first row, as pandas' sort_values and drop_duplicates did
        s_, start, corr = step[mine], acts["start_ns"].to_numpy()[mine], acts["correlation"].to_numpy()[mine]
        order = np.lexsort((start, s_))
        lead = order[np.r_[True, s_[order][1:] != s_[order][:-1]]]
        lead = lead[s_[lead] < n]
        first_gpu[s_[lead]] = start[lead]
        first_corr[s_[lead]] = corr[lead]
    launch_at = _first_calls(calls, np.where(first_gpu >= 0, first_corr, -1))
    host_start = (table["host_start_ns"] if "host_start_ns" in table else table["start_ns"]).to_numpy(np.int64)
    has = first_gpu >= 0
    out = pd.DataFrame(index=table.index)
    out["first_gpu_ns"] = pd.array(np.where(has, first_gpu, 0), dtype="Int64")
    out.loc[~has, "first_gpu_ns"] = pd.NA
    out["launch_ns"] = launch_at.reindex(np.where(has, first_corr, -1)).to_numpy()
    out["queue_delay_ns"] = out["first_gpu_ns"] - out["launch_ns"]
    out["host_to_gpu_ns"] = out["first_gpu_ns"] - pd.array(host_start, dtype="Int64")
    return out


def steps_table(profile: Profile, ranges: pd.DataFrame | None = None) -> tuple[pd.DataFrame, "ownership.Ownership"]:
    """A step table for the serving steps (``Steps.table`` columns plus :data:`COLUMNS`)
    under cross-thread ownership, and the ownership itself. What ``find_steps`` will build
    once :func:`step_ranges` is wired into its step choice."""
    from perfdoctor.analysis import ownership

    ranges = step_ranges(profile) if ranges is None else ranges
    table = pd.DataFrame(
        {
            "name": ranges["name"].to_numpy(),
            "tid": ranges["tid"].to_numpy(),
            "host_start_ns": ranges["start_ns"].to_numpy(),
            "host_end_ns": ranges["end_ns"].to_numpy(),
        }
    )
    own = ownership.assign(profile, table)
    table = pd.concat([table, ownership.step_counts(profile, table, own)], axis=1)
    return describe(table), own
