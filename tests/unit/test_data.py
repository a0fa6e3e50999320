"""Data sources: synthetic determinism and learnability, shard parsing, and clear errors on bad shards."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from commscope.errors import UserError
from instrumented_model.data import (
    HEADER_BYTES,
    BinShards,
    SyntheticTokens,
    make_source,
    rank_slice,
    read_shard_header,
    write_shard,
)


def test_synthetic_is_deterministic_and_step_dependent():
    a = SyntheticTokens(512, 64, 8, seed=3)
    b = SyntheticTokens(512, 64, 8, seed=3)
    x1, y1 = a.global_batch(5)
    x2, y2 = b.global_batch(5)
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    assert x1.shape == (8, 64) and x1.dtype == torch.int64
    assert not torch.equal(a.global_batch(6)[0], x1)
    assert not torch.equal(SyntheticTokens(512, 64, 8, seed=4).global_batch(5)[0], x1)
    # targets are the inputs shifted by one token
    assert torch.equal(x1[:, 1:], y1[:, :-1])
    assert int(x1.min()) >= 0 and int(x1.max()) < 512


def test_synthetic_follows_its_chain():
    """About 1 - noise of the transitions follow the cycle: a bigram model can learn it."""
    src = SyntheticTokens(512, 64, 32, seed=0, noise=0.1)
    x, y = src.global_batch(0)
    follows = (torch.from_numpy(src.next_token(x.numpy())) == y).float().mean().item()
    assert 0.87 < follows < 0.93
    # entropy of the chain is far below ln(V): there is something to learn
    assert -(0.9 * math.log(0.9) + 0.1 * math.log(0.1 / 512)) < 0.5 * math.log(512)


def test_rank_slices_cover_batch_once_for_every_world_size():
    x, _ = SyntheticTokens(512, 16, 16, seed=1).global_batch(0)
    for ws in (1, 2, 4, 8):
        for ga in (1, 2):
            parts = [rank_slice(x, r, ws, m, ga) for m in range(ga) for r in range(ws)]
            assert torch.equal(torch.cat(parts), x)
    with pytest.raises(UserError, match="split evenly"):
        rank_slice(x, 0, 3)


def test_shards_read_as_one_stream(tmp_path):
    stream = np.arange(1000, dtype=np.int64) % 500
    write_shard(str(tmp_path / "d_000.bin"), stream[:300])
    write_shard(str(tmp_path / "d_001.bin"), stream[300:])
    assert read_shard_header(str(tmp_path / "d_000.bin")) == 300
    src = BinShards(str(tmp_path / "d_*.bin"), seq_len=10, batch_size=4, vocab_size=512)
    assert src.total == 1000
    for step in (0, 7, 8):  # step 7 crosses the shard boundary at token 300
        x, y = src.global_batch(step)
        start = step * 40
        assert torch.equal(x.flatten(), torch.from_numpy(stream[start : start + 40]))
        assert torch.equal(y.flatten(), torch.from_numpy(stream[start + 1 : start + 41]))
    # wraps around after (1000 - 1) // 40 = 24 windows
    assert torch.equal(src.global_batch(24)[0], src.global_batch(0)[0])


def test_make_source_picks_shards_or_synthetic(tmp_path):
    write_shard(str(tmp_path / "a.bin"), np.zeros(100, dtype=np.int64))
    assert isinstance(make_source(str(tmp_path / "*.bin"), vocab_size=8, seq_len=4, batch_size=2, seed=0), BinShards)
    assert isinstance(make_source(None, vocab_size=8, seq_len=4, batch_size=2, seed=0), SyntheticTokens)


def _header(magic=20240520, version=1, count=10):
    h = np.zeros(256, dtype="<i4")
    h[:3] = (magic, version, count)
    return h.tobytes()


@pytest.mark.parametrize(
    "content, message",
    [
        (_header(magic=1234) + b"\0" * 20, "not a modded-nanogpt .bin shard"),
        (_header(version=2) + b"\0" * 20, "unsupported version 2"),
        (_header(count=10) + b"\0" * 7, "truncated"),
        (_header()[:100], "truncated"),
        (b"", "truncated"),
        (_header(count=-5), "truncated"),
    ],
    ids=["magic", "version", "short-tokens", "short-header", "empty", "negative-count"],
)
def test_bad_shards_give_one_clear_error(tmp_path, content, message):
    p = tmp_path / "bad.bin"
    p.write_bytes(content)
    with pytest.raises(UserError, match=message) as e:
        BinShards(str(p), seq_len=2, batch_size=1, vocab_size=512)
    assert "\n" not in str(e.value) and str(p) in str(e.value)


def test_shard_errors_for_missing_small_and_out_of_vocab(tmp_path):
    with pytest.raises(UserError, match="matches no files"):
        BinShards(str(tmp_path / "none_*.bin"), 4, 2, 512)
    write_shard(str(tmp_path / "small.bin"), np.arange(5))
    with pytest.raises(UserError, match="fewer than one global batch"):
        BinShards(str(tmp_path / "small.bin"), 4, 2, 512)
    write_shard(str(tmp_path / "big.bin"), np.full(100, 50000))
    with pytest.raises(UserError, match="outside the model's vocabulary of 512"):
        BinShards(str(tmp_path / "big.bin"), 4, 2, 512).global_batch(0)
    assert (tmp_path / "big.bin").stat().st_size == HEADER_BYTES + 200
