"""Write commscope run directories (docs/run_format.md) from plain records, for tests that need known numbers
without running the trainer. One writer, so every hand-made run has the layout the loader documents."""
from __future__ import annotations

import json
from pathlib import Path

from commscope.rundir import SCHEMA_VERSION


def write_json(path: Path, doc: dict) -> None:
    path.write_text(json.dumps(doc))


def write_run(path, events: dict[int, list[dict] | None], *, world_size: int | None = None,
              summary: dict | None = None, config: dict | None = None, meta: dict | None = None,
              status: dict | None = None) -> Path:
    """rank{r}/meta.json (+ `meta`) and rank{r}/events.jsonl for each rank of `events` (None: no events file);
    summary.json / config.json / rank{r}/status.json when given (schema_version and world_size filled in)."""
    path = Path(path)
    world_size = world_size or len(events)
    path.mkdir(parents=True, exist_ok=True)
    if summary is not None:
        write_json(path / "summary.json", {"schema_version": SCHEMA_VERSION, "world_size": world_size, **summary})
    if config is not None:
        write_json(path / "config.json", {"schema_version": SCHEMA_VERSION, **config})
    for rank, lines in events.items():
        d = path / f"rank{rank}"
        d.mkdir(exist_ok=True)
        write_json(d / "meta.json", {"schema_version": SCHEMA_VERSION, "rank": rank, "local_rank": rank,
                                     "world_size": world_size, **(meta or {})})
        if lines is not None:
            (d / "events.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
        if status is not None:
            write_json(d / "status.json", status)
    return path
