"""The one parser of a range of training steps: the command line's `--steps` and `--profile`, and the
recording API's profile window.

`A:B` means steps A ≤ step < B (Python's slice convention, as Trace.select_steps); `A` means just step A;
`A:` and `:B` leave that end open; `:` selects nothing out, as no range. A closed range (`closed=True`,
the profiler window, which is exported when its last step ends) needs both ends and a first step ≥ 0, and
may also be given as a tuple `(first, stop)`. Errors are UserErrors naming the option, so every caller reports a bad range the same way.
"""
from __future__ import annotations

from commscope.errors import UserError
from commscope.util.text import is_whole_number


def parse_step_range(spec: str | tuple[int, int] | None, option: str, *, closed: bool = False
                     ) -> tuple[int | None, int | None] | None:
    """`spec` → (A, B) with None for an open end; None when `spec` is None or empty. With `closed`, both
    ends are ints and 0 <= A < B."""
    if isinstance(spec, str) or spec is None:
        window = _parse_text(spec, option, closed)
        if not closed and window == (None, None):
            return None  # ":" leaves both ends open: every step and what lies outside them, as no range
        if not closed or window is None:
            return window
        if None in window:
            raise UserError(f"{option} needs both ends of the window (like 5:8 or 5), got {spec!r}")
        first, stop = window
    else:
        first, stop = (int(x) for x in spec)
    if first < 0 or stop <= first:
        raise UserError(f"{option} must be a window START:STOP with 0 <= START < STOP, got {first}:{stop}")
    return first, stop


def _parse_text(text: str | None, option: str, closed: bool = False) -> tuple[int | None, int | None] | None:
    if text is None or not text.strip():
        return None
    lo, sep, hi = text.partition(":")
    if any(part.strip() and not is_whole_number(part) for part in (lo, hi)):
        forms = "A:B or A" if closed else "A:B, A, A: or :B"  # a closed window takes no open end
        raise UserError(f"{option} must look like {forms} with integer steps, got {text!r}")
    a = int(lo) if lo.strip() else None
    b = (int(hi) if hi.strip() else None) if sep else (a + 1 if a is not None else None)
    if a is not None and b is not None and b <= a:
        raise UserError(f"{option} {text}: selects no step (A:B means A <= step < B)")
    return (a, b)
