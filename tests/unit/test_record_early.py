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


def assert_on_axis_inside_steps(recs):
    """Every time of a step's records lies within its step: shifted onto the common axis exactly once."""
    steps = {r["step"]: r for r in recs if r["kind"] == "step"}
    for r in recs:
        st = steps.get(r["step"])
        if st is None or r["kind"] == "step":
            continue
        for k in TIMES:
            if r.get(k) is not None:
                assert st["start_ns"] <= r[k] <= st["end_ns"], (r, k)


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
