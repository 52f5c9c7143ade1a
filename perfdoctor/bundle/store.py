"""A baseline store for CI: named baselines as plain files in a directory the user chooses.

``perfdoctor gate RUN --baseline main`` compares against the newest run recorded under the
name ``main``; ``gate RUN --record main`` records RUN under it when the gate passes (the
main branch keeps its baseline fresh); ``gate RUN --baseline main --accept --reason "..."``
records RUN even though it failed — an accepted regression — so the next run is compared
against it. The store is ``--store DIR`` or ``$PERFDOCTOR_BASELINE_STORE``; in CI, a cached
or artifact directory (docs/ci.md has a GitHub Actions example). Layout::

    STORE/
      main/                          one folder per name ([A-Za-z0-9._-], starting alphanumeric)
        000001-20261201T093000Z/     one recorded run; the highest number is the newest
          record.json                {"schema": "perfdoctor.baseline/1", "name", "sequence",
                                      "recorded_at", "kind": "recorded" | "accepted",
                                      "reason", "source", "run", "previous", "gate"}
          run/  (or run.json.gz, run.sqlite ...)   a copy of the bundle or trace file

Nothing else is kept: deleting a numbered folder forgets that baseline, and the next newest
one is used. Entries are created with an exclusive ``mkdir``, so two concurrent recordings
get two numbers, never one half-written folder.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

from perfdoctor.errors import UsageError
from perfdoctor.io import read_json, write_json
from perfdoctor.text import clean

ENV = "PERFDOCTOR_BASELINE_STORE"
SCHEMA = "perfdoctor.baseline/1"
RECORD = "record.json"
# fullmatch, not match with "$": "$" also matches before a final newline ("main\n").
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
# Six digits at least: the sequence widens past 999,999 and those entries must still count.
_ENTRY = re.compile(r"(\d{6,})-\d{8}T\d{6}Z")


def _sequence(entry: Path) -> int:
    return int(entry.name.split("-", 1)[0])


def check_name(name: str) -> str:
    """A baseline name, or a UsageError saying what a name may be."""
    if not _NAME.fullmatch(name):
        raise UsageError(f"baseline name {name!r}: use letters, digits, '.', '_' and '-', starting with a letter or digit (at most 100)")
    return name


def check_store(store: Path) -> Path:
    """The store directory (created if missing), or a UsageError when it cannot be one."""
    if store.exists() and not store.is_dir():
        raise UsageError(f"baseline store {store}: not a directory")
    try:
        store.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"baseline store {store}: cannot create it ({exc.strerror or exc})") from None
    return store


def entries(store: Path, name: str) -> list[Path]:
    """The recorded entries under ``name``, oldest first (empty when there are none)."""
    folder = store / check_name(name)
    if not folder.is_dir():
        return []
    found = [p for p in folder.iterdir() if p.is_dir() and _ENTRY.fullmatch(p.name) and (p / RECORD).is_file()]
    return sorted(found, key=_sequence)


def read_record(entry: Path) -> dict[str, Any]:
    """An entry's record (a regular file, capped, nesting bounded), its ``run`` a path that
    stays inside the entry: a record edited to point at ``/`` or ``../../elsewhere`` is refused."""
    doc = read_json(entry / RECORD)
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or not isinstance(doc.get("run"), str):
        raise UsageError(f"{entry / RECORD}: not a {SCHEMA} record")
    real_entry = os.path.realpath(entry)
    real_run = os.path.realpath(entry / doc["run"])
    if os.path.commonpath([real_entry, real_run]) != real_entry or real_run == real_entry:
        raise UsageError(f"{entry / RECORD}: its run {clean(doc['run'])!r} is outside the entry; refusing a baseline from elsewhere")
    return doc


def resolve(spec: str, store: Path | None) -> tuple[Path, dict[str, Any] | None]:
    """``--baseline SPEC``: with a store, a NAME recorded there is the newest run under it
    (a ``./main`` folder cannot stand in for the stored ``main``; a SPEC that is both a
    stored name and an existing path is an error); an existing file or bundle is used as it
    is. Returns (the run's path, its record or None)."""
    path = Path(spec)
    stored = store is not None and store.is_dir() and _NAME.fullmatch(spec) is not None and bool(entries(store, spec))
    if stored and os.path.lexists(path):
        raise UsageError(f"--baseline {clean(spec)}: both a baseline in the store {clean(store)} and a path here; "
                         f"give the path as ./{clean(spec)} elsewhere or rename it")
    if os.path.lexists(path) and not stored:
        return path, None
    if store is None:
        raise UsageError(f"--baseline {clean(spec)}: no such file or directory (to name a stored baseline, give --store DIR or set ${ENV})")
    check_name(spec)
    if not store.is_dir():
        raise UsageError(f"--baseline {spec}: baseline store {clean(store)} {'is not a directory' if store.exists() else 'does not exist'}")
    found = entries(store, spec)
    if not found:
        raise UsageError(f"--baseline {spec}: nothing recorded under that name in {clean(store)} (record one with: perfdoctor gate RUN --record {spec})")
    record = read_record(found[-1])
    run = found[-1] / record["run"]
    if not run.exists():
        raise UsageError(f"--baseline {spec}: {clean(run)} is missing from the store")
    return run, record


def check_apart(store: Path, inputs: list[Path]) -> None:
    """Refuse a store that is, lies inside, or contains one of the inputs: recording a
    bundle into a store inside it copies the bundle into itself, level after level."""
    real_store = os.path.realpath(store)
    for item in inputs:
        real = os.path.realpath(item)
        if os.path.commonpath([real_store, real]) in (real_store, real):
            raise UsageError(f"baseline store {clean(store)}: is, is inside, or contains the input {clean(item)}; "
                             "keep the store apart from the runs")


def record_run(store: Path, name: str, run: Path, kind: str, reason: str | None, gate: dict[str, Any]) -> Path:
    """Copy ``run`` (a bundle directory or a trace file) into the store as the newest entry
    under ``name``; returns the entry's folder."""
    check_name(name)
    folder = check_store(store) / name
    previous = entries(store, name)
    taken = [_sequence(p) for p in folder.iterdir() if _ENTRY.fullmatch(p.name)] if folder.is_dir() else []
    sequence = max(taken, default=0) + 1
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    try:
        folder.mkdir(exist_ok=True)
        while True:  # an exclusive mkdir: a concurrent recording takes the next number
            entry = folder / f"{sequence:06d}-{stamp}"
            try:
                entry.mkdir()
                break
            except FileExistsError:
                sequence += 1
        target = "run" if run.is_dir() else "run" + "".join(run.suffixes[-2:])
        if run.is_dir():
            shutil.copytree(run, entry / target, symlinks=True)
        else:
            shutil.copy2(run, entry / target)
        doc = {
            "schema": SCHEMA, "name": name, "sequence": sequence,
            "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "kind": kind, "reason": reason, "source": str(run.resolve()), "run": target,
            "previous": previous[-1].name if previous else None, "gate": gate,
        }
        write_json(entry / RECORD, doc)  # the record last: an entry without it is not listed
    except OSError as exc:
        raise UsageError(f"baseline store {store}: cannot record {run} ({exc.strerror or exc})") from None
    return entry
