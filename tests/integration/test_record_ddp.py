"""commscope.recording.ddp_comm_hook with real DDP: 2 gloo ranks on CPU through torch.distributed.run.

- examples/ddp_loop.py → run directory → records and `commscope report --json`: one record per bucket per
  step, each bucket waited on after its launch, the waits one after another in bucket order inside the last
  micro-step's backward, and the report's exposed time is the sum of those blocked waits (> 0).
- this file as the rank script (`__main__` below): DDP with the hook against DDP without one and with torch's
  allreduce_hook, same weights and batches: gradients bitwise equal every step, in several DDP setups."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ACCUM = 2
STEPS = 4


def _torchrun(args, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    # --log-dir: without it torch.distributed.run leaves a /tmp/torchelastic_* folder behind per launch
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--log-dir", str(tmp_path / "logs"),
           "--master-port", "0", "--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:0", *map(str, args)]
    p = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p


def _records(run, rank):
    with open(run / f"rank{rank}" / "events.jsonl") as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.fixture(scope="module")
def example_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ddp")
    run = tmp / "run"
    _torchrun([ROOT / "examples" / "ddp_loop.py", "--out", run, "--steps", STEPS, "--accum", ACCUM], tmp)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-m", "commscope", "report", str(run), "--json", "--no-hta"],
                       cwd=tmp, env=env, capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr[-3000:]
    return run, json.loads(p.stdout)


def _buckets(recs, step):
    return sorted((r for r in recs if r["kind"] == "collective" and r["step"] == step),
                  key=lambda r: r["seq"])


def test_one_record_per_bucket_with_its_bytes(example_run):
    run, _ = example_run
    # The example's model: Linear(64,512), Linear(512,512), Linear(512,8), float32.
    param_bytes = 4 * (64 * 512 + 512 + 512 * 512 + 512 + 512 * 8 + 8)
    for rank in (0, 1):
        recs = _records(run, rank)
        for step in range(STEPS):
            buckets = _buckets(recs, step)
            assert [b["label"] for b in buckets] == [f"ddp_bucket{i}" for i in range(len(buckets))]
            assert {(b["op"], b["phase"]) for b in buckets} == {("all_reduce", "allreduce")}
            assert sum(b["bytes"] for b in buckets) == param_bytes  # every gradient once, no-sync passes none
        # After DDP's first-step rebuild: 0.5 MB buckets, the last layers' gradients first.
        assert [b["bytes"] for b in _buckets(recs, STEPS - 1)] == [4 * (512 * 512 + 512 + 512 * 8 + 8),
                                                                    4 * (64 * 512 + 512)]


def test_waits_follow_launches_in_bucket_order_inside_backward(example_run):
    run, _ = example_run
    for rank in (0, 1):
        recs = _records(run, rank)
        for step in range(STEPS):
            buckets = _buckets(recs, step)
            backward = [r for r in recs if r["kind"] == "region" and r["step"] == step
                        and r["name"] == "backward" and r["micro_step"] == ACCUM - 1]
            assert len(backward) == 1
            bw = backward[0]
            for b in buckets:
                assert b["return_ns"] <= b["wait_ns"] <= b["wait_end_ns"] <= bw["end_ns"]
                assert b["wait_ns"] >= buckets[-1]["return_ns"]  # after the backward launched its last bucket
                assert b["end_ns"] is not None
            for a, b in zip(buckets, buckets[1:]):
                assert a["wait_end_ns"] <= b["wait_ns"]


def test_report_exposure_is_the_blocked_waits(example_run):
    run, report = example_run
    labels = {k: v for k, v in report["labels"].items() if k.startswith("ddp_bucket")}
    assert set(labels) == {"ddp_bucket0", "ddp_bucket1"}
    total = 0.0
    for label, stats in labels.items():
        assert stats["hidden_pct"] < 100
        for rank in (0, 1):
            waits = [max(0, min(r["wait_end_ns"], r["end_ns"]) - r["wait_ns"]) / 1e6
                     for r in _records(run, rank) if r["kind"] == "collective" and r["label"] == label]
            assert stats["exposed_ms_by_rank"][str(rank)] == pytest.approx(sum(waits), abs=2e-3)
            total += sum(waits)
    # The last bucket is launched at the very end of backward: some rank always blocks on a transfer.
    assert total > 0
    assert sum(v["exposed_ms"] for v in labels.values()) > 0


def test_gradients_equal_ddp_default(tmp_path):
    _torchrun([Path(__file__), tmp_path], tmp_path)
    for rank in (0, 1):
        result = json.loads((tmp_path / f"grads{rank}.json").read_text())
        assert result["compared"] == 5 * 4 * 3 * 6  # setups x steps x variants x parameters
        assert result["mismatches"] == [], result["mismatches"][:5]
        # One record per bucket per step, with the bucket's bytes, labelled by the callable.
        recs = _records(tmp_path / "run", rank)
        for step, seen in result["buckets"].items():
            got = {r["label"]: r["bytes"] for r in recs if r["kind"] == "collective" and r["step"] == int(step)}
            assert len(got) == sum(r["kind"] == "collective" and r["step"] == int(step) for r in recs)
            assert seen and got == {f"commscope{i}": n for i, n in seen.items()}
            assert all(r["wait_ns"] is not None for r in recs if r["kind"] == "collective")


# ---- rank script: the hook against DDP's default, bitwise -------------------------------------------------
def _rank_main(out):
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.nn.parallel import DistributedDataParallel as DDP

    import commscope
    from commscope.recording import ddp_comm_hook

    dist.init_process_group("gloo")
    rank = dist.get_rank()

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(16, 256), torch.nn.Linear(256, 4)
            self.unused = torch.nn.Linear(4, 4)  # for find_unused_parameters

        def forward(self, x):
            return self.b(torch.relu(self.a(x)))

    setups = {"plain": {}, "no_sync": {}, "find_unused": {"find_unused_parameters": True},
              "static_graph": {"static_graph": True},
              "bucket_view": {"gradient_as_bucket_view": True}}
    mismatches, buckets, compared, step_no = [], {}, 0, 0
    with commscope.record(Path(out) / "run") as rec:
        for setup, kw in setups.items():
            models = {}
            for variant in ("default", "allreduce_hook", "commscope", "commscope_off"):
                torch.manual_seed(0)
                net = Net()
                if setup != "find_unused":
                    net.unused.requires_grad_(False)
                m = DDP(net, bucket_cap_mb=0.01, **kw)
                seen = {}
                if variant == "allreduce_hook":
                    m.register_comm_hook(None, allreduce_hook)
                elif variant.startswith("commscope"):
                    r = rec if variant == "commscope" else commscope.record(out, trace="off")
                    inner = ddp_comm_hook(r, label=lambda b, v=variant: f"{v}{b.index()}")

                    def hook(state, bucket, inner=inner, seen=seen):
                        seen[bucket.index()] = bucket.buffer().numel() * bucket.buffer().element_size()
                        return inner(state, bucket)
                    m.register_comm_hook(None, hook)
                models[variant] = (m, torch.optim.SGD(m.parameters(), lr=0.1), seen)
            for step in range(4):
                with rec.step(step_no):
                    grads = {}
                    for variant, (m, opt, seen) in models.items():
                        seen.clear()
                        data = torch.Generator().manual_seed(1000 * step + rank)
                        micro = 2 if setup == "no_sync" else 1
                        for i in range(micro):
                            x = torch.randn(8, 16, generator=data)
                            if i < micro - 1:
                                with m.no_sync():
                                    m(x).square().mean().backward()
                            else:
                                m(x).square().mean().backward()
                        grads[variant] = [p.grad.clone() if p.grad is not None else None
                                          for p in m.parameters()]
                        opt.step()
                        opt.zero_grad()
                    for variant in ("allreduce_hook", "commscope", "commscope_off"):
                        for i, (want, got) in enumerate(zip(grads["default"], grads[variant])):
                            compared += 1
                            same = (want is None and got is None) or (
                                want is not None and got is not None and torch.equal(want, got))
                            if not same:
                                mismatches.append([setup, step, variant, i])
                buckets[step_no] = dict(models["commscope"][2])  # bucket index -> bytes, as DDP passed them
                step_no += 1
    (Path(out) / f"grads{rank}.json").write_text(json.dumps(
        {"compared": compared, "mismatches": mismatches, "buckets": buckets}))
    dist.destroy_process_group()


if __name__ == "__main__":
    _rank_main(sys.argv[1])
