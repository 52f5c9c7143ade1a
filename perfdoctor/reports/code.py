"""Source code on a rich console: a fix's snippet in ``analyze``, ``report`` and ``rules explain``."""

from __future__ import annotations

from rich.console import Console, ConsoleOptions, RenderResult
from rich.text import Text


class Code:
    """Python source (a fix's snippet): highlighted on a console that shows colour, plain
    text, the same characters, on one that does not. Highlighting output that goes to a
    pipe or a file would lex the code only to drop its colours, and the lexer's first use
    costs ~0.15 s (pygments compiling its patterns)."""

    def __init__(self, source: str) -> None:
        self.source = source

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if console.color_system is None:
            yield Text(self.source, no_wrap=True, overflow="crop", tab_size=4)  # as Syntax lays it out
        else:
            from rich.syntax import Syntax

            yield Syntax(self.source, "python", theme="ansi_dark", background_color="default")
