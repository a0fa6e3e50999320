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


def write_cpu_run(path, events: dict[int, list[dict]], steps: int = 1) -> Path:
    """A completed CPU (gloo) run of `steps` steps holding `events` per rank: the summary and meta a CPU
    `commscope run` writes, for hand-built records."""
    return write_run(path, events, summary={"status": "completed", "backend": "gloo", "device": "cpu",
                                            "steps": steps},
                     meta={"backend": "gloo", "device": "cpu"})


T0_NS = 1_764_670_000_000_000_000  # a December 2025 wall clock: the hand-built records' time origin
US = 1000


def wall_collective(rank: int, label: str, seq: int, call: float, wait: float, wait_end: float, end: float) -> dict:
    """A CPU run's all_reduce record of 4000 bytes in step 0 on a 2-rank group, times in µs from T0_NS:
    launched at `call` (returning 1 µs later), waited on over [`wait`, `wait_end`), completed at `end`."""
    return {"kind": "collective", "rank": rank, "step": 0, "label": label, "phase": "reduce", "op": "all_reduce",
            "bytes": 4000, "dtype": "float32", "group": "0", "group_size": 2, "seq": seq,
            "call_ns": T0_NS + call * US, "return_ns": T0_NS + (call + 1) * US, "wait_ns": T0_NS + wait * US,
            "wait_end_ns": T0_NS + wait_end * US, "start_ns": None, "end_ns": T0_NS + end * US, "timing": "wall"}
