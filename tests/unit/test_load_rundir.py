"""Run directories (docs/run_format.md), built by hand with known numbers: loading, torn lines, problems,
and the analyzers' numbers on them."""
import json
import os

import pytest

from commscope.analyze import exposure, timeline, waiting
from commscope.analyze.summary import summarize
from commscope.errors import UserError
from commscope.load import load_path
from rundirs import write_run
from paths import TESTS

T0 = 1_764_670_000_000_000_000
US = 1000


def coll(rank, label, phase, op, seq, call, wait, wait_end, end, nbytes=8000, step=0):
    return {"kind": "collective", "rank": rank, "step": step, "label": label, "phase": phase, "op": op,
            "bytes": nbytes, "dtype": "float32", "group": "0", "group_size": 2, "seq": seq,
            "call_ns": T0 + call * US, "return_ns": T0 + (call + 1) * US,
            "wait_ns": None if wait is None else T0 + wait * US,
            "wait_end_ns": None if wait_end is None else T0 + wait_end * US,
            "start_ns": None, "end_ns": T0 + int(end * US), "timing": "wall"}


def region(rank, name, a, b, step=0, micro=0):
    return {"kind": "region", "rank": rank, "step": step, "name": name, "micro_step": micro,
            "start_ns": T0 + a * US, "end_ns": T0 + b * US, "timing": "wall"}


def records(rank):
    """One step of 100 µs. attn: reduce_scatter launched at 60 µs, waited on; all_gather at 80 µs.
    Rank 1 launches the reduce_scatter 2 µs later (the straggler) and waits longer on the gather."""
    late = 2 if rank == 1 else 0
    rs_wait = (65, 70) if rank == 0 else (63, 70)
    ag_wait = (90, 92) if rank == 0 else (90, 95)
    return [
        {"kind": "hook", "rank": rank, "step": 0, "micro_step": 0, "label": "attn", "position": 0,
         "t_ns": T0 + 50 * US},
        region(rank, "forward", 0, 30), region(rank, "backward", 30, 60), region(rank, "optimizer", 60, 100),
        region(rank, "update:attn", 70, 80),
        coll(rank, "attn", "reduce", "reduce_scatter", 0, 60 + late, *rs_wait, 69 + late / 4),
        coll(rank, "attn", "gather", "all_gather", 1, 80, *ag_wait, ag_wait[1] - 1),
        coll(rank, "scalars", "allreduce", "all_reduce", 2, 85, None, None, 88, nbytes=400),
        {"kind": "step", "rank": rank, "step": 0, "loss": 2.5, "start_ns": T0, "end_ns": T0 + 100 * US,
         "tokens": 128},
    ]


def make_run(d, ranks=(0, 1), world_size=2, torn=False, summary=True, skip_events=()):
    write_run(d, {r: None if r in skip_events else records(r) for r in ranks}, world_size=world_size,
                 summary={"status": "completed", "backend": "gloo", "device": "cpu", "steps": 1} if summary else None,
                 config={"args": {"preset": "tiny"}, "scatter_order": ["attn", "scalars"]},
                 meta={"backend": "gloo", "device": "cpu"})
    if torn:
        for r in ranks:
            if r not in skip_events:
                with open(os.path.join(d, f"rank{r}", "events.jsonl"), "a") as f:
                    f.write('{"kind": "collective", "rank": 0, "lab')
    return d


@pytest.fixture()
def run(tmp_path):
    return load_path(make_run(str(tmp_path / "run")))


def test_frames_from_records(run):
    assert run.source == "run" and run.ranks == [0, 1] and run.world_size == 2 and run.problems == []
    assert run.backend == "gloo" and run.config["config"]["scatter_order"] == ["attn", "scalars"]
    assert len(run.steps) == 2 and run.steps["loss"].tolist() == [2.5, 2.5]
    assert len(run.collectives) == 6 and set(run.collectives["label"]) == {"attn", "scalars"}
    assert len(run.regions) == 8 and len(run.hooks) == 2
    # compute = forward, backward, update:* — not the optimizer container that holds the waits
    assert sorted(run.compute.loc[run.compute["rank"] == 0, "name"]) == ["backward", "forward", "update:attn"]


def test_exposure_is_blocked_wait_time(run):
    t = exposure.collective_table(run).set_index(["rank", "label", "op"])
    # blocked from the wait until completion: rank 0's reduce_scatter waits 65 → 70 and completes at 69
    assert t.loc[(0, "attn", "reduce_scatter"), "exposed_ns"] == 4 * US
    assert t.loc[(0, "attn", "reduce_scatter"), "wake_delay_ns"] == 1 * US
    assert t.loc[(1, "attn", "reduce_scatter"), "exposed_ns"] == 6.5 * US  # 63 → 69.5
    assert t.loc[(0, "attn", "all_gather"), "exposed_ns"] == 1 * US  # 90 → 91 of the wait 90 → 92
    assert t.loc[(0, "scalars", "all_reduce"), "exposed_ns"] == 0  # never waited on
    assert t.loc[(0, "scalars", "all_reduce"), "wake_delay_ns"] == 0
    # launch → completion 9 µs, 4 of them exposed; the span [60, 69) meets no compute ([0, 60), [70, 80)),
    # so none of it is hidden: the 5 µs not waited on were not computed either
    assert t.loc[(0, "attn", "reduce_scatter"), "duration_ns"] == 9 * US
    assert t.loc[(0, "attn", "reduce_scatter"), "hidden_ns"] == 0
    assert t.loc[(0, "attn", "reduce_scatter"), "hidden_pct"] == 0
    # transfer time = min over ranks of (end − call): rank 1 arrived last (62 → 69.5 = 7.5 µs)
    assert t.loc[(0, "attn", "reduce_scatter"), "transfer_ns"] == 7.5 * US
    algbw = 8000 / (7.5 * US)
    assert t.loc[(0, "attn", "reduce_scatter"), "algbw_gbps"] == pytest.approx(algbw)
    assert t.loc[(0, "attn", "reduce_scatter"), "busbw_gbps"] == pytest.approx(algbw * 0.5)
    assert t.loc[(0, "scalars", "all_reduce"), "busbw_gbps"] == pytest.approx(400 / (3 * US) * 1.0)


def test_label_stats_and_summary(run):
    per = exposure.label_stats(exposure.collective_table(run)).set_index(["rank", "label"])
    assert per.loc[(0, "attn"), "count"] == 2 and per.loc[(0, "attn"), "bytes"] == 16000
    assert per.loc[(0, "attn"), "exposed_ms"] == pytest.approx(0.005)  # 4 + 1 µs
    assert per.loc[(1, "attn"), "exposed_ms"] == pytest.approx(0.0105)  # 6.5 + 4 µs
    doc = summarize(run)
    a = doc["labels"]["attn"]
    assert a["op"] == "reduce_scatter+all_gather" and a["count_per_rank"] == 2 and a["bytes"] == 8000
    assert a["count"] == 4 and isinstance(a["count"], int)  # all ranks: an integer
    assert a["exposed_ms"] == pytest.approx((0.005 + 0.0105) / 2, abs=5e-5)  # rounded to 0.1 µs
    assert a["exposed_ms_by_rank"] == {"0": pytest.approx(0.005), "1": pytest.approx(0.0105)}
    assert a["wake_delay_ms"] == pytest.approx((0.002 + 0.0015) / 2, abs=5e-5)  # (1 + 1) and (0.5 + 1) µs
    # durations 9 + 11 (rank 0) + 7.5 + 14 (rank 1) = 41.5 µs, exposed 4 + 1 + 6.5 + 4 = 15.5 µs; no span
    # meets compute, so nothing is hidden (26 µs are neither computed nor waited on before completion)
    assert a["hidden_pct"] == 0.0
    assert a["mean_ms"] == pytest.approx(41.5 / 4 / 1000, abs=5e-5)  # rounded to 0.1 µs
    # a CPU run directory: durations are launch to completion, and the per-rank overlap is over the recorded
    # spans (comm [60, 69) ∪ [80, 91) on rank 0 never meets compute [0, 60) ∪ [70, 80)), not HTA's or a device one
    assert doc["duration_basis"] == "launch to completion (run directory)" and doc["schema_version"] == 13
    assert doc["recorded_comm_overlap_pct_by_rank"] == {"0": 0.0, "1": 0.0}
    assert "hta_comm_overlap_pct_by_rank" not in doc and "device_comm_overlap_pct_by_rank" not in doc
    assert list(doc["labels"]) == ["attn", "scalars"]  # most exposed first
    assert doc["hta"]["status"] == "skipped" and doc["ranks"] == 2
    json.dumps(doc, allow_nan=False)  # plain JSON: no NaN, no numpy scalars


def test_skew_and_stragglers(run):
    sk = waiting.instances(run.collectives)
    rs = sk[sk["seq"] == 0].iloc[0]
    assert rs["skew_ns"] == 2 * US and rs["last_rank"] == 1 and rs["wait_caused_ns"] == 2 * US
    st = waiting.by_rank(sk, run.ranks)
    assert st.iloc[0]["rank"] == 1 and st.iloc[0]["score"] == 1.0


def test_step_breakdown_and_overlap(run):
    br = timeline.step_breakdown(run).set_index("rank")
    # rank 0: compute = forward+backward+update = 70 µs; waits until completion 4 + 1 = 5 µs; idle the rest,
    # the 2 µs of waiting after completion included
    assert br.loc[0, "compute_ns"] == 70 * US and br.loc[0, "exposed_comm_ns"] == 5 * US
    assert br.loc[0, "idle_ns"] == 25 * US and br.loc[0, "step_ns"] == 100 * US
    ov = timeline.comm_overlap_by_rank(run).set_index("rank")
    # rank 0 comm in flight [60, 69) ∪ [80, 91) ∪ [85, 88) = 20 µs, of which [70, 80) compute overlaps 0
    assert ov.loc[0, "comm_ns"] == 20 * US and ov.loc[0, "overlapped_ns"] == 0
    assert ov.loc[0, "comm_overlap_pct"] == 0


def test_torn_last_line_is_ignored(tmp_path):
    tr = load_path(make_run(str(tmp_path / "r"), torn=True))
    assert len(tr.collectives) == 6
    assert any("torn" in p for p in tr.problems)


@pytest.mark.parametrize("order", [sorted, lambda names: sorted(names, reverse=True)])
def test_zero_padded_rank_folders_are_not_ranks(tmp_path, monkeypatch, order):
    """Stray folders beside `rank1/`: `rank01/` (empty), `rank001/` (a copy of rank 1 with its events cut),
    `rank1` + newline, `rank1` + an Arabic-Indic zero. The recorder writes ranks in ASCII decimal without
    leading zeros, so none is a second rank 1 (or a rank 10) replacing the real one, in either listing order;
    each is said not read."""
    import shutil

    d = make_run(str(tmp_path / "r"))
    os.mkdir(os.path.join(d, "rank01"))
    shutil.copytree(os.path.join(d, "rank1"), os.path.join(d, "rank001"))
    open(os.path.join(d, "rank001", "events.jsonl"), "w").close()
    for stray in ("rank1\n", "rank1\u0660"):
        os.mkdir(os.path.join(d, stray))
    listdir = os.listdir
    monkeypatch.setattr(os, "listdir", lambda p=".": order(listdir(p)))
    tr = load_path(d)
    assert tr.ranks == [0, 1] and len(tr.collectives) == 6
    said = sorted(p for p in tr.problems if "not read as a rank" in p)
    assert len(said) == 4 and tr.problems == [p for p in tr.problems if "not read as a rank" in p]


def test_rank_without_events_is_a_problem_not_a_failure(tmp_path):
    tr = load_path(make_run(str(tmp_path / "r"), ranks=(0, 1, 2), world_size=4, skip_events=(2,)))
    assert tr.ranks == [0, 1] and tr.world_size == 4
    assert any("rank 2: no events.jsonl" in p for p in tr.problems)
    assert any("rank(s) 3 of" in p for p in tr.problems)


def test_an_empty_events_log_is_a_problem_and_its_rank_covers_no_step(tmp_path):
    from commscope.analyze.step_coverage import coverage_notes

    d = make_run(str(tmp_path / "r"))
    open(os.path.join(d, "rank1", "events.jsonl"), "w").close()
    tr = load_path(d)
    assert "rank 1: events.jsonl holds no record" in tr.problems
    note = coverage_notes(tr.steps, [0, 1])[0]
    assert note.startswith("Rank 1's records cover no step (0 of ") and "no step only" not in note


def test_steps_selection(tmp_path):
    tr = load_path(make_run(str(tmp_path / "r")), steps=(1, 2))
    assert len(tr.collectives) == 0 and len(tr.steps) == 0


@pytest.mark.parametrize("mutate, message", [
    (lambda d: json.dump({"schema_version": 2}, open(os.path.join(d, "summary.json"), "w")),
     r"schema_version 2; this commscope reads version <= 1 \(upgrade commscope\)"),
    (lambda d: json.dump({"schema_version": "1", "rank": 0, "world_size": 2},
                         open(os.path.join(d, "rank0", "meta.json"), "w")),
     "has schema_version '1', not an integer version number"),
    (lambda d: json.dump({"schema_version": 1, "rank": 0, "world_size": 4},
                         open(os.path.join(d, "rank0", "meta.json"), "w")), "disagree on world_size"),
    (lambda d: json.dump({"schema_version": 1, "rank": 1, "world_size": 2},
                         open(os.path.join(d, "rank0", "meta.json"), "w")), "says rank 1"),
    (lambda d: open(os.path.join(d, "rank0", "events.jsonl"), "ab").write(b"\xff\xfe garbage\n{}\n"),
     "not UTF-8"),
    (lambda d: open(os.path.join(d, "summary.json"), "w").write('{"schema_version": 1, '), "not valid JSON"),
])
def test_bad_run_dirs(tmp_path, mutate, message):
    d = make_run(str(tmp_path / "r"))
    mutate(d)
    with pytest.raises(UserError, match=message):
        load_path(d)


def test_progress_counts_rank_folders_then_their_profiler_traces():
    calls = []
    load_path(os.path.join(TESTS, "data", "layout_h200", "standard"),
              progress=lambda i, n: calls.append((i, n)))
    assert calls == [(1, 2), (2, 2)]  # one rank folder, then its trace.json.gz


def _two_step_records(rank):
    """Step 0 as in records(); step 1 starts 30 µs after step 0 ends (the gap) and computes from 10 µs
    into the step (the start delay): forward [140, 160), backward [160, 200) of a step [130, 230)."""
    return records(rank) + [
        region(rank, "forward", 140, 160, step=1), region(rank, "backward", 160, 200, step=1),
        {"kind": "step", "rank": rank, "step": 1, "loss": 2.0, "start_ns": T0 + 130 * US,
         "end_ns": T0 + 230 * US, "tokens": 128}]


def test_step_gaps_measure_the_gap_and_the_start_delay(tmp_path):
    from commscope.analyze.step_gaps import gap_summary, step_gaps
    from reports.report_terminal import print_report_summary
    from rich.console import Console

    d = str(tmp_path / "r")
    write_run(d, {r: _two_step_records(r) for r in (0, 1)}, world_size=2,
              summary={"status": "completed", "backend": "gloo", "device": "cpu", "steps": 2},
              config={"args": {"preset": "tiny"}}, meta={"backend": "gloo", "device": "cpu"})
    tr = load_path(d)
    g = step_gaps(tr)
    assert g["rank"].tolist() == [0, 1] and g["step"].tolist() == [1, 1]  # a first step has no row
    assert g["gap_ns"].tolist() == [30 * US] * 2 and g["start_delay_ns"].tolist() == [10 * US] * 2
    assert g["period_ns"].tolist() == [130 * US] * 2
    assert g["host_pct"].tolist() == pytest.approx([100 * 40 / 130] * 2)
    s = gap_summary(g).set_index("rank")
    assert s.loc[0, "gap_median_ms"] == pytest.approx(0.03) and s.loc[1, "start_delay_median_ms"] == pytest.approx(0.01)
    doc = summarize(tr, with_hta=False)
    assert doc["step_boundaries"][0] == {"rank": 0, "steps": 1, "gap_median_ms": 0.03, "gap_max_ms": 0.03,
                                         "start_delay_median_ms": 0.01, "host_pct": 30.77, "excluded_steps": 0}
    by_step = {(x["rank"], x["step"]): x for x in doc["steps"]}
    assert by_step[(0, 0)]["gap_before_ms"] is None and by_step[(0, 1)]["gap_before_ms"] == 0.03
    assert by_step[(1, 1)]["start_delay_ms"] == 0.01
    console = Console(record=True, width=140)
    print_report_summary(doc, console)
    text = console.export_text()
    assert "Host time at step boundaries" in text and "30.8" in text


def test_step_gaps_skip_the_terminal_table_below_two_percent(run):
    from reports.report_terminal import print_report_summary
    from rich.console import Console

    doc = summarize(run, with_hta=False)  # one step per rank: no boundary to measure
    assert doc["step_boundaries"] == []
    console = Console(record=True, width=140)
    print_report_summary(doc, console)
    assert "step boundaries" not in console.export_text()


def test_step_gaps_of_host_step_ranges_are_for_run_directories_only():
    """A profiler trace whose steps are host ProfilerStep ranges (no device windows: tests/unit/
    test_step_gaps_device.py has those) has no host step records, so no boundary rows."""
    from commscope.analyze.step_gaps import step_gaps
    from report_trace import make_trace

    tr = make_trace(steps=(0, 1, 2))
    tr.steps.loc[tr.steps["step"] == 1, "start_ns"] += 200 * US
    assert step_gaps(tr).empty
    tr.source = "run"  # the same frames as a run directory: the 0.2 ms gap before step 1 is measured
    assert step_gaps(tr).set_index(["rank", "step"]).loc[(0, 1), "gap_ns"] == 200 * US


def test_a_number_past_a_double_leaves_its_record_out_and_no_json_stays_refused(tmp_path):
    """1.5e400 is a JSON number (a double cannot hold it): its record is left out like any number out of
    range, and the run loads. The bare NaN / Infinity that Python's json.dumps writes are no JSON, but a line
    that is an object but for them is a record with a non-finite value: left out, named, the run loads. A
    line that is no JSON object on any terms (a lone surrogate, broken UTF-8) is corruption."""
    d = make_run(str(tmp_path / "r"))
    path = os.path.join(d, "rank1", "events.jsonl")
    lines = open(path, "rb").read().split(b"\n")
    i = next(k for k, ln in enumerate(lines) if b'"kind": "collective"' in ln or b'"kind":"collective"' in ln)
    rec = json.loads(lines[i])
    huge = json.dumps(rec).replace(f'"end_ns": {rec["end_ns"]}', '"end_ns": 1.5e400').encode()
    with open(path, "wb") as f:
        f.write(b"\n".join(lines[:i] + [huge] + lines[i + 1:]))
    tr = load_path(d)
    assert len(tr.collectives) == 5 and tr.ranks == [0, 1]
    assert f"rank 1: events.jsonl: ignored 1 collective record: a number beyond a double's range (line {i + 1}: " \
           "end_ns=inf)" in tr.problems
    # in a field that is no time (the stream), the record is left out all the same, never kept as inf
    other = json.dumps({**rec, "stream": 0}).replace('"stream": 0', '"stream": -1.5e400').encode()
    with open(path, "wb") as f:
        f.write(b"\n".join(lines[:i] + [other] + lines[i + 1:]))
    tr = load_path(d)
    assert len(tr.collectives) == 5 and any(f"line {i + 1}: stream=-inf" in p for p in tr.problems)
    for token, said in ((b"NaN", "end_ns=nan"), (b"-Infinity", "end_ns=-inf"), (b"[NaN]", "inside a nested value")):
        with open(path, "wb") as f:
            f.write(b"\n".join(lines[:i] + [huge.replace(b"1.5e400", token)] + lines[i + 1:]))
        tr = load_path(d)
        assert len(tr.collectives) == 5 and tr.ranks == [0, 1]
        assert (f"rank 1: events.jsonl: ignored 1 collective record: NaN or Infinity, which JSON has no value for "
                f"(Python's json.dumps writes them for a non-finite float) (line {i + 1}: {said})") in tr.problems
    # no JSON object on any terms stays refused: a lone surrogate, broken UTF-8, a constant JSON never had
    for bad, why in ((huge.replace(b"1.5e400", b"NaNa"), "not valid JSON"),
                     (huge.replace(b'"float32"', b'"\\ud800"'), "not valid JSON"),
                     (huge.replace(b'"float32"', b'"\xed\xa0\x80"'), "not UTF-8")):
        with open(path, "wb") as f:
            f.write(b"\n".join(lines[:i] + [bad] + lines[i + 1:]))
        with pytest.raises(UserError, match=f"line {i + 1} is {why}"):
            load_path(d)


def test_a_profiler_trace_at_the_top_of_a_run_is_said_not_read(tmp_path):
    """The run's traces are rank<N>/trace.json.gz: one dropped beside the rank folders is not read, and a
    problem line says so; the run's own documents and a user's notes raise none."""
    d = make_run(str(tmp_path / "r"))
    for name in ("worker0.pt.trace.json", "rank1.json.gz", "hparams.json"):
        open(os.path.join(d, name), "w").write("{}")
    os.mkdir(os.path.join(d, "old.json.gz"))  # a folder, whatever its name: no trace
    open(os.fsencode(os.path.join(d, "tr")) + b"\xffce.json.gz", "w").write("{}")  # a name that is no UTF-8
    tr = load_path(d)
    said = [p for p in tr.problems if "not read" in p]
    assert said == [f"{os.path.join(d, n)}: not read (a run directory's profiler traces are rank<N>/trace.json.gz; "
                    "a folder holding only traces is read as Kineto traces)" for n in ("rank1.json.gz", "tr\\xffce.json.gz",
                                                                                      "worker0.pt.trace.json")]
    assert len(tr.collectives) == 6
    doc = summarize(tr, with_hta=False)
    import orjson

    assert orjson.loads(orjson.dumps(doc))["problems"][:3] == said  # report --json can carry every line


def test_a_record_timed_outside_its_ranks_recording_is_left_out(tmp_path):
    """A collective "ending" 50 minutes after its rank's status.json was written, and a region an hour and a
    half before meta.json's start: no measurement, so left out with a problem line; records inside the
    window (30 s past the status) stay. A run without those two times keeps every record."""
    evs = {r: records(r) for r in (0, 1)}
    late = dict(evs[1][5])
    late.update(seq=7, end_ns=late["end_ns"] + 50 * 60 * 10**9, wait_end_ns=late["wait_end_ns"] + 50 * 60 * 10**9)
    early = region(1, "compute:early", 0, 1)
    early.update(start_ns=T0 - 90 * 60 * 10**9, end_ns=T0 - 90 * 60 * 10**9 + 1000)
    near = region(1, "compute:near", 0, 1)
    near.update(start_ns=T0 + 30 * 10**9, end_ns=T0 + 30 * 10**9 + 1000)
    evs[1] += [late, early, near]
    run = write_run(tmp_path / "run", evs, meta={"started_ns": T0 - 1000},
                    status={"status": "completed", "error": None, "last_step": 0, "ended_ns": T0 + 200 * US})
    trace = load_path(str(run))
    c = trace.collectives
    assert 7 not in set(c.loc[c["rank"] == 1, "seq"]) and len(c) == 6
    assert set(trace.regions["name"]) >= {"compute:near"} and "compute:early" not in set(trace.regions["name"])
    said = [p for p in trace.problems if "outside the rank's recording" in p]
    assert sorted(said) == sorted([
        "rank 1: events.jsonl: ignored 1 collective record: a time outside the rank's recording (before meta.json "
        f"started_ns or after status.json ended_ns, by more than a minute) (wait_end_ns={late['wait_end_ns']})",
        "rank 1: events.jsonl: ignored 1 region record: a time outside the rank's recording (before meta.json "
        f"started_ns or after status.json ended_ns, by more than a minute) (start_ns={early['start_ns']})"])
    plain = load_path(str(write_run(tmp_path / "plain", evs)))
    assert len(plain.collectives) == 7 and "compute:early" in set(plain.regions["name"])


def test_a_replaced_run_left_aside_is_said_not_read(tmp_path):
    """`run --overwrite` moves the old run into .commscope-previous-<id>/ until the new run's first step;
    a launcher killed before then leaves it there, where nothing else would ever mention it."""
    d = make_run(str(tmp_path / "r"))
    aside = os.path.join(d, ".commscope-previous-20261207-1"), os.path.join(d, ".commscope-unfinished-x")
    for a in aside:
        os.makedirs(os.path.join(a, "rank0"))
    tr = load_path(d)
    said = [p for p in tr.problems if ".commscope-" in p]
    assert said == [f"{aside[0]}/: not read: the run this one replaced, kept until the new run's first step; still "
                    "here after it, its launcher was killed before then (move its files back in place of this "
                    "run's, or remove it)"]  # an unfinished run's folder is what `run` itself names
    assert len(tr.collectives) == 6


def test_records_of_kinds_this_reader_does_not_know_are_skipped_and_counted(tmp_path):
    """The format may grow: a record of another kind (or none) is no error and changes no frame, but is
    counted, so a file of another tool's records never reads as a rank that recorded nothing."""
    d = make_run(str(tmp_path / "r"))
    path = os.path.join(d, "rank1", "events.jsonl")
    with open(path, "ab") as f:
        f.write(b'{"kind": "checkpoint", "rank": 1, "t_ns": 5}\n{"rank": 1}\n{"kind": 7}\n')
    tr = load_path(d)
    assert len(tr.collectives) == 6 and tr.ranks == [0, 1]
    n = sum(1 for _ in open(path))
    assert (f"rank 1: events.jsonl: ignored 3 lines: a record of a kind this commscope does not read (a newer "
            f"recorder's, or another tool's) (first at line {n - 2}: kind='checkpoint')") in tr.problems


def test_a_run_without_rank_folders_names_the_replaced_run_kept_aside(tmp_path):
    """`run --overwrite` killed before the new run's first rank folder: the old run is intact in
    .commscope-previous-<id>/, and the one error line says where."""
    d = tmp_path / "run"
    (d / ".commscope-previous-abc" / "rank0").mkdir(parents=True)
    (d / "commscope-run.json").write_text('{"schema_version": 1}')
    with pytest.raises(UserError, match=r"without rank\*/ folders: nothing was recorded; .*\.commscope-previous-abc/: "
                                        r"not read: the run this one replaced"):
        load_path(str(d))
