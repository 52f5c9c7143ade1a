"""Build a large Kineto trace by repeating a real one.

Every event of the source trace is copied ``--copies`` times; copy k is shifted in time by
k × (the source's span + a gap) and gets fresh correlation, flow and external ids, so the
result is a long, valid trace of the same program (steps stay distinct, launches still link
to their kernels). Used by ``bench/analyze_vs_hta.py`` to measure parsing at hundreds of MB.

    python bench/make_big_trace.py tests/fixtures/h200-llama1b-eager-5steps.kineto.json.gz \
        --copies 20 -o /tmp/big/trace.json
"""

from __future__ import annotations

import argparse
import copy
import gzip
from pathlib import Path

import msgspec

ID_ARGS = ("correlation", "External id", "Ev Idx")


def repeat(doc: dict, copies: int) -> dict:
    events = doc["traceEvents"]
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    start = min(e["ts"] for e in timed)
    end = max(e["ts"] + e.get("dur", 0) for e in timed)
    shift = float(int((end - start) * 1.01) + 1)  # whole microseconds: tools that round ts to us stay consistent
    id_stride = 1 + max(
        [int(e["args"][k]) for e in events for k in ID_ARGS if isinstance(e.get("args"), dict) and k in e["args"]]
        + [int(e["id"]) for e in events if isinstance(e.get("id"), int)]
    )
    out = [e for e in events if e.get("ph") == "M"]
    body = [e for e in events if e.get("ph") != "M"]
    for k in range(copies):
        for e in body:
            c = copy.copy(e)
            if "ts" in c:
                c["ts"] = e["ts"] + k * shift
            if isinstance(c.get("id"), int):
                c["id"] = e["id"] + k * id_stride
            if isinstance(e.get("args"), dict):
                c["args"] = dict(e["args"])
                for key in ID_ARGS:
                    if key in c["args"]:
                        c["args"][key] = int(c["args"][key]) + k * id_stride
            out.append(c)
    return {**doc, "traceEvents": out}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source", type=Path, help="a Kineto trace (.json or .json.gz)")
    ap.add_argument("--copies", type=int, default=20)
    ap.add_argument("-o", "--out", type=Path, required=True, help="output .json (uncompressed)")
    args = ap.parse_args()
    raw = args.source.read_bytes()
    doc = msgspec.json.decode(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    big = repeat(doc, args.copies)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(msgspec.json.encode(big))
    print(f"{args.out}: {args.out.stat().st_size / 1e6:.0f} MB, {len(big['traceEvents'])} events")


if __name__ == "__main__":
    main()
