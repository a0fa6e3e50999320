"""Injected faults on 4 gloo CPU ranks, end to end: `commscope run --inject ...` must end within the bound,
leave every healthy rank's data intact and loadable, and `doctor` must name the right verdict, rank, label
and step. Plus a SIGKILL of one rank mid-run from outside. Each test is one multi-process run (slow)."""
from __future__ import annotations

import io
import json
import os
import signal
import threading
import time

import pytest
from rich.console import Console

from commscope.commands._run_view import TerminalView
from commscope.pipeline import diagnose_path
from instrumented_model.launcher import Topology, launch_training
from commscope.load import load_path

pytestmark = pytest.mark.slow
HANG_S = 5.0
# timeout + watchdog grace (≤3 s) + launcher teardown (≤10 s) + slack for 2 shared, busy cores
BOUND_S = HANG_S + 3 + 10 + 15


PRINTED: dict[str, str] = {}  # what the last drill printed, by its run directory


def drill(tmp_path, *inject, steps=3, hang=60.0, nproc=4):
    out = tmp_path / "run"
    argv = ["--steps", str(steps), "--hang-timeout", str(hang)]
    for spec in inject:
        argv += ["--inject", spec]
    text = io.StringIO()
    summary = launch_training(argv, Topology(nproc), str(out), view=TerminalView(Console(file=text, width=400)))
    PRINTED[str(out)] = text.getvalue()
    return out, summary, time.time_ns()


def why(out, d) -> str:
    """Failure context: every rank's files and status, and doctor's evidence."""
    lines = [d.summary, json.dumps(d.evidence, default=str)[:3000]]
    for p in sorted(out.glob("rank*")):
        st = p / "status.json"
        lines.append(f"{p.name}: {sorted(x.name for x in p.iterdir())} {st.read_text()[:300] if st.exists() else ''}")
    return "\n".join(lines)


def step_records(out, rank):
    rows = [json.loads(x) for x in (out / f"rank{rank}" / "events.jsonl").read_text().splitlines()]
    return [r for r in rows if r["kind"] == "step"]


def assert_healthy_data(out, ranks, steps_before):
    """Every finished step of the healthy ranks is on disk, complete, and agrees across ranks."""
    trace = load_path(str(out))
    assert not [p for p in trace.problems if "torn" in p]
    losses = {}
    for r in ranks:
        recs = step_records(out, r)
        assert [s["step"] for s in recs] == list(range(steps_before)), r
        losses[r] = [s["loss"] for s in recs]
    assert len({tuple(v) for v in losses.values()}) == 1  # the global mean loss is the same on every rank
    c = trace.collectives[trace.collectives["step"] < steps_before]
    per_rank = c.groupby("rank")["seq"].apply(lambda s: sorted(s))
    assert all(list(v) == list(range(len(v))) for v in per_rank)  # no hole in any finished step


def test_hang_is_found_by_absence_and_the_run_ends_in_bounds(tmp_path):
    out, summary, ended = drill(tmp_path, "hang@rank=2,step=1,label=mlp", hang=HANG_S)
    assert summary["status"] == "hung" and summary["exit_code"] != 0
    d = diagnose_path(str(out))
    assert (d.verdict, d.culprit_ranks, d.label, d.step) == ("hang", [2], "mlp", 1), why(out, d)
    fired = sorted(int(p.parent.name[4:]) for p in out.glob("rank*/watchdog.json"))
    assert fired == [0, 1, 3]
    wd = json.loads((out / "rank0" / "watchdog.json").read_text())
    mlp = [r for r in wd["inflight"] if r["label"] == "mlp"]
    assert mlp and mlp[0]["seq"] == d.sequence and mlp[0]["step"] == 1
    assert wd["waiting_on"]["wait_ns"] is not None and any("wait" in "".join(s) for s in wd["stacks"].values())
    # ends within the bound, counted from when the peers started to wait (on the run's common axis)
    assert (ended - wd["waiting_on"]["wait_ns"]) / 1e9 < BOUND_S
    assert_healthy_data(out, [0, 1, 3], 1)
    assert step_records(out, 2) and step_records(out, 2)[-1]["step"] == 0


def test_crash_names_the_dead_rank_and_its_last_step(tmp_path):
    out, summary, _ = drill(tmp_path, "crash@rank=1,step=2,label=attn")
    assert summary["status"] == "crashed" and summary["ranks"]["1"] == "crashed"
    assert not (out / "rank1" / "status.json").exists()
    d = diagnose_path(str(out))
    assert (d.verdict, d.culprit_ranks, d.step) == ("crash", [1], 1), why(out, d)
    assert_healthy_data(out, [0, 1, 2, 3], 2)  # the dead rank's finished steps survive too


def test_delay_is_a_straggler_by_the_waiting_it_caused(tmp_path):
    out, summary, _ = drill(tmp_path, "delay@rank=3,step=1,label=ve0,ms=1500")
    assert summary["status"] == "completed"
    d = diagnose_path(str(out))
    assert (d.verdict, d.culprit_ranks, d.label, d.step) == ("straggler", [3], "ve0", 1), why(out, d)
    # each other rank waited about the injected 1.5 s for it, in that step only
    assert d.evidence[0]["step"] == 1 and d.evidence[0]["mean_wait_ms"] >= 1400, why(out, d)
    assert d.details["persistence"]["3"]["steps"] == [1]
    assert_healthy_data(out, [0, 1, 2, 3], 3)
    # a drill that completed still says what the doctor makes of it, the verdict word once
    printed = " ".join(PRINTED[str(out)].split())
    said = printed[printed.index("straggler (culprit rank(s) 3): "):]
    assert said.split("Details:")[0].count("straggler") == 1, said  # the verdict word once
    assert said.startswith("straggler (culprit rank(s) 3): rank 3 made the other ranks wait")
    assert f"Details: commscope doctor {out}" in said


def test_desync_wrong_op_names_the_rank(tmp_path):
    out, summary, _ = drill(tmp_path, "desync@rank=3,step=1,label=mlp", hang=HANG_S)
    assert summary["status"] in ("hung", "failed") and summary["exit_code"] != 0
    d = diagnose_path(str(out))
    assert (d.verdict, d.culprit_ranks, d.label, d.step) == ("desync", [3], "mlp", 1), why(out, d)
    assert {e["op"] for e in d.evidence if e["rank"] == 3} == {"broadcast"}
    assert_healthy_data(out, [0, 1, 2], 1)


def kill_when(out, rank: int, steps_of: int, sig: int, after_s: float = 0.0) -> threading.Thread:
    """A thread that sends `sig` to `rank` `after_s` seconds after rank `steps_of` recorded its second step;
    its `killed` attribute is the pid it signalled (None if it never did)."""
    def killer():
        deadline = time.time() + 240
        while time.time() < deadline:
            try:
                if len(step_records(out, steps_of)) >= 2:
                    time.sleep(after_s)
                    pid = json.loads((out / f"rank{rank}" / "meta.json").read_text())["pid"]
                    os.kill(pid, sig)
                    t.killed = pid
                    return
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.05)

    t = threading.Thread(target=killer, daemon=True)
    t.killed = None
    t.start()
    return t


def test_sigkill_of_one_rank_leaves_a_reportable_run(tmp_path):
    out = tmp_path / "run"
    t = kill_when(out, 1, 1, signal.SIGKILL)
    summary = launch_training(["--steps", "200", "--hang-timeout", "60"], Topology(2), str(out),
                              view=TerminalView(Console(file=io.StringIO())))
    t.join(5)
    assert t.killed and summary["status"] == "crashed" and summary["ranks"]["1"] == "crashed"
    d = diagnose_path(str(out))
    assert d.verdict == "crash" and d.culprit_ranks == [1] and d.step >= 1
    from commscope.analyze.summary import summarize

    doc = summarize(load_path(str(out)), with_hta=False)
    assert doc["world_size"] == 2 and any("rank 0" in p for p in doc["run_reports"])  # it ended failed: the run's outcome


def test_the_stuck_rank_killed_by_the_user_stays_the_hang(tmp_path):
    """`--inject hang` on rank 1 and, once rank 0 has waited for it well past the stall bar (5 median steps,
    at least 1 s), the user kills rank 1 with SIGTERM, as one does with a job seen hanging: the launcher saw
    rank 1 end first (summary.json ended_first), but it was stuck before it was killed, so the doctor says
    hang on rank 1, not crash."""
    out = tmp_path / "run"
    t = kill_when(out, 1, 0, signal.SIGTERM, after_s=4.0)  # step 2 holds the hang: rank 0 waits in it from there
    summary = launch_training(["--steps", "20", "--hang-timeout", "120", "--inject", "hang@rank=1,step=2,label=mlp"],
                              Topology(2), str(out), view=TerminalView(Console(file=io.StringIO())))
    t.join(5)
    assert t.killed and summary["ended_first"]["rank"] == 1
    d = diagnose_path(str(out))
    assert (d.verdict, d.culprit_ranks, d.step, d.label) == ("hang", [1], 2, "mlp"), why(out, d)
    assert d.summary.endswith("when rank(s) 1 were ended by SIGTERM from outside the job."), d.summary
    assert d.details["waited_ms"] >= 3000
