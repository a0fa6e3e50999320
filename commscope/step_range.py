"""The one grammar for a range of training steps on the command line (`--steps`, `--profile`).

`A:B` means steps A ≤ step < B (Python's slice convention, as Trace.select_steps); `A` means just step A;
`A:` and `:B` leave that end open. Errors are UserErrors naming the option, so every command reports a
bad range the same way.
"""
from __future__ import annotations

from commscope.errors import UserError


def parse_step_range(text: str | None, option: str) -> tuple[int | None, int | None] | None:
    """`text` → (A, B) with None for an open end; None when `text` is None or empty."""
    if text is None or not text.strip():
        return None
    lo, sep, hi = text.partition(":")
    try:
        a = int(lo) if lo.strip() else None
        b = (int(hi) if hi.strip() else None) if sep else (a + 1 if a is not None else None)
    except ValueError:
        raise UserError(f"{option} must look like A:B, A, A: or :B with integer steps, got {text!r}") from None
    if a is not None and b is not None and b <= a:
        raise UserError(f"{option} {text}: selects no step (A:B means A <= step < B)")
    return (a, b)
