"""False alarms of `commscope doctor` on healthy runs: every configuration, several times, tallied.

    python bench/doctor_healthy.py --ranks 2,4,8 --repeats 5 --steps 8 [--json OUT]

Each repeat is one `commscope run` (CPU, gloo, tiny preset unless told otherwise) with nothing injected,
with and without `--profile 2:4`, followed by `commscope doctor --json`; a healthy run must give `ok`
every time. Prints one line per run and a table of verdict counts per configuration. Run directories go
to a temporary folder that is removed at the end.
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


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", default="2,4,8", help="comma list of world sizes")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--device", default="cpu")
    p.add_argument("--json", help="write every run's verdict here")
    a = p.parse_args()
    cs = [sys.executable, "-m", "commscope"]
    rows = []
    with tempfile.TemporaryDirectory(prefix="commscope-healthy-") as tmp:
        for nproc in (int(n) for n in a.ranks.split(",")):
            for profiled in (False, True):
                for i in range(a.repeats):
                    out = Path(tmp) / f"n{nproc}-{'prof' if profiled else 'plain'}-{i}"
                    run = [*cs, "run", "--nproc", str(nproc), "--steps", str(a.steps), "--device", a.device,
                           "--out", str(out), *(["--profile", "2:4"] if profiled else [])]
                    t0 = time.time()
                    rc = subprocess.run(run, capture_output=True, text=True).returncode
                    d = subprocess.run([*cs, "doctor", str(out), "--json"], capture_output=True, text=True)
                    verdict = json.loads(d.stdout)["verdict"] if d.returncode == 0 else f"doctor exit {d.returncode}"
                    rows.append({"ranks": nproc, "profile": profiled, "repeat": i, "run_exit": rc,
                                 "verdict": verdict, "seconds": round(time.time() - t0, 1)})
                    print(json.dumps(rows[-1]), flush=True)
    tally = collections.Counter((r["ranks"], r["profile"], r["verdict"]) for r in rows)
    print("\n| ranks | --profile 2:4 | verdicts |\n|---|---|---|")
    for nproc in sorted({r["ranks"] for r in rows}):
        for profiled in (False, True):
            got = ", ".join(f"{v} {n}" for (n_, p_, v), n in sorted(tally.items()) if (n_, p_) == (nproc, profiled))
            print(f"| {nproc} | {'yes' if profiled else 'no'} | {got} |")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0 if all(r["verdict"] == "ok" and r["run_exit"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
