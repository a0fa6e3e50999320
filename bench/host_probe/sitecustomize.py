"""Host-side probe for the trainer's ranks: Python GC pauses and/or samples of the main thread's stack.

Why: when a traced `commscope run` has steps slower than the others with the GPU idle between them, the
stack samples show where the host is (docs/benchmarks.md, "Host time between steps"). Not imported by
commscope: it is put on PYTHONPATH by hand, so Python imports it at start-up in every process that has
RANK set (the trainer's ranks; torch.distributed.run's agent has none).

    PYTHONPATH=$PWD/bench/host_probe:$PWD PROBE_OUT=/tmp/probe PROBE=gc,stacks \
        python -m commscope run --device cuda --preset speedrun --compile --fp8-head --out /tmp/run
    python bench/step_gaps.py /tmp/run --stacks /tmp/probe

Writes PROBE_OUT/gc_<pid>.txt ("<unix s> gen<N> <ms>ms collected=<n>", collections over 0.2 ms) and
PROBE_OUT/stacks_<pid>.txt ("<unix ns> file:line:function < caller < ...", every ~0.5 ms).
"""
import gc
import os
import sys
import threading
import time

_OUT = os.environ.get("PROBE_OUT")
_WHAT = set(os.environ.get("PROBE", "gc,stacks").split(","))


def _gc_probe(path: str) -> None:
    log = open(path, "a", buffering=1)
    started = [0]

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            started[0] = time.perf_counter_ns()
            return
        ms = (time.perf_counter_ns() - started[0]) / 1e6
        if ms > 0.2:
            log.write(f"{time.time():.4f} gen{info['generation']} {ms:.2f}ms collected={info['collected']}\n")

    gc.callbacks.append(on_gc)


def _stack_sampler(path: str, main: int) -> None:
    log = open(path, "a")
    buf: list[str] = []
    while True:
        time.sleep(0.0005)
        frame, parts = sys._current_frames().get(main), []
        t = time.time_ns()  # commscope's local clock is perf_counter + a time_ns base: comparable
        while frame is not None and len(parts) < 14:
            code = frame.f_code
            parts.append(f"{os.path.basename(code.co_filename)}:{frame.f_lineno}:{code.co_name}")
            frame = frame.f_back
        buf.append(f"{t} " + " < ".join(parts))
        if len(buf) >= 500:
            log.write("\n".join(buf) + "\n")
            log.flush()
            buf.clear()


if _OUT and os.environ.get("RANK") is not None:
    os.makedirs(_OUT, exist_ok=True)
    if "gc" in _WHAT:
        _gc_probe(os.path.join(_OUT, f"gc_{os.getpid()}.txt"))
    if "stacks" in _WHAT:
        threading.Thread(target=_stack_sampler, daemon=True, name="probe-stacks",
                         args=(os.path.join(_OUT, f"stacks_{os.getpid()}.txt"), threading.main_thread().ident)).start()
