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


@pytest.mark.parametrize("damage", ["truncated", "crc", "garbage"])
def test_broken_files_are_one_clear_error(impl, damage, tmp_path):
    blob = bytearray(gzip.compress(DATA))
    if damage == "truncated":
        blob = blob[: len(blob) // 2]
    elif damage == "crc":
        blob[-8] ^= 0xFF  # the trailer's CRC32
    else:
        blob = bytes(blob) + b"not gzip at all"
    p = tmp_path / "rank0.json.gz"
    p.write_bytes(bytes(blob))
    with pytest.raises(UserError, match="is not a valid gzip file"):
        files.read_bytes(str(p))
