"""Host µs per call of each thing light recording does, on the real device: the floor under
bench_record_overhead.py's "µs per record".

bench_record_overhead.py says how much a recorded step costs and cProfile says which recorder functions
take the time, but cProfile inflates every call. This times each call alone, `--calls` times in a row,
median of `--repeats` runs: the torch/CUDA primitives a stamp is made of (current-stream lookup, event
record, elapsed_time), the recorder's own calls with an empty body (a region; a collective plus its
wait, minus the same collective launched and waited without recording), a post-accumulate-grad hook,
and the step-end flush per record. On CPU the CUDA rows are left out (a stamp is `perf_counter_ns`).

Run: python bench/bench_record_calls.py [--device cuda] [--calls 2000] [--repeats 7]
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch
import torch.distributed as dist

import benchlib  # noqa: F401  (puts the repo on sys.path: measure this checkout, not an installed copy)
from benchlib import machine, setup_device, single_rank_group
from commscope.recording import Recorder


def per_call_us(fn, calls: int, repeats: int, after=None) -> float:
    """Median over `repeats` of the host µs per call of `calls` back-to-back `fn()`; `after()` (untimed)
    runs after each repeat (drain the GPU queue, drop what the recorder buffered)."""
    fn()
    if after:
        after()
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        runs.append((time.perf_counter_ns() - t0) / calls / 1e3)
        if after:
            after()
    return statistics.median(runs)


def measure(device: torch.device, calls: int, repeats: int) -> list[tuple[str, float]]:
    cuda = device.type == "cuda"
    rows: list[tuple[str, float]] = []
    sync = (lambda: torch.cuda.synchronize(device)) if cuda else None
    if cuda:
        idx = device.index or 0
        stream = torch.cuda.current_stream(device)
        ev, ev2 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        base_record = torch._C._CudaEventBase.record
        rows += [
            ("torch.cuda.current_stream(device)", per_call_us(lambda: torch.cuda.current_stream(device), calls, repeats)),
            ("torch._C._cuda_getCurrentRawStream(index)",
             per_call_us(lambda: torch._C._cuda_getCurrentRawStream(idx), calls, repeats)),
            ("Event.record(stream)", per_call_us(lambda: ev.record(stream), calls, repeats, sync)),
            ("_CudaEventBase.record(event, stream)", per_call_us(lambda: base_record(ev, stream), calls, repeats, sync)),
            ("torch.cuda.Event(enable_timing=True)", per_call_us(lambda: torch.cuda.Event(enable_timing=True), calls, repeats)),
        ]
        ev.record(stream)
        ev2.record(stream)
        ev2.synchronize()
        rows.append(("Event.elapsed_time(event) (both passed)", per_call_us(lambda: ev.elapsed_time(ev2), calls, repeats)))

    with tempfile.TemporaryDirectory(prefix="commscope-bench-") as tmp:
        rec = Recorder(tmp, rank=0, world_size=1, device=device, backend=dist.get_backend())

        def drop():  # resolve and write what the timed calls buffered, outside the timing
            if sync:
                sync()
            rec._flush(blocking=True)

        try:
            if cuda:
                rec._cuda.new_anchor()
                rows.append(("CudaClock.stamp()", per_call_us(rec._cuda.stamp, calls, repeats, drop)))

            def region():
                with rec.region("r"):
                    pass

            rows.append(("Recorder.region, empty body", per_call_us(region, calls, repeats, drop)))
            x = torch.zeros(16, device=device)
            plain = per_call_us(lambda: dist.all_reduce(x, async_op=True).wait(), calls, repeats, sync)
            recorded = per_call_us(lambda: rec.collective(dist.all_reduce, x, label="l", phase="p").wait(),
                                   calls, repeats, drop)
            rows += [("all_reduce(16 floats) + wait, not recorded", plain),
                     ("Recorder.collective + wait, minus not recorded", recorded - plain)]

            p = torch.nn.Parameter(torch.zeros(16, device=device))
            (p * 1.0).sum().backward()  # first backward: autograd's own one-time setup
            unhooked = per_call_us(lambda: (p * 1.0).sum().backward(), calls // 4, repeats, sync)
            rec.watch({"p": p})
            hooked = per_call_us(lambda: (p * 1.0).sum().backward(), calls // 4, repeats, drop)
            rec.unwatch()
            rows.append(("post-accumulate-grad hook (backward with minus without)", hooked - unhooked))

            n = 50  # about one reference-trainer step's records
            flush_runs = []
            for _ in range(repeats * 4):
                for _ in range(n):
                    region()
                if sync:
                    sync()
                t0 = time.perf_counter_ns()
                rec._flush(blocking=True)
                flush_runs.append((time.perf_counter_ns() - t0) / n / 1e3)
            rows.append((f"step-end flush, per record ({n} region records, {2 * n if cuda else 0} CUDA events)",
                         statistics.median(flush_runs)))
        finally:
            rec.close()
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args(argv)
    device = setup_device(args.device)
    with single_rank_group(device):
        rows = measure(device, args.calls, args.repeats)
    print(f"Machine: {machine(device)}. `python bench/bench_record_calls.py --device {args.device} --calls "
          f"{args.calls} --repeats {args.repeats}`: host µs per call, median of {args.repeats} runs.\n")
    print("| call | host µs |")
    print("|---|---|")
    for name, us in rows:
        print(f"| {name} | {us:.2f} |")


if __name__ == "__main__":
    main()
