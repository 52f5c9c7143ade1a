"""Step declarations: how a workload tells perfdoctor what one step does.

A zero-work range named ``perfdoctor.declare step=decode_step tokens=1 bytes=2538737664``
says that every ``decode_step`` produces one token and must read that many bytes; the
analysis turns step times into ``tokens_per_s`` and the model-based ``dram_bw_util``. It
works in any tracer that records range names. No quotes: Kineto writes range names into its
JSON unescaped (torch 2.13 leaves a ``"`` and the trace no longer parses; 2.11 turns it
into ``'``), so the older quoted form ``{'step':'decode_step','tokens':1}`` is read too.

This module imports nothing heavy: the user's program imports it through ``perfdoctor.api``.
"""

from __future__ import annotations

import re

DECLARE_PREFIX = "perfdoctor.declare "
_FIELD = re.compile(r"""['"]?(step|tokens|bytes)['"]?\s*[:=]\s*['"]?([^'",}\s]+)""")


def declaration_name(step: str, tokens: float | None = None, bytes_per_step: float | None = None) -> str:
    """The range name that declares what one step named ``step`` does."""
    parts = [f"step={step}"]
    if tokens is not None:
        parts.append(f"tokens={tokens:g}")
    if bytes_per_step is not None:
        parts.append(f"bytes={int(bytes_per_step)}")
    return DECLARE_PREFIX + " ".join(parts)


def parse_declaration(name: str) -> tuple[str, dict[str, float]] | None:
    """``(step, {"tokens": .., "bytes": ..})`` from a declaration range's name, else None."""
    if not name.startswith(DECLARE_PREFIX):
        return None
    fields = dict(_FIELD.findall(name[len(DECLARE_PREFIX):]))
    step = fields.pop("step", None)
    if not step:
        return None
    values = {}
    for key, raw in fields.items():
        try:
            values[key] = float(raw)
        except ValueError:
            continue
    return step, values
