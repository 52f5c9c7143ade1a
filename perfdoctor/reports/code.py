"""Source code on a rich console: a fix's snippet in ``analyze``, ``report`` and ``rules explain``."""

from __future__ import annotations

import textwrap

from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.text import Text


class Code:
    """Python source (a fix's snippet), indented by ``indent`` spaces: highlighted on a
    console that shows colour, plain text, the same characters, on one that does not.
    Highlighting output that goes to a pipe or a file would lex the code only to drop its
    colours, and the lexer's first use costs ~0.15 s (pygments compiling its patterns).

    Code is never wrapped nor cropped, whatever the console's width: a copied line that
    lost its end (``fullgraph=T``) is broken code. A line wider than the terminal is laid
    out at its own width and the terminal folds it on screen; the characters stay whole.
    Print it with ``crop=False`` (a console's print crops at its width by default) and not
    inside a ``Padding`` (which crops to its width too): the indent is done here."""

    def __init__(self, source: str, indent: int = 0) -> None:
        self.source = textwrap.indent(source.rstrip("\n"), " " * indent) if indent else source.rstrip("\n")

    def width(self) -> int:
        return max((len(line.expandtabs(4)) for line in self.source.splitlines()), default=0)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement(self.width(), self.width())

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        wide = options.update(width=max(options.max_width, self.width()), no_wrap=True, overflow="ignore")
        if console.color_system is None:
            text = Text(self.source, no_wrap=True, overflow="ignore", tab_size=4)
            yield from console.render(text, wide)
        else:
            from rich.syntax import Syntax

            syntax = Syntax(self.source, "python", theme="ansi_dark", background_color="default", tab_size=4)
            yield from console.render(syntax, wide)
