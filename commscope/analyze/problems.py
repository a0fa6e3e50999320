"""`loading_problems(trace)`: the loader's problems (Trace.problems) as every output lists them — the
report document's `problems` (analyze.summary) and the doctor's `Diagnosis.problems` (analyze.doctor)
both take this list, so `report --json` and `doctor --json` name the same problems in the same words.
`run_reports(trace)`: likewise, what the run's own files say of ranks that did not complete (`run_reports`
in both documents), kept apart from the problems: a rank that failed is the run's outcome, not a file
commscope could not read.

What several ranks share is one line ("ranks 0-2,4: …", commscope.util.text.grouped_by_rank), at the
place of its first rank's line; other lines keep their order. At a thousand ranks the list stays a few
lines.

Invariants: reads no file; the trace is not modified.
"""
from __future__ import annotations

from commscope.load.frames import Trace
from commscope.util.text import grouped_by_rank


def run_reports(trace: Trace) -> list[str]:
    """What a run directory's own files say of how its ranks ended, where a rank did not complete: its
    status.json status and error, and that its hang watchdog fired, grouped by rank as the problems are.
    These are the run's outcome, not problems reading it: the figures of a rank that failed or hung stop
    where it did, which is why every output lists them beside the problems."""
    lines = []
    statuses = (getattr(trace, "config", None) or {}).get("status") or {}  # a Kineto trace's config has none
    for r in sorted(statuses, key=int):
        st = statuses[r] or {}
        if st.get("status") not in (None, "completed"):
            lines.append(f"rank {r}: {st.get('status')}" + (f": {st['error']}" if st.get("error") else ""))
    config = getattr(trace, "config", None) or {}
    # a rank that left no status while others wrote theirs ended abruptly (SIGKILL, abort, os._exit): often
    # the crash itself, so it is listed with the others; before any rank has ended (a run in progress) no
    # absence says anything, and one the summary says completed is a loading problem (a lost file)
    said = (config.get("summary") or {}).get("ranks") or {}
    if statuses and getattr(trace, "source", None) == "run":
        missing = set(config.get("missing_rank_folders") or [])
        lines += [f"rank {r}: no status.json (it ended without writing one: killed, aborted or os._exit)"
                  for r in range(int(getattr(trace, "world_size", 0) or 0)) if str(r) not in statuses
                  and r not in missing and said.get(str(r)) != "completed"]
    lines += [f"rank {r}: the hang watchdog fired (see rank{r}/watchdog.json)" for r in config.get("watchdog_ranks") or []]
    return grouped_by_rank(lines)


def loading_problems(trace: Trace) -> list[str]:
    """The trace's problems, each as text, with the lines that say the same of several ranks grouped."""
    return grouped_by_rank([str(p) for p in trace.problems])
