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
    ("train.py(1): <module>", "train.py:1 <module>"),  # a traceback's frame (evidence.blocked_at)
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


# --- labels from a size → label map (--label-map, commscope.analyze.labels) ------------------------------

H100 = os.path.join(TESTS, "data", "modded-nanogpt-8xh100")
# the fixture's distinct collective sizes, each both reduce-scattered and all-gathered (77266944 B: 50304 × 768
# bf16 elements, a vocabulary-sized matrix); the names are only illustrative
H100_MAP = {"lm_head": [77266944], "value_embeds": [150994944], "scalars": [2304, 256], "gates": [192]}


@pytest.fixture(scope="module")
def h100():
    return load_path(H100)


def test_the_fixture_sizes_are_those_the_map_names(h100):
    c = h100.collectives
    sized = c[c["bytes"].notna()]
    assert sorted(sized["bytes"].astype(int).unique()) == [192, 256, 2304, 77266944, 150994944]
    assert set(sized["label"]) == {"_reduce_scatter_base", "_allgather_base"}
    assert set(c["label_source"]) == {"name"}


def test_a_size_map_relabels_every_generic_collective_of_those_sizes(h100):
    from commscope.analyze.labels import relabel_by_size
    from commscope.analyze.summary import summarize

    c, notes = relabel_by_size(h100.collectives, H100_MAP)
    assert notes == []
    sized = c["bytes"].notna()
    assert (c.loc[sized, "label_source"] == "size").all() and (c.loc[~sized, "label_source"] == "name").all()
    size_of = {s: lab for lab, sizes in H100_MAP.items() for s in sizes}
    assert (c.loc[sized, "label"] == c.loc[sized, "bytes"].astype(int).map(size_of)).all()
    assert dict(c.groupby("label").size()) == {"lm_head": 80, "value_embeds": 64, "scalars": 48, "gates": 32,
                                               "all_gather": 96, "reduce_scatter": 93}
    # every other column as loaded; the input frame untouched
    rest = [k for k in c.columns if k not in ("label", "label_source")]
    pd.testing.assert_frame_equal(c[rest], h100.collectives[rest])
    assert set(h100.collectives["label_source"]) == {"name"}

    before = summarize(h100, with_hta=False)["labels"]
    h100_relabelled = type(h100)(**{**{k: getattr(h100, k) for k in ("source", "path", "world_size", "backend",
                                                                   "device", "config", "ranks", "problems",
                                                                   "steps", "compute", "regions", "hooks",
                                                                   "kernels", "extra")}, "collectives": c})
    after = summarize(h100_relabelled, with_hta=False)["labels"]
    assert {k: (v["op"], v["count"], v["bytes"]) for k, v in after.items()} == {
        "lm_head": ("reduce_scatter+all_gather", 80, 77266944), "value_embeds": ("reduce_scatter+all_gather", 64, 150994944),
        "scalars": ("reduce_scatter+all_gather", 48, 2304), "gates": ("reduce_scatter+all_gather", 32, 192),
        "all_gather": ("all_gather", 96, None), "reduce_scatter": ("reduce_scatter", 93, None)}
    assert {k: (v["count"], v["bytes"]) for k, v in before.items()} == {
        "_reduce_scatter_base": (112, 77266944), "_allgather_base": (112, 77266944),
        "all_gather": (96, None), "reduce_scatter": (93, None)}
    for k in ("all_gather", "reduce_scatter"):  # the collectives of unknown size are as they were
        assert after[k] == before[k]
    # relabelling moves collectives between labels: totals over all labels stay
    assert sum(v["count"] for v in after.values()) == sum(v["count"] for v in before.values()) == 413
    assert sum(v["exposed_ms"] for v in after.values()) == pytest.approx(
        sum(v["exposed_ms"] for v in before.values()), abs=1e-3)


def test_a_size_claimed_twice_gets_both_names_and_a_note(tmp_path):
    from commscope.analyze.labels import relabel_by_size

    plain = load_path(_rewrite(tmp_path, lambda e: None if e.get("cat") == "python_function" else e))
    c, notes = relabel_by_size(plain.collectives, {"grads": [4096], "bucket": [2112, 4096], "unused": [5]})
    # 4096 B: the reduce_scatter (generic) is relabelled, the all_gather inside commscope.label("attn") is not
    assert dict(c.groupby(["label", "label_source"]).size()) == {
        ("grads|bucket", "size"): 4, ("bucket", "size"): 4, ("allreduce", "name"): 8, ("attn", "scope"): 4}
    assert notes == ["label map: 1 size(s) claimed by several labels, so labelled with all of them: 4096 B: grads|bucket",
                     "label map: 1 of 3 label(s) matched no collective labelled by the trace or its stack: unused"]


def test_the_map_outranks_stack_labels_and_keeps_scopes(stack):
    """A frame may hold many different collectives (a training loop, a forward FSDP2 gathers in): a size the
    user's map lists names the collective, whatever frame launched it; a commscope scope, which the code
    gave, stays."""
    from commscope.analyze.labels import relabel_by_size

    c, notes = relabel_by_size(stack.collectives, {"bucket": [2112], "stats": [192]})
    assert notes == []
    assert dict(c.groupby(["label", "label_source"]).size()) == {
        ("bucket", "size"): 4, ("stats", "size"): 4, ("make_trace.py:31 reduce_grads", "stack"): 4,
        ("attn", "scope"): 4, ("make_trace.py:53 train", "stack"): 4}
    c, _ = relabel_by_size(stack.collectives, {"x": [4096]})  # the scoped all_gather's size too
    assert dict(c.groupby(["label", "label_source"]).size())[("attn", "scope")] == 4


def test_a_scripts_top_level_code_is_no_label(tmp_path):
    """`<module>` began before the profiler: its line is where the script stood then (the prof.step() line),
    and it encloses everything the script launches outside a function, so a label from it would merge them."""
    def at_top(e):
        if e.get("cat") == "python_function" and e["name"].endswith((": train", ": worker")):
            e = dict(e, name="make_trace.py(64): <module>")
        return e

    from commscope.load.stack_labels import frame_label

    assert frame_label("train.py(64): <module>") is None and frame_label("train.py(5): main") == "train.py:5 main"
    c = load_path(_rewrite(tmp_path, at_top)).collectives
    assert "make_trace.py:64 <module>" not in set(c["label"])
    top = c[c["op"].eq("all_reduce") & c["bytes"].eq(4)]
    assert len(top) == 4 and set(top["label_source"]) == {"name"} and set(top["label"]) == {"allreduce"}


def test_report_json_with_a_label_map(tmp_path):
    from typer.testing import CliRunner

    from commscope.cli import app

    m = tmp_path / "map.json"
    m.write_text(json.dumps(H100_MAP))
    res = CliRunner().invoke(app, ["report", H100, "--json", "--no-hta", "--label-map", str(m)])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert {k: v["count"] for k, v in doc["labels"].items()} == {
        "lm_head": 80, "value_embeds": 64, "scalars": 48, "gates": 32, "all_gather": 96, "reduce_scatter": 93}
    assert doc["problems"] == []


@pytest.mark.parametrize("text,msg", [
    ("[1, 2]", "expected a JSON object of label → list of byte sizes"),
    ('{"a": [1.5]}', "label 'a': sizes are positive integers (bytes), got 1.5"),
    ('{"a": [0]}', "label 'a': sizes are positive integers (bytes), got 0"),
    ('{"a": [true]}', "got True"),
    ('{"a": []}', "got an empty list"),
    ('{"a": {"b": 1}}', "label 'a': expected a list of byte sizes, got an object"),
    ('{"": [4]}', "a label is an empty string"),
    ('{"a": [4]', "not JSON"),
    (None, "map.json: does not exist"),
])
def test_a_bad_label_map_is_one_line_exit_2(tmp_path, text, msg):
    import subprocess
    import sys

    m = tmp_path / "map.json"
    if text is not None:
        m.write_text(text)
    r = subprocess.run([sys.executable, "-m", "commscope", "report", GLOO, "--json", "--no-hta", "--label-map", str(m)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith(f"commscope: error: --label-map {m}: ") and msg in r.stderr, r.stderr
    assert len(r.stderr.splitlines()) == 1, r.stderr


@pytest.mark.parametrize("command", ["doctor", "export", "layout"])
def test_other_commands_take_the_map(tmp_path, command):
    from typer.testing import CliRunner

    from commscope.cli import app
    from commscope.errors import UserError

    m = tmp_path / "map.json"
    m.write_text('{"a": "x"}')
    args = [command, GLOO, "--label-map", str(m)] + (["--perfetto", str(tmp_path / "p.json")] if command == "export" else [])
    res = CliRunner().invoke(app, args)
    assert isinstance(res.exception, UserError) and "label 'a': expected a list" in str(res.exception)
    m.write_text('{"gathered": [8192]}')
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    if command == "export":
        names = {e.get("name") for e in json.load(open(tmp_path / "p.json"))["traceEvents"]}
        assert "gathered:all_gather" in names and "_allgather_base:all_gather" not in names


# --- commscope.size_labels ---------------------------------------------------------------------------------

def test_size_labels_from_a_model():
    import torch

    import commscope

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = torch.nn.Linear(8, 24, bias=False)
            self.mlp = torch.nn.Linear(8, 32)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = torch.nn.ModuleList(Block() for _ in range(3))
            self.head = torch.nn.Linear(8, 100, bias=False).to(torch.bfloat16)

    net = Net()
    assert commscope.size_labels(net.named_parameters()) == {
        "blocks.*.qkv.weight": [768], "blocks.*.mlp.weight": [1024], "blocks.*.mlp.bias": [128],
        "head.weight": [1600]}
    assert commscope.size_labels(net) == commscope.size_labels(net.named_parameters())
    assert commscope.size_labels(dict(net.named_parameters())) == commscope.size_labels(net)  # name → tensor
    by_kind = commscope.size_labels(net.named_parameters(), group=lambda n: None if "bias" in n else n.split(".")[-2])
    assert by_kind == {"qkv": [768], "mlp": [1024], "head": [1600]}
    assert commscope.size_labels(net.named_parameters(), element_size=2)["blocks.*.qkv.weight"] == [384]
    with pytest.raises(ValueError, match="element_size"):
        commscope.size_labels(net.named_parameters(), element_size=0)
    with pytest.raises(ValueError, match="non-empty string"):
        commscope.size_labels(net.named_parameters(), group=lambda n: "")
    # an nn.Sequential's indices name different layers: collapsed together only where their sizes agree
    seq = torch.nn.Sequential(torch.nn.Linear(32, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8),
                              torch.nn.Linear(8, 8), torch.nn.Linear(8, 8))
    with pytest.warns(UserWarning, match="2 size"):  # layers 3 and 4 are alike (256 and 32 bytes, twice each)
        seq_map = commscope.size_labels(seq)
    assert seq_map["0.weight"] == [16384] and seq_map["2.weight"] == [4096] and seq_map["0.bias"] == [512]
    assert "*.weight" not in seq_map and seq_map["3.bias"] == [32] and seq_map["4.weight"] == [256]
    # the map it makes is one --label-map reads
    from commscope.load.label_map import check_label_map

    assert check_label_map(json.loads(json.dumps(commscope.size_labels(net)))) == commscope.size_labels(net)
    # a size past any byte count is said to be too large, not to be no integer
    from commscope.errors import UserError

    for huge in (10**26, 1e26, 1 << 62):
        with pytest.raises(UserError, match=r"label 'a': size .* is too large for a byte count \(below 2\^62\)"):
            check_label_map({"a": [huge]})
    assert check_label_map({"a": [(1 << 62) - 1]}) == {"a": [(1 << 62) - 1]}


def test_importing_commscope_imports_no_torch():
    import subprocess
    import sys

    code = "import sys, commscope; assert 'torch' not in sys.modules; assert callable(commscope.size_labels)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120).returncode == 0


def test_a_scope_splits_at_its_last_colon_and_an_empty_label_is_no_label(tmp_path):
    """The recorder writes `commscope:<label>:<phase>` (a phase holds no ':', a label may) and
    `commscope::<phase>` for a collective recorded with label=None: read back as the run directory has
    them, "a:b" with its phase, and no label."""
    out = tmp_path / "t"
    out.mkdir()
    names = {"commscope:grad:reduce": "commscope:a:b:reduce", "commscope:w:allreduce": "commscope::allreduce"}
    for r in (0, 1):
        doc = json.load(open(os.path.join(GLOO, f"rank{r}.json")))
        for e in doc["traceEvents"]:
            e["name"] = names.get(e.get("name"), e.get("name"))
        (out / f"rank{r}.json").write_text(json.dumps(doc))
    c = load_path(str(out)).collectives
    scoped = c[c["label_source"] == "scope"]
    assert list(scoped.groupby(["label", "phase"]).size().items()) == [(("a:b", "reduce"), 6)]
    unlabelled = scoped[scoped["label"].isna()]
    assert len(unlabelled) == 6 and set(unlabelled["phase"]) == {"allreduce"}


def test_size_labels_flat_gives_what_fsdp2_moves_per_module():
    """FSDP2 all-gathers and reduce-scatters a fully_shard'ed module's parameters as one buffer, each
    parameter's dim 0 padded to a multiple of the world size. A 2-rank gloo run of this model with
    fully_shard on each Linear moved 8448 and 4160 bytes per collective: Linear(32, 64) is 64×32 + 64 floats,
    Linear(64, 15) is 16×64 + 16 once its 15 rows are padded to 16."""
    import torch

    import commscope

    net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 15))
    assert commscope.size_labels(net, flat=True, world_size=2) == {"0": [8448], "2": [4160]}
    assert commscope.size_labels(net, flat=True) == {"0": [8448], "2": [(15 * 64 + 15) * 4]}  # unpadded
    assert commscope.size_labels(net, flat=True, world_size=3) == {"0": [(66 * 32 + 66) * 4], "2": [(15 * 64 + 15) * 4]}
    # group= names the wrapped module: one fully_shard over the whole model is one buffer
    assert commscope.size_labels(net, group=lambda n: "model", flat=True, world_size=2) == {"model": [8448 + 4160]}
    with pytest.raises(ValueError, match="world_size"):
        commscope.size_labels(net, flat=True, world_size=0)
