"""flush="overlap": a step's records are set aside at its end and written when the next step's first region
ends (or at the next step end, close, an exception), with the same content as flush="step" writes; on an
abnormal end a GPU that never passes the stamps costs a bounded wait, not a hang."""
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


def written_steps(path):
    return [r["step"] for r in records(path) if r["kind"] == "step"]


def train(rec, steps, model, *, regions=True, check=None):
    """`steps` recorded steps: forward/backward regions (optional), one collective per layer, waited."""
    for s in steps:
        with rec.step(s) as st:
            if regions:
                with rec.region("forward"):
                    loss = model(torch.ones(2, 8)).sum()
                if check:
                    check(s)  # right after the first region of step s ended
                with rec.region("backward"):
                    loss.backward()
            else:
                loss = model(torch.ones(2, 8)).sum()
                loss.backward()
            hs = [rec.collective(dist.all_reduce, m.weight.grad, label=f"l{i}", phase="reduce")
                  for i, m in enumerate(model)]
            for h in hs:
                h.wait()
            model.zero_grad()
            st.loss = float(s)


def model3():
    torch.manual_seed(0)
    return torch.nn.Sequential(*[torch.nn.Linear(8, 8, bias=False) for _ in range(3)])


def shape(recs):
    """The records without their times (which differ between runs)."""
    return [{k: v for k, v in r.items() if k not in TIMES} for r in recs]


def by_step(recs):
    """step → the sorted shapes of its records (the records of a step, whatever their order in the file)."""
    out: dict = {}
    for r in shape(recs):
        out.setdefault(r["step"], []).append(orjson.dumps(r, option=orjson.OPT_SORT_KEYS))
    return {s: sorted(v) for s, v in out.items()}


def test_overlap_writes_each_step_after_the_next_steps_first_region_with_what_step_mode_writes(tmp_path, monkeypatch, gloo1):
    use_fake_cuda(monkeypatch)
    out = {}
    for flush in ("step", "overlap"):
        d = tmp_path / flush
        rec = Recorder(d, rank=0, world_size=1, device="cuda", backend="gloo", flush=flush)
        model = model3()
        rec.watch({f"l{i}": m.weight for i, m in enumerate(model)})

        def check(s, d=d):  # right after step s's first region: steps before s are written, in both modes
            assert written_steps(d) == list(range(s))

        for s in range(4):
            train(rec, [s], model, check=check)
            # at a step's end: "step" has written it, "overlap" not yet
            assert written_steps(d) == (list(range(s + 1)) if flush == "step" else list(range(s)))
        rec.close()
        assert written_steps(d) == [0, 1, 2, 3]  # close writes the last set-aside step
        out[flush] = records(d)
    # the same records; the order within a step differs ("step" writes the ones it resolved early first)
    assert by_step(out["overlap"]) == by_step(out["step"])
    for r in out["overlap"]:
        if r["kind"] == "collective":
            assert r["call_ns"] <= r["start_ns"] <= r["return_ns"] <= r["wait_ns"] <= r["wait_end_ns"] <= r["end_ns"]
    # the step record is the last record of its step in the file, as with flush="step"
    recs = out["overlap"]
    for s in range(4):
        idx = [i for i, r in enumerate(recs) if r["step"] == s]
        assert recs[max(idx)]["kind"] == "step"


def test_overlap_without_regions_writes_a_step_by_the_next_step_end(tmp_path, monkeypatch, gloo1):
    use_fake_cuda(monkeypatch)
    rec = Recorder(tmp_path, rank=0, world_size=1, device="cuda", backend="gloo", flush="overlap")
    model = model3()
    for s in range(3):
        train(rec, [s], model, regions=False)
        assert written_steps(tmp_path) == list(range(s))
    rec.close()
    assert written_steps(tmp_path) == [0, 1, 2]
    assert sum(r["kind"] == "collective" for r in records(tmp_path)) == 9


def test_an_exception_in_the_next_step_writes_the_set_aside_step(tmp_path, monkeypatch, gloo1):
    use_fake_cuda(monkeypatch)
    rec = Recorder(tmp_path, rank=0, world_size=1, device="cuda", backend="gloo", flush="overlap")
    model = model3()
    train(rec, [0], model)
    with pytest.raises(RuntimeError, match="boom"):
        with rec.step(1):
            raise RuntimeError("boom")  # before any region of step 1 ended
    assert written_steps(tmp_path) == [0]
    assert sum(r["kind"] == "collective" and r["step"] == 0 for r in records(tmp_path)) == 3
    rec.close("failed", "boom")


def test_a_stuck_gpu_costs_a_bounded_wait_at_an_abnormal_close_and_keeps_the_host_records(tmp_path, monkeypatch, gloo1):
    """The set-aside step's stamps never pass (a peer died inside a collective): close("failed") must not
    synchronize with them (it would hang); after a bounded wait it writes the step record and every
    record whose stamps are known, and drops only the regions the GPU never reached."""
    import commscope.recording.steps as steps

    use_fake_cuda(monkeypatch)
    monkeypatch.setattr(steps, "_BEHIND_WAIT_S", 0.05)
    rec = Recorder(tmp_path, rank=0, world_size=1, device="cuda", backend="gloo", flush="overlap")
    model = model3()
    train(rec, [0], model)
    FakeCudaEvent.stuck = True
    with rec.step(1) as st:
        with rec.region("forward"):  # its end writes step 0, whose stamps the GPU passed
            pass
        with rec.region("backward"):  # recorded after the GPU got stuck
            pass
        st.loss = 1.0
    assert written_steps(tmp_path) == [0]
    rec.close("failed", "peer died")  # returns: no synchronize on an event the GPU never passes
    recs = records(tmp_path)
    assert written_steps(tmp_path) == [0, 1]  # step 1's step record (host times) is written
    assert [r["name"] for r in recs if r["kind"] == "region" and r["step"] == 1] == []  # never passed
    assert [r["name"] for r in recs if r["kind"] == "region" and r["step"] == 0] == ["forward", "backward"]
    status = orjson.loads((tmp_path / "rank0" / "status.json").read_bytes())
    assert status["status"] == "failed" and status["last_step"] == 1


def test_a_signal_while_waiting_on_the_set_aside_step_keeps_it_for_the_close(tmp_path, monkeypatch, gloo1):
    """Ctrl-C (or a handler's Terminated) arriving while the next step's first region end waits on the GPU
    for the set-aside step: that step's status says it finished (last_step), so its records are written
    all the same, by the step's own cleanup or the close."""
    use_fake_cuda(monkeypatch)
    rec = Recorder(tmp_path, rank=0, world_size=1, device="cuda", backend="gloo", flush="overlap")
    model = model3()
    train(rec, [0], model)
    settle = rec._cuda.settle

    def interrupted(tails):
        monkeypatch.setattr(rec._cuda, "settle", settle)  # once
        raise KeyboardInterrupt

    monkeypatch.setattr(rec._cuda, "settle", interrupted)
    with pytest.raises(KeyboardInterrupt):
        with rec.step(1):
            with rec.region("forward"):  # its end writes step 0: the wait is where the signal lands
                pass
    rec.close("interrupted", "KeyboardInterrupt")
    assert written_steps(tmp_path) == [0]
    assert sum(r["kind"] == "collective" and r["step"] == 0 for r in records(tmp_path)) == 3
    status = orjson.loads((tmp_path / "rank0" / "status.json").read_bytes())
    assert status["last_step"] == 0


def test_overlap_on_cpu_writes_at_the_step_end_and_bad_values_are_refused(tmp_path):
    rec = Recorder(tmp_path, rank=0, world_size=1, flush="overlap")  # no GPU to hide a write behind
    with rec.step(0):
        with rec.region("forward"):
            pass
    assert written_steps(tmp_path) == [0]
    rec.close()
    with pytest.raises(ValueError, match="flush must be one of step, overlap"):
        Recorder(tmp_path / "b", rank=0, world_size=1, flush="later")
