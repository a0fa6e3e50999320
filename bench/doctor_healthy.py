"""False alarms of `commscope doctor` on healthy runs: every configuration, several times, tallied, with
the margin each left below the straggler bar.

    python bench/doctor_healthy.py --ranks 2,4,8 --repeats 5 --steps 8 [--json OUT]
    python bench/doctor_healthy.py --script examples/plain_loop.py --ranks 2 --repeats 30 --steps 5 [--busy 2]

Each repeat is one healthy run with nothing injected, followed by `commscope doctor --json`; a healthy run
must give `ok` every time. By default a run is `commscope run` (CPU, gloo, tiny preset unless told
otherwise), with and without `--profile 2:4`; with `--script` it is that training script under torch's
launcher (`python -m torch.distributed.run --nproc-per-node N SCRIPT --out DIR --steps S`, the contract of
examples/plain_loop.py). Prints one line per run and a table per configuration: the verdicts, and the most
any rank made the others wait in a judged step over all repeats (doctor's `details.most_waiting`) — in ms,
as a share of that run's median step, as a multiple of the bar — how many runs went over the 100 %
share of the median step (what a bar without the host floor would have called a straggler), and how close
the steadiest rank came to a steady lag (`details.steadiest`: the least waiting it caused in three quarters
of the judged steps, as a multiple of the bar; the doctor flags one from 0.25×). `--busy N`
keeps N other processes spinning on the CPU meanwhile: a machine shared with other work, where a runnable
rank waits for a core. Run directories go to a temporary folder that is removed at the end, and the busy
processes end with the benchmark.
"""
from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def one_run(cs: list[str], a: argparse.Namespace, nproc: int, profiled: bool, out: Path) -> int:
    if a.script:
        # --log-dir inside the temporary folder: without it each launch leaves a /tmp/torchelastic_* folder
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
               "--log-dir", f"{out}-logs", a.script, "--out", str(out), "--steps", str(a.steps)]
    else:
        cmd = [*cs, "run", "--nproc", str(nproc), "--steps", str(a.steps), "--device", a.device,
               "--out", str(out), *(["--profile", "2:4"] if profiled else [])]
    return subprocess.run(cmd, capture_output=True, text=True).returncode


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", default="2,4,8", help="comma list of world sizes")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--device", default="cpu")
    p.add_argument("--script", help="a training script taking --out and --steps, run under torch's launcher "
                                    "instead of `commscope run` (no --profile variant)")
    p.add_argument("--busy", type=int, default=0, help="processes kept spinning on the CPU meanwhile")
    p.add_argument("--json", help="write every run's verdict here")
    a = p.parse_args()
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(a.busy)]
    try:
        return measure(a)
    finally:
        for b in busy:
            b.kill()
            b.wait()


def measure(a: argparse.Namespace) -> int:
    cs = [sys.executable, "-m", "commscope"]
    rows = []
    variants = (False,) if a.script else (False, True)
    with tempfile.TemporaryDirectory(prefix="commscope-healthy-") as tmp:
        for nproc in (int(n) for n in a.ranks.split(",")):
            for profiled in variants:
                for i in range(a.repeats):
                    out = Path(tmp) / f"n{nproc}-{'prof' if profiled else 'plain'}-{i}"
                    t0 = time.time()
                    rc = one_run(cs, a, nproc, profiled, out)
                    d = subprocess.run([*cs, "doctor", str(out), "--json"], capture_output=True, text=True)
                    doc = json.loads(d.stdout) if d.returncode == 0 else {}
                    details = doc.get("details", {})
                    rows.append({"ranks": nproc, "profile": profiled, "repeat": i, "run_exit": rc,
                                 "verdict": doc.get("verdict", f"doctor exit {d.returncode}"),
                                 "median_step_ms": details.get("median_step_ms"),
                                 "most_waiting": details.get("most_waiting"),
                                 "steadiest": details.get("steadiest"),
                                 "seconds": round(time.time() - t0, 1)})
                    print(json.dumps(rows[-1]), flush=True)
    tally = collections.Counter((r["ranks"], r["profile"], r["verdict"]) for r in rows)
    print(f"\n{a.script or 'commscope run'}, {a.steps} steps, {a.repeats} repeats per configuration, "
          f"{a.busy} busy processes beside them\n")
    print("| ranks | --profile 2:4 | verdicts | median steps (ms) | most waiting in a judged step (ms) "
          "| its share of the median step | its multiple of the bar | runs over the 100 % share "
          "| steadiest rank: least of its waiting in 3/4 of the judged steps, × the bar (most of the runs) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for nproc in sorted({r["ranks"] for r in rows}):
        for profiled in variants:
            mine = [r for r in rows if (r["ranks"], r["profile"]) == (nproc, profiled)]
            got = ", ".join(f"{v} {n}" for (n_, p_, v), n in sorted(tally.items()) if (n_, p_) == (nproc, profiled))
            steps = [r["median_step_ms"] for r in mine if r["median_step_ms"] is not None]
            most = [r["most_waiting"] for r in mine if r["most_waiting"]]
            worst = max(most, key=lambda m: m["mean_wait_ms"], default=None)
            cells = ([f"{min(steps):.1f}–{max(steps):.1f}" if steps else "–"]
                     + ([f"{worst['mean_wait_ms']:.1f}", f"{worst['pct_of_median_step']:.0f} %",
                         f"{worst['bar_multiple']:.2f}×",
                         f"{sum(m['pct_of_median_step'] > 100 for m in most)} of {len(mine)}"]
                        if worst else ["–"] * 4))
            steady = [r["steadiest"]["bar_multiple"] for r in mine if r.get("steadiest")]
            cells.append(f"{max(steady):.3f}×" if steady else "–")
            print(f"| {nproc} | {'yes' if profiled else 'no'} | {got} | " + " | ".join(cells) + " |")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0 if all(r["verdict"] == "ok" and r["run_exit"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
