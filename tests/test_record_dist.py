"""Recorder across 2 gloo ranks: examples/plain_loop.py under torch.distributed.run, a SIGKILLed rank,
and clock alignment with an injected skew."""
from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import orjson
import pytest
import torch.distributed as dist
import torch.multiprocessing as mp

from commscope.recording.clock import align_clocks
from ports import free_port

ROOT = Path(__file__).resolve().parents[1]
LABELS = ["fc_out", "fc_hidden", "fc_in"]  # autograd order of the example's chain: last layer first



def run_example(out: Path, *extra: str, nproc: int = 2) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
           "--master-port", str(free_port()), str(ROOT / "examples" / "plain_loop.py"), "--out", str(out), *extra]
    env = {**os.environ, "COMMSCOPE_EXAMPLE_CPU": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env, cwd=ROOT)


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
    proc = run_example(out, "--steps", "4", "--grad-accum", "2")
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
        assert st == {"status": "completed", "error": None, "last_step": 3}
    load = pytest.importorskip("commscope.load")
    trace = load.load_path(plain_run)
    assert trace.world_size == 2
    assert len(trace.hooks) == 2 * 4 * 2 * 3
    assert len(trace.collectives) == 2 * 20


def test_killed_rank_keeps_finished_steps(tmp_path):
    out = tmp_path / "run"
    proc = run_example(out, "--steps", "6", "--grad-accum", "2", "--die-at-step", "3")
    assert proc.returncode != 0
    for r in range(2):
        ev = events(out, r)
        assert [e["step"] for e in ev if e["kind"] == "step"] == [0, 1, 2]
        assert {e["step"] for e in ev if e["kind"] == "collective"} == {0, 1, 2}
    assert not (out / "rank1" / "status.json").exists()  # SIGKILL: no status, but the data is there
    # the survivor leaves its last words (here the death reaches it as a gloo error; a survivor blocked in
    # a wait that only torchrun's SIGTERM reaches is TermGuard's case, tests/test_termguard.py)
    status = out / "rank0" / "status.json"
    assert status.exists(), f"rank 0 left no status.json; launcher stderr:\n{proc.stderr[-4000:]}"
    assert orjson.loads(status.read_bytes())["status"] == "failed"


def _skew_worker(rank: int, port: int, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    skew = 7_000_000_000 if rank == 1 else 0  # rank 1's clock is 7 s ahead
    sync = align_clocks(now_ns=lambda: time.time_ns() + skew, rounds=4)
    Path(out, f"{rank}.json").write_bytes(orjson.dumps(sync.as_dict()))
    dist.destroy_process_group()


def test_align_clocks_recovers_injected_skew(tmp_path):
    mp.spawn(_skew_worker, args=(free_port(), str(tmp_path)), nprocs=2, join=True)
    s0 = orjson.loads((tmp_path / "0.json").read_bytes())
    s1 = orjson.loads((tmp_path / "1.json").read_bytes())
    assert s0["offset_ns"] == 0 and s0["error_ns"] == 0
    assert 0 < s1["error_ns"] < 100_000_000
    # both processes read the same host clock, so the true offset is exactly -skew
    assert abs(s1["offset_ns"] + 7_000_000_000) <= s1["error_ns"]
    assert s1["rounds"] == 4 and s1["method"] == "barrier-allgather"
