"""Before/after of a change: run the same commands on another git revision and on this working tree,
alternating, and print the timings side by side.

    python bench/bench_revs.py REV [--repeats 3] [--preset report] [NAME=COMMAND ...]

REV is checked out into a temporary `git worktree` (removed afterwards); each command runs there and here
with that tree first on PYTHONPATH and as the working directory, alternating (REV, here, REV, here, ...)
so background load hits both alike. The figure of a run is its wall time, or, when the command's last
line of stdout is a number, that number (for commands that time their own part, after imports).

`--preset report` adds the commands behind docs/benchmarks.md's "report page" table: the CLI import,
`timeline_figure` on the 8×H100 fixture, and `commscope report FIXTURE --no-hta` end to end.
"""
from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import benchlib  # also puts the repo on sys.path

REPO = benchlib.REPO
FIXTURE = benchlib.FIXTURE

_TIMELINE = ("import time; from commscope.load import load_path; "
             "from reports.timeline import timeline_figure; from commscope.analyze.timeline_bars import select_window, timeline_bars; "
             f"tr = load_path({FIXTURE!r}); w = select_window(tr, None); timeline_figure(timeline_bars(tr, w)); "
             "ts = []\n"
             "for _ in range(5):\n"
             "    t = time.perf_counter(); timeline_figure(timeline_bars(tr, w)); ts.append(time.perf_counter() - t)\n"
             "print(min(ts))")
PRESETS = {"report": {
    "cli_import_s": f"{sys.executable} -c 'import time; t = time.perf_counter(); import commscope.cli; "
                    "print(time.perf_counter() - t)'",
    "timeline_figure_min_s": f"{sys.executable} -c {shlex.quote(_TIMELINE)}",
    "report_no_hta_wall_s": f"{sys.executable} -m commscope report {FIXTURE} -o {{tmp}}/r.html --no-hta",
}}


def run(cmd: str, tree: Path, tmp: str) -> float:
    env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    t = time.perf_counter()
    proc = subprocess.run(cmd.format(tmp=tmp), shell=True, cwd=tree, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(f"bench_revs: '{cmd}' failed in {tree}:\n{proc.stderr[-2000:]}")
    last = proc.stdout.strip().splitlines()[-1:] or [""]
    try:
        return float(last[0])
    except ValueError:
        return wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rev")
    ap.add_argument("commands", nargs="*", help="NAME=COMMAND ({tmp} is a scratch folder)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--preset", choices=sorted(PRESETS))
    a = ap.parse_intermixed_args()
    cmds = dict(PRESETS.get(a.preset, {}))
    for c in a.commands:
        name, _, cmd = c.partition("=")
        cmds[name] = cmd
    if not cmds:
        raise SystemExit("bench_revs: no commands (give NAME=COMMAND or --preset)")
    with tempfile.TemporaryDirectory(prefix="bench-revs-") as tmp:
        old = Path(tmp) / "rev"
        subprocess.run(["git", "worktree", "add", "-q", "--detach", str(old), a.rev], cwd=REPO, check=True)
        try:
            res = {name: {"rev": [], "here": []} for name in cmds}
            for _ in range(a.repeats):
                for name, cmd in cmds.items():
                    res[name]["rev"].append(run(cmd, old, tmp))
                    res[name]["here"].append(run(cmd, REPO, tmp))
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=REPO, check=False)
    print(f"machine: {benchlib.machine(__import__('torch').device('cpu'))}")
    print(f"| measure | {a.rev} min / median | working tree min / median |\n|---|---|---|")
    for name, r in res.items():
        print(f"| {name} | {min(r['rev']):.3f} / {statistics.median(r['rev']):.3f} | "
              f"{min(r['here']):.3f} / {statistics.median(r['here']):.3f} |")


if __name__ == "__main__":
    main()
