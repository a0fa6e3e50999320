"""Finding things in a run directory: its rank folders, its Flight Recorder dumps, and whether a folder
holds a run at all. Without pandas or torch, so the launcher (which watches a running job's folders) uses
the same definitions as the loader.
"""
from __future__ import annotations

import os
import re

from commscope.rundir.schema import CONFIG, FLIGHT_RECORDER_DIR, RANK_DIR, SUMMARY


def rank_dirs(path: str) -> dict[int, str]:
    """rank → folder of every `rank<N>/` in `path`."""
    out = {}
    for n in os.listdir(path):
        m = RANK_DIR.match(n)
        if m and os.path.isdir(os.path.join(path, n)):
            out[int(m.group(1))] = os.path.join(path, n)
    return out


def is_run_dir(path: str) -> bool:
    return (os.path.isfile(os.path.join(path, SUMMARY)) or os.path.isfile(os.path.join(path, CONFIG))
            or bool(rank_dirs(path)))


def flight_recorder_files(run_dir: str) -> dict[int, str]:
    """rank → Flight Recorder dump under RUN/flight_recorder/. The rank is the trailing number of the
    file name: NCCL's own timeout dumps (TORCH_FR_DUMP_TEMP_FILE) and commscope's watchdog dumps alike."""
    d = os.path.join(run_dir, FLIGHT_RECORDER_DIR)
    out = {}
    if os.path.isdir(d):
        for n in sorted(os.listdir(d)):
            m = re.search(r"(\d+)$", n)
            if m and os.path.isfile(os.path.join(d, n)):
                out[int(m.group(1))] = os.path.join(d, n)
    return out
