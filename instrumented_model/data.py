"""Training data for the reference trainer: synthetic learnable tokens, or modded-nanogpt .bin shards.

Both sources answer one question, `global_batch(step) -> (inputs, targets)`: the whole global batch of
`batch_size` sequences of `seq_len` tokens for that step, as int64 CPU tensors of shape (B, T), targets
being inputs shifted by one token. A rank then takes its rows with `rank_slice`. Because the global batch
depends only on (source, seed, step) and never on the world size, runs with 1, 2, 4 or 8 ranks see the
same tokens per step — which is what makes their per-step losses comparable (the end-to-end sharding check).

Synthetic tokens are a noisy Markov chain that walks one random cycle through the vocabulary: with
probability `1 - noise` the next token is the current token's successor on the cycle, otherwise a uniformly
random token (where the walk continues from). A model only has to learn a bigram table, so the loss falls
visibly within a few dozen steps from ln(V) towards the chain's entropy (about 1 nat for noise 0.1, V 512).
The cycle is `perm[i] → perm[i + 1 mod V]` for a seeded permutation, so a token's position in the walk is
(value at the last jump + distance to it) and a whole batch is computed without a loop over positions
(a speedrun batch of 64 × 2048 tokens takes milliseconds, not a loop of 2048 steps).

Shards follow modded-nanogpt's format: a header of 256 little-endian int32 (magic 20240520, version 1,
token count, rest unused), then `count` uint16 tokens. The shards matching a glob are read in sorted
order as one token stream; step s reads the s-th window of B·T + 1 tokens, wrapping around at the end.
Any malformed shard raises `UserError` naming the file and what is wrong.
"""
from __future__ import annotations

import glob as globlib
import os
from dataclasses import dataclass

import numpy as np
import torch

from commscope.errors import UserError

SHARD_MAGIC = 20240520
SHARD_VERSION = 1
HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4


def rank_slice(batch: torch.Tensor, rank: int, world_size: int, micro_step: int = 0, grad_accum: int = 1) -> torch.Tensor:
    """Rows of the global batch this rank uses in this micro-step.

    The global batch is cut into `grad_accum` consecutive micro-batches, each cut evenly over the ranks,
    so the union over ranks and micro-steps is the whole batch exactly once, whatever the world size.
    """
    b = batch.shape[0]
    if b % (world_size * grad_accum):
        raise UserError(
            f"global batch of {b} sequences does not split evenly over {world_size} ranks × {grad_accum} micro-steps"
        )
    per = b // (world_size * grad_accum)
    start = (micro_step * world_size + rank) * per
    return batch[start : start + per]


@dataclass
class SyntheticTokens:
    """Deterministic noisy Markov chain tokens (see module docstring)."""

    vocab_size: int
    seq_len: int
    batch_size: int
    seed: int = 0
    noise: float = 0.1

    def __post_init__(self) -> None:
        # The cycle depends only on the seed, so every step and every rank share it.
        self._perm = np.random.default_rng([self.seed, 0x5EED]).permutation(self.vocab_size)
        self._pos = np.argsort(self._perm)  # token → its index on the cycle

    def next_token(self, tokens: np.ndarray) -> np.ndarray:
        """The chain's noise-free successor of each token."""
        return self._perm[(self._pos[tokens] + 1) % self.vocab_size]

    def global_batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        rng = np.random.default_rng([self.seed, step])
        b, n = self.batch_size, self.seq_len + 1
        jump = rng.random((b, n)) < self.noise
        jump[:, 0] = True  # every sequence starts at a random point of the cycle
        landing = rng.integers(0, self.vocab_size, size=(b, n))  # cycle index a jump lands on
        t = np.arange(n)
        last_jump = np.maximum.accumulate(np.where(jump, t, 0), axis=1)
        cycle_index = (np.take_along_axis(landing, last_jump, axis=1) + (t - last_jump)) % self.vocab_size
        seq = torch.from_numpy(self._perm[cycle_index].astype(np.int64))
        return seq[:, :-1].contiguous(), seq[:, 1:].contiguous()


def read_shard_header(path: str) -> int:
    """Validate a shard's header and size; return its token count."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            raw = f.read(HEADER_BYTES)
    except OSError as e:
        raise UserError(f"cannot read data shard {path}: {e.strerror}") from None
    if len(raw) < HEADER_BYTES:
        raise UserError(f"data shard {path} is truncated: {len(raw)} bytes, the header alone is {HEADER_BYTES}")
    header = np.frombuffer(raw, dtype="<i4")
    if header[0] != SHARD_MAGIC:
        raise UserError(f"data shard {path} is not a modded-nanogpt .bin shard (magic {header[0]}, expected {SHARD_MAGIC})")
    if header[1] != SHARD_VERSION:
        raise UserError(f"data shard {path} has unsupported version {header[1]} (expected {SHARD_VERSION})")
    count = int(header[2])
    expected = HEADER_BYTES + 2 * count
    if count <= 0 or size < expected:
        raise UserError(
            f"data shard {path} is truncated: header says {count} tokens ({expected} bytes), file has {size} bytes"
        )
    return count


class BinShards:
    """modded-nanogpt .bin shards matching a glob, read as one token stream (see module docstring)."""

    def __init__(self, pattern: str, seq_len: int, batch_size: int, vocab_size: int):
        self.paths = sorted(globlib.glob(pattern))
        if not self.paths:
            raise UserError(f"--data {pattern!r} matches no files")
        self.seq_len, self.batch_size, self.vocab_size = seq_len, batch_size, vocab_size
        counts = [read_shard_header(p) for p in self.paths]
        self._tokens = [
            np.memmap(p, dtype="<u2", mode="r", offset=HEADER_BYTES, shape=(n,)) for p, n in zip(self.paths, counts)
        ]
        self._starts = np.concatenate([[0], np.cumsum(counts)])
        self.total = int(self._starts[-1])
        self.window = batch_size * seq_len + 1
        if self.total < self.window:
            raise UserError(
                f"--data {pattern!r} holds {self.total} tokens, fewer than one global batch needs ({self.window})"
            )

    def _read(self, start: int, n: int) -> np.ndarray:
        """n tokens of the concatenated stream from `start`, crossing shard boundaries."""
        out = np.empty(n, dtype=np.int64)
        filled = 0
        while filled < n:
            shard = int(np.searchsorted(self._starts, start, side="right")) - 1
            off = start - int(self._starts[shard])
            take = min(n - filled, len(self._tokens[shard]) - off)
            out[filled : filled + take] = self._tokens[shard][off : off + take]
            filled += take
            start += take
        return out

    def global_batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        stride = self.window - 1  # consecutive windows share one token, as in modded-nanogpt
        windows_per_epoch = (self.total - 1) // stride
        start = (step % windows_per_epoch) * stride
        buf = self._read(start, self.window)
        top = int(buf.max())
        if top >= self.vocab_size:
            raise UserError(
                f"--data has token id {top}, outside the model's vocabulary of {self.vocab_size} "
                f"(use a preset with a larger vocabulary, e.g. --preset speedrun)"
            )
        b, t = self.batch_size, self.seq_len
        inputs = torch.from_numpy(buf[:-1].reshape(b, t).copy())
        targets = torch.from_numpy(buf[1:].reshape(b, t).copy())
        return inputs, targets


def write_shard(path: str, tokens: np.ndarray) -> None:
    """Write tokens as a modded-nanogpt .bin shard (used by tests and for making small data sets)."""
    tokens = np.asarray(tokens)
    if tokens.size and (tokens.min() < 0 or tokens.max() >= 2**16):
        raise UserError("shard tokens must fit in uint16")
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[:3] = (SHARD_MAGIC, SHARD_VERSION, tokens.size)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.astype("<u2").tobytes())


def make_source(data: str | None, *, vocab_size: int, seq_len: int, batch_size: int, seed: int):
    """The data source the trainer uses: shards when `data` is a glob, else synthetic tokens."""
    if data:
        return BinShards(data, seq_len, batch_size, vocab_size)
    return SyntheticTokens(vocab_size, seq_len, batch_size, seed)
