"""What ``perfdoctor run`` was asked to do: :class:`RunOptions`, and the collectors it knows."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from perfdoctor.errors import UsageError
from perfdoctor.record import launch

COLLECTORS = ("torch", "nvml", "nsys", "ncu")
DEFAULT_WARMUP = 1  # steps skipped before the traced window when no light pass found the steady state
# What a torch trace begun with the program (no step known) may add to the process's peak
# memory before it is stopped (bootstrap Session.watch_trace): on the 2-CPU machine a 2 s loop
# of small CPU ops traced whole (2.1M events) took a 48 s torch pass and 1.4 GB of JSON; cut
# there, after 1 s of it, 16 s
DEFAULT_TRACE_BUDGET_MB = 512


@dataclass
class RunOptions:
    """What ``perfdoctor run`` was asked to do (validated by :func:`options_from_cli`)."""

    target: list[str]  # ["script.py", *args] or ["-m", "module", *args]
    collect: list[str] | None = None  # None: every available collector
    light: bool = True
    warmup: int | None = None  # None: the light pass's steady-state start (DEFAULT_WARMUP without it)
    steps: int = 10  # 0: every step after the warm-up
    step: str | None = None
    step_fn: str | None = None
    out: Path = Path("perfdoctor-runs")
    name: str | None = None
    ncu_steps: int = 1
    ncu_kernels: int = 2000
    nvml_interval_ms: int = 50
    quiet: bool = False
    tokens_per_step: float | None = None
    ranks: launch.Launch | None = None  # a torchrun job: every rank under the bootstrap (perfdoctor.record.launch)
    timeout_s: float | None = None  # a pass still running after this long is stopped (a hung rank)
    # a pass's program is stopped after this long, as planned (a server, a long training); the
    # traced passes stop it once their window is traced
    duration_s: float | None = None
    trace_budget_mb: int = DEFAULT_TRACE_BUDGET_MB  # 0: a trace begun with the program runs to its end


def parse_collect(text: str | None) -> list[str] | None:
    if text is None:
        return None
    names = [c.strip() for c in text.split(",") if c.strip()]
    unknown = [c for c in names if c not in COLLECTORS]
    if unknown or not names:
        raise UsageError(f"--collect: unknown collector {', '.join(unknown) or repr(text)}; choose from {','.join(COLLECTORS)}")
    return names
