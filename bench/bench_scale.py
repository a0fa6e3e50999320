"""How commscope's whole commands grow with the number of ranks, and whether their answers stay right.

    python bench/bench_scale.py [--sizes 8,64,256,1024] [--formats run,kineto] [--timeout 90]
                                [--hta-sizes 8,64,256] [--json OUT.json] [--work DIR]

For each format (commscope run directories made from tests/data/cpurun-hooks-gloo2, 40 steps, 13 labels;
per-rank Kineto traces made from tests/data/modded-nanogpt-8xh100, fixture-sized) and each size,
bench/gen_job.py writes a job with a planted straggler, then this script runs, each as its own process:
- `commscope report JOB --json --no-hta` and `commscope doctor JOB --json`: wall time, and peak memory
  two ways: the largest single process (`ru_maxrss` of the command's process and its waited-for
  descendants, read by a small wrapper process: see RUSAGE_WRAPPER) and the whole process tree (RSS of the child and all its
  descendants summed, sampled every 50 ms with psutil: the loaders' worker pools run beside the parent);
- `commscope doctor` on a second job of the same size with a planted desync, and `report --json` and
  `doctor` on a third with a planted hang (every rank's watchdog evidence, collectives queued behind it);
- on Kineto jobs, a process that only constructs HTA's `TraceAnalysis(trace_dir=JOB)` (HTA reads Kineto
  traces only: there is no HTA row for run directories).
doctor's verdict is checked against the generator's ground truth (verdict, culprit rank, group, seq).
A case that runs past `--timeout` is killed and recorded as such; larger sizes of the same case are then
skipped. Results: one JSON document (`--json`, and on stdout), with the machine and date.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen_job  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SOURCES = {"run": ROOT / "tests/data/cpurun-hooks-gloo2", "kineto": ROOT / "tests/data/modded-nanogpt-8xh100"}
HTA_CONSTRUCT = ("import os, logging; os.environ['HTA_DISABLE_NS_ROUNDING'] = '1'; logging.disable(logging.WARNING)\n"
                 "from hta.trace_analysis import TraceAnalysis\nimport sys; TraceAnalysis(trace_dir=sys.argv[1])")


# The cases on jobs with a planted fault other than the straggler: case name → the fault the job carries
# (gen_job.generate's keyword), the command it times (a key of run_case's `cmds`, whose timeout also skips
# this case at larger sizes), whether doctor's answer is checked against the ground truth, and its log label.
# Cases of one fault share a job, generated once, in this order.
FAULT_CASES = {
    "doctor_desync": {"fault": "desync", "command": "doctor", "checked": True, "label": "doctor desync"},
    "report_hang": {"fault": "hang", "command": "report", "checked": False, "label": "report hang"},
    "doctor_hang": {"fault": "hang", "command": "doctor", "checked": True, "label": "doctor hang"},
}
# Every case, in the order run_case runs them: those on the straggler job, then FAULT_CASES.
CASES = ("report", "doctor", "hta_construct", *FAULT_CASES)


# Linux keeps a process's RSS high-water mark across exec: a child forked from this (large) process would
# report this process's peak as its own. A small wrapper process runs the command and reports its rusage.
RUSAGE_WRAPPER = ("import resource, subprocess, sys\nrc = subprocess.call(sys.argv[2:])\n"
                  "open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))\n"
                  "sys.exit(rc)")


def measure(argv: list[str], timeout: float, env: dict[str, str] | None = None) -> dict:
    """Run `argv` as a child process (this environment plus `env`): wall seconds, peak RSS (largest
    process; whole tree, sampled), rc and stdout; killed (its whole process group) after `timeout` seconds."""
    rss_file = tempfile.NamedTemporaryFile(prefix="bench-scale-rss-", delete=False)
    rss_file.close()
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-c", RUSAGE_WRAPPER, rss_file.name, *argv], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, start_new_session=True,
                         env={**os.environ, **env} if env else None)
    out_chunks: list[bytes] = []
    import threading

    reader = threading.Thread(target=lambda: out_chunks.append(p.stdout.read()), daemon=True)
    reader.start()
    tree_peak, timed_out = 0, False
    proc = psutil.Process(p.pid)
    while p.poll() is None:
        try:
            procs = [proc, *proc.children(recursive=True)]
            tree_peak = max(tree_peak, sum(q.memory_info().rss for q in procs if q.is_running()))
        except psutil.Error:
            pass
        if time.perf_counter() - t0 > timeout:
            timed_out = True
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            break
        time.sleep(0.05)
    wall = time.perf_counter() - t0
    reader.join(5)
    err = p.stderr.read().decode(errors="replace")
    kb = Path(rss_file.name).read_text().strip()
    os.unlink(rss_file.name)
    return {"wall_s": round(wall, 3), "max_rss_mb": round(int(kb) / 1024, 1) if kb else None,
            "tree_peak_rss_mb": round(tree_peak / 2**20, 1), "timed_out": timed_out,
            "rc": None if timed_out else p.returncode,
            "stdout": b"".join(out_chunks).decode(errors="replace"), "stderr_tail": err[-500:]}


def check(doctor_stdout: str, truth: dict, fault: str) -> dict:
    """doctor's verdict against the planted fault: what it said and whether it is the planted one."""
    try:
        d = json.loads(doctor_stdout)
    except ValueError:
        return {"verdict": None, "found": False}
    want = truth[fault]
    found = (d.get("verdict") == fault and d.get("culprit_ranks") == [want["rank"]]
             and str(d.get("group")) == want["group"] and d.get("sequence") == want["seq"])
    return {"verdict": d.get("verdict"), "culprits": d.get("culprit_ranks"), "group": d.get("group"),
            "sequence": d.get("sequence"), "summary": d.get("summary"), "found": found}


def commscope_cmd() -> list[str]:
    exe = Path(sys.executable).with_name("commscope")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "commscope"]


def run_case(fmt: str, n: int, work: Path, timeout: float, hta: bool, skip: set, log,
             only: tuple = CASES) -> dict:
    case = {"format": fmt, "ranks": n}
    job = work / f"{fmt}-{n}"
    t = time.perf_counter()
    truth = gen_job.generate(SOURCES[fmt], job, n, 40, straggler=(n * 2) // 3 + 1 if n > 2 else 1)
    case["gen_s"] = round(time.perf_counter() - t, 2)
    case["truth"] = {"straggler": truth["straggler"]}
    jobdir = truth["job"]
    case["events"] = sum(1 for p in Path(jobdir).glob("rank*/events.jsonl") for _ in p.open("rb")) or None
    case["bytes_on_disk"] = sum(p.stat().st_size for p in Path(jobdir).rglob("*") if p.is_file())
    cmds = {"report": [*commscope_cmd(), "report", jobdir, "--json", "--no-hta"],
            "doctor": [*commscope_cmd(), "doctor", jobdir, "--json"]}
    if hta and fmt == "kineto":
        cmds["hta_construct"] = [sys.executable, "-c", HTA_CONSTRUCT, jobdir]
    for name, argv in cmds.items():
        if name not in only:
            continue
        if (fmt, name) in skip:
            case[name] = {"skipped": "a smaller size ran past the timeout"}
            continue
        m = measure(argv, timeout)
        out = m.pop("stdout")
        if name == "doctor" and not m["timed_out"]:
            m["check"] = check(out, truth, "straggler")
        if m["timed_out"]:
            skip.add((fmt, name))
        case[name] = m
        log(f"{fmt} {n:>5} {name:<14} {m['wall_s']:>8.2f} s  {m['max_rss_mb'] or 0:>7.0f} MB (tree {m['tree_peak_rss_mb']:.0f})"
            + (" TIMEOUT" if m["timed_out"] else "") + (f"  {m['check']['verdict']} found={m['check']['found']}"
                                                        if "check" in m else ""))
    shutil.rmtree(job, ignore_errors=True)
    # the other planted faults (FAULT_CASES), each a job of the same size: a desync, a hang (the hung job
    # carries every rank's fault evidence and a queue of collectives behind the hang)
    faults = dict.fromkeys(spec["fault"] for spec in FAULT_CASES.values())
    for fault in faults:
        names = [name for name, spec in FAULT_CASES.items() if spec["fault"] == fault and name in only]
        if not names:
            continue
        truth = gen_job.generate(SOURCES[fmt], job, n, 40, **{fault: n // 3})
        case["truth"][fault] = truth[fault]
        for name in names:
            spec = FAULT_CASES[name]
            if (fmt, name) in skip or (fmt, spec["command"]) in skip:
                case[name] = {"skipped": f"{spec['command']} ran past the timeout at this or a smaller size"}
                continue
            m = measure(cmds[spec["command"]], timeout)
            out = m.pop("stdout")
            if m["timed_out"]:
                skip.add((fmt, name))
            elif spec["checked"]:
                m["check"] = check(out, truth, fault)
            case[name] = m
            log(f"{fmt} {n:>5} {spec['label']:<14} {m['wall_s']:>8.2f} s  {m['max_rss_mb'] or 0:>7.0f} MB"
                + (" TIMEOUT" if m["timed_out"] else f"  {m['check']['verdict']} found={m['check']['found']}"
                   if "check" in m else ""))
        shutil.rmtree(job, ignore_errors=True)
    return case


def machine() -> str:
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor())
    return (f"{cpu}, {os.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB, "
            f"Python {platform.python_version()}")


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="8,64,256,1024")
    ap.add_argument("--formats", default="run,kineto")
    ap.add_argument("--timeout", type=float, default=90.0, help="seconds per command and size")
    ap.add_argument("--hta-sizes", default="8,64,256", help="sizes at which HTA's TraceAnalysis is timed")
    ap.add_argument("--commands", default=",".join(CASES), help=f"which of {', '.join(CASES)} to run")
    ap.add_argument("--json", dest="json_out")
    ap.add_argument("--work", help="where the generated jobs go (default: a temporary directory)")
    a = ap.parse_args(argv)
    sizes = [int(x) for x in a.sizes.split(",") if x]
    hta_sizes = {int(x) for x in a.hta_sizes.split(",") if x}
    work = Path(a.work) if a.work else Path(tempfile.mkdtemp(prefix="bench-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    res = {"machine": machine(), "date": date.today().isoformat(), "command": "python bench/bench_scale.py "
           + " ".join(argv if argv is not None else sys.argv[1:]), "timeout_s": a.timeout,
           "load_avg_1min_start": round(os.getloadavg()[0], 2), "cases": []}
    skip: set = set()
    try:
        for fmt in a.formats.split(","):
            for n in sizes:
                res["cases"].append(run_case(fmt, n, work, a.timeout, n in hta_sizes, skip,
                                             lambda s: print(s, file=sys.stderr, flush=True),
                                             tuple(a.commands.split(","))))
    finally:
        if not a.work:
            shutil.rmtree(work, ignore_errors=True)
    text = json.dumps(res, indent=1)
    print(text)
    if a.json_out:
        Path(a.json_out).write_text(text + "\n")
    return res


if __name__ == "__main__":
    main()
