"""A corpus of broken, hostile and oversized inputs, generated here in tmp_path, each given to every reading
command (report --json, report -o, doctor, hooks, layout, export, compare). Every command answers
cleanly — exit 0 with the right figures (the problem listed in `problems` where the kind says so), or exit
2 with one `commscope: error:` line — and never writes into its input (hashed before and after). The
kinds whose point is their size (gzip bombs, a huge events.jsonl, a world size at the limit) run in a
child process watched for TIME_LIMIT_S per command and RSS_LIMIT (tests/bad_inputs.py); the rest run
in-process.

tests/test_bad_input.py covers the committed adversarial corpus (tests/adversarial/); this file covers the
kinds that are easier to generate than to commit (FIFOs, symlink loops, sizes), and the parsers' typing
rules with hypothesis.
"""
from __future__ import annotations

import gzip
import json
import math
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bad_inputs import RSS_LIMIT, TIME_LIMIT_S, run_all, run_limited, tree_digest
from paths import TESTS

DATA = TESTS / "data"
BASE_RUN = DATA / "layout" / "transposed"  # 2 gloo ranks, 4 steps, events + meta + status + profiler traces
LOGS = DATA / "modded-nanogpt-logs" / "baseline"
LOADERS = ("report-json", "report-html", "doctor", "hooks", "layout", "export")


# ---- building blocks -----------------------------------------------------------------------------------
def base_run(tmp: Path) -> Path:
    run = tmp / "run"
    shutil.copytree(BASE_RUN, run)
    return run


def records(run: Path, rank: int = 0) -> list[dict]:
    return [json.loads(ln) for ln in (run / f"rank{rank}" / "events.jsonl").read_text().splitlines() if ln.strip()]


def write_events(run: Path, rank: int, lines: list) -> None:
    (run / f"rank{rank}" / "events.jsonl").write_text(
        "".join((ln if isinstance(ln, str) else json.dumps(ln)) + "\n" for ln in lines))


def edit_first(run: Path, kind: str, change: dict, rank: int = 0) -> Path:
    """The run with the first `kind` record of `rank` changed by `change` (a None value deletes the key)."""
    recs = records(run, rank)
    i = next(i for i, r in enumerate(recs) if r["kind"] == kind)
    recs[i] = {k: v for k, v in {**recs[i], **change}.items() if v is not None or k not in change}
    write_events(run, rank, recs)
    return run


def edit_json(path: Path, change: dict) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **change}))


def replace_with(path: Path, what: str) -> None:
    """Put a FIFO, a directory, a symlink loop or a dangling symlink where the file `path` is."""
    if path.exists() or path.is_symlink():
        path.unlink()
    if what == "fifo":
        os.mkfifo(path)
    elif what == "dir":
        path.mkdir()
    elif what == "loop":
        os.symlink(path.name, path)  # points at itself: ELOOP
    elif what == "dangling":
        os.symlink("nowhere", path)


def in_run(fn: Callable[[Path], object]) -> Callable[[Path], Path]:
    def build(tmp: Path) -> Path:
        run = base_run(tmp)
        fn(run)
        return run
    return build


def logs_with(final_line: str, good: bool = True) -> Callable[[Path], Path]:
    """A folder of modded-nanogpt logs: one genuine (when `good`), one whose final line is `final_line`."""
    def build(tmp: Path) -> Path:
        d = tmp / "logs"
        d.mkdir()
        src = sorted(LOGS.glob("*.txt"))[0]
        if good:
            shutil.copy(src, d / "good.txt")
        text = src.read_text()
        last = [ln for ln in text.splitlines() if ln.startswith("step:") and "val_loss" in ln][-1]
        (d / "bad.txt").write_text(text.replace(last, final_line))
        return d
    return build


def summary_run(change: dict) -> Callable[[Path], Path]:
    return in_run(lambda run: edit_json(run / "summary.json", change))


def gzip_bomb(out: Path, gib: float) -> None:
    """A multi-member .gz of spaces inflating to `gib` GiB (~1 KB per MiB, so 16 GiB is ~17 MB)."""
    member = gzip.compress(b" " * 2 ** 26, 9)  # 64 MiB
    with open(out, "wb") as f:
        for _ in range(int(gib * 16)):
            f.write(member)


# ---- the corpus ----------------------------------------------------------------------------------------
@dataclass
class Kind:
    build: Callable[[Path], Path]
    expect: str  # "0": every command exits 0; "2": every loading command refuses; "02": either, cleanly
    problem: str | None = None  # a substring of report --json's problems (then report --json exits 0)
    message: str | None = None  # a substring of the refusal line of the loading commands
    compare: str = "02"  # compare reads only summary.json / logs: its own expectation
    big: bool = False  # run in a watched child process
    env: dict[str, str] = field(default_factory=dict)


def _trace_dir(tmp: Path, name: str, data: bytes) -> Path:
    d = tmp / "traces"
    d.mkdir()
    (d / name).write_bytes(data)
    return d


def _fifo_input(tmp: Path) -> Path:
    p = tmp / "rank0.json"
    os.mkfifo(p)
    return p


def _trace_dir_with(tmp: Path, what: str) -> Path:
    d = tmp / "traces"
    d.mkdir()
    shutil.copy(BASE_RUN / "rank0" / "trace.json.gz", d / "rank1.json.gz")
    replace_with(d / "rank0.json", what)
    return d


def _link(tmp: Path, what: str) -> Path:
    p = tmp / "input.json"
    replace_with(p, what)
    return p


def _dup10(run: Path) -> None:
    text = (run / "rank0" / "events.jsonl").read_text()
    (run / "rank0" / "events.jsonl").write_text(text * 10)


def _step_twice(run: Path) -> None:
    recs = records(run)
    s = next(r for r in recs if r["kind"] == "step")
    write_events(run, 0, [*recs, {**s, "loss": 1.0}])


def _collective_twice(run: Path) -> None:
    recs = records(run)
    c = next(r for r in recs if r["kind"] == "collective")
    write_events(run, 0, [*recs, {**c, "call_ns": c["call_ns"] + 1, "return_ns": c["return_ns"] + 1}])


def _negative_step(run: Path) -> None:
    s = next(r for r in records(run) if r["kind"] == "step")
    edit_first(run, "step", {"end_ns": s["start_ns"] - 10**6})


def _negative_region(run: Path) -> None:
    r = next(r for r in records(run) if r["kind"] == "region")
    edit_first(run, "region", {"end_ns": r["start_ns"] - 1})


def _return_before_call(run: Path) -> None:
    c = next(r for r in records(run) if r["kind"] == "collective")
    edit_first(run, "collective", {"return_ns": c["call_ns"] - 5})


def _events_lines(lines: list[bytes]) -> Callable[[Path], None]:
    def fn(run: Path) -> None:
        good = (run / "rank0" / "events.jsonl").read_bytes().splitlines(keepends=True)
        (run / "rank0" / "events.jsonl").write_bytes(b"".join(good[:3]) + b"".join(lines) + b"".join(good[3:]))
    return fn


def _append_events(tail: bytes) -> Callable[[Path], None]:
    def fn(run: Path) -> None:
        with open(run / "rank0" / "events.jsonl", "ab") as f:
            f.write(tail)
    return fn


def _deep_fr(run: Path) -> None:
    (run / "flight_recorder").mkdir()
    (run / "flight_recorder" / "rank_0").write_text('{"entries": ' + "[" * 100_000 + "]" * 100_000 + "}")


def _fr_entries(entries: list) -> Callable[[Path], None]:
    def fn(run: Path) -> None:
        (run / "flight_recorder").mkdir()
        (run / "flight_recorder" / "rank_0").write_text(json.dumps({"entries": entries}))
    return fn


def _watchdog(inflight: list) -> Callable[[Path], None]:
    def fn(run: Path) -> None:
        (run / "rank0" / "watchdog.json").write_text(json.dumps(
            {"schema_version": 1, "rank": 0, "world_size": 2, "timeout_s": 3, "fired_ns": 1,
             "inflight": inflight, "last_step": 2, "stacks": {}}))
    return fn


def _big_dup_events(tmp: Path) -> Path:
    """rank0/events.jsonl grown to BIG_EVENTS_MB by repeating its lines (a file concatenated with itself)."""
    run = base_run(tmp)
    p = run / "rank0" / "events.jsonl"
    text = p.read_bytes()
    with open(p, "wb") as f:
        for _ in range(max(1, BIG_EVENTS_MB * 2 ** 20 // len(text))):
            f.write(text)
    return run


def _many_events(tmp: Path) -> Path:
    """More distinct records than the limit (set low by the kind's env): refused, naming the limit."""
    run = base_run(tmp)
    h = next(r for r in records(run) if r["kind"] == "hook")
    with open(run / "rank0" / "events.jsonl", "a") as f:
        for i in range(60_000):
            f.write(json.dumps({**h, "t_ns": h["t_ns"] + i + 1, "position": i}) + "\n")
    return run


def _long_line(tmp: Path) -> Path:
    """An events.jsonl whose last line is 300 MB of zeros with no newline (a file system's zeros after a
    crash): sparse, so it costs no disk. A torn last line, read past block by block, memory bounded."""
    run = base_run(tmp)
    with open(run / "rank0" / "events.jsonl", "ab") as f:
        f.truncate(300 * 2 ** 20)
    return run


BIG_EVENTS_MB = int(os.environ.get("COMMSCOPE_TEST_BIG_EVENTS_MB", "256"))  # the drill used 1024

KINDS: dict[str, Kind] = {
    # what the path is
    "missing": Kind(lambda t: t / "nope", "2", compare="2"),
    "empty_dir": Kind(lambda t: (t / "e").mkdir() or t / "e", "2", compare="2"),
    "plain_text": Kind(lambda t: _trace_dir(t, "notes.txt", b"hello") / "notes.txt", "2", compare="2"),
    "fifo_named_rank0_json": Kind(_fifo_input, "2", message="FIFO", compare="2"),
    # a name that exists but leads nowhere is said as such, not "does not exist" (a typo to look for)
    "symlink_loop_input": Kind(lambda t: _link(t, "loop"), "2", message="cannot resolve it, a loop of symbolic links",
                               compare="2"),
    "dangling_symlink_input": Kind(lambda t: _link(t, "dangling"), "2", compare="2",
                                   message="is a symbolic link to nowhere, which does not exist"),
    # in a folder of traces, a trace's name on something that is no file is skipped unopened and said, as a
    # damaged trace is: the other ranks' traces load
    "trace_dir_fifo_rank0": Kind(lambda t: _trace_dir_with(t, "fifo"), "02", problem="rank0.json: a FIFO (named pipe), not a file; skipped", compare="2"),
    "trace_dir_loop_rank0": Kind(lambda t: _trace_dir_with(t, "loop"), "02", problem="rank0.json: a symlink loop, not a file; skipped", compare="2"),
    "trace_dir_dangling_rank0": Kind(lambda t: _trace_dir_with(t, "dangling"), "02",
                                     problem="rank0.json: a symlink to a missing file, not a file; skipped", compare="2"),
    # files of a run directory that are not files
    "events_fifo": Kind(in_run(lambda r: replace_with(r / "rank0" / "events.jsonl", "fifo")), "02",
                        problem="events.jsonl is a FIFO"),
    "events_dir": Kind(in_run(lambda r: replace_with(r / "rank0" / "events.jsonl", "dir")), "02",
                       problem="events.jsonl is a directory"),
    "events_symlink_loop": Kind(in_run(lambda r: replace_with(r / "rank0" / "events.jsonl", "loop")), "02",
                                problem="symlink loop"),
    "meta_fifo": Kind(in_run(lambda r: replace_with(r / "rank0" / "meta.json", "fifo")), "2", message="FIFO"),
    "status_dir": Kind(in_run(lambda r: replace_with(r / "rank1" / "status.json", "dir")), "2"),
    "summary_loop": Kind(in_run(lambda r: replace_with(r / "summary.json", "loop")), "2"),
    "trace_gz_fifo": Kind(in_run(lambda r: replace_with(r / "rank0" / "trace.json.gz", "fifo")), "02",
                          problem="trace.json.gz is a FIFO"),
    # events.jsonl content
    "events_empty": Kind(in_run(lambda r: write_events(r, 0, [])), "02"),
    "events_blank_lines": Kind(in_run(lambda r: (r / "rank0" / "events.jsonl").write_text("\n \n\n")), "02"),
    "events_torn_last_line": Kind(in_run(lambda r: open(r / "rank0" / "events.jsonl", "a").write('{"kind": "st')),
                                  "0", problem="torn last line"),
    "events_garbage_line": Kind(in_run(_events_lines([b"not json\n"])), "2", message="line 4"),
    "events_non_utf8_line": Kind(in_run(_events_lines([b"\xff\xfe\n"])), "2", message="UTF-8"),
    "events_array_line": Kind(in_run(_events_lines([b"[1, 2]\n"])), "2", message="not a JSON object"),
    "events_nan_literal": Kind(in_run(_events_lines([b'{"kind": "step", "step": 9, "loss": NaN}\n'])), "0",
                               problem="NaN or Infinity, which JSON has no value for"),
    "events_duplicated_10x": Kind(in_run(_dup10), "0", problem="a copy of an earlier line"),
    "events_step_twice": Kind(in_run(_step_twice), "0", problem="a second record of the same step"),
    "events_collective_twice": Kind(in_run(_collective_twice), "0", problem="same (group, seq)"),
    "events_negative_step": Kind(in_run(_negative_step), "0", problem="negative duration (end_ns < start_ns)"),
    "events_negative_region": Kind(in_run(_negative_region), "0", problem="negative duration"),
    "events_return_before_call": Kind(in_run(_return_before_call), "0", problem="return_ns < call_ns"),
    "events_ns_string": Kind(in_run(lambda r: edit_first(r, "step", {"start_ns": "x"})), "0",
                             problem="start_ns is not an integer"),
    "events_ts_null": Kind(in_run(lambda r: edit_first(r, "hook", {"t_ns": None})), "0", problem="no t_ns"),
    "events_ts_bool": Kind(in_run(lambda r: edit_first(r, "hook", {"t_ns": True})), "0",
                           problem="t_ns is not an integer"),
    "events_ns_fraction": Kind(in_run(lambda r: edit_first(r, "region", {"start_ns": 1.5})), "0",
                               problem="start_ns is not an integer"),
    "events_step_1e30": Kind(in_run(lambda r: edit_first(r, "step", {"step": 10**30})), "0",
                             problem="step is not an integer"),
    "events_ns_over_int64": Kind(in_run(lambda r: edit_first(r, "collective", {"call_ns": 2**63})), "0",
                                 problem="call_ns is out of the int64 range"),
    "events_loss_string_nan": Kind(in_run(lambda r: edit_first(r, "step", {"loss": "NaN"})), "0",
                                   problem="loss is not a finite number"),
    "events_negative_bytes": Kind(in_run(lambda r: edit_first(r, "collective", {"bytes": -4})), "0",
                                  problem="bytes is out of range"),
    "events_label_number": Kind(in_run(lambda r: edit_first(r, "collective", {"label": 7})), "0",
                                problem="label is not a string"),
    "events_wrong_rank": Kind(in_run(lambda r: edit_first(r, "hook", {"rank": 5})), "0",
                              problem="its rank is not the folder's"),
    "events_unknown_kind": Kind(in_run(lambda r: edit_first(r, "hook", {"kind": "future"})), "0",
                                problem="a record of a kind this commscope does not read"),
    "events_line_over_limit": Kind(in_run(_events_lines([b'{"kind": "x", "pad": "' + b"a" * 2 ** 21 + b'"}\n'])),
                                   "2", message="COMMSCOPE_MAX_LINE_KB"),
    # a crash mid-append of a long line (or a file padded with zeros) tears the last line, whatever its length
    "events_torn_last_line_over_limit": Kind(in_run(_append_events(b"\0" * 2 ** 21)), "0",
                                             problem="ignored a torn last line"),
    "events_nested_too_deeply": Kind(in_run(_events_lines([b'{"kind": "x", "a": ' + b"[" * 5000 + b"]" * 5000
                                                           + b"}\n"])), "2", message="is JSON nested too deeply"),
    # the run directory's documents
    "meta_rank_string": Kind(in_run(lambda r: edit_json(r / "rank0" / "meta.json", {"rank": "one"})), "2",
                             message="rank is 'one'"),
    "meta_world_string": Kind(in_run(lambda r: edit_json(r / "rank0" / "meta.json", {"world_size": "four"})), "2",
                              message="world_size is 'four'"),
    "meta_world_1e9": Kind(in_run(lambda r: [edit_json(r / f"rank{k}" / "meta.json", {"world_size": 10**9})
                                             for k in (0, 1)]), "2", message="COMMSCOPE_MAX_WORLD_SIZE"),
    "meta_world_zero": Kind(in_run(lambda r: edit_json(r / "rank0" / "meta.json", {"world_size": 0})), "2"),
    "meta_rank_bool": Kind(in_run(lambda r: edit_json(r / "rank0" / "meta.json", {"rank": True})), "2"),
    "meta_clock_garbage": Kind(in_run(lambda r: edit_json(r / "rank0" / "meta.json", {"clock": {"error_ns": "x"}})),
                               "2", message="clock"),
    "summary_world_string": Kind(summary_run({"world_size": "four"}), "2", message="world_size is 'four'",
                                 compare="2"),
    "summary_losses_inf_string": Kind(summary_run({"losses": ["inf"]}), "2", compare="2"),
    "summary_negative_step_time": Kind(summary_run({"step_times_ms": [-5.0, 10.0]}), "2", compare="2"),
    "summary_step_times_inf_string": Kind(summary_run({"step_times_ms": ["inf"]}), "2", compare="2"),
    "summary_huge_number": Kind(summary_run({"tokens_per_s": 1e308}), "0", compare="0"),
    "status_status_number": Kind(in_run(lambda r: edit_json(r / "rank0" / "status.json", {"status": 5})), "2"),
    "status_last_step_string": Kind(in_run(lambda r: edit_json(r / "rank0" / "status.json", {"last_step": "x"})),
                                    "2"),
    "config_args_list": Kind(in_run(lambda r: edit_json(r / "config.json", {"args": [1, 2]})), "2"),
    "rank_folder_1e11": Kind(in_run(lambda r: (r / "rank99999999999").mkdir()), "2",
                             message="COMMSCOPE_MAX_WORLD_SIZE"),
    "rank_folder_outside_world": Kind(in_run(lambda r: shutil.copytree(r / "rank1", r / "rank5")), "2"),
    # gzip
    "trace_gz_garbage": Kind(in_run(lambda r: (r / "rank0" / "trace.json.gz").write_bytes(bytes(range(256)) * 8)),
                             "02"),
    "trace_gz_truncated": Kind(in_run(lambda r: (r / "rank0" / "trace.json.gz").write_bytes(
        (r / "rank0" / "trace.json.gz").read_bytes()[:5000])), "02"),
    "trace_gz_trailing_garbage": Kind(in_run(lambda r: open(r / "rank0" / "trace.json.gz", "ab").write(b"junk")),
                                      "02"),
    "trace_gz_small_bomb": Kind(lambda t: _trace_dir(t, "rank0.json.gz", gzip.compress(b" " * 300 * 2 ** 20, 9)),
                                "2", message="COMMSCOPE_MAX_GZIP_RATIO", compare="2"),
    "trace_gz_over_size_limit": Kind(lambda t: _trace_dir(t, "rank0.json.gz", gzip.compress(b" " * 3 * 2 ** 20)),
                                     "2", message="COMMSCOPE_MAX_TRACE_MB", compare="2",
                                     env={"COMMSCOPE_MAX_TRACE_MB": "2"}),
    # fault evidence
    "watchdog_seq_string": Kind(in_run(_watchdog([{"seq": "x", "group": "0"}])), "02"),
    "watchdog_seq_bool": Kind(in_run(_watchdog([{"seq": True, "group": "0"}])), "02"),
    "watchdog_fired_string": Kind(in_run(lambda r: (r / "rank0" / "watchdog.json").write_text(
        '{"fired_ns": "soon", "inflight": []}')), "02"),
    "flight_recorder_deep_nesting": Kind(in_run(_deep_fr), "02"),
    "flight_recorder_huge_shape": Kind(in_run(_fr_entries([{"collective_seq_id": 1, "profiling_name": "nccl:x",
                                                           "input_sizes": [[10**18] * 40]}])), "02"),
    "flight_recorder_seq_string": Kind(in_run(_fr_entries([{"collective_seq_id": "1"}])), "02"),
    "flight_recorder_over_doc_limit": Kind(in_run(_fr_entries([{"pad": "a" * 2 ** 21}])), "02",
                                           env={"COMMSCOPE_MAX_DOC_MB": "1"}),
    # speedrun logs (compare's input; the other commands refuse a folder of logs)
    "log_time_1.2.3": Kind(logs_with("step:2160/2160 val_loss:3.2798 train_time:1.2.3ms step_avg:61.45ms"),
                           "2", compare="0"),
    "log_loss_1e5e5": Kind(logs_with("step:2160/2160 val_loss:1e5e5 train_time:132739ms step_avg:61.45ms"),
                           "2", compare="0"),
    "log_loss_inf": Kind(logs_with("step:2160/2160 val_loss:inf train_time:132739ms step_avg:61.45ms"),
                         "2", compare="0"),
    "log_400_digits": Kind(logs_with("step:2160/2160 val_loss:3.2798 train_time:" + "9" * 400 + "ms"),
                           "2", compare="0"),
    "log_5000_digit_step": Kind(logs_with("step:" + "1" * 5000 + "/2160 val_loss:3.3 train_time:1ms"),
                                "2", compare="0"),
    "log_negative_time": Kind(logs_with("step:2160/2160 val_loss:3.2798 train_time:-5ms"), "2", compare="0"),
    "log_only_bad": Kind(logs_with("step:2160/2160 val_loss:inf train_time:1ms", good=False), "2", compare="2"),
    "log_fifo": Kind(lambda t: (logs_with("step:2160/2160 val_loss:3.3 train_time:5ms")(t),
                                os.mkfifo(t / "logs" / "pipe.log"))[0], "2", compare="0"),
    # sizes: in a watched child process
    "gzip_bomb_16g": Kind(lambda t: (gzip_bomb(t / "rank0.json.gz", 16), t / "rank0.json.gz")[1], "2",
                          message="COMMSCOPE_MAX_GZIP_RATIO", compare="2", big=True),
    "gzip_bomb_4g_in_run": Kind(in_run(lambda r: gzip_bomb(r / "rank0" / "trace.json.gz", 4)), "02", big=True),
    "events_big_duplicated": Kind(_big_dup_events, "0", problem="a copy of an earlier line", big=True),
    "events_over_record_limit": Kind(_many_events, "2", message="COMMSCOPE_MAX_EVENTS", big=True,
                                     env={"COMMSCOPE_MAX_EVENTS": "50000"}),
    "events_one_300mb_line": Kind(_long_line, "0", problem="ignored a torn last line", big=True),
    "rank_folder_1e11_watched": Kind(in_run(lambda r: (r / "rank99999999999").mkdir()), "2", big=True),
    "world_size_at_limit": Kind(in_run(lambda r: [edit_json(r / f"rank{k}" / "meta.json", {"world_size": 16_384})
                                                  for k in (0, 1)] and edit_json(r / "summary.json",
                                                                                 {"world_size": 16_384})),
                                "02", problem="no folder for rank(s) 2-16383", big=True),
}


def test_the_corpus_has_at_least_60_kinds():
    assert len(KINDS) >= 60


@pytest.fixture(scope="module")
def base_report(tmp_path_factory) -> dict:
    """report --json of the unbroken run: the figures a kind whose bad records are left out must keep."""
    tmp = tmp_path_factory.mktemp("base")
    res = run_all(base_run(tmp), tmp)
    assert res["report-json"]["code"] == 0
    return json.loads(res["report-json"]["stdout"])


@pytest.mark.parametrize("name", sorted(KINDS))
def test_every_command_answers_cleanly(name, tmp_path, monkeypatch, base_report):
    kind = KINDS[name]
    (tmp_path / "in").mkdir()
    path = kind.build(tmp_path / "in")
    out = tmp_path / "out"
    out.mkdir()
    before = tree_digest(path)
    if kind.big:
        res, rss, _ = run_limited(path, out, kind.env)
        assert rss < RSS_LIMIT, f"{name}: peak RSS {rss / 2 ** 30:.2f} GiB"
    else:
        for k, v in kind.env.items():
            monkeypatch.setenv(k, v)
        res = run_all(path, out)
    assert tree_digest(path) == before, f"{name}: a command wrote into its input"
    for cmd, r in res.items():
        assert r["seconds"] < TIME_LIMIT_S, (name, cmd, r["seconds"])
        assert "Traceback" not in r["stderr"], (name, cmd, r["stderr"][-3000:])
        assert r["code"] in (0, 2), (name, cmd, r["code"], r["stderr"][-2000:])
        if r["code"] == 2:
            lines = [ln for ln in r["stderr"].splitlines() if ln.strip()]
            assert len(lines) == 1 and lines[0].startswith("commscope: error: "), (name, cmd, r["stderr"])
        want = kind.compare if cmd == "compare" else kind.expect
        if want != "02":
            assert r["code"] == int(want), (name, cmd, r["code"], r["stderr"])
    if kind.message:
        assert any(kind.message in res[c]["stderr"] for c in LOADERS), (name, {c: res[c]["stderr"] for c in LOADERS})
    if kind.problem:
        assert res["report-json"]["code"] == 0, (name, res["report-json"]["stderr"])
        doc = json.loads(res["report-json"]["stdout"])
        assert any(kind.problem in p for p in doc["problems"]), (name, doc["problems"])
        for s in doc["steps"]:  # nothing negative folded into the figures
            assert s["step_ms"] >= 0 and s["compute_ms"] >= 0, (name, s)
    if name in ("events_duplicated_10x", "events_big_duplicated", "events_collective_twice", "events_step_twice",
                "events_unknown_kind"):
        doc = json.loads(res["report-json"]["stdout"])
        assert doc["labels"] == base_report["labels"] and doc["steps"] == base_report["steps"], name
    assert not os.path.exists("/tmp/commscope-pwned")


def test_a_left_out_record_is_left_out_of_the_figures(tmp_path, base_report):
    """A step whose end precedes its start is not a step of negative length: it is not a step at all."""
    (tmp_path / "in").mkdir()
    run = KINDS["events_negative_step"].build(tmp_path / "in")
    doc = json.loads(run_all(run, tmp_path)["report-json"]["stdout"])
    base_steps = [(s["rank"], s["step"]) for s in base_report["steps"]]
    steps = [(s["rank"], s["step"]) for s in doc["steps"]]
    assert steps == [k for k in base_steps if k != (0, 0)]


def test_export_refuses_a_hard_link_to_an_input(tmp_path):
    run = base_run(tmp_path)
    os.link(run / "rank1" / "events.jsonl", tmp_path / "link.json")
    before = tree_digest(run)
    res = run_all(run, tmp_path)  # the usual outputs are fine
    assert res["export"]["code"] == 0
    from bad_inputs import invoke

    for argv in (["export", str(run), "--perfetto", str(tmp_path / "link.json")],
                 ["report", str(run), "-o", str(tmp_path / "link.json"), "--no-hta"]):
        code, _, err = invoke(argv)
        assert code == 2 and "is the input file" in err and "rank1/events.jsonl" in err, err
    assert tree_digest(run) == before


# ---- the parsers' typing rules, by property ---------------------------------------------------------------
_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=False),
                    st.text(max_size=5), st.lists(st.integers(), max_size=2))
_FIELDS = ["step", "start_ns", "end_ns", "loss", "t_ns", "label", "seq", "group", "call_ns", "return_ns", "bytes",
           "name", "micro_step", "position", "rank"]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(["step", "collective", "region", "hook", "other"]),
                          st.dictionaries(st.sampled_from(_FIELDS), _VALUES, max_size=8)), max_size=12),
       st.integers(0, 3))
def test_events_reader_keeps_only_well_typed_records(tmp_path, recs, copies):
    """Whatever the records, reading never raises but UserError, and every kept value has its type: times
    and counters are int64, numbers finite, spans not negative, no step twice."""
    from commscope.errors import UserError
    from commscope.load.events import NA, EventColumns

    p = tmp_path / "events.jsonl"
    lines = [json.dumps({"kind": k, **fields}) for k, fields in recs]
    p.write_text("".join(ln + "\n" for ln in lines * (1 + copies)))
    ev = EventColumns()
    try:
        ev.read_rank(str(p), 0, "events.jsonl")
    except UserError as e:
        assert "\n" not in str(e)
        return
    steps = ev.frame("step")
    assert steps["step"].is_unique and (steps["rank"] == 0).all()
    assert (steps["end_ns"] >= steps["start_ns"]).all() and steps["loss"].map(lambda x: x != x or math.isfinite(x)).all()
    for kind in ("step", "collective", "region", "hook"):
        f = ev.frame(kind)
        for c in f.columns:
            if c.endswith("_ns"):
                assert str(f[c].dtype) == "Int64" and not (f[c] == NA).any()
    if copies and recs:
        assert any("a copy of an earlier line" in q for q in ev.problems)


_NUMBERS = st.one_of(st.from_regex(r"[-+]?[0-9]{1,6}(\.[0-9]{0,4})?", fullmatch=True),
                     st.sampled_from(["inf", "nan", "1e5e5", "1.2.3", "9" * 400, "", "-0", "1e400", "0x10", "٣"]),
                     st.text(alphabet="0123456789.eE+-", max_size=12))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_NUMBERS, _NUMBERS, st.integers(0, 3000), st.integers(1, 3000))
def test_speedrun_log_never_raises_and_numbers_are_finite(tmp_path, loss, ms, step, total):
    from commscope.load.speedrun_log import SEPARATOR, parse_log

    p = tmp_path / "x.txt"
    p.write_text(f"source\n{SEPARATOR}\nenv\n{SEPARATOR}\nstep:{step}/{total} val_loss:{loss} train_time:{ms}ms\n")
    r = parse_log(p)
    if r.complete:
        assert math.isfinite(r.val_loss) and math.isfinite(r.train_time_s) and r.train_time_s > 0
        assert step == total and float(loss) == r.val_loss and float(ms) / 1000 == r.train_time_s
    else:
        assert r.val_loss is None and r.train_time_s is None and r.problem
