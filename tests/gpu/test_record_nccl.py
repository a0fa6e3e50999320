"""The recording API's CUDA paths on NCCL (world size 1, one GPU): what the gloo/CPU tests cannot reach.

Each test runs this file as a rank script under torch.distributed.run (one process, NCCL) and checks what it
recorded:
- `ddp_comm_hook` on NCCL: gradients bitwise those of DDP's default and of torch's allreduce_hook (plain,
  no_sync, gradient_as_bucket_view); one CUDA-event-timed record per bucket, waited inside backward.
- `flush="overlap"` writes the same records as `flush="step"` (every step, the last one at close), each
  with CUDA-event times in order; `flush="step"` resolves the records the GPU has passed at the next
  region end, inside the step.
- A region entered on a side stream is stamped on that stream: its recorded duration is the GPU time of the
  work queued there, not the microseconds the host spent in the `with` block.
- A collective whose handle is dropped without `wait()` is written, with no wait and no end, once NCCL's
  Work says it finished.
- `handle_signals()` with NCCL: SIGTERM mid-run ends the rank with status "failed" naming the signal, and
  every finished step's records are on disk.
Skipped without CUDA."""
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (NCCL)")

ROOT = Path(__file__).resolve().parents[2]
STEPS = 4


def _torchrun(tmp_path, mode, check=True):
    # the repository first, then whatever the caller's path holds (wheels installed to a --target folder)
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "NCCL_NVLS_ENABLE": "0"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "1", "--master-port", "0",
           "--log-dir", str(tmp_path / f"logs-{mode}"),  # else a /tmp/torchelastic_* folder is left per launch
           "--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:0", __file__, mode, str(tmp_path)]
    p = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    if check:
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p


def _records(run):
    with open(run / "rank0" / "events.jsonl") as f:
        return [json.loads(line) for line in f if line.strip()]


def test_ddp_hook_on_nccl_matches_ddp_bitwise_and_records_each_bucket(tmp_path):
    _torchrun(tmp_path, "ddp")
    result = json.loads((tmp_path / "ddp.json").read_text())
    assert result["params"] == 6  # _net(): three Linear layers, each a weight and a bias
    assert result["compared"] == 3 * STEPS * 2 * result["params"]  # setups x steps x variants x parameters
    assert result["mismatches"] == []
    recs = _records(tmp_path / "run")
    colls = [r for r in recs if r["kind"] == "collective"]
    steps = {r["step"] for r in colls}
    assert steps == set(range(3 * STEPS))
    for r in colls:
        assert r["timing"] == "cuda_event" and r["op"] == "all_reduce"
        assert r["start_ns"] <= r["end_ns"]
        assert r["call_ns"] <= r["return_ns"] <= r["wait_ns"] <= r["wait_end_ns"]
    for step in steps:
        buckets = sorted((r for r in colls if r["step"] == step), key=lambda r: r["seq"])
        assert sum(b["bytes"] for b in buckets) == result["param_bytes"]
        bw = [r for r in recs if r["kind"] == "region" and r["step"] == step and r["name"] == "backward"]
        assert all(b["wait_end_ns"] <= bw[-1]["end_ns"] for b in buckets)


def test_overlap_flush_writes_what_step_flush_writes(tmp_path):
    _torchrun(tmp_path, "flush")
    shapes = {}
    for flush in ("step", "overlap"):
        recs = _records(tmp_path / flush)
        assert {r["step"] for r in recs if r["kind"] == "step"} == set(range(STEPS))
        for r in recs:
            if r["kind"] in ("region", "collective"):
                assert r["timing"] == "cuda_event" and r["start_ns"] <= r["end_ns"], r
        shapes[flush] = sorted((r["kind"], r["step"], r.get("name") or r.get("label") or "") for r in recs)
        status = json.loads((tmp_path / flush / "rank0" / "status.json").read_text())
        assert status["status"] == "completed"
    assert shapes["step"] == shapes["overlap"]
    # flush="step" resolved the regions the GPU had passed at the next region end, inside the step
    early = json.loads((tmp_path / "early.json").read_text())["early"]
    assert 2 <= early <= 4, early
    steps = {r["step"]: r for r in _records(tmp_path / "step") if r["kind"] == "step"}
    for r in _records(tmp_path / "step"):
        if r["kind"] == "region":  # on the common axis once: inside its step (give or take the anchor's ms)
            st = steps[r["step"]]
            assert st["start_ns"] - 5_000_000 <= r["start_ns"] <= r["end_ns"] <= st["end_ns"] + 5_000_000, r


def test_side_stream_region_times_the_side_streams_work(tmp_path):
    _torchrun(tmp_path, "stream")
    gpu_ms = json.loads((tmp_path / "stream.json").read_text())["gpu_ms"]
    side = [r for r in _records(tmp_path / "run") if r["kind"] == "region" and r["name"] == "side"]
    assert len(side) == STEPS
    for r in side:
        ms = (r["end_ns"] - r["start_ns"]) / 1e6
        assert gpu_ms * 0.5 <= ms <= gpu_ms * 2 + 1, (ms, gpu_ms)


def test_a_dropped_unwaited_nccl_collective_is_written_once_finished(tmp_path):
    """A handle dropped without wait() (DDP's join path): written with no wait and no end once NCCL's Work
    says it finished, so the rank's records keep resolving early and nothing stays in flight."""
    _torchrun(tmp_path, "dropped")
    result = json.loads((tmp_path / "dropped.json").read_text())
    assert result["inflight_after_each_step"] == [0] * STEPS and result["early"] == [True] * STEPS
    colls = [r for r in _records(tmp_path / "run") if r["kind"] == "collective"]
    assert [(r["label"], r["step"]) for r in colls] == [(lab, s) for s in range(STEPS) for lab in ("dropped", "waited")]
    for r in colls:
        assert r["timing"] == "cuda_event" and r["call_ns"] <= r["start_ns"]
        waited = r["label"] == "waited"
        assert (r["wait_ns"] is not None, r["end_ns"] is not None) == (waited, waited)


def test_sigterm_with_nccl_keeps_finished_steps_and_names_the_signal(tmp_path):
    p = _torchrun(tmp_path, "sigterm", check=False)
    assert p.returncode != 0
    status = json.loads((tmp_path / "run" / "rank0" / "status.json").read_text())
    assert status["status"] == "failed"
    assert "SIGTERM" in status["error"]
    recs = _records(tmp_path / "run")
    assert {r["step"] for r in recs if r["kind"] == "step"} == {0, 1, 2}
    assert len([r for r in recs if r["kind"] == "collective" and r["step"] == 2]) == 1


# ---- rank script --------------------------------------------------------------------------------------------
def _net():
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                               torch.nn.ReLU(), torch.nn.Linear(512, 8)).cuda()


def _ddp(out):
    import torch
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.nn.parallel import DistributedDataParallel as DDP

    import commscope
    from commscope.recording import ddp_comm_hook

    mismatches, compared, step_no = [], 0, 0
    params = list(_net().parameters())
    param_bytes = sum(p.numel() * p.element_size() for p in params)
    with commscope.record(out / "run", device="cuda") as rec:
        for setup, kw in {"plain": {}, "no_sync": {}, "bucket_view": {"gradient_as_bucket_view": True}}.items():
            models = {}
            for variant in ("default", "allreduce_hook", "commscope"):
                m = DDP(_net(), bucket_cap_mb=0.5, **kw)
                if variant == "allreduce_hook":
                    m.register_comm_hook(None, allreduce_hook)
                elif variant == "commscope":
                    m.register_comm_hook(None, ddp_comm_hook(rec))
                models[variant] = (m, torch.optim.SGD(m.parameters(), lr=0.1))
            for step in range(STEPS):
                with rec.step(step_no):
                    grads = {}
                    for variant, (m, opt) in models.items():
                        gen = torch.Generator(device="cuda").manual_seed(step)
                        micro = 2 if setup == "no_sync" else 1
                        for i in range(micro):
                            x = torch.randn(32, 64, device="cuda", generator=gen)
                            ctx = m.no_sync() if i < micro - 1 else torch.enable_grad()
                            with ctx, rec.region("backward") if variant == "commscope" else torch.enable_grad():
                                m(x).square().mean().backward()
                        grads[variant] = [p.grad.clone() for p in m.parameters()]
                        opt.step()
                        opt.zero_grad()
                    for variant in ("allreduce_hook", "commscope"):
                        for i, (want, got) in enumerate(zip(grads["default"], grads[variant])):
                            compared += 1
                            if not torch.equal(want, got):
                                mismatches.append([setup, step, variant, i])
                step_no += 1
    (out / "ddp.json").write_text(json.dumps({"compared": compared, "mismatches": mismatches,
                                              "params": len(params), "param_bytes": param_bytes}))


def _flush(out):
    import torch
    import torch.distributed as dist

    from commscope.recording import Recorder

    early = None
    for flush in ("step", "overlap"):
        net = _net()
        rec = Recorder(out / flush, rank=0, world_size=1, device="cuda", flush=flush)
        for step in range(STEPS):
            with rec.step(step) as st:
                with rec.region("forward"):
                    loss = net(torch.randn(256, 64, device="cuda")).square().mean()
                with rec.region("backward"):
                    loss.backward()
                if flush == "step" and step == 1:
                    torch.cuda.synchronize()  # the GPU has passed forward and backward: the next region end resolves them
                grads = torch.cat([p.grad.flatten() for p in net.parameters()])
                with rec.region("update"):
                    h = rec.collective(dist.all_reduce, grads, label="grads", phase="all_reduce")
                    h.wait()
                    net.zero_grad()
                if flush == "step" and step == 1:
                    early = len(rec._lines)
                st.loss = loss.detach()
        rec.close()
    (out / "early.json").write_text(json.dumps({"early": early}))


def _stream(out):
    import torch

    from commscope.recording import Recorder

    a = torch.randn(4096, 4096, device="cuda")
    side = torch.cuda.Stream()

    def work():
        for _ in range(20):
            a @ a

    # The side stream's work alone, timed with events on that stream.
    with torch.cuda.stream(side):
        work()
        t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0.record()
        work()
        t1.record()
    torch.cuda.synchronize()
    gpu_ms = t0.elapsed_time(t1)
    rec = Recorder(out / "run", rank=0, world_size=1, device="cuda")
    for step in range(STEPS):
        with rec.step(step):
            with torch.cuda.stream(side), rec.region("side"):
                work()
            side.synchronize()
    rec.close()
    (out / "stream.json").write_text(json.dumps({"gpu_ms": gpu_ms}))


def _dropped(out):
    import torch
    import torch.distributed as dist

    from commscope.recording import Recorder

    rec = Recorder(out / "run", rank=0, world_size=1, device="cuda")
    x = torch.ones(1 << 20, device="cuda")
    inflight, early = [], []
    for step in range(STEPS):
        with rec.step(step):
            with rec.region("launch"):
                h = rec.collective(dist.all_reduce, x, label="dropped", phase="all_reduce")
                h.work.wait()  # on the Work, as DDP's future does; commscope's handle is dropped unwaited
                del h
            torch.cuda.synchronize()
            with rec.region("after"):
                pass
            early.append(bool(rec._lines))  # resolved at the region's end, inside the step
            rec.collective(dist.all_reduce, x, label="waited", phase="all_reduce").wait()
            torch.cuda.synchronize()
        inflight.append(len(rec.inflight))
    rec.close()
    (out / "dropped.json").write_text(json.dumps({"inflight_after_each_step": inflight, "early": early}))


def _sigterm(out):
    import torch
    import torch.distributed as dist

    import commscope

    rec = commscope.record(out / "run", device="cuda")
    rec.handle_signals()
    x = torch.ones(1024, device="cuda")
    with rec:
        for step in range(10):
            with rec.step(step):
                if step == 3:
                    os.kill(os.getpid(), signal.SIGTERM)
                with rec.region("work"):
                    rec.collective(dist.all_reduce, x, label="x", phase="all_reduce").wait()
                torch.cuda.synchronize()


if __name__ == "__main__":
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl", device_id=torch.device("cuda", torch.cuda.current_device()))
    try:
        {"ddp": _ddp, "flush": _flush, "stream": _stream, "sigterm": _sigterm, "dropped": _dropped}[sys.argv[1]](Path(sys.argv[2]))
    finally:
        dist.destroy_process_group()
