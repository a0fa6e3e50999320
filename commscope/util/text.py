"""Text that can be written out whatever the file system's names hold: `printable(s)`.

Python decodes a file name that is not valid UTF-8 with surrogateescape (the byte 0xff becomes the lone
surrogate U+DCFF), and such a string cannot be encoded as UTF-8: a page, a JSON document or a terminal
line that contains it fails to write. `printable` shows each such byte as `\\xff` (and any other lone
surrogate as `\\udXXX`), so a name prints as its bytes read, and every other character is kept.

Every renderer that writes a path into an output goes through it (reports.page for the whole HTML page,
the commands for the paths they print).

`escape_controls(s)`: control characters written as escapes (ESC as `\x1b`, a newline as `\n`). Labels,
names and paths come from the user's data; printed raw, an ESC sequence in a label clears the user's
screen or retitles the terminal, and a newline splits a one-line message. The terminal's console and the
error and warning lines go through it.
"""
from __future__ import annotations

import os
import re
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")
# C0 and C1 controls, DEL, and the Unicode line and paragraph separators (a terminal breaks the line there)
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_CONTROL_BUT_NEWLINE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029]")


def _escaped(m: re.Match) -> str:
    return m.group().encode("unicode_escape").decode("ascii")


def escape_controls(s: str, keep_newlines: bool = False) -> str:
    """`s` with its control characters written as escapes (`\x1b`, `\n`); `keep_newlines`: a newline stays
    one (a rendered table's line breaks)."""
    return (_CONTROL_BUT_NEWLINE if keep_newlines else _CONTROL).sub(_escaped, s)


def _shown(m: re.Match) -> str:
    c = ord(m.group())
    return f"\\x{c - 0xDC00:02x}" if 0xDC80 <= c <= 0xDCFF else f"\\u{c:04x}"


def printable(s: str | os.PathLike) -> str:
    """`s` (a string or path) as text that encodes as UTF-8: undecodable bytes of a file name as `\\xNN`."""
    text = os.fspath(s) if isinstance(s, os.PathLike) else s
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    return _SURROGATE.sub(_shown, text)


def counted(n: Any, noun: str) -> str:
    """`1 rank`, `2 ranks`, `? ranks` (n unknown): a count with its noun in the right number."""
    try:
        k = int(n)
    except (TypeError, ValueError):
        return f"? {noun}s"
    return f"{k} {noun}" + ("" if k == 1 else "s")


# A whole number as a user writes it, on a command line or in an environment variable: ASCII digits with
# an optional sign (int() also takes "1_0", fullwidth and other scripts' digits, which read as something
# else there)
_WHOLE = re.compile(r"\s*[-+]?[0-9]+\s*")


def is_whole_number(text: str) -> bool:
    return _WHOLE.fullmatch(text) is not None


def steps_said(lo: int, hi: int) -> str:
    """`step 3`, or `steps 3–7` for the inclusive range [lo, hi]: every sentence that names a range of
    steps, on the terminal and the page, says it so."""
    return f"step {lo}" if lo == hi else f"steps {lo}–{hi}"


_RANK_LINE = re.compile(r"rank (\d+): (.*)", re.S)


def grouped_by_rank(lines: list[str], most: int = 16) -> list[str]:
    """Per-rank lines ("rank 3: failed: …") that say the same of several ranks as one line ("ranks 0-2,4:
    failed: …"), at the place of the first; the rank's own folder in a path (`rank3/`) counts as the same
    text (`rank<N>/`). Other lines stay as they are, in order: at a thousand ranks a list of problems
    stays a few lines."""
    from commscope.util.ranges import int_ranges

    groups: dict[str, list[int]] = {}
    order: list[str | tuple[str]] = []
    for line in lines:
        m = _RANK_LINE.fullmatch(line)
        if m is None:
            order.append((line,))
            continue
        rank = int(m.group(1))
        text = m.group(2).replace(f"rank{rank}/", "rank<N>/")
        if text not in groups:
            groups[text] = []
            order.append(text)
        groups[text].append(rank)
    out = []
    for item in order:
        if isinstance(item, tuple):
            out.append(item[0])
            continue
        ranks = groups[item]
        if len(ranks) == 1:
            out.append(f"rank {ranks[0]}: " + item.replace("rank<N>/", f"rank{ranks[0]}/"))
        else:
            out.append(f"ranks {int_ranges(ranks, most=most)}: {item}")
    return out
