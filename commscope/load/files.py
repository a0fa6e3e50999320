"""Reading JSON documents and JSON-lines files from disk, turning every way they can be broken into one
clear `UserError` line.

Decoding runs with the garbage collector paused: a Kineto trace decodes into ~10⁵ small dicts and the
cyclic collector would otherwise rescan them repeatedly (2–4× slower). orjson is used for speed.

Gzip goes through python-isal (Intel ISA-L) when it is installed: its single-member inflate is 2.5× faster
than the standard library's gzip.decompress on a Kineto trace (~7 against ~17 ms per 9 MB rank file,
bench/bench_load.py), and 2× faster again when its output buffer is sized once from the gzip trailer
(`size_hint`: a limit that fits, checked; a short one means inflating again without it). Files with
several gzip members (concatenated .gz) take the full multi-member reader.
"""
from __future__ import annotations

import contextlib
import gc
import gzip
import os
import zlib
from typing import Any, Iterator

import orjson

from commscope.errors import UserError

try:  # optional speed-up (see the module docstring); the standard library is the fallback
    from isal import igzip as _gzip
    from isal import isal_zlib as _zlib

    _GZIP_ERRORS: tuple = (OSError, EOFError, zlib.error, _zlib.error)
except ImportError:  # pragma: no cover - depends on the environment
    _gzip, _zlib = gzip, zlib
    _GZIP_ERRORS = (OSError, EOFError, zlib.error)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def read_bytes(path: str) -> bytes:
    """File contents, gunzipped when the name ends in .gz."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise UserError(f"cannot read {path}: {e.strerror or e}") from None
    if path.endswith(".gz"):
        try:
            raw = gunzip(raw)
        except _GZIP_ERRORS as e:
            raise UserError(f"{path} is not a valid gzip file ({e})") from None
    return raw


def gunzip(raw: bytes) -> bytes:
    """The decompressed bytes of a gzip file (all members; trailer CRC and length checked)."""
    hint = size_hint(raw)
    d = _zlib.decompressobj(31)  # wbits 31: gzip header and trailer
    out = d.decompress(raw, hint)  # ISA-L allocates the output once: 2× faster than growing it
    if not d.eof and hint:  # the hint was short (several members, a bad trailer): inflate without a limit
        d = _zlib.decompressobj(31)
        out = d.decompress(raw)
    if not d.eof:
        raise EOFError("compressed file ended before the end-of-stream marker was reached")
    if d.unused_data:  # more members (or trailing bytes): the reader that handles every case
        return _gzip.decompress(raw)
    return out


def size_hint(raw: bytes) -> int:
    """An output size limit for inflating the gzip bytes `raw` that fits a single member: its trailer's
    size field (mod 2³²) + 1, at most 64× the input (JSON traces inflate ~15×; a bad trailer must not
    reserve gigabytes). 0 (no limit) for input too short to be gzip."""
    if len(raw) < 18:  # 10-byte header + 8-byte trailer
        return 0
    return min(int.from_bytes(raw[-4:], "little") + 1, 64 * len(raw))


def read_json(path: str) -> Any:
    """Decode a whole JSON document (optionally .gz)."""
    return decode_json(path, read_bytes(path))


def decode_json(path: str, raw: bytes) -> Any:
    """Decode the bytes `raw` read from `path` (named in the error)."""
    if not raw.strip():
        raise UserError(f"{path} is empty")
    with gc_paused():
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError as e:
            if _not_utf8(raw):
                raise UserError(f"{path} is not UTF-8 text") from None
            raise UserError(f"{path} is not valid JSON (truncated or corrupt: {e})") from None


def read_jsonl(path: str) -> tuple[list[dict], int]:
    """Records of a JSON-lines file and the number of unreadable lines skipped.

    Only the last line may be torn (a crash mid-append); a bad line elsewhere means a corrupt file.
    """
    raw = read_bytes(path)
    lines = raw.split(b"\n")
    out: list[dict] = []
    skipped = 0
    last = max((i for i, ln in enumerate(lines) if ln.strip()), default=-1)
    with gc_paused():
        for i, ln in enumerate(lines):
            if not ln.strip():
                continue
            try:
                rec = orjson.loads(ln)
            except orjson.JSONDecodeError:
                if i == last:
                    skipped += 1
                    continue
                what = "not UTF-8" if _not_utf8(ln) else "not valid JSON"
                raise UserError(f"{path}: line {i + 1} is {what}") from None
            if not isinstance(rec, dict):
                raise UserError(f"{path}: line {i + 1} is not a JSON object")
            out.append(rec)
    return out, skipped


def _not_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
        return False
    except UnicodeDecodeError:
        return True


def is_trace_file(name: str) -> bool:
    return name.endswith(".json") or name.endswith(".json.gz")


def list_trace_files(path: str) -> list[str]:
    return sorted(os.path.join(path, n) for n in os.listdir(path)
                  if is_trace_file(n) and os.path.isfile(os.path.join(path, n)))
