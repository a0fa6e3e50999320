"""flush="step" on CUDA resolves a step's records inside the step once the GPU has passed them (at region
ends), so the step end has little left to do; what it writes is the same as when the GPU lags behind to
the step end, each record once, on the common axis."""
from __future__ import annotations

import orjson
import pytest
import torch
import torch.distributed as dist

from commscope.recording import Recorder
from fake_cuda import FakeCudaEvent, use_fake_cuda

TIMES = ("t_ns", "start_ns", "end_ns", "call_ns", "return_ns", "wait_ns", "wait_end_ns")


def records(path):
    return [orjson.loads(line) for line in (path / "rank0" / "events.jsonl").read_bytes().splitlines() if line.strip()]


def by_step(recs):
    """step → sorted records without their times (which differ between runs)."""
    out: dict = {}
    for r in recs:
        shape = {k: v for k, v in r.items() if k not in TIMES}
        out.setdefault(r["step"], []).append(orjson.dumps(shape, option=orjson.OPT_SORT_KEYS))
    return {s: sorted(v) for s, v in out.items()}


def model3():
    torch.manual_seed(0)
    return torch.nn.Sequential(*[torch.nn.Linear(8, 8, bias=False) for _ in range(3)])


def one_step(rec, s, model, *, gpu_catches_up, after_optimizer=None, fail=False):
    """forward / backward / optimizer (three collectives, waited); the lagging fake GPU catches up after
    the backward when `gpu_catches_up`."""
    with rec.step(s) as st:
        with rec.region("forward"):
            loss = model(torch.ones(2, 8)).sum()
        with rec.region("backward"):
            loss.backward()
        if gpu_catches_up:
            FakeCudaEvent.catch_up()
        with rec.region("optimizer"):
            hs = [rec.collective(dist.all_reduce, m.weight.grad, label=f"l{i}", phase="reduce")
                  for i, m in enumerate(model)]
            for h in hs:
                h.wait()
        if after_optimizer:
            after_optimizer(rec)
        if fail:
            raise RuntimeError("boom")
        model.zero_grad()
        st.loss = float(s)


# A CUDA time is anchor.host_ns + (event - anchor event) on the GPU; anchor.host_ns is read just after the
# anchor is recorded, so a time may pass the host's step end by that gap (a preempted CI process: ms).
SLACK_NS = 10**9


def assert_on_axis_inside_steps(recs):
    """Every time of a step's records lies within its step (give or take SLACK_NS): shifted onto the
    common axis exactly once (twice would add ~1.7e18 ns)."""
    steps = {r["step"]: r for r in recs if r["kind"] == "step"}
    for r in recs:
        st = steps.get(r["step"])
        if st is None or r["kind"] == "step":
            continue
        for k in TIMES:
            if r.get(k) is not None:
                assert st["start_ns"] <= r[k] <= st["end_ns"] + SLACK_NS, (r, k)


def test_records_the_gpu_passed_are_resolved_at_region_ends_and_written_as_when_it_lags(tmp_path, monkeypatch, gloo1):
    use_fake_cuda(monkeypatch)
    FakeCudaEvent.lag = True
    early_lines = {}
    out = {}
    for catches_up in (False, True):
        d = tmp_path / str(catches_up)
        rec = Recorder(d, rank=0, world_size=1, device="cuda", backend="gloo")
        model = model3()
        rec.watch({f"l{i}": m.weight for i, m in enumerate(model)})
        seen = []
        for s in range(3):
            one_step(rec, s, model, gpu_catches_up=catches_up, after_optimizer=lambda r: seen.append(len(r._lines)))
            assert [r["step"] for r in records(d) if r["kind"] == "step"] == list(range(s + 1))  # written at its end
        rec.close()
        early_lines[catches_up] = seen
        out[catches_up] = records(d)
    # At the optimizer's end: the 3 hook records either way; with the GPU caught up after the backward, the
    # forward and backward regions too. The collectives launched after it catches up are not passed yet.
    assert early_lines == {False: [3, 3, 3], True: [5, 5, 5]}
    assert by_step(out[True]) == by_step(out[False])
    assert [r["kind"] for r in out[True]].count("region") == 9 and [r["kind"] for r in out[True]].count("hook") == 9
    for recs in out.values():
        assert_on_axis_inside_steps(recs)
        for s in range(3):  # the step record is the last of its step's records
            assert [r["kind"] for r in recs if r["step"] == s][-1] == "step"


def test_a_step_that_raises_writes_its_early_records_once(tmp_path, monkeypatch, gloo1):
    use_fake_cuda(monkeypatch)
    FakeCudaEvent.lag = True
    rec = Recorder(tmp_path, rank=0, world_size=1, device="cuda", backend="gloo")
    model = model3()
    rec.watch({f"l{i}": m.weight for i, m in enumerate(model)})
    one_step(rec, 0, model, gpu_catches_up=True)
    with pytest.raises(RuntimeError, match="boom"):
        one_step(rec, 1, model, gpu_catches_up=True, fail=True)
    FakeCudaEvent.catch_up()
    rec.close("failed", "boom")
    recs = records(tmp_path)
    step1 = [r for r in recs if r["step"] == 1]
    # forward and backward were resolved early (once); the optimizer region, not passed when the step
    # raised, is dropped as on any abnormal end; its collectives stay pending and close writes them
    assert sorted(r["name"] for r in step1 if r["kind"] == "region") == ["backward", "forward"]
    assert sorted(r["label"] for r in step1 if r["kind"] == "hook") == ["l0", "l1", "l2"]
    assert sorted(r["seq"] for r in step1 if r["kind"] == "collective") == [3, 4, 5]
    assert not [r for r in step1 if r["kind"] == "step"]
    step0 = next(r for r in recs if r["kind"] == "step")
    for r in step1:  # after step 0 on the common axis, not shifted twice
        assert all(step0["end_ns"] <= r[k] < step0["end_ns"] + 60 * 10**9 for k in TIMES if r.get(k) is not None)


def test_align_clocks_inside_a_step_is_refused(tmp_path, monkeypatch):
    use_fake_cuda(monkeypatch)
    rec = Recorder(tmp_path, rank=0, world_size=1, device="cuda", backend="gloo")
    with pytest.raises(RuntimeError, match=r"align_clocks\(\) inside step 4: .* align between steps"):
        with rec.step(4):
            rec.align_clocks()
    rec.close("failed", "test")


def key(r):
    k = r["kind"]
    if k == "collective":
        return (k, r["group"], r["seq"])
    if k == "hook":
        return (k, r["step"], r["micro_step"], r["label"])
    if k == "region":
        return (k, r["step"], r["micro_step"], r["name"])
    return (k, r["step"])


@pytest.mark.parametrize("seed", range(12))
def test_a_gpu_catching_up_at_random_points_writes_each_record_once_on_the_axis(tmp_path, monkeypatch, gloo1, seed):
    """Nested regions, regions outside steps, 1-2 micro-steps with hooks, collectives waited in the next
    step, and a lagging GPU that passes a random number of queued events at random points."""
    import random

    rnd = random.Random(seed)
    use_fake_cuda(monkeypatch)
    FakeCudaEvent.lag = True
    rec = Recorder(tmp_path, rank=0, world_size=1, device="cuda", backend="gloo")
    model = model3()
    rec.watch({f"l{i}": m.weight for i, m in enumerate(model)})

    def maybe():
        if rnd.random() < 0.4:
            FakeCudaEvent.catch_up(rnd.randint(0, len(FakeCudaEvent.queued)))

    carry, regions, outside, micro = [], 0, 0, 0
    for s in range(6):
        if rnd.random() < 0.3:
            with rec.region(f"outside{s}"):
                maybe()
            outside += 1
        with rec.step(s) as st:
            n_micro = rnd.choice([1, 2])
            micro += n_micro
            regions += 3 * n_micro + 2
            for m in range(n_micro):
                rec.set_micro_step(m)
                with rec.region("fwd"):
                    maybe()
                    with rec.region("inner"):
                        loss = model(torch.ones(2, 8)).sum()
                    maybe()
                with rec.region("bwd"):
                    loss.backward()
                maybe()
            rec.set_micro_step(None)
            for h in carry:
                h.wait()
            carry = []
            with rec.region("opt"):
                for i, m in enumerate(model):
                    h = rec.collective(dist.all_reduce, m.weight.grad, label=f"l{i}", phase="reduce")
                    maybe()
                    carry.append(h) if rnd.random() < 0.3 else h.wait()
            with rec.region("after"):
                maybe()
            model.zero_grad()
            st.loss = 1.0
    for h in carry:
        h.wait()
    rec.close()
    recs = records(tmp_path)
    keys = [key(r) for r in recs]
    assert len(keys) == len(set(keys))  # each record once
    kinds = [r["kind"] for r in recs]
    assert (kinds.count("collective"), kinds.count("step"), kinds.count("region"), kinds.count("hook")) == (
        18, 6, regions + outside, 3 * micro)
    steps = {r["step"]: r for r in recs if r["kind"] == "step"}
    lo, hi = min(r["start_ns"] for r in steps.values()), max(r["end_ns"] for r in steps.values())
    pos = {k: i for i, k in enumerate(keys)}
    for r in recs:
        times = [r[k] for k in TIMES if r.get(k) is not None]
        assert all(isinstance(t, int) and lo - 10**10 <= t <= hi + 10**10 for t in times), r  # shifted once
        if r["kind"] in ("region", "hook") and r["step"] in steps:
            st = steps[r["step"]]
            assert all(st["start_ns"] <= t <= st["end_ns"] + SLACK_NS for t in times), (r, st)
            assert pos[key(r)] < pos[("step", r["step"])]  # the step record after its regions and hooks


def three_early_then(rec, *left):
    """Inside a step with a lagging GPU: regions a, b, c, each passed by the next region end (resolved
    early), then regions `left`, which the GPU has not passed."""
    for n in ("a", "b", "c"):
        with rec.region(n):
            pass
        FakeCudaEvent.catch_up()
    for n in left:
        with rec.region(n):
            pass
    assert len(rec._lines) == 3


def interrupting(fn, at_call):
    """`fn`, raising KeyboardInterrupt (as a signal's exception would) at its `at_call`-th call."""
    def wrapped(*a, **k):
        wrapped.calls.append(1)
        if len(wrapped.calls) == at_call:
            raise KeyboardInterrupt
        return fn(*a, **k)

    wrapped.calls = []
    return wrapped


def test_an_interrupted_step_end_keeps_what_was_resolved_and_shifts_nothing_twice(tmp_path, monkeypatch, gloo1):
    """A signal's exception (here KeyboardInterrupt) inside the step end's resolve: the records resolved
    inside the step are still written (by close); only the record in hand is lost."""
    use_fake_cuda(monkeypatch)
    FakeCudaEvent.lag = True
    rec = Recorder(tmp_path, rank=0, world_size=1, device="cuda", backend="gloo")
    real = rec._cuda.host_ns
    with pytest.raises(KeyboardInterrupt):
        with rec.step(0):
            three_early_then(rec, "last", "later")
            rec._cuda.host_ns = interrupting(real, at_call=1)
    rec._cuda.host_ns = real
    rec.close("failed", "interrupted")
    recs = records(tmp_path)
    assert [r["name"] for r in recs] == ["a", "b", "c", "later"]  # "last" was in hand
    assert all(abs(r["start_ns"] - recs[0]["start_ns"]) < 10**10 for r in recs)


def test_a_region_outside_steps_is_put_on_the_axis_of_its_write(tmp_path, monkeypatch, gloo1):
    """Between steps align_clocks() may move the axis: a record made outside a step waits for the next
    write and is moved onto the axis then, as the step's own records are."""
    import dataclasses

    import commscope.recording.recorder as recorder

    use_fake_cuda(monkeypatch)
    rec = Recorder(tmp_path, rank=0, world_size=1, device="cuda", backend="gloo", align=False)
    with rec.step(0):
        with rec.region("a"):
            pass
    with rec.region("eval"):  # outside a step, before the re-alignment
        pass
    real = recorder.align_clocks
    monkeypatch.setattr(recorder, "align_clocks",
                        lambda *a, **k: dataclasses.replace(real(*a, **k), offset_ns=5 * 10**9))
    rec.align_clocks()
    with rec.step(1):
        with rec.region("b"):
            pass
    rec.close()
    t = {r.get("name"): r["start_ns"] for r in records(tmp_path) if r["kind"] == "region"}
    assert t["b"] - t["eval"] < 10**9 and t["eval"] - t["a"] > 4 * 10**9  # eval on the new axis, as b


def test_a_close_from_another_thread_during_a_region_end_shifts_nothing_twice(tmp_path, monkeypatch, gloo1):
    """The hang watchdog (or TermGuard) closes the recorder from its own thread while the main thread
    resolves at a region's end: one of them resolves each record. The interleaving that would shift a
    record twice is forced: the main thread, inside its resolve, lets the other thread start closing and
    waits (up to 0.5 s) for it to have moved a record onto the axis; that thread then waits for the main
    thread to finish its region end before it writes."""
    import threading

    use_fake_cuda(monkeypatch)
    rec = Recorder(tmp_path, rank=0, world_size=1, device="cuda", backend="gloo")
    with rec.step(0):
        with rec.region("a"):
            pass
    closer = threading.Thread(target=rec.close, args=("failed", "hang"), name="watchdog")
    moved_one, main_done = threading.Event(), threading.Event()
    real_on_axis, real_ready = rec._on_axis, rec._cuda.ready

    def on_axis(r, keys):
        out = real_on_axis(r, keys)
        if threading.current_thread() is closer:
            moved_one.set()
            main_done.wait(5)
        return out

    def ready(stamp):
        if threading.current_thread() is threading.main_thread() and closer.ident is None:
            closer.start()
            moved_one.wait(0.5)  # without the write lock the closer resolves "b" here
        return real_ready(stamp)

    rec._on_axis, rec._cuda.ready = on_axis, ready
    with rec.step(1):
        with rec.region("b"):
            pass
        main_done.set()
    closer.join(10)
    recs = records(tmp_path)
    step0 = next(r for r in recs if r["kind"] == "step")
    assert sorted(r["name"] for r in recs if r["kind"] == "region") == ["a", "b"]
    assert all(abs(r["start_ns"] - step0["start_ns"]) < 10**10 for r in recs)  # none shifted twice


def test_a_write_lock_left_held_delays_close_a_bounded_time_and_skips_region_end_resolves(tmp_path, monkeypatch, gloo1):
    import commscope.recording.steps as steps

    use_fake_cuda(monkeypatch)
    monkeypatch.setattr(steps, "_LOCK_WAIT_S", 0.05)
    rec = Recorder(tmp_path, rank=0, world_size=1, device="cuda", backend="gloo")
    rec._write_lock.acquire()  # as if a signal's exception had struck between its acquire and release
    with rec.step(0):
        with rec.region("a"):
            pass
        assert rec._lines == [] and len(rec._pending) == 1  # the region end did not resolve
    rec.close()
    assert [r["kind"] for r in records(tmp_path)] == ["region", "step"]


def test_no_garbage_collection_runs_between_the_anchor_and_its_host_time(tmp_path, monkeypatch):
    """Every CUDA time of a step is the anchor's host time plus GPU time since it: a collection pause
    (tens of ms in a large process) between the anchor's record and the clock read would shift the whole
    step, so the collector is off in between, and on again after."""
    import gc

    use_fake_cuda(monkeypatch)
    rec = Recorder(tmp_path, rank=0, world_size=1, device="cuda", backend="gloo")
    seen = []
    record = FakeCudaEvent.record

    def watched_record(self, stream=None):
        seen.append(gc.isenabled())
        record(self, stream)

    monkeypatch.setattr(FakeCudaEvent, "record", watched_record)
    anchor = rec._cuda.new_anchor()
    assert seen == [False] and gc.isenabled()
    assert 0 <= anchor.host_ns - anchor.event.t < 10**9
    gc.disable()  # a script that turned the collector off keeps it off
    try:
        rec._cuda.new_anchor()
        assert not gc.isenabled()
    finally:
        gc.enable()
    rec.close()


@pytest.mark.parametrize("end_stream, queries", [("main", 3), ("side", 4)])
def test_a_passed_end_vouches_for_a_start_on_its_stream_only(tmp_path, monkeypatch, gloo1, end_stream, queries):
    """A stream passes its events in order: once a region's end is passed, its start, stamped before it on
    the same stream, is too, and is not queried; a start on another stream is."""
    import commscope.recording.timing as timing

    use_fake_cuda(monkeypatch)
    streams = {"main": object(), "side": object()}
    current = ["main"]
    monkeypatch.setattr(timing.torch.cuda, "current_stream", lambda device=None: streams[current[0]])
    monkeypatch.setattr(timing.torch._C, "_cuda_getCurrentStream", None, raising=False)
    FakeCudaEvent.lag = True
    rec = Recorder(tmp_path, rank=0, world_size=1, device="cuda", backend="gloo")
    with rec.step(0):
        with rec.region("a"):
            current[0] = end_stream
        current[0] = "main"
        FakeCudaEvent.catch_up()
        FakeCudaEvent.queries = 0
        with rec.region("b"):  # recorded after the catch-up: not passed at its end
            pass
        # the anchor, a's end (and a's start if on another stream), then b's end, which stops the scan
        assert FakeCudaEvent.queries == queries
        assert len(rec._lines) == 1
    rec.close()
    assert [r["name"] for r in records(tmp_path) if r["kind"] == "region"] == ["a", "b"]


def test_an_interrupted_step_end_encode_keeps_the_steps_records_for_close(tmp_path, monkeypatch, gloo1):
    import commscope.recording.sink as sink

    use_fake_cuda(monkeypatch)
    FakeCudaEvent.lag = True
    rec = Recorder(tmp_path, rank=0, world_size=1, device="cuda", backend="gloo")
    real = sink._encode
    encode = interrupting(real, at_call=2)  # the step record's line, then the step end's records: there
    with pytest.raises(KeyboardInterrupt):
        with rec.step(0):
            three_early_then(rec, "last")
            monkeypatch.setattr(sink, "_encode", encode)
    assert encode.calls == [1, 1]
    monkeypatch.setattr(sink, "_encode", real)
    rec.close("failed", "interrupted")
    recs = records(tmp_path)
    assert sorted(r["name"] for r in recs if r["kind"] == "region") == ["a", "b", "c", "last"]
    assert all(abs(r["start_ns"] - recs[0]["start_ns"]) < 10**10 for r in recs)


def test_an_interrupted_overlap_write_keeps_the_finished_steps_record_and_hooks(tmp_path, monkeypatch, gloo1):
    use_fake_cuda(monkeypatch)
    rec = Recorder(tmp_path, rank=0, world_size=1, device="cuda", backend="gloo", flush="overlap")
    model = model3()
    rec.watch({f"l{i}": m.weight for i, m in enumerate(model)})
    with rec.step(0) as st:
        for n in ("a", "b", "c"):
            with rec.region(n):
                if n == "a":
                    model(torch.ones(2, 8)).sum().backward()
        st.loss = 1.0
    real = rec._cuda.host_ns
    # the 3rd call is b's start: step 0 is being written at step 1's first region end
    rec._cuda.host_ns = interrupting(real, at_call=3)
    with pytest.raises(KeyboardInterrupt):
        with rec.step(1):
            with rec.region("d"):
                pass
    rec._cuda.host_ns = real
    rec.close("failed", "interrupted")
    recs = records(tmp_path)
    assert [r["step"] for r in recs if r["kind"] == "step"] == [0]  # the finished step's record
    assert sorted(r["label"] for r in recs if r["kind"] == "hook") == ["l0", "l1", "l2"]
    assert sorted((r["step"], r["name"]) for r in recs if r["kind"] == "region") == [(0, "a"), (0, "c"), (1, "d")]


def test_the_step_record_is_made_outside_the_write_lock(tmp_path, monkeypatch, gloo1):
    """An `extra` value read at the step end (a CUDA tensor's item() waits for the GPU) must not hold the
    lock the watchdog's write waits for."""
    import commscope.recording.steps as steps

    use_fake_cuda(monkeypatch)
    rec = Recorder(tmp_path, rank=0, world_size=1, device="cuda", backend="gloo")
    held = []

    def spy(value):
        held.append(rec._write_lock.locked())
        return plain(value)

    plain = steps.plain_extra
    monkeypatch.setattr(steps, "plain_extra", spy)
    with rec.step(0) as st:
        with rec.region("a"):
            pass
        st.extra["norm"] = torch.tensor(2.5)
    rec.close()
    assert held and not any(held)
    assert [r.get("norm") for r in records(tmp_path) if r["kind"] == "step"] == [2.5]


def test_overlap_keeps_a_collective_waited_in_the_next_step_until_the_gpu_passes_its_end(tmp_path, monkeypatch, gloo1):
    """Launched in step 0, waited in step 1 before any region of it ends: writing step 0 at that region's
    end must not resolve the collective's end, stamped in step 1 after the stamps it settled."""
    use_fake_cuda(monkeypatch)
    FakeCudaEvent.lag = True
    rec = Recorder(tmp_path, rank=0, world_size=1, device="cuda", backend="gloo", flush="overlap")
    t = torch.ones(4)
    with rec.step(0):
        with rec.region("a"):
            h = rec.collective(dist.all_reduce, t, label="x", phase="p")
    with rec.step(1):
        h.wait()
        with rec.region("b"):  # writes step 0; the collective's end is not passed
            pass
        assert [r["kind"] for r in records(tmp_path)] == ["region", "step"]
    FakeCudaEvent.catch_up()
    rec.close()
    recs = records(tmp_path)
    coll = [r for r in recs if r["kind"] == "collective"]
    assert len(coll) == 1 and coll[0]["start_ns"] <= coll[0]["end_ns"]
