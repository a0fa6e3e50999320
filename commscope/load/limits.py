"""The loader's resource limits: how much of an input commscope reads before it refuses, so that a small
or hostile input (a gzip bomb, a world size of 10⁹, a 1 GB events.jsonl) ends with one clear line instead
of exhausting memory or time. Each limit has a default sized for real runs and an environment variable
that raises it (docs/run_format.md, "Limits"); every refusal names both.

Invariants: limits are read from the environment at the moment they are checked (so a test or a wrapper
script can set them per call); a refusal is one `UserError` line naming the limit's variable.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from commscope.errors import UserError


@dataclass(frozen=True)
class Limit:
    env: str  # the environment variable that overrides the default
    default: int
    unit: str  # how the value is written in messages ("MiB", "×", "")
    scale: int = 1  # bytes per unit (MiB → 2**20)

    def value(self) -> int:
        """The limit in base units (bytes for sizes)."""
        raw = os.environ.get(self.env)
        if raw is None or not raw.strip():
            return self.default * self.scale
        try:
            v = int(raw)
        except ValueError:
            raise UserError(f"{self.env}={raw!r} is not a whole number") from None
        if v < 1:
            raise UserError(f"{self.env}={raw!r} must be at least 1")
        return v * self.scale

    def refuse(self, what: str) -> UserError:
        """The error for `what` exceeding this limit, naming the limit and how to raise it."""
        return UserError(f"{what}; refusing at the limit of {self.shown()} (set {self.env}=N to raise it)")

    def shown(self) -> str:
        """The limit as written in messages: "1,024 MiB", "200×"."""
        v = f"{self.value() // self.scale:,}"
        return v + self.unit if self.unit == "×" else f"{v} {self.unit}"


# One trace file (after gunzip): orjson decodes a Kineto trace into ~5-8× its size in Python objects.
TRACE_BYTES = Limit("COMMSCOPE_MAX_TRACE_MB", 1024, "MiB", 2 ** 20)
# The run directory's small JSON documents (meta, status, summary, config, watchdog, inflight) and NCCL
# Flight Recorder dumps: kilobytes to a few MB when genuine.
DOC_BYTES = Limit("COMMSCOPE_MAX_DOC_MB", 64, "MiB", 2 ** 20)
# Inflated over compressed size of a .gz input: JSON traces inflate ~15×, a gzip bomb ~1000×. Checked
# while inflating (after the first GZIP_GRACE_BYTES, so a small, very regular file still reads).
GZIP_RATIO = Limit("COMMSCOPE_MAX_GZIP_RATIO", 200, "×")
GZIP_GRACE_BYTES = 64 * 2 ** 20
# events.jsonl records kept over all ranks of a run (stored as columns, ~150 bytes each: 1.5 GB at the
# limit, which holds a 4096-rank job of 40 steps with the reference trainer's ~50 records a step), and the
# longest line (the recorder writes lines under a kilobyte).
EVENTS = Limit("COMMSCOPE_MAX_EVENTS", 10_000_000, "records")
LINE_BYTES = Limit("COMMSCOPE_MAX_LINE_KB", 1024, "KiB", 2 ** 10)
# World size and rank numbers, from any source (rank folders, meta.json, summary.json): the analyses and
# doctor's table are per rank, so a world size of 10⁹ written by mistake must not size them.
WORLD_SIZE = Limit("COMMSCOPE_MAX_WORLD_SIZE", 16_384, "ranks")
