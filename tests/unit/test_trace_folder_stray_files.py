"""A JSON file in a folder of traces that is no chrome trace (hparams.json beside rank0.json) is skipped
with one problem line; only where nothing in the folder is a trace, or the file is given alone, is it an
error."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from commscope.errors import UserError
from commscope.load import kineto_events, load_path
from paths import TESTS

GLOO = os.path.join(TESTS, "data", "gloo2")
ROOT = os.path.dirname(str(TESTS))


def _folder(tmp_path, stray: dict[str, bytes], traces: bool = True) -> str:
    d = tmp_path / "run"
    d.mkdir()
    if traces:
        for r in (0, 1):
            shutil.copy(os.path.join(GLOO, f"rank{r}.json"), d / f"rank{r}.json")
    for name, data in stray.items():
        (d / name).write_bytes(data)
    return str(d)


STRAYS = {
    "hparams.json": (b'{"lr": 0.1}', "not a chrome trace (no traceEvents list)"),
    "list.json": (b"[1, 2]", "not a chrome trace (no traceEvents list)"),
    "events.json": (b'{"traceEvents": {"a": 1}}', "not a chrome trace (no traceEvents list)"),
    "notes.json": (b"lr=0.1\n", "not valid JSON"),
    "empty.json": (b"", "empty"),
    "latin1.json": (b'{"name": "caf\xe9"}', "not UTF-8 text"),
}


@pytest.mark.parametrize("name", sorted(STRAYS))
def test_a_stray_file_is_skipped_with_one_line(tmp_path, name):
    data, why = STRAYS[name]
    d = _folder(tmp_path, {name: data})
    tr = load_path(d, workers=1)
    assert tr.ranks == [0, 1] and len(tr.collectives) == 18  # the traces load whole
    lines = [p for p in tr.problems if name in p]
    assert len(lines) == 1
    assert lines[0].startswith(f"{os.path.join(d, name)}: {why}") and lines[0].endswith("; skipped")
    assert os.path.join(d, name) not in tr.config["files"].values()


def test_a_gzip_cut_short_is_skipped_in_a_folder_and_an_error_alone(tmp_path):
    """An interrupted copy or a killed job leaves a .json.gz without its end: the other ranks still load."""
    import gzip

    whole = gzip.compress(open(os.path.join(GLOO, "rank1.json"), "rb").read())
    d = _folder(tmp_path, {"rank2.json.gz": whole[: len(whole) // 2]})
    tr = load_path(d, workers=2)
    assert tr.ranks == [0, 1] and len(tr.collectives) == 18
    assert [p for p in tr.problems if "rank2" in p] == [
        f"{os.path.join(d, 'rank2.json.gz')}: not a valid gzip file (compressed file ended before the "
        "end-of-stream marker was reached); skipped"]
    with pytest.raises(UserError, match="rank2.json.gz is not a valid gzip file"):
        load_path(os.path.join(d, "rank2.json.gz"))


def test_several_strays_each_have_a_line_and_parallel_parsing_agrees(tmp_path):
    d = _folder(tmp_path, {n: STRAYS[n][0] for n in ("hparams.json", "list.json", "notes.json")})
    one, pool = load_path(d, workers=1), load_path(d, workers=2)
    for tr in (one, pool):
        skipped = [p for p in tr.problems if p.endswith("; skipped")]
        assert len(skipped) == 3 and tr.ranks == [0, 1]
    assert one.problems == pool.problems


def test_the_lazy_ops_pass_leaves_the_stray_out(tmp_path):
    d = _folder(tmp_path, {"hparams.json": STRAYS["hparams.json"][0]})
    tr = load_path(d, workers=1)
    assert len(tr.ops) and set(tr.ops["rank"]) == {0, 1}


def test_a_folder_without_any_trace_is_still_an_error(tmp_path):
    d = _folder(tmp_path, {"hparams.json": b'{"lr": 0.1}', "list.json": b"[1]"}, traces=False)
    with pytest.raises(UserError, match="not a chrome trace") as e:
        load_path(d, workers=1)
    assert "\n" not in str(e.value) and "holds no chrome trace" in str(e.value)


def test_a_lone_folder_file_keeps_its_message(tmp_path):
    d = _folder(tmp_path, {"rank0.json": b"[1, 2]"}, traces=False)
    with pytest.raises(UserError) as e:
        load_path(d, workers=1)
    assert str(e.value) == f"{os.path.join(d, 'rank0.json')} is not a chrome trace (no traceEvents list)"


def test_a_file_given_alone_is_an_error(tmp_path):
    d = _folder(tmp_path, {"hparams.json": b'{"lr": 0.1}'})
    with pytest.raises(UserError, match="is not a chrome trace"):
        load_path(os.path.join(d, "hparams.json"), workers=1)


def test_a_large_stray_is_decoded_once(tmp_path, monkeypatch):
    # memory stays bounded by one decode: the skip comes from the parse itself, not a sniff before it
    d = _folder(tmp_path, {"big.json": json.dumps({"rows": list(range(200_000))}).encode()})
    calls = []
    real = kineto_events.read_events

    def counting(path, raw, with_ops):
        calls.append(os.path.basename(path))
        return real(path, raw, with_ops)

    monkeypatch.setattr("commscope.load.kineto.read_events", counting)
    tr = load_path(d, workers=1)
    assert calls.count("big.json") == 1 and any(p.endswith("big.json: not a chrome trace (no traceEvents list); "
                                                            "skipped") for p in tr.problems)


def test_doctor_cli_reads_the_folder(tmp_path):
    d = _folder(tmp_path, {"hparams.json": b'{"lr": 0.1}'})
    # wide enough for the line whole whatever the length of the temporary folder's path
    env = {**os.environ, "PYTHONPATH": ROOT, "COLUMNS": "1000"}
    r = subprocess.run([sys.executable, "-m", "commscope", "doctor", d], capture_output=True, text=True, env=env,
                       cwd=str(tmp_path), timeout=300)
    assert r.returncode == 0, r.stderr
    assert f"{os.path.join(d, 'hparams.json')}: not a chrome trace (no traceEvents list); skipped" in r.stdout + r.stderr
    (tmp_path / "x").mkdir()
    empty = _folder(tmp_path / "x", {"hparams.json": b'{"lr": 0.1}'}, traces=False)
    r = subprocess.run([sys.executable, "-m", "commscope", "doctor", empty], capture_output=True, text=True, env=env,
                       cwd=str(tmp_path), timeout=300)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "not a chrome trace" in r.stderr


def test_a_trace_commscope_exported_is_skipped_in_a_folder_and_refused_alone(tmp_path):
    """`commscope export --perfetto` written into (or copied beside) a folder of traces is a chrome trace
    too, with no rank of its own: read as one it took a rank past the world size and the whole folder was
    refused. It is skipped with one line, plain or gzip; given alone it is the error."""
    d = _folder(tmp_path, {})
    env = {**os.environ, "PYTHONPATH": ROOT}
    for name in ("merged.json", "merged.json.gz"):
        r = subprocess.run([sys.executable, "-m", "commscope", "export", os.path.join(d, "rank1.json"),
                            "--perfetto", os.path.join(d, name)], capture_output=True, text=True, env=env,
                           timeout=120)
        assert r.returncode == 0, r.stderr
    tr = load_path(d, workers=1)
    assert tr.ranks == [0, 1] and tr.world_size == 2 and len(tr.collectives) == 18
    lines = [p for p in tr.problems if "commscope exported" in p]
    assert lines == [f"{os.path.join(d, n)}: a trace commscope exported (export --perfetto), not a profiler's "
                     "trace; skipped" for n in ("merged.json", "merged.json.gz")]
    with pytest.raises(UserError, match="merged.json is a trace commscope exported"):
        load_path(os.path.join(d, "merged.json"), workers=1)


def test_a_trace_commscope_exported_in_the_end_of_document_layout_is_skipped_too(tmp_path):
    """A trace whose otherData comes last, after every event: recognised at the document's end, as
    own_trace recognises it before replacing one, plain or gzip."""
    import gzip

    events = b",".join(b'{"ph":"X","name":"op %d","pid":0,"tid":1,"ts":%d.5,"dur":1.0}' % (i, i) for i in range(3000))
    doc = (b'{"traceEvents":[' + events + b'],"displayTimeUnit":"ns","otherData":{"producer":"commscope",'
           b'"t0_ns":12,"world_size":2,"source":"kineto","path":"x"}}')
    d = _folder(tmp_path, {"old.json": doc, "old2.json.gz": gzip.compress(doc)})
    tr = load_path(d, workers=1)
    assert tr.ranks == [0, 1] and tr.world_size == 2 and len(tr.collectives) == 18
    assert [p for p in tr.problems if "commscope exported" in p] == [
        f"{os.path.join(d, n)}: a trace commscope exported (export --perfetto), not a profiler's trace; skipped"
        for n in ("old.json", "old2.json.gz")]


def test_an_empty_profiling_cycle_beside_the_ranks_trace_is_left_out_not_fatal(tmp_path):
    """A second file of rank 1 with no timed event (a profiling cycle that caught nothing) has no time
    window: it is no second trace claiming the rank, so the folder loads, and the file is said."""
    d = _folder(tmp_path, {})
    doc = json.load(open(os.path.join(GLOO, "rank1.json")))
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("ph") not in ("X", "i", "b", "e", "B", "E")]
    empty = os.path.join(d, "rank1.cycle2.json")
    with open(empty, "w") as f:
        json.dump(doc, f)
    tr = load_path(d, workers=1)
    assert tr.ranks == [0, 1] and len(tr.collectives) == 18
    assert f"{empty}: no timed event (an empty profiling cycle); left out, rank 1 has other files" in tr.problems
