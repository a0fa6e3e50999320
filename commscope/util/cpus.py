"""`usable_cores()`: the CPU cores this process may run on. The launcher compares it with the ranks it
starts, and each rank records it in meta.json, so a reader of the run can tell an oversubscribed CPU run
(more ranks on a host than cores) from one whose timings are the program's."""
from __future__ import annotations

import os


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity set where the OS tells it, else the machine's)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
