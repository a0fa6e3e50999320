"""commscope.util.abandon: a stop signal inside a section that cannot be unwound (HTA's fork pool) ends the
process at once, its children killed and reaped, with the CLI's words and exit code; a script's own
handler is left alone."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from paths import ROOT

SECTION = textwrap.dedent("""
    import contextlib, multiprocessing as mp, os, signal, sys, time
    from commscope.cli import _stop_signals_raise
    from commscope.util.abandon import abandon_on_stop

    def work(_):
        time.sleep(60)

    if sys.argv[1] == "own":  # a script's own handler: not taken over
        signal.signal(signal.SIGTERM, lambda *a: (print("own handler", flush=True), os._exit(7)))
    # "cli": inside the CLI's stop handling, as `commscope report` runs HTA; else a library caller
    with _stop_signals_raise() if sys.argv[1] == "cli" else contextlib.nullcontext():
        with abandon_on_stop():
            pool = mp.get_context("fork").Pool(2)
            pool.map_async(work, range(2))
            time.sleep(0.5)
            print(" ".join(str(p.pid) for p in mp.active_children()), flush=True)
            time.sleep(60)
    print("unwound", flush=True)
""")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is dead, though not yet reaped by its parent
        return f.read().split(") ")[-1][0] != "Z"


@pytest.mark.parametrize("sig, words, code", [(signal.SIGTERM, "commscope: aborted (SIGTERM)", 143),
                                              (signal.SIGINT, "commscope: aborted", 130)])
def test_a_stop_signal_in_the_section_ends_the_process_and_its_workers(sig, words, code):
    # SIGINT at its default in the child: a shell's background job inherits it ignored, and Python then
    # installs no KeyboardInterrupt handler (the test would wait for an interrupt that never comes)
    p = subprocess.Popen([sys.executable, "-c", SECTION, "cli"], cwd=ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    children = [int(x) for x in p.stdout.readline().split()]
    assert len(children) == 2
    p.send_signal(sig)
    out, err = p.communicate(timeout=30)
    assert p.returncode == code and err.strip() == words and "unwound" not in out
    deadline = time.monotonic() + 10
    while any(_alive(c) for c in children) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(c) for c in children)


@pytest.mark.parametrize("mode, code", [("own", 7), ("library", -signal.SIGTERM)])
def test_outside_the_cli_the_callers_handling_stands(mode, code):
    """A script's own handler runs as it would; a library caller's default SIGTERM ends it by the kernel's
    default action: neither is taken over (nor are the caller's own children commscope's to kill)."""
    p = subprocess.Popen([sys.executable, "-c", SECTION, mode], cwd=ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    children = [int(x) for x in p.stdout.readline().split()]
    p.send_signal(signal.SIGTERM)
    got = p.wait(timeout=30)
    for c in children:  # the caller ended without its pool's cleanup: end the workers here
        if _alive(c):
            os.kill(c, signal.SIGKILL)
    out, err = p.communicate(timeout=30)
    assert got == code and ("own handler" in out) == (mode == "own") and "aborted" not in err


def test_signal_to_the_whole_group_leaves_no_worker_behind():
    """SIGTERM to the process group kills the pool's workers too, and the pool's thread forks replacements
    while the command leaves: each of them ends at once, and the command exits with no process of its
    group left (a replacement forked after the children are listed would otherwise outlive it, orphaned in
    a futex wait on the queue lock a killed worker held)."""
    for attempt in range(5):
        p = subprocess.Popen([sys.executable, "-c", SECTION, "cli"], cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
                             start_new_session=True)
        p.stdout.readline()
        os.killpg(p.pid, signal.SIGTERM)
        _, err = p.communicate(timeout=30)
        assert p.returncode == 143 and err.strip() == "commscope: aborted (SIGTERM)"
        deadline = time.monotonic() + 10  # a replacement forked at the last moment is still ending
        while (left := [int(x) for x in subprocess.run(["pgrep", "-g", str(p.pid)], capture_output=True,
                                                           text=True).stdout.split()]) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [x for x in left if _alive(x)], f"attempt {attempt}: processes of the group left behind: {left}"
