"""Claiming `commscope run --out DIR` for one run: a lock, the run marker, and replacing an earlier run
without losing it.

`claim(path, overwrite=...)` creates the folder if needed, takes an exclusive `flock` on the folder itself
(a second `commscope run` into it is refused while the first holds it), and decides what may happen to
what is there:

- empty (or new): the run starts;
- a commscope run (it holds `commscope-run.json`): refused unless `--overwrite`; then the old run's files
  are moved into `DIR/.commscope-previous-<old run id>/` (renames inside the folder: nothing is copied
  and nothing deleted), and other files the user put there (a report, notes) stay where they are; a rank
  folder holding anything a recorder does not write there (a user's file, a folder, a run started inside
  it) is refused, since the moved-aside rank folders are deleted whole at the new run's first step;
- anything else that is not empty: refused, with or without `--overwrite` (a model checkpoint's
  config.json or rank0/ is not a run, so commscope never deletes it).

Then the run marker (`commscope-run.json`, with the new run id) is written before anything else. When
the new run has its first step, `first_step()` deletes the moved-aside run; a new run that ends without
a step (a crash at start-up, Ctrl-C) gives the folder back to the old run in `settle()`, so replacing a
good run with a broken one loses nothing; the broken run's own files move into
`DIR/.commscope-unfinished-<run id>/`, where `commscope doctor` reads why it failed. A launcher killed with SIGKILL before the first step leaves
the old run in `.commscope-previous-<id>/`, where nothing deletes it and every reader of the folder says it is there.

Every failure to create or write the folder (read-only, not a directory, disk full) is one UserError
line, and what `claim` created is removed again.

Invariants: the lock is on the folder's inode, which never changes during the run (the old run moves
inside it, not the folder), and only the launcher holds it (the descriptor is not inherited); nothing
outside the run's own file names and the folder `claim` created is ever deleted.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import errno
import fcntl
import os
import re
import shutil
import socket
from dataclasses import dataclass, field

from commscope.errors import UserError
from commscope.rundir import launcher_log_tails, rank_dirs, read_run_marker, write_run_marker
from commscope.rundir.schema import (CONFIG, FLIGHT_RECORDER_DIR, LAUNCHER_LOG, LAUNCHER_LOGS, NODE_ENDED,
                                     PREVIOUS_RUN_PREFIX, PROGRESS, RANK_DIR, RECORDING_FILES, RUN_MARKER,
                                     SUMMARY, UNFINISHED_RUN_PREFIX)

# The file names a run owns in its folder (and every launcher log, LAUNCHER_LOGS); the marker moves last,
# so a move cut short is resumed by the next --overwrite (the folder still says it is a run).
_RUN_FILES = (SUMMARY, CONFIG, LAUNCHER_LOG, PROGRESS, FLIGHT_RECORDER_DIR)


def _run_entries(path: str) -> list[str]:
    names = [n for n in os.listdir(path) if n in _RUN_FILES or LAUNCHER_LOGS.match(n)
             or (RANK_DIR.match(n) and os.path.isdir(os.path.join(path, n)))]
    return sorted(names) + ([RUN_MARKER] if os.path.lexists(os.path.join(path, RUN_MARKER)) else [])


# A recorder's atomic write cut short leaves `.<name>.tmp<pid>-<hex>` (commscope.util.atomic) beside it
_RECORDING_TEMP = re.compile(r"\.(%s)\.tmp\d+-[0-9a-f]+" % "|".join(re.escape(n) for n in RECORDING_FILES))


def _foreign_in_rank_folders(path: str, entries: list[str]) -> list[str]:
    """What the run's rank folders hold that no recorder writes there (a user's notes, a folder, another
    run started inside one), as `rank<N>/<name>`: --overwrite moves the rank folders aside and then deletes
    them, so it may hold nothing commscope did not write."""
    foreign = []
    for n in entries:
        if RANK_DIR.match(n):
            d = os.path.join(path, n)
            foreign += [f"{n}/{e}" for e in sorted(os.listdir(d))
                        if not (e in RECORDING_FILES and os.path.isfile(os.path.join(d, e)))
                        and not _RECORDING_TEMP.fullmatch(e)]
    return foreign


def _why(e: OSError) -> str:
    return e.strerror or str(e)


def storage_error(e: OSError) -> bool:
    """True for the errors that mean the output cannot be written (full, read-only, over quota)."""
    return e.errno in (errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EIO)


@dataclass
class OutDir:
    """The claimed run folder: its lock, and where the replaced run waits (None: nothing replaced)."""

    path: str
    run_id: str
    created: bool
    lock_fd: int | None
    aside: str | None = None
    wrote_marker: bool = False
    shared: bool = False  # several nodes' launchers write into it (claim's `shared`)
    notes: list[str] = field(default_factory=list)

    def first_step(self) -> None:
        """The new run has a step: the replaced run goes for good."""
        if self.aside is not None:
            shutil.rmtree(self.aside, ignore_errors=True)
            self.notes.append("the replaced run was deleted after this run's first step")
            self.aside = None

    def settle(self, had_step: bool, keep: bool = True) -> str:
        """At the end of the run: delete the replaced run if the new one has a step, else put it back. The
        new run's own files then move into `DIR/.commscope-unfinished-<run id>/` (`keep`), the evidence of
        why it finished no step (`commscope doctor` reads them there), or go (`keep=False`: a run that never
        started has none). Returns the folder that holds this run's files now."""
        if self.aside is None:
            return self.path
        if had_step:
            self.first_step()
            return self.path
        kept = os.path.join(self.path, UNFINISHED_RUN_PREFIX + self.run_id) if keep else None
        if kept is not None:
            os.mkdir(kept)
        for n in _run_entries(self.path):
            p = os.path.join(self.path, n)
            if kept is not None:
                os.rename(p, os.path.join(kept, n))
            elif os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.remove(p)
        for n in os.listdir(self.aside):
            os.rename(os.path.join(self.aside, n), os.path.join(self.path, n))
        os.rmdir(self.aside)
        self.aside = None
        if kept is None:
            self.notes.append("this run finished no step: the run it was to replace is back in place")
            return self.path
        self.notes.append(f"this run finished no step: the run it was to replace is back in place, and this "
                          f"run's files are in {kept}")
        return kept

    def release(self) -> None:
        if self.lock_fd is not None:
            os.close(self.lock_fd)  # closing the descriptor drops the flock
            self.lock_fd = None

    def abandon(self) -> None:
        """The run never started (a bad option, an error before launch): undo the claim."""
        restored = self.aside is not None  # then the marker in place is the old run's again
        with contextlib.suppress(OSError):
            self.settle(had_step=False, keep=False)
        if self.shared:  # the folder and its marker are the job's once another node has written into it
            with contextlib.suppress(OSError):
                if self.wrote_marker and os.listdir(self.path) == [RUN_MARKER]:
                    os.remove(os.path.join(self.path, RUN_MARKER))
                if self.created:
                    os.rmdir(self.path)  # only while nothing is in it
        elif self.created:
            shutil.rmtree(self.path, ignore_errors=True)
        elif self.wrote_marker and not restored:
            with contextlib.suppress(OSError):
                os.remove(os.path.join(self.path, RUN_MARKER))
        self.release()


def _lock(path: str) -> int:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)  # not inheritable: the ranks never hold the lock
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        try:
            m = read_run_marker(path) or {}
        except ValueError:
            m = {}
        who = f" (run id {m.get('run_id')}, launcher pid {m.get('launcher_pid')})" if m else ""
        raise UserError(f"--out {path} is in use by another commscope run{who}; wait for it to end or "
                        "choose another directory") from None
    return fd


def claim(path: str, *, overwrite: bool, run_id: str, shared: bool = False, log_name: str | None = None) -> OutDir:
    """Make `path` this run's folder (see the module docstring); UserError when it may not be.

    `shared`: several nodes write into one folder on a shared filesystem, each with its own launcher;
    then the folder must be new, empty or started by another node of this job (a marker and no record or
    summary yet, nor this node's `log_name`), nothing is locked or replaced, and the first node to get
    there writes the marker."""
    if os.path.lexists(path) and not os.path.isdir(path):
        raise UserError(f"--out {path} exists and is not a directory")
    parent = os.path.dirname(os.path.abspath(path))
    if RANK_DIR.match(os.path.basename(os.path.abspath(path))) and os.path.lexists(os.path.join(parent, RUN_MARKER)):
        # its records would read as one rank of that run, and that run's readers refuse it
        raise UserError(f"--out {path} is a rank folder of the commscope run in {parent}; choose a directory "
                        "outside it")
    created = not os.path.lexists(path)
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise UserError(f"--out {path}: cannot create the run directory: {_why(e)}") from None
    out = OutDir(path, run_id, created, None, shared=shared)
    try:
        if not shared:
            out.lock_fd = _lock(path)
        _check_and_clear(out, overwrite, shared, log_name)
        # True while the write runs: one cut short (Ctrl-C after the file is in place, before the call
        # returns) leaves a marker that abandon() then removes. Its result is whether this call wrote it: with
        # several nodes the first launcher's marker stands, and the others join its run.
        out.wrote_marker = True
        out.wrote_marker = write_run_marker(
            path, run_id, exclusive=shared, created=dt.datetime.now().astimezone().isoformat(timespec="seconds"),
            host=socket.gethostname(), launcher_pid=os.getpid())
    except OSError as e:
        out.abandon()
        raise UserError(f"--out {path}: cannot write the run directory: {_why(e)}") from None
    except BaseException:
        out.abandon()
        raise
    return out


def _check_and_clear(out: OutDir, overwrite: bool, shared: bool, log_name: str | None = None) -> None:
    path = out.path
    entries = os.listdir(path)
    if shared:  # another node's marker being written is no content of its own
        entries = [n for n in entries if not n.startswith(f".{RUN_MARKER}.tmp")]
    if not entries:
        return
    try:
        marker = read_run_marker(path)
    except ValueError as e:
        raise UserError(f"--out {path}: {e}; not replacing it (remove it yourself if it is a run)") from None
    if marker is None:
        hint = " (a run directory without the run marker must be moved or removed by hand)" if rank_dirs(path) or SUMMARY in entries else ""
        raise UserError(f"--out {path} is not empty and holds no commscope run (no {RUN_MARKER}){hint}; "
                        "choose a new or empty directory")
    if shared:
        if SUMMARY in entries:
            raise UserError(f"--out {path} holds a finished commscope run (run id {marker['run_id']}); several "
                            "nodes need a new or empty directory (--overwrite replaces a run on one node only)")
        # No rank of this job starts before every node's torchrun has joined the rendezvous, so records
        # here, or this node's own log, are an earlier job's (one killed before its summary)
        ended = {n for n, tail in launcher_log_tails(path, 256).items() if tail.rstrip().endswith(NODE_ENDED)}
        earlier = sorted(n for n in entries if n in (CONFIG, PROGRESS) or RANK_DIR.match(n) or n == log_name
                         or n in ended)
        if earlier:
            raise UserError(f"--out {path} holds the records of an earlier run (run id {marker['run_id']}: "
                            f"{', '.join(earlier[:4])}{', …' if len(earlier) > 4 else ''}), not one this job's nodes "
                            "are starting; several nodes need a new or empty directory")
        return
    if not overwrite:
        raise UserError(f"--out {path} holds a commscope run (run id {marker['run_id']}); pass --overwrite to "
                        "replace it, or choose another directory")
    foreign = _foreign_in_rank_folders(path, _run_entries(path))
    if foreign:
        raise UserError(f"--out {path}: the run there holds what commscope did not write ("
                        f"{', '.join(foreign[:3])}{', …' if len(foreign) > 3 else ''}); --overwrite would delete it "
                        "with the old run: move it out of the rank folders, or choose another directory")
    aside = os.path.join(path, PREVIOUS_RUN_PREFIX + marker["run_id"])
    os.makedirs(aside, exist_ok=True)  # exists when an earlier move was cut short: finish it
    out.aside = aside
    for n in _run_entries(path):
        os.rename(os.path.join(path, n), os.path.join(aside, n))
    out.notes.append(f"replacing run {marker['run_id']}: kept in {aside} until this run's first step")
