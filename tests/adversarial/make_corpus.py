"""Writes the adversarial corpus next to this file: one folder per way an input can be broken.

Each case is a folder given to every command as its input. Rerun to regenerate (deterministic); the files
are committed so the corpus is reviewable as data. Cases that cannot live in git (a missing path, an empty
directory) are made by the test itself.
"""
from __future__ import annotations

import gzip
import json
import os
import pickle
import shutil

HERE = os.path.dirname(os.path.abspath(__file__))
T = 1_764_670_000_000_000_000


def kineto(rank: int, world: int, with_info: bool = True) -> dict:
    doc = {"schemaVersion": 1, "traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 1000.0, "dur": 500.0},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1100.0, "dur": 50.0}]}
    if with_info:
        doc["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": world}
    return doc


def kineto_gpu(rank: int, world: int, *, op_args: dict | None = None, grid: object = (128, 1, 1),
               rpc_args: dict | None = None, tid: object = 1, dur: object = 40.0) -> dict:
    """A GPU trace of one step: an `aten::add` with shapes whose kernel is linked (launch correlation,
    External id), and an all_reduce (`record_param_comms` + its NCCL kernel). The keyword arguments put
    odd values in its fields; `dur` is the add's."""
    args = {"External id": 7, "Input Dims": [[4096, 4096], [4096, 4096]], "Input Strides": [[1, 4096], [4096, 1]],
            "Input type": ["float", "float"], **(op_args or {})}
    rpc = {"External id": 9, "Collective name": "allreduce", "dtype": "Float", "In msg nelems": 1024,
           "Out msg nelems": 1024, "Group size": world, "Process Group Name": "0", **(rpc_args or {})}
    ev = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": tid, "ts": 1000.0, "dur": 500.0},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": tid, "ts": 1100.0, "dur": dur, "args": args},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": tid, "ts": 1110.0, "dur": 5.0,
         "args": {"correlation": 1, "External id": 7}},
        {"ph": "X", "cat": "kernel", "name": "void at::native::elementwise_kernel<128, 4>(int, float)", "pid": 0,
         "tid": 7, "ts": 1120.0, "dur": 30.0,
         "args": {"stream": 7, "correlation": 1, "External id": 7, "grid": list(grid) if isinstance(grid, tuple) else grid,
                  "block": [128, 1, 1]}},
        {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": tid, "ts": 1200.0, "dur": 20.0,
         "args": rpc},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": tid, "ts": 1205.0, "dur": 5.0,
         "args": {"correlation": 2, "External id": 9}},
        {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
         "pid": 0, "tid": 8, "ts": 1230.0, "dur": 50.0, "args": {"stream": 8, "correlation": 2, "External id": 9}},
    ]
    return {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world},
            "traceEvents": ev}


def kineto_gloo(rank: int, world: int, *, launch_args: dict | None = None, tid: object = 1) -> dict:
    """A CPU (gloo) trace of one step: an all_reduce launched by `c10d::allreduce_` and executed by
    `gloo:all_reduce` on a worker thread; `launch_args` puts odd values in the launch's args, `tid` is the
    launching thread's id."""
    shapes = {"Input Dims": [[1024]], "Input type": ["float"]}
    return {"schemaVersion": 1, "distributedInfo": {"backend": "gloo", "rank": rank, "world_size": world},
            "traceEvents": [
                {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": tid, "ts": 1000.0,
                 "dur": 500.0},
                {"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "pid": 1, "tid": tid, "ts": 1100.0, "dur": 10.0,
                 "args": {**shapes, **(launch_args or {})}},
                {"ph": "X", "cat": "cpu_op", "name": "gloo:all_reduce", "pid": 1, "tid": 2, "ts": 1115.0, "dur": 50.0,
                 "args": shapes}]}


def write_ranks(case: str, world: int = 2, gloo: bool = False, **odd) -> None:
    for r in range(world):
        write(case, f"rank{r}.json", kineto_gloo(r, world, **odd) if gloo else kineto_gpu(r, world, **odd))


def meta(rank: int, world: int, schema: int = 1) -> dict:
    return {"schema_version": schema, "rank": rank, "local_rank": rank, "world_size": world, "hostname": "h",
            "pid": 1, "backend": "gloo", "device": "cpu", "torch": "2.13.0",
            "clock": {"offset_ns": 0, "error_ns": 0, "method": "barrier-allgather", "rounds": 1}, "started_ns": T}


def step(rank: int, s: int) -> dict:
    return {"kind": "step", "rank": rank, "step": s, "loss": 5.0, "start_ns": T + s * 10**6,
            "end_ns": T + s * 10**6 + 5 * 10**5, "tokens": 1024}


def write(case: str, name: str, data) -> None:
    p = os.path.join(HERE, case, name)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    if isinstance(data, (dict, list)):
        data = json.dumps(data).encode()
    elif isinstance(data, str):
        data = data.encode()
    with open(p, "wb") as f:
        f.write(data)


def run_rank(case: str, rank: int, world: int, *, schema: int = 1, events: bytes | None = None,
             status: bool = True) -> None:
    write(case, f"rank{rank}/meta.json", meta(rank, world, schema))
    write(case, f"rank{rank}/events.jsonl",
          events if events is not None else "".join(json.dumps(step(rank, s)) + "\n" for s in range(2)))
    if status:
        write(case, f"rank{rank}/status.json", {"status": "completed", "error": None, "last_step": 1})


def main() -> None:
    for n in os.listdir(HERE):
        if os.path.isdir(os.path.join(HERE, n)) and not n.startswith("_"):
            shutil.rmtree(os.path.join(HERE, n))
    full = json.dumps(kineto(0, 1)).encode()
    write("truncated_trace", "rank0.json", full[: len(full) // 2])
    write("not_json_trace", "rank0.json", "this is not JSON at all\n")
    write("json_array_trace", "rank0.json", [1, 2, 3])
    write("gzip_garbage", "rank0.json.gz", bytes(range(256)) * 4)
    write("gzip_truncated", "rank0.json.gz", gzip.compress(full, mtime=0)[:40])
    write("no_distributed_info", "rank0.json", kineto(0, 1, with_info=False))
    write("duplicate_ranks", "a.json", kineto(0, 2))
    write("duplicate_ranks", "b.json", kineto(0, 2))
    write("mismatched_world_traces", "rank0.json", kineto(0, 2))
    write("mismatched_world_traces", "rank1.json", kineto(1, 4))
    write("non_utf8_trace", "rank0.json", b'{"traceEvents": [], "name": "\xff\xfe\xfa"}')
    # run directories
    write("future_schema_run", "summary.json", {"schema_version": 99, "status": "completed", "world_size": 1})
    run_rank("future_schema_run", 0, 1)
    run_rank("future_schema_meta", 0, 1, schema=7)
    run_rank("partial_run", 0, 2, status=False)  # rank 1 never wrote anything, rank 0 is mid-run
    write("partial_run", "rank0/events.jsonl",
          json.dumps(step(0, 0)) + "\n" + json.dumps(step(0, 1))[:30])  # torn last line
    run_rank("mismatched_world_run", 0, 2)
    run_rank("mismatched_world_run", 1, 4)
    run_rank("rank_folder_mismatch", 0, 2)
    write("rank_folder_mismatch", "rank0/meta.json", meta(1, 2))
    run_rank("non_utf8_events", 0, 1, events=json.dumps(step(0, 0)).encode() + b"\n\xff\xfe garbage\n"
             + json.dumps(step(0, 1)).encode() + b"\n")
    run_rank("events_not_objects", 0, 1, events=b"[1, 2]\n" + json.dumps(step(0, 1)).encode() + b"\n")
    run_rank("summary_not_object", 0, 1)
    write("summary_not_object", "summary.json", [1, 2])
    run_rank("status_garbage", 0, 1)
    write("status_garbage", "rank0/status.json", b"\x00\x01 not json")
    run_rank("config_empty", 0, 1)
    write("config_empty", "config.json", b"")
    run_rank("run_without_data", 0, 1, events=b"")
    write("rank_dirs_only", "rank0/.keep", b"")
    write("rank_dirs_only", "rank3/.keep", b"")
    run_rank("watchdog_garbage", 0, 1)
    write("watchdog_garbage", "rank0/watchdog.json", "{\"inflight\": ")
    run_rank("flight_recorder_garbage", 0, 1)
    write("flight_recorder_garbage", "flight_recorder/rank_0", b"\x80\x04\x95garbage")
    run_rank("flight_recorder_code", 0, 1)  # a pickle that would call os.system if unpickled naively
    write("flight_recorder_code", "flight_recorder/rank_0",
          b"cos\nsystem\n(S'echo pwned > /tmp/commscope-pwned'\ntR.")
    write("huge_numbers_events", "rank0/meta.json", meta(0, 1))
    write("huge_numbers_events", "rank0/events.jsonl",
          json.dumps({"kind": "step", "rank": 0, "step": 10**30, "loss": "NaN", "start_ns": "x", "end_ns": None}) + "\n")
    write("plain_file_not_trace", "notes.txt", "hello")
    # odd values in well-formed Kineto traces: each is left out, or taken as unknown, with a problem line
    write_ranks("trace_dur_beyond_float", dur=10**400)
    write_ranks("trace_dur_near_float_max", dur=1e308)  # finite, but past float range once in ns
    write_ranks("trace_dims_beyond_int64", op_args={"Input Dims": [[10**30, 10**30], [4096, 4096]],
                                                     "Input Strides": [[10**400, 1], [4096, 1]]})
    write_ranks("trace_dims_not_integers", op_args={"Input Dims": [[None, 5], [[[1]]], "a"]})
    write_ranks("trace_dims_65_dimensions", op_args={"Input Dims": [[1] * 65, [1] * 65],
                                                      "Input Strides": [[1] * 65, [1] * 65]})
    write_ranks("trace_input_type_not_list", op_args={"Input type": 5}, rpc_args={"Input type": 5})
    write_ranks("trace_gloo_input_type_not_list", gloo=True, launch_args={"Input type": 5})
    write_ranks("trace_grid_beyond_int64", grid=(10**30, 1, 1))
    write_ranks("trace_nelems_beyond_int64", rpc_args={"In msg nelems": 10**30, "Out msg nelems": 10**30,
                                                        "Group size": 10**20})
    write_ranks("trace_nelems_beyond_float", rpc_args={"In msg nelems": 10**400, "Out msg nelems": 10**400})
    write_ranks("trace_tid_object", tid={"x": 1})
    # a CPU trace's compute is its launching thread's ops: a null or NaN id must still name one thread
    write_ranks("trace_gloo_tid_null", gloo=True, tid=None)
    write_ranks("trace_gloo_tid_nan", gloo=True, tid=float("nan"))
    run_rank("events_step_int64_max", 0, 1, events="".join(
        json.dumps({**step(0, s), "step": 2**63 - 1 if s else 0}) + "\n" for s in range(2)))


if __name__ == "__main__":
    main()
