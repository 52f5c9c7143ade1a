"""What ``perfdoctor run`` says while a pass runs: steps done, time elapsed, and an estimate
of the time left, on stderr (a spinner on a terminal, a line every :data:`PERIOD_S` seconds
in a log). The steps are the bootstrap's tick bytes (:meth:`perfdoctor.record.runner.Runner.run_pass`);
the estimate starts from the light pass's: every pass runs the same program, so it runs the
steps the light pass saw, and takes at least as long; once steps end, at the pace this pass
has shown (:func:`time_left_s`)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from perfdoctor.bundle.protocol import LightPass
from perfdoctor.text import elapsed

PERIOD_S = 10.0  # a progress line this often when stderr is a log (CI): often enough to see it move
PERIOD_ENV = "PERFDOCTOR_PROGRESS_S"  # another period, in seconds (a test's short program)
# A rank still running this long after another rank's program ended is named (once a pass):
# ranks of one job end within a few seconds of each other, and one blocked in a collective
# that a rank which left never joins waits forever (the DDP tutorial's destroy_process_group
# on gloo, torch 2.13: ~1 run in 3 under the profiler on the 2-core VM)
STRAGGLER_S = 30.0
STRAGGLER_ENV = "PERFDOCTOR_STRAGGLER_S"  # another wait, in seconds (a test's short program)


@dataclass(frozen=True)
class Expected:
    """What the light pass saw: how many steps the program runs, how long one took, and how
    long the whole pass took (start-up included)."""

    steps: int
    step_s: float
    total_s: float
    limit_s: float | None = None  # --duration: the pass ends by then whatever its steps


PACE_WINDOW_S = 5.0  # the pace is that of the last few seconds of ticks: a stall (a tracer starting) passes


@dataclass
class Ticks:
    """Steps done in a pass as the ticks arrive (a reader thread adds, the display reads):
    the count, and (seconds into the pass, count) at each batch of the last
    :data:`PACE_WINDOW_S` seconds, so that the pace leaves out the program's start-up and
    any stall behind it. A tick is one occurrence of the step's range; ``per`` of them make a
    step where the light pass found them in groups (``light_pass.marks_per_step``: CleanRL's
    PPO, 4 optimizer steps per iteration, ticked 24 for its 6 steps)."""

    per: int = 1
    marks: int = 0
    recent: list[tuple[float, int]] = field(default_factory=list)

    @property
    def done(self) -> int:
        return self.marks // self.per

    def add(self, n: int, at_s: float) -> None:
        self.marks += n
        self.recent = [(t, d) for t, d in self.recent if t >= at_s - PACE_WINDOW_S] + [(at_s, self.done)]

    def pace_s(self) -> float | None:
        """Seconds per step over the recent batches; None with fewer than two."""
        if len(self.recent) < 2:
            return None
        (t0, d0), (t1, d1) = self.recent[0], self.recent[-1]
        return (t1 - t0) / (d1 - d0) if d1 > d0 else None


@dataclass
class Window:
    """A traced pass's window in steps, ``opens`` to ``closes`` (the step after which the
    pass stops the program), and the ticks of the steps done."""

    ticks: Ticks
    opens: int
    closes: int

    def under_way(self) -> bool:
        """A step was seen, and the window is open and not yet closed."""
        return self.ticks.marks > 0 and self.opens <= self.ticks.done < self.closes


def time_left_s(ticks: Ticks, elapsed_s: float, expected: Expected | None) -> float | None:
    """Seconds left in a pass ``elapsed_s`` in: the steps left at the recent pace (a tracer
    slows every step alike); with a single batch of ticks, at the light pass's step time;
    before any tick, the light pass's whole time less the time gone. None without a light
    pass to go by, or past its steps or its time. Never past ``limit_s``."""
    if expected is None or expected.steps <= 0 or ticks.done >= expected.steps:
        return None
    if not ticks.recent:
        left = expected.total_s - elapsed_s
    else:
        pace = ticks.pace_s()
        left = (expected.steps - ticks.done) * (pace if pace is not None else expected.step_s)
    if expected.limit_s is not None:
        left = min(left, expected.limit_s - elapsed_s)
    return left if left > 0 else None


def line(name: str, ticks: Ticks, elapsed_s: float, expected: Expected | None) -> str:
    """``torch pass: 12 of 40 steps, 9 s elapsed, about 21 s left``."""
    of = f" of {expected.steps}" if expected is not None and expected.steps > 0 else ""
    steps = f"{ticks.done}{of} steps, " if ticks.done or of else ""
    left = time_left_s(ticks, elapsed_s, expected)
    eta = f", about {elapsed(left)} left" if left is not None else ""
    return f"{name} pass: {steps}{elapsed(elapsed_s)} elapsed{eta}"


def _seconds(env: str, default: float) -> float:
    """``$env`` when it is a positive number of seconds, else ``default``."""
    try:
        v = float(os.environ.get(env, ""))
    except ValueError:
        return default
    return v if v > 0 else default


def period_s() -> float:
    """:data:`PERIOD_S`, or ``$PERFDOCTOR_PROGRESS_S`` when it is a positive number."""
    return _seconds(PERIOD_ENV, PERIOD_S)


def straggler_s() -> float:
    """:data:`STRAGGLER_S`, or ``$PERFDOCTOR_STRAGGLER_S`` when it is a positive number."""
    return _seconds(STRAGGLER_ENV, STRAGGLER_S)


def straggler_note(running: list[int], ended: list[int], after_s: float) -> str:
    """What to say of a multi-rank job whose ranks ``running`` still run ``after_s`` seconds
    after the programs of ranks ``ended`` ended (``running`` empty: every rank's did, and the
    job has not exited)."""
    def ranks(ks: list[int]) -> str:
        return f"rank{'s' if len(ks) > 1 else ''} {', '.join(map(str, ks))}"

    stop = ("Ctrl-C stops the job and keeps the bundle (torchrun kills a rank that does not stop within 30 s); "
            "--timeout S stops a pass by itself")
    if not running:
        return (f"every rank's program ended {elapsed(after_s)} ago and the job is still running: a rank stuck in its exit "
                f"(a process group torn down while another rank still used it). {stop}")
    return (f"{ranks(running)} still running {elapsed(after_s)} after {ranks(ended)} ended: a rank waiting in a collective for "
            f"a rank that has left waits forever (destroy_process_group on one rank while another still runs a collective, or a "
            f"rank that left its loop early). {stop}")


def expected_of(light: LightPass | None, total_s: float | None, until: int | None = None,
                limit_s: float | None = None) -> Expected | None:
    """The light pass's summary in the manifest (``light_pass``) and its duration as what
    later passes expect; None without them. --duration: a traced pass that stops the program
    after its window runs ``until`` steps at most, and no pass runs past ``limit_s``."""
    ms = sorted((light and light.step_latency_ms) or [])
    steps = int((light and light.steps_seen) or 0)
    steps = min(steps, until) if until else steps
    return Expected(steps, ms[len(ms) // 2] / 1e3, total_s, limit_s) if ms and steps and total_s else None
