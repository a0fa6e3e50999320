"""How a recording process ends is what its status.json says: interpreter exit without close() ("exited",
or "failed"/"interrupted" for the unhandled exception that ended it), and signals under torchrun through
`rec.handle_signals()` (the main thread's Terminated, TermGuard's stuck path)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import orjson
import pytest

from paths import ROOT
from ports import free_port

ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


def status(run, rank=0):
    """status.json without `ended_ns`, which every status the recorder writes holds (an int, ns)."""
    doc = orjson.loads((run / f"rank{rank}" / "status.json").read_bytes())
    assert type(doc.pop("ended_ns")) is int
    return doc


NO_CLOSE = textwrap.dedent("""
    import sys, commscope
    rec = commscope.record(sys.argv[1])
    for s in range(3):
        with rec.step(s):
            pass
    how = sys.argv[2]
    if how == "raise":
        raise ValueError("bad shard 7")
    if how == "ctrl-c":
        raise KeyboardInterrupt
    if how == "exit3":
        sys.exit(3)
    if how == "exit-in-step":
        with rec.step(3):
            sys.exit()
""")


@pytest.mark.parametrize("how, expected", [
    ("end", {"status": "exited", "error": "process exited without Recorder.close()"}),
    ("exit3", {"status": "exited", "error": "process exited without Recorder.close()"}),
    ("raise", {"status": "failed", "error": "ValueError: bad shard 7"}),
    ("ctrl-c", {"status": "interrupted", "error": "KeyboardInterrupt"}),
    ("exit-in-step", {"status": "exited", "error": "sys.exit(None) inside step 3: the step did not finish"}),
])
def test_interpreter_exit_without_close(tmp_path, how, expected):
    r = subprocess.run([sys.executable, "-c", NO_CLOSE, str(tmp_path), how], capture_output=True, text=True,
                       timeout=120, env=ENV, cwd=ROOT)
    assert r.returncode != 0 or how in ("end", "exit-in-step"), r.stderr  # sys.exit() exits 0
    assert status(tmp_path) == {**expected, "last_step": 2}


def test_handle_signals_refuses_other_threads_and_bad_arguments(tmp_path):
    import threading

    import commscope
    from commscope.recording import NullRecorder

    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    NullRecorder().handle_signals()  # records nothing, installs nothing
    assert {s: signal.getsignal(s) for s in before} == before
    with commscope.record(tmp_path) as rec:
        with pytest.raises(ValueError, match="is not a signal that can be handled"):
            rec.handle_signals(signals=(signal.SIGKILL,))
        with pytest.raises(ValueError, match="grace_s must be"):
            rec.handle_signals(grace_s=-1)
        errors = []
        t = threading.Thread(target=lambda: errors.append(pytest.raises(RuntimeError, rec.handle_signals)))
        t.start()
        t.join()
        assert "must be called from the main thread" in str(errors[0].value)
        rec.handle_signals()
        assert signal.getsignal(signal.SIGTERM) is not before[signal.SIGTERM]
        with pytest.raises(RuntimeError, match="already called"):
            rec.handle_signals()
    assert {s: signal.getsignal(s) for s in before} == before  # close() put them back


STALL = textwrap.dedent("""
    import datetime, sys, time, torch, torch.distributed as dist, commscope
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=5))
    rank = dist.get_rank()
    with commscope.record(sys.argv[1]) as rec:
        rec.handle_signals()
        for s in range(4):
            with rec.step(s):
                if rank == 1 and s == 2:
                    time.sleep(1000)   # stalls before the collective; rank 0's wait times out
                rec.collective(dist.all_reduce, torch.ones(4), label="g", phase="ar").wait()
""")


def test_torchrun_teardown_of_a_stalled_rank_leaves_terminated_status(tmp_path):
    script, out = tmp_path / "stall.py", tmp_path / "run"
    script.write_text(STALL)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
           str(free_port()), "--log-dir", str(tmp_path / "logs"), str(script), str(out)]  # no /tmp/torchelastic_*
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=ENV, cwd=ROOT)
    assert r.returncode != 0
    s0, s1 = status(out, 0), status(out, 1)
    assert s0["status"] == "failed" and s0["last_step"] == 1, s0
    assert s1 == {"status": "failed", "error": "Terminated: terminated by signal 15 (SIGTERM)", "last_step": 1,
                  "signal": "SIGTERM"}


BLOCKED = textwrap.dedent("""
    import os, sys, time, torch, torch.distributed as dist
    from commscope.recording import Recorder
    rank, out = int(os.environ["RANK"]), sys.argv[1]
    dist.init_process_group("gloo", rank=rank, world_size=2)
    if rank == 1:
        time.sleep(60)   # never joins the collective below
    rec = Recorder(out, rank=0, world_size=2, align=False)
    rec.handle_signals(grace_s=0.5)
    with rec.step(0):
        h = rec.collective(dist.all_reduce, torch.ones(4), label="g", phase="ar")
        open(os.path.join(out, "ready"), "w").close()
        h.wait()   # blocks in C++ until rank 1 joins: never
""")


def _signal_the_blocked_rank(tmp_path, sig: int) -> int:
    """Run BLOCKED on 2 ranks, send `sig` to rank 0 once it sits in the wait; its exit code. SIGINT starts
    at its default in the children: a shell's background job inherits it ignored."""
    env = {**ENV, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": "2"}
    procs = [subprocess.Popen([sys.executable, "-c", BLOCKED, str(tmp_path)], env={**env, "RANK": str(r)},
                              stderr=subprocess.PIPE, cwd=ROOT,
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)) for r in range(2)]
    try:
        deadline = time.time() + 60
        while not (tmp_path / "ready").exists():
            assert time.time() < deadline and procs[0].poll() is None, procs[0].stderr.read().decode()
            time.sleep(0.05)
        time.sleep(1.0)  # inside wait() by now
        procs[0].send_signal(sig)
        return procs[0].wait(timeout=30)
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_a_rank_blocked_in_a_collective_closes_from_the_guard_and_exits_143(tmp_path):
    code = _signal_the_blocked_rank(tmp_path, signal.SIGTERM)
    assert code == 128 + signal.SIGTERM
    assert status(tmp_path) == {"status": "failed", "last_step": -1, "error": "Terminated: terminated by signal 15 "
                                "(SIGTERM) while blocked in the wait of collective 'g' (all_reduce, group 0 seq 0)",
                                "signal": "SIGTERM"}
    assert (tmp_path / "rank0" / "inflight.json").exists()
    # the end began at the signal's arrival, not when the guard wrote the status after its 0.5 s grace
    # (align=False: the recorder's axis is this host's epoch clock, as the file's modification time is)
    doc = orjson.loads((tmp_path / "rank0" / "status.json").read_bytes())
    assert doc["ended_ns"] <= (tmp_path / "rank0" / "status.json").stat().st_mtime_ns - 400_000_000


def test_a_ctrl_c_on_a_rank_blocked_in_a_collective_closes_it_as_interrupted_and_exits_130(tmp_path):
    """KeyboardInterrupt cannot reach a main thread sitting in a collective's wait: the guard ends the rank
    with its status ("interrupted", naming the wait) rather than leaving it to torch.distributed.run's
    SIGKILL, which writes none."""
    code = _signal_the_blocked_rank(tmp_path, signal.SIGINT)
    assert code == 128 + signal.SIGINT
    assert status(tmp_path) == {"status": "interrupted", "last_step": -1, "error": "KeyboardInterrupt: terminated by "
                                "signal 2 (SIGINT) while blocked in the wait of collective 'g' (all_reduce, group 0 "
                                "seq 0)", "signal": "SIGINT"}
    assert (tmp_path / "rank0" / "inflight.json").exists()


CAUGHT = textwrap.dedent("""
    import os, sys, time
    from commscope.recording import Recorder
    out = sys.argv[1]
    rec = Recorder(out, rank=0, world_size=1)
    rec.handle_signals(grace_s=0.3)
    open(os.path.join(out, "ready"), "w").close()
    try:
        time.sleep(30)
    except KeyboardInterrupt:
        time.sleep(1.0)   # the script's own Ctrl-C handling, longer than the guard's grace
        open(os.path.join(out, "handled"), "w").close()
    rec.close()
""")


def test_a_ctrl_c_the_script_handles_outside_any_wait_is_left_to_it(tmp_path):
    p = subprocess.Popen([sys.executable, "-c", CAUGHT, str(tmp_path)], env=ENV, stderr=subprocess.PIPE, cwd=ROOT,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.time() + 60
        while not (tmp_path / "ready").exists():
            assert time.time() < deadline and p.poll() is None, p.stderr.read().decode()
            time.sleep(0.05)
        p.send_signal(signal.SIGINT)
        code = p.wait(timeout=30)
    finally:
        p.kill()
        p.wait()
    assert code == 0 and (tmp_path / "handled").exists()
    assert status(tmp_path)["status"] == "completed"
