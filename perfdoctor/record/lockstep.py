"""Two programs taking turns step by step on one CPU: ``compare-programs --lockstep``.

Why: on a shared CPU runner the speed of a core changes with what runs beside it on the
host. On the 2-core CI machine a core alternated between two speeds 1.4x apart, each
lasting seconds, independently of the other core (docs/ci.md, "Lockstep"). Processes run
one after the other then land in different states, so per-process medians of one program
spread by 13 % and five interleaved pairs cannot separate a 20 % change. Running the
two programs at once, pinned to the same CPU and taking turns at each step — A's step, B's
step, A's step ... — puts both under the same state: what the machine does to one step it
does to the other's ~10 ms later, and the ratio of their medians keeps only the change.

How: two pipes, one per direction. A program waits to read a byte (its turn) before each
outermost step and writes one to the other program after it, so the wait lies outside the
timed step. The parent hands A the first turn and then closes its own copies, so when one
program ends (or dies) the other reads end-of-file and runs on alone; a turn that does not
come within :data:`PATIENCE_S` ends the lockstep the same way. Turns are taken by the
thread that ran the first step, at perfdoctor.region / perfdoctor.step and record_function
or NVTX ranges (nesting counted, so a range inside a step never waits); a program whose only
steps are module calls runs free, and its results say so.

For programs the CPU paces. Two GPU programs in lockstep would still share the GPU, and an
asynchronous step ends on the host before its GPU work does: compare those with the
ordinary interleaved processes.
"""

from __future__ import annotations

import os
import select
import threading
from typing import Any

from perfdoctor.text import setting

PATIENCE_S = 120.0  # the longest wait for a turn before running free (the other program hangs)
TOKEN = b"t"


def pick_cpu() -> int:
    """The CPU both programs run on: the highest-numbered one this process may use (CPU 0
    usually takes the machine's interrupts)."""
    return max(os.sched_getaffinity(0))


class Pair:
    """The parent's side: the pipes of one lockstep pair, and each side's config entry."""

    def __init__(self, cpu: int) -> None:
        a_read, b_write = os.pipe()  # B -> A: A's turns
        b_read, a_write = os.pipe()  # A -> B: B's turns
        os.write(b_write, TOKEN)  # A goes first
        self.configs = (
            {"read_fd": a_read, "write_fd": a_write, "cpu": cpu, "side": "A"},
            {"read_fd": b_read, "write_fd": b_write, "cpu": cpu, "side": "B"},
        )

    @staticmethod
    def fds(config: dict[str, Any]) -> tuple[int, int]:
        return config["read_fd"], config["write_fd"]


class Turns:
    """The program's side: wait for the turn before an outermost step, pass it after."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.read_fd: int | None = int(config["read_fd"])
        self.write_fd: int | None = int(config["write_fd"])
        self.cpu = int(config["cpu"])
        self.side = str(config.get("side", ""))
        self.depth = 0
        self.thread: int | None = None  # the thread that took the first turn
        self.turns = 0  # steps that waited for their turn
        self.free: str | None = None  # why the program runs free now, once it does
        self.pid = os.getpid()
        # A forked child of the program must not take turns with the parent's pipes.
        os.register_at_fork(after_in_child=lambda: self.stop("a forked child of the program"))

    def pin(self) -> None:
        """Run on the pair's CPU (before torch starts its thread pool)."""
        try:
            os.sched_setaffinity(0, {self.cpu})
        except OSError as exc:
            self.stop(f"could not pin to CPU {self.cpu}: {exc.strerror or exc}")

    def acquire(self) -> None:
        """Before a step starts (before its clock is read)."""
        if self.read_fd is None or not self._mine():
            return
        self.depth += 1
        if self.depth > 1:
            return
        try:
            ready, _, _ = select.select([self.read_fd], [], [], PATIENCE_S)
            got = os.read(self.read_fd, 1) if ready else None
        except OSError as exc:
            self.stop(f"the turn pipe failed: {exc.strerror or exc}")
            return
        if got is None:
            self.stop(f"no turn within {setting(PATIENCE_S)} s: the other program stopped stepping")
        elif not got:
            self.stop("the other program ended")
        else:
            self.turns += 1

    def release(self) -> None:
        """After a step ended (after its clock was read)."""
        if self.read_fd is None or not self._mine() or self.depth == 0:
            return
        self.depth -= 1
        if self.depth == 0:
            try:
                os.write(self.write_fd, TOKEN)  # type: ignore[arg-type]
            except OSError:  # the other program ended: nobody waits for this turn
                self.stop("the other program ended")

    def _mine(self) -> bool:
        ident = threading.get_ident()
        if self.thread is None:
            self.thread = ident
        return ident == self.thread and os.getpid() == self.pid

    def stop(self, why: str) -> None:
        """Run free from now on: close this side's pipes so the other program does too."""
        if self.free is None:
            self.free = why
        for fd in (self.read_fd, self.write_fd):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.read_fd = self.write_fd = None

    def summary(self) -> dict[str, Any]:
        """For the pass's results: how many steps took turns, and when the lockstep ended."""
        return {"side": self.side, "cpu": self.cpu, "turns": self.turns, "free_after": self.free}
