"""Fault parsing, the injector proxy and the hang watchdog, in one process (no ranks)."""
from __future__ import annotations

import json
import string
import threading
import time
from pathlib import Path

import pytest
import torch.distributed as dist
from hypothesis import given, settings
from hypothesis import strategies as st

from instrumented_model import faults
from commscope.errors import UserError
from commscope.recording.api import NullRecorder
from commscope.recording.watchdog import Watchdog, write_inflight


# ---- parsing ----------------------------------------------------------------------------------
def test_parse_every_kind():
    assert faults.parse_fault("crash@rank=1,step=2") == faults.Fault("crash", 1, 2)
    assert faults.parse_fault(" hang@rank=3, step=0, label=mlp ") == faults.Fault("hang", 3, 0, "mlp")
    assert faults.parse_fault("delay@rank=0,step=4,label=attn,ms=250") == faults.Fault("delay", 0, 4, "attn", 250.0)
    assert faults.parse_fault("desync@rank=2,step=1,label=lm_head,how=size").how == "size"
    assert str(faults.parse_fault("delay@step=4,rank=0,ms=1.5")) == "delay@rank=0,step=4,ms=1.5"


@pytest.mark.parametrize("text, needle", [
    ("boom@rank=1,step=2", "KIND one of"),
    ("crash", "expected"),
    ("crash@step=2", "rank= is required"),
    ("crash@rank=1", "step= is required"),
    ("crash@rank=x,step=1", "rank must be an integer"),
    ("crash@rank=-1,step=1", "rank must be >= 0"),
    ("delay@rank=1,step=1", "delay needs ms"),
    ("delay@rank=1,step=1,ms=nan", "ms must be a number in 0..86,400,000"),
    ("delay@rank=1,step=1,ms=1e308", "ms must be a number in 0..86,400,000"),
    ("delay@rank=1,step=1,ms=fast", "ms must be a number"),
    ("hang@rank=1,step=1,ms=5", "only applies to delay"),
    ("hang@rank=1,step=1,how=op", "only applies to desync"),
    ("desync@rank=1,step=1,how=twice", "how must be one of"),
    ("crash@rank=1,rank=2,step=1", "given twice"),
    ("crash@rank=1,step=1,color=red", "bad field"),
])
def test_parse_refuses_with_one_line(text, needle):
    with pytest.raises(UserError, match=needle) as e:
        faults.parse_fault(text)
    assert "\n" not in str(e.value)


def test_parse_faults_checks_against_the_job():
    with pytest.raises(UserError, match="rank 4 does not exist"):
        faults.parse_faults(["crash@rank=4,step=0"], world_size=4, steps=3)
    with pytest.raises(UserError, match="never reached"):
        faults.parse_faults(["crash@rank=0,step=3"], world_size=4, steps=3)
    with pytest.raises(UserError, match="same step and label"):
        faults.parse_faults(["crash@rank=0,step=1", "hang@rank=0,step=1"], world_size=4, steps=3)
    assert len(faults.parse_faults(["crash@rank=0,step=1", "hang@rank=1,step=1"], world_size=4, steps=3)) == 2


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=string.printable + "é@=,", max_size=60))
def test_parse_never_fails_other_than_user_error(text):
    try:
        f = faults.parse_fault(text)
    except UserError as e:
        assert "\n" not in str(e)
    else:  # whatever parses, prints back to something that parses to the same fault
        assert faults.parse_fault(str(f)) == f


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(faults.KINDS), st.integers(0, 10**6), st.integers(0, 10**6),
       st.none() | st.text(alphabet=string.ascii_letters + "_:", min_size=1, max_size=12),
       st.floats(0, 1e6, allow_nan=False))
def test_parse_round_trip(kind, rank, step, label, ms):
    f = faults.Fault(kind, rank, step, label, ms if kind == "delay" else None)
    assert faults.parse_fault(str(f)) == f


# ---- injector ---------------------------------------------------------------------------------
class Spy(NullRecorder):
    def __init__(self):
        self.calls = []

    def collective(self, fn, *args, label, phase, **kwargs):
        self.calls.append((fn, args, kwargs, label, time.perf_counter()))
        return None


def test_wrap_leaves_other_ranks_untouched():
    rec = Spy()
    assert faults.wrap(rec, [faults.Fault("crash", 1, 0)], rank=0) is rec
    assert isinstance(faults.wrap(rec, [faults.Fault("crash", 0, 0)], rank=0), faults.FaultInjector)


def test_delay_sleeps_before_the_launch_of_its_label_only_at_its_step():
    import torch

    spy = Spy()
    rec = faults.wrap(spy, [faults.Fault("delay", 0, 1, "mlp", 300.0)], rank=0)
    t = torch.zeros(4)
    for s in range(3):
        with rec.step(s):
            t0 = time.perf_counter()
            rec.collective(dist.all_reduce, t, label="attn", phase="reduce")
            rec.collective(dist.all_reduce, t, label="mlp", phase="reduce")
            t1 = time.perf_counter()
        assert (t1 - t0 >= 0.3) == (s == 1)
    assert [c[3] for c in spy.calls] == ["attn", "mlp"] * 3


def test_desync_launches_the_wrong_op_or_size():
    import torch

    spy = Spy()
    rec = faults.wrap(spy, [faults.Fault("desync", 0, 0, "mlp"), faults.Fault("desync", 0, 0, "attn", how="size"),
                            faults.Fault("desync", 0, 1, "lm_head", how="size")], rank=0)
    out, inp, full = torch.zeros(8), torch.zeros(32), torch.zeros(32)
    with rec.step(0):
        rec.collective(dist.reduce_scatter_tensor, out, inp, label="mlp", phase="reduce")
        rec.collective(dist.all_reduce, full, label="attn", phase="reduce")
    with rec.step(1):
        rec.collective(dist.all_gather_into_tensor, full, out, label="lm_head", phase="gather")
    (fn0, a0, k0, *_), (fn1, a1, _, *_), (fn2, a2, _, *_) = spy.calls
    assert fn0 is dist.broadcast and a0[0] is inp and k0 == {"src": 0}  # same bytes, wrong op
    assert fn1 is dist.all_reduce and a1[0].numel() == 16
    assert fn2 is dist.all_gather_into_tensor and (a2[0].numel(), a2[1].numel()) == (16, 4)  # ws=4 ratio kept


# ---- watchdog ---------------------------------------------------------------------------------
class FakeRecorder(NullRecorder):
    enabled = True

    def __init__(self, rank_dir: Path):
        self.rank, self.world_size, self.rank_dir, self.last_step = 1, 4, rank_dir, 6
        self._shift = 1_000
        self.inflight = {}
        self.closed = None

    def inflight_snapshot(self):
        return [{k: (v + self._shift if k.endswith("_ns") and isinstance(v, int) else v) for k, v in r.items()}
                for r in self.inflight.values()]

    def close(self, status="completed", error=None):
        self.closed = (status, error)
        (self.rank_dir / "status.json").write_text(json.dumps({"status": status, "error": error}))


def _rec(seq, label, wait_ns=None, **kw):
    return {"kind": "collective", "step": 7, "label": label, "op": "all_reduce", "group": "0", "seq": seq,
            "bytes": 64, "call_ns": 10, "return_ns": 11, "wait_ns": wait_ns, "wait_end_ns": None, **kw}


def test_watchdog_fires_on_an_overdue_wait_and_reports_everything(tmp_path):
    rec = FakeRecorder(tmp_path)
    now = time.perf_counter_ns()
    rec.inflight = {("0", 5): _rec(5, "attn"), ("0", 6): _rec(6, "mlp", wait_ns=now - 10**9)}
    exits = []
    wd = Watchdog(rec, 0.5, poll_s=0.02, grace_s=0.0, exit_fn=exits.append)
    assert wd.overdue(now)["label"] == "mlp"  # waiting 1 s > 0.5 s
    assert wd.overdue(now - 6 * 10**8) is None  # 0.4 s earlier it was not overdue yet
    wd.start()
    deadline = time.time() + 10
    while not exits and time.time() < deadline:
        time.sleep(0.02)
    assert exits == [124]
    doc = json.loads((tmp_path / "watchdog.json").read_text())
    assert doc["rank"] == 1 and doc["last_step"] == 6 and doc["timeout_s"] == 0.5
    assert doc["waiting_on"]["label"] == "mlp" and doc["waiting_on"]["wait_ns"] == now - 10**9 + 1_000
    assert [r["seq"] for r in doc["inflight"]] == [5, 6]
    assert any("MainThread" in k for k in doc["stacks"])
    assert rec.closed[0] == "failed" and "hang watchdog" in rec.closed[1] and "'mlp'" in rec.closed[1]


def test_watchdog_exit_waits_for_a_status_being_written_by_the_main_thread(tmp_path):
    rec = FakeRecorder(tmp_path)
    rec.close = lambda *a: None  # already closing elsewhere: returns at once, status.json not there yet
    rec.inflight = {("0", 1): _rec(1, "attn", wait_ns=time.perf_counter_ns() - 10**10)}
    exits = []
    wd = Watchdog(rec, 0.1, grace_s=0.0, exit_fn=lambda c: exits.append((c, (tmp_path / "status.json").exists())))
    threading.Timer(0.5, lambda: (tmp_path / "status.json").write_text("{}")).start()
    t0 = time.monotonic()
    wd.fire(wd.overdue())
    assert exits == [(124, True)] and time.monotonic() - t0 >= 0.4


def test_watchdog_ignores_finished_waits_and_stops(tmp_path):
    rec = FakeRecorder(tmp_path)
    old = time.perf_counter_ns() - 10**10
    rec.inflight = {("0", 1): _rec(1, "attn", wait_ns=old, wait_end_ns=old + 5)}
    exits = []
    wd = Watchdog(rec, 0.1, poll_s=0.01, grace_s=0.0, exit_fn=exits.append).start()
    time.sleep(0.2)
    wd.stop()
    assert not exits and not (tmp_path / "watchdog.json").exists()
    with pytest.raises(ValueError):
        Watchdog(rec, 0)


def test_watchdog_on_nccl_times_from_the_launch_because_wait_returns_at_once(tmp_path):
    # NCCL's wait() only orders streams: a hang blocks the host later, in a sync, so a CUDA collective is
    # overdue once it was launched longer ago than the timeout and is still in flight (the recorder
    # resolves CUDA collectives at every step end).
    rec = FakeRecorder(tmp_path)
    rec._cuda = object()
    now = time.perf_counter_ns()
    rec.inflight = {("0", 1): _rec(1, "attn", call_ns=now - 10**9, wait_ns=now - 10**9, wait_end_ns=now - 10**9 + 5),
                    ("0", 2): _rec(2, "mlp", call_ns=now - 10**8, wait_ns=None)}
    wd = Watchdog(rec, 0.5, grace_s=0.0, exit_fn=lambda c: None)
    assert wd.overdue(now)["label"] == "attn"  # its wait() returned, yet it is 1 s old and unfinished
    assert wd.overdue(now - 6 * 10**8) is None
    rec.inflight.pop(("0", 1))
    assert wd.overdue(now) is None  # 0.1 s old: not yet


def test_flight_recorder_dump_only_on_nccl_and_where_doctor_reads_it(tmp_path, monkeypatch):
    import torch._C._distributed_c10d as c10d

    from commscope.recording.watchdog import dump_flight_recorder

    rec = FakeRecorder(tmp_path / "rank1")
    rec.run_dir = tmp_path
    rec.backend = "gloo"
    assert dump_flight_recorder(rec) is False and not (tmp_path / "flight_recorder").exists()
    rec.backend = "nccl"
    calls = []
    monkeypatch.setattr(c10d, "_dump_nccl_trace", lambda *a: calls.append(a) or b"pickled-trace", raising=False)
    assert dump_flight_recorder(rec) is True
    assert calls == [(True, True, False)]
    assert (tmp_path / "flight_recorder" / "rank_1").read_bytes() == b"pickled-trace"
    monkeypatch.setattr(c10d, "_dump_nccl_trace", lambda *a: (_ for _ in ()).throw(RuntimeError("no")))
    assert dump_flight_recorder(rec) is False  # a torch without the hook: the watchdog's own report stands


def test_write_inflight_only_when_something_is_in_flight(tmp_path):
    rec = FakeRecorder(tmp_path)
    assert write_inflight(rec, "x") is False and not (tmp_path / "inflight.json").exists()
    rec.inflight = {("0", 3): _rec(3, "embed")}
    assert write_inflight(rec, "Terminated") is True
    doc = json.loads((tmp_path / "inflight.json").read_text())
    assert doc["reason"] == "Terminated" and doc["inflight"][0]["call_ns"] == 1_010


@pytest.mark.parametrize("argv, needle", [
    (["--inject", "boom@rank=0,step=0"], "KIND one of"),
    (["--inject", "crash@rank=9,step=0"], "rank 9 does not exist"),
    (["--inject", "hang@rank=0,step=5,label=mlp"], "never reached"),
    (["--hang-timeout", "0"], "--hang-timeout must be > 0"),
])
def test_run_refuses_bad_fault_options_before_launching(argv, needle, tmp_path, capsys):
    import sys

    from commscope import cli

    old = sys.argv
    sys.argv = ["commscope", "run", "--nproc", "2", "--steps", "2", "--out", str(tmp_path / "r"), *argv]
    try:
        with pytest.raises(SystemExit) as e:
            cli.main()
    finally:
        sys.argv = old
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and err.count("\n") == 0 and needle in err
    assert not (tmp_path / "r").exists()  # refused before the run directory was made


def test_watchdog_on_cuda_counts_from_the_launch(tmp_path):
    # NCCL wait() returns at once (stream ordering); a collective still in flight long after its launch
    # means the step never ended: that is the hang on GPUs.
    rec = FakeRecorder(tmp_path)
    rec._cuda = object()
    now = time.perf_counter_ns()
    rec.inflight = {("0", 4): _rec(4, "mlp", wait_ns=now - 2 * 10**9, wait_end_ns=now - 2 * 10**9, call_ns=now - 3 * 10**9),
                    ("0", 5): _rec(5, "loss", call_ns=now - 10**8)}
    wd = Watchdog(rec, 1.0, grace_s=0.0, exit_fn=lambda c: None)
    assert wd.overdue(now)["label"] == "mlp"
    assert Watchdog(FakeRecorder(tmp_path), 1.0).overdue(now) is None
    assert wd.report(wd.overdue(now))["waited_s"] >= 3.0
