"""Readers and writers of the run directory's small JSON files whose format the schema fixes: the run
marker (RUN/commscope-run.json), a rank's status.json, RUN/config.json, and the schema-version check
every reader applies.

Writers go through `commscope.util.atomic`, so a reader (another rank, the launcher, `doctor`) never sees
half a file. Without pandas or torch: the launcher and the trainer's exit paths use it.
"""
from __future__ import annotations

import json
import os

from commscope.errors import UserError
from commscope.rundir.schema import CONFIG, RUN_MARKER, SCHEMA_VERSION, STATUS
from commscope.util.atomic import write_json_atomic


def check_schema(doc: dict, where: str) -> None:
    """Refuse a document written by a newer commscope (one UserError line naming `where`)."""
    v = doc.get("schema_version", SCHEMA_VERSION)
    if not isinstance(v, int) or v > SCHEMA_VERSION:
        raise UserError(f"{where} has schema_version {v!r}; this commscope reads version <= {SCHEMA_VERSION} "
                        "(upgrade commscope)")


def read_status(rank_dir: str) -> dict | None:
    """A rank's status.json; None when there is none. Raises ValueError when it is there but unreadable."""
    try:
        with open(os.path.join(rank_dir, STATUS)) as f:
            st = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise ValueError(f"unreadable {STATUS} ({e})") from None
    if not isinstance(st, dict) or "status" not in st:
        raise ValueError(f"unreadable {STATUS} (no status)")
    return st


def write_config(run_dir, config: dict) -> None:
    """RUN/config.json (atomically)."""
    write_json_atomic(os.path.join(run_dir, CONFIG), {"schema_version": SCHEMA_VERSION, **config})


def write_status(rank_dir, status: str, error: str | None, last_step: int) -> None:
    """rank{R}/status.json, written atomically so a reader never sees half of it."""
    write_json_atomic(os.path.join(rank_dir, STATUS), {"status": status, "error": error, "last_step": last_step})


def write_run_marker(run_dir, run_id: str, **fields) -> None:
    """RUN/commscope-run.json: the run's id (and who wrote it), the first file of every run."""
    write_json_atomic(os.path.join(run_dir, RUN_MARKER), {"schema_version": SCHEMA_VERSION, "run_id": run_id, **fields})


def read_run_marker(run_dir: str) -> dict | None:
    """The run marker; None when there is none. Raises ValueError when it is there but unreadable."""
    try:
        with open(os.path.join(run_dir, RUN_MARKER), "rb") as f:
            doc = json.loads(f.read(65536))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise ValueError(f"unreadable {RUN_MARKER} ({e})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("run_id"), str):
        raise ValueError(f"unreadable {RUN_MARKER} (no run_id)")
    return doc
