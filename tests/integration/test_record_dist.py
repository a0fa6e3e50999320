"""Recorder across 2 gloo ranks under torch.distributed.run: a sharded data-parallel worker (hook order,
cross-rank collective matching, a SIGKILLed rank), examples/plain_loop.py read back by `commscope report`
and `commscope hooks`, and clock alignment with an injected skew."""
from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections import defaultdict
from pathlib import Path

import orjson
import pytest
import torch.distributed as dist
import torch.multiprocessing as mp

from commscope.recording.clock import align_clocks
from ports import free_port
from torchrun import torchrun as run_job
from paths import ROOT

LABELS = ["fc_out", "fc_hidden", "fc_in"]  # autograd order of the worker's chain: last layer first

# A plain data-parallel MLP whose gradients are averaged by hand: the hidden layer is "sharded"
# (reduce_scatter of its gradient, each rank updates its row shard, all_gather of the new weights), the
# others are all_reduced. `--die-at-step N` makes rank 1 SIGKILL itself at step N.
WORKER = textwrap.dedent("""
    import argparse, os
    import torch, torch.distributed as dist
    import commscope

    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--grad-accum", type=int, default=2)
    ap.add_argument("--die-at-step", type=int, default=None)
    args = ap.parse_args()
    dim, batch, lr = 32, 16, 0.05
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    lin = lambda i, o: torch.nn.Linear(i, o, bias=False)
    model = torch.nn.Sequential(lin(dim, 4 * dim), torch.nn.ReLU(), lin(4 * dim, 4 * dim), torch.nn.ReLU(),
                                lin(4 * dim, dim))
    fc_in, fc_hidden, fc_out = model[0].weight, model[2].weight, model[4].weight
    labelled = {"fc_in": fc_in, "fc_hidden": fc_hidden, "fc_out": fc_out}
    gen = torch.Generator().manual_seed(1234 + rank)
    target_map = torch.randn(dim, dim, generator=torch.Generator().manual_seed(7))
    rows = fc_hidden.shape[0] // world
    with commscope.record(args.out) as rec:
        rec.write_config({"args": vars(args), "scatter_order": list(labelled)})
        rec.watch(labelled)
        for step in range(args.steps):
            with rec.step(step) as st:
                total = torch.zeros(())
                for micro in range(args.grad_accum):
                    rec.set_micro_step(micro)
                    x = torch.randn(batch, dim, generator=gen)
                    with rec.region("forward"):
                        loss = (model(x) - x @ target_map).square().mean() / args.grad_accum
                    with rec.region("backward"):
                        loss.backward()
                    total += loss.detach()
                if args.die_at_step == step and rank == 1:
                    os.kill(os.getpid(), 9)
                rec.set_micro_step(None)
                with rec.region("optimizer"):
                    shard = torch.empty(rows, fc_hidden.shape[1])
                    h_in = rec.collective(dist.all_reduce, fc_in.grad, label="fc_in", phase="allreduce")
                    h_hidden = rec.collective(dist.reduce_scatter_tensor, shard, fc_hidden.grad,
                                              label="fc_hidden", phase="reduce")
                    h_out = rec.collective(dist.all_reduce, fc_out.grad, label="fc_out", phase="allreduce")
                    h_loss = rec.collective(dist.all_reduce, total, label="loss", phase="allreduce")
                    with torch.no_grad():
                        for h, param in ((h_in, fc_in), (h_out, fc_out)):
                            h.wait()
                            param.add_(param.grad, alpha=-lr / world)
                        h_hidden.wait()
                        mine = fc_hidden[rank * rows:(rank + 1) * rows] - (lr / world) * shard
                        rec.collective(dist.all_gather_into_tensor, fc_hidden.data, mine.contiguous(),
                                       label="fc_hidden", phase="gather").wait()
                    for p in model.parameters():
                        p.grad = None
                    h_loss.wait()
                st.loss = total.item() / world
                st.tokens = batch * args.grad_accum * world
    dist.destroy_process_group()
""")


def recordings_completed(out: Path, nproc: int = 2) -> bool:
    return all((p := out / f"rank{r}" / "status.json").exists() and '"completed"' in p.read_text()
               for r in range(nproc))


def torchrun(script: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return run_job(script, out, *extra, rerun_after_abort=recordings_completed)


def run_worker(out: Path, *extra: str) -> subprocess.CompletedProcess:
    script = out.parent / "worker.py"
    script.write_text(WORKER)
    return torchrun(script, out, *extra)


def events(run: Path, rank: int) -> list[dict]:
    out = []
    for line in (run / f"rank{rank}" / "events.jsonl").read_bytes().splitlines():
        try:
            out.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            pass  # a torn last line after a kill
    return out


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("plain") / "run"
    proc = run_worker(out, "--steps", "4", "--grad-accum", "2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def test_every_label_once_per_micro_step_in_autograd_order(plain_run):
    for rank in range(2):
        hooks = [e for e in events(plain_run, rank) if e["kind"] == "hook"]
        by = defaultdict(list)
        for h in hooks:
            by[(h["step"], h["micro_step"])].append(h)
        assert sorted(by) == [(s, m) for s in range(4) for m in range(2)]
        for hs in by.values():
            hs.sort(key=lambda h: h["position"])
            assert [h["label"] for h in hs] == LABELS
            assert [h["position"] for h in hs] == [0, 1, 2]


def test_collectives_pair_across_ranks_and_times_are_monotonic_and_aligned(plain_run):
    metas = [orjson.loads((plain_run / f"rank{r}" / "meta.json").read_bytes()) for r in range(2)]
    err = [m["clock"]["error_ns"] for m in metas]
    assert metas[0]["clock"]["offset_ns"] == 0 and err[0] == 0
    assert 0 <= err[1] < 50_000_000  # same host: alignment well under 50 ms
    colls = {r: {(c["group"], c["seq"]): c for c in events(plain_run, r) if c["kind"] == "collective"} for r in range(2)}
    assert len(colls[0]) == 4 * 5 and colls[0].keys() == colls[1].keys()
    assert sorted(seq for _, seq in colls[0]) == list(range(20))
    for key, c0 in colls[0].items():
        c1 = colls[1][key]
        for f in ("op", "bytes", "dtype", "label", "phase", "step", "group_size"):
            assert c0[f] == c1[f], (key, f)
    ops = defaultdict(set)
    for c in colls[0].values():
        ops[(c["label"], c["phase"])].add((c["op"], c["bytes"]))
    dim = 32
    assert ops == {
        ("fc_in", "allreduce"): {("all_reduce", 4 * dim * dim * 4)},
        ("fc_hidden", "reduce"): {("reduce_scatter", 16 * dim * dim * 4)},
        ("fc_hidden", "gather"): {("all_gather", 16 * dim * dim * 4)},
        ("fc_out", "allreduce"): {("all_reduce", 4 * dim * dim * 4)},
        ("loss", "allreduce"): {("all_reduce", 4)},
    }
    for r in range(2):
        for c in colls[r].values():
            assert c["call_ns"] <= c["return_ns"] <= c["wait_ns"] <= c["wait_end_ns"], c
            assert c["end_ns"] >= c["call_ns"], c
    for key in colls[0]:
        for i, j in itertools.permutations(range(2)):
            # rank i cannot finish before rank j launched, up to both ranks' alignment error
            assert colls[i][key]["end_ns"] + err[i] + err[j] >= colls[j][key]["call_ns"], key


def test_steps_agree_across_ranks_and_load(plain_run):
    steps = [[e for e in events(plain_run, r) if e["kind"] == "step"] for r in range(2)]
    assert [s["step"] for s in steps[0]] == [0, 1, 2, 3]
    assert [s["loss"] for s in steps[0]] == pytest.approx([s["loss"] for s in steps[1]], rel=1e-6)
    for r in range(2):
        st = orjson.loads((plain_run / f"rank{r}" / "status.json").read_bytes())
        assert st.pop("ended_ns") >= steps[r][-1]["end_ns"]  # a completed end is the close, after the last step
        assert st == {"status": "completed", "error": None, "last_step": 3}
    load = pytest.importorskip("commscope.load")
    trace = load.load_path(plain_run)
    assert trace.world_size == 2
    assert len(trace.hooks) == 2 * 4 * 2 * 3
    assert len(trace.collectives) == 2 * 20


def test_killed_rank_keeps_finished_steps(tmp_path):
    out = tmp_path / "run"
    proc = run_worker(out, "--steps", "6", "--grad-accum", "2", "--die-at-step", "3")
    assert proc.returncode != 0
    for r in range(2):
        ev = events(out, r)
        assert [e["step"] for e in ev if e["kind"] == "step"] == [0, 1, 2]
        assert {e["step"] for e in ev if e["kind"] == "collective"} == {0, 1, 2}
    assert not (out / "rank1" / "status.json").exists()  # SIGKILL: no status, but the data is there
    # the survivor leaves its last words (here the death reaches it as a gloo error; a survivor blocked in
    # a wait that only torchrun's SIGTERM reaches is TermGuard's case, tests/integration/test_termguard.py)
    status = out / "rank0" / "status.json"
    assert status.exists(), f"rank 0 left no status.json; launcher stderr:\n{proc.stderr[-4000:]}"
    assert orjson.loads(status.read_bytes())["status"] == "failed"


def test_example_plain_loop_runs_and_commands_read_it(tmp_path):
    out = tmp_path / "plain"
    proc = torchrun(ROOT / "examples" / "plain_loop.py", out, "--steps", "3")
    assert proc.returncode == 0, proc.stderr[-3000:]
    for r in range(2):
        st = orjson.loads((out / f"rank{r}" / "status.json").read_bytes())
        assert type(st.pop("ended_ns")) is int
        assert st == {"status": "completed", "error": None, "last_step": 2}

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "commscope", *args], capture_output=True, text=True,
                              timeout=120, env={**os.environ, "COLUMNS": "200"})

    report = cli("report", str(out), "--json", "--no-hta")
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)
    hooks = cli("hooks", str(out), "--json")
    assert hooks.returncode == 0, hooks.stderr
    orders = json.loads(hooks.stdout)
    assert orders["world_size"] == 2 and orders["consistent"]
    assert cli("hooks", str(out)).returncode == 0


def _skew_worker(rank: int, port: int, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    skew = 7_000_000_000 if rank == 1 else 0  # rank 1's clock is 7 s ahead
    sync = align_clocks(now_ns=lambda: time.time_ns() + skew, rounds=4)
    Path(out, f"{rank}.json").write_bytes(orjson.dumps(sync.as_dict()))
    dist.destroy_process_group()


def _subgroup_worker(rank: int, port: int, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=4)
    halves = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    half = align_clocks(halves[rank // 2], rounds=2)
    whole = align_clocks(rounds=2)
    Path(out, f"{rank}.json").write_bytes(orjson.dumps([half.job, whole.job]))
    dist.destroy_process_group()


def test_the_job_identity_comes_only_from_an_alignment_over_the_whole_job(tmp_path):
    """Over a subgroup each subgroup has its own first rank, so no job identity is written; over the world
    every rank writes the same one."""
    mp.spawn(_subgroup_worker, args=(free_port(), str(tmp_path)), nprocs=4, join=True)
    got = [orjson.loads((tmp_path / f"{r}.json").read_bytes()) for r in range(4)]
    assert [half for half, _ in got] == [None] * 4
    assert len({whole for _, whole in got}) == 1 and isinstance(got[0][1], str)


def test_align_clocks_recovers_injected_skew(tmp_path):
    mp.spawn(_skew_worker, args=(free_port(), str(tmp_path)), nprocs=2, join=True)
    s0 = orjson.loads((tmp_path / "0.json").read_bytes())
    s1 = orjson.loads((tmp_path / "1.json").read_bytes())
    assert s0["offset_ns"] == 0 and s0["error_ns"] == 0
    assert 0 < s1["error_ns"] < 100_000_000
    # both processes read the same host clock, so the true offset is exactly -skew
    assert abs(s1["offset_ns"] + 7_000_000_000) <= s1["error_ns"]
    assert s1["rounds"] == 4 and s1["method"] == "barrier-allgather"
    # one job: both ranks name it alike (rank 0's clock at the first gather, as hex)
    assert isinstance(s0["job"], str) and s0["job"] == s1["job"] and int(s0["job"], 16) > 0


def test_a_rank_folder_of_another_run_is_refused_not_read_as_a_fault(tmp_path):
    """Two runs of the same script; the second run's rank1/ copied over the first's: the commands refuse
    the directory, naming the two jobs, instead of reading rank 1 as a straggler or a hang."""
    runs = [tmp_path / "first", tmp_path / "second"]
    for out in runs:
        proc = torchrun(ROOT / "examples" / "plain_loop.py", out, "--steps", "2")
        assert proc.returncode == 0, proc.stderr[-3000:]
    jobs = [[orjson.loads((out / f"rank{r}" / "meta.json").read_bytes())["clock"]["job"] for r in range(2)]
            for out in runs]
    assert jobs[0][0] == jobs[0][1] and jobs[1][0] == jobs[1][1] and jobs[0][0] != jobs[1][0]
    mixed = tmp_path / "mixed"
    shutil.copytree(runs[0], mixed)
    shutil.rmtree(mixed / "rank1")
    shutil.copytree(runs[1] / "rank1", mixed / "rank1")
    for command in ("doctor", "report"):
        proc = subprocess.run([sys.executable, "-m", "commscope", command, str(mixed), "--json"], capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert proc.stderr == (f"commscope: error: {mixed}: its rank folders were recorded by 2 different jobs "
                               f"(meta.json clock.job: rank(s) 0 job {jobs[0][0]}; rank(s) 1 job {jobs[1][0]}): a "
                               "rank folder copied from another run? Give each run a directory of its own\n")
