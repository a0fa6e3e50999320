"""The loader's resource limits: how much of an input commscope reads before it refuses, so that a small
or hostile input (a gzip bomb, a world size of 10⁹, a 1 GB events.jsonl) ends with one clear line instead
of exhausting memory or time. Each limit has a default sized for real runs and an environment variable
that raises it (docs/run_format.md, "Limits"); every refusal names both.

Invariants: limits are read from the environment at the moment they are checked (so a test or a wrapper
script can set them per call); a refusal is one `UserError` line naming the limit's variable.
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from commscope.errors import UserError
from commscope.util.text import is_whole_number


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
        if not is_whole_number(raw):
            raise UserError(f"{self.env}={raw!r} is not a whole number")
        v = int(raw)
        if v < 1:
            raise UserError(f"{self.env}={raw!r} must be at least 1")
        if v * self.scale > _MOST:  # sizes are compared with and added to int64 byte counts
            raise UserError(f"{self.env}={raw!r} must be at most {_MOST // self.scale:,}")
        return v * self.scale

    def refuse(self, what: str) -> UserError:
        """The error for `what` exceeding this limit, naming the limit and how to raise it."""
        return UserError(f"{what}; refusing at the limit of {self.shown()} (set {self.env}=N to raise it)")

    def shown(self) -> str:
        """The limit as written in messages: "1,024 MiB", "200×"."""
        v = f"{self.value() // self.scale:,}"
        return v + self.unit if self.unit == "×" else f"{v} {self.unit}"


_MOST = 2 ** 53  # the largest limit in base units (bytes: 8 PiB), whatever the unit it is set in

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
# All the Kineto traces that one command parses at once, at PARSE_FACTOR× each file's size after gunzip
# (measured: ~5×, in decoded JSON and the frames built from it): files that together pass it are parsed
# a few at a time instead of one per core (commscope.load.forked.Budget).
PARSE_BYTES = Limit("COMMSCOPE_MAX_PARSE_MB", 4096, "MiB", 2 ** 20)
PARSE_FACTOR = 6


LIMITS = (TRACE_BYTES, DOC_BYTES, GZIP_RATIO, EVENTS, LINE_BYTES, WORLD_SIZE, PARSE_BYTES)


def check_environment() -> None:
    """Refuse a malformed COMMSCOPE_MAX_* variable before reading anything: a limit is read only where an
    input needs it, and one set wrong must not pass on an input that happens not to."""
    for limit in LIMITS:
        limit.value()


def parse_cost(path: str) -> int:
    """The estimated peak memory, in bytes, of parsing the file at `path`: PARSE_FACTOR × its size after
    gunzip, at most TRACE_BYTES (a larger file is refused when read). A .gz file's size after gunzip is
    its trailer's (the size mod 4 GiB), unless that is below the compressed size (a size past 4 GiB,
    several members): then COMMSCOPE_MAX_GZIP_RATIO × the compressed size. 0 for a directory (a run
    directory's rank folder, whose records are bounded by COMMSCOPE_MAX_EVENTS over the whole run) or
    anything that is not a readable regular file (refused when read)."""
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            return 0
        size = st.st_size
        if path.endswith(".gz") and size >= 4:
            with open(path, "rb") as f:
                f.seek(-4, os.SEEK_END)
                trailer = int.from_bytes(f.read(4), "little")
            size = trailer if trailer >= size else size * GZIP_RATIO.value()
    except OSError:
        return 0
    return PARSE_FACTOR * min(size, TRACE_BYTES.value())
