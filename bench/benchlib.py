"""Shared plumbing of the GPU benchmark scripts (bench_transpose, bench_head_layout, bench_optimizer,
bench_throughput): timing, the machine line, a one-rank process group, and writing results.

Why one module: every script must time the same way (warmup, then repeats, median) and leave the same
two files in `--out` (`<name>.json` with the numbers, `<name>.md` with a markdown table naming the
machine and the command), so GPU figures go into docs without re-deriving anything.

Invariants:
- CUDA timing uses CUDA events around each repeat (device time of the launched work; with
  `device_only=True` the host enqueues every repeat behind a spin kernel first, so host launch cost cannot
  leak in), CPU timing uses `time.perf_counter_ns`; either way the result is the median of `repeats` runs
  after `warmup` runs.
- CPU code paths never touch CUDA (no torch.cuda call unless the device is cuda).
- Results are plain JSON (floats, ints, strings, lists, dicts); the JSON always carries `machine`,
  `device`, `command` and `date` so a figure can be traced back to where it was measured.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import shlex
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

# Scripts run as `python bench/<name>.py`: make the repo importable without an install (the GPU box has
# no commscope installed, only the working tree).
REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import torch  # noqa: E402

# the 8×H100 Kineto traces: the first two profiled steps of the public ones (tests/data/README.md)
FIXTURE = str(REPO / "tests" / "data" / "modded-nanogpt-8xh100")


def arg_parser(doc: str) -> argparse.ArgumentParser:
    """The parser every GPU script starts from: `--device cuda|cpu` and `--out DIR` (results folder)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--out", required=True)
    return ap


def trainer_arg_parser(doc: str, *, variant_default: str, steps: int) -> argparse.ArgumentParser:
    """arg_parser plus the options of a script that times the reference trainer's step: --preset,
    --variant (a TRAINER_VARIANTS key), --batch-size, --warmup, --steps, --seed."""
    ap = arg_parser(doc)
    ap.add_argument("--preset", default=None, help="default: speedrun on cuda, tiny on cpu")
    ap.add_argument("--variant", default=None, choices=tuple(TRAINER_VARIANTS), help=f"default: {variant_default}")
    ap.add_argument("--batch-size", type=int, default=None, help="sequences per step (default: the trainer's)")
    ap.add_argument("--warmup", type=int, default=None, help="default: 4 on cuda, 1 on cpu")
    ap.add_argument("--steps", type=int, default=steps)
    ap.add_argument("--seed", type=int, default=0)
    return ap


def parse_trainer_args(ap: argparse.ArgumentParser, argv: list[str] | None, cuda_variant: str):
    """Parse a trainer_arg_parser's options and fill the device-dependent defaults: (args, device).
    On CUDA: the speedrun preset, `cuda_variant`, 4 warmup steps; on CPU: tiny, eager, 1."""
    args = ap.parse_args(argv)
    device = setup_device(args.device)
    cuda = device.type == "cuda"
    args.preset = args.preset or ("speedrun" if cuda else "tiny")
    args.variant = args.variant or (cuda_variant if cuda else "eager")
    args.warmup = args.warmup if args.warmup is not None else (4 if cuda else 1)
    return args, device


def machine(device: torch.device) -> str:
    """One line naming the hardware and software a figure was measured on."""
    sw = f"torch {torch.__version__}"
    try:
        import triton

        sw += f", triton {triton.__version__}"
    except ImportError:
        pass
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)}, CUDA {torch.version.cuda}, {sw}"
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {os.cpu_count()} cores, {sw}"


def setup_device(name: str) -> torch.device:
    """`cuda` or `cpu`; on CPU pin one intra-op thread (spinning threads turn shared-core load into noise)."""
    if name not in ("cuda", "cpu"):
        raise SystemExit(f"--device must be cuda or cpu, not {name!r}")
    device = torch.device(name)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("--device cuda: no CUDA device is available here")
        torch.cuda.set_device(0)
        device = torch.device("cuda", 0)
    else:
        torch.set_num_threads(1)
    return device


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_ms(fn: Callable[[], object], device: torch.device, *, warmup: int, repeats: int,
            device_only: bool = False) -> dict:
    """Median / min / max time of `fn()` in ms over `repeats` runs after `warmup` runs.

    On CUDA each repeat is bracketed by CUDA events (launches are asynchronous, so the host only waits
    once at the end); on CPU by perf_counter_ns.

    CUDA events time what the GPU does between them, and that includes waiting for the host: when a call
    costs the host longer to launch than its kernels run (a Triton launch costs tens of µs, a 77 MB bf16
    copy runs ~40 µs on an H200), back-to-back events measure the launch rate, not the kernel.
    `device_only=True` first queues a spin kernel (torch.cuda._sleep) long enough for the host to enqueue
    every repeat behind it, so each event pair brackets device work only; the result then also carries
    `host_ms_per_call` (the host's enqueue time per call). If the GPU still caught up with the host (spin
    too short), the measurement is repeated with a spin twice as long.
    """
    for _ in range(warmup):
        fn()
    sync(device)
    times: list[float] = []
    extra: dict = {}
    if device.type == "cuda":
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(repeats)]
        spin_ms = 1.0
        while True:
            spin_done = torch.cuda.Event()
            if device_only:
                torch.cuda._sleep(int(spin_ms * _spin_cycles_per_ms()))
                spin_done.record()
            t0 = time.perf_counter_ns()
            for start, end in events:
                start.record()
                fn()
                end.record()
            host_ms = (time.perf_counter_ns() - t0) / 1e6
            held = not device_only or not spin_done.query()  # still spinning: nothing waited for the host
            torch.cuda.synchronize(device)
            if held or spin_ms > 60_000:
                break
            spin_ms = max(2 * spin_ms, 2 * host_ms)
        times = [start.elapsed_time(end) for start, end in events]
        if device_only:
            extra = {"host_ms_per_call": host_ms / repeats, "device_only": held}
    else:
        for _ in range(repeats):
            t0 = time.perf_counter_ns()
            fn()
            times.append((time.perf_counter_ns() - t0) / 1e6)
    return {"median_ms": statistics.median(times), "min_ms": min(times), "max_ms": max(times),
            "repeats": repeats, **extra}


_spin_rate: list[float] = []


def _spin_cycles_per_ms() -> float:
    """GPU clock cycles of torch.cuda._sleep per ms, measured once (the SM clock varies by GPU and boost)."""
    if not _spin_rate:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        cycles = 5_000_000
        torch.cuda._sleep(cycles)  # first call: module load
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        _spin_rate.append(cycles / max(start.elapsed_time(end), 1e-3))
    return _spin_rate[0]


@contextlib.contextmanager
def single_rank_group(device: torch.device) -> Iterator[str]:
    """A world-size-1 process group like the trainer's (nccl on cuda, gloo on cpu), torn down after.

    Reuses an existing default group (then leaves it alone), so the scripts can run inside pytest.
    """
    import torch.distributed as dist

    backend = "nccl" if device.type == "cuda" else "gloo"
    if dist.is_initialized():
        yield dist.get_backend()
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kwargs = {"device_id": device} if backend == "nccl" else {}
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1, **kwargs)
    try:
        yield backend
    finally:
        dist.destroy_process_group()


def default_seqs(preset: str, other: int) -> int:
    """Sequences per step: the trainer's per-rank default on the speedrun preset, else `other` (short CPU runs)."""
    from instrumented_model.train import SPEEDRUN_SEQS_PER_RANK

    return SPEEDRUN_SEQS_PER_RANK if preset == "speedrun" else other


# The trainer variants the GPU benchmarks compare side by side: name → (torch.compile options, None for
# eager; GPT options[; NorMuonAndAdam options]). "compile" is what `commscope run --compile` runs; the others each undo or add one
# change, so a fix's before/after is two variants of one benchmark run.
TRAINER_VARIANTS: dict[str, tuple] = {
    "eager": (None, {}),
    "compile": ({}, {}),
    "compile-unfused-loss": ({}, {"fused_loss": False}),  # torch's softcap + cross-entropy
    "compile-fp8-head": ({}, {"fp8_head": True}),  # `commscope run --compile --fp8-head`
    # the residual stream in fp32 under autocast (`--fp32-residual`)
    "compile-fp32-residual": ({}, {"bf16_residual": False}),
    "compile-fp8-head-fp32-residual": ({}, {"fp8_head": True, "bf16_residual": False}),
    # Inductor times Triton matmul templates against cuBLAS and may fuse epilogues (relu²) into them
    "compile-max-autotune-fp8-head": ({"mode": "max-autotune-no-cudagraphs"}, {"fp8_head": True}),
    # the gradient reduce_scatter into a separate buffer (at world size 1 NCCL then copies every sharded
    # gradient)
    "compile-fp8-head-reduce-copy": ({}, {"fp8_head": True}, {"in_place_reduce": False}),
    # Polar Express's Gram products from cuBLAS's full bmm/baddbmm instead of the upper-triangle Triton
    # kernel (normuon.symmetric_gram)
    "compile-fp8-head-cublas-gram": ({}, {"fp8_head": True}, {"symmetric_gram": False}),
    # forward and backward replayed as CUDA graphs (cudagraph trees): no launch gap between their kernels
    "compile-cudagraphs-fp8-head": ({"mode": "reduce-overhead"}, {"fp8_head": True}),
}


def trainer_variant(variant: str, preset: str, seqs: int, device: torch.device, seed: int, n_batches: int):
    """trainer_parts for one of TRAINER_VARIANTS: (config, forward callable, model, optimizer, batches)."""
    compile_options, gpt_options, *opt_options = TRAINER_VARIANTS[variant]
    cfg, model, opt, batches = trainer_parts(preset, seqs, device, seed, n_batches, opt_options=opt_options[0]
                                             if opt_options else None, **gpt_options)
    return cfg, model if compile_options is None else torch.compile(model, **compile_options), model, opt, batches


def trainer_step(forward, opt, batches: list, s: int, mark: Callable[[], object] = lambda: None):
    """Step `s` of the reference trainer as `commscope run` takes it: forward, backward, optimizer step,
    zero_grad. `mark()` runs before and after each phase (CUDA events for the phase split).
    Returns (loss, [mark before forward, after forward, after backward, after the optimizer])."""
    x, y = batches[s % len(batches)]
    marks = [mark()]
    loss = forward(x, y)
    marks.append(mark())
    loss.backward()
    marks.append(mark())
    opt.step(s)
    opt.zero_grad()
    marks.append(mark())
    return loss, marks


def pipelined_losses(step_fn: Callable[[int], torch.Tensor], steps: range,
                     wait_ms: list[float] | None = None, periods_ms: list[float] | None = None,
                     device: torch.device | None = None) -> list[float]:
    """Run `step_fn(s)` for each step, reading step s's loss only after step s+1 is launched, through a
    PendingScalar (waits for step s, not for the whole stream), as `commscope run --trace off` does on
    CUDA. Returns the losses; `wait_ms` (if given) gets the host's wait for each read but the last;
    `periods_ms` (if given, and `device` is CUDA) each step's device period: from the previous step's loss
    event (the first step: from its start) to its own, the trainer's untraced step_ms."""
    from instrumented_model.host_transfer import PendingScalar

    timing = periods_ms is not None and device is not None and device.type == "cuda"
    last_event = None
    if timing:
        last_event = torch.cuda.Event(enable_timing=True)
        last_event.record()
    losses: list[float] = []

    def read(p: PendingScalar, waits: list[float] | None) -> None:
        nonlocal last_event
        t0 = time.perf_counter()
        losses.append(p.item())
        if waits is not None:
            waits.append(1e3 * (time.perf_counter() - t0))
        if timing and p.event is not None:
            periods_ms.append(last_event.elapsed_time(p.event))
            last_event = p.event

    pending = None
    for s in steps:
        loss = PendingScalar(step_fn(s), timing=timing)
        if pending is not None:
            read(pending, wait_ms)
        pending = loss
    if pending is not None:
        read(pending, None)
    return losses


def trainer_parts(preset: str, seqs: int, device: torch.device, seed: int, n_batches: int,
                  opt_options: dict | None = None, **gpt_options):
    """The reference trainer's pieces at world size 1, as `commscope run --nproc 1` builds them:
    (config, GPT on `device`, NorMuonAndAdam, `n_batches` synthetic (inputs, targets) batches on `device`).
    Seeds torch with `seed` first, so every variant of a benchmark starts from the same weights."""
    from instrumented_model.config import make_config
    from instrumented_model.data import make_source
    from instrumented_model.model import GPT
    from instrumented_model.optimizer import NorMuonAndAdam

    cfg = make_config(preset, 1)
    torch.manual_seed(seed)
    model = GPT(cfg, **gpt_options).to(device)
    opt = NorMuonAndAdam(model.labelled_params(), rank=0, world_size=1, **(opt_options or {}))
    data = make_source(None, vocab_size=cfg.vocab_size, seq_len=cfg.seq_len, batch_size=seqs, seed=seed)
    return cfg, model, opt, [tuple(t.to(device) for t in data.global_batch(s)) for s in range(n_batches)]


def header(device: torch.device, script: str, argv: list[str] | None) -> dict:
    """The provenance fields every result JSON starts with (`argv`: the script's arguments)."""
    args = sys.argv[1:] if argv is None else argv
    return {
        "machine": machine(device),
        "device": device.type,
        "command": " ".join(["python", f"bench/{script}", *map(shlex.quote, args)]),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }


def write_results(out: str | os.PathLike, name: str, result: dict, markdown: str) -> Path:
    """Write `<out>/<name>.json` and `<out>/<name>.md`; returns the JSON path."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    (out / f"{name}.md").write_text(markdown.rstrip() + "\n")
    return path


def md_table(header_row: list[str], rows: list[list[object]]) -> str:
    def cell(v: object) -> str:
        if isinstance(v, float):
            return f"{v:.4g}" if abs(v) < 1e4 else f"{v:,.0f}"
        return "" if v is None else str(v)

    lines = ["| " + " | ".join(header_row) + " |", "|" + "---|" * len(header_row)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def provenance_line(result: dict) -> str:
    return f"Machine: {result['machine']}. Measured {result['date']} with `{result['command']}`."
