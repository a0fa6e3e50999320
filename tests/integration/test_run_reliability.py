"""The launcher's fault drills, from outside the tool: signals to `commscope run`, to torchrun and to a
rank (SIGTERM, SIGINT, SIGKILL, SIGSTOP), two runs into one folder, --out into a folder that is not a
run, --overwrite (a replacement that fails at start gives the old run back), a full disk (a small
tmpfs, where the test may mount one) and a read-only --out. Each drill checks what the issue asks: the
right verdict in summary.json or one `commscope: error:` line and exit 2; nothing of the user's lost;
no process of the run left (found by the run id every process of the job carries) and no
commscope-torchrun-* folder left in the run's TMPDIR; each under 60 s from the fault.

The multi-process drills are 2 gloo ranks of the tiny preset (marked slow); the simulated ENOSPC and
option checks run in one process."""
from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from commscope.errors import UserError
from commscope.util import atomic
from commscope.util.atomic import write_json_atomic
from instrumented_model.faults import parse_faults
from commscope.pipeline import diagnose_path
from instrumented_model.job import RUN_ID_ENV
from instrumented_model.out_dir import claim

FAULT_BOUND_S = 60


class Run:
    """One `commscope run --nproc 2` in a subprocess, with its own TMPDIR and output files."""

    def __init__(self, tmp_path: Path, out: Path, *args: str, steps: int = 200, name: str = "run"):
        self.out, self.tmp = out, tmp_path / f"{name}-tmp"
        self.tmp.mkdir()
        self.stdout, self.stderr = tmp_path / f"{name}.out", tmp_path / f"{name}.err"
        env = {**os.environ, "COLUMNS": "200", "TMPDIR": str(self.tmp)}
        cmd = [sys.executable, "-m", "commscope", "run", "--nproc", "2", "--steps", str(steps), "--out", str(out), *args]
        with open(self.stdout, "w") as o, open(self.stderr, "w") as e:
            self.proc = subprocess.Popen(cmd, stdout=o, stderr=e, env=env)

    def wait_step(self, n: int = 1, timeout: float = 180) -> None:
        """Until rank 0 has reported `n` finished steps."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            assert self.proc.poll() is None, self.text()
            try:
                if (self.out / "progress.jsonl").read_text().count('"step"') >= n:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"no step {n} in {timeout} s: {self.text()}")

    def run_id(self) -> str:
        return json.loads((self.out / "commscope-run.json").read_text())["run_id"]

    def rank_pid(self, rank: int) -> int:
        return json.loads((self.out / f"rank{rank}" / "meta.json").read_text())["pid"]

    def torchrun_pid(self) -> int:
        kids = psutil.Process(self.proc.pid).children()
        return next(p.pid for p in kids if "instrumented_model.torchrun" in " ".join(p.cmdline()))

    def end(self, since: float, timeout: float = FAULT_BOUND_S) -> int:
        """The exit code, which must come within `timeout` of `since` (when the fault was made)."""
        rc = self.proc.wait(timeout=max(1.0, since + timeout - time.time()))
        assert time.time() - since < timeout
        return rc

    def summary(self) -> dict:
        return json.loads((self.out / "summary.json").read_text())

    def status(self, rank: int) -> dict:
        return json.loads((self.out / f"rank{rank}" / "status.json").read_text())

    def text(self) -> str:
        return self.stdout.read_text() + self.stderr.read_text()

    def leftovers(self, run_id: str) -> list[str]:
        """Processes carrying this run's id, and torchrun log folders left in its TMPDIR."""
        procs = []
        for p in psutil.process_iter(["pid", "cmdline"]):
            try:
                if "instrumented_model" in " ".join(p.info["cmdline"] or ()) and p.environ().get(RUN_ID_ENV) == run_id:
                    procs.append(f"pid {p.pid} {p.status()}: {' '.join(p.info['cmdline'])[:120]}")
            except psutil.Error:
                continue
        return procs + [str(d) for d in self.tmp.glob("commscope-torchrun-*")]


def snapshot(run_dir: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(run_dir)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in run_dir.rglob("*") if p.is_file()}


def temp_files(root: Path) -> list[str]:
    return [str(p) for p in root.rglob("*") if ".tmp" in p.name]


def one_error_line(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert "Traceback" not in text and lines and lines[-1].startswith("commscope: error: "), text
    return lines[-1]


# ---------------------------------------------------------------- in one process: options, ENOSPC

def test_inject_labels_are_checked_against_the_collectives():
    labels = ("attn", "mlp", "loss")
    assert parse_faults(["hang@rank=1,step=1,label=loss"], world_size=2, steps=3, labels=labels)[0].label == "loss"
    assert parse_faults(["crash@rank=1,step=1"], world_size=2, steps=3, labels=labels)[0].label is None
    with pytest.raises(UserError, match="no collective is labelled 'nope'; the labels are attn, mlp, loss"):
        parse_faults(["crash@rank=1,step=1,label=nope"], world_size=2, steps=3, labels=labels)


def _part_then_enospc(fd: int, data: bytes) -> None:
    """The atomic writer's write on a full disk: the temp file exists and takes a few bytes, the rest
    does not fit."""
    os.write(fd, data[:3])
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_leaves_no_temp_file_and_no_half_claimed_folder(tmp_path, monkeypatch):
    """Simulated ENOSPC (the tmpfs drill below is the real one, where the test may mount): the atomic
    writer removes its temp file, and a run folder whose marker cannot be written is one UserError line,
    with the folder it created gone again."""
    monkeypatch.setattr(atomic, "_write_all", _part_then_enospc)
    with pytest.raises(OSError, match="No space"):
        write_json_atomic(tmp_path / "doc.json", {"a": 1})
    assert os.listdir(tmp_path) == []  # no .doc.json.tmpNNNN left behind
    with pytest.raises(UserError, match=r"--out .*new: cannot write the run directory: No space left on device"):
        claim(str(tmp_path / "new"), overwrite=False, run_id="x")
    assert os.listdir(tmp_path) == []


def test_a_failed_marker_write_on_overwrite_gives_the_old_run_back(tmp_path, monkeypatch):
    out = tmp_path / "run"
    claim(str(out), overwrite=False, run_id="old").release()
    (out / "rank0").mkdir()
    (out / "summary.json").write_text('{"status": "completed"}')
    monkeypatch.setattr(atomic, "_write_all", _part_then_enospc)
    with pytest.raises(UserError, match="No space left on device"):
        claim(str(out), overwrite=True, run_id="new")
    assert sorted(os.listdir(out)) == ["commscope-run.json", "rank0", "summary.json"]
    assert json.loads((out / "commscope-run.json").read_text())["run_id"] == "old"


def test_overwrite_refuses_a_run_whose_rank_folders_hold_what_commscope_did_not_write(tmp_path):
    """--overwrite moves the old run's rank folders aside and deletes them at the new run's first step: a
    user's file in one, a folder the run never had files in, or another run started inside a rank folder
    would go with them. Such a run is refused whole, one line naming what is foreign, and nothing moves;
    a recorder's own leftovers (an atomic write's temp file cut short) are no reason to refuse."""
    out = tmp_path / "run"
    claim(str(out), overwrite=False, run_id="old").release()
    for r in (0, 1):
        (out / f"rank{r}").mkdir()
        (out / f"rank{r}" / "events.jsonl").write_text("{}\n")
        (out / f"rank{r}" / "status.json").write_text('{"status": "completed"}')
    (out / "rank1" / ".meta.json.tmp123-0a1b2c3d").write_text("{")
    before = sorted(os.listdir(out))
    for foreign, said in ((out / "rank0" / "my_analysis.txt", "rank0/my_analysis.txt"),
                          (out / "rank7", "rank7/commscope-run.json"),  # a run started inside the old one
                          (out / "rank1" / "events.jsonl.bak", "rank1/events.jsonl.bak")):
        if foreign.name == "rank7":  # (a run claims no rank folder of a run: copied in, or made by hand)
            foreign.mkdir()
            (foreign / "commscope-run.json").write_text('{"schema_version": 1, "run_id": "nested"}')
        else:
            foreign.write_text("mine")
        with pytest.raises(UserError) as e:
            claim(str(out), overwrite=True, run_id="new")
        assert str(e.value) == (f"--out {out}: the run there holds what commscope did not write ({said}); "
                                "--overwrite would delete it with the old run: move it out of the rank folders, "
                                "or choose another directory")
        assert sorted(os.listdir(out)) == sorted(before + (["rank7"] if foreign.name == "rank7" else []))
        assert json.loads((out / "commscope-run.json").read_text())["run_id"] == "old"
        if foreign.name == "rank7":
            import shutil
            shutil.rmtree(foreign)
        else:
            foreign.unlink()
    with pytest.raises(UserError) as e:  # a run inside the old one's rank folder is refused in the first place
        claim(str(out / "rank3"), overwrite=False, run_id="nested")
    assert str(e.value) == f"--out {out / 'rank3'} is a rank folder of the commscope run in {out}; choose a " \
                           "directory outside it"
    assert not (out / "rank3").exists()
    c = claim(str(out), overwrite=True, run_id="new")  # only the recorder's files: replaced as before
    c.release()
    assert sorted(os.listdir(out)) == [".commscope-previous-old", "commscope-run.json"]


def test_out_into_a_foreign_folder_or_under_a_file_is_one_line(tmp_path):
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text('{"model_type": "gpt2"}')
    (tmp_path / "afile").write_text("x")
    for out, msg in ((hf, "is not empty and holds no commscope run"),
                     (tmp_path / "afile" / "sub", "cannot create the run directory: Not a directory")):
        r = subprocess.run([sys.executable, "-m", "commscope", "run", "--nproc", "2", "--steps", "2", "--out", str(out)],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and msg in one_error_line(r.stderr) and r.stderr.count("\n") == 1, r.stderr
    assert (hf / "config.json").read_text() == '{"model_type": "gpt2"}' and os.listdir(hf) == ["config.json"]


def _sleeper(env: dict, *argv: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", *argv], env={**os.environ, **env})


def test_job_kills_a_stopped_rank_at_the_hang_timeout_and_only_its_own_processes():
    """instrumented_model.job in one process: a 'rank' (a child carrying the run id, RANK and the
    trainer's module name) stopped for the hang timeout is killed and recorded as hung; a stopped child
    of another run is never touched; drain() leaves no process of the run."""
    from instrumented_model.job import Job

    rank = _sleeper({RUN_ID_ENV: "r1", "RANK": "3"}, "instrumented_model.train")
    other = _sleeper({RUN_ID_ENV: "r2", "RANK": "0"}, "instrumented_model.train")
    helper = _sleeper({RUN_ID_ENV: "r1"})  # a process of the run that is not a rank (torchrun, a compile worker)
    try:
        job = Job(pid=-1, run_id="r1", hang_timeout=0.5)
        deadline = time.time() + 20
        while {m.proc.pid for m in job.members()} != {rank.pid, helper.pid} and time.time() < deadline:
            time.sleep(0.05)  # until both children have exec'd into their python and carry their env
        assert {m.proc.pid: m.rank for m in job.members()} == {rank.pid: 3, helper.pid: None}
        for p in (rank, other):
            os.kill(p.pid, signal.SIGSTOP)
        t0 = time.time()
        while rank.poll() is None and time.time() - t0 < 10:
            job.poll()
            time.sleep(0.05)
        assert rank.returncode == -signal.SIGKILL and time.time() - t0 >= 0.5
        assert 3 in job.stopped and job.killed[3].startswith("hung: stopped (SIGSTOP) for ")
        assert other.poll() is None and psutil.Process(other.pid).status() == psutil.STATUS_STOPPED
        job.drain(grace_s=0.5)  # the helper still runs: killed when the grace is over, and reaped
        assert job.killed == {3: job.killed[3]} and job.alive() == [] and not psutil.pid_exists(helper.pid)
    finally:
        for p in (rank, other, helper):
            with contextlib.suppress(ProcessLookupError):
                p.kill()
            p.wait()


def test_a_child_dies_with_its_parent():
    """die_with_parent: kill -9 of the parent brings the kernel's SIGTERM to the child, which (here) has
    no handler and ends by it, instead of living on under PID 1."""
    code = ("import os, subprocess, sys, time\n"
            "env = {**os.environ, 'COMMSCOPE_PARENT_PID': str(os.getpid())}\n"
            "c = subprocess.Popen([sys.executable, '-c', 'from instrumented_model.job import die_with_parent; "
            "die_with_parent(); print(\"ready\", flush=True); import time; time.sleep(120)'], env=env, "
            "stdout=subprocess.PIPE, text=True)\n"
            "c.stdout.readline(); print(c.pid, flush=True); time.sleep(120)\n")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    parent.kill()
    parent.wait()
    deadline = time.time() + 10
    while psutil.pid_exists(child) and psutil.Process(child).status() != psutil.STATUS_ZOMBIE and time.time() < deadline:
        time.sleep(0.05)
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE


# ---------------------------------------------------------------- drills: signals

@pytest.mark.slow
@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_to_the_launcher_ends_the_whole_job_and_a_second_run_is_locked_out(tmp_path, sig, code):
    """`kill -INT/-TERM` of `commscope run` reaches every rank (they leave a status), the summary says
    interrupted with the exit code the process really has; meanwhile a second run into the same folder,
    even with --overwrite, is refused and takes nothing of the first."""
    out = tmp_path / "run"
    run = Run(tmp_path, out)
    run.wait_step(1)
    run_id = run.run_id()
    second = Run(tmp_path, out, "--overwrite", steps=2, name="second")
    assert second.proc.wait(timeout=120) == 2
    assert "is in use by another commscope run (run id " + run_id in one_error_line(second.stderr.read_text())
    assert run.proc.poll() is None and run.run_id() == run_id and (out / "rank1").is_dir()
    t0 = time.time()
    run.proc.send_signal(sig)
    assert run.end(t0) == code
    s = run.summary()
    assert (s["status"], s["exit_code"]) == ("interrupted", code)
    assert s["message"].startswith(f"interrupted by {signal.Signals(sig).name} after ") and len(s["losses"]) >= 1
    # Ctrl-C reaches the ranks as a KeyboardInterrupt (the user stopped them), SIGTERM as the signal itself
    want = (("interrupted", "KeyboardInterrupt") if sig == signal.SIGINT else
            ("failed", "Terminated: terminated by signal 15 (SIGTERM)"))
    for r in (0, 1):
        assert (run.status(r)["status"], run.status(r)["error"]) == want
    assert run.leftovers(run_id) == [] and second.leftovers(run_id) == []


@pytest.mark.slow
def test_sigkill_of_the_launcher_takes_torchrun_and_the_ranks_with_it(tmp_path):
    out = tmp_path / "run"
    run = Run(tmp_path, out)
    run.wait_step(1)
    run_id = run.run_id()
    t0 = time.time()
    run.proc.kill()
    assert run.end(t0) == -signal.SIGKILL
    deadline = time.time() + 30
    while run.leftovers(run_id) and time.time() < deadline:
        time.sleep(0.2)
    assert run.leftovers(run_id) == []
    assert time.time() - t0 < FAULT_BOUND_S
    for r in (0, 1):  # the ranks got SIGTERM from the kernel when torchrun went, and said so
        assert run.status(r)["error"] == "Terminated: terminated by signal 15 (SIGTERM)"


@pytest.mark.slow
def test_sigkill_of_torchrun_leaves_a_summary_that_is_not_stale(tmp_path):
    out = tmp_path / "run"
    run = Run(tmp_path, out)
    run.wait_step(1)
    run_id = run.run_id()
    t0 = time.time()
    os.kill(run.torchrun_pid(), signal.SIGKILL)
    assert run.end(t0) == 1
    assert run.leftovers(run_id) == []
    s = run.summary()
    assert s["status"] == "failed" and s["exit_code"] == 1
    assert s["message"].startswith("failed: torch.distributed.run was killed by SIGKILL after ")
    assert s["torchrun_killed"] == "SIGKILL"
    # the job was ended from outside while it ran: no rank is to blame, and the doctor says so
    d = diagnose_path(str(out))
    assert (d.verdict, d.culprit_ranks) == ("interrupted", [])
    assert d.summary.startswith("interrupted: torch.distributed.run was killed by SIGKILL from outside the job "
                                "(by the user, or the system: an OOM killer), and its ranks ended with it; ")
    before = snapshot(out)
    time.sleep(2)
    assert snapshot(out) == before  # no rank trains on and writes "completed" after the summary
    assert {run.status(r)["status"] for r in (0, 1)} == {"failed"} and set(s["ranks"].values()) == {"failed"}


@pytest.mark.slow
@pytest.mark.parametrize("hung", [True, False])
def test_sigkill_of_one_rank_is_a_crash_that_says_whether_the_others_had_waited_on_it_long(tmp_path, hung):
    """kill -9 of rank 1 leaves no status: a crash. Where rank 1 was stuck before the kill (an injected hang
    at step 2, killed 4 s in), rank 0 had waited seconds in a collective rank 1 never launched: the verdict
    says rank 1 may have been stuck. Killed mid-run, no rank had waited that long, and it says nothing."""
    out = tmp_path / "run"
    run = Run(tmp_path, out, "--hang-timeout", "120", *(["--inject", "hang@rank=1,step=2"] if hung else []))
    run.wait_step(2)
    time.sleep(4 if hung else 0)
    t0 = time.time()
    os.kill(run.rank_pid(1), signal.SIGKILL)
    assert run.end(t0) == 1
    d = diagnose_path(str(out))
    assert (d.verdict, d.culprit_ranks) == ("crash", [1])
    if hung:
        assert d.summary.endswith("rank(s) 1 may have been stuck before being killed.")
        assert d.details["stuck_before_killed"]["waited_ms"] >= 3500
    else:
        assert "stuck" not in d.summary and "stuck_before_killed" not in (d.details or {})


@pytest.mark.slow
def test_sigterm_of_one_rank_names_that_rank(tmp_path):
    out = tmp_path / "run"
    run = Run(tmp_path, out)
    run.wait_step(1)
    run_id = run.run_id()
    t0 = time.time()
    os.kill(run.rank_pid(1), signal.SIGTERM)
    assert run.end(t0) == 1
    s = run.summary()
    assert s["status"] == "failed" and s["message"].startswith("failed: rank 1 ended first (Terminated: terminated by signal 15 (SIGTERM))")
    assert run.status(1)["error"] == "Terminated: terminated by signal 15 (SIGTERM)"
    assert run.leftovers(run_id) == []


@pytest.mark.slow
def test_a_stopped_rank_is_a_hang_killed_at_the_hang_timeout(tmp_path):
    """SIGSTOP of a rank: the rank cannot act on any signal, so the launcher kills it once it has been
    stopped for the hang timeout, writes its status for it, and the run is over before the summary: a
    later SIGCONT has no process to resume and nothing changes in the run."""
    out = tmp_path / "run"
    run = Run(tmp_path, out, "--hang-timeout", "4")
    run.wait_step(1)
    run_id, pid = run.run_id(), run.rank_pid(1)
    t0 = time.time()
    os.kill(pid, signal.SIGSTOP)
    assert run.end(t0) == 1
    assert time.time() - t0 >= 4  # not before the hang timeout
    s = run.summary()
    assert s["status"] == "hung" and s["ranks"]["1"] == "hung"
    assert s["message"].startswith("hung: rank(s) 1 stopped (SIGSTOP) and never resumed; killed after ")
    err = run.status(1)["error"]
    assert "stopped (SIGSTOP)" in err and "terminated by signal 9 (SIGKILL) by commscope run" in err
    assert not psutil.pid_exists(pid) and run.leftovers(run_id) == []
    before = snapshot(out)
    time.sleep(2)
    assert snapshot(out) == before


@pytest.mark.slow
def test_untraced_hang_blames_the_rank_that_did_not_time_out(tmp_path):
    """--trace off: no watchdog, the peers' backend timeout (hang timeout + 10 s) is the only sign; they
    are the victims, the rank that never joined is the culprit."""
    out = tmp_path / "run"
    run = Run(tmp_path, out, "--trace", "off", "--inject", "hang@rank=1,step=1,label=attn", "--hang-timeout", "3",
              steps=3)
    t0 = time.time()
    assert run.end(t0, timeout=FAULT_BOUND_S + 40) == 1  # from launch: start-up plus the 13 s timeout
    s = run.summary()
    why = f"{s['message']} {[run.status(r) for r in (0, 1)]}"
    assert s["status"] == "hung" and s["exit_code"] == 1, why
    assert s["message"].startswith("hung: rank(s) 0 waited on a collective that rank(s) 1 never joined"), why
    assert len(s["losses"]) == 1 and run.leftovers(run.run_id()) == []


# ---------------------------------------------------------------- drills: the run folder

@pytest.mark.slow
def test_overwrite_keeps_the_old_run_until_the_new_one_has_a_step(tmp_path):
    out = tmp_path / "run"
    first = Run(tmp_path, out, steps=2, name="first")
    assert first.proc.wait(timeout=180) == 0, first.text()
    first_id, first_files = first.run_id(), snapshot(out)
    (out / "report.html").write_text("mine")
    # without --overwrite: refused, untouched
    refused = Run(tmp_path, out, steps=2, name="refused")
    assert refused.proc.wait(timeout=120) == 2
    assert "pass --overwrite to replace it" in one_error_line(refused.stderr.read_text())
    # a replacement that dies before its first step gives the folder back to the old run
    broken = Run(tmp_path, out, "--overwrite", "--inject", "crash@rank=1,step=0", steps=2, name="broken")
    assert broken.proc.wait(timeout=180) == 1, broken.text()
    said = " ".join(broken.stdout.read_text().split())  # the terminal may wrap a long line at any space
    assert "the run it was to replace is back in place" in said
    # its own files wait beside it, and every path it printed names them, not the run given back
    (kept,) = out.glob(".commscope-unfinished-*")
    assert {p.name for p in kept.iterdir()} >= {"commscope-run.json", "launcher.log", "summary.json", "rank0", "rank1"}
    assert f"output of all ranks: {kept / 'launcher.log'}" in said
    assert f"commscope doctor {kept}" in said and f"commscope report {kept}" in said
    assert f"commscope doctor {out} " not in said + " " and f"commscope report {out} " not in said + " "
    doctor = subprocess.run([sys.executable, "-m", "commscope", "doctor", str(kept), "--json"], capture_output=True,
                            text=True, timeout=120)
    assert doctor.returncode == 0 and json.loads(doctor.stdout)["verdict"] == "crash", doctor.stderr
    assert json.loads(doctor.stdout)["culprit_ranks"] == [1]
    now = {k: v for k, v in snapshot(out).items() if not k.startswith(kept.name)}
    assert now == {**first_files, "report.html": now["report.html"]} and first.run_id() == first_id
    # a replacement that has a step replaces it for good
    second = Run(tmp_path, out, "--overwrite", steps=2, name="second")
    assert second.proc.wait(timeout=180) == 0, second.text()
    assert second.run_id() != first_id and second.summary()["status"] == "completed"
    assert sorted(p.name for p in out.iterdir()) == [kept.name, "commscope-run.json", "config.json", "launcher.log",
                                                    "progress.jsonl", "rank0", "rank1", "report.html", "summary.json"]
    assert (out / "report.html").read_text() == "mine"
    assert not temp_files(out)


@pytest.fixture
def tmpfs(tmp_path):
    """Mount a tmpfs of the given size (read-only if asked) under tmp_path; skip when mounting is not
    allowed here (not root, no CAP_SYS_ADMIN, a sandbox)."""
    mounted = []

    def mount(size: str, read_only: bool = False) -> Path:
        d = tmp_path / f"mnt{len(mounted)}"
        d.mkdir()
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(d)], capture_output=True, text=True)
        if r.returncode:
            pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip() or r.returncode}); "
                        "test_a_full_disk_leaves_no_temp_file_and_no_half_claimed_folder simulates ENOSPC instead")
        mounted.append(d)
        if read_only:
            (d / "run").mkdir()
            subprocess.run(["mount", "-o", "remount,ro", str(d)], check=True)
        return d

    yield mount
    for d in mounted:
        subprocess.run(["umount", str(d)], check=False)


@pytest.mark.slow
def test_a_full_disk_ends_with_one_line_and_no_temp_files(tmp_path, tmpfs):
    disk = tmpfs("48k")  # the marker, the config and about one step of events fit; the run does not
    run = Run(tmp_path, disk / "run", steps=6)
    t0 = time.time()
    assert run.end(t0, timeout=FAULT_BOUND_S + 60) == 2, run.text()
    line = one_error_line(run.stderr.read_text())
    assert "no space left on device" in line.lower() and "the run ended after" in line
    assert "Traceback" not in run.stdout.read_text()
    assert temp_files(disk) == []
    assert run.leftovers(run.run_id()) == []


@pytest.mark.slow
def test_a_read_only_out_is_one_line(tmp_path, tmpfs):
    ro = tmpfs("1m", read_only=True)
    for out, msg in ((ro / "run", "cannot write the run directory: Read-only file system"),
                     (ro / "new", "cannot create the run directory: Read-only file system")):
        r = subprocess.run([sys.executable, "-m", "commscope", "run", "--nproc", "2", "--steps", "2", "--out", str(out)],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and msg in one_error_line(r.stderr), r.stderr
    assert os.listdir(ro) == ["run"] and os.listdir(ro / "run") == []
