"""Where a Kineto collective's label comes from: a commscope scope, else the Python stack (with_stack=True
traces: tests/data/gloo2-stack, made by make_trace.py there), else its own name."""
from __future__ import annotations

import json
import os

import pandas as pd
import pytest

from commscope.load import load_path
from commscope.load.stack_labels import user_frame
from paths import TESTS

STACK = os.path.join(TESTS, "data", "gloo2-stack")
GLOO = os.path.join(TESTS, "data", "gloo2")
# per profiled step (2 and 3), in launch order: make_trace.py's functions, the scope, train itself
PER_STEP = [("make_trace.py:26 allreduce_hook", "stack", "all_reduce", 2112),
            ("make_trace.py:31 reduce_grads", "stack", "reduce_scatter", 4096),
            ("make_trace.py:35 sync_stats", "stack", "all_reduce", 192),
            ("attn", "scope", "all_gather", 4096),
            ("make_trace.py:53 train", "stack", "all_reduce", 4)]


@pytest.fixture(scope="module")
def stack():
    return load_path(STACK)


def test_collectives_take_the_innermost_user_frame_of_their_launch(stack):
    c = stack.collectives
    assert stack.problems == [] and len(c) == 20
    for (rank, step), g in c.groupby(["rank", "step"]):
        g = g.sort_values("call_ns")
        assert list(zip(g["label"], g["label_source"], g["op"], g["bytes"].astype(int))) == PER_STEP, (rank, step)
    assert sorted(c.groupby(["rank", "step"]).groups) == [(0, 2), (0, 3), (1, 2), (1, 3)]
    assert c.loc[c["label_source"] == "stack", "phase"].isna().all()


def test_a_trace_without_stacks_keeps_scopes_and_names():
    c = load_path(GLOO).collectives
    assert dict(c.groupby(["label", "label_source"]).size()) == {
        ("_allgather_base", "name"): 6, ("grad", "scope"): 6, ("w", "scope"): 6}


def _rewrite(tmp_path, fn) -> str:
    out = tmp_path / "t"
    out.mkdir()
    for r in (0, 1):
        doc = json.load(open(os.path.join(STACK, f"rank{r}.json")))
        doc["traceEvents"] = [x for x in (fn(e) for e in doc["traceEvents"]) if x is not None]
        (out / f"rank{r}.json").write_text(json.dumps(doc))
    return str(out)


def test_without_python_frames_the_labels_are_the_collectives_names(tmp_path):
    c = load_path(_rewrite(tmp_path, lambda e: None if e.get("cat") == "python_function" else e)).collectives
    assert dict(c.groupby(["label", "label_source"]).size()) == {
        ("allreduce", "name"): 12, ("_reduce_scatter_base", "name"): 4, ("attn", "scope"): 4}


def test_frames_on_another_thread_do_not_label(tmp_path):
    def elsewhere(e):
        if e.get("cat") == "python_function":
            e = dict(e, tid=e["tid"] + 1)
        return e

    c = load_path(_rewrite(tmp_path, elsewhere)).collectives
    assert set(c["label_source"]) == {"name", "scope"}


def test_library_frames_are_skipped_for_the_next_user_frame_out(tmp_path):
    """With the helper functions' frames made library files, each collective takes the next user frame
    out: `train`, or the outer `worker` for the hook's all_reduce (backward runs inside train)."""
    names = {"make_trace.py(26): allreduce_hook": "/usr/lib/python3/dist-packages/pkg/hooks.py(25): allreduce_hook",
             "make_trace.py(31): reduce_grads": "torch/distributed/fsdp/x.py(30): reduce_grads",
             "make_trace.py(35): sync_stats": "threading.py(34): sync_stats",
             "make_trace.py(53): train": "commscope/recording/x.py(52): train"}

    def library(e):
        return dict(e, name=names.get(e["name"], e["name"])) if e.get("cat") == "python_function" else e

    c = load_path(_rewrite(tmp_path, library)).collectives
    assert dict(c.groupby(["label", "label_source"]).size()) == {
        ("make_trace.py:64 worker", "stack"): 16, ("attn", "scope"): 4}


@pytest.mark.parametrize("name,label", [
    ("train.py(123): step", "train.py:123 step"),
    ("/home/me/proj/model.py(88): forward", "model.py:88 forward"),
    ("models/gpt/blocks.py(12): forward", "blocks.py:12 forward"),
    ("C:\\proj\\model.py(7): f", "model.py:7 f"),
    ("deepspeed/runtime/engine.py(2000): backward", "engine.py:2000 backward"),
    ("commscope_runs/train.py(5): main", "train.py:5 main"),
    ("/home/me/commscope/train.py(5): main", "train.py:5 main"),
    ("train.py(1): <module>", "train.py:1 <module>"),
    ("torch/nn/modules/module.py(1750): _call_impl", None),
    ("/opt/torch/distributed/c10d_logger.py(80): wrapper", None),
    ("functorch/x.py(1): f", None),
    ("typing_extensions.py(3137): wrapper", None),
    ("commscope/recording/recorder.py(250): collective", None),
    ("/src/commscope/__init__.py(30): label", None),
    ("threading.py(1002): _bootstrap", None),
    ("concurrent/futures/thread.py(58): run", None),
    ("multiprocessing/spawn.py(122): spawn_main", None),
    ("/usr/lib/python3.11/threading.py(982): run", None),
    ("/venv/lib/python3.11/site-packages/accelerate/accelerator.py(2000): backward", None),
    ("/usr/lib/python3/dist-packages/pkg/mod.py(1): f", None),
    ("<frozen os>(674): __getitem__", None),
    ("<string>(1): <module>", None),
    ("<built-in method allreduce of pybind11_builtins.pybind11_detail_function_record_v1 object at 0x7f>", None),
    ("not a frame", None),
])
def test_user_frames(name, label):
    assert user_frame(name) == label


def test_readers_keep_only_user_frames_on_launching_threads():
    from commscope.load import kineto_events
    from commscope.load.files import read_bytes

    path = os.path.join(STACK, "rank0.json")
    raw = read_bytes(path)
    doc = json.loads(raw)
    n_py = sum(e.get("cat") == "python_function" for e in doc["traceEvents"])
    for ev in (kineto_events.read_events(path, raw, False), kineto_events._generic(path, raw)):
        assert sorted(set(ev.p_name)) == ["make_trace.py(26): allreduce_hook", "make_trace.py(31): reduce_grads",
                                          "make_trace.py(35): sync_stats", "make_trace.py(39): gather_attn",
                                          "make_trace.py(53): train", "make_trace.py(64): worker"]
        assert len(ev.p_name) == 10 < n_py
    assert pd.Series(kineto_events.read_events(path, raw, False).p_tid).nunique() == 1
