"""Lists of ranks or steps as short text: [0, 1, 2, 5, 7, 8] -> "0-2,5,7-8"."""
from __future__ import annotations

from typing import Iterable


def int_ranges(values: Iterable[int | str], sep: str = ",", most: int | None = None, dash: str = "-") -> str:
    """Consecutive runs of the sorted integers as "a-b" (a lone value as "a"; `dash` between), joined by
    `sep`; with `most`, only the first `most` runs and how many more, so a line stays short at any world
    size."""
    runs: list[list[int]] = []
    for v in sorted(int(v) for v in values):
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    shown = runs if most is None else runs[:most]
    text = sep.join(f"{a}" if a == b else f"{a}{dash}{b}" for a, b in shown)
    return text + (f" and {len(runs) - most} more runs" if most is not None and len(runs) > most else "")
