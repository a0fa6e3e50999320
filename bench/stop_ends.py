"""How far apart the ranks' ends begin when a job is stopped: the bar between "one signal to the whole job"
and "one rank ended first, the others torn down after it" (SIGNALLED_TOGETHER_NS, docs/faults.md).

    python bench/stop_ends.py [--repeats 3] [--nproc 2]

Each repeat runs examples/stall_loop.py under torch.distributed.run (gloo, CPU) with rank 1 stalling in
its own code from step 3 (so no rank sees a peer's connection close), waits for step 2 and 1 s more, then
either signals torch.distributed.run (SIGTERM: the job stopped whole) or rank 0's process (SIGTERM: the
launcher then tears the others down), and reads every rank's status.json `ended_ns`.
Prints, per way of stopping, the spread of the ends (last minus first, ms) of each repeat, and where a rank
ended by losing its peer instead of by a signal (the bar does not apply there: that rank failed on its own
error). Run folders go
to a temporary folder removed at the end; every process is ended.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one(tmp: Path, nproc: int, how: str, k: int) -> tuple[float, bool]:
    out = tmp / f"{how}{k}"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), "--log-dir",
           str(tmp / f"logs-{how}{k}"), "--master-port", str(_port()), str(ROOT / "examples" / "stall_loop.py"),
           "--out", str(out), "--stall-at", "3"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        events = out / "rank0" / "events.jsonl"
        deadline = time.monotonic() + 120
        while not (events.exists() and '"step":2,' in events.read_text().replace(" ", "")):
            if time.monotonic() > deadline:
                raise SystemExit("no step 2 within 120 s")
            time.sleep(0.1)
        time.sleep(1.0)
        if how == "job":
            proc.send_signal(signal.SIGTERM)
        else:
            os.kill(json.loads((out / "rank0" / "meta.json").read_text())["pid"], signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    st = [json.loads((out / f"rank{r}" / "status.json").read_text()) for r in range(nproc)]
    ended = [s["ended_ns"] for s in st]
    # only ends a signal began are read by the bar: a rank that saw its peer's connection close failed on
    # its own error, and the doctor judges that case by other rules
    signalled = all("terminated by signal" in str(s.get("error")) for s in st)
    return (max(ended) - min(ended)) / 1e6, signalled


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--nproc", type=int, default=2)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="commscope-stop-ends-") as t:
        rows = {how: [one(Path(t), a.nproc, how, k) for k in range(a.repeats)] for how in ("job", "rank")}
    print(f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"{time.strftime('%Y-%m-%d')}; {a.nproc} ranks, gloo\n")
    print("| stopped by | spread of the ranks' ends (ms), each repeat |\n|---|---|")
    words = {"job": "SIGTERM to torch.distributed.run (the job stopped whole)",
             "rank": "SIGTERM to rank 0, then torch.distributed.run's teardown of the others"}
    for how, spreads in rows.items():
        print(f"| {words[how]} | {', '.join(f'{x:,.1f}' + ('' if sig else ' (a peer lost its connection)') for x, sig in spreads)} |")


if __name__ == "__main__":
    main()
