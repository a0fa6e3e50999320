"""A conformance corpus of Kineto traces, written in the test session (docs/traces.md lists the kinds).

Recorded by torch.profiler on CPU here (`record_*`): one process without a process group (plain export,
or tensorboard_trace_handler with several profiling cycles, with and without record_shapes/with_stack),
and gloo jobs of 1, 2 and 4 ranks (spawned processes: each imports torch afresh; a fork of a process whose
torch runs threads does not survive reliably). Made from those or from the GPU traces in tests/data by
editing a copy (`trim_*`): missing or partial distributedInfo, a partial set of ranks, older formats
without record_param_comms sizes, ROCm names, and values of the wrong type.

Every builder writes a folder (or file) under `root` and returns its path; nothing in tests/data changes.
"""
from __future__ import annotations

import copy
import gzip
import json
import os
import shutil
from pathlib import Path

DATA = Path(__file__).parent / "data"
NCCL_ONE_RANK = DATA / "hta-testdata" / "nccl_parser_config" / "nccl_data.json.gz"


def _work(x, steps: int = 3):
    import torch

    for _ in range(steps):
        y = torch.nn.functional.relu(x @ x)
        yield y.sum()


def record_single(root: Path, *, handler: bool, record_shapes: bool, with_stack: bool) -> Path:
    """One process, no process group: `handler` writes one file per profiling cycle (2 cycles) through
    tensorboard_trace_handler (`<host>_<pid>.<ns>.pt.trace.json`), else one export_chrome_trace file."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function, schedule, tensorboard_trace_handler

    out = root
    out.mkdir(parents=True, exist_ok=True)
    x = torch.randn(48, 48)
    kw = dict(activities=[ProfilerActivity.CPU], record_shapes=record_shapes, with_stack=with_stack)
    if handler:
        with profile(schedule=schedule(wait=0, warmup=0, active=2, repeat=2),
                     on_trace_ready=tensorboard_trace_handler(str(out)), **kw) as prof:
            for _ in range(4):
                with record_function("forward"):
                    list(_work(x, 1))
                prof.step()
    else:
        with profile(**kw) as prof:
            for _ in range(3):
                with record_function("forward"):
                    list(_work(x, 1))
                prof.step()
        prof.export_chrome_trace(str(out / "trace.json"))
    return out


def _gloo_rank(rank: int, world: int, init: str, out: str, handler: bool, record_shapes: bool,
               with_stack: bool) -> None:
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, record_function, schedule, tensorboard_trace_handler

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    x = torch.randn(32, 32)
    big = torch.randn(world * 256)
    part = torch.empty(256)
    kw = dict(activities=[ProfilerActivity.CPU], record_shapes=record_shapes, with_stack=with_stack)
    if handler:
        kw.update(schedule=schedule(wait=0, warmup=0, active=2, repeat=2),
                  on_trace_ready=tensorboard_trace_handler(out))
    steps = 4 if handler else 3
    with profile(**kw) as prof:
        for _ in range(steps):
            y = x @ x
            with record_function("commscope:grad:reduce"):
                w = dist.reduce_scatter_tensor(part, big, async_op=True)
            dist.all_reduce(y)
            w.wait()
            gathered = torch.empty(world * 256)
            dist.all_gather_into_tensor(gathered, part)
            prof.step()
    if not handler:
        prof.export_chrome_trace(os.path.join(out, f"rank{rank}.json"))
    dist.barrier()
    dist.destroy_process_group()


def record_gloo(root: Path, world: int, *, handler: bool = False, record_shapes: bool = True,
                with_stack: bool = False) -> Path:
    """A gloo job of `world` spawned ranks; `handler`: tensorboard_trace_handler (2 cycles per rank, default
    worker names), else `rank<r>.json` per rank."""
    import torch.multiprocessing as mp

    from ports import free_port

    # spawned, not forked: a child forked from a process whose torch already runs threads can crash inside
    # torch (a SIGSEGV in the profiler's stack capture was seen on a loaded 2-core machine). A spawned rank
    # can still die inside torch's profiler on such a machine ("terminate called without an active
    # exception", SIGABRT, when a tensorboard_trace_handler cycle ends): the corpus is input to the tests,
    # not what they test, so a job a signal killed is recorded again, once, in a fresh folder.
    for attempt in range(2):
        out = root if attempt == 0 else root.with_name(root.name + "-again")
        out.mkdir(parents=True, exist_ok=True)
        init = f"tcp://127.0.0.1:{free_port()}"
        try:
            mp.start_processes(_gloo_rank, args=(world, init, str(out), handler, record_shapes, with_stack),
                               nprocs=world, start_method="spawn")
            return out
        except mp.ProcessExitedException as e:
            if attempt or not e.signal_name:
                raise
    raise AssertionError("unreachable")


# --- edited copies --------------------------------------------------------------------------------------

def read(path: Path) -> dict:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def write(path: Path, doc: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "wt") as f:
        json.dump(doc, f)
    return path


def trim_folder(src: Path, dst: Path, edit, names=None) -> Path:
    """Each trace of `src` (or those named) edited by `edit(doc, name) -> doc | None` (None: left out),
    written to `dst` under `names[name]` if given."""
    for p in sorted(src.iterdir()):
        if not p.name.endswith((".json", ".json.gz")):
            continue
        doc = edit(read(p), p.name)
        if doc is not None:
            write(dst / (names or {}).get(p.name, p.name), doc)
    return dst


def without_distributed_info(doc: dict, _name: str) -> dict:
    doc.pop("distributedInfo", None)
    return doc


def rank_only_info(doc: dict, _name: str) -> dict:
    doc["distributedInfo"] = {"rank": doc["distributedInfo"]["rank"]}
    return doc


_CPP_TYPES = {"Float": "float", "Int": "int", "Long": "long int", "Half": "c10::Half", "BFloat16": "c10::BFloat16",
              "Byte": "unsigned char", "Double": "double", None: ""}


def older_nccl(doc: dict) -> dict:
    """torch < 2.1 style: record_param_comms without collective name, message sizes or group, its input
    tensor's shape in Input Dims instead; the c10d / nccl: wrappers name the collective. Waits recorded no
    record_param_comms then."""
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not (
        e.get("name") == "record_param_comms" and e.get("args", {}).get("Collective name") == "wait")]
    for e in doc["traceEvents"]:
        if e.get("name") == "record_param_comms":
            a = e.get("args", {})
            nel, dt = a.get("In msg nelems"), a.get("dtype")
            for k in ("Collective name", "In msg nelems", "Out msg nelems", "dtype", "Process Group Name",
                      "Process Group Description", "Process Group Ranks", "Group size", "In split size",
                      "Out split size", "Global rank start", "Global rank stride"):
                a.pop(k, None)
            a["Input Dims"] = [[nel], [], [], [], [], [], []]
            a["Input type"] = [_CPP_TYPES[dt], "Scalar", "Scalar", "Scalar", "", "", ""]
    doc["distributedInfo"].pop("pg_config", None)
    return doc


def rocm(doc: dict) -> dict:
    """ROCm-style names: HIP runtime launches and RCCL kernels."""
    for e in doc["traceEvents"]:
        n = e.get("name")
        if not isinstance(n, str):
            continue
        if e.get("cat") == "cuda_runtime":
            e["name"] = n.replace("cudaLaunchKernel", "hipLaunchKernel").replace("cuda", "hip")
        elif e.get("cat") == "kernel" and n.startswith("nccl"):
            e["name"] = "r" + n[1:]  # ncclKernel_AllReduce_… → rcclKernel_AllReduce_…
    doc["distributedInfo"]["backend"] = "nccl"  # torch reports RCCL as nccl
    return doc


def damaged(doc: dict) -> dict:
    """Values of the wrong type, non-finite numbers, a duplicated event and negative durations."""
    ev = doc["traceEvents"]
    ops = [e for e in ev if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    ops[0]["ts"] = "12.5"  # a string time
    ops[1]["dur"] = -3.0  # negative duration
    ops[2]["args"] = dict(ops[2].get("args") or {}, **{"External id": "x"})  # an id of the wrong type
    ops[3]["dur"] = float("inf")  # non-finite: json writes Infinity / NaN, which strict decoders refuse
    ops[4]["ts"] = float("nan")
    ev.append(copy.deepcopy(ops[5]))  # duplicated
    ev.append({"ph": "X", "cat": "cpu_op", "name": 7, "ts": 1.0, "dur": 1.0})  # a name that is not a string
    return doc


def copy_files(src: Path, dst: Path, names: list[str]) -> Path:
    dst.mkdir(parents=True, exist_ok=True)
    for n in names:
        shutil.copy(src / n, dst / n)
    return dst
