"""One self-contained HTML report: plots drawn as inline SVG, no network, no libraries.

Sections: the verdict and headline numbers; a timeline of a few steps (overview and a
zoomed slice) with kernels, copies and the gaps between them marked; GPU time by kernel
family; DRAM bandwidth and SM occupancy against their thresholds and the device peak;
the step latency of every step (the steady start, p50 and p99 marked); NVML time series
when the run sampled them (seconds from the run start, values in their units); the raw
traces and the command that opens each in a timeline viewer (Perfetto, nsys-ui); the
ranked findings with evidence and fixes; passed and not-evaluated checks. No glyph beyond
Latin text is needed: citations are English and the embedded data is ASCII.

A trace is untrusted input: every name taken from it (kernels, ranges, paths, metric
names) goes through :func:`perfdoctor.reports.format.html` — element text and attribute values alike — and
the findings embedded for the page's script are JSON with ``<``, ``>``, ``&`` and the
JavaScript line separators escaped, so no name can close the ``<script>`` element. The
script is small: it records any error into the page (``data-pd-errors``), offers the
findings as a download, and marks the page ready with the number of plots drawn and of
plot labels that overlap as laid out (``data-pd-ready``, ``data-overlaps``), which the
headless-browser test reads.
"""

from __future__ import annotations

import json
import shlex
from html import escape
from pathlib import Path

from perfdoctor.io import finite
from perfdoctor.text import clean_block
from typing import Any, Sequence

import numpy as np
import pandas as pd

from perfdoctor.analysis.metrics import Analysis
from perfdoctor.reports import attribution, common
from perfdoctor.reports.format import html as e, svg_number as at  # e: element text and attribute values; at: a coordinate
from perfdoctor.reports.estimates import formula
from perfdoctor.reports import evidence as words
from perfdoctor.text import count, duration_us, num, percent, tick, value
from perfdoctor.reports.summary import trace_window_lines, uneven_steps_lines, workload_lines
from perfdoctor.reports.json import document
from perfdoctor.rules.engine import Finding
from perfdoctor.names.kernels import label as short_name
from perfdoctor.rules.evidence import Evidence, kernel_families
from perfdoctor.analysis import steady
from perfdoctor.analysis.steps import is_launch, is_sync
from perfdoctor.bundle.layout import NSYS_REP, RAW, TORCH_TRACE
from perfdoctor.bundle.protocol import Rank

WIDTH = 1100  # drawing width of the wide plots, px
LABEL_W = 150  # left margin for lane labels
LANE_H = 22
DETAIL_ACTIVITIES = 40  # activities shown in the zoomed slice
MAX_TIMELINE_STEPS = 3

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#1d2329;background:#fafbfc}
main{max-width:1180px;margin:0 auto;padding:20px}
h1{font-size:22px;margin:0 0 4px} h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #d8dee4;padding-bottom:4px}
h3{font-size:15px;margin:18px 0 6px}
.verdict{font-size:16px;font-weight:600;padding:10px 14px;border-radius:6px;margin:10px 0}
.fail{background:#fdecea;color:#8a1c12}.pass{background:#e8f5e9;color:#1b5e20}.not_evaluated,.inconclusive{background:#fff8c5;color:#6f4e00}.crashed{background:#8a1c12;color:#fff}
.src{color:#57606a;font-size:12px;word-break:break-all}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin:12px 0}
.card{background:#fff;border:1px solid #d8dee4;border-radius:6px;padding:8px 12px;min-width:120px}
.card b{display:block;font-size:18px}.card span{color:#57606a;font-size:12px}
.plot{background:#fff;border:1px solid #d8dee4;border-radius:6px;padding:8px;margin:8px 0;overflow-x:auto}
svg text{font:11px system-ui,sans-serif;fill:#1d2329}
.k{fill:#4e79a7}.c{fill:#f28e2b}.s{fill:#b07aa1}.gap{fill:#e15759;opacity:.75}.idle{fill:#e15759}
.launch{stroke:#8c959f}.sync{stroke:#d1242f;stroke-width:2}.stepr{fill:#eaeef2;stroke:#8c959f}
.link{stroke:#8c959f;stroke-dasharray:2 2}.axis{stroke:#8c959f}.thr{stroke:#d1242f;stroke-width:2;stroke-dasharray:4 3}
.bar{fill:#4e79a7}.peak{fill:#eaeef2;stroke:#8c959f}.series{fill:none;stroke:#4e79a7;stroke-width:1.5}
.finding{background:#fff;border:1px solid #d8dee4;border-left:5px solid #8c959f;border-radius:6px;padding:10px 14px;margin:12px 0}
.sev-critical,.sev-error{border-left-color:#d1242f}.sev-warning{border-left-color:#d4a72c}.sev-info{border-left-color:#0969da}
.est{color:#1a7f37;font-weight:600}.muted{color:#57606a;font-size:12px}
table{border-collapse:collapse;margin:6px 0;font-size:12px}th,td{border:1px solid #d8dee4;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f3f5f7}pre{background:#f6f8fa;border:1px solid #d8dee4;border-radius:6px;padding:8px;overflow-x:auto;font-size:12px}
#pd-errors{background:#fdecea;color:#8a1c12;padding:8px;border-radius:6px}
.legend span{display:inline-block;margin-right:14px}.legend i{display:inline-block;width:12px;height:10px;margin-right:4px;vertical-align:middle}
"""

ERROR_CAPTURE_JS = """
(function(){
  var errors=[];
  function report(msg){
    errors.push(String(msg));
    document.documentElement.setAttribute('data-pd-errors', String(errors.length));
    var box=document.getElementById('pd-errors');
    if(box){box.hidden=false;box.textContent='Script errors: '+errors.join(' | ');}
  }
  window.addEventListener('error',function(e){report(e.message||('failed to load '+(e.target&&e.target.tagName)));},true);
  window.addEventListener('unhandledrejection',function(e){report(e.reason);});
  var original=console.error;
  console.error=function(){report(Array.prototype.join.call(arguments,' '));return original.apply(console,arguments);};
  window.pdReport=report;
})();
"""

READY_JS = """
(function(){
  try{
    var doc=JSON.parse(document.getElementById('pd-data').textContent);
    var drawn=0;
    document.querySelectorAll('svg.pd-plot').forEach(function(svg){
      if(svg.querySelector('rect,line,polyline,path')){drawn++;}
    });
    var link=document.getElementById('pd-download');
    link.href=URL.createObjectURL(new Blob([JSON.stringify(doc,null,2)],{type:'application/json'}));
    link.hidden=false;
    var status=document.getElementById('pd-status');
    status.setAttribute('data-plots',String(drawn));
    // Labels that overlap on screen, measured by the browser: the test wants none.
    var overlaps=[];
    document.querySelectorAll('svg.pd-plot').forEach(function(svg){
      var texts=svg.querySelectorAll('text');
      var boxes=Array.prototype.map.call(texts,function(t){return t.getBBox();});
      for(var i=0;i<boxes.length;i++){for(var j=i+1;j<boxes.length;j++){
        var a=boxes[i],b=boxes[j];
        if(a.width&&b.width&&a.x<b.x+b.width-0.5&&b.x<a.x+a.width-0.5&&a.y<b.y+b.height-0.5&&b.y<a.y+a.height-0.5){
          overlaps.push(texts[i].textContent+' / '+texts[j].textContent);
        }
      }}
    });
    status.setAttribute('data-overlaps',String(overlaps.length));
    if(overlaps.length){status.title='overlapping labels: '+overlaps.slice(0,5).join('; ');}
    status.setAttribute('data-findings',String(doc.findings.length));
    status.textContent=drawn+' plots, '+doc.findings.length+' checks';
    document.documentElement.setAttribute('data-pd-ready','1');
  }catch(e){window.pdReport(e&&e.message?e.message:e);}
})();
"""


def script_json(obj: Any) -> str:
    """JSON safe inside a ``<script>`` element: nothing in it can read as ``</script>`` or a comment."""
    # ASCII only: the original (Chinese) words of a citation travel in the data, and the page
    # must need no CJK font, not even in its source.
    text = json.dumps(obj, ensure_ascii=True, allow_nan=False, default=str)
    return (
        text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
        .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    )


# --- SVG primitives -----------------------------------------------------------------------

def _svg(width: float, height: float, body: list[str], label: str) -> str:
    return (
        f'<svg class="pd-plot" role="img" aria-label="{e(label)}" width="100%" style="max-width:{at(width, 0)}px" '
        f'viewBox="0 0 {at(width, 0)} {at(height, 0)}" preserveAspectRatio="xMinYMin meet" xmlns="http://www.w3.org/2000/svg">' + "".join(body) + "</svg>"
    )


def _rect(x: float, y: float, w: float, h: float, cls: str, title: str | None = None) -> str:
    tip = f"<title>{e(title)}</title>" if title else ""
    return f'<rect class="{cls}" x="{at(x, 2)}" y="{at(y, 2)}" width="{at(max(w, 0.6), 2)}" height="{at(h, 2)}">{tip}</rect>'


def _text(x: float, y: float, s: str, anchor: str = "start", cls: str = "") -> str:
    c = f' class="{cls}"' if cls else ""
    return f'<text x="{at(x, 1)}" y="{at(y, 1)}" text-anchor="{anchor}"{c}>{e(s)}</text>'


def _line(x1: float, y1: float, x2: float, y2: float, cls: str) -> str:
    return f'<line class="{cls}" x1="{at(x1, 2)}" y1="{at(y1, 2)}" x2="{at(x2, 2)}" y2="{at(y2, 2)}"/>'


def _ticks(lo: float, hi: float, most: int = 10) -> list[float]:
    """Round tick values (1, 2, 5 × 10^k apart) from ``lo`` to ``hi``, at most ``most`` of them."""
    span = hi - lo
    if not span > 0:
        return [lo]
    step = 10 ** np.floor(np.log10(span / most))
    for m in (1, 2, 5, 10):
        if span / (step * m) <= most:
            step *= m
            break
    first = np.ceil(lo / step - 1e-9) * step
    return [float(v) + 0.0 for v in np.arange(first, hi + step * 1e-9, step)]  # + 0.0: no "-0" label


def _axis(y: float, t0: int, t1: int, x0: float, width: float) -> list[str]:
    """A time axis in ms relative to ``t0`` with ~8 ticks."""
    span_ms = (t1 - t0) / 1e6
    out = [_line(x0, y, x0 + width, y, "axis")]
    for t in _ticks(0.0, span_ms, 10):
        x = x0 + t / span_ms * width if span_ms > 0 else x0
        out += [_line(x, y, x, y + 4, "axis"), _text(x, y + 15, f"{tick(t)} ms", "middle")]
    return out


CHAR_PX = 6.4  # width of one character of the 11 px plot font, a little generous (labels must not touch)


def _fits(label: str, width: float) -> bool:
    return width >= len(label) * CHAR_PX + 4


def _y_tick(left: float, y: float, bottom: float, label: str) -> list[str]:
    """A value tick on a left axis; the lowest label sits above the axis line, clear of the time labels below it."""
    return [_line(left - 4, y, left, y, "axis"), _text(left - 6, min(y + 4, bottom - 2), label, "end")]


def _merge_px(starts: np.ndarray, ends: np.ndarray, scale: float, tol_px: float = 0.5) -> list[tuple[int, int, int, int]]:
    """Merge intervals closer than ``tol_px`` on screen: (start, end, count, busy_ns) runs.

    Thousands of 2 µs kernels in a 100 ms window are sub-pixel; drawing each would only
    bloat the file. Merged runs keep what the eye can see, and the tooltip keeps the count.
    """
    runs: list[list[int]] = []
    for s, t in zip(starts.tolist(), ends.tolist()):
        if runs and (s - runs[-1][1]) * scale < tol_px:
            runs[-1][1] = max(runs[-1][1], t)
            runs[-1][2] += 1
            runs[-1][3] += t - s
        else:
            runs.append([s, t, 1, t - s])
    return [tuple(r) for r in runs]  # type: ignore[misc]


# --- timeline -------------------------------------------------------------------------------

def _chosen_steps(analysis: Analysis) -> pd.DataFrame:
    t = analysis.timeline.with_gpu
    # The first step often carries warm-up (allocations, autotuning): show the next ones.
    if len(t) > MAX_TIMELINE_STEPS:
        t = t.iloc[1 : 1 + MAX_TIMELINE_STEPS]
    return t


KIND_CLASS = {"kernel": "k", "memcpy": "c", "memset": "s"}


def timeline_overview(analysis: Analysis) -> str | None:
    """A few whole steps: host step ranges and CUDA calls, GPU lanes per stream, idle share per pixel."""
    chosen = _chosen_steps(analysis)
    if chosen.empty:
        return None
    t0 = int(chosen["host_start_ns"].min())
    t1 = int(max(chosen["gpu_end_ns"].astype("int64").max(), chosen["host_end_ns"].max()))
    if t1 <= t0:
        return None
    scale = WIDTH / (t1 - t0)  # px per ns
    x = lambda ns: LABEL_W + (ns - t0) * scale  # noqa: E731 - a one-line coordinate map

    acts = analysis.timeline.activities
    acts = acts[acts["step"].isin(chosen.index)]
    calls = analysis.profile.calls
    calls = calls[(calls["start_ns"] >= t0) & (calls["start_ns"] <= t1)]
    lanes = sorted({(int(d), int(s)) for d, s in zip(acts["device"], acts["stream"])})
    body: list[str] = []
    y = 6.0

    body.append(_text(LABEL_W - 6, y + 15, "steps (host)", "end"))
    for idx, r in chosen.iterrows():
        lat = r["critical_path_ns"] / 1e6  # the timeline's step latency (critical path)
        body.append(_rect(x(r["host_start_ns"]), y + 2, (r["host_end_ns"] - r["host_start_ns"]) * scale, LANE_H - 4, "stepr",
                          f"step {idx} ({analysis.steps.name}): host {value((r['host_end_ns'] - r['host_start_ns']) / 1e6, 'ms')}, latency {value(lat, 'ms')}"))
        body.append(_text(x(r["host_start_ns"]) + 3, y + 15, f"step {idx}"))
    y += LANE_H

    body.append(_text(LABEL_W - 6, y + 15, "CUDA calls (host)", "end"))
    for cls, mask in (("launch", is_launch(calls["name"])), ("sync", is_sync(calls["name"]))):
        sel = calls[mask.to_numpy()]
        for s, _end, n, _ in _merge_px(sel["start_ns"].to_numpy(), sel["end_ns"].to_numpy(), scale, 1.0):
            title = f"{n} {'launch' if cls == 'launch' else 'synchronizing'} call{'s' if n > 1 else ''}"
            body.append(f'<line class="{cls}" x1="{at(x(s), 2)}" y1="{y + 4}" x2="{at(x(s), 2)}" y2="{y + LANE_H - 4}"><title>{e(title)}</title></line>')
    y += LANE_H

    for device, stream in lanes:
        lane = acts[(acts["device"] == device) & (acts["stream"] == stream)].sort_values("start_ns")
        body.append(_text(LABEL_W - 6, y + 15, f"GPU {device} stream {stream}", "end"))
        for kind, group in lane.groupby("kind"):
            for s, t, n, busy in _merge_px(group["start_ns"].to_numpy(), group["end_ns"].to_numpy(), scale):
                title = f"{n} {kind}{'s' if n > 1 else ''}, {duration_us(busy / 1e3)} busy in {duration_us((t - s) / 1e3)}"
                if n == 1:
                    name = group.loc[(group["start_ns"] == s), "name"]
                    title = f"{short_name(str(name.iloc[0])) if len(name) else kind}: {duration_us((t - s) / 1e3)}"
                body.append(_rect(x(s), y + 3, (t - s) * scale, LANE_H - 6, KIND_CLASS.get(kind, "k"), title))
        y += LANE_H

    # Idle share of each pixel column inside the steps' GPU windows: the bubbles.
    body.append(_text(LABEL_W - 6, y + 15, "GPU idle (bubbles)", "end"))
    busy = _busy_per_column(acts, t0, t1, WIDTH)
    windows = np.zeros(WIDTH, dtype=bool)
    for _, r in chosen.iterrows():
        a, b = int(x(int(r["gpu_start_ns"])) - LABEL_W), int(np.ceil(x(int(r["gpu_end_ns"])) - LABEL_W))
        windows[max(a, 0) : min(b, WIDTH)] = True
    col_ns = (t1 - t0) / WIDTH
    for col in np.flatnonzero(windows):
        idle = 1.0 - min(1.0, busy[col] / col_ns)
        if idle > 0.02:
            h = (LANE_H - 4) * idle
            body.append(f'<rect class="idle" x="{LABEL_W + col}" y="{at(y + LANE_H - 2 - h, 2)}" width="1" height="{at(h, 2)}"/>')
    y += LANE_H + 4
    body += _axis(y, t0, t1, LABEL_W, WIDTH)
    return _svg(LABEL_W + WIDTH + 20, y + 24, body, "timeline of whole steps")


def _busy_per_column(acts: pd.DataFrame, t0: int, t1: int, columns: int) -> np.ndarray:
    """GPU busy ns (union over streams) in each of ``columns`` equal bins of [t0, t1]."""
    if acts.empty:
        return np.zeros(columns)
    a = acts.sort_values("start_ns")
    s, t = a["start_ns"].to_numpy(np.int64), a["end_ns"].to_numpy(np.int64)
    reach = np.maximum.accumulate(t)
    new = np.r_[True, s[1:] > reach[:-1]]  # start of a merged busy interval
    ms, me = s[new], np.maximum.reduceat(t, np.flatnonzero(new))
    cum = np.r_[0, np.cumsum(me - ms)]

    def busy_until(points: np.ndarray) -> np.ndarray:
        i = np.searchsorted(ms, points, side="right") - 1
        ok = i >= 0
        j = np.clip(i, 0, None)
        return np.where(ok, cum[j] + np.clip(points - ms[j], 0, me[j] - ms[j]), 0)

    edges = np.linspace(t0, t1, columns + 1)
    return np.diff(busy_until(edges))


def timeline_detail(analysis: Analysis) -> str | None:
    """A zoomed slice of one step: every activity, every gap with its length, each launch linked to its kernel."""
    chosen = _chosen_steps(analysis)
    if chosen.empty:
        return None
    step = chosen.index[len(chosen) // 2]
    acts = analysis.timeline.activities
    acts = acts[acts["step"] == step].sort_values("start_ns", kind="stable")
    if acts.empty:
        return None
    first = max(0, len(acts) // 2 - DETAIL_ACTIVITIES // 2)
    sl = acts.iloc[first : first + DETAIL_ACTIVITIES]
    first_ns, last_ns = int(sl["start_ns"].min()), int(sl["end_ns"].max())
    t0, t1 = first_ns, last_ns
    calls = analysis.profile.calls
    corr = set(sl["correlation"].tolist())
    launches = calls[calls["correlation"].isin(corr) & (calls["correlation"] >= 0)]
    # Show the launches that issued this work when they are near it (eager launch-bound
    # code); a graph launch issued milliseconds earlier would squash the slice, so it is
    # left out (the overview shows it).
    launches = launches[launches["start_ns"] >= first_ns - (last_ns - first_ns)]
    if not launches.empty:
        t0 = min(t0, int(launches["start_ns"].min()))
    pad = max(1, (t1 - t0) // 50)
    t0, t1 = t0 - pad, t1 + pad
    scale = WIDTH / (t1 - t0)
    x = lambda ns: LABEL_W + (ns - t0) * scale  # noqa: E731
    body: list[str] = []
    y_host, y_gpu, y_gap = 6.0, 6.0 + 2 * LANE_H, 6.0 + 3 * LANE_H
    body.append(_text(LABEL_W - 6, y_host + 15, "CUDA calls (host)", "end"))
    for r in calls[(calls["end_ns"] >= t0) & (calls["start_ns"] <= t1)].itertuples():
        cls = "sync" if is_sync(pd.Series([r.name])).iloc[0] else "launch"
        body.append(f'<line class="{cls}" x1="{at(x(r.start_ns), 2)}" y1="{y_host + 4}" x2="{at(x(r.start_ns), 2)}" '
                    f'y2="{y_host + LANE_H - 4}"><title>{e(r.name)} at {duration_us((r.start_ns - t0) / 1e3)}</title></line>')
    body.append(_text(LABEL_W - 6, y_gpu + 15, f"GPU, step {step}", "end"))
    by_corr = launches.drop_duplicates("correlation").set_index("correlation")["start_ns"]
    for r in sl.itertuples():
        label = short_name(r.name) if r.kind == "kernel" else f"{r.kind} {r.copy_kind} {r.host_mem}".strip()
        w = (r.end_ns - r.start_ns) * scale
        body.append(_rect(x(r.start_ns), y_gpu + 3, w, LANE_H - 6, KIND_CLASS.get(r.kind, "k"), f"{label}: {duration_us((r.end_ns - r.start_ns) / 1e3)}"))
        if r.correlation in by_corr.index:
            body.append(_line(x(by_corr[r.correlation]), y_host + LANE_H - 4, x(r.start_ns), y_gpu + 3, "link"))
    body.append(_text(LABEL_W - 6, y_gap + 15, "gaps (bubbles)", "end"))
    gaps = analysis.timeline.gaps
    gaps = gaps[(gaps["step"] == step) & (gaps["start_ns"] >= first_ns) & (gaps["end_ns"] <= last_ns)]
    for r in gaps.itertuples():
        w = r.length_ns * scale
        body.append(_rect(x(r.start_ns), y_gap + 3, w, LANE_H - 6, "gap",
                          f"gap {duration_us(r.length_ns / 1e3)}{' after a host sync' if r.after_sync else ''}"))
        label = duration_us(r.length_ns / 1e3)
        if _fits(label, w):  # inside its own gap, so labels never overlap; the tooltip has every length
            body.append(_text(x(r.start_ns) + w / 2, y_gap + 15, label, "middle"))
    y = y_gap + LANE_H + 4
    body += _axis(y, t0, t1, LABEL_W, WIDTH)
    return _svg(LABEL_W + WIDTH + 20, y + 24, body, f"zoomed slice of step {step}")


# --- other plots ------------------------------------------------------------------------------

def families_chart(analysis: Analysis) -> str | None:
    ev = kernel_families(analysis)
    if not ev.rows:
        return None
    rows = ev.rows
    top = max(float(r[1]) for r in rows) or 1.0
    bar_w, left = 620.0, 170.0
    body: list[str] = []
    for i, (fam, ms, of, n) in enumerate(rows):
        share = words.cell(of)  # the share as the table and findings.json say it
        y = 6 + i * 24
        body.append(_text(left - 8, y + 14, fam, "end"))
        cls = {"memcpy": "c", "memset": "s"}.get(fam, "bar")
        body.append(_rect(left, y + 2, float(ms) / top * bar_w, 16, cls, f"{fam}: {value(ms, 'ms')} per step, {share} of GPU time, {count(n)} per step"))
        body.append(_text(left + float(ms) / top * bar_w + 6, y + 14, f"{value(ms, 'ms')} / step ({share})"))
    return _svg(left + bar_w + 200, 12 + len(rows) * 24, body, "GPU time by kernel family")


def _threshold(findings: Sequence[Finding], rule_id: str, default: float) -> tuple[float, str]:
    f = next((f for f in findings if f.rule_id == rule_id), None)
    if f is None or f.threshold is None:
        return default, "default"
    return f.threshold, f.threshold_origin


def gauges(analysis: Analysis, findings: Sequence[Finding]) -> tuple[str, list[str]]:
    """DRAM bandwidth and SM occupancy as a share of the device peak, with the target marked.

    Returns the SVG and, for gauges without a value, why (as text for under the plot: a
    reason is a sentence, and SVG text does not wrap).
    """
    notes: list[str] = []
    peak = analysis.value("peak_dram_bw_gbps")
    rows = [
        ("DRAM bandwidth", ["dram_bw_util"], "dram-bandwidth", 0.85, peak),
        ("SM occupancy", ["sm_occupancy", "achieved_occupancy_est"], "sm-occupancy", 0.80, None),
    ]
    bar_w, left = 600.0, 150.0
    body: list[str] = []
    for i, (label, keys, rule_id, default, peak_gbps) in enumerate(rows):
        y = 8 + i * 52
        thr, origin = _threshold(findings, rule_id, default)
        body.append(_text(left - 8, y + 16, label, "end"))
        body.append(_rect(left, y + 4, bar_w, 16, "peak", "100 % = device peak" + (f" ({value(peak_gbps, 'GB/s')})" if peak_gbps else "")))
        key = next((k for k in keys if analysis.value(k) is not None), None)
        if key is None:
            m = analysis.metrics.get(keys[0])
            body.append(_text(left + 6, y + 16, f"{keys[0]}: not collected (see below)"))
            notes.append(f"{label}: {keys[0]} not collected — {m.reason if m and m.reason else 'no source'}")
        else:
            m = analysis.metrics[key]
            v = float(m.value)
            extra = f" = {num(v * peak_gbps)} of {value(peak_gbps, 'GB/s')}" if peak_gbps and key == "dram_bw_util" else ""
            body.append(_rect(left, y + 4, min(v, 1.0) * bar_w, 16, "bar", f"{key} {value(v, 'ratio')}{extra} ({m.source})"))
            body.append(_text(left, y + 38, f"{key} = {value(v, 'ratio')} of peak{extra} [{m.source}]" + (f" — {m.note}" if m.note else "")))
        tx = left + min(thr, 1.0) * bar_w
        tip = f"target {value(thr, 'ratio')} ({origin})"
        body.append(f'<line class="thr" x1="{at(tx, 1)}" y1="{y}" x2="{at(tx, 1)}" y2="{y + 24}"><title>{e(tip)}</title></line>')
        body.append(_text(tx + 4, y + 2, f"target {percent(thr)}"))
        body.append(_text(left + bar_w + 6, y + 16, "peak" + (f" {value(peak_gbps, 'GB/s')}" if peak_gbps and key == "dram_bw_util" else "")))
    return _svg(left + bar_w + 220, 8 + len(rows) * 52, body, "bandwidth and occupancy against targets"), notes


SERIES_TARGETS = {"dram_bw_util": 0.85, "sm_occupancy": 0.80}
# A bit mask (which throttle reasons) has no meaningful line: ``throttle`` (0/1) is drawn instead.
SERIES_SKIPPED = {"throttle_reasons"}


def series_unit(metric: str) -> tuple[str, float, bool]:
    """How a sampled series is shown: (unit, factor from the stored value, fixed 0-100 % scale)."""
    if metric in SERIES_TARGETS or metric.endswith("_util") or metric.endswith("_ratio"):
        return "%", 100.0, True
    if metric == "throttle":
        return "throttled (1 = yes)", 1.0, False
    for suffix, unit, factor in (("_mhz", "MHz", 1.0), ("_w", "W", 1.0), ("_c", "°C", 1.0),
                                 ("_bytes_per_s", "GB/s", 1e-9), ("_gbps", "GB/s", 1.0), ("_bytes", "GB", 1e-9)):
        if metric.endswith(suffix):
            return unit, factor, False
    return "", 1.0, False


def nvml_charts(analysis: Analysis, findings: Sequence[Finding]) -> list[str]:
    """One line chart per sampled metric: a time axis in seconds from the run start (the first
    sample), the value in its unit, the profiled steps shaded, targets on utilisation series.
    A flat series says its value once instead of labelling two equal ends of its axis."""
    s = analysis.profile.samples
    if s.empty:
        return []
    span = analysis.steps.span
    run_start = int(s["time_ns"].min())  # the sampler starts with the program
    out = []
    w, h, left, top = 700.0, 110.0, 78.0, 22.0
    for (metric, source), g in s.groupby(["metric", "source"], sort=True):
        if metric in SERIES_SKIPPED:
            continue
        g = g.sort_values("time_ns")
        t = g["time_ns"].to_numpy(np.int64)
        v = g["value"].to_numpy(float)
        if span is not None:
            # Samplers often run for the whole process: show the profiled steps with as
            # much again on each side, when enough samples fall there.
            margin = max(span[1] - span[0], 50_000_000)
            near = (t >= span[0] - margin) & (t <= span[1] + margin)
            if near.sum() >= 2:
                t, v = t[near], v[near]
        if len(t) < 2 or t[-1] <= t[0]:
            continue
        t, v = _bin_series(t, v, int(w))
        unit, factor, in_percent = series_unit(metric)
        v = v * factor
        finite = v[np.isfinite(v)]
        if finite.size == 0:
            continue
        vmin, vmax = float(finite.min()), float(finite.max())
        flat = vmax - vmin <= 1e-9 * max(abs(vmax), 1.0)
        if in_percent:
            lo, hi = 0.0, 100.0
        elif flat:
            lo, hi = vmin - 1.0, vmax + 1.0  # the line in the middle of the plot
        else:
            lo, hi = vmin, vmax
        s0, s1 = (t[0] - run_start) / 1e9, (t[-1] - run_start) / 1e9  # seconds from the run start
        X = lambda sec: left + (sec - s0) / (s1 - s0) * w  # noqa: E731 - one-line coordinate maps
        Y = lambda val: top + (1 - (np.clip(val, lo, hi) - lo) / (hi - lo)) * h  # noqa: E731
        sec = (t - run_start) / 1e9
        body = [_line(left, top + h, left + w, top + h, "axis"), _line(left, top, left, top + h, "axis")]
        suffix = f" {unit}" if unit and not unit.startswith("throttled") else ""
        if flat:
            body.append(_text(left - 6, Y(vmin) + 4, f"{tick(vmin)}{suffix}", "end"))
        else:
            for mark in _ticks(lo, hi, 4):
                body += _y_tick(left, Y(mark), top + h, f"{tick(mark)}{suffix}")
        for mark in _ticks(s0, s1, 8):
            body += [_line(X(mark), top + h, X(mark), top + h + 4, "axis"), _text(X(mark), top + h + 15, f"{tick(mark)} s", "middle")]
        if span is not None:
            a, b = X(max((span[0] - run_start) / 1e9, s0)), X(min((span[1] - run_start) / 1e9, s1))
            if b > a:
                body.append(f'<rect x="{at(a, 1)}" y="{top}" width="{at(b - a, 1)}" height="{h}" fill="#eaeef2"><title>profiled steps</title></rect>')
        pts = " ".join(f"{at(X(px), 1)},{at(Y(py), 1)}" for px, py in zip(sec, v) if np.isfinite(py))
        body.append(f'<polyline class="series" points="{pts}"><title>{e(metric)} ({e(source)})</title></polyline>')
        if metric in SERIES_TARGETS:
            rule = "dram-bandwidth" if metric == "dram_bw_util" else "sm-occupancy"
            thr, _ = _threshold(findings, rule, SERIES_TARGETS[metric])
            body += [_line(left, Y(thr * 100), left + w, Y(thr * 100), "thr"), _text(left + w + 4, Y(thr * 100) + 4, f"target {percent(thr)}")]
        said = "flat (its value is on the axis)" if flat else f"{num(vmin)} to {num(vmax)}{suffix}"
        body.append(_text(left, 14, f"{metric} [{source}]{f' in {unit}' if unit else ''}: {said}; {len(g)} samples, shaded = profiled steps"))
        body.append(_text(left + w / 2, top + h + 30, "seconds from the run start (the first NVML sample)", "middle"))
        out.append(_svg(left + w + 90, top + h + 38, body, f"{metric} over time"))
    return out


def step_latency_chart(analysis: Analysis) -> str | None:
    """Every step's latency in order, the start of the steady state marked, p50 and p99 drawn.

    From the light pass when the run had one (the untraced times the metrics use); from the
    trace's critical path otherwise, where every step is used (a trace cannot tell warm-up);
    for a CPU-only trace (no step has GPU work, so no critical path), from its traced step
    ranges, with the p50 and p99 the CPU section states (:meth:`CpuView.latency`)."""
    light = analysis.light
    p50, p99 = analysis.value("step_latency_ms_p50"), analysis.value("step_latency_ms_p99")
    if light is not None and light.count >= 2:
        ms = steady.critical_path_ns(light.host_start_ns, light.gpu_end_ns, light.threads).astype(np.float64) / 1e6
        first_steady, where = light.steady_start, "light pass, no tracer"
    elif analysis.cpu is not None:
        ms, first_steady, where = analysis.cpu.step_ms, 0, "CPU trace: traced step ranges, every step used"
        p50, p99 = analysis.cpu.latency()["p50"], analysis.cpu.latency()["p99"]
    else:
        ms = analysis.timeline.critical_path_ms()
        first_steady, where = 0, "trace: every step used, a trace alone cannot tell warm-up"
    if ms.size < 2:
        return None
    w, h, left, top = 760.0, 150.0, 78.0, 22.0
    hi = float(max(ms.max(), p99 or 0.0)) * 1.05
    X = lambda i: left + i / (ms.size - 1) * w  # noqa: E731 - one-line coordinate maps
    Y = lambda val: top + (1 - val / hi) * h  # noqa: E731
    body = [_line(left, top + h, left + w, top + h, "axis"), _line(left, top, left, top + h, "axis")]
    for t in _ticks(0.0, hi, 5):
        body += _y_tick(left, Y(t), top + h, f"{tick(t)} ms")
    for t in _ticks(0.0, ms.size - 1, 10):
        if float(t).is_integer():
            body += [_line(X(t), top + h, X(t), top + h + 4, "axis"), _text(X(t), top + h + 15, tick(t), "middle")]
    if first_steady > 0:
        xs = X(first_steady)
        body.append(f'<rect x="{at(left, 1)}" y="{top}" width="{at(xs - left, 1)}" height="{h}" fill="#eaeef2"><title>warm-up: steps 0 to {first_steady - 1}</title></rect>')
        body += [_line(xs, top, xs, top + h, "link"), _text(xs + 4, top + 12, f"steady from step {first_steady}")]
    pts = " ".join(f"{at(X(i), 1)},{at(Y(val), 1)}" for i, val in enumerate(ms))
    body.append(f'<polyline class="series" points="{pts}"><title>step latency per step ({e(where)})</title></polyline>')
    body += [f'<circle cx="{at(X(i), 1)}" cy="{at(Y(val), 1)}" r="2" fill="#4e79a7"><title>step {i}: {value(val, "ms")}</title></circle>'
             for i, val in enumerate(ms) if ms.size <= 200]
    label_y: list[float] = []
    for name, val in (("p50", p50), ("p99", p99)):
        if val is None:
            continue
        y = Y(val)
        ly = y + 4
        if any(abs(ly - other) < 15 for other in label_y):  # p99 next to p50: its label goes above
            ly = min(label_y) - 15
        label_y.append(ly)
        body += [_line(left, y, left + w, y, "thr"), _text(left + w + 4, ly, f"{name} {value(val, 'ms')}")]
    body.append(_text(left, 14, f"step latency per step ({where}); {ms.size} steps"))
    body.append(_text(left + w / 2, top + h + 30, "step", "middle"))
    return _svg(left + w + 110, top + h + 38, body, "step latency per step")


def raw_traces(analysis: Analysis) -> list[tuple[str, str]]:
    """The raw traces behind this report, each with how to open it in a timeline viewer."""
    origin = analysis.profile.origin
    if not origin.path:
        return []
    path = Path(origin.path)
    perfetto = "Perfetto: open https://ui.perfetto.dev and drop this file on it (it reads Kineto JSON, gzipped or not)"
    if origin.bundle is not None:
        rank = Rank.from_json(origin.bundle.rank or {}).rank
        raw = path / RAW / (f"rank{rank}" if rank is not None else "")
        kineto, reps = [raw / TORCH_TRACE], [raw / NSYS_REP]
    elif origin.source == "kineto":
        return [(str(path), perfetto)]
    elif origin.source == "nsys":
        # An SQLite export: the viewer opens the .nsys-rep it came from (beside it, when it is there).
        kineto, reps = [], [path] if path.name.endswith(".nsys-rep") else [Path(str(path).split(".sqlite")[0] + ".nsys-rep")]
        if not reps[0].exists():
            return [(str(path), "an Nsight Systems export: open the .nsys-rep it was exported from with nsys-ui FILE.nsys-rep")]
    else:
        return []
    return ([(str(q), perfetto) for q in kineto if q.exists()]
            + [(str(q), f"Nsight Systems: nsys-ui {shlex.quote(str(q))}") for q in reps if q.exists()])


def _bin_series(t: np.ndarray, v: np.ndarray, bins: int) -> tuple[np.ndarray, np.ndarray]:
    """At most ``bins`` points: the mean of the samples in each time bin (a line cannot show more)."""
    if len(t) <= bins:
        return t, v
    edges = np.linspace(t[0], t[-1], bins + 1)
    idx = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, bins - 1)
    counts = np.bincount(idx, minlength=bins)
    sums = np.bincount(idx, weights=np.nan_to_num(v), minlength=bins)
    keep = counts > 0
    centers = ((edges[:-1] + edges[1:]) / 2).astype(np.int64)
    return centers[keep], sums[keep] / counts[keep]


# --- findings -------------------------------------------------------------------------------

def _evidence_html(ev: Evidence) -> str:
    parts = [f"<h4>{e(words.title(ev))}</h4>"]
    if ev.rows:
        parts.append("<table><tr>" + "".join(f"<th>{e(c)}</th>" for c in ev.columns) + "</tr>")
        parts += ["<tr>" + "".join(f"<td>{e(common.cell(v))}</td>" for v in row) + "</tr>" for row in ev.rows]
        parts.append("</table>")
    note = words.note(ev)
    if note:
        parts.append(f'<p class="muted">{e(note)}</p>')
    return "".join(parts)


def _finding_html(f: Finding, analysis: Analysis, shown_before: dict[tuple[str, str], str]) -> str:
    out = [f'<section class="finding sev-{e(f.severity)}" id="finding-{e(f.rule_id)}">',
           f"<h3>{f.rank}. <code>{e(f.rule_id)}</code> — {e(f.title)} <span class=\"muted\">[{e(f.severity)}]</span></h3>",
           f"<p><b>{e(common.measured(f))}</b> — target {e(common.condition(f))} <span class=\"muted\">({e(f.threshold_origin)})</span></p>"]
    if common.context_values(f):
        out.append(f'<p class="muted">{e(common.context_values(f))}</p>')
    if common.finding_reason(f):
        out.append(f'<p class="muted">{e(common.finding_reason(f))}</p>')
    est = common.estimate_line(f, analysis)
    if est:
        out.append(f'<p class="est">{e(est)}</p><p class="muted">{e(formula(f.estimate))}</p>')
    if common.no_estimate_line(f):
        out.append(f'<p class="muted">{e(common.no_estimate_line(f))}</p>')
    if common.overlap_line(f):
        out.append(f'<p class="muted">{e(common.overlap_line(f))}</p>')
    out.append(f'<p class="muted">Cite: {e(f.citation)}</p>')
    for ev in f.evidence:
        owner = shown_before.get((f.rule_id, ev.kind))
        out.append(f'<p class="muted">{e(words.title(ev))}: see <a href="#finding-{e(owner)}">{e(owner)}</a></p>' if owner else _evidence_html(ev))
    if f.remediation:
        out.append("<h4>Fix</h4><ol>" + "".join(f"<li>{e(s)}</li>" for s in f.remediation.steps) + "</ol>")
        if f.remediation.snippet:
            out.append(f"<pre><code>{escape(clean_block(f.remediation.snippet), quote=True)}</code></pre>")
    out.append("</section>")
    return "".join(out)


def _cards(analysis: Analysis) -> str:
    keys = ["steps", "step_latency_ms_p50", "step_latency_ms_p99", "steps_per_s", "tokens_per_s", "gpu_idle_ratio",
            "launches_per_step", "kernels_per_step", "dram_bw_util"]
    cards = []
    for k in keys:
        m = analysis.metrics.get(k)
        if m is not None and m.value is not None:
            cards.append(f'<div class="card"><b>{e(common.fmt_metric(m))}</b><span>{e(k)}</span></div>')
    return '<div class="cards">' + "".join(cards) + "</div>"


def render(findings: Sequence[Finding], analysis: Analysis, packs: Sequence[str] = ()) -> str:
    """The complete HTML document (UTF-8 text)."""
    failing = common.by_status(findings, "fail")
    verdict = common.verdict_line(findings, analysis)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        # No network: a strict policy also proves the page needs nothing from outside.
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
        "script-src 'unsafe-inline'; img-src data: blob:\">",
        f"<title>perfdoctor — {e(analysis.profile.origin.path or 'report')}</title>",
        f"<style>{CSS}</style>",
        f"<script>{ERROR_CAPTURE_JS}</script>",
        "</head><body><main>",
        '<div id="pd-errors" hidden></div>',
        "<h1>perfdoctor report</h1>",
        f'<p class="src">{e(common.source_line(analysis))}</p>',
        f'<p class="muted">Step time: {e(analysis.time_source)}</p>',
        *[f'<p class="muted">{e(line)}</p>' for line in uneven_steps_lines(analysis) + trace_window_lines(analysis)],
        *[f'<p class="muted">{e(line)}</p>' for line in workload_lines(analysis)],
        f'<div class="verdict {common.outcome(findings, analysis)}">{e(verdict)}</div>',
        attribution.html(analysis),
        _cards(analysis),
        '<p class="muted"><span id="pd-status"></span> · <a id="pd-download" download="findings.json" hidden>download findings.json</a></p>',
        "<h2>Timeline</h2>",
        '<p class="legend"><span><i style="background:#4e79a7"></i>kernel</span><span><i style="background:#f28e2b"></i>memcpy</span>'
        '<span><i style="background:#b07aa1"></i>memset</span><span><i style="background:#e15759"></i>GPU idle (bubble)</span>'
        '<span><i style="background:#d1242f;height:2px"></i>sync call</span></p>',
    ]
    overview = timeline_overview(analysis)
    if overview:
        parts += ['<div class="plot">', overview, "</div>",
                  '<p class="muted">Whole steps. Hover for details; sub-pixel kernels are merged (the tooltip gives the count). '
                  "The red lane is the idle share of each pixel column inside the steps' GPU windows.</p>"]
        detail = timeline_detail(analysis)
        if detail:
            parts += ["<h3>Zoomed slice</h3>", '<div class="plot">', detail, "</div>",
                      '<p class="muted">Dashed lines join each launch call to its kernel: a long diagonal is the GPU waiting for the host.</p>']
    else:
        parts.append(f'<p class="muted">No steps with GPU work to draw: {e(analysis.steps.reason or "no steps found")}</p>')
    fam = families_chart(analysis)
    parts += ["<h2>GPU time by kernel family</h2>", f'<div class="plot">{fam}</div>' if fam else '<p class="muted">No GPU activity inside steps.</p>']
    gauge_svg, gauge_notes = gauges(analysis, findings)
    parts += ["<h2>Bandwidth and occupancy</h2>", f'<div class="plot">{gauge_svg}</div>']
    parts += [f'<p class="muted">{e(note)}</p>' for note in gauge_notes]
    latency = step_latency_chart(analysis)
    parts.append("<h2>Step latency</h2>")
    parts.append(f'<div class="plot">{latency}</div>' if latency else '<p class="muted">No latency series to draw: fewer than two steps timed by the light pass, with GPU work, or by the step ranges of a CPU trace.</p>')
    charts = nvml_charts(analysis, findings)
    parts.append("<h2>NVML samples</h2>")
    parts += [f'<div class="plot">{c}</div>' for c in charts] or ['<p class="muted">No NVML samples in this trace (perfdoctor run collects them).</p>']
    traces = raw_traces(analysis)
    if traces:
        parts.append("<h2>Open the raw trace</h2><ul>")
        # The viewers' addresses as text, not links: the page loads and links nothing outside itself.
        parts += [f"<li><code>{e(path)}</code> — {e(how)}</li>" for path, how in traces]
        parts.append("</ul>")
    parts.append("<h2>Findings, ranked by time recoverable per step</h2>")
    shown_before = common.evidence_owner(failing)
    parts += [_finding_html(f, analysis, shown_before) for f in failing] or ["<p>No rule fails.</p>"]
    advice = common.by_status(findings, "advisory")
    if advice:
        parts.append("<h2>Advice</h2>")
        for f in advice:
            parts.append(f'<section class="finding sev-info"><h3><code>{e(f.rule_id)}</code> — {e(f.title)}</h3>'
                         f'<p class="muted">{e(common.context_values(f) or common.measured(f))}</p>'
                         + "".join(_evidence_html(ev) for ev in f.evidence)
                         + ("<ul>" + "".join(f"<li>{e(s)}</li>" for s in f.remediation.steps) + "</ul>" if f.remediation else "")
                         + f'<p class="muted">Cite: {e(f.citation)}</p></section>')
    passed = common.by_status(findings, "pass")
    if passed:
        parts.append("<h2>Passed checks</h2><table><tr><th>rule</th><th>value</th><th>target</th><th>threshold from</th></tr>")
        parts += [f"<tr><td>{e(f.rule_id)}</td><td>{e(common.measured(f))}</td><td>{e(common.condition(f))}</td><td>{e(f.threshold_origin)}</td></tr>" for f in passed]
        parts.append("</table>")
    missing = common.by_status(findings, "not_evaluated")
    if missing:
        parts.append("<h2>Not evaluated</h2><p class=\"muted\">Never counted as passed.</p><table><tr><th>rule</th><th>why / how to collect</th></tr>")
        parts += [f"<tr><td>{e(f.rule_id)}</td><td>not evaluated — {e(common.finding_reason(f))}</td></tr>" for f in missing]
        parts.append("</table>")
    data = finite(document(findings, analysis, packs))  # NaN/inf → null: the page's JSON is strict
    parts += [
        f'<script type="application/json" id="pd-data">{script_json(data)}</script>',
        f"<script>{READY_JS}</script>",
        "</main></body></html>",
    ]
    return "\n".join(parts)
