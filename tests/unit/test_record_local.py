"""Recorder in one process: hook order vs autograd order, regions, steps, crash safety, config/meta/status."""
from __future__ import annotations

import os
import sys

import orjson
import pytest
import torch
import torch.distributed as dist

import commscope
from commscope.errors import UserError
from commscope.recording import NullRecorder, Recorder, record
from commscope.recording.clock import offset_bounds
from commscope.recording.collective import comm_size, op_name
from commscope.util.cpus import usable_cores
from commscope.util.step_range import parse_step_range
from fake_cuda import FakeCudaEvent, use_fake_cuda


def read(path):
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def chain(n=4, d=8):
    torch.manual_seed(0)
    return torch.nn.Sequential(*[torch.nn.Linear(d, d, bias=False) for _ in range(n)])


def test_hook_order_is_autograd_order_last_layer_first(tmp_path):
    model = chain(4)
    rec = Recorder(tmp_path, rank=0, world_size=1)
    rec.watch({f"layer{i}": m.weight for i, m in enumerate(model)})
    for s in range(2):
        with rec.step(s) as st:
            for m in range(2):
                rec.set_micro_step(m)
                with rec.region("forward"):
                    loss = model(torch.randn(3, 8)).square().mean()
                with rec.region("backward"):
                    loss.backward()
            st.loss = loss.item()
    rec.close()
    ev = read(tmp_path / "rank0" / "events.jsonl")
    hooks = [e for e in ev if e["kind"] == "hook"]
    assert len(hooks) == 2 * 2 * 4
    for s in range(2):
        for m in range(2):
            fired = sorted((e for e in hooks if e["step"] == s and e["micro_step"] == m), key=lambda e: e["position"])
            assert [e["label"] for e in fired] == ["layer3", "layer2", "layer1", "layer0"]
            assert [e["position"] for e in fired] == [0, 1, 2, 3]
            ts = [e["t_ns"] for e in fired]
            assert ts == sorted(ts)
    regions = [e for e in ev if e["kind"] == "region"]
    assert [(r["step"], r["micro_step"], r["name"]) for r in regions] == [
        (s, m, n) for s in range(2) for m in range(2) for n in ("forward", "backward")
    ]
    steps = [e for e in ev if e["kind"] == "step"]
    assert [s["step"] for s in steps] == [0, 1]
    for s in steps:
        mine = [r for r in regions if r["step"] == s["step"]]
        assert all(s["start_ns"] <= r["start_ns"] <= r["end_ns"] <= s["end_ns"] for r in mine)
        # the step record is the last record of its step in the file
        assert max(i for i, e in enumerate(ev) if e["step"] == s["step"]) == ev.index(s)
    # common axis is Unix-epoch ns: within a minute of now
    assert abs(steps[-1]["end_ns"] - __import__("time").time_ns()) < 60e9
    status = orjson.loads((tmp_path / "rank0" / "status.json").read_bytes())
    assert status.pop("ended_ns") >= steps[-1]["end_ns"]  # a completed end: the close, after the last step
    assert status == {"status": "completed", "error": None, "last_step": 1}
    meta = orjson.loads((tmp_path / "rank0" / "meta.json").read_bytes())
    assert meta["schema_version"] == 1 and meta["clock"]["offset_ns"] == 0 and meta["world_size"] == 1
    assert meta["cpu_cores"] == usable_cores() >= 1  # what a report needs to tell an oversubscribed CPU run


def test_exception_in_step_keeps_finished_steps_and_partial_records(tmp_path):
    rec = Recorder(tmp_path, rank=0, world_size=1)
    with pytest.raises(RuntimeError):
        for s in range(3):
            with rec.step(s) as st:
                with rec.region("forward"):
                    if s == 2:
                        raise RuntimeError("boom")
                st.loss = float(s)
    rec.close("failed", "boom")
    ev = read(tmp_path / "rank0" / "events.jsonl")
    assert [e["loss"] for e in ev if e["kind"] == "step"] == [0.0, 1.0]
    assert [e["step"] for e in ev if e["kind"] == "region"] == [0, 1, 2]
    assert orjson.loads((tmp_path / "rank0" / "status.json").read_bytes())["last_step"] == 1


def test_config_written_by_rank0_only(tmp_path):
    r0 = Recorder(tmp_path, rank=0, world_size=1)
    r0.write_config({"scatter_order": ["a", "b"]})
    r0.close()
    r1 = Recorder(tmp_path / "other", rank=1, world_size=2, align=False)
    r1.write_config({"scatter_order": ["x"]})
    r1.close()
    assert orjson.loads((tmp_path / "config.json").read_bytes())["scatter_order"] == ["a", "b"]
    assert not (tmp_path / "other" / "config.json").exists()


@pytest.mark.parametrize("config, why", [
    ({"model": "resnet50"}, "write_config: model is 'resnet50', expected an object"),
    ({"args": ["--lr", "1"]}, "write_config: args is ['--lr', '1'], expected an object"),
    ({"scatter_order": "head,mlp"}, "write_config: scatter_order is 'head,mlp', expected a list"),
    ({"schema_version": 5}, "write_config: schema_version is commscope's own key (it writes the run format's)"),
    ([("args", {})], "write_config takes a dict, got list")])
def test_a_config_no_command_could_read_fails_where_it_is_written(tmp_path, config, why):
    """A key the readers know, written with another type, would make report, doctor and hooks refuse the run
    later; every rank (and the recorder that records nothing) refuses it at the call. Other keys are free."""
    from commscope.recording.api import NullRecorder

    rec = Recorder(tmp_path / "run", rank=0, world_size=1, align=False)
    other = Recorder(tmp_path / "other", rank=1, world_size=2, align=False)
    for r in (rec, other, NullRecorder()):
        with pytest.raises(ValueError) as e:
            r.write_config(config)
        assert str(e.value) == why
    assert not (tmp_path / "run" / "config.json").exists()
    other.close()
    rec.write_config({"args": {"lr": 1.0}, "model": {"name": "resnet50"}, "mine": ["anything", 1]})
    rec.close()
    from commscope.load import load_path

    assert load_path(str(tmp_path / "run")).config["config"]["mine"] == ["anything", 1]


def test_bad_arguments_raise_plain_errors_worded_for_the_api(tmp_path):
    with pytest.raises(ValueError, match="trace must be one of off, light, full; got 'loud'"):
        record(tmp_path, trace="loud")
    with pytest.raises(ValueError, match="mode must be one of light, full"):
        Recorder(tmp_path, rank=0, world_size=1, mode="off")
    with pytest.raises(RuntimeError, match="needs torch.distributed initialized"):
        Recorder(tmp_path, rank=0, world_size=2)  # no process group
    (tmp_path / "f").write_text("x")
    with pytest.raises(ValueError, match="exists and is not a directory"):
        Recorder(tmp_path / "f", rank=0, world_size=1)
    assert isinstance(record(tmp_path / "unused", trace="off"), NullRecorder)
    assert not (tmp_path / "unused").exists()
    rec = Recorder(tmp_path / "w", rank=0, world_size=1)
    with pytest.raises(ValueError, match="not a leaf tensor"):
        rec.watch({"x": torch.randn(2, requires_grad=True) * 2})  # not a leaf
    with pytest.raises(RuntimeError, match="do not nest"):
        with rec.step(0):
            with rec.step(1):
                pass
    rec.close()


def window(spec):
    return parse_step_range(spec, "--profile", closed=True)


def test_profile_steps_parse_and_refuse_bad_windows():
    with pytest.raises(UserError):
        window("5:3")
    with pytest.raises(UserError) as e:  # the forms it names are those a window takes: no open end
        window("a:b")
    assert str(e.value) == "--profile must look like A:B or A with integer steps, got 'a:b'"
    for open_end in ("5:", ":8", ":", "-2:3"):  # the window needs both ends, from step 0 on
        with pytest.raises(UserError):
            window(open_end)
    assert window("5:8") == (5, 8) and window("4") == (4, 5) and window((2, 3)) == (2, 3)


def test_context_manager_writes_completed_status(tmp_path):
    with commscope.record(tmp_path) as rec:  # rank 0 of 1 without a process group
        assert isinstance(rec, Recorder) and rec.world_size == 1
        for s in range(2):
            with rec.step(s) as st:
                st.loss = 1.0
    status = orjson.loads((tmp_path / "rank0" / "status.json").read_bytes())
    assert type(status.pop("ended_ns")) is int
    assert status == {"status": "completed", "error": None, "last_step": 1}
    with commscope.record(tmp_path / "off", trace="off") as rec:
        assert not rec.enabled
    assert not (tmp_path / "off").exists()


def test_context_manager_writes_failed_status_with_the_exception(tmp_path):
    with pytest.raises(KeyError):
        with commscope.record(tmp_path, rank=0, world_size=1) as rec:
            with rec.step(0):
                pass
            raise KeyError("shard_7")
    status = orjson.loads((tmp_path / "rank0" / "status.json").read_bytes())
    assert type(status.pop("ended_ns")) is int
    assert status == {"status": "failed", "error": "KeyError: 'shard_7'", "last_step": 0}
    with pytest.raises(SystemExit):
        with commscope.record(tmp_path / "exit0") as rec:
            sys.exit(0)  # a normal end of the script
    assert orjson.loads((tmp_path / "exit0" / "rank0" / "status.json").read_bytes())["status"] == "completed"
    # ... but not one that leaves a step unfinished: its peers may be waiting in that step's collectives
    with pytest.raises(SystemExit):
        with commscope.record(tmp_path / "exit-in-step") as rec:
            with rec.step(0):
                pass
            with rec.step(1):
                sys.exit(0)
    status = orjson.loads((tmp_path / "exit-in-step" / "rank0" / "status.json").read_bytes())
    assert (status["status"], status["error"], status["last_step"]) == (
        "exited", "sys.exit(0) inside step 1: the step did not finish", 0)


def test_comm_size_follows_nccl_tests_convention():
    t = torch.empty(8, 4, dtype=torch.bfloat16)  # 64 bytes
    shard = torch.empty(2, 4, dtype=torch.bfloat16)  # 16 bytes
    assert comm_size("all_reduce", (t,), {}, 4) == (64, "bfloat16")
    assert comm_size("reduce_scatter", (shard, t), {}, 4) == (64, "bfloat16")
    assert comm_size("all_gather", (t, shard), {}, 4) == (64, "bfloat16")
    assert comm_size("all_gather", ([shard] * 4, shard), {}, 4) == (64, "bfloat16")
    assert comm_size("broadcast", (), {"tensor": t}, 4) == (64, "bfloat16")
    assert comm_size("barrier", (), {}, 4) == (0, None)
    # gather / scatter: every rank passes its part (the list exists on the root only): the full array is 4 parts
    assert comm_size("gather", (shard, [shard] * 4), {}, 4) == comm_size("gather", (shard,), {}, 4) == (64, "bfloat16")
    assert comm_size("scatter", (shard,), {"scatter_list": None, "src": 0}, 4) == (64, "bfloat16")
    # a group= keyword alone takes the positional path; tensors by keyword are still found
    assert comm_size("reduce_scatter", (shard, t), {"group": None}, 4) == (64, "bfloat16")
    assert comm_size("all_gather", (), {"output_tensor": t, "input_tensor": shard, "group": None}, 4) == (64, "bfloat16")
    assert comm_size("all_reduce", (torch.empty(3, dtype=torch.float32),), {}, 4) == (12, "float32")
    assert op_name(dist.reduce_scatter_tensor) == "reduce_scatter"
    assert op_name(dist.all_gather_into_tensor) == "all_gather"
    assert op_name(dist.barrier) == "barrier"


def test_offset_bounds_recover_a_known_skew():
    # rank 1's clock runs 5 s ahead; each all_gather takes 100 us and rank 1 enters 30 us late.
    skew, rounds = 5_000_000_000, 4
    before = torch.zeros(rounds, 2, dtype=torch.int64)
    after = torch.zeros(rounds, 2, dtype=torch.int64)
    for k in range(rounds):
        t = 1_000_000 * k
        before[k] = torch.tensor([t, t + 30_000 + skew])
        after[k] = torch.tensor([t + 100_000, t + 100_000 + skew])
    lo, hi = offset_bounds(before, after, rank=1)
    assert lo <= -skew <= hi
    assert hi - lo <= 2 * 100_000



def test_collectives_single_rank_gloo(tmp_path, gloo1):
    rec = Recorder(tmp_path, rank=0, world_size=1, backend="gloo")
    sub = dist.new_group([0])
    with rec.step(0) as st:
        t = torch.ones(16)
        h1 = rec.collective(dist.all_reduce, t, label="a", phase="allreduce")
        h2 = rec.collective(dist.all_reduce, t, label="b", phase="allreduce", group=sub)
        h3 = rec.collective(dist.all_reduce, t, label="c", phase="allreduce")
        for h in (h3, h1, h2):
            h.wait()
        st.loss = 1.0
    h4 = rec.collective(dist.all_reduce, t, label="late", phase="allreduce")  # outside a step
    assert len(rec.inflight) <= 1
    h4.wait()
    rec.close()
    coll = [e for e in read(tmp_path / "rank0" / "events.jsonl") if e["kind"] == "collective"]
    assert [(c["label"], c["seq"], c["step"]) for c in coll] == [("a", 0, 0), ("b", 0, 0), ("c", 1, 0), ("late", 2, -1)]
    assert coll[0]["group"] != coll[1]["group"]
    for c in coll:
        assert c["bytes"] == 64 and c["dtype"] == "float32" and c["op"] == "all_reduce" and c["timing"] == "wall"
        assert c["call_ns"] <= c["return_ns"] <= c["wait_ns"] <= c["wait_end_ns"]
        assert c["end_ns"] >= c["call_ns"] and c["start_ns"] is None
    assert not rec.inflight


def test_a_group_passed_in_its_place_is_the_group_recorded(tmp_path, gloo1):
    """`dist.all_reduce(t, op, pg)` runs on pg, as `group=pg` does: the record says pg, numbered with pg's
    collectives, not the world group's (which numbered subgroups' calls as the world's: a healthy job whose
    subgroups ran different sizes read as a desync)."""
    rec = Recorder(tmp_path, rank=0, world_size=1, backend="gloo")
    sub = dist.new_group([0])
    with rec.step(0):
        t = torch.ones(16)
        rec.collective(dist.all_reduce, t, dist.ReduceOp.SUM, sub, label="pos", phase="allreduce").wait()
        rec.collective(dist.all_reduce, t, label="world", phase="allreduce").wait()
        rec.collective(dist.all_reduce, t, group=sub, label="kw", phase="allreduce").wait()
        rec.collective(dist.broadcast, t, 0, sub, label="ag", phase="broadcast").wait()
    rec.close()
    coll = {c["label"]: c for c in read(tmp_path / "rank0" / "events.jsonl") if c["kind"] == "collective"}
    assert coll["pos"]["group"] == coll["kw"]["group"] == coll["ag"]["group"] != coll["world"]["group"]
    assert [coll[k]["seq"] for k in ("pos", "kw", "ag", "world")] == [0, 1, 2, 0]


def test_a_collective_without_a_completion_is_marked_as_ended_at_its_wait(tmp_path, gloo1):
    """gloo's reduce_scatter_tensor gives no future: its end is the wait's return, and the record says so
    (the readers then take no transfer time from it); one with a completion callback carries no mark."""
    rec = Recorder(tmp_path, rank=0, world_size=1, backend="gloo")
    with rec.step(0):
        t, out = torch.ones(16), torch.empty(16)
        rec.collective(dist.reduce_scatter_tensor, out, t, label="rs", phase="rs").wait()
        rec.collective(dist.all_reduce, t, label="ar", phase="ar").wait()
    rec.close()
    coll = {c["label"]: c for c in read(tmp_path / "rank0" / "events.jsonl") if c["kind"] == "collective"}
    assert coll["rs"]["end_at_wait"] is True and coll["rs"]["end_ns"] == coll["rs"]["wait_end_ns"]
    assert "end_at_wait" not in coll["ar"]
    from commscope.load import load_path

    frame = load_path(str(tmp_path)).collectives.set_index("label")
    assert frame.loc["rs", "end_at_wait"] is True and frame.loc["ar", "end_at_wait"] is None


def test_profiler_window_writes_kineto_trace_of_exactly_those_steps(tmp_path, gloo1):
    import gzip

    rec = Recorder(tmp_path, rank=0, world_size=1, backend="gloo", profile_steps="1:3")
    model = chain(2)
    for s in range(4):
        with rec.step(s) as st:
            with rec.region("forward"):
                loss = model(torch.randn(2, 8)).sum()
            loss.backward()
            rec.collective(dist.all_reduce, model[0].weight.grad, label="layer0", phase="allreduce").wait()
            st.loss = loss.item()
    rec.close()
    doc = orjson.loads(gzip.decompress((tmp_path / "rank0" / "trace.json.gz").read_bytes()))
    names = {e.get("name") for e in doc["traceEvents"]}
    assert {"ProfilerStep#1", "ProfilerStep#2"} <= names
    assert not {"ProfilerStep#0", "ProfilerStep#3"} & names
    assert "commscope:layer0:allreduce" in names and "forward" in names
    assert sum(e.get("name") == "commscope:layer0:allreduce" for e in doc["traceEvents"]) == 2
    # record_shapes=True: cpu ops carry input dims
    assert any("Input Dims" in e.get("args", {}) for e in doc["traceEvents"])
    steps = [e for e in read(tmp_path / "rank0" / "events.jsonl") if e["kind"] == "step"]
    assert [s["step"] for s in steps] == [0, 1, 2, 3]


def test_unwatch_stops_hook_records(tmp_path):
    rec = Recorder(tmp_path, rank=0, world_size=1)
    model = chain(2)
    rec.watch({f"l{i}": m.weight for i, m in enumerate(model)})
    for s in range(2):
        if s == 1:
            rec.unwatch()
        with rec.step(s):
            model(torch.randn(2, 8)).sum().backward()
    rec.close()
    hooks = [e for e in read(tmp_path / "rank0" / "events.jsonl") if e["kind"] == "hook"]
    assert sorted(h["label"] for h in hooks) == ["l0", "l1"] and {h["step"] for h in hooks} == {0}


def test_cuda_event_path_resolves_on_the_common_axis(tmp_path, monkeypatch, gloo1):
    """The CUDA branch (anchors, event stamps, end event after wait, pooled events) with a fake event."""
    use_fake_cuda(monkeypatch)
    rec = Recorder(tmp_path, rank=0, world_size=1, device="cuda", backend="gloo")
    model = chain(3)
    rec.watch({f"l{i}": m.weight for i, m in enumerate(model)})
    FakeCudaEvent.created = FakeCudaEvent.syncs = 0
    for s in range(5):
        with rec.step(s) as st:
            with rec.region("forward"):
                loss = model(torch.randn(2, 8)).sum()
            with rec.region("backward"):
                loss.backward()
            hs = [rec.collective(dist.all_reduce, m.weight.grad, label=f"l{i}", phase="allreduce")
                  for i, m in enumerate(model)]
            for h in hs:
                h.wait()
            model.zero_grad()
            st.loss = loss.item()
    rec.close()
    # per step: 1 anchor + 2 per region + 2 per collective; pooled events are reused after step 0
    assert FakeCudaEvent.created <= 1 + 4 + 6 + 5 * 1
    # resolved in bulk: one synchronize per step (one stream), not one per event (5 x 11 events)
    assert FakeCudaEvent.syncs <= 5 + 1
    ev = read(tmp_path / "rank0" / "events.jsonl")
    coll = [e for e in ev if e["kind"] == "collective"]
    assert len(coll) == 15 and all(c["timing"] == "cuda_event" for c in coll)
    for c in coll:
        assert c["call_ns"] <= c["start_ns"] <= c["return_ns"] <= c["wait_ns"] <= c["wait_end_ns"] <= c["end_ns"]
        assert c["duration_ns"] is None
    for st in (e for e in ev if e["kind"] == "step"):
        regs = [r for r in ev if r["kind"] == "region" and r["step"] == st["step"]]
        assert [r["name"] for r in regs] == ["forward", "backward"]
        assert all(r["timing"] == "cuda_event" for r in regs)
        # the fake GPU is instant, so event times equal host times: inside the step, in order
        assert st["start_ns"] <= regs[0]["start_ns"] <= regs[0]["end_ns"] <= regs[1]["start_ns"] <= regs[1]["end_ns"] <= st["end_ns"]


def test_an_event_goes_back_to_the_pool_only_once_it_is_read(monkeypatch):
    """The watchdog and TermGuard resolve from their own threads while the main thread stamps: an event in
    the pool may be taken and recorded again at once, so host_ns reads it first."""
    from commscope.recording.timing import CudaClock

    use_fake_cuda(monkeypatch)
    clock = CudaClock(torch.device("cuda", 0))
    stamp = clock.stamp()
    seen = []
    real = FakeCudaEvent.elapsed_time

    def elapsed_time(self, end):
        seen.append(end in clock._pool)
        return real(self, end)

    monkeypatch.setattr(FakeCudaEvent, "elapsed_time", elapsed_time)
    clock.host_ns(stamp)
    assert seen == [False] and clock._pool == [stamp.event]


def test_close_from_two_threads_closes_once_and_the_second_caller_finds_the_status(tmp_path, monkeypatch):
    """The main thread, the watchdog and TermGuard may all close: the first caller writes (here slowly),
    the second waits until status.json is there instead of returning early; an abnormal end also leaves
    the in-flight collectives (inflight.json) for doctor."""
    import threading
    import time

    rec = Recorder(tmp_path, rank=0, world_size=1)
    rec.inflight[("0", 4)] = {"kind": "collective", "label": "mlp", "group": "0", "seq": 4, "op": "all_reduce",
                              "call_ns": 10, "wait_ns": None}
    slow_sink_close = rec._sink.close
    monkeypatch.setattr(rec._sink, "close", lambda: (time.sleep(0.5), slow_sink_close()))
    first = threading.Thread(target=rec.close, args=("failed", "hang watchdog: waited"))
    first.start()
    time.sleep(0.1)
    t0 = time.monotonic()
    rec.close("failed", "Terminated: by signal 15")  # second caller
    waited = time.monotonic() - t0
    first.join()
    status = orjson.loads((tmp_path / "rank0" / "status.json").read_bytes())
    assert status["error"] == "hang watchdog: waited" and waited >= 0.3
    inflight = orjson.loads((tmp_path / "rank0" / "inflight.json").read_bytes())
    assert inflight["reason"] == "hang watchdog: waited" and [r["seq"] for r in inflight["inflight"]] == [4]


def test_stream_cache_builds_one_object_per_stream_and_rebuilds_past_its_bound():
    """CudaClock's current-stream lookup: one Stream object per id tuple, a new one when the id changes."""
    import commscope.recording.timing as timing

    current = [("s", 0, 1)]
    made = []

    def make():
        made.append(object())
        return made[-1]

    source = timing.cached_by_key(lambda: current[0], make)
    a = source()
    assert source() is a and len(made) == 1
    current[0] = ("t", 0, 1)
    b = source()
    assert b is not a and len(made) == 2
    current[0] = ("s", 0, 1)
    assert source() is a and len(made) == 2
    for i in range(timing._MAX_STREAMS + 5):  # many distinct streams: the cache stays bounded
        current[0] = ("x", i, 1)
        source()
    current[0] = ("s", 0, 1)
    assert source() is not a  # evicted with the rest, rebuilt on demand


def test_region_records_its_times_when_its_body_raises_also_under_the_profiler(tmp_path):
    rec = Recorder(tmp_path, rank=0, world_size=1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        with pytest.raises(ValueError):
            with rec.step(0):
                with rec.region("outer"):
                    with rec.region("inner"):
                        raise ValueError("boom")
    rec.close("failed", "boom")
    regions = [e for e in read(tmp_path / "rank0" / "events.jsonl") if e["kind"] == "region"]
    assert [r["name"] for r in regions] == ["inner", "outer"]
    inner, outer = regions
    assert outer["start_ns"] <= inner["start_ns"] <= inner["end_ns"] <= outer["end_ns"]
    names = [e.name for e in prof.events()]
    assert names.count("outer") == 1 and names.count("inner") == 1  # the annotations closed too


def test_status_is_written_when_the_closing_fsync_fails(tmp_path, monkeypatch):
    """An fsync the disk refuses at close (EIO, or ENOSPC on NFS) must not cost status.json: without it
    doctor reads the rank as one that died. The file is closed all the same."""
    import errno

    import commscope.recording.sink as sink

    rec = Recorder(tmp_path, rank=0, world_size=1)
    with rec.step(0):
        pass
    fd = rec._sink._fd

    def refused(_):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(sink.os, "fsync", refused)
    rec.close()
    assert orjson.loads((tmp_path / "rank0" / "status.json").read_bytes())["status"] == "completed"
    with pytest.raises(OSError):
        os.fstat(fd)  # closed
    assert [orjson.loads(ln)["kind"] for ln in (tmp_path / "rank0" / "events.jsonl").read_bytes().splitlines()] == ["step"]


def test_a_signal_before_this_recording_began_is_not_its_end(tmp_path, monkeypatch):
    """The arrival of an ending signal is process-wide (one process is one rank): one that reached this
    process before the recorder started (an earlier recording's, in a test run or a notebook) is no part of
    this recording's end, which is then its close, with no `signal`."""
    import signal as signals
    import time

    from commscope.recording import termguard

    monkeypatch.setattr(termguard, "_arrived_ns", None)
    monkeypatch.setattr(termguard, "_arrived_signal", None)
    termguard._arrived(signals.SIGTERM)  # an earlier recording's signal
    before = time.time_ns()
    rec = Recorder(tmp_path, rank=0, world_size=1)
    rec.close("failed", "RuntimeError: boom")
    doc = orjson.loads((tmp_path / "rank0" / "status.json").read_bytes())
    assert "signal" not in doc and doc["ended_ns"] >= before
    termguard._arrived_ns = None  # the next recording in this process
    rec = Recorder(tmp_path / "b", rank=0, world_size=1)
    termguard._arrived(signals.SIGTERM)  # this one's own
    rec.close("failed", "Terminated: terminated by signal 15 (SIGTERM)")
    assert orjson.loads((tmp_path / "b" / "rank0" / "status.json").read_bytes())["signal"] == "SIGTERM"


class _Terminated(BaseException):
    pass


def test_a_signal_after_the_steps_write_leaves_its_status_naming_the_step(tmp_path, monkeypatch):
    """A signal's exception raised after the step's write returned (between the write and the bookkeeping
    after it) must not leave status.json's last_step one behind the records on disk."""
    rec = Recorder(tmp_path, rank=0, world_size=1)
    real = rec._sink.append

    def append_then_signal(lines):
        real(lines)
        if any(b'"kind":"step"' in line and b'"step":3' in line for line in lines):
            raise _Terminated()  # as a SIGTERM handler raising right after the write

    monkeypatch.setattr(rec._sink, "append", append_then_signal)
    with pytest.raises(_Terminated):
        for s in range(5):
            with rec.step(s) as st:
                with rec.region("forward"):
                    pass
                st.loss = float(s)
    rec.close("interrupted", "Terminated")
    steps = [e["step"] for e in read(tmp_path / "rank0" / "events.jsonl") if e["kind"] == "step"]
    assert steps == [0, 1, 2, 3]
    assert orjson.loads((tmp_path / "rank0" / "status.json").read_bytes())["last_step"] == 3


def test_a_signal_before_the_steps_write_leaves_the_step_unfinished(tmp_path, monkeypatch):
    rec = Recorder(tmp_path, rank=0, world_size=1)
    real = rec._sink.append

    def signal_then_append(lines):
        if any(b'"kind":"step"' in line and b'"step":3' in line for line in lines):
            raise _Terminated()
        real(lines)

    monkeypatch.setattr(rec._sink, "append", signal_then_append)
    with pytest.raises(_Terminated):
        for s in range(5):
            with rec.step(s) as st:
                st.loss = float(s)
    rec.close("interrupted", "Terminated")
    steps = [e["step"] for e in read(tmp_path / "rank0" / "events.jsonl") if e["kind"] == "step"]
    assert steps == [0, 1, 2]  # the step record in hand is lost with the write, as steps._write says
    status = orjson.loads((tmp_path / "rank0" / "status.json").read_bytes())
    assert status["last_step"] == 2


def test_the_handle_answers_as_torchs_work_does(tmp_path, gloo1):
    """is_completed() and get_future() pass through to the Work, so code written for torch's Work runs on a
    handle; a rank outside the group gets a handle whose future is already done."""
    rec = Recorder(tmp_path, rank=0, world_size=1, backend="gloo")
    with rec.step(0):
        t = torch.ones(8)
        h = rec.collective(dist.all_reduce, t, label="a", phase="p")
        assert h.get_future().wait()[0].sum().item() == 8.0 and h.is_completed()
        h.wait()
    rec.close()
    from commscope.recording import NullRecorder

    h = NullRecorder().collective(dist.all_reduce, torch.ones(2), label="b", phase="p")
    h.wait()
    assert h.is_completed() and h.get_future().wait() is not None
