"""Running every reading command of commscope over one input and checking how it answers: the runner of
tests/test_bad_inputs_corpus.py, usable in-process (cli.main, a few hundred ms a command) or in a child
process under a time and memory watch (`run_limited`), for inputs whose point is their size.

`python bad_inputs.py INPUT OUT` runs the commands in-process and prints their results as JSON.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
TIME_LIMIT_S = 60
RSS_LIMIT = 2 * 2 ** 30


def commands(path: Path, out: Path) -> dict[str, list[str]]:
    """Every command that reads a run or trace (plan reads one only with --cost measured)."""
    return {
        "report-json": ["report", str(path), "--json", "--no-hta"],
        "report-html": ["report", str(path), "-o", str(out / "r.html"), "--no-hta"],
        "doctor": ["doctor", str(path)],
        "hooks": ["hooks", str(path)],
        "layout": ["layout", str(path)],
        "export": ["export", str(path), "--perfetto", str(out / "p.json")],
        "compare": ["compare", str(path), str(path)],
    }


def invoke(argv: list[str]) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `commscope ARGV` run in this process."""
    from commscope import cli

    out, err = io.StringIO(), io.StringIO()
    old = sys.argv
    sys.argv = ["commscope", *argv]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                cli.main()
                code = 0
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except BaseException:  # noqa: BLE001 - a traceback is the finding, reported by the test
                import traceback

                traceback.print_exc()
                code = 1
    finally:
        sys.argv = old
    return code, out.getvalue(), err.getvalue()


def run_all(path: Path, out: Path) -> dict[str, dict]:
    """Each command's exit code, stdout (report --json only), stderr and seconds, run in-process from `out`
    (where default outputs land)."""
    res = {}
    cwd = os.getcwd()
    os.chdir(out)
    try:
        for name, argv in commands(path, out).items():
            t = time.perf_counter()
            code, stdout, stderr = invoke(argv)
            res[name] = {"code": code, "stdout": stdout if name == "report-json" else "", "stderr": stderr,
                         "seconds": time.perf_counter() - t}
    finally:
        os.chdir(cwd)
    return res


def run_limited(path: Path, out: Path, env: dict[str, str] | None = None) -> tuple[dict[str, dict], int, float]:
    """run_all in a child process, killed past TIME_LIMIT_S per command or RSS_LIMIT of memory: (results,
    peak RSS in bytes, seconds). A killed or failed child is an AssertionError. The peak is the child's
    own high-water mark (VmHWM, which starts afresh at exec; ru_maxrss would carry the forking test
    process's size across exec), or the largest RSS polled, whichever is larger."""
    import tempfile

    import psutil

    cmd = [sys.executable, str(Path(__file__).resolve()), str(path), str(out)]
    t = time.perf_counter()
    deadline = t + TIME_LIMIT_S * len(commands(path, out))
    with tempfile.TemporaryFile() as so, tempfile.TemporaryFile() as se:
        proc = subprocess.Popen(cmd, stdout=so, stderr=se, env={**os.environ, **(env or {})})
        ps = psutil.Process(proc.pid)
        killed = None
        polled = 0
        while True:
            pid, status, _ = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            try:
                polled = max(polled, ps.memory_info().rss)
            except psutil.Error:
                pass
            if polled > RSS_LIMIT:
                killed = "rss"
            if time.perf_counter() > deadline:
                killed = "time"
            if killed:
                proc.kill()
            time.sleep(0.05)
        proc.returncode = code = os.waitstatus_to_exitcode(status)
        so.seek(0)
        se.seek(0)
        stdout, stderr = so.read(), se.read()
    if killed or code != 0:
        raise AssertionError(f"child {'killed for ' + killed if killed else 'failed'}: {stderr.decode()[-2000:]}")
    doc = json.loads(stdout)
    return doc["results"], max(doc["peak_rss"], polled), time.perf_counter() - t


def peak_rss() -> int:
    """This process's peak resident memory since it started (VmHWM), in bytes."""
    with open("/proc/self/status") as f:
        return next(int(ln.split()[1]) * 1024 for ln in f if ln.startswith("VmHWM:"))


def tree_digest(path: Path) -> dict[str, str]:
    """What is at `path` (recursively): regular files by content hash, everything else by its type (a FIFO
    is never opened, a symlink never followed), so a command that wrote into its input shows."""
    out: dict[str, str] = {}
    if not os.path.lexists(path):
        return out
    todo = [path]
    while todo:
        p = todo.pop()
        st = os.lstat(p)
        key = str(p.relative_to(path)) if p != path else "."
        if stat.S_ISLNK(st.st_mode):
            out[key] = "link:" + os.readlink(p)
        elif stat.S_ISDIR(st.st_mode):
            out[key] = "dir"
            todo += sorted(p.iterdir())
        elif stat.S_ISREG(st.st_mode):
            h = hashlib.sha256()
            with open(p, "rb") as f:
                for block in iter(lambda: f.read(2 ** 22), b""):
                    h.update(block)
            out[key] = h.hexdigest()
        else:
            out[key] = f"mode:{stat.S_IFMT(st.st_mode)}"
    return out


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    results = run_all(Path(sys.argv[1]), Path(sys.argv[2]))
    print(json.dumps({"results": results, "peak_rss": peak_rss()}))
