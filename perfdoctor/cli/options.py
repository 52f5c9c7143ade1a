"""The options several commands share, declared once: one name, one meaning, one help.

A command that needs a different wording for one of them (``--step`` "for both runs" in
diff and gate) passes only the words that differ (``scope=``); the type, bounds and
validation stay here.

``--rules`` means the same everywhere: a rule pack file layered on the built-in seed pack,
repeatable; the word ``seed`` names the built-in pack itself (always loaded), so
``--rules seed`` works in every command (gate needs some ``--rules`` to check rules at all).
"""

from __future__ import annotations

import math
from typing import Any

import typer


def finite_option(value: Any) -> Any:
    """typer callback: a number option must be finite (NaN and infinities are refused, exit 2)."""
    if value is None:
        return value
    values = value if isinstance(value, (list, tuple)) else [value]
    for v in values:
        if isinstance(v, float) and not math.isfinite(v):
            raise typer.BadParameter(f"{v!r} is not a finite number")
    return value


STEP_DEFAULT = "Default: ProfilerStep#N, else the most frequent repeated range with GPU work."


def step(scope: str = "", default: str = STEP_DEFAULT) -> Any:
    """``--step NAME|GLOB``: the step range."""
    where = f" {scope}" if scope else ""
    return typer.Option(None, "--step", help=f"Step range name or glob{where} (e.g. 'decode_step', 'step*'). {default}".rstrip())


def tokens_per_step(scope: str = "", declared: str = "overrides what the workload declared") -> Any:
    """``--tokens-per-step N``: tokens one step produces (finite, >= 0)."""
    where = f", {scope}" if scope else ""
    return typer.Option(
        None, "--tokens-per-step", min=0, callback=finite_option,
        help=f"Tokens one step produces{where} (enables tokens_per_s); {declared}.",
    )


WORKLOAD = typer.Option(
    None, "--workload", help="training or inference: overrides the trace's own classification (it decides which rules apply).",
)

RULES = typer.Option(
    [], "--rules", metavar="PACK",
    help="Rule pack (TOML) layered on the built-in seed pack; repeatable, later packs override rules by id. "
    "'seed' names the built-in pack itself.",
)
THRESHOLD = typer.Option([], "--threshold", help="Override a threshold: RULE_ID=VALUE (e.g. dram-bandwidth=0.8); repeatable.")


def json_out(what: str) -> Any:
    """``--json PATH``: write ``what`` here (strict JSON: NaN and infinities are null)."""
    return typer.Option(None, "--json", metavar="PATH", help=f"Write {what} here ('-': stdout, and the report goes to stderr).")


NOISE_FLOOR_HELP = (
    "Run-to-run noise floor in percent: a significant median shift within this factor either way is "
    "'no significant change'. Default: 30 for traced timings (two identical H200 processes differed by up "
    "to 1.28x), 5 for the light timing pass (steps paced by the GPU; host-paced steps can differ more "
    "between processes: measure yours)."
)


def noise_floor(effect: str = "") -> Any:
    """``--noise-floor PCT`` (finite, >= 0; percent)."""
    help_text = NOISE_FLOOR_HELP if not effect else NOISE_FLOOR_HELP.replace("is 'no significant change'", effect)
    return typer.Option(None, "--noise-floor", min=0, callback=finite_option, metavar="PCT", help=help_text)


def fraction(pct: float | None) -> float | None:
    """``--noise-floor`` in percent → the relative floor diff and gate take."""
    return None if pct is None else pct / 100.0

REPEAT = typer.Option(
    1, "--repeat", min=1, max=100, metavar="N",
    help="Run the light timing pass N times, each a fresh process (the traced passes run once): diff and gate "
    "then judge step latency over processes, the unit that is independent. 5 is a good start (docs/ci.md).",
)
