"""`free_port()`: a TCP port on 127.0.0.1 that nothing listens on now, for the rendezvous of multi-process
tests (each test picks its own, so tests running side by side never join each other's process group)."""
from __future__ import annotations

import socket


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
