"""TermGuard: a rank whose main thread is blocked in a gloo collective (C++, Python handlers cannot run)
still writes its last words on SIGTERM and exits 128+15; a main thread that is free claims the cleanup
itself and the guard stays out of the way."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from commscope.recording.termguard import TermGuard
from ports import free_port

WORKER = textwrap.dedent("""
    import os, signal, sys, time
    import torch, torch.distributed as dist
    from commscope.recording.termguard import TermGuard

    rank, out = int(os.environ["RANK"]), sys.argv[1]
    def handler(signum, frame):
        raise SystemExit("main thread ran the handler")
    signal.signal(signal.SIGTERM, handler)
    def stuck(signum):
        with open(os.path.join(out, f"last_words{rank}"), "w") as f:
            f.write(str(signum))
    TermGuard(stuck, grace_s=0.5).start()
    dist.init_process_group("gloo", rank=rank, world_size=2)
    if rank == 1:
        time.sleep(60)   # never joins the collective below
    else:
        open(os.path.join(out, "ready"), "w").close()
        dist.all_reduce(torch.ones(4))  # blocks in C++ until rank 1 joins: never
        open(os.path.join(out, "returned"), "w").close()
""")



@pytest.mark.slow
def test_blocked_rank_writes_its_last_words_and_exits(tmp_path):
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": "2"}
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(tmp_path)], env={**env, "RANK": str(r)},
                              stderr=subprocess.PIPE) for r in range(2)]
    try:
        deadline = time.time() + 60
        while not (tmp_path / "ready").exists():
            assert time.time() < deadline and procs[0].poll() is None, procs[0].stderr.read().decode()
            time.sleep(0.05)
        time.sleep(1.0)  # rank 0 is inside all_reduce by now
        t0 = time.monotonic()
        procs[0].send_signal(signal.SIGTERM)
        code = procs[0].wait(timeout=20)
        took = time.monotonic() - t0
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert code == 128 + signal.SIGTERM
    assert (tmp_path / "last_words0").read_text() == str(int(signal.SIGTERM))
    assert not (tmp_path / "returned").exists()
    assert 0.5 <= took < 10  # the guard waited its grace for the main thread, then acted


def test_free_main_thread_claims_first_and_guard_stays_out(tmp_path):
    calls, exits = [], []
    caught = []
    old = signal.signal(signal.SIGTERM, lambda s, f: caught.append(s))
    guard = TermGuard(calls.append, grace_s=0.2, exit_fn=exits.append).start()
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.01)  # the Python handler runs here, on the main thread
        assert caught == [signal.SIGTERM]
        assert guard.claim("main") and guard.claimed_by == "main"
        time.sleep(0.5)
        assert calls == [] and exits == []
        assert not guard.claim("again")
    finally:
        guard.stop()
        signal.signal(signal.SIGTERM, old)


def test_guard_acts_when_main_does_not_claim(tmp_path):
    calls, exits = [], []
    old = signal.signal(signal.SIGTERM, lambda s, f: None)
    guard = TermGuard(calls.append, grace_s=0.1, exit_fn=exits.append).start()
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        deadline = time.time() + 5
        while not exits and time.time() < deadline:
            time.sleep(0.02)
        assert calls == [signal.SIGTERM] and exits == [128 + signal.SIGTERM]
        assert guard.claimed_by == "guard"
        t0 = time.time()
        assert not guard.claim("main") and time.time() - t0 < 1  # the guard's cleanup is done: no wait
    finally:
        guard.stop()
        signal.signal(signal.SIGTERM, old)


def test_main_losing_to_the_guard_waits_for_its_cleanup():
    import threading

    release = threading.Event()
    written = []

    def slow_close(signum):
        release.wait(5)
        written.append(signum)

    old = signal.signal(signal.SIGTERM, lambda s, f: None)
    guard = TermGuard(slow_close, grace_s=0.05, exit_fn=lambda code: None).start()
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        deadline = time.time() + 5
        while guard.claimed_by != "guard" and time.time() < deadline:
            time.sleep(0.01)
        threading.Timer(0.3, release.set).start()
        assert not guard.claim("main")  # returns only once the guard's cleanup has run
        assert written == [signal.SIGTERM]
    finally:
        guard.stop()
        signal.signal(signal.SIGTERM, old)
