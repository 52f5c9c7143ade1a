"""The terminal report of a multi-rank job: one row per rank, the straggler, the findings.

What ``perfdoctor analyze`` prints for a multi-rank bundle or a folder of per-rank traces
(:mod:`perfdoctor.analysis.ranks`): the rank table (step time from the light pass and traced,
busy time, communication and its exposed part, overlap, collectives), the straggler with
its delay and the collective that waits for it, which rules fail on which ranks, then the
ranked findings of the rank that waits most (where communication problems show).
"""

from __future__ import annotations

from typing import Callable

from rich.console import Console
from rich.table import Table
from rich.text import Text

from perfdoctor.analysis.ranks import FULL_VIEW_RANKS
from perfdoctor.pipeline import Diagnosis
from perfdoctor.text import clean, count, num, percent, value


def _cell(v: object, word: Callable[[float], str] = num) -> str:
    """A table cell: ``word`` of the number, or ``—`` where there is none (None, NaN)."""
    return "—" if v is None or (isinstance(v, float) and v != v) else word(float(v))  # type: ignore[arg-type]


def rank_table(d: Diagnosis) -> Table:
    view = d.cross_rank
    title = (f"Ranks ({len(view.per_step)} of world size {view.world_size if view.world_size is not None else 'unknown'}, {view.source}); "
             "ms per step, medians: step (light pass), traced step, busy = non-communication kernel time")
    t = Table(title=title, title_justify="left")
    for col in ("rank", "device", "step", "traced", "busy", "comm", "exposed", "overlap", "colls", "µs/coll"):
        t.add_column(col, justify="left" if col == "device" else "right")
    straggler = view.straggler.rank if view.straggler is not None else None
    rows = view.table()
    if len(rows) > FULL_VIEW_RANKS:  # thousands of rows read as nothing (and take ~1 ms each): the ranks analysed in full
        rows = rows[rows["rank"].isin([r.rank for r in view.runs])]
        t.caption = f"the {len(rows)} ranks analysed in full; the other {count(len(view.per_step) - len(rows))} are in --json (\"ranks\")"
        t.caption_justify = "left"
    for row in rows.to_dict("records"):
        style = "bold yellow" if row["rank"] == straggler else None
        t.add_row(
            str(row["rank"]), clean(str(row["device"] or "—")), _cell(row["step_ms_p50"]), _cell(row["traced_step_ms_p50"]),
            _cell(row["busy_ms_p50"]), _cell(row["comm_ms_p50"]), _cell(row["exposed_comm_ms_p50"]),
            _cell(row["comm_overlap"], percent), _cell(row["collectives_per_step"], count), _cell(row["mean_collective_us"]), style=style,
        )
    return t


def straggler_lines(d: Diagnosis) -> list[str]:
    view, s = d.cross_rank, d.cross_rank.straggler
    sources = sorted(set(view.comm_source.values()))
    lines = [f"communication from: {clean('; '.join(sources))}"]
    if s is None:
        lines.append(f"straggler: none measured ({clean(view.straggler_reason or '')})")
        return lines
    lines.append(
        f"straggler: rank {s.rank}, works {value(s.delay_ms, 'ms')} longer per step than the others "
        f"({value(s.busy_ms, 'ms')} vs {value(s.others_busy_ms, 'ms')} busy; {percent(s.delay_ratio)} of the step; "
        f"the busiest rank in {percent(s.step_share)} of the steps)"
    )
    if s.collective is not None:
        c = s.collective
        who = f"rank{'s' if len(c.waiting_ranks) > 1 else ''} {', '.join(str(r) for r in c.waiting_ranks)}"
        if len(c.waiting_ranks) > 12:  # a job of thousands of ranks: their count, not a list
            who = f"{count(len(c.waiting_ranks))} ranks" + (" (every other)" if len(c.waiting_ranks) == len(view.per_step) - 1 else "")
        lines.append(
            f"waits for it: {clean(c.name)} (#{c.index + 1} of {c.per_step} collectives per step) takes {value(c.wait_ms, 'ms')} longer "
            f"on {who} than on rank {s.rank}"
        )
    return lines


def failing(d: Diagnosis) -> dict[str, list[int]]:
    """Per failing rule id, the ranks on which it fails."""
    out: dict[str, list[int]] = {}
    for rank, found in d.rank_findings.items():
        for f in found:
            if f.status == "fail":
                out.setdefault(f.rule_id, []).append(rank)
    return out


def render_ranks(d: Diagnosis, console: Console) -> None:
    """Everything ``perfdoctor analyze`` prints for several ranks (``d``: their
    :class:`perfdoctor.pipeline.Diagnosis`, whose own findings are the report rank's)."""
    from perfdoctor.reports.terminal import findings_renderable

    view = d.cross_rank
    console.print(rank_table(d))
    for line in straggler_lines(d):
        console.print(Text(line))
    fails = failing(d)
    if len(view.runs) < len(view.per_step):
        console.print(Text(f"rules run on {len(view.runs)} of the {len(view.per_step)} ranks (ranks {', '.join(str(r.rank) for r in view.runs)}): "
                           "one per group of ranks with the same trace structure, the first, the straggler, the report rank, the fastest and "
                           "the slowest; the other ranks' per-step figures are measured on their own times, with their group's steps and kernel classes"))
    if fails:
        console.print(Text("fails on: " + "; ".join(f"{rule} (rank{'s' if len(r) > 1 else ''} {', '.join(map(str, r))})" for rule, r in fails.items())))
    console.print(Text(""))
    console.print(Text(f"Findings of rank {d.rank} (the rank with the most exposed communication)", style="bold"))
    console.print(findings_renderable(d.findings, d.analysis))
    for w in view.warnings:
        console.print(Text(f"warning: {clean(w)}", style="yellow"))
