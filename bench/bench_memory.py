"""Peak memory and time of commscope's commands on inputs too large to hold many copies of.

    python bench/bench_memory.py [--events 3000000] [--jsonl-mb 1024] [--timeout 600]
                                 [--json OUT.json] [--work DIR]

The figures docs/run_format.md and docs/analysis.md give for large inputs come from this script:
- **Kineto**: ranks 0 and 1 of tests/data/modded-nanogpt-8xh100, each padded with `--events` tiny CPU ops
  (~115 bytes each, spread over the rank's own time span on a thread of their own), written uncompressed:
  3 M events make two traces of ~349 MB. On them, each as its own process:
  `report --json --no-hta` under the default `COMMSCOPE_MAX_PARSE_MB` (the two traces parse side by side)
  and under `COMMSCOPE_MAX_PARSE_MB=2048` (one after the other), and `export --perfetto`.
- **events.jsonl**: tests/data/cpurun-hooks-gloo2 with rank 0's `events.jsonl` repeated to `--jsonl-mb`;
  the loader keeps distinct records only, so memory is what one run's records take, not the file.
  `report --json --no-hta` on it.
Each command's wall time, largest single process (`ru_maxrss`) and whole process tree (RSS summed,
sampled every 50 ms) are measured by bench_scale.measure. The inputs go into a temporary folder that is
removed at the end (`--work DIR` keeps them in DIR instead). Results: one JSON document (`--json`, and on
stdout) with the machine and date.
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import shutil
import sys
import tempfile
from datetime import date
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_scale import commscope_cmd, machine, measure  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
KINETO = ROOT / "tests/data/modded-nanogpt-8xh100"
RUN = ROOT / "tests/data/cpurun-hooks-gloo2"
PAD_TID = 987654  # a thread id no template event uses: the padding sits on a row of its own


def padded_trace(src: Path, dst: Path, events: int) -> int:
    """Write `src` (a gzip Kineto trace) to `dst` uncompressed with `events` tiny cpu_ops added; its size."""
    doc = json.loads(gzip.open(src).read())
    spans = [(e["ts"], e["ts"] + e.get("dur", 0)) for e in doc["traceEvents"] if "ts" in e and e.get("ph") == "X"]
    lo, hi = min(s for s, _ in spans), max(e for _, e in spans)
    pid = next(e["pid"] for e in doc["traceEvents"] if e.get("cat") == "cpu_op")
    step = (hi - lo) / max(events, 1)
    head = {k: v for k, v in doc.items() if k != "traceEvents"}
    with open(dst, "w") as f:
        f.write(json.dumps(head)[:-1] + ', "traceEvents": [\n')
        f.write(",\n".join(json.dumps(e) for e in doc["traceEvents"]))
        # one write per 100k events: the file is written as it is made, never held whole
        for first in range(0, events, 100_000):
            f.write("".join(
                f',\n{{"ph":"X","cat":"cpu_op","name":"aten::empty","pid":{pid},"tid":{PAD_TID},'
                f'"ts":{lo + i * step:.3f},"dur":{step * 0.5:.3f},"args":{{}}}}'
                for i in range(first, min(first + 100_000, events))))
        f.write("\n]}\n")
    return dst.stat().st_size


def repeated_jsonl_run(src: Path, dst: Path, mb: int) -> int:
    """Copy the run directory `src` to `dst` with rank 0's events.jsonl repeated to about `mb` MiB."""
    shutil.copytree(src, dst)
    lines = (src / "rank0" / "events.jsonl").read_bytes()
    if not lines.endswith(b"\n"):
        lines += b"\n"
    with open(dst / "rank0" / "events.jsonl", "wb") as f:
        for _ in range(max(1, mb * 2**20 // len(lines))):
            f.write(lines)
    return (dst / "rank0" / "events.jsonl").stat().st_size


def case(name: str, argv: list[str], timeout: float, log, env: dict | None = None) -> dict:
    m = measure(argv, timeout, env)
    # the answer, not the text: the two parse budgets must give the same report
    m["stdout_sha256"] = hashlib.sha256(m.pop("stdout").encode()).hexdigest()
    log(f"{name:<34} {m['wall_s']:>7.2f} s  {m['max_rss_mb'] or 0:>6.0f} MB largest  "
        f"{m['tree_peak_rss_mb']:>6.0f} MB tree  rc {m['rc']}")
    return {"case": name, "env": env or {}, **m}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=3_000_000, help="tiny events added to each Kineto rank")
    ap.add_argument("--jsonl-mb", type=int, default=1024, help="size of the repeated events.jsonl, MiB")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--work", help="keep the generated inputs in this folder (default: a temporary one)")
    a = ap.parse_args(argv)
    work = Path(a.work) if a.work else Path(tempfile.mkdtemp(prefix="bench-memory-"))
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    cs = commscope_cmd()
    try:
        kin = work / "kineto"
        kin.mkdir(parents=True, exist_ok=True)
        sizes = [padded_trace(KINETO / f"rank{r}.json.gz", kin / f"rank{r}.json", a.events) for r in (0, 1)]
        log(f"kineto: 2 ranks of {sizes[0] / 1e6:.0f} / {sizes[1] / 1e6:.0f} MB ({a.events:,} added events each)")
        run = work / "run"
        if run.exists():
            shutil.rmtree(run)
        jsonl = repeated_jsonl_run(RUN, run, a.jsonl_mb)
        log(f"run: rank0/events.jsonl of {jsonl / 1e6:.0f} MB")
        cases = [
            case("report --json (default budget)", [*cs, "report", str(kin), "--json", "--no-hta"], a.timeout, log),
            case("report --json (PARSE_MB=2048)", [*cs, "report", str(kin), "--json", "--no-hta"], a.timeout, log,
                 env={"COMMSCOPE_MAX_PARSE_MB": "2048"}),
            case("export --perfetto", [*cs, "export", str(kin), "--perfetto", str(work / "out.perfetto.json.gz")],
                 a.timeout, log),
            case(f"report --json ({a.jsonl_mb} MiB events.jsonl)", [*cs, "report", str(run), "--json", "--no-hta"], a.timeout, log),
        ]
    finally:
        if not a.work:
            shutil.rmtree(work, ignore_errors=True)
    result = {"machine": machine(), "date": date.today().isoformat(), "python": sys.version.split()[0],
              "events_per_rank": a.events, "kineto_trace_bytes": sizes, "events_jsonl_bytes": jsonl,
              "cases": cases}
    text = json.dumps(result, indent=1)
    if a.json:
        Path(a.json).write_text(text)
    print(text)
    return result


if __name__ == "__main__":
    main()
