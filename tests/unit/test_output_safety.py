"""The files `report` and `export --perfetto` write (docs/analysis.md, "Output files"): an existing file is
replaced only when commscope wrote it (its marker), never a link, FIFO or device; the write is atomic, so a
failed one leaves the previous file and no partial or temporary file; a file name that is not UTF-8 shows
as `\\xff` in the page; a run directory's unlabelled collective exports."""
from __future__ import annotations

import errno
import gzip
import json
import os
import shutil
import subprocess
import sys

import pytest

from commscope.errors import UserError
from commscope.util import atomic, outputs
from commscope.util.outputs import check_output, own_page, own_trace
from commscope.util.text import printable
from cli_result import run_main
from paths import ROOT, TESTS

GLOO2 = TESTS / "data" / "gloo2"
RUN = TESTS / "data" / "cpurun-hooks-gloo2"
PRECIOUS = b"precious, not commscope's\n"


_run = run_main


def _report(capsys, out, src=GLOO2, *extra):
    return _run(capsys, "report", src, "--no-hta", *(["-o", out] if out is not None else []), *extra)


def _export(capsys, out, src=GLOO2):
    return _run(capsys, "export", src, "--perfetto", out)


def _one_error(res, *words):
    code, out = res
    lines = out.err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("commscope: error: "), out.err
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


# --- an existing file: replaced only when commscope wrote it ---------------------------------------------

def test_report_refuses_a_file_it_did_not_write_and_replaces_its_own(tmp_path, capsys):
    out = tmp_path / "p.html"
    out.write_bytes(PRECIOUS)
    _one_error(_report(capsys, out), f"refusing to replace {out}", "commscope did not write it",
               "remove it or choose another output")
    assert out.read_bytes() == PRECIOUS

    mine = tmp_path / "r.html"
    assert _report(capsys, mine)[0] == 0 and own_page(mine)
    os.utime(mine, (0, 0))
    assert _report(capsys, mine)[0] == 0  # its own page: replaced
    assert mine.stat().st_mtime > 0 and own_page(mine)


def test_report_default_output_is_not_replaced_when_foreign(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gloo2-report.html").write_bytes(PRECIOUS)
    _one_error(_report(capsys, None), "gloo2-report.html", "commscope did not write it")
    assert (tmp_path / "gloo2-report.html").read_bytes() == PRECIOUS


@pytest.mark.parametrize("command", ["report", "export"])
def test_a_refused_output_fails_before_the_input_is_loaded(tmp_path, capsys, monkeypatch, command):
    import commscope.commands._shared as shared
    import commscope.commands.report as report

    def never(*a, **k):
        raise AssertionError("loaded before the output was checked")

    monkeypatch.setattr(report, "load_with_progress", never)
    monkeypatch.setattr(shared, "load_with_progress", never)
    out = tmp_path / "out.file"
    out.write_bytes(PRECIOUS)
    _one_error(_report(capsys, out) if command == "report" else _export(capsys, out), "commscope did not write it")


def test_a_page_of_an_earlier_commscope_is_recognised(tmp_path):
    """Pages written before the generator tag start with a fixed head and commscope's title."""
    old = tmp_path / "old.html"
    old.write_text('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><meta name="viewport" '
                   'content="width=device-width, initial-scale=1"><title>commscope report \u2014 run</title>',
                   encoding="utf-8")
    assert own_page(old)
    other = tmp_path / "other.html"
    other.write_text('<!DOCTYPE html>\n<html><head><title>commscope report \u2014 mine</title>')
    assert not own_page(other)


@pytest.mark.parametrize("name", ["t.json", "t.json.gz"])
def test_export_refuses_a_file_it_did_not_write_and_replaces_its_own(tmp_path, capsys, name):
    out = tmp_path / name
    out.write_bytes(gzip.compress(PRECIOUS) if name.endswith(".gz") else PRECIOUS)
    before = out.read_bytes()
    _one_error(_export(capsys, out), f"refusing to replace {out}", "commscope did not write it")
    assert out.read_bytes() == before

    out.unlink()
    assert _export(capsys, out)[0] == 0 and own_trace(out)
    head = (gzip.open(out) if name.endswith(".gz") else open(out, "rb")).read(100)
    assert head.startswith(b'{"otherData":{"producer":"commscope"')  # the marker: the first key
    assert _export(capsys, out)[0] == 0


def test_a_trace_of_an_earlier_commscope_is_recognised(tmp_path):
    """Traces written before otherData came first: it closed the document."""
    old = tmp_path / "old.json"
    old.write_bytes(b'{"traceEvents":[{"ph":"M"}],"displayTimeUnit":"ns","otherData":{"producer":"commscope",'
                    b'"t0_ns":12,"world_size":2,"source":"kineto","path":"x"}}')
    assert own_trace(old)
    old.write_bytes(b'{"traceEvents":[{"ph":"M"}],"otherData":{"producer":"someone"}}')
    assert not own_trace(old)
    broken = tmp_path / "broken.json.gz"
    broken.write_bytes(b"\x1f\x8b\x08garbage")
    assert not own_trace(broken)


def _legacy_trace(n_events: int, producer: bytes = b"commscope") -> bytes:
    """A trace in the end-of-document layout: every event first, otherData closing the document (far past
    the first 4 KiB, and past the last 64 KiB of the compressed file)."""
    events = b",".join(b'{"ph":"X","name":"op %d","pid":0,"tid":1,"ts":%d.5,"dur":1.0}' % (i * 7919 % 100003, i)
                       for i in range(n_events))
    return (b'{"traceEvents":[' + events + b'],"displayTimeUnit":"ns","otherData":{"producer":"' + producer
            + b'","t0_ns":12,"world_size":2,"source":"kineto","path":"x"}}')


def test_a_gzip_trace_of_an_earlier_commscope_is_recognised_and_replaced(tmp_path, capsys):
    old = tmp_path / "old.json.gz"
    old.write_bytes(gzip.compress(_legacy_trace(60_000)))
    assert old.stat().st_size > 2 * 65536  # the marker is neither in the head nor in the compressed tail
    assert own_trace(old)
    assert _export(capsys, old)[0] == 0
    assert gzip.open(old).read(100).startswith(b'{"otherData":{"producer":"commscope"')

    foreign = tmp_path / "foreign.json.gz"
    foreign.write_bytes(gzip.compress(_legacy_trace(2_000, producer=b"someone")))
    assert not own_trace(foreign)
    _one_error(_export(capsys, foreign), "commscope did not write it")
    torn = tmp_path / "torn.json.gz"
    torn.write_bytes(gzip.compress(_legacy_trace(2_000))[:-200])  # cut before its end: no tail to read
    assert not own_trace(torn)


def test_a_gzip_trace_is_inflated_only_up_to_the_cap(tmp_path, monkeypatch):
    old = tmp_path / "old.json.gz"
    data = _legacy_trace(20_000)
    old.write_bytes(gzip.compress(data))
    assert outputs._gzip_tail(old, cap=len(data)).endswith(b'"path":"x"}}')
    assert outputs._gzip_tail(old, cap=len(data) - 1) is None  # stops there, unrecognised
    monkeypatch.setattr(outputs, "_LEGACY_GZIP_CAP", 2 ** 20)  # the default cap own_trace inflates up to
    assert len(data) > 2 ** 20 and not own_trace(old)
    monkeypatch.setattr(outputs, "_LEGACY_GZIP_CAP", 2 * 2 ** 20)
    assert own_trace(old)


# --- links, FIFOs, devices ------------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["report", "export"])
def test_a_symlink_is_refused_and_its_target_untouched(tmp_path, capsys, command):
    victim = tmp_path / "victim.txt"
    victim.write_bytes(PRECIOUS)
    link = tmp_path / ("link.html" if command == "report" else "link.json")
    link.symlink_to(victim)
    res = _report(capsys, link) if command == "report" else _export(capsys, link)
    _one_error(res, str(link), "symbolic link")
    assert victim.read_bytes() == PRECIOUS and link.is_symlink()


def test_a_symlink_to_a_commscope_output_is_refused_too(tmp_path, capsys):
    real = tmp_path / "real.html"
    assert _report(capsys, real)[0] == 0
    link = tmp_path / "latest.html"
    link.symlink_to(real)
    _one_error(_report(capsys, link), "symbolic link")


@pytest.mark.parametrize("command", ["report", "export"])
def test_a_fifo_is_refused_at_once(tmp_path, command):
    """In a child process with a timeout: a regression would block on opening the FIFO."""
    fifo = tmp_path / "ff.out"
    os.mkfifo(fifo)
    args = (["report", str(GLOO2), "--no-hta", "-o", str(fifo)] if command == "report"
            else ["export", str(GLOO2), "--perfetto", str(fifo)])
    proc = subprocess.run([sys.executable, "-m", "commscope", *args], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [f"commscope: error: refusing to write {fifo}: it is a FIFO, not a "
                                                "regular file; choose another output"]
    assert sorted(os.listdir(tmp_path)) == ["ff.out"]


@pytest.mark.parametrize("dev", ["/dev/null", "/dev/full"])
def test_a_device_is_refused(dev):
    if not os.path.exists(dev):
        pytest.skip(f"no {dev}")
    with pytest.raises(UserError, match="it is a character device, not a regular file"):
        check_output(dev, None, own_page)


def test_a_directory_is_refused(tmp_path):
    with pytest.raises(UserError, match="is a directory"):
        check_output(tmp_path, None, own_page)
    # the input folder itself is named as such (not "the input file … a hard link or symlink to it")
    (tmp_path / "run").mkdir()
    for check in (own_page, own_trace):
        with pytest.raises(UserError, match=r"it is the input directory itself; choose an output file elsewhere$"):
            check_output(tmp_path / "run", tmp_path / "run", check)


# --- atomic writes ----------------------------------------------------------------------------------------

def _full_disk_midway(monkeypatch):
    """Every write puts half its data in the file, then fails as a full disk does."""
    def half_then_enospc(fd, data):
        os.write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(atomic, "_write_all", half_then_enospc)


@pytest.mark.parametrize("command", ["report", "export"])
def test_a_failed_write_leaves_the_previous_output_and_no_partial_file(tmp_path, capsys, monkeypatch, command):
    out = tmp_path / ("r.html" if command == "report" else "t.json")
    write = _report if command == "report" else _export
    assert write(capsys, out)[0] == 0
    before = out.read_bytes()
    _full_disk_midway(monkeypatch)
    _one_error(write(capsys, out), f"cannot write {out}", "No space left on device")
    assert out.read_bytes() == before  # the previous output, whole
    assert os.listdir(tmp_path) == [out.name]  # and no temporary file

    out.unlink()
    _one_error(write(capsys, out), "No space left on device")
    assert os.listdir(tmp_path) == []  # no partial output where there was none


def test_the_temporary_file_never_follows_a_link_left_at_its_name(tmp_path, monkeypatch):
    victim = tmp_path / "victim"
    victim.write_bytes(PRECIOUS)
    out = tmp_path / "o.json"
    monkeypatch.setattr(atomic, "_temp_name", lambda path: tmp_path / ".o.json.tmp")
    (tmp_path / ".o.json.tmp").symlink_to(victim)
    with pytest.raises(FileExistsError):
        atomic.write_bytes_atomic(out, b"new")
    assert victim.read_bytes() == PRECIOUS and not out.exists()


# --- names that are not UTF-8 -----------------------------------------------------------------------------

def test_printable_shows_undecodable_bytes():
    assert printable(os.fsdecode(b"rank0\xff.json")) == "rank0\\xff.json"
    assert printable("caf\u00e9 \ud800") == "caf\u00e9 \\ud800"
    assert printable(os.fsdecode(b"/a/b\xfe")) == "/a/b\\xfe"


@pytest.mark.skipif(sys.platform == "darwin", reason="the file system refuses names that are not UTF-8")
def test_a_file_name_that_is_not_utf8_shows_escaped_in_the_page(tmp_path, capsys, monkeypatch):
    src = tmp_path / os.fsdecode(b"g2\xff")
    src.mkdir()
    shutil.copy(GLOO2 / "rank0.json", os.path.join(os.fsencode(src), b"rank0\xff.json"))
    shutil.copy(GLOO2 / "rank1.json", src / "rank1.json")
    out = tmp_path / "b.html"
    code, res = _report(capsys, out, src)
    assert code == 0, res.err
    page = out.read_text(encoding="utf-8")
    assert "rank0\\xff.json" in page and "<title>commscope report \u2014 g2\\xff</title>" in page
    assert "\ufffd" not in page

    outs = tmp_path / "o"
    outs.mkdir()
    monkeypatch.chdir(outs)  # the default output takes the folder's name, bytes and all; the terminal shows it escaped
    code, res = _report(capsys, None, src)
    assert code == 0, res.err
    assert os.listdir(os.fsencode(outs)) == [b"g2\xff-report.html"]
    assert "g2\\xff-report.html" in res.out


# --- a run directory's unlabelled collective ------------------------------------------------------------

def test_a_collective_without_a_label_exports_on_its_own_track(tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    events = run / "rank1" / "events.jsonl"
    text = events.read_text()
    assert '"label":"attn"' in text
    events.write_text(text.replace('"label":"attn"', '"label":null'))
    out = tmp_path / "e.json"
    code, res = _export(capsys, out, run)
    assert code == 0, res.err
    doc = json.loads(out.read_bytes())
    tracks = {e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "thread_name" and e["pid"] == 1}
    assert "comm (no label)" in tracks and "comm attn" not in tracks
    unlabelled = [e for e in doc["traceEvents"] if e.get("cat") == "comm" and e["pid"] == 1
                  and e["args"].get("label") is None]
    assert unlabelled and all(e["name"].startswith("(no label):") for e in unlabelled)


def test_a_commscope_output_of_the_other_kind_is_named_as_such(tmp_path, capsys):
    page, trace = tmp_path / "page.html", tmp_path / "t.json"
    assert _report(capsys, page)[0] == 0 and own_page(page)
    assert _export(capsys, trace)[0] == 0 and own_trace(trace)
    before = page.read_bytes(), trace.read_bytes()
    _one_error(_export(capsys, page), f"refusing to replace {page}: it is an HTML report commscope wrote, "
                                      "not a Perfetto trace")
    _one_error(_report(capsys, trace), f"refusing to replace {trace}: it is a Perfetto trace commscope wrote, "
                                       "not an HTML report")
    assert (page.read_bytes(), trace.read_bytes()) == before


def test_create_bytes_atomic_writes_only_where_nothing_is_and_leaves_no_temp_file(tmp_path, monkeypatch):
    path = tmp_path / "marker.json"
    assert atomic.create_bytes_atomic(path, b"first\n") is True
    assert atomic.create_bytes_atomic(path, b"second\n") is False  # the first one stands
    assert path.read_bytes() == b"first\n" and os.listdir(tmp_path) == ["marker.json"]

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic, "_write_all", full)
    with pytest.raises(OSError, match="No space left"):
        atomic.create_bytes_atomic(tmp_path / "other.json", b"x")
    assert os.listdir(tmp_path) == ["marker.json"]


# --- '-' ---------------------------------------------------------------------

def test_a_dash_for_an_output_is_refused_not_a_file_named_dash(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _one_error(_report(capsys, "-"), "refusing to write to '-'", "give its path")
    _one_error(_export(capsys, "-"), "refusing to write to '-'")
    assert not (tmp_path / "-").exists()
