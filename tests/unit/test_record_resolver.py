"""flush="step" on CUDA: the resolver thread resolves a step's records while the main thread waits at the
step's sync (here: sleeps, as a loss read blocked on the GPU would), so the step end has little left; with
it running beside a GPU that catches up at random points, every record is still written once, on the
common axis, inside its step; and it ends with its Recorder (closed or dropped)."""
from __future__ import annotations

import gc
import threading
import time

import pytest
import torch
import torch.distributed as dist

import commscope.recording.steps as steps
from commscope.recording import Recorder
from fake_cuda import FakeCudaEvent, use_fake_cuda
from test_record_early import assert_on_axis_inside_steps, key, model3, records

WAIT_S = 2.0  # the longest a test waits for the thread (it polls every RESOLVE_POLL_S)


def resolver_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "commscope-resolve"]


def wait_for(cond) -> bool:
    deadline = time.monotonic() + WAIT_S
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


@pytest.fixture
def fake_gpu(monkeypatch):
    use_fake_cuda(monkeypatch)
    monkeypatch.setattr(steps, "RESOLVER_THREAD", True)
    FakeCudaEvent.lag = True


def test_records_passed_while_the_host_waits_are_resolved_before_the_step_ends(tmp_path, fake_gpu, gloo1):
    rec = Recorder(tmp_path, rank=0, world_size=1, device="cuda", backend="gloo")
    model = model3()
    rec.watch({f"l{i}": m.weight for i, m in enumerate(model)})
    left = {}
    real_flush = rec._flush

    def flush(**kw):  # what the step end finds still pending
        left["pending"] = len(rec._pending)
        return real_flush(**kw)

    rec._flush = flush
    with rec.step(0):
        with rec.region("forward"):
            loss = model(torch.ones(2, 8)).sum()
        with rec.region("backward"):
            loss.backward()
        with rec.region("optimizer"):
            for h in [rec.collective(dist.all_reduce, m.weight.grad, label=f"l{i}", phase="reduce")
                      for i, m in enumerate(model)]:
                h.wait()
        assert len(rec._pending) == 6 and len(rec._lines) == 3  # the GPU lags: only the hooks so far
        FakeCudaEvent.catch_up()  # the GPU finishes the step while the host waits for it
        assert wait_for(lambda: len(rec._lines) == 9)  # 3 hooks, 3 regions, 3 collectives: no region end ran
        assert rec._pending == []
    assert left["pending"] == 0
    rec.close()
    recs = records(tmp_path)
    assert [r["kind"] for r in recs].count("collective") == 3 and recs[-1]["kind"] == "step"
    assert_on_axis_inside_steps(recs)


def test_between_steps_it_resolves_nothing(tmp_path, fake_gpu, gloo1):
    """A record made outside a step waits for the next write (where align_clocks() may have moved the axis):
    the thread leaves it pending."""
    rec = Recorder(tmp_path, rank=0, world_size=1, device="cuda", backend="gloo")
    with rec.step(0):
        pass
    with rec.region("between"):
        pass
    FakeCudaEvent.catch_up()
    time.sleep(50 * steps.RESOLVE_POLL_S)
    assert [r["name"] for r in rec._pending] == ["between"] and rec._lines == []
    rec.close()
    assert [r.get("name") for r in records(tmp_path)] == [None, "between"]


@pytest.mark.parametrize("seed", range(8))
def test_beside_a_gpu_catching_up_at_random_points_each_record_is_written_once_on_the_axis(tmp_path, fake_gpu,
                                                                                        gloo1, seed):
    import random

    rnd = random.Random(seed)
    rec = Recorder(tmp_path, rank=0, world_size=1, device="cuda", backend="gloo")
    model = model3()
    rec.watch({f"l{i}": m.weight for i, m in enumerate(model)})

    def maybe():
        if rnd.random() < 0.5:
            FakeCudaEvent.catch_up(rnd.randint(0, len(FakeCudaEvent.queued)))
        if rnd.random() < 0.5:
            time.sleep(rnd.choice([0.0, 0.001, 0.003]))  # the thread's turn

    carry = []
    for s in range(6):
        with rec.step(s) as st:
            for m in range(rnd.choice([1, 2])):
                rec.set_micro_step(m)
                with rec.region("fwd"):
                    maybe()
                    loss = model(torch.ones(2, 8)).sum()
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
            maybe()
            model.zero_grad()
            st.loss = 1.0
    for h in carry:
        h.wait()
    rec.close()
    recs = records(tmp_path)
    keys = [key(r) for r in recs]
    assert len(keys) == len(set(keys))  # each record once
    assert [r["kind"] for r in recs].count("collective") == 18
    assert_on_axis_inside_steps([r for r in recs if r["kind"] != "collective"])
    pos = {k: i for i, k in enumerate(keys)}
    for r in recs:
        if r["kind"] in ("region", "hook"):
            assert pos[key(r)] < pos[("step", r["step"])]  # written with its step, before the step record


def test_the_thread_ends_with_its_recorder(tmp_path, fake_gpu):
    before = len(resolver_threads())
    rec = Recorder(tmp_path / "a", rank=0, world_size=1, device="cuda", backend="gloo")
    assert len(resolver_threads()) == before + 1
    with rec.step(0):
        pass
    rec.close()
    assert wait_for(lambda: len(resolver_threads()) == before)
    dropped = Recorder(tmp_path / "b", rank=0, world_size=1, device="cuda", backend="gloo")
    with dropped.step(0):
        pass
    del dropped
    gc.collect()
    assert wait_for(lambda: len(resolver_threads()) == before)
    cpu = Recorder(tmp_path / "c", rank=0, world_size=1, device="cpu", backend="gloo")
    assert len(resolver_threads()) == before  # on CPU nothing runs behind a GPU: no thread
    cpu.close()
