"""The rich Console every commscope command prints its terminal output through.

Why: labels, paths, op and kernel names, group names and error messages come from the user's data, and
a rich Console reads every str it renders (a printed line, a table cell, a title or caption) as markup
and emoji codes: a label "[/a]" raises MarkupError (a traceback instead of the report), "[bold]x" turns
bold, "enc:x:proj" prints ❌. Escaping at each call site misses the next one; a Console with markup and
emoji replacement off renders every string as the characters it holds, whoever prints it. commscope's own
styles are therefore set with `style=` or rich.text.Text, never with markup.

For the same reason the console writes control characters of the text it renders as escapes
(commscope.util.text.escape_controls): an ESC sequence in a label would otherwise reach the terminal
and clear the screen or retitle the window. Only text segments are escaped; rich's own control segments
(cursor moves of a live display) and its styles, which it writes apart from the text, are left alone.
"""
from __future__ import annotations

from typing import Iterable

from rich.console import Console, RenderableType
from rich.segment import Segment

from commscope.util.text import escape_controls


class _PlainConsole(Console):
    def render(self, renderable: RenderableType, options=None) -> Iterable[Segment]:
        for seg in super().render(renderable, options):
            if seg.control is None and not seg.text.isprintable() and seg.text != "\n":
                seg = Segment(escape_controls(seg.text, keep_newlines=True), seg.style)
            yield seg


def plain_console(**kwargs) -> Console:
    """A Console (rich.console.Console's keyword arguments) that takes no str for markup or emoji codes
    and writes the control characters of what it renders as escapes."""
    return _PlainConsole(markup=False, emoji=False, **kwargs)


def at_least(width: int) -> Console:
    """A plain_console of the terminal's width, `width` when the terminal is narrower (the compare and plan
    tables, whose numbers need that much)."""
    return plain_console(width=max(plain_console().width, width))
