"""`commscope doctor` on hand-built 4-rank run directories with one known fault each (fast, one process)."""
from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys

import pytest

from commscope.analyze.doctor import diagnose_path
from commscope.load.flight_recorder import read_flight_recorder
from commscope.errors import UserError
from report_trace import make_trace, write_run_dir
from rundirs import write_json

MS = 1_000_000


@pytest.fixture
def run(tmp_path):
    path = tmp_path / "run"
    write_run_dir(make_trace(ranks=(0, 1, 2, 3), steps=(0, 1, 2), style="run"), path)
    return path


def events(run, rank):
    p = run / f"rank{rank}" / "events.jsonl"
    return [json.loads(x) for x in p.read_text().splitlines()]


def rewrite(run, rank, fn):
    p = run / f"rank{rank}" / "events.jsonl"
    rows = [r for r in (fn(r) for r in events(run, rank)) if r is not None]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))


def put(run, rank, name, doc):
    write_json(run / f"rank{rank}" / name, doc)


def inflight(rank, seq, label, op="reduce_scatter", nbytes=8_000_000, step=3, wait=True):
    t = 1_764_670_000_000_000_000 + 3_000 * MS
    return {"kind": "collective", "rank": rank, "step": step, "label": label, "phase": "reduce", "op": op,
            "bytes": nbytes, "dtype": "bf16", "group": "0", "group_size": 4, "seq": seq, "call_ns": t + rank,
            "return_ns": t + rank + 5, "wait_ns": t + 100 if wait else None, "wait_end_ns": None}


def watchdog(rank, rows):
    return {"schema_version": 1, "rank": rank, "world_size": 4, "timeout_s": 3, "fired_ns": 1,
            "waiting_on": rows[0], "inflight": rows, "last_step": 2, "stacks": {}}


def test_healthy_run_is_ok(run):
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks) == ("ok", [])


def test_straggler_is_the_late_launch_by_timing(run):
    # rank 2 launches step 1's mlp (seq 4) 500 ms late; everything else within 30 µs (the launch call
    # returns late too: a record returning before it was called is refused by the loader)
    rewrite(run, 2, lambda r: {**r, "call_ns": r["call_ns"] + 500 * MS,
                               "return_ns": max(r["return_ns"], r["call_ns"] + 500 * MS)}
            if r["kind"] == "collective" and r["seq"] == 4 else r)
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks, d.label, d.step, d.sequence) == ("straggler", [2], "mlp", 1, 4)
    assert "by timing" in d.summary
    ev = d.evidence[0]
    assert ev["rank"] == 2 and ev["late_launch_ns"] - ev["first_launch_ns"] == pytest.approx(500 * MS, abs=40_000)
    # under the threshold it is not a straggler
    assert diagnose_path(str(run), straggler_ms=600).verdict == "ok"


def test_crash_is_the_rank_without_status(run):
    os.remove(run / "rank3" / "status.json")
    rewrite(run, 3, lambda r: None if r["step"] == 2 else r)
    put(run, 1, "status.json", {"status": "failed", "error": "DistBackendError: Connection closed by peer",
                                "last_step": 2})
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks, d.step) == ("crash", [3], 1)
    assert any(e.get("role") == "affected" and e["rank"] == 1 for e in d.evidence)


def test_a_rank_failing_on_its_own_is_a_crash(run):
    put(run, 2, "status.json", {"status": "failed", "error": "RuntimeError: CUDA out of memory", "last_step": 2})
    put(run, 0, "status.json", {"status": "failed", "error": "Terminated: terminated by signal 15", "last_step": 2})
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks) == ("crash", [2])


def test_hang_finds_the_rank_that_never_launched(run):
    # seq 9 (step 3 attn) launched by 0, 1, 3 (their watchdogs fired); rank 2 stopped at seq 8
    for r in (0, 1, 3):
        put(run, r, "watchdog.json", watchdog(r, [inflight(r, 9, "attn"), inflight(r, 10, "mlp", wait=False)]))
        put(run, r, "status.json", {"status": "failed", "error": "hang watchdog: waited", "last_step": 2})
    put(run, 2, "status.json", {"status": "failed", "error": "Terminated: terminated by signal 15", "last_step": 2})
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks, d.label, d.step, d.sequence, d.group) == ("hang", [2], "attn", 3, 9, "0")
    missing = [e for e in d.evidence if not e["launched"]]
    assert missing == [{"rank": 2, "launched": False, "last_launched_seq": 8, "last_launched_label": "scalars",
                        "last_launch_ns": missing[0]["last_launch_ns"], "status": "failed",
                        "error": "Terminated: terminated by signal 15"}]
    # an inflight.json of the torn-down rank moves the point of divergence: it did launch 9, not 10
    put(run, 2, "inflight.json", {"schema_version": 1, "rank": 2, "inflight": [inflight(2, 9, "attn", wait=False)]})
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks, d.label, d.sequence) == ("hang", [2], "mlp", 10)


def test_desync_names_the_minority(run):
    for r in range(4):
        op = "broadcast" if r == 1 else "reduce_scatter"
        put(run, r, "watchdog.json", watchdog(r, [inflight(r, 9, "attn", op=op)]))
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks, d.label, d.step, d.sequence) == ("desync", [1], "attn", 3, 9)
    assert "broadcast" in d.summary and "reduce_scatter" in d.summary


def fr_entry(seq, name="nccl:all_reduce", state="completed", n=1024):
    return {"record_id": seq, "pg_id": 0, "process_group": ("0", "default_pg"), "collective_seq_id": seq,
            "p2p_seq_id": 0, "op_id": seq, "profiling_name": name, "time_created_ns": 10 * seq,
            "input_sizes": [[n]], "input_dtypes": ["Float"], "output_sizes": [[n]], "state": state,
            "is_p2p": False}


def test_flight_recorder_dumps_are_a_second_source(run):
    fr = run / "flight_recorder"
    fr.mkdir()
    for r in range(4):
        entries = [fr_entry(s) for s in range(1, 5)] + ([] if r == 2 else [fr_entry(5, state="started")])
        doc = {"version": "2.4", "pg_config": {}, "entries": entries}
        (fr / f"rank_{r}").write_bytes(pickle.dumps(doc) if r % 2 else json.dumps(doc).encode())
    d = diagnose_path(str(run))
    # the recorder's data is healthy here; the Flight Recorder alone sees rank 2 missing seq 5
    assert d.verdict == "hang" and d.culprit_ranks == [2] and d.sequence == 5 and d.sources == ["flight_recorder"]


def test_flight_recorder_pickles_cannot_run_code(tmp_path):
    p = tmp_path / "rank_0"
    p.write_bytes(pickle.dumps({"entries": [os.getcwd]}))  # a global: refused, never imported or called
    with pytest.raises(UserError, match="not a Flight Recorder dump"):
        read_flight_recorder(str(p))
    p.write_bytes(b"\x80\x04garbage")
    with pytest.raises(UserError):
        read_flight_recorder(str(p))


def test_doctor_cli_json(run):
    os.remove(run / "rank0" / "status.json")
    p = subprocess.run([sys.executable, "-m", "commscope", "doctor", str(run), "--json"], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert {k: doc[k] for k in ("verdict", "culprit_ranks", "step")} == {"verdict": "crash", "culprit_ranks": [0],
                                                                         "step": 2}
    assert {"label", "sequence", "evidence"} <= set(doc)


def test_flight_recorder_torchscript_int_lists_load_without_torch(tmp_path):
    # TorchScript's pickler writes int lists as torch.jit._pickle.build_intlist([...]): allowed, rebuilt as a list
    blob = (b"\x80\x02}q\x00X\x07\x00\x00\x00entriesq\x01]q\x02}q\x03X\x0b\x00\x00\x00input_sizesq\x04"
            b"ctorch.jit._pickle\nbuild_intlist\nq\x05]q\x06(K\x02K\x03e\x85q\x07Rq\x08sas.")
    p = tmp_path / "rank_0"
    p.write_bytes(blob)
    assert read_flight_recorder(str(p)) == {"entries": [{"input_sizes": [2, 3]}]}


def test_backend_timeout_without_records_is_a_hang_without_culprit(run):
    for r in range(4):
        put(run, r, "status.json", {"status": "failed", "error": "RuntimeError: [gloo] Timed out waiting 6000ms "
                                    "for recv operation to complete", "last_step": 2})
    d = diagnose_path(str(run))
    assert (d.verdict, d.culprit_ranks) == ("hang", []) and "--trace light" in d.summary
    assert [e["rank"] for e in d.evidence] == [0, 1, 2, 3]


def test_kineto_profile_windows_are_not_read_as_hangs(tmp_path):
    from commscope.analyze.doctor import diagnose
    from report_trace import make_trace

    t = make_trace(ranks=(0, 1, 2, 3), steps=(0, 1, 2), style="kineto")
    t.collectives = t.collectives[~((t.collectives["rank"] == 2) & (t.collectives["seq"] == 8))]  # window cut
    assert diagnose(t).verdict == "ok"


def test_report_shows_the_verdict_first(run, tmp_path, capsys, monkeypatch):
    from commscope import cli

    os.remove(run / "rank3" / "status.json")
    out = tmp_path / "r.html"
    monkeypatch.setattr(sys, "argv", ["commscope", "report", str(run), "-o", str(out), "--no-hta"])
    with pytest.raises(SystemExit) as e:  # typer's standalone mode exits 0 after the command
        cli.main()
    assert e.value.code == 0
    page = out.read_text()
    assert page.index("CRASH") < page.index("<h2>Overview")
    assert "rank(s) 3 left no status.json" in page
    assert capsys.readouterr().out.lstrip().startswith("doctor: crash: rank(s) 3")


def test_the_loader_returns_fault_evidence_as_frames_and_never_fails_on_it(run):
    from commscope.load import load_path

    put(run, 1, "watchdog.json", watchdog(1, [inflight(1, 9, "attn"), {"no": "seq"}]))
    put(run, 2, "inflight.json", {"schema_version": 1, "rank": 2, "inflight": [inflight(2, 9, "attn", wait=False)]})
    trace = load_path(str(run))
    f = trace.faults
    assert trace.select_steps((0, 1)).faults is f  # evidence is about the run, not a step
    assert f.error is None and f.ranks("watchdog") == [1] and f.ranks("inflight") == [2]
    assert list(zip(f.inflight["rank"], f.inflight["seq"], f.inflight["source"])) == [
        (1, 9, "watchdog.json"), (2, 9, "inflight.json")]
    assert not f.inflight["finished"].any() and f.reports.loc[f.reports["kind"] == "watchdog", "fired_ns"].tolist() == [1]
    assert len(f.flight_recorder) == 0
    (run / "flight_recorder").mkdir()
    (run / "flight_recorder" / "rank_0").write_bytes(b"\x80\x04\x95garbage")
    f = load_path(str(run)).faults  # loading still works; the evidence says why it is missing
    assert "rank_0" in f.error and len(f.reports) == len(f.inflight) == 0
    with pytest.raises(UserError, match="rank_0"):
        diagnose_path(str(run))
