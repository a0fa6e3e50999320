"""A rank's file that the system refuses to read (permissions, an I/O error) costs that rank, not the job:
in a folder of traces the file is skipped with a problem line, in a run directory the rank's events.jsonl
is ignored with one; given alone, the file is the error (one line, exit 2). The refusal is simulated by
patching the opening call, as the tests may run as root, whom file modes do not stop."""
from __future__ import annotations

import errno
import os
import shutil

import pytest

from cli_result import run_main
from commscope.load import load_path
from paths import TESTS

GLOO2 = TESTS / "data" / "gloo2"
RUN = TESTS / "data" / "cpurun-hooks-gloo2"


def refuse(monkeypatch, name: str) -> None:
    """Opening any path ending in `name` fails with EACCES, by Python's open and by os.open."""
    import builtins

    real_open, real_os_open = builtins.open, os.open

    def fail(path):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))

    monkeypatch.setattr(builtins, "open", lambda p, *a, **k: fail(p) if str(p).endswith(name) else real_open(p, *a, **k))
    monkeypatch.setattr(os, "open", lambda p, *a, **k: fail(p) if str(p).endswith(name) else real_os_open(p, *a, **k))


def test_an_unreadable_trace_in_a_folder_is_skipped(tmp_path, monkeypatch):
    folder = tmp_path / "traces"
    shutil.copytree(GLOO2, folder)
    refuse(monkeypatch, "rank1.json")
    tr = load_path(str(folder), workers=1)
    assert tr.ranks == [0]
    assert [p for p in tr.problems if "rank1.json" in p] == [
        f"{folder / 'rank1.json'}: cannot be read: Permission denied; skipped"]


def test_an_unreadable_trace_given_alone_is_one_line(tmp_path, monkeypatch, capsys):
    shutil.copy(GLOO2 / "rank1.json", tmp_path / "rank1.json")
    refuse(monkeypatch, "rank1.json")
    code, out = run_main(capsys, "report", tmp_path / "rank1.json", "--json", "--no-hta")
    assert code == 2 and out.err.strip().splitlines() == [
        f"commscope: error: {tmp_path / 'rank1.json'} cannot be read: Permission denied"]


def test_an_unreadable_events_file_costs_its_rank_only(tmp_path, monkeypatch):
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    whole = load_path(str(RUN), workers=1)
    refuse(monkeypatch, os.path.join("rank1", "events.jsonl"))
    tr = load_path(str(run), workers=1)
    said = [p for p in tr.problems if "events.jsonl" in p]
    assert said == [f"rank 1: {run / 'rank1' / 'events.jsonl'} cannot be read: Permission denied; ignored"]
    assert set(tr.collectives["rank"]) == {0}
    assert len(tr.collectives) == int((whole.collectives["rank"] == 0).sum())
