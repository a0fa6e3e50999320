"""The Perfetto export streams its document: events are encoded and written CHUNK_EVENTS at a time, never
the whole document in memory, and the file holds the same bytes as one orjson.dumps of `build_perfetto`
(plain, and inflated for .gz). Running out of memory is one `commscope: error:` line, exit 2, no partial
file."""
from __future__ import annotations

import gzip
import os

import orjson
import pytest

import reports.perfetto as perfetto
from commscope.analyze.left_in_flight import left_in_flight
from commscope.load.loader import load_path
from cli_result import run_main
from paths import TESTS

INPUTS = [TESTS / "data" / "gloo2", TESTS / "data" / "cpurun-hooks-gloo2"]


def _whole(trace) -> bytes:
    return orjson.dumps(perfetto.build_perfetto(trace, left_in_flight(trace)), option=orjson.OPT_SERIALIZE_NUMPY)


@pytest.mark.parametrize("src", INPUTS + [TESTS / "data" / "modded-nanogpt-8xh100"], ids=lambda p: p.name)
@pytest.mark.parametrize("name", ["t.json", "t.json.gz"])
def test_streamed_file_is_the_whole_document_byte_for_byte(tmp_path, src, name):
    trace = load_path(str(src))
    expected = _whole(trace)
    out = perfetto.write_perfetto(trace, tmp_path / name, left_in_flight(trace))
    data = out.read_bytes()
    if name.endswith(".gz"):
        assert data[:2] == b"\x1f\x8b"
        data = gzip.decompress(data)
    assert data == expected
    assert data.startswith(b'{"otherData":{"producer":"commscope"')
    doc = orjson.loads(data)
    assert {e["ph"] for e in doc["traceEvents"]} >= {"M", "X", "s", "f"}  # names, slices and flows are there
    # nanosecond times of nullable integer columns stay exact integers, never rounded through floats
    times = [e["args"][k] for e in doc["traceEvents"] if e.get("cat") == "comm"
             for k in ("call_ns", "start_ns", "end_ns") if e["args"].get(k) is not None]
    assert times and all(isinstance(t, int) for t in times)


@pytest.mark.parametrize("src", INPUTS, ids=lambda p: p.name)
def test_writer_never_holds_more_than_a_chunk_of_events(tmp_path, monkeypatch, src):
    chunk = 3
    monkeypatch.setattr(perfetto, "CHUNK_EVENTS", chunk)
    trace = load_path(str(src))
    expected = orjson.loads(_whole(trace))
    monkeypatch.setattr(perfetto, "build_perfetto", None)  # the writer must not build the whole document

    state = {"emitted": 0, "encoded": 0, "sizes": [], "worst": 0}
    encode, emit_events = perfetto._encode_chunk, perfetto._emit_events

    def counting_encode(events):
        state["sizes"].append(len(events))
        state["encoded"] += len(events)
        return encode(events)

    def counting_emit_events(trace, t0, emit, *rest):
        def counted(ev):
            state["emitted"] += 1
            emit(ev)
            state["worst"] = max(state["worst"], state["emitted"] - state["encoded"])
        emit_events(trace, t0, counted, *rest)

    monkeypatch.setattr(perfetto, "_encode_chunk", counting_encode)
    monkeypatch.setattr(perfetto, "_emit_events", counting_emit_events)
    out = perfetto.write_perfetto(trace, tmp_path / "t.json", left_in_flight(trace))

    n = len(expected["traceEvents"])
    assert state["emitted"] == state["encoded"] == n
    assert max(state["sizes"]) <= chunk and len(state["sizes"]) == -(-n // chunk)
    assert state["worst"] < chunk  # events waiting to be encoded, at any moment
    assert orjson.loads(out.read_bytes()) == expected


_run = run_main


def _one_error(res, *words):
    code, out = res
    lines = out.err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("commscope: error: "), out.err
    assert "Traceback" not in out.err
    for w in words:
        assert w in lines[0], lines[0]


@pytest.mark.parametrize("name", ["t.json", "t.json.gz"])
def test_out_of_memory_while_writing_is_one_line_and_leaves_no_partial_file(tmp_path, capsys, monkeypatch, name):
    out = tmp_path / name
    assert _run(capsys, "export", INPUTS[0], "--perfetto", out)[0] == 0
    before = out.read_bytes()
    monkeypatch.setattr(perfetto, "CHUNK_EVENTS", 5)
    calls = {"n": 0}
    encode = perfetto._encode_chunk

    def fails_midway(events):
        calls["n"] += 1
        if calls["n"] > 3:  # after some chunks are already in the temporary file
            raise MemoryError
        return encode(events)

    monkeypatch.setattr(perfetto, "_encode_chunk", fails_midway)
    _one_error(_run(capsys, "export", INPUTS[0], "--perfetto", out), "out of memory while writing", str(out))
    assert calls["n"] == 4
    assert out.read_bytes() == before and os.listdir(tmp_path) == [name]  # the previous file, no temp file
    out.unlink()
    calls["n"] = 0
    _one_error(_run(capsys, "export", INPUTS[0], "--perfetto", out), "out of memory while writing")
    assert os.listdir(tmp_path) == []


def test_out_of_memory_while_loading_is_one_line(tmp_path, capsys, monkeypatch):
    import commscope.commands._shared as shared

    def no_memory(*a, **k):
        raise MemoryError

    monkeypatch.setattr(shared, "load_with_progress", no_memory)
    _one_error(_run(capsys, "export", INPUTS[0], "--perfetto", tmp_path / "t.json"), "out of memory while loading")
    assert os.listdir(tmp_path) == []


def test_out_of_memory_in_any_command_is_one_line(capsys, monkeypatch):
    import commscope.cli as cli

    def app_out_of_memory(argv):
        def app(**kwargs):
            raise MemoryError
        return app

    monkeypatch.setattr(cli, "_app_for", app_out_of_memory)
    _one_error(_run(capsys, "report", INPUTS[0], "--no-hta"), "out of memory while running commscope report")
