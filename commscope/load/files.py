"""Reading JSON documents and JSON-lines files from disk, turning every way they can be broken into one
clear `UserError` line, within the limits of `commscope.load.limits`.

Every input is checked to be a regular file before it is opened (a FIFO would block the reader forever,
a directory or a symlink loop would raise mid-load), and read with bounded memory: a whole file is
refused above its size limit, a gzip file is inflated in bounded pieces and refused as soon as its output
passes the size limit or outgrows its compressed input by more than the ratio limit (a gzip bomb is
refused after inflating tens of MB, not GB), and JSON-lines files are read in blocks, one line at a time
(`iter_jsonl`), so their memory is the records the caller keeps.

Decoding runs with the garbage collector paused: a Kineto trace decodes into ~10⁵ small dicts and the
cyclic collector would otherwise rescan them repeatedly (2–4× slower). orjson is used for speed.

Gzip goes through python-isal (Intel ISA-L) when it is installed: its single-member inflate is 2.5× faster
than the standard library's gzip.decompress on a Kineto trace (~7 against ~17 ms per 9 MB rank file,
bench/bench_load.py), and 2× faster again when its output buffer is sized once from the gzip trailer
(`size_hint`, trusted only up to 64× the input and FAST_INFLATE_BYTES). Larger outputs, several members
(concatenated .gz) and short hints inflate in CHUNK_BYTES pieces.
"""
from __future__ import annotations

import contextlib
import errno
import gc
import gzip
import os
import stat
import zlib
from typing import Any, BinaryIO, Callable, Iterator

import orjson

from commscope.errors import UserError
from commscope.load import limits
from commscope.load.limits import Limit
from commscope.util.paths import missing_text

try:  # optional speed-up (see the module docstring); the standard library is the fallback
    from isal import igzip as _gzip
    from isal import isal_zlib as _zlib

    _GZIP_ERRORS: tuple = (OSError, EOFError, zlib.error, _zlib.error)
except ImportError:  # pragma: no cover - depends on the environment
    _gzip, _zlib = gzip, zlib
    _GZIP_ERRORS = (OSError, EOFError, zlib.error)

CHUNK_BYTES = 64 * 2 ** 20  # inflate output per call when the trailer's size is not trusted
FAST_INFLATE_BYTES = 256 * 2 ** 20  # largest output buffer allocated at once from the trailer's size
_READ_BLOCK = 4 * 2 ** 20  # JSON-lines files are read in blocks of this size


class InflateLimit(Exception):
    """Inflating passed a limit: `ratio` True for the ratio limit, False for the size limit."""

    def __init__(self, ratio: bool, what: str):
        super().__init__(what)
        self.ratio, self.what = ratio, what


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def describe(path: str) -> str | None:
    """None when `path` is a regular file (after symlinks); otherwise what it is, for a message: "missing",
    "a directory", "a FIFO", "a symlink loop", ..."""
    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        if e.errno == errno.ELOOP:
            return "a symlink loop"
        if e.errno == errno.ENOENT:
            return "a symlink to a missing file" if os.path.islink(path) else "missing"
        return f"unreadable ({e.strerror or e})"
    if stat.S_ISREG(mode):
        return None
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a regular file"


def is_regular(path: str) -> bool:
    """True for a regular file, False when nothing is there; UserError for anything else (a FIFO, a
    directory, a symlink loop...): reading it would block, fail or mean something else."""
    what = describe(path)
    if what is None:
        return True
    if what == "missing":
        return False
    raise UserError(f"{path} is {what}, not a file")


class FileProblem(UserError):
    """A file that cannot be read as what it should be: "`path` `what`" ("… is a FIFO (named pipe), not a
    file"). A folder of traces skips such a file with a problem line (kineto.parse_file_or_skip); given
    alone it is the error."""

    def __init__(self, path: str, what: str):
        super().__init__(f"{path} {what}")
        self.path, self.what = path, what

    def __reduce__(self):  # a parse worker sends it to the parent: rebuilt from both arguments
        return type(self), (self.path, self.what)


class Missing(UserError):
    """A path that does not exist where it is read: "`path` does not exist", or the symbolic link that
    makes it so (`missing_text`). Not a FileProblem, which a folder of traces skips: a file listed a moment
    ago and gone where it is read (a Dask worker that does not share this machine's filesystem) is an error,
    not a stray file."""

    def __init__(self, path: str):
        super().__init__(missing_text(path))
        self.path = path

    def __reduce__(self):  # sent back by a parse worker or a Dask worker: rebuilt from the path
        return type(self), (self.path,)


class CorruptGzip(FileProblem):
    """A .gz file cut short, damaged or empty (an interrupted copy, a killed job): `what` says how."""


class NotAFile(FileProblem):
    """A name on something that is not a regular file (a FIFO would block the reader, a dangling link)."""


class Unreadable(FileProblem):
    """A regular file the system refuses to read (permissions, an I/O error): one rank's file, which
    costs that rank, not the others."""


def unreadable(path: str, e: OSError) -> Unreadable:
    return Unreadable(path, f"cannot be read: {e.strerror or e}")


def _open_regular(path: str):
    what = describe(path)
    if what == "missing":
        raise Missing(path)
    if what is not None:
        raise NotAFile(path, f"is {what}, not a file")
    try:
        return open(path, "rb")
    except OSError as e:
        raise unreadable(path, e) from None


def read_bytes(path: str, limit: Limit = limits.TRACE_BYTES) -> bytes:
    """File contents, gunzipped when the name ends in .gz; at most `limit` bytes (after gunzip)."""
    cap = limit.value()
    with _open_regular(path) as f:
        try:
            size = os.fstat(f.fileno()).st_size
            if size > cap:
                raise limit.refuse(f"{path} is {size / 2 ** 20:,.1f} MiB")
            # read() sizes its buffer by the count asked: the file's size, not the limit (which may be far
            # above the memory there is)
            raw = f.read(size + 1)
            if len(raw) > size:  # grew since fstat: read on, at most to the limit
                raw += _read_upto(f, cap + 1 - len(raw))
        except OSError as e:
            raise unreadable(path, e) from None
    if len(raw) > cap:  # grew while being read
        raise limit.refuse(f"{path} is over the size limit")
    if path.endswith(".gz"):
        if not raw:  # a file created and never written: said as a plain .json's would be
            raise CorruptGzip(path, "is empty (0 bytes)")
        try:
            raw = gunzip(raw, max_bytes=cap)
        except InflateLimit as e:
            raise (limits.GZIP_RATIO if e.ratio else limit).refuse(f"{path} {e.what}") from None
        except _GZIP_ERRORS as e:
            raise CorruptGzip(path, f"is not a valid gzip file ({e})") from None
    return raw


def _read_upto(f: BinaryIO, n: int) -> bytes:
    parts, left = [], n
    while left > 0:
        b = f.read(min(left, _READ_BLOCK))
        if not b:
            break
        parts.append(b)
        left -= len(b)
    return b"".join(parts)


def gunzip(raw: bytes, max_bytes: int | None = None, max_ratio: int | None = None) -> bytes:
    """The decompressed bytes of a gzip file (all members; trailer CRC and length checked), at most
    `max_bytes` of them (default: limits.TRACE_BYTES) and, past the first GZIP_GRACE_BYTES, at most
    `max_ratio` (default: limits.GZIP_RATIO) times the compressed bytes consumed so far; InflateLimit
    as soon as either is passed, so memory stays bounded by the limits whatever the file claims."""
    max_bytes = limits.TRACE_BYTES.value() if max_bytes is None else max_bytes
    max_ratio = limits.GZIP_RATIO.value() if max_ratio is None else max_ratio
    parts: list[bytes] = []
    total = 0
    data = raw  # the members not yet inflated: always a suffix of raw
    while True:
        d = _zlib.decompressobj(31)  # wbits 31: gzip header and trailer
        hint = size_hint(data)  # the last member's size: exact when this is the only member
        want = hint if 0 < hint <= FAST_INFLATE_BYTES else CHUNK_BYTES
        buf = data
        while True:
            piece = d.decompress(buf, max(1, min(want, max_bytes + 1 - total)))  # ISA-L allocates it at once
            want = CHUNK_BYTES
            parts.append(piece)
            total += len(piece)
            if total > max_bytes:
                raise InflateLimit(False, "inflates past the size limit")
            consumed = len(raw) - len(d.unused_data if d.eof else d.unconsumed_tail)
            if total > limits.GZIP_GRACE_BYTES and total > max_ratio * consumed:
                raise InflateLimit(True, f"inflates to over {max_ratio}× its compressed size (a gzip bomb?)")
            if d.eof:
                break
            if not piece and len(d.unconsumed_tail) == len(buf):  # no progress: the input ran out
                raise EOFError("compressed file ended before the end-of-stream marker was reached")
            buf = d.unconsumed_tail  # b"": output still pending inside the inflater
        rest = d.unused_data.lstrip(b"\0")  # padding after a member, as gzip.decompress allows
        if not rest:
            break
        if rest[:2] != b"\x1f\x8b":
            raise OSError("trailing garbage after the gzip data")
        data = rest
    return parts[0] if len(parts) == 1 else b"".join(parts)


def size_hint(raw: bytes) -> int:
    """An output size for inflating the gzip bytes `raw` that fits a single member: its trailer's size
    field (mod 2³²) + 1, at most 64× the input (JSON traces inflate ~15×; a bad trailer must not reserve
    gigabytes). 0 (no hint) for input too short to be gzip."""
    if len(raw) < 18:  # 10-byte header + 8-byte trailer
        return 0
    return min(int.from_bytes(raw[-4:], "little") + 1, 64 * len(raw))


def read_json(path: str, limit: Limit = limits.DOC_BYTES) -> Any:
    """Decode a whole JSON document (optionally .gz) of at most `limit` bytes."""
    return decode_json(path, read_bytes(path, limit))


_JSON_DEPTH = 1024  # orjson's nesting limit


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
            if "depth limit" in str(e):  # valid JSON, maybe, but no trace or record nests like that
                raise UserError(f"{path} nests JSON arrays or objects too deeply to be read "
                                f"(more than {_JSON_DEPTH} levels)") from None
            at = raw[e.pos:e.pos + 9] if isinstance(getattr(e, "pos", None), int) else b""
            token = next((t for t in (b"NaN", b"Infinity", b"-Infinity") if at.startswith(t)), None)
            if token == b"Infinity" and raw[e.pos - 1:e.pos] == b"-":
                token = b"-Infinity"
            if token is not None:  # what Python's json.dump writes for a non-finite float
                raise UserError(f"{path} is not valid JSON: {token.decode()} at line {e.lineno} is no JSON value "
                                "(Python's json.dump writes it for a non-finite float)") from None
            raise UserError(f"{path} is not valid JSON (truncated or corrupt: {e})") from None


def iter_jsonl(path: str, dedup: bool = False,
               decode: Callable[[bytes], Any] = orjson.loads) -> Iterator[tuple[int, bytes, Any]]:
    """(line number, line bytes, decoded value) of every non-blank line of a JSON-lines file, read in
    blocks: memory is one block and one line, whatever the file's size. A line that does not decode is
    yielded with the value `TORN` when it is the last non-blank line (a crash mid-append tears only the
    last line), as is a last line longer than limits.LINE_BYTES that no newline ends (yielded as b"");
    anywhere else either is a corrupt file (UserError). With `dedup`, a line identical to an earlier one
    is yielded with the value `DUPLICATE`, undecoded (the set of line hashes grows with the distinct lines
    only). `decode` turns a line into its value (orjson.loads, or a typed decoder that falls back to it);
    it raises orjson's JSONDecodeError for a line that is not JSON."""
    max_line = limits.LINE_BYTES.value()
    seen: set[int] = set()
    pending: tuple[int, bytes, str] | None = None  # an undecodable line, and why: torn if nothing follows it
    overlong: int | None = None  # a line past max_line not yet ended: torn if the file ends inside it
    lineno = 0
    with _open_regular(path) as f:
        rest = b""
        while True:
            try:
                block = f.read(_READ_BLOCK)
            except OSError as e:
                raise unreadable(path, e) from None
            if overlong is not None:  # its bytes are not kept: memory stays one block
                if block and b"\n" not in block:
                    continue
                if block:
                    raise _too_long(path, overlong, max_line)
                break
            lines = (rest + block).split(b"\n") if block else [rest]
            rest = lines.pop() if block else b""
            for ln in lines:
                lineno += 1
                if len(ln) > max_line:
                    raise _too_long(path, lineno, max_line)
                if not ln.strip():
                    continue
                if pending is not None:
                    raise _corrupt(path, pending)
                if dedup:
                    h = hash(ln)
                    if h in seen:
                        yield lineno, ln, DUPLICATE
                        continue
                try:
                    value = decode(ln)
                except orjson.JSONDecodeError as e:
                    pending = (lineno, ln, str(e))
                    continue
                if dedup:
                    seen.add(h)
                yield lineno, ln, value
            if len(rest) > max_line:
                overlong, rest = lineno + 1, b""
            if not block:
                break
    if overlong is not None:
        if pending is not None:
            raise _corrupt(path, pending)
        pending = (overlong, b"", "")
    if pending is not None:
        yield pending[0], pending[1], TORN


def _too_long(path: str, lineno: int, max_line: int) -> UserError:
    return limits.LINE_BYTES.refuse(f"{path}: line {lineno} is longer than {max_line // 1024:,} KiB")


def _corrupt(path: str, pending: tuple[int, bytes, str]) -> UserError:
    lineno, raw, why = pending
    what = ("not UTF-8" if _not_utf8(raw) else "JSON nested too deeply" if "depth limit" in why else
            "not valid JSON")
    return UserError(f"{path}: line {lineno} is {what}")


TORN = object()  # iter_jsonl's value for a torn last line
DUPLICATE = object()  # iter_jsonl's value for a repeated line (with dedup)


def read_jsonl(path: str) -> tuple[list[dict], int]:
    """Records of a (small) JSON-lines file and the number of unreadable lines skipped (0 or 1: only the
    last line may be torn, a crash mid-append). Every record must be a JSON object."""
    out: list[dict] = []
    torn = 0
    with gc_paused():
        for lineno, _, rec in iter_jsonl(path):
            if rec is TORN:
                torn += 1
            elif not isinstance(rec, dict):
                raise UserError(f"{path}: line {lineno} is not a JSON object")
            else:
                out.append(rec)
    return out, torn


def _not_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
        return False
    except UnicodeDecodeError:
        return True


def entry_names(folder: str | os.PathLike) -> list[str]:
    """The names in `folder`; none where it cannot be listed (for hints, which never fail a command)."""
    try:
        return os.listdir(folder)
    except OSError:
        return []


def is_trace_file(name: str) -> bool:
    return name.endswith(".json") or name.endswith(".json.gz")


def list_trace_files(path: str) -> list[str]:
    """The Kineto traces (*.json, *.json.gz) in the folder `path`; UserError when `path` is not a folder. A
    trace's name on something that is not a file (a dangling link, a FIFO) is listed: the parser skips it
    with a problem line, without opening it, as it skips a damaged trace (kineto._parse)."""
    what = describe(path)
    if what != "a directory":
        raise UserError(f"{path} is {what or 'a file'}: not a run directory, a trace file or a folder of traces")
    try:
        names = sorted(os.listdir(path))
    except OSError as e:
        raise UserError(f"cannot list {path}: {e.strerror or e}") from None
    out = []
    for n in names:
        p = os.path.join(path, n)
        if is_trace_file(n) and describe(p) not in ("a directory", "missing"):
            out.append(p)
    return out
