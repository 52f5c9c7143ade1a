"""CUDA/HIP graph capture vs replay: what a trace and each step really recorded.

Three situations must never be confused:

* a trace of a CAPTURE (``cudaStreamBeginCapture`` … ``cudaStreamEndCapture``,
  ``cudaGraphInstantiate``): the launches inside the capture window record graph nodes and
  run nothing, so "many launches, few kernels" is not launch overhead and the idle GPU is
  not a bubble. Timing rules do not apply to it; nor to a capture followed by no more than
  one launch of each captured graph (the launch as it is recorded: the program has not
  reached its replays yet).
* steps whose kernels run under a graph launch (REPLAYED): one ``cudaGraphLaunch`` runs the
  whole step; advising "use CUDA graphs" would be wrong.
* steps with kernels but ZERO recognised launch calls (a tracer that dropped the runtime
  API, an unknown vendor's API names): nothing proves a graph, so they are ``unknown``,
  never "already graphed". (The old heuristic "kernels ≥ 4 × max(launches, 1)" reads such a
  step as graphed.)

A kernel is replayed when its correlation id is that of a graph-launch call (Kineto and nsys
both correlate every replayed kernel to the ``cudaGraphLaunch``), or the tracer gave it a
graph id (nsys ``graphId``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from perfdoctor.names import api as apinames
from perfdoctor.names.codes import equals
from perfdoctor.profile import Profile

STEP_STATES = ("replayed", "partly-replayed", "eager", "capture", "unknown", "no-gpu-work")
TRACE_KINDS = ("capture", "capture+replay", "replay", "eager", "no-launches", "no-gpu-work")
REPLAYED_SHARE = 0.5  # a step is replayed when at least this share of its kernels replays


def capture_windows(profile: Profile) -> pd.DataFrame:
    """Stream captures in the trace: tid, begin_ns, end_ns (end of the EndCapture call; the
    trace's last call end when the capture never ended), launches (launch calls on that
    thread inside the window: graph nodes recorded, not run)."""
    calls = profile.calls
    cols = ["tid", "begin_ns", "end_ns", "launches"]
    if calls.empty:
        return pd.DataFrame(columns=cols)
    names = calls["name"]  # its roles one boolean array each (apinames.has_role), not classify's whole table
    begins = calls[apinames.has_role(names, "capture_begin")].sort_values("start_ns", kind="stable")
    if begins.empty:
        return pd.DataFrame(columns=cols)
    ends = calls[apinames.has_role(names, "capture_end")].sort_values("start_ns", kind="stable")
    launch = calls[apinames.has_role(names, "launch")]
    rows = []
    for tid, b in begins.groupby("tid", sort=False):
        e = ends[ends["tid"] == tid]
        e_end = e["end_ns"].to_numpy()
        e_start = e["start_ns"].to_numpy()
        for start in b["start_ns"].to_numpy():
            k = np.searchsorted(e_start, start, side="left")
            stop = int(e_end[k]) if k < e_end.size else int(calls["end_ns"].max())
            t = launch[(launch["tid"] == tid) & (launch["start_ns"] >= start) & (launch["start_ns"] <= stop)]
            rows.append((int(tid), int(start), stop, int(len(t))))
    return pd.DataFrame(rows, columns=cols).sort_values("begin_ns", ignore_index=True)


def replayed(profile: Profile) -> np.ndarray:
    """Boolean per activity: it ran as part of a graph replay."""
    acts, calls = profile.activities, profile.calls
    if acts.empty:
        return np.zeros(0, dtype=bool)
    graph_corr = calls["correlation"].to_numpy()[apinames.is_graph_launch(calls["name"])] if not calls.empty else []
    by_corr = acts["correlation"].isin(pd.Index(graph_corr[graph_corr >= 0]) if len(graph_corr) else []).to_numpy()
    return by_corr | (acts["graph_id"].to_numpy() >= 0)


def in_capture(profile: Profile, windows: pd.DataFrame | None = None) -> np.ndarray:
    """Boolean per call: it started inside a capture window on its own thread."""
    calls = profile.calls
    windows = capture_windows(profile) if windows is None else windows
    out = np.zeros(len(calls), dtype=bool)
    start, tid = calls["start_ns"].to_numpy(), calls["tid"].to_numpy()
    for w_tid, begin, end in zip(windows["tid"], windows["begin_ns"], windows["end_ns"]):  # not itertuples: a namedtuple class per call
        out |= (tid == w_tid) & (start >= begin) & (start <= end)
    return out


@dataclass
class GraphState:
    """What the trace recorded about graphs."""

    kind: str
    captures: int = 0
    launches_in_capture: int = 0
    launches: int = 0
    graph_launches: int = 0
    kernels: int = 0
    replayed_kernels: int = 0
    timing_rules_apply: bool = True
    message: str = ""
    windows: pd.DataFrame = field(default_factory=pd.DataFrame)

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in (
            "kind", "captures", "launches_in_capture", "launches", "graph_launches", "kernels",
            "replayed_kernels", "timing_rules_apply", "message",
        )}


def trace_state(profile: Profile) -> GraphState:
    """Classify the whole trace (see :data:`TRACE_KINDS`)."""
    calls, acts = profile.calls, profile.activities
    launches = int(apinames.has_role(calls["name"], "launch").sum()) if not calls.empty else 0
    graph_launches = int(apinames.has_role(calls["name"], "graph_launch").sum()) if not calls.empty else 0
    kernels = int(equals(acts["kind"], "kernel").sum())
    rep = replayed(profile)
    replayed_kernels = int((rep & equals(acts["kind"], "kernel")).sum()) if len(rep) else 0
    windows = capture_windows(profile)
    in_cap = int(windows["launches"].sum()) if not windows.empty else 0
    state = GraphState(
        kind="eager", captures=len(windows), launches_in_capture=in_cap, launches=launches,
        graph_launches=graph_launches, kernels=kernels, replayed_kernels=replayed_kernels, windows=windows,
    )
    if acts.empty:
        state.kind, state.timing_rules_apply = "no-gpu-work", False
        state.message = "no GPU activity in the trace"
    elif len(windows) and not replayed_kernels:
        state.kind, state.timing_rules_apply = "capture", False
        state.message = (
            f"a capture: {in_cap} launches recorded graph nodes inside {len(windows)} stream capture(s) while "
            f"{kernels} kernel(s) ran; timing rules do not apply (profile the replays instead)"
        )
    elif len(windows) and graph_launches <= len(windows):
        # At most one launch per captured graph: the replay that follows recording (torch's
        # CUDA-graph trees launch each graph once as they record it; xDiT's Flux capture
        # trace: 1 capture, 1 hipGraphLaunch). The program has not yet reached the replays it
        # will run from then on, so the steps seen are warm-up: judging their timing told a
        # program that already captures a graph to capture one.
        state.kind, state.timing_rules_apply = "capture", False
        state.message = (
            f"a capture: {len(windows)} stream capture(s) ({in_cap} launches recorded) and {graph_launches} graph "
            f"launch(es), no more than one per capture (the launch as it is recorded); timing rules do not apply "
            "(profile the replays that follow instead)"
        )
    elif len(windows):
        state.kind = "capture+replay"
        state.message = (
            f"{len(windows)} capture(s) ({in_cap} launches recorded, not run) and {graph_launches} graph "
            f"replays running {replayed_kernels} kernels; judge the steps that replay, not the capture"
        )
    elif replayed_kernels:
        state.kind = "replay"
        state.message = f"{graph_launches} graph launches replayed {replayed_kernels} of {kernels} kernels"
    elif launches == 0:
        state.kind = "no-launches"
        state.message = (
            f"{kernels} kernels but no recognised launch call: the trace lacks the runtime API "
            "(or uses names perfdoctor does not know); graph replay cannot be judged"
        )
    else:
        state.message = f"{launches} eager launches, no graph replay"
    return state


def step_states(
    profile: Profile,
    table: pd.DataFrame,
    activity_step: pd.Series | np.ndarray,
    call_step: pd.Series | np.ndarray,
) -> pd.DataFrame:
    """Per step (rows of ``table``): kernels, replayed_kernels, launches, graph_launches,
    capture_launches and ``state`` (:data:`STEP_STATES`).

    ``replayed`` needs a recognised graph-launch call owned by the step and at least
    :data:`REPLAYED_SHARE` of its kernels replayed; ``unknown`` is a step with kernels but
    no recognised launch of any kind.
    """
    acts, calls = profile.activities, profile.calls
    n = len(table)
    a_step = np.asarray(activity_step, dtype=np.int64)
    c_step = np.asarray(call_step, dtype=np.int64)
    is_kernel = equals(acts["kind"], "kernel") & (a_step >= 0)
    rep = replayed(profile) & is_kernel
    launch, graph_launch = (apinames.has_role(calls["name"], r) for r in ("launch", "graph_launch"))
    owned = c_step >= 0
    cap = in_capture(profile) & owned & launch

    def count(mask: np.ndarray, steps: np.ndarray) -> np.ndarray:
        return np.bincount(steps[mask], minlength=n)[:n].astype(np.int64)

    out = pd.DataFrame(index=table.index)
    out["kernels"] = count(is_kernel, a_step)
    out["replayed_kernels"] = count(rep, a_step)
    out["launches"] = count(launch & owned, c_step)
    out["graph_launches"] = count(graph_launch & owned, c_step)
    out["capture_launches"] = count(cap, c_step)
    share = np.where(out["kernels"] > 0, out["replayed_kernels"] / out["kernels"].clip(lower=1), 0.0)
    state = np.select(
        [
            out["capture_launches"].to_numpy() > 0,
            (out["kernels"].to_numpy() == 0),
            (out["graph_launches"].to_numpy() > 0) & (share >= REPLAYED_SHARE),
            (out["graph_launches"].to_numpy() > 0) & (out["replayed_kernels"].to_numpy() > 0),
            out["launches"].to_numpy() == 0,
        ],
        ["capture", "no-gpu-work", "replayed", "partly-replayed", "unknown"],
        default="eager",
    )
    out["replayed_share"] = share
    out["state"] = state.astype(object)
    return out


def graphed(states: pd.DataFrame) -> bool | None:
    """Whether the steps are graph replays, for the rules' ``when = "graphed"`` variants:
    True when most steps with GPU work are ``replayed``; False when most are eager; None
    (cannot tell — do not pick a variant, do not advise graphs as if proven eager) when
    the launches were not recognised."""
    s = states.loc[states["state"] != "no-gpu-work", "state"]
    if s.empty:
        return None
    counts = s.value_counts()
    if counts.get("replayed", 0) * 2 > len(s):
        return True
    if (counts.get("unknown", 0) + counts.get("capture", 0)) * 2 >= len(s):
        return None
    return False
