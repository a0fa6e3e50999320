"""Pack what bench/gpu_suite.sh produced into a few files in $OUT.

Why few: a remote GPU runner may return only a handful of files (at most 8 of at most 16 MiB each, no more
than 2 folders deep), so the suite works in a scratch folder and, after every step, this script rewrites:

- `$OUT/bench_results.json`: one object, file stem → parsed JSON of every `results/*.json` (benchmark
  results and `commscope ... --json` outputs); a file that is not valid JSON (a failed command) is kept
  as {"error": "not valid JSON", "text": <its first 4000 characters>}.
- `$OUT/bench.md`: every `results/*.md` snippet, in name order.
- `$OUT/runs.tar.gz`: the run directories under `runs/`: every small file (config, summary, meta,
  events, status, logs) and then profiler traces, smallest first, while the archive's input stays under
  `--max-mb` (halved until the archive is under 15 MiB); `runs/MANIFEST.txt` inside lists every file with its size and whether it was packed.

Invariants: the scratch folder is only read; each output is written to a temporary name and renamed, so a
step killed mid-way never leaves a half-written result behind.
"""
from __future__ import annotations

import argparse
import json
import os
import tarfile
from pathlib import Path

TRACE_SUFFIXES = (".json.gz", ".pt.trace.json", ".trace.json")
SMALL_BYTES = 2 * 1024 * 1024


def _replace(path: Path, write) -> None:
    tmp = path.with_name(path.name + ".tmp")
    write(tmp)
    os.replace(tmp, path)


def merge_json(results: Path) -> dict:
    merged = {}
    for f in sorted(results.glob("*.json")):
        text = f.read_text(errors="replace")
        try:
            merged[f.stem] = json.loads(text)
        except json.JSONDecodeError:
            merged[f.stem] = {"error": "not valid JSON", "text": text[:4000]}
    return merged


def merge_markdown(results: Path) -> str:
    return "\n\n".join(f.read_text(errors="replace").rstrip() for f in sorted(results.glob("*.md"))) + "\n"


def choose_run_files(runs: Path, max_bytes: int) -> tuple[list[Path], list[tuple[Path, int, bool]]]:
    """Files to pack (small ones first, then traces smallest first within `max_bytes`) and a manifest."""
    files = sorted(p for p in runs.rglob("*") if p.is_file())
    sizes = {p: p.stat().st_size for p in files}
    is_trace = {p: p.name.endswith(TRACE_SUFFIXES) or sizes[p] > SMALL_BYTES for p in files}
    chosen, total = [], 0
    for p in sorted(files, key=lambda p: (is_trace[p], sizes[p])):
        if not is_trace[p] or total + sizes[p] <= max_bytes:
            chosen.append(p)
            total += sizes[p]
    chosen_set = set(chosen)
    return chosen, [(p, sizes[p], p in chosen_set) for p in files]


def pack_runs(work: Path, out_file: Path, max_bytes: int) -> None:
    runs = work / "runs"
    if not runs.is_dir():
        return
    chosen, manifest = choose_run_files(runs, max_bytes)
    lines = [f"{'packed' if packed else 'LEFT OUT'}\t{size}\t{p.relative_to(work)}" for p, size, packed in manifest]
    manifest_text = ("\n".join(lines) + "\n").encode()

    def write(tmp: Path) -> None:
        import io

        with tarfile.open(tmp, "w:gz") as tar:
            info = tarfile.TarInfo("runs/MANIFEST.txt")
            info.size = len(manifest_text)
            tar.addfile(info, io.BytesIO(manifest_text))
            for p in chosen:
                tar.add(p, arcname=str(p.relative_to(work)))

    _replace(out_file, write)


RETURN_LIMIT = 15 * 1024 * 1024  # under the 16 MiB per file a remote runner may return


def pack_runs_within_limit(work: Path, out_file: Path, max_bytes: int) -> None:
    """pack_runs, halving the trace budget until the archive fits the return limit."""
    while True:
        pack_runs(work, out_file, max_bytes)
        if not out_file.exists() or out_file.stat().st_size <= RETURN_LIMIT or max_bytes < 1024:
            return
        max_bytes //= 2


def collect(work: Path, out: Path, max_mb: float) -> None:
    out.mkdir(parents=True, exist_ok=True)
    results = work / "results"
    if results.is_dir():
        merged = merge_json(results)
        _replace(out / "bench_results.json", lambda t: t.write_text(json.dumps(merged, indent=1) + "\n"))
        md = merge_markdown(results)
        _replace(out / "bench.md", lambda t: t.write_text(md))
    pack_runs_within_limit(work, out / "runs.tar.gz", int(max_mb * 1024 * 1024))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", required=True, help="the suite's scratch folder (results/, runs/)")
    ap.add_argument("--out", required=True, help="the folder that comes back ($OUT)")
    ap.add_argument("--max-mb", type=float, default=12.0, help="budget for the runs archive's input")
    args = ap.parse_args(argv)
    collect(Path(args.work), Path(args.out), args.max_mb)


if __name__ == "__main__":
    main()
