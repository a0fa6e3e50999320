"""`files.gunzip` (ISA-L when installed, the standard library otherwise) returns what gzip.decompress
returns for every valid file, multi-member included, and refuses broken ones with the same errors."""
from __future__ import annotations

import gzip
import zlib

import pytest

from commscope.errors import UserError
from commscope.load import files

DATA = b'{"traceEvents": [' + b",".join(b'{"ph":"X","ts":%d}' % i for i in range(5000)) + b"]}"


@pytest.fixture(params=["isal", "stdlib"])
def impl(request, monkeypatch):
    if request.param == "stdlib":
        monkeypatch.setattr(files, "_zlib", zlib)
        monkeypatch.setattr(files, "_gzip", gzip)
        monkeypatch.setattr(files, "_GZIP_ERRORS", (OSError, EOFError, zlib.error))
    elif files._zlib is zlib:
        pytest.skip("python-isal not installed")
    return request.param


def test_one_member(impl):
    assert files.gunzip(gzip.compress(DATA)) == DATA


def test_several_members_are_all_read(impl):
    two = gzip.compress(DATA[:7000]) + gzip.compress(DATA[7000:])
    assert files.gunzip(two) == DATA


def test_output_larger_than_the_size_hint_is_read_whole(impl):
    """The trailer sizes the output buffer; when it is short (a small last member, or more than 64× the
    input) inflating starts again without a limit."""
    big_first = gzip.compress(DATA) + gzip.compress(DATA[:100])
    assert files.size_hint(big_first) == 101 and files.gunzip(big_first) == DATA + DATA[:100]
    flat = b"a" * 3_000_000  # inflates ~1000×
    blob = gzip.compress(flat)
    assert files.size_hint(blob) == 64 * len(blob) < len(flat) and files.gunzip(blob) == flat


def test_size_hint_is_the_trailer_size_plus_one_or_no_limit():
    blob = gzip.compress(DATA)
    assert files.size_hint(blob) == len(DATA) + 1
    assert files.size_hint(blob[:17]) == 0


@pytest.mark.parametrize("damage", ["truncated", "crc", "garbage", "size-smaller", "size-larger"])
def test_broken_files_are_one_clear_error(impl, damage, tmp_path):
    blob = bytearray(gzip.compress(DATA))
    if damage == "truncated":
        blob = blob[: len(blob) // 2]
    elif damage == "crc":
        blob[-8] ^= 0xFF  # the trailer's CRC32
    elif damage.startswith("size"):  # the trailer's length field, which also sizes the output buffer
        blob[-4:] = (len(DATA) + (-1 if damage == "size-smaller" else 10**9)).to_bytes(4, "little")
    else:
        blob = bytes(blob) + b"not gzip at all"
    p = tmp_path / "rank0.json.gz"
    p.write_bytes(bytes(blob))
    with pytest.raises(UserError, match="is not a valid gzip file"):
        files.read_bytes(str(p))


def test_a_gzip_bomb_is_refused_by_ratio_after_bounded_output(impl, tmp_path, monkeypatch):
    """~1000× inflation: refused once the output passes the grace size, naming the variable to raise."""
    member = gzip.compress(b" " * 2 ** 24, 9)  # 16 MiB of spaces, ~16 KB
    p = tmp_path / "rank0.json.gz"
    p.write_bytes(member * 16)  # 256 MiB
    with pytest.raises(UserError, match="COMMSCOPE_MAX_GZIP_RATIO") as e:
        files.read_bytes(str(p))
    assert "200×" in str(e.value) and "\n" not in str(e.value)
    monkeypatch.setenv("COMMSCOPE_MAX_GZIP_RATIO", "5000")  # raised: it reads, every member
    assert len(files.read_bytes(str(p))) == 2 ** 28


def test_the_size_limit_counts_the_inflated_bytes(impl, tmp_path, monkeypatch):
    p = tmp_path / "rank0.json.gz"
    p.write_bytes(gzip.compress(DATA * 40))  # ~3.3 MB inflated
    monkeypatch.setenv("COMMSCOPE_MAX_TRACE_MB", "2")
    with pytest.raises(UserError, match="COMMSCOPE_MAX_TRACE_MB"):
        files.read_bytes(str(p))
    monkeypatch.setenv("COMMSCOPE_MAX_TRACE_MB", "4")
    assert files.read_bytes(str(p)) == DATA * 40


def test_padding_between_members_is_read_as_gzip_does(impl):
    blob = gzip.compress(DATA) + b"\0" * 7 + gzip.compress(DATA[:10]) + b"\0\0"
    assert files.gunzip(blob) == gzip.decompress(blob) == DATA + DATA[:10]
