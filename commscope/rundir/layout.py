"""Finding things in a run directory: its rank folders, its Flight Recorder dumps, and whether a folder
holds a run at all. Without pandas or torch, so the launcher (which watches a running job's folders) uses
the same definitions as the loader.

Two questions, two answers: `is_run_dir` (may a reading command treat this folder as a run?) accepts
a run without the run marker by its summary.json, config.json or rank<N>/; `has_run_marker`
(may `commscope run` replace what is in it?) accepts only a folder that says it is commscope's, so a
Hugging Face checkpoint's config.json or a rank0/ of model shards is never taken for a run and deleted.
"""
from __future__ import annotations

import os
import re
import stat

from commscope.rundir.schema import CONFIG, FLIGHT_RECORDER_DIR, LAUNCHER_LOGS, RANK_DIR, RUN_MARKER, SUMMARY


def rank_dirs(path: str) -> dict[int, str]:
    """rank → folder of every `rank<N>/` in `path`."""
    out = {}
    for n in os.listdir(path):
        m = RANK_DIR.match(n)
        if m and os.path.isdir(os.path.join(path, n)):
            out[int(m.group(1))] = os.path.join(path, n)
    return out


def launcher_log_tails(path: str, nbytes: int) -> dict[str, str]:
    """name → the last `nbytes` of every launcher log in `path` (launcher.log, or each node's:
    LAUNCHER_LOGS), in name order, decoded with replacement. Only regular files are opened (a FIFO
    would block the reader); one that cannot be read is left out, as is everything when `path` cannot
    be listed."""
    try:
        names = sorted(n for n in os.listdir(path) if LAUNCHER_LOGS.match(n))
    except OSError:
        return {}
    out = {}
    for name in names:
        log = os.path.join(path, name)
        try:
            if not stat.S_ISREG(os.lstat(log).st_mode):
                continue
            with open(log, "rb") as f:
                f.seek(max(0, os.fstat(f.fileno()).st_size - nbytes))
                out[name] = f.read(nbytes).decode("utf-8", "replace")
        except OSError:
            continue
    return out


def has_run_marker(path: str) -> bool:
    """True when `path` holds commscope's run marker (written first by `commscope run`)."""
    return os.path.isfile(os.path.join(path, RUN_MARKER))


def is_run_dir(path: str) -> bool:
    """True when reading commands may treat `path` as a run: it has the run marker, or (a run without the
    marker) a summary.json, a config.json or a rank folder."""
    return (has_run_marker(path) or os.path.isfile(os.path.join(path, SUMMARY))
            or os.path.isfile(os.path.join(path, CONFIG)) or bool(rank_dirs(path)))


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
