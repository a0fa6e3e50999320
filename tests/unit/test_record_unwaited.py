"""A collective whose handle the caller drops without waiting on it (DDP's join path waits on the Work's
future, never on commscope's handle; a fire-and-forget launch) is written once its Work has finished, with
no wait and no end (docs/run_format.md), on the CUDA path (fake CUDA events, gloo Works). Kept pending it
would stop the early resolution of every later record for the rest of the run and read as a hang to the
watchdog. A handle still held may yet be waited on: its collective stays pending until it is."""
from __future__ import annotations

import orjson
import torch
import torch.distributed as dist

from commscope.recording import Recorder
from commscope.recording.watchdog import Watchdog
from fake_cuda import use_fake_cuda


def records(path):
    return [orjson.loads(ln) for ln in (path / "rank0" / "events.jsonl").read_bytes().splitlines() if ln.strip()]


def test_a_dropped_unwaited_collective_is_written_once_finished(tmp_path, monkeypatch, gloo1):
    use_fake_cuda(monkeypatch)
    rec = Recorder(tmp_path, rank=0, world_size=1, device="cuda", backend="gloo")
    t = torch.ones(4)
    for s in range(3):
        with rec.step(s):
            with rec.region("forward"):
                h = rec.collective(dist.all_reduce, t, label="dropped", phase="reduce")
                h.work.wait()  # what DDP does through the Work's future; commscope's handle is never waited
                del h
            with rec.region("backward"):
                pass
            # the region ends after the drop resolved the records before it early, inside the step
            assert rec._lines
            rec.collective(dist.all_reduce, t, label="waited", phase="reduce").wait()
        assert rec.inflight == {} and rec._pending == []
    # a handle still held is not given up on: waited in the next step, its wait is recorded
    with rec.step(3):
        held = rec.collective(dist.all_reduce, t, label="held", phase="reduce")
        held.work.wait()
    assert list(rec.inflight) == [("0", 6)]
    dog = Watchdog(rec, timeout_s=1.0)
    assert dog.overdue(rec.inflight[("0", 6)]["call_ns"] + 2_000_000_000)["label"] == "held"
    with rec.step(4):
        held.wait()
    rec.close()
    colls = [r for r in records(tmp_path) if r["kind"] == "collective"]
    assert [(r["label"], r["step"], r["seq"]) for r in colls] == [
        ("dropped", 0, 0), ("waited", 0, 1), ("dropped", 1, 2), ("waited", 1, 3), ("dropped", 2, 4),
        ("waited", 2, 5), ("held", 3, 6)]
    for r in colls:
        assert r["start_ns"] is not None and r["call_ns"] <= r["start_ns"] <= r["return_ns"]
        if r["label"] == "dropped":
            assert (r["wait_ns"], r["wait_end_ns"], r["end_ns"]) == (None, None, None)
        else:
            assert r["return_ns"] <= r["wait_ns"] <= r["wait_end_ns"] <= r["end_ns"]
