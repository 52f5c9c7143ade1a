"""Where the time goes: per-kernel totals and the gaps between GPU activities.

Pure functions over an :class:`~perfdoctor.metrics.Analysis`, shared by the terminal
summary, the rules' evidence and the reports.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from perfdoctor.metrics import Analysis

_TRITON_SPECIALIZATION = re.compile(r"(?:_\d+[cde]*)+$")  # _0d1d2de, _7, _0_1
_HEX_SUFFIX = re.compile(r"_(?:0x)?[0-9a-f]{8,}$", re.IGNORECASE)  # _0x7f3a91c0, _a1b2c3d4e5f6


def _strip_brackets(name: str) -> str:
    """Remove every ``<...>`` and ``(...)`` group, nested, keeping the text outside them.

    ``operator<`` / ``operator()`` / ``operator->`` are names, not brackets: they are
    protected before the scan. An unbalanced closer is kept as text (a trace is untrusted
    input and may be truncated).
    """
    protected = (
        name.replace("(anonymous namespace)", "{anonymous}")
        .replace("operator()", "operator{call}")
        .replace("operator<<", "operator{shl}")
        .replace("operator>>", "operator{shr}")
        .replace("operator<=", "operator{le}")
        .replace("operator>=", "operator{ge}")
        .replace("operator<", "operator{lt}")
        .replace("operator>", "operator{gt}")
        .replace("->", "{arrow}")
    )
    out: list[str] = []
    stack: list[str] = []
    pairs = {"<": ">", "(": ")"}
    for ch in protected:
        if ch in pairs:
            stack.append(pairs[ch])
        elif stack and ch == stack[-1]:
            stack.pop()
        elif not stack:
            out.append(ch)
    return "".join(out)


def normalize_kernel_name(name: str) -> str:
    """The part of a kernel name that survives recompilation and re-launch.

    ``void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>,
    std::array<char*, 1ul> >(int, ...)`` → ``at::native::vectorized_elementwise_kernel``;
    ``triton_poi_fused_add_mul_0`` → ``triton_poi_fused_add_mul``;
    ``triton__0d1d2d3de`` → ``triton_``; ``kernel_0x7f3a91c0`` → ``kernel``.

    Dropping template arguments merges instantiations of one template (e.g. every
    elementwise functor) into one row: that is the price of matching across builds, and the
    row counts how many distinct raw names it holds.
    """
    text = _strip_brackets(name.strip())
    text = re.sub(r"^(?:void|__global__)\s+", "", text.strip())
    text = re.sub(r"\s+", " ", text).strip()
    previous = None
    while previous != text:  # suffixes can stack: kernel_0x1a2b3c4d_3
        previous = text
        text = _HEX_SUFFIX.sub("", text)
        text = _TRITON_SPECIALIZATION.sub("", text)
    return text or name.strip()


def normalized_names(names: pd.Series) -> pd.Series:
    """:func:`normalize_kernel_name` of a column, computed once per distinct name."""
    unique = pd.unique(names)
    return names.map(dict(zip(unique, map(normalize_kernel_name, unique))))


def top_kernels(analysis: Analysis, n: int = 10) -> pd.DataFrame:
    """Kernels in the profiled span grouped by family: count and time per step, share of kernel time."""
    acts = analysis.profile.activities
    span = analysis.steps.span
    k = acts[acts["kind"] == "kernel"]
    if span is not None:
        k = k[(k["start_ns"] >= span[0]) & (k["start_ns"] <= span[1])]
    if k.empty:
        return pd.DataFrame(columns=["kernel", "count_per_step", "ms_per_step", "mean_us", "share"])
    steps = max(analysis.steps.count, 1)
    dur = (k["end_ns"] - k["start_ns"]).astype("int64")
    g = pd.DataFrame({"kernel": normalized_names(k["name"]), "dur": dur}).groupby("kernel")["dur"]
    out = pd.DataFrame({"count": g.size(), "total_ns": g.sum()}).sort_values("total_ns", ascending=False)
    out["count_per_step"] = out["count"] / steps
    out["ms_per_step"] = out["total_ns"] / 1e6 / steps
    out["mean_us"] = out["total_ns"] / out["count"] / 1e3
    out["share"] = out["total_ns"] / out["total_ns"].sum()
    return out.reset_index()[["kernel", "count_per_step", "ms_per_step", "mean_us", "share"]].head(n)


def gaps(analysis: Analysis) -> pd.DataFrame:
    """Idle intervals of the device inside the profiled span (between merged GPU activities).

    Columns: start_ns, end_ns, gap_ns, step (the step whose GPU window holds the gap, or -1),
    before, after (names of the activities on either side).
    """
    span = analysis.steps.span
    acts = analysis.profile.activities
    if span is None or acts.empty:
        return pd.DataFrame(
            {c: pd.Series(dtype="int64") for c in ("start_ns", "end_ns", "gap_ns", "step")}
            | {c: pd.Series(dtype=object) for c in ("before", "after")}
        )
    lo, hi = span
    a = acts[(acts["end_ns"] > lo) & (acts["start_ns"] < hi)].sort_values("start_ns", kind="stable")
    starts = a["start_ns"].to_numpy()
    reach = np.maximum.accumulate(a["end_ns"].to_numpy())
    # a gap opens after activity i when everything so far has ended before activity i+1 starts
    idx = np.flatnonzero(starts[1:] > reach[:-1])
    g = pd.DataFrame(
        {
            "start_ns": reach[idx],
            "end_ns": starts[idx + 1],
            "before": a["name"].to_numpy()[idx],
            "after": a["name"].to_numpy()[idx + 1],
        }
    )
    g["gap_ns"] = g["end_ns"] - g["start_ns"]
    w = analysis.steps.table
    w = w[w["gpu_start_ns"].notna()]
    g["step"] = -1
    if not w.empty and not g.empty:
        ws, we = w["gpu_start_ns"].astype("int64").to_numpy(), w["gpu_end_ns"].astype("int64").to_numpy()
        pos = np.searchsorted(ws, g["start_ns"].to_numpy(), side="right") - 1
        inside = (pos >= 0) & (g["end_ns"].to_numpy() <= we[np.clip(pos, 0, None)])
        g["step"] = np.where(inside, w.index.to_numpy()[np.clip(pos, 0, None)], -1)
    return g[["start_ns", "end_ns", "gap_ns", "step", "before", "after"]]


def largest_gaps(analysis: Analysis, n: int = 5) -> pd.DataFrame:
    """The ``n`` longest device idle intervals, with the host calls running during each."""
    g = gaps(analysis).nlargest(n, "gap_ns").reset_index(drop=True)
    calls = analysis.profile.calls
    during = []
    for s, e in zip(g["start_ns"], g["end_ns"]):
        c = calls[(calls["start_ns"] < e) & (calls["end_ns"] > s)]
        during.append(", ".join(c["name"].value_counts().head(3).index) if not c.empty else "")
    g["host_calls"] = during
    return g
