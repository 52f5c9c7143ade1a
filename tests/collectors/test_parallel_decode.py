"""The Kineto loader decoding a trace in several processes (issue 15) reads exactly what one
process reads: the same tables, dtypes, row order and meta, on every fixture trace, and on
a trace whose cut between spans is a false one (a "},{" inside a kernel name)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pandas as pd
import pytest

from conftest import FIXTURES
from perfdoctor.collectors import forked, kineto_events, torch_profiler
from perfdoctor.profile import Profile

TRACES = sorted(FIXTURES.glob("*.kineto.json.gz")) + sorted((FIXTURES / "wild").glob("*.kineto.json.gz"))


def assert_same(a: Profile, b: Profile) -> None:
    for table in ("activities", "calls", "ranges"):
        x, y = getattr(a, table), getattr(b, table)
        pd.testing.assert_frame_equal(x, y, check_exact=True, obj=table)
        assert list(x.dtypes) == list(y.dtypes)
    assert a.origin == b.origin
    assert [list(v) for v in vars(a.origin).values() if isinstance(v, dict)] == [list(v) for v in vars(b.origin).values() if isinstance(v, dict)]
    assert a.device == b.device


def forks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the children the loader starts (the parallel path really ran)."""
    started: list[int] = []
    real = forked.Child.__init__

    def counted(self: forked.Child, fn) -> None:
        real(self, fn)
        started.append(self.pid)

    monkeypatch.setattr(forked.Child, "__init__", counted)
    return started


@pytest.mark.parametrize("trace", TRACES, ids=lambda t: t.name)
def test_several_processes_read_what_one_reads(trace: Path, monkeypatch: pytest.MonkeyPatch):
    one = torch_profiler.load(trace, processes=1)
    started = forks(monkeypatch)
    for n in (2, 3):
        assert_same(one, torch_profiler.load(trace, processes=n))
    assert len(started) == 1 + 2  # each span after the first in a child


def test_a_false_cut_falls_back_to_one_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A kernel whose name holds "},{" just after the middle of the file, where the array
    is cut in two: the first span cannot end there, so the loader decodes again in one
    process — the same Profile, the odd name read as it is."""
    doc = json.loads(gzip.decompress((FIXTURES / "wild" / "h200-train.kineto.json.gz").read_bytes()))
    events = doc["traceEvents"]
    rest = len(json.dumps(doc))
    odd = {**next(e for e in events if e.get("cat") == "kernel"), "name": "x" * (2 * rest) + "},{" + "y" * 10}
    doc["traceEvents"] = events[: len(events) // 2] + [odd] + events[len(events) // 2 :]
    raw = json.dumps(doc).encode()
    path = tmp_path / "trace.json"
    path.write_bytes(raw)
    (_, stop), _ = kineto_events.array_slices(raw, "traceEvents").spans(2)
    assert stop == raw.find(b"},{yyy") + 1  # the cut is the one in the name
    started = forks(monkeypatch)
    two = torch_profiler.load(path, processes=2)
    assert len(started) == 1  # the parallel decode ran, failed, and was redone in one process
    assert_same(torch_profiler.load(path, processes=1), two)
    assert (two.activities["name"] == odd["name"]).sum() == 1


def test_a_child_that_fails_gives_no_result():
    def boom():
        yield b"sent before it failed"
        raise ValueError("in the child")

    with forked.children([boom, lambda: [b"fine"]]) as (bad, good):
        assert bad.result() is None
        assert good.result() == [b"fine"]


def test_a_child_sends_each_piece_as_it_is_made_and_the_parent_takes_them_without_waiting():
    """The child's first pieces are read while it still works (they do not wait for its
    end), whatever their size (a pipe holds 64 KB), and none is read twice."""
    import os

    go_on = os.pipe()

    def pieces():
        yield b"a" * (1 << 20)
        yield b""
        os.read(go_on[0], 1)  # waits for the parent
        yield b"c" * 3

    with forked.children([pieces]) as (child,):
        early: list[bytes] = []
        while len(early) < 2:
            early += child.ready()
        assert early == [b"a" * (1 << 20), b""]
        assert child.ready() == []
        os.write(go_on[1], b"x")
        assert child.result() == [b"c" * 3]


def test_an_uncollected_child_is_stopped_and_reaped():
    import os
    import time

    with pytest.raises(RuntimeError):
        with forked.children([lambda: [time.sleep(60)]]) as (child,):
            raise RuntimeError("the parent gave up")
    with pytest.raises(ChildProcessError):
        os.waitpid(child.pid, os.WNOHANG)  # already reaped: no zombie left


def test_large_traces_use_the_cpus_small_ones_do_not():
    cpus = forked.usable_cpus()
    assert kineto_events.decode_processes(1 << 20) == 1
    assert kineto_events.decode_processes(10 * kineto_events.PART_BYTES) == min(cpus, kineto_events.MAX_PROCESSES)


def test_tickets_are_handed_out_once_each_and_a_faster_process_takes_more():
    import pickle
    import time

    with forked.Tickets(200) as tickets:

        def slow_child():
            taken = []
            while (i := tickets.take()) is not None:
                taken.append(i)
                time.sleep(0.01)
            yield pickle.dumps(taken)

        with forked.children([slow_child]) as (child,):
            mine = []
            while (i := tickets.take()) is not None:
                mine.append(i)
                time.sleep(0.001)
            theirs = pickle.loads(*child.result())
    assert sorted(mine + theirs) == list(range(200))  # every number once, none twice
    assert len(mine) > 2 * len(theirs) > 0
    with pytest.raises(ValueError):
        forked.Tickets(257)


@pytest.mark.parametrize("trace", [FIXTURES / "wild" / "h200-train.kineto.json.gz", FIXTURES / "h200-llama1b-eager-5steps.kineto.json.gz"], ids=lambda t: t.name)
def test_many_spans_shared_by_two_processes_read_what_one_reads(trace: Path, monkeypatch: pytest.MonkeyPatch):
    one = torch_profiler.load(trace, processes=1)
    size = len(gzip.decompress(trace.read_bytes()))
    monkeypatch.setattr(kineto_events, "SPAN_BYTES", size // 20)
    assert kineto_events.decode_spans(size, 2) == 20
    cut = kineto_events.array_slices
    seen: list[int] = []

    def counting(raw, key):
        sliced = cut(raw, key)
        real = sliced.spans
        sliced.spans = lambda parts: seen.append(len(spans := real(parts))) or spans
        return sliced

    monkeypatch.setattr(kineto_events, "array_slices", counting)
    assert_same(one, torch_profiler.load(trace, processes=2))
    assert seen and seen[0] >= 15  # many more spans than processes (a few cuts may merge)


def test_a_bad_rule_pack_stops_the_decoders_already_started(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """diagnose starts the trace's decoders, then loads the rule packs while they decode
    (collectors.start_loading): a bad pack fails at once, and the children it leaves
    behind are stopped and reaped."""
    import os

    from perfdoctor.errors import UsageError
    from perfdoctor.pipeline import diagnose

    if forked.usable_cpus() < 2:
        pytest.skip("needs two usable CPUs (the decode forks only then)")
    monkeypatch.setattr(kineto_events, "PART_BYTES", 1 << 16)  # a fixture trace counts as large
    started = forks(monkeypatch)
    bad = tmp_path / "bad.toml"
    bad.write_text("[[rule]]\nid = 'x'\n")
    with pytest.raises(UsageError, match="bad.toml:1: rule 'x'"):
        diagnose(FIXTURES / "h200-llama1b-eager-5steps.kineto.json.gz", rules=[bad])
    assert started, "the decoders were not started before the packs loaded"
    for pid in started:
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # already reaped
    d = diagnose(FIXTURES / "h200-llama1b-eager-5steps.kineto.json.gz")
    assert d.analysis.metrics["steps"].value == 5
