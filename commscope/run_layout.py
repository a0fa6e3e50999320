"""Where things are in a run directory (docs/run_format.md): its rank folders, whether a folder holds a
run, and the writers and reader of config.json and a rank's status.json. Without pandas or torch, so the
launcher (which watches a running job's folders) uses the same definitions as the loader and `doctor`,
and the recorder and the trainer write these files one way."""
from __future__ import annotations

import json
import os
import re

from commscope import SCHEMA_VERSION
from commscope.atomic import write_json_atomic

RANK_DIR = re.compile(r"^rank(\d+)$")


def rank_dirs(path: str) -> dict[int, str]:
    """rank → folder of every `rank<N>/` in `path`."""
    out = {}
    for n in os.listdir(path):
        m = RANK_DIR.match(n)
        if m and os.path.isdir(os.path.join(path, n)):
            out[int(m.group(1))] = os.path.join(path, n)
    return out


def is_run_dir(path: str) -> bool:
    return (os.path.isfile(os.path.join(path, "summary.json")) or os.path.isfile(os.path.join(path, "config.json"))
            or bool(rank_dirs(path)))


def read_status(rank_dir: str) -> dict | None:
    """A rank's status.json; None when there is none. Raises ValueError when it is there but unreadable."""
    try:
        with open(os.path.join(rank_dir, "status.json")) as f:
            st = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise ValueError(f"unreadable status.json ({e})") from None
    if not isinstance(st, dict) or "status" not in st:
        raise ValueError("unreadable status.json (no status)")
    return st


def write_config(run_dir, config: dict) -> None:
    """RUN/config.json (atomically)."""
    write_json_atomic(os.path.join(run_dir, "config.json"), {"schema_version": SCHEMA_VERSION, **config})


def write_status(rank_dir, status: str, error: str | None, last_step: int) -> None:
    """rank{R}/status.json, written atomically so a reader never sees half of it."""
    write_json_atomic(os.path.join(rank_dir, "status.json"), {"status": status, "error": error, "last_step": last_step})
