"""`commscope hooks`: orders per rank/micro-step from run directories written by the Recorder."""
from __future__ import annotations

import json
import subprocess
import sys

import orjson
import pytest
import torch

from typer.testing import CliRunner

from commscope.cli import app
from commscope.errors import UserError
from commscope.pipeline import load_hook_orders
from commscope.commands.hooks import capture_run
from commscope.recording import Recorder


def record_run(run, order_for, world=2, steps=2, micro=2, scatter=("a", "b", "c")):
    """Write a run whose hooks fire in `order_for(rank, step, micro)` order, with the real Recorder.

    Each label is a separate leaf; the loss sums them in the wanted order's reverse so autograd's
    post-accumulate hooks fire exactly in that order (the last used first).
    """
    for rank in range(world):
        rec = Recorder(run, rank=rank, world_size=world, align=False)
        params = {k: torch.nn.Parameter(torch.ones(2)) for k in scatter}
        rec.watch(params)
        rec.write_config({"scatter_order": list(scatter)})
        for s in range(steps):
            with rec.step(s) as st:
                for m in range(micro):
                    rec.set_micro_step(m)
                    x = torch.ones(2)
                    for label in reversed(order_for(rank, s, m)):  # chain: the last applied fires first
                        x = x * params[label]
                    x.sum().backward()
                st.loss = 0.0
        rec.close()


def cli(*args):
    """In-process CLI (importing torch in a subprocess costs seconds); UserError propagates."""
    result = CliRunner().invoke(app, ["hooks", *map(str, args)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


LABELS = ["attn", "mlp", "scalars", "ve0", "ve1", "ve2", "smear_gate", "skip_gate", "attn_gate_bank",
          "ve_gate_bank", "x0_lambdas", "lm_head", "embed"]


def test_consistent_orders_and_json_shape(tmp_path):
    record_run(tmp_path, lambda r, s, m: ["c", "a", "b"])
    ho = load_hook_orders(tmp_path)
    assert ho.consistent and ho.reference == ["c", "a", "b"]
    j = ho.to_json()
    assert j["world_size"] == 2 and j["consistent"] is True and j["scatter_order"] == ["a", "b", "c"]
    assert j["orders"]["1"] == [{"step": s, "micro_step": m, "order": ["c", "a", "b"]} for s in range(2) for m in range(2)]
    assert orjson.loads(cli(tmp_path, "--json")) == j


def test_differing_rank_and_micro_step_are_marked(tmp_path):
    odd = lambda r, s, m: ["b", "a", "c"] if (r == 1 and s == 1 and m == 0) else ["c", "b", "a"]
    record_run(tmp_path, odd)
    ho = load_hook_orders(tmp_path)
    assert not ho.consistent
    groups = ho.groups
    assert [g.order for g in groups] == [["c", "b", "a"], ["b", "a", "c"]]
    assert groups[1].members == [(1, 1, 0)]
    assert len(groups[0].members) == 7
    out = cli(tmp_path)
    assert "differs" in out and "rank 1: s1µ0" in out and "2 different orders" in out
    assert orjson.loads(cli(tmp_path, "--json"))["consistent"] is False


def test_torn_last_line_is_ignored(tmp_path):
    record_run(tmp_path, lambda r, s, m: ["a", "b", "c"], world=1)
    with open(tmp_path / "rank0" / "events.jsonl", "ab") as f:
        f.write(b'{"kind":"hook","rank":0,"step":2,"micro_')
    ho = load_hook_orders(tmp_path)
    assert [e["step"] for e in ho.orders[0]] == [0, 0, 1, 1]


def test_a_rank_the_loader_could_not_read_is_explained_as_every_command_explains_it(tmp_path):
    """A rank missing from the orders is no silent gap: the loader's problems and the ranks that did not
    complete are printed under the table and carried in --json, as doctor and report carry them."""
    record_run(tmp_path, lambda r, s, m: ["a", "b", "c"], world=3)
    (tmp_path / "rank0" / "events.jsonl").write_bytes(b"")
    (tmp_path / "rank2" / "status.json").write_text('{"status": "failed", "error": "RuntimeError: boom"}')
    ho = load_hook_orders(tmp_path)
    assert sorted(ho.orders) == [1, 2]
    assert ho.problems == ["rank 0: events.jsonl holds no record"]
    assert ho.run_reports == ["rank 2: failed: RuntimeError: boom"]
    j = orjson.loads(cli(tmp_path, "--json"))
    assert j["problems"] == ho.problems and j["run_reports"] == ho.run_reports
    out = cli(tmp_path)
    assert "problem while loading: rank 0: events.jsonl holds no record" in out
    assert "the run reports: rank 2: failed: RuntimeError: boom" in out
    record_run(tmp_path / "whole", lambda r, s, m: ["a", "b", "c"])
    assert "problem" not in cli(tmp_path / "whole") and load_hook_orders(tmp_path / "whole").problems == []


def test_the_step_a_run_stopped_in_is_left_out_not_read_as_hooks_that_never_fired(tmp_path):
    """Ctrl-C mid-backward: the last step fired some hooks and recorded no step end. Its partial order is
    no order difference; it is left out and said, per rank, and the finished steps are compared as usual."""
    record_run(tmp_path, lambda r, s, m: ["c", "a", "b"], world=2, steps=3, micro=1)
    for r in (0, 1):  # rank 0 stopped in step 2 after one hook; rank 1 finished it
        p = tmp_path / f"rank{r}" / "events.jsonl"
        rows = [json.loads(x) for x in p.read_text().splitlines()]
        if r == 0:
            rows = [x for x in rows if not (x.get("step") == 2 and (x["kind"] == "step" or
                                                                     (x["kind"] == "hook" and x["position"] > 0)))]
        p.write_text("".join(json.dumps(x) + "\n" for x in rows))
    ho = load_hook_orders(tmp_path)
    assert ho.consistent and ho.unfinished == {0: 2}
    assert [e["step"] for e in ho.orders[0]] == [0, 1] and [e["step"] for e in ho.orders[1]] == [0, 1, 2]
    assert orjson.loads(cli(tmp_path, "--json"))["unfinished_steps"] == {"0": 2}
    out = cli(tmp_path)
    assert "different orders" not in out and "Left out: the hooks of step 2 on rank 0, the step the run stopped in" in out
    # a rank that finished no step while the other did stopped in its first: all its hooks are left out
    p = tmp_path / "rank0" / "events.jsonl"
    p.write_text("".join(x + "\n" for x in p.read_text().splitlines() if json.loads(x)["kind"] != "step"))
    ho = load_hook_orders(tmp_path)
    assert sorted(ho.orders) == [1] and ho.unfinished == {0: 0}
    p = tmp_path / "rank1" / "events.jsonl"
    p.write_text("".join(x + "\n" for x in p.read_text().splitlines() if json.loads(x)["kind"] != "hook"))
    with pytest.raises(UserError, match="its hook records are all in steps the run stopped in"):
        load_hook_orders(tmp_path)


def test_errors_are_one_line(tmp_path):
    with pytest.raises(UserError):
        load_hook_orders(tmp_path / "missing")
    rec = Recorder(tmp_path / "nohooks", rank=0, world_size=1)
    with rec.step(0):
        pass
    rec.close()
    with pytest.raises(UserError, match=r"no hook records \(commscope run records them with --trace light or full; "
                                        r"a script using commscope.record, with rec.watch\(labelled_params\)\)"):
        load_hook_orders(tmp_path / "nohooks")
    proc = subprocess.run([sys.executable, "-m", "commscope", "hooks", str(tmp_path / "nohooks")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.startswith("commscope: error:") and "Traceback" not in proc.stderr
    with pytest.raises(UserError):
        capture_run(tmp_path / "x", nproc=0)


@pytest.mark.slow
def test_capture_run_of_reference_trainer_has_every_label_once_per_micro_step():
    """`commscope hooks --json` without RUN: 2 ranks, 2 steps, grad-accum 2 of the reference trainer."""
    pytest.importorskip("instrumented_model.train")
    j = orjson.loads(cli("--json", "--nproc", "2"))
    assert j["world_size"] == 2 and j["scatter_order"] == LABELS
    for rank in ("0", "1"):
        entries = j["orders"][rank]
        assert [(e["step"], e["micro_step"]) for e in entries] == [(0, 0), (0, 1), (1, 0), (1, 1)]
        for e in entries:
            assert sorted(e["order"]) == sorted(LABELS)
