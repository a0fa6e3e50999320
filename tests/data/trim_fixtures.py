"""Make the trimmed copies of public data in tests/data from the original files (see README.md here).

Usage: python tests/data/trim_fixtures.py SOURCE [DEST]
       python tests/data/trim_fixtures.py --layout-h200 SOURCE [DEST]

SOURCE holds the original data as published (folder names as in README.md): modded-nanogpt-8xh100/
(rank0..7.json.gz), modded-nanogpt-logs/{baseline,premul-o}/*.txt and hta-testdata/<four sets>/.
With --layout-h200, SOURCE is instead the untrimmed layout_h200 folder ({standard,transposed}/, as
recorded: see README.md for how to get it out of git), and only that is written (DEST/layout_h200).
DEST defaults to the folder of this script. Output is deterministic (gzip mtime 0), so running it
again over the same SOURCE reproduces the committed files byte for byte.

What it does:
- Kineto traces of modded-nanogpt-8xh100: keep the first two profiler steps (`--last-step 11`, of
  ProfilerStep#10..13): every event that begins before the end of the CPU `ProfilerStep#11` range (CPU
  ops, annotations, runtime calls, flow starts, and the device activity already running then), plus
  the device activity (kernels, memcpy, memset, GPU annotations) and `ac2g` flow ends of the launches
  kept. As if the profiler had stopped after step 11: no launch without its kernel, no kernel of a
  dropped launch. Top-level keys (distributedInfo, deviceProperties, ...) and metadata events are kept
  as they are; events are not changed, only dropped.
- Training logs: the training script's source before the first separator is cut to its first 20 and
  last 10 lines; the separators and the environment block between them are kept; of the training
  output, the first 11 step lines, every line with `val_loss`, the last 5 step lines and everything
  after the last step line. commscope.load.speedrun_log.parse_log reads the same result from the trimmed log
  (checked here for every log).
- hta-testdata: copied as they are.
- layout_h200 (--layout-h200): each run directory's profiler trace rank0/trace.json.gz keeps the first of
  its two profiled steps (ProfilerStep#4 of 4:6), trimmed as the 8xH100 traces are; events.jsonl,
  meta.json, status.json, config.json and summary.json are copied as they are.
"""
from __future__ import annotations

import argparse
import gzip
import json
import re
import shutil
import sys
from pathlib import Path

SEPARATOR = "=" * 100
_STEP = re.compile(r"^step:(\d+)/(\d+)\b")
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"}
LAUNCH_CATS = {"cuda_runtime", "cuda_driver"}


def write_gz(path: Path, doc) -> None:
    # json.dumps' default separators: HTA finds a file's rank with the regex `"rank":\s+(\d+)`
    data = json.dumps(doc).encode()
    with open(path, "wb") as f, gzip.GzipFile(fileobj=f, mode="wb", compresslevel=9, mtime=0, filename="") as g:
        g.write(data)


def trim_trace(doc: dict, last_step: int) -> dict:
    """Keep profiler steps up to `last_step` (see the module docstring)."""
    ev = doc["traceEvents"]
    step = [e for e in ev if e.get("cat") == "user_annotation" and e.get("name") == f"ProfilerStep#{last_step}"]
    if len(step) != 1:
        raise SystemExit(f"expected one CPU ProfilerStep#{last_step}, found {len(step)}")
    t1 = step[0]["ts"] + step[0]["dur"]

    def before(e):
        return "ts" in e and e["ts"] < t1

    launches = {e["args"]["correlation"] for e in ev
                if e.get("cat") in LAUNCH_CATS and before(e) and "correlation" in e.get("args", {})}
    annotations = {e["args"]["External id"] for e in ev
                   if e.get("cat") == "user_annotation" and before(e) and "External id" in e.get("args", {})}

    def keep_gpu(e):
        a = e.get("args", {})
        if before(e) or a.get("correlation") in launches:
            return True
        return e["cat"] == "gpu_user_annotation" and a.get("External id") in annotations

    kept_gpu = {id(e) for e in ev if e.get("cat") in GPU_CATS and keep_gpu(e)}
    gpu_corr = {e["args"]["correlation"] for e in ev if id(e) in kept_gpu and "correlation" in e.get("args", {})}
    # a fwdbwd flow (forward op -> its backward op) is kept only with both of its ends
    fb = {}
    for e in ev:
        if e.get("cat") == "fwdbwd":
            fb.setdefault(e["id"], []).append(before(e))
    out = []
    for e in ev:
        cat, ph = e.get("cat"), e.get("ph")
        if ph == "M":
            keep = True
        elif cat in GPU_CATS:
            keep = id(e) in kept_gpu
        elif cat == "ac2g":
            keep = e["id"] in launches if ph == "s" else e["id"] in gpu_corr
        elif cat == "fwdbwd":
            keep = all(fb[e["id"]])
        else:
            keep = before(e)
        if keep:
            out.append(e)
    return dict(doc, traceEvents=out)


def trim_log(text: str) -> str:
    lines = text.split("\n")
    seps = [i for i, line in enumerate(lines) if line == SEPARATOR]
    if len(seps) < 2:
        raise SystemExit("a log without its two separator lines")
    src = lines[:seps[0]]
    src = src[:20] + src[-10:] if len(src) > 30 else src
    env = lines[seps[0]:seps[1] + 1]
    rest = lines[seps[1] + 1:]
    steps = [i for i, line in enumerate(rest) if _STEP.match(line)]
    keep = set(steps[:11]) | set(steps[-5:]) | {i for i in steps if "val_loss:" in rest[i]}
    keep |= set(range(steps[-1] + 1, len(rest)))  # what follows the last step (peak memory, ...)
    keep |= {i for i in range(len(rest)) if not _STEP.match(rest[i]) and i < steps[0]}  # before step 0
    return "\n".join(src + env + [rest[i] for i in sorted(keep)])


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("source", type=Path)
    p.add_argument("dest", type=Path, nargs="?", default=Path(__file__).resolve().parent)
    p.add_argument("--last-step", type=int, default=None,
                   help="last profiler step kept (default 11; 4 with --layout-h200)")
    p.add_argument("--layout-h200", action="store_true", help="SOURCE is the untrimmed layout_h200 folder")
    a = p.parse_args(argv)

    if a.layout_h200:
        for layout in ("standard", "transposed"):
            src, dst = a.source / layout, a.dest / "layout_h200" / layout
            shutil.copytree(src, dst, dirs_exist_ok=True)
            with gzip.open(src / "rank0" / "trace.json.gz") as g:
                doc = json.load(g)
            out = trim_trace(doc, 4 if a.last_step is None else a.last_step)
            write_gz(dst / "rank0" / "trace.json.gz", out)
            print(f"layout_h200/{layout}: {len(doc['traceEvents'])} -> {len(out['traceEvents'])} events")
        return
    a.last_step = 11 if a.last_step is None else a.last_step

    src, dst = a.source / "modded-nanogpt-8xh100", a.dest / "modded-nanogpt-8xh100"
    dst.mkdir(parents=True, exist_ok=True)
    for f in sorted(src.glob("rank*.json.gz")):
        with gzip.open(f) as g:
            doc = json.load(g)
        out = trim_trace(doc, a.last_step)
        write_gz(dst / f.name, out)
        print(f"{f.name}: {len(doc['traceEvents'])} -> {len(out['traceEvents'])} events")

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from commscope.load.speedrun_log import parse_log

    for group in ("baseline", "premul-o"):
        src, dst = a.source / "modded-nanogpt-logs" / group, a.dest / "modded-nanogpt-logs" / group
        dst.mkdir(parents=True, exist_ok=True)
        for f in sorted(src.glob("*.txt")):
            (dst / f.name).write_text(trim_log(f.read_text()))
            before, after = parse_log(f), parse_log(dst / f.name)
            same = (before.complete, before.val_loss, before.train_time_s, before.last_step, before.total_steps) == \
                   (after.complete, after.val_loss, after.train_time_s, after.last_step, after.total_steps)
            if not same or not after.complete:
                raise SystemExit(f"{f}: the trimmed log parses differently: {before} vs {after}")

    src, dst = a.source / "hta-testdata", a.dest / "hta-testdata"
    for d in ("trace_filter", "nccl_parser_config", "distributed_info_unavailable", "triton_example"):
        (dst / d).mkdir(parents=True, exist_ok=True)
        for f in sorted((src / d).iterdir()):
            shutil.copyfile(f, dst / d / f.name)


if __name__ == "__main__":
    main()
