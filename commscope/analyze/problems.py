"""`loading_problems(trace)`: the loader's problems (Trace.problems) as every output lists them — the
report document's `problems` (analyze.summary) and the doctor's `Diagnosis.problems` (analyze.doctor)
both take this list, so `report --json` and `doctor --json` name the same problems in the same words.

What several ranks share is one line ("ranks 0-2,4: …", commscope.util.text.grouped_by_rank), at the
place of its first rank's line; other lines keep their order. At a thousand ranks the list stays a few
lines.

Invariants: reads no file; the trace is not modified.
"""
from __future__ import annotations

from commscope.load.frames import Trace
from commscope.util.text import grouped_by_rank


def loading_problems(trace: Trace) -> list[str]:
    """The trace's problems, each as text, with the lines that say the same of several ranks grouped."""
    return grouped_by_rank([str(p) for p in trace.problems])
