"""`Recorder.watch(params, every=N)`: hook order recorded on the steps that are multiples of N only, with no
hook registered on the other steps; every=1 unchanged; `commscope hooks` names the sampled steps."""
from __future__ import annotations

import orjson
import pytest
import torch

from commscope.analyze.hooks_order import load_hook_orders
from commscope.recording import NullRecorder, Recorder
from reports.hooks_terminal import sampled


def read(path):
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def chain(n=4, d=8):
    torch.manual_seed(0)
    return torch.nn.Sequential(*[torch.nn.Linear(d, d, bias=False) for _ in range(n)])


def registered(model):
    """The post-accumulate-grad hooks on the model's parameters (torch keeps them in a dict, or None)."""
    return sum(len(p._post_accumulate_grad_hooks or {}) for p in model.parameters())


def run(tmp_path, every, steps=7, micro=2):
    model = chain(4)
    rec = Recorder(tmp_path, rank=0, world_size=1)
    rec.watch({f"layer{i}": m.weight for i, m in enumerate(model)}, every=every)
    armed = []  # hooks registered inside each step, and after it
    for s in range(steps):
        with rec.step(s) as st:
            for m in range(micro):
                rec.set_micro_step(m)
                loss = model(torch.randn(3, 8)).square().mean()
                loss.backward()
            armed.append(registered(model))
            st.loss = loss.item()
        armed.append(registered(model))
    rec.close()
    assert registered(model) == 0
    return read(tmp_path / "rank0" / "events.jsonl"), armed


def orders(events):
    hooks = [e for e in events if e["kind"] == "hook"]
    by = {}
    for e in sorted(hooks, key=lambda e: (e["step"], e["micro_step"], e["position"])):
        by.setdefault((e["step"], e["micro_step"]), []).append(e["label"])
    return by


def test_every_3_records_hooks_on_steps_0_3_6_only_with_the_same_order(tmp_path):
    every1, armed1 = run(tmp_path / "e1", 1)
    every3, armed3 = run(tmp_path / "e3", 3)
    o1, o3 = orders(every1), orders(every3)
    assert sorted({s for s, _ in o3}) == [0, 3, 6]
    assert set(o3) == {(s, m) for s in (0, 3, 6) for m in (0, 1)}
    assert all(o3[k] == o1[k] == ["layer3", "layer2", "layer1", "layer0"] for k in o3)
    # every=1: hooks registered throughout; every=3: only inside steps 0, 3, 6, and never after a step
    assert armed1 == [4] * 14
    assert armed3 == sum(([4 if s % 3 == 0 else 0, 0] for s in range(7)), [])
    # the step records are all there
    assert [e["step"] for e in every3 if e["kind"] == "step"] == list(range(7))


def test_every_1_is_unchanged_and_writes_no_hooks_every(tmp_path):
    events, _ = run(tmp_path, 1, steps=3)
    o = orders(events)
    assert set(o) == {(s, m) for s in range(3) for m in (0, 1)}
    meta = orjson.loads((tmp_path / "rank0" / "meta.json").read_bytes())
    assert "hooks_every" not in meta


def test_meta_and_commscope_hooks_name_the_sampled_steps(tmp_path):
    run(tmp_path, 3)
    meta = orjson.loads((tmp_path / "rank0" / "meta.json").read_bytes())
    assert meta["hooks_every"] == 3
    ho = load_hook_orders(tmp_path)
    assert ho.hooks_every == 3 and ho.steps == [0, 3, 6] and ho.consistent
    assert ho.to_json()["hooks_every"] == 3 and ho.to_json()["steps"] == [0, 3, 6]
    assert sampled(ho) == "Hook order from steps 0, 3, 6 (every 3rd step)."
    ho.orders[0] = [dict(e, step=s) for e, s in zip(ho.orders[0] * 10, range(0, 600, 30))]
    ho.hooks_every = 30
    assert sampled(ho) == "Hook order from steps 0, 30, 60, …, 540, 570 (every 30th step)."


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2", None])
def test_every_must_be_a_positive_int(tmp_path, bad):
    model = chain(2)
    rec = Recorder(tmp_path, rank=0, world_size=1)
    with pytest.raises(ValueError, match="every must be a positive integer"):
        rec.watch({"l0": model[0].weight}, every=bad)
    assert registered(model) == 0
    rec.close()
    with pytest.raises(ValueError, match="every must be a positive integer"):
        NullRecorder().watch({"l0": model[0].weight}, every=bad)


def test_one_schedule_per_recorder_and_watch_inside_a_sampled_step(tmp_path):
    model = chain(2)
    rec = Recorder(tmp_path, rank=0, world_size=1)
    rec.watch({"l0": model[0].weight}, every=2)
    with pytest.raises(ValueError, match="one schedule"):
        rec.watch({"l1": model[1].weight}, every=1)
    with rec.step(0):  # a sampled step: a label watched here fires in it already
        rec.watch({"l1": model[1].weight}, every=2)
        model(torch.randn(2, 8)).sum().backward()
    with rec.step(1):
        assert registered(model) == 0
        model(torch.randn(2, 8)).sum().backward()
    rec.close()
    hooks = [e for e in read(tmp_path / "rank0" / "events.jsonl") if e["kind"] == "hook"]
    assert sorted((h["step"], h["label"]) for h in hooks) == [(0, "l0"), (0, "l1")]
