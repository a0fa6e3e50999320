"""Why a path the user named cannot be read, in words that point at the cause.

A name that exists as a symbolic link leading nowhere, or round a loop, is no typo: "does not exist" would
send the user looking for one. Every command's refusal of an input or output path says it through here.
"""
from __future__ import annotations

import contextlib
import errno
import os


def missing_text(path: str | os.PathLike) -> str:
    """Why a named path cannot be read, in words: it does not exist, or a symbolic link on the way loops or
    points at nothing (then the name exists, and "does not exist" would send the user looking for a typo)."""
    p = os.fspath(path)
    try:
        os.stat(p)
    except OSError as e:
        if e.errno == errno.ELOOP:
            return f"{p}: cannot resolve it, a loop of symbolic links"
        if os.path.islink(p):
            with contextlib.suppress(OSError):
                return f"{p} is a symbolic link to {os.readlink(p)}, which does not exist"
    return f"{p} does not exist"
