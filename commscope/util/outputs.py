"""Where a reading command may write its output file, and how it writes it.

`check_output` is the rule for the files the reading commands write (`report`'s page, `export`'s
Perfetto trace; docs/analysis.md, "Output files"): never into an input directory or onto an input file,
never through a symbolic link, never onto a FIFO, device, socket or directory, and an existing file is
replaced only when commscope wrote it, recognised by the marker it writes at the top of each output
(`own_page`: the page's `<meta name="generator" content="commscope">`; `own_trace`: the trace's leading
`"otherData":{"producer":"commscope"`). `write_output` and `output_stream` then write it atomically
(commscope.util.atomic), a failed write being one UserError line that names the file.
"""
from __future__ import annotations

import contextlib
import errno
import gzip
import os
import re
import stat
import zlib
from pathlib import Path
from typing import BinaryIO, Callable, Iterator

from commscope.errors import UserError
from commscope.util.atomic import open_atomic, write_bytes_atomic

_CHUNK = 1 << 20


@contextlib.contextmanager
def output_stream(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """A command's output file written in pieces (open_atomic); a failed write is one UserError line
    naming it, as write_output's."""
    from commscope.util.text import printable

    try:
        with open_atomic(path) as f:
            yield f
    except OSError as e:
        raise UserError(f"cannot write {printable(path)}: {e.strerror or e}") from None


def write_output(path: str | os.PathLike, data: bytes) -> None:
    """A command's output file (write_bytes_atomic); a failed write is one UserError line naming it."""
    from commscope.util.text import printable

    try:
        write_bytes_atomic(path, data)
    except OSError as e:
        raise UserError(f"cannot write {printable(path)}: {e.strerror or e}") from None


# The markers commscope writes at the top of its outputs, and how an existing file is recognised as one.
HEAD_BYTES = 4096
PAGE_GENERATOR = '<meta name="generator" content="commscope">'  # reports.page: in the head
# a page without the generator tag: recognised by its fixed head up to the title
_LEGACY_PAGE = ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><meta name="viewport" '
                'content="width=device-width, initial-scale=1"><title>commscope report \u2014 ').encode()
TRACE_PRODUCER = b'{"otherData":{"producer":"commscope"'  # reports.perfetto: the document's first key
# the end-of-document layout of a trace: otherData closes the document, after every event
_LEGACY_TRACE_TAIL = re.compile(rb'"otherData":\{"producer":"commscope","t0_ns":-?\d+,"world_size":')


def _head(path: str | os.PathLike, n: int = HEAD_BYTES) -> bytes:
    """The first `n` bytes of a regular file, never following a link or blocking on a FIFO put there
    since it was checked; b"" when it cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return b""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return b""
        return os.read(fd, n)
    except OSError:
        return b""
    finally:
        os.close(fd)


def own_page(path: str | os.PathLike) -> bool:
    """Whether the file at `path` is an HTML report commscope wrote (its generator tag in the head)."""
    head = _head(path)
    return PAGE_GENERATOR.encode() in head or head.startswith(_LEGACY_PAGE)


def own_trace(path: str | os.PathLike) -> bool:
    """Whether the file at `path` is a Perfetto trace commscope wrote, plain or gzip: its first key is
    otherData with commscope as producer (or, in the end-of-document layout, its last key)."""
    head = _head(path)
    gz = head.startswith(b"\x1f\x8b")
    if gz:
        try:  # only the first bytes are inflated, however large the file
            with gzip.open(path, "rb") as f:
                head = f.read(HEAD_BYTES)
        except (OSError, EOFError, zlib.error):
            return False
    return _marked(head, lambda: _gzip_tail(path) if gz else _plain_tail(path))


def exported_trace(doc: bytes) -> bool:
    """Whether `doc`, a whole trace document in memory (inflated), is one commscope exported (`own_trace`'s
    test, on bytes)."""
    return _marked(doc[:HEAD_BYTES], lambda: doc[-_TAIL_BYTES:])


def _marked(head: bytes, tail: Callable[[], bytes | None]) -> bool:
    """Whether a trace whose first bytes are `head` carries commscope's marker: first, or (the end-of-document
    layout) in its last bytes, `tail()`, read only for a document that starts with its events."""
    if head.lstrip().startswith(TRACE_PRODUCER):
        return True
    if not head.startswith(b'{"traceEvents":['):
        return False
    last = tail()
    return last is not None and _LEGACY_TRACE_TAIL.search(last) is not None


_TAIL_BYTES = 65536
# How far a gzip trace in the end-of-document layout is inflated looking for its marker: the default per-file trace
# limit (COMMSCOPE_MAX_TRACE_MB, 1 GiB). A constant here, so the file-writing utilities need nothing of
# commscope.load; a larger one is refused as not ours, which only asks the user to remove it.
_LEGACY_GZIP_CAP = 2 ** 30


def _plain_tail(path: str | os.PathLike) -> bytes | None:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - _TAIL_BYTES))
            return f.read()
    except OSError:
        return None


def _gzip_tail(path: str | os.PathLike, cap: int | None = None) -> bytes | None:
    """The last 64 KiB of the inflated gzip file at `path`, inflating it a chunk at a time (memory stays
    a few MiB whatever the file holds); None when it cannot be read, is not valid gzip, or inflates past
    `cap` bytes (default _LEGACY_GZIP_CAP), so a foreign file cannot make this read for long."""
    cap = _LEGACY_GZIP_CAP if cap is None else cap
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    tail, total = b"", 0
    try:
        with open(path, "rb") as f:
            while not d.eof:
                data = d.unconsumed_tail or f.read(_CHUNK)
                if not data:
                    return None  # truncated
                out = d.decompress(data, _CHUNK)
                total += len(out)
                if total > cap:
                    return None
                tail = (tail + out)[-_TAIL_BYTES:]
    except (OSError, zlib.error):
        return None
    return tail


_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def check_output(out: str | os.PathLike, src: str | os.PathLike | None,
                 ours: Callable[[str | os.PathLike], bool] | None = None) -> None:
    """Refuse, in one clear UserError line each: an output inside the input directory `src` (commscope never
    writes where it reads; None: no input directory, e.g. a trace built in memory); an output that is an
    input file under another name (a hard link or symlink to it: compared by device and inode,
    `_input_named`); a symbolic link (commscope writes neither through a link nor over it); a directory,
    FIFO, device or socket (nothing to replace, and a FIFO would block); a folder that does not exist; and,
    when `ours` is given, an existing file that `ours` does not recognise as commscope's own output."""
    from commscope.util.text import printable

    shown = printable(out)
    if os.fspath(out) == "-":  # the shell's "standard output" would otherwise become a file named "-"
        raise UserError("refusing to write to '-': the output is a file (a page, a trace) written whole; give "
                        "its path")
    try:
        st = os.lstat(out)
    except FileNotFoundError:
        st = None
    except OSError as e:
        if e.errno not in (errno.ENOTDIR, errno.ENAMETOOLONG, errno.ELOOP):
            raise UserError(f"cannot write {shown}: {e.strerror or e}") from None
        st = None  # the parent checks below say what is wrong with the path
    o, s = _resolve(out), _resolve(src) if src is not None else None
    if s is not None and s.is_dir() and o == s:
        raise UserError(f"refusing to write {shown}: it is the input directory itself; choose an output file "
                        "elsewhere")
    if s is not None and s.is_dir() and (o.parent == s or s in o.parents):
        raise UserError(f"refusing to write {shown} inside the input directory {printable(src)}; "
                        "choose an output elsewhere")
    if s is not None:
        same = _input_named(out, s)
        if same is not None:
            raise UserError(f"refusing to write {shown}: it is the input file {printable(same)} (a hard link "
                            "or symlink to it); choose an output elsewhere")
    if st is not None and stat.S_ISLNK(st.st_mode):
        raise UserError(f"refusing to write {shown}: it is a symbolic link (commscope writes neither through "
                        "a link nor over it); choose another output")
    if o.is_dir():
        raise UserError(f"{shown} is a directory; give a file name to write")
    if st is not None:
        if not stat.S_ISREG(st.st_mode):
            kind = next((what for test, what in _KINDS if test(st.st_mode)), "a special file")
            raise UserError(f"refusing to write {shown}: it is {kind}, not a regular file; choose another output")
    if not o.parent.is_dir():
        raise UserError(f"output directory {printable(o.parent)} does not exist")
    if st is not None and ours is not None and not ours(out):
        other = next((what for own, what in _OUTPUT_KINDS if own is not ours and own(out)), None)
        if other is not None:
            this = dict((own, what) for own, what in _OUTPUT_KINDS).get(ours, "file")
            raise UserError(f"refusing to replace {shown}: it is {other} commscope wrote, not {this}; keep it and "
                            "choose another output")
        raise UserError(f"refusing to replace {shown}: it exists and commscope did not write it; "
                        "remove it or choose another output")


# The outputs a command replaces only when commscope wrote them, each as its refusal names it.
_OUTPUT_KINDS = ((own_page, "an HTML report"), (own_trace, "a Perfetto trace"))


def _resolve(p: str | os.PathLike) -> Path:
    try:
        return Path(p).resolve()
    except (RuntimeError, OSError) as e:  # RuntimeError: a symlink loop (before Python 3.13)
        from commscope.util.paths import missing_text
        from commscope.util.text import printable

        why = missing_text(p)
        raise UserError(printable(why if "symbolic link" in why else f"cannot resolve {p}: {e}")) from None


def _input_named(out: str | os.PathLike, src: Path) -> str | None:
    """The file of the input `src` (a file, or a folder's files two levels deep: a run directory's rank
    folders, a trace folder) that the existing file `out` is, by (device, inode); None when none is."""
    try:
        o = os.stat(out)
    except OSError:
        return None  # nothing there yet: writing creates a new file
    key = (o.st_dev, o.st_ino)
    todo = [(src, 0)]
    while todo:
        p, depth = todo.pop()
        try:
            st = os.stat(p)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == key:
            return str(p)
        if depth < 2 and p.is_dir():
            try:
                todo += [(p / n, depth + 1) for n in os.listdir(p)]
            except OSError:
                continue
    return None
