"""Text a person reads, made once: one sanitiser for untrusted text, and one formatter
per kind of number.

**Untrusted text**: names and paths that come from traces, bundles, rule packs or the
command line, on their way to a terminal, Markdown, HTML, JUnit or GitHub Actions.

:func:`clean` is the base every output uses: it removes terminal escape sequences (CSI,
OSC, DCS, ...), C0 and C1 control characters and Unicode bidi overrides, makes line
breaks visible (``⏎``) so a name never starts a new line of output, and shows the other
invisible format characters (tag characters, zero-width spaces) as ``<U+XXXX>`` and the
bytes of a path that is not UTF-8 as ``\\xNN``. The per-format
functions add what that format needs on top:

- :func:`rich` — also escapes rich markup (``[bold]``, ``[link=...]``, ``[/]``);
- :func:`github_data` / :func:`github_property` — workflow-command escaping
  (``%``, ``\\r``, ``\\n``; and ``:``, ``,`` in properties), as the Actions docs require;
- :func:`xml` — text XML 1.0 can carry (JUnit).

Markdown and HTML escaping belong to the reports: :mod:`perfdoctor.reports.format`
(``md_cell``, ``md_text``, ``html``), applied to :func:`clean`-ed text.

**Numbers**: every output (analyze's terminal, report's Markdown and HTML, diff, gate's
messages in the terminal, JSON and JUnit, the demo) and every sentence below them (the
analysis' notes, the rules' evidence and estimates, compare's reasons, ``run``'s progress)
words a number through one of :func:`value`, :func:`num`, :func:`count`,
:func:`duration_us`, :func:`elapsed`, :func:`percent`, :func:`relative`, :func:`nbytes`,
:func:`times`, :func:`ratio` / :func:`interval`, :func:`setting` and :func:`tick`, so one
number reads the same everywhere (``memory_bubble_ratio`` is ``91.7 %`` in each,
``kernels_per_step`` ``863``, a step ``25.1 ms``). They live here, on the bottom floor, and
not in reports/, because analysis/, rules/ and compare/ (below reports/) write sentences
with numbers too. The numeric JSON values stay numbers; only words come from here
(``tests/test_number_text.py`` finds a number formatted anywhere else).
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

NEWLINE_MARK = "⏎"

# ESC-introduced sequences: CSI (ESC [ ... final), OSC/DCS/SOS/PM/APC (ESC ] ... BEL or
# ST), and two-character escapes (ESC + one char). The 8-bit C1 forms (\x9b CSI, \x9d OSC)
# are covered the same way.
_ESCAPES = re.compile(
    r"""
    (?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]?      # CSI
  | (?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])                 # OSC, DCS, SOS, PM, APC ...
      .*?(?:\x07|\x1b\\|\x9c|$)                             # ... up to BEL or ST
  | \x1b[\x20-\x7e]?                                        # other two-char escapes, lone ESC
    """,
    re.VERBOSE | re.DOTALL,
)
_LINE_BREAKS = re.compile(r"\r\n|[\r\n\x0b\x0c\x85\u2028\u2029]")
# C0 (but tab), DEL, C1; bidi embeddings/overrides/isolates and marks.
_BIDI = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_CONTROLS = re.compile("[\x00-\x08\x0e-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escape_invisible(text: str) -> str:
    """Invisible format characters left after the controls are gone (Unicode category Cf:
    tag characters U+E0000-U+E007F that carry hidden text, zero-width spaces, the soft
    hyphen ...) shown as ``<U+XXXX>``, so hidden text is seen rather than silently kept
    or silently dropped. Lone surrogates (category Cs: the bytes of a path that is not
    UTF-8, as Python decodes it) no output could encode: such a byte shows as ``\\xNN``."""
    if all(unicodedata.category(ch) not in _HIDDEN for ch in text):
        return text
    return "".join(_shown(ch) if unicodedata.category(ch) in _HIDDEN else ch for ch in text)


_HIDDEN = ("Cf", "Cs")


def _shown(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"<U+{code:04X}>"


def clean(value: Any) -> str:
    """``value`` as inert text for any output: no escape sequences, control characters or
    bidi overrides; line breaks shown as ``⏎``; tabs as spaces."""
    text = value if isinstance(value, str) else str(value)
    if text.isprintable():  # the common case, fast: nothing to do
        return text
    text = _ESCAPES.sub("", text)
    text = _LINE_BREAKS.sub(NEWLINE_MARK, text)
    text = text.replace("\t", " ")
    return _escape_invisible(_CONTROLS.sub("", text))


def clean_block(value: Any) -> str:
    """Multi-line text (a code snippet): each line :func:`clean`-ed, the line breaks kept."""
    text = value if isinstance(value, str) else str(value)
    return "\n".join(clean(line) for line in text.replace("\r\n", "\n").split("\n"))


def rich(value: Any) -> str:
    """Clean text safe to interpolate into a rich markup string."""
    from rich.markup import escape

    return escape(clean(value))


def github_data(value: Any) -> str:
    """The message part of a workflow command (``::error title=...::MESSAGE``)."""
    text = value if isinstance(value, str) else str(value)
    text = _escape_invisible(re.sub("[\x00-\x08\x0b-\x0c\x0e-\x1f\x7f-\x9f]", "", _BIDI.sub("", _ESCAPES.sub("", text))))
    # Line breaks stay in the message, encoded: the runner decodes %0A back to a newline
    # inside the annotation, and no raw newline can start a new workflow command.
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def github_property(value: Any) -> str:
    """A property value of a workflow command (``title=VALUE``)."""
    return github_data(value).replace(":", "%3A").replace(",", "%2C")


def xml(value: Any) -> str:
    """Text XML 1.0 can carry (it forbids most control characters): like :func:`clean`, but
    a stray control character shows as ``?`` rather than vanishing."""
    text = value if isinstance(value, str) else str(value)
    text = _LINE_BREAKS.sub(NEWLINE_MARK, _ESCAPES.sub("", text)).replace("\t", " ")
    return _escape_invisible(re.sub("[\x00-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]", "?", _BIDI.sub("", text)))


def clean_deep(obj: Any) -> Any:
    """``obj`` with every string (keys too) of nested dicts and lists :func:`clean`-ed."""
    if isinstance(obj, str):
        return clean(obj)
    if isinstance(obj, dict):
        return {clean_deep(k) if isinstance(k, str) else k: clean_deep(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean_deep(v) for v in obj]
    return obj


# Numbers as words (the module docstring's second half). The JSON values stay numbers.


def num(v: float, signed: bool = False, digits: int = 3) -> str:
    """3 significant digits, no exponent for everyday magnitudes: ``0.25``, ``37.4``, ``1,980``;
    ``signed``: ``+0.5``, ``-1,980``; ``digits=4`` where a 4th digit decides (a change
    against a budget): ``2.004``."""
    sign = "+" if signed else ""
    # Whole numbers from 10 ** (digits - 1) up: ".3g" would print 999.6 as "1e+03".
    return f"{v:{sign},.0f}" if abs(v) >= 10 ** (digits - 1) else f"{v:{sign}.{digits}g}"


def count(x: float, signed: bool = False) -> str:
    """A count: whole as ``863`` or ``4,590``; a per-step mean that is not whole keeps its
    fraction (``863.5``, ``0.02``: a rare sync must not read as 0). ``signed``: ``+0``, ``-1``."""
    sign = "+" if signed else ""
    if abs(x - round(x)) < 1e-9:
        return f"{x:{sign},.0f}"
    return f"{x:{sign},.1f}" if abs(x) >= 100 else f"{x:{sign}.3g}"


def duration_us(us: float, signed: bool = False) -> str:
    """A duration given in µs, in µs below a millisecond: ``4 µs``, ``12.3 ms``;
    ``signed``: ``+12.3 ms``, ``-4 µs``."""
    text = f"{num(abs(us) / 1e3)} ms" if abs(us) >= 1000 else f"{num(abs(us))} µs"
    return (("+" if us > 0 else "-") + text) if signed and us else text


def elapsed(seconds: float) -> str:
    """Wall-clock time as a person waits it, in whole seconds: ``42 s``, ``3 min 5 s``."""
    s = int(round(seconds))
    return f"{s} s" if s < 60 else f"{s // 60} min {s % 60} s"


def percent(x: float) -> str:
    """A share or a ratio in percent: ``91.7 %``, ``50.0 %``."""
    # below 1 % the digits that matter are after the point: 0.0042 is 0.42 %, not 0.4 %
    return f"{x * 100:.3g} %" if abs(x) < 0.01 and x != 0 else f"{x * 100:.1f} %"


def relative(x: float, places: int = 1) -> str:
    """A relative change, signed, in percent: ``+3.1%``, ``-75.2%``. A budget's check shows
    ``places=2``: a +5.04 % rise that fails a +5 % budget must not read ``+5.0%``."""
    return f"{x:+.{places}%}"


def nbytes(v: float, binary: bool = False) -> str:
    """Bytes in decimal units: ``1.2 GB``, ``512 B``; ``binary`` for what is sized in powers
    of two (a GPU's memory, the input cap): ``2 GiB``, ``150 GiB``."""
    units = (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)) if binary else (("GB", 1e9), ("MB", 1e6), ("kB", 1e3))
    for suffix, scale in units:
        if abs(v) >= scale:
            return f"{v / scale:.3g} {suffix}"
    return f"{v:.0f} B"


def times(x: float) -> str:
    """How many times one amount is another, 3 significant digits: ``3.2x``, ``1.27x``."""
    return f"{num(x)}x"


def ratio(x: float) -> str:
    """An after/before ratio near 1, three decimals: ``1.013``. A 0.1 % move shows, and a
    budget's bound reads on the same grid (``1.050``), where 3 significant digits would
    round 1.0049 to ``1``."""
    return f"{x:.3f}"


def interval(r: float, low: float, high: float, level: float) -> str:
    """An after/before ratio and its confidence interval: ``1.013x, 95% CI 1.002–1.024``."""
    return f"{ratio(r)}x, {level:.0%} CI {ratio(low)}–{ratio(high)}"


def setting(v: float) -> str:
    """A number someone set (a rule's threshold or parameter, a budget, an option, a
    constant) with the digits it was given: ``0.05``, ``1.5``, ``2``. Not rounded as a
    measurement is: a speed-up of 1.0625 reads ``1.0625``, not ``1.06``."""
    return f"{v:g}"


def tick(v: float) -> str:
    """An axis tick's label: the digits that tell round neighbours apart (``12.25``, ``0.125``,
    ``12,345``), where :func:`num`'s 3 would print ticks 12.25 and 12.5 apart as ``12.2``
    and ``12.5``."""
    if v == 0:
        return "0"
    return f"{v:,.0f}" if abs(v) >= 1e4 else f"{v:.4g}" if abs(v) >= 1e-3 else f"{v:.2g}"


def value(v: float | None, unit: str) -> str:
    """A metric's value in its unit, for people: ratios as %, multiples (``x``) as ``1.1x``,
    counts whole, bytes and rates scaled, absent as ``—``."""
    if v is None:
        return "—"
    v = float(v)
    if unit == "ratio":
        return percent(v)
    if unit == "bytes":
        return nbytes(v)
    if unit == "flag":
        return "yes" if v else "no"
    if unit == "count":
        return count(v)
    if unit == "1/s":
        return f"{num(v)} /s"
    if unit == "x":
        return times(v)
    return f"{num(v)} {unit}".rstrip()
