"""Tables that fit the terminal without breaking a number or a word: the shared fitting of the doctor's,
report's and compare's terminal tables.

Why: rich fits a table to the console by squeezing every column that may wrap, down to one character, so
at 80 columns a label printed one letter per line and a number was cut ("768.6…"). Here each column gets
a width no smaller than its longest number or word (headers wrap between words), the least important
columns are left out when even those widths do not fit (the caller names them in the caption), and a
table whose essential columns alone do not fit is not drawn as a table at all (`fit` returns None; the
caller prints its rows as "key: value" lines).
"""
from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from typing import Callable

from rich.console import Console
from rich.table import Table
from rich.text import Text

# A word longer than this (a 70-character parameter path, an error's file path) folds inside its column
# whatever the column's width, so it does not set the column's least width: a label column sized for it
# would leave room for no figure. Label and op names up to this length stay whole.
LONG_WORD = 24
LONG_WORD_SHARE = 0.4  # and at most this share of the terminal, for a very narrow one


@dataclass
class Col:
    """One column: `head` (words, wrapped between them), its `cells` as printed, whether they are
    `numbers` (right-aligned, never wrapped), and `drop`: 0 never left out, higher left out first."""
    head: str
    cells: list = field(default_factory=list)
    numbers: bool = False
    drop: int = 0
    name: str | None = None  # how the caption names it when left out; default: the header
    whole: bool = False  # text whose words never fold, however long (op names: a known, short vocabulary)

    def words(self) -> list[str]:
        return [w for c in self.cells for w in str(c).split()]

    def least(self, width: int) -> int:
        """The narrowest this column may be: its longest number (or word), its header's longest word."""
        head = max((len(w) for w in self.head.split()), default=1)
        if self.numbers:
            return max([head] + [len(str(c)) for c in self.cells])
        limit = min(LONG_WORD, max(8, int(width * LONG_WORD_SHARE)))
        word = max((len(w) for w in self.words() if self.whole or len(w) <= limit), default=1)
        return max(head, word)

    def natural(self) -> int:
        return max([len(self.head)] + [len(line) for c in self.cells for line in str(c).splitlines() or [""]])


def overhead(n: int, edge: bool) -> int:
    """Borders and padding of a rich table of `n` columns (padding 1 each side; `edge`: outer borders and
    outer padding, else neither)."""
    return (3 * n + 1) if edge else max(3 * n - 3, 0)


def fit(cols: list[Col], width: int, edge: bool = True, **table_kwargs) -> tuple[Table | None, list[str]]:
    """A Table of `cols` no wider than `width`, and the names of the columns left out to get there (the
    highest `drop` first, the rightmost of a rank first). None when the columns that are never left out
    do not fit: the caller prints the rows another way."""
    kept = list(cols)
    left_out: list[Col] = []
    order = sorted((c for c in cols if c.drop), key=lambda c: (-c.drop, -cols.index(c)))
    while sum(c.least(width) for c in kept) + overhead(len(kept), edge) > width:
        if not order:
            return None, [c.name or c.head for c in left_out]
        c = order.pop(0)
        kept.remove(c)
        left_out.append(c)
    widths = [c.least(width) for c in kept]
    spare = width - sum(widths) - overhead(len(kept), edge)
    # the room left goes first to text columns (fewer wrapped labels), the one that needs least first so a
    # short verdict is not wrapped for a long label that would wrap anyway; then to headers (fewer lines)
    for prefer_text in (True, False):
        for i in sorted(range(len(kept)), key=lambda i: kept[i].natural() - widths[i]):
            c = kept[i]
            if spare <= 0 or c.numbers == prefer_text:
                continue
            more = min(spare, c.natural() - widths[i])
            if more > 0:
                widths[i] += more
                spare -= more
    t = Table(show_edge=edge, pad_edge=edge, **table_kwargs)
    for c, w in zip(kept, widths):
        # the header wrapped here, between words: a no_wrap column would otherwise cut it ("mean wa")
        t.add_column("\n".join(textwrap.wrap(c.head, w)), width=w, no_wrap=c.numbers, overflow="fold",
                     justify="right" if c.numbers else "left")
    for i in range(max((len(c.cells) for c in kept), default=0)):
        t.add_row(*(_text(c.cells[i]) for c in kept))
    return t, [c.name or c.head for c in left_out]


def _text(v) -> Text:
    # a Text, never a str: the cells hold user labels, which a str would have read as markup
    return v if isinstance(v, Text) else Text(str(v))


def stacked(cols: list[Col], console: Console, indent: str = "  ") -> None:
    """The rows as "header: value" lines, one block per row: a table too wide for the terminal."""
    for i in range(max((len(c.cells) for c in cols), default=0)):
        for j, c in enumerate(cols):
            v = str(c.cells[i])
            if v:
                console.print(Text(f"{'- ' if j == 0 else indent}{' '.join(c.head.split())}: {v}"),
                              highlight=False, overflow="fold")


def print_fitted(console: Console, cols: list[Col], title: str | None = None,
                 caption: str | Callable[[list[str]], str] | None = None, edge: bool = True, **table_kwargs) -> None:
    """`cols` as a fitted table (or stacked lines) under `title`, then `caption` (or `caption(left_out)`, so
    it explains only the columns shown) with the columns left out named after it, each a left-aligned
    paragraph as wide as the console: a centred caption under a narrow table wrapped into orphan lines."""
    table, left_out = fit(cols, console.width, edge=edge, **table_kwargs)
    if callable(caption):
        caption = caption(left_out)
    if title:
        console.print(Text(title, style="bold"), highlight=False)
    if table is None:
        stacked(cols, console)
    else:
        console.print(table)
    notes = [caption] if caption else []
    if left_out:
        notes.append(f"not shown at this width: {', '.join(left_out)}; --json has every figure.")
    if notes:
        console.print(Text(" ".join(notes), style="dim"), highlight=False)
