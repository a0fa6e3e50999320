"""Bad input to the loader: one clear UserError line, never a traceback; nothing written to the input."""
import gzip
import json
import os
import shutil

import pytest

from commscope.errors import UserError
from commscope.load import load_path
from paths import TESTS

GLOO = os.path.join(TESTS, "data", "gloo2")


def trace_doc(rank, world_size=2, with_di=True):
    doc = {"schemaVersion": 1, "traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10.0, "dur": 5.0, "args": {}}]}
    if with_di:
        doc["distributedInfo"] = {"backend": "gloo", "rank": rank, "world_size": world_size}
    return doc


def write(d, name, data: bytes):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def js(doc):
    return json.dumps(doc).encode()


@pytest.mark.parametrize("files, message", [
    ({}, "holds no run directory"),
    ({"rank0.json": js(trace_doc(0))[:-20]}, "not valid JSON"),
    ({"rank0.json": b""}, "is empty"),
    ({"rank0.json.gz": b"\x1f\x8b\x08garbage"}, "not a valid gzip"),
    ({"rank0.json": js(trace_doc(0)), "rank0b.json": js(trace_doc(0))}, "rank 0 appears twice"),
    ({"rank0.json": js(trace_doc(0, 2)), "rank1.json": js(trace_doc(1, 4))}, "disagree on world_size"),
    ({"rank0.json": b'{"traceEvents": "\xff\xfe"}'}, "not UTF-8"),
    ({"rank0.json": b"[1, 2]"}, "not a chrome trace"),
    ({"rank5.json": js(trace_doc(5, 2))}, r"rank\(s\) 5 outside world_size 2 in .* \(from rank5.json\)"),
])
def test_bad_kineto_dirs(tmp_path, files, message):
    d = str(tmp_path / "in")
    os.makedirs(d)
    for name, data in files.items():
        write(d, name, data)
    with pytest.raises(UserError, match=message) as e:
        load_path(d, workers=1)
    assert "\n" not in str(e.value)


def test_no_distributed_info_loads_with_the_rank_of_the_file_name(tmp_path):
    d = str(tmp_path / "in")
    write(d, "job_rank-3.json", js(trace_doc(0, with_di=False)))
    tr = load_path(d, workers=1)
    assert tr.ranks == [3] and tr.world_size == 4
    assert any("rank 3 from the file name" in p for p in tr.problems)
    assert any("world size is unknown" in p and "taken as 4" in p for p in tr.problems)


def test_missing_path_and_non_trace_file(tmp_path):
    with pytest.raises(UserError, match="nope does not exist"):
        load_path(str(tmp_path / "nope"))
    p = tmp_path / "notes.txt"
    p.write_text("hi")
    with pytest.raises(UserError, match="not a Kineto trace"):
        load_path(str(p))


def test_run_dir_without_rank_folders(tmp_path):
    write(str(tmp_path / "r"), "summary.json", js({"schema_version": 1, "world_size": 2}))
    with pytest.raises(UserError, match="without rank"):
        load_path(str(tmp_path / "r"))


def test_missing_rank_is_a_problem_and_gzip_single_file_loads(tmp_path):
    d = str(tmp_path / "in")
    write(d, "rank1.json.gz", gzip.compress(js(trace_doc(1, 2))))
    tr = load_path(d)
    assert tr.ranks == [1] and any("rank(s) 0 of" in p for p in tr.problems)
    assert load_path(os.path.join(d, "rank1.json.gz")).ranks == [1]


def test_input_directory_untouched(tmp_path):
    d = tmp_path / "g"
    shutil.copytree(GLOO, d)
    before = sorted((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in d.iterdir())
    load_path(str(d), workers=2)
    assert sorted((p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in d.iterdir()) == before


@pytest.mark.parametrize("doc", ['{"traceEvents": [], "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
                                 '{"traceEvents": ' + "[" * 200_000 + "]" * 200_000 + "}",
                                 '{"traceEvents": ' + "[" * 5_000 + "]" * 5_000 + "}"])
def test_deeply_nested_json_is_one_error_not_a_recursion_traceback(tmp_path, doc):
    """Valid JSON nested past any decoder's limit is said as such, never "truncated or corrupt"."""
    path = tmp_path / "rank0.json"
    path.write_text(doc)
    with pytest.raises(UserError, match="nests JSON arrays or objects too deeply") as e:
        load_path(str(path))
    assert "corrupt" not in str(e.value)



def test_a_trace_claiming_a_world_beyond_the_limit_is_refused_as_a_run_directory_is(tmp_path, monkeypatch):
    """distributedInfo.world_size 1,000,000: the analyses size frames by the world (the doctor lists every
    missing rank); past COMMSCOPE_MAX_WORLD_SIZE it is refused with the setting that raises it."""
    import json

    from paths import TESTS

    doc = json.loads((TESTS / "data" / "gloo2" / "rank0.json").read_text())
    doc.setdefault("distributedInfo", {}).update(world_size=1_000_000, rank=0)
    (tmp_path / "rank0.json").write_text(json.dumps(doc))
    with pytest.raises(UserError, match=r"world_size 1,000,000 is beyond the largest world size; .*"
                                         r"COMMSCOPE_MAX_WORLD_SIZE"):
        load_path(str(tmp_path / "rank0.json"))
    monkeypatch.setenv("COMMSCOPE_MAX_WORLD_SIZE", str(2_000_000))
    assert load_path(str(tmp_path / "rank0.json")).world_size == 1_000_000


def _stepped(rank: int, steps: range, t0_us: float) -> dict:
    """A one-rank trace whose profiler steps `steps` start every 100 µs from `t0_us`, an op in each."""
    ev = []
    for k, s in enumerate(steps):
        t = t0_us + 100.0 * k
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": 1, "tid": 1, "ts": t,
                   "dur": 90.0, "args": {}})
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t + 10, "dur": 5.0,
                   "args": {}})
    return {"schemaVersion": 1, "traceEvents": ev,
            "distributedInfo": {"backend": "gloo", "rank": rank, "world_size": 1}}


def test_successive_profiling_cycles_load_and_a_repeated_step_number_is_refused(tmp_path):
    """One profiler's cycles number their steps onwards (tensorboard_trace_handler writes a file per cycle):
    they load as one rank. A folder written to by a second run (or a second profiler counting from 0) holds
    the same step numbers again, later in time: merged, those steps would add up, so it is refused."""
    ok = str(tmp_path / "cycles")
    write(ok, "host_1.1.pt.trace.json", js(_stepped(0, range(2, 4), 1_000.0)))
    write(ok, "host_1.2.pt.trace.json", js(_stepped(0, range(6, 8), 2_000.0)))
    assert sorted(load_path(ok, workers=1).steps["step"].tolist()) == [2, 3, 6, 7]
    bad = str(tmp_path / "two-runs")
    write(bad, "host_1.1.pt.trace.json", js(_stepped(0, range(2, 4), 1_000.0)))
    write(bad, "host_2.1.pt.trace.json", js(_stepped(0, range(2, 4), 9_000.0)))
    with pytest.raises(UserError, match=r"rank 0's traces .*host_1\.1\.pt\.trace\.json and .*host_2\.1\.pt\.trace\.json "
                                        r"both hold step 2 \(ProfilerStep#2\): not successive cycles of one profiler"):
        load_path(bad, workers=1)


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_a_non_finite_float_in_a_json_document_is_named_not_called_corrupt(tmp_path, value):
    """summary.json written by Python's json.dump with a non-finite float: the file is neither truncated nor
    corrupt, and the error says what is wrong with it."""
    from commscope.errors import UserError
    from commscope.load.files import decode_json

    raw = ('{"schema_version": 1,\n "status": "completed",\n "tokens_per_s": %s}' % value).encode()
    with pytest.raises(UserError) as e:
        decode_json("summary.json", raw)
    assert str(e.value) == (f"summary.json is not valid JSON: {value} at line 3 is no JSON value (Python's "
                            "json.dump writes it for a non-finite float)")
    with pytest.raises(UserError, match=r"not valid JSON \(truncated or corrupt: "):
        decode_json("summary.json", b'{"status": "completed",')
