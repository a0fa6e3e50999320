"""The rich Console every commscope command prints its terminal output through.

Why: labels, paths, op and kernel names, group names and error messages come from the user's data, and
a rich Console reads every str it renders (a printed line, a table cell, a title or caption) as markup
and emoji codes: a label "[/a]" raises MarkupError (a traceback instead of the report), "[bold]x" turns
bold, "enc:x:proj" prints ❌. Escaping at each call site misses the next one; a Console with markup and
emoji replacement off renders every string as the characters it holds, whoever prints it. commscope's own
styles are therefore set with `style=` or rich.text.Text, never with markup.
"""
from __future__ import annotations

from rich.console import Console


def plain_console(**kwargs) -> Console:
    """A Console (rich.console.Console's keyword arguments) that takes no str for markup or emoji codes."""
    return Console(markup=False, emoji=False, **kwargs)


def at_least(width: int) -> Console:
    """A plain_console of the terminal's width, `width` when the terminal is narrower (the compare and plan
    tables, whose numbers need that much)."""
    return plain_console(width=max(plain_console().width, width))
