"""Every trace kind a user may bring (docs/traces.md) through every command that reads traces: report
(HTML and --json), layout, doctor and export exit 0 on each, and say what the trace cannot show.

Cases: HTA's test traces (tests/data/hta-testdata) and a corpus made in the session (tests/trace_corpus.py):
torch.profiler on CPU with and without a process group, gloo 1/2/4 ranks, tensorboard_trace_handler
naming and several cycles per rank, and edited copies (no or partial distributedInfo, missing ranks,
older formats, ROCm names, damaged values, an absurd world size).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import trace_corpus as tc
from bad_inputs import invoke
from commscope.load import load_path

HTA = tc.DATA / "hta-testdata"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("corpus")
    c: dict[str, Path] = {}
    for name in ("trace_filter", "nccl_parser_config", "distributed_info_unavailable", "triton_example"):
        c[f"hta/{name}"] = HTA / name
    c["single/plain"] = tc.record_single(root / "single_plain", handler=False, record_shapes=False, with_stack=False)
    c["single/tb-cycles"] = tc.record_single(root / "single_tb", handler=True, record_shapes=True, with_stack=True)
    c["gloo1"] = tc.record_gloo(root / "gloo1", 1)
    c["gloo2/tb-cycles"] = tc.record_gloo(root / "gloo2_tb", 2, handler=True, record_shapes=True)
    c["gloo4"] = tc.record_gloo(root / "gloo4", 4, record_shapes=False, with_stack=True)
    g4 = c["gloo4"]
    c["gloo4/partial"] = tc.copy_files(g4, root / "gloo4_partial", ["rank0.json", "rank2.json"])
    c["gloo4/no-info-named"] = tc.trim_folder(g4, root / "gloo4_noinfo", tc.without_distributed_info,
                                              {f"rank{r}.json": f"trace_rank-{r}.json" for r in range(4)})
    c["gloo4/rank-only-info"] = tc.trim_folder(g4, root / "gloo4_rankonly", tc.rank_only_info)
    c["gloo4/huge-world"] = tc.trim_folder(
        g4, root / "gloo4_huge", lambda d, _n: {**d, "distributedInfo": {**d["distributedInfo"], "world_size": 10**9}})
    c["gloo4/damaged"] = tc.trim_folder(g4, root / "gloo4_damaged", lambda d, n: tc.damaged(d) if n == "rank1.json" else d)
    one = tc.read(tc.NCCL_ONE_RANK)
    c["nccl/older-format"] = tc.write(root / "older" / "rank0.json.gz", tc.older_nccl(json.loads(json.dumps(one))))
    c["nccl/rocm"] = tc.write(root / "rocm" / "rank0.json.gz", tc.rocm(json.loads(json.dumps(one))))
    c["file/single"] = g4 / "rank3.json"
    return c


CASES = ["hta/trace_filter", "hta/nccl_parser_config", "hta/distributed_info_unavailable", "hta/triton_example",
         "single/plain", "single/tb-cycles", "gloo1", "gloo2/tb-cycles", "gloo4", "gloo4/partial",
         "gloo4/no-info-named", "gloo4/rank-only-info", "gloo4/huge-world", "gloo4/damaged", "nccl/older-format",
         "nccl/rocm", "file/single"]


@pytest.mark.parametrize("case", CASES)
def test_every_command_reads_every_trace_kind(case, corpus, tmp_path, capsys, monkeypatch):
    path = corpus[case]
    monkeypatch.chdir(tmp_path)
    runs = {
        "report": ["report", str(path), "-o", str(tmp_path / "r.html"), "--no-hta"],
        "report-json": ["report", str(path), "--json", "--no-hta"],
        "layout": ["layout", str(path)],
        "doctor": ["doctor", str(path), "--json"],
        "export": ["export", str(path), "--perfetto", str(tmp_path / "p.json")],
    }
    out = {}
    for name, argv in runs.items():
        code, stdout, stderr = invoke(argv)
        assert code == 0, (case, name, stderr[-3000:])
        assert "Traceback" not in stderr, (case, name, stderr[-3000:])
        out[name] = stdout
    doc = json.loads(out["report-json"])
    tr = load_path(str(path), workers=1)
    assert doc["world_size"] == tr.world_size and doc["ranks_present"] == tr.ranks
    assert doc["world_size"] >= len(doc["ranks_present"]) >= 1
    if len(tr.ranks) < tr.world_size:
        assert any(n.startswith("Partial:") for n in doc["notes"])
    if len(tr.ranks) == 1:
        assert any(n.startswith("One rank") for n in doc["notes"])
    assert (tmp_path / "r.html").stat().st_size > 1000 and json.loads((tmp_path / "p.json").read_text())


def test_no_process_group_is_rank_zero_of_one_and_says_so(corpus):
    tr = load_path(str(corpus["single/plain"]), workers=1)
    assert tr.ranks == [0] and tr.world_size == 1 and tr.backend is None
    text = " ".join(tr.problems)
    assert "no distributedInfo" in text and "taken as rank 0" in text and "taken as 1" in text
    # without a schedule torch.profiler writes no ProfilerStep ranges: a trace without steps
    assert len(tr.steps) == 0 and len(tr.compute) > 0 and tr.compute["kind"].eq("cpu_op").all()
    assert len(tr.collectives) == 0 and any("no ProfilerStep" in p for p in tr.problems)
    from commscope.analyze.summary import evidence_notes

    notes = " ".join(evidence_notes(tr))
    assert "One rank" in notes and "No collectives" in notes and "No ProfilerStep" in notes and "CPU-only" in notes
    assert "Rank(s) 0 assumed" in notes


def test_tensorboard_cycles_load_as_one_rank(corpus):
    """tensorboard_trace_handler writes one file per cycle (2 here): one rank, both windows' steps."""
    single = load_path(str(corpus["single/tb-cycles"]), workers=1)
    files = sorted(p.name for p in corpus["single/tb-cycles"].iterdir())
    assert len(files) == 2 and all(f.endswith(".pt.trace.json") for f in files)
    assert single.ranks == [0] and sorted(single.steps["step"]) == [0, 1, 2, 3]
    assert len(single.config["rank_files"][0]) == 2
    g = load_path(str(corpus["gloo2/tb-cycles"]), workers=1)
    assert g.ranks == [0, 1] and g.world_size == 2 and g.problems == []
    assert all(len(fs) == 2 for fs in g.config["rank_files"].values())
    c = g.collectives
    # per window the same collectives on both ranks, numbered per window (seq k·SEQ_STRIDE + i)
    assert sorted(c.loc[c["rank"] == 0, "seq"]) == sorted(c.loc[c["rank"] == 1, "seq"])
    assert c["seq"].max() >= 1_000_000 and c["seq"].min() >= 0
    both = c.groupby(["group", "seq"])["rank"].nunique()
    assert (both == 2).all()
    # the grad label and both rank's four steps
    assert set(c["label"]) >= {"grad"} and sorted(g.steps.loc[g.steps["rank"] == 1, "step"]) == [0, 1, 2, 3]
    # the lazy second parse of ops gives them the ranks the loader settled on
    assert set(g.ops["rank"]) <= {0, 1}


def test_partial_set_knows_the_job_size_and_the_ranks_present(corpus):
    tr = load_path(str(corpus["gloo4/partial"]), workers=1)
    assert tr.world_size == 4 and tr.ranks == [0, 2]
    assert any("rank(s) 1, 3 of 4" in p for p in tr.problems)


def test_rank_from_file_name_and_world_size_from_files(corpus):
    tr = load_path(str(corpus["gloo4/no-info-named"]), workers=1)
    assert tr.ranks == [0, 1, 2, 3] and tr.world_size == 4
    assert sum("rank " in p and "from the file name" in p for p in tr.problems) == 4
    only = load_path(str(corpus["gloo4/rank-only-info"]), workers=1)
    assert only.ranks == [0, 1, 2, 3] and only.world_size == 4
    assert any("no usable world_size" in p for p in only.problems)


def test_absurd_world_size_is_not_believed(corpus):
    tr = load_path(str(corpus["gloo4/huge-world"]), workers=1)
    assert tr.world_size == 4 and any("not a plausible world size" in p for p in tr.problems)


def test_damaged_values_are_problems_not_figures(corpus):
    good = load_path(str(corpus["gloo4"]), workers=1)
    bad = load_path(str(corpus["gloo4/damaged"]), workers=1)
    text = " ".join(bad.problems)
    for what in ("name, ts or dur of the wrong type", "negative duration", "non-finite", "duplicated",
                 "'External id' is not an integer"):
        assert what in text, what
    # the collectives are untouched: the damage hit cpu ops only
    assert len(bad.collectives) == len(good.collectives)
    assert bad.compute["end_ns"].ge(bad.compute["start_ns"]).all()


def test_older_format_names_and_sizes_from_wrappers_and_shapes(corpus):
    new = load_path(str(tc.NCCL_ONE_RANK), workers=1)
    old = load_path(str(corpus["nccl/older-format"]), workers=1)
    cn, co = new.collectives, old.collectives
    assert len(cn) == len(co) and "unknown" not in set(co["op"])
    assert sorted(co["op"]) == sorted(cn["op"])
    assert co["bytes"].tolist() == cn["bytes"].tolist()


def test_rocm_names_are_communication(corpus):
    cuda = load_path(str(tc.NCCL_ONE_RANK), workers=1)
    rocm = load_path(str(corpus["nccl/rocm"]), workers=1)
    assert rocm.kernels["is_comm"].sum() == cuda.kernels["is_comm"].sum() > 0
    assert len(rocm.collectives) == len(cuda.collectives)
    assert rocm.collectives["start_ns"].notna().sum() == cuda.collectives["start_ns"].notna().sum()
    # HTA's own rule (^nccl.*Kernel) does not see them: the report says so of this trace, not of the CUDA one
    from commscope.analyze.summary import evidence_notes

    n = int(rocm.kernels["is_comm"].sum())
    [note] = [x for x in evidence_notes(rocm) if "HTA does not recognize" in x]
    assert note.startswith(f"{n:,} of the {n:,} communication kernels are named as HTA does not recognize (e.g. 'rccl")
    assert not [x for x in evidence_notes(cuda) if "HTA does not recognize" in x]


def test_sampled_ranks_pair_only_matching_collectives():
    """HTA's trace_filter: 2 ranks of a 128-rank job, an older format without collective names or group
    names. Collectives at the same (group, seq) with different dtype or size are not paired."""
    tr = load_path(str(HTA / "trace_filter"), workers=1)
    assert tr.world_size == 128 and tr.ranks == [0, 1]
    c = tr.collectives
    assert "unknown" not in set(c["op"])
    paired = c[~c["group"].str.contains("unpaired")]
    for _, g in paired.groupby(["group", "seq"]):
        sizes = set(g["bytes"].dropna()) if g["op"].iat[0] != "all_to_all" else set()
        assert len(set(g["op"])) == 1 and len(sizes) <= 1 and len(set(g["dtype"].dropna())) <= 1
    assert c["group"].str.contains("unpaired").any() and any("unpaired" in p for p in tr.problems)


def test_wait_records_are_not_collectives():
    """HTA's nccl_parser_config trace records 27 record_param_comms, 6 of them `wait`: 21 collectives."""
    doc = tc.read(tc.NCCL_ONE_RANK)
    names = [e["args"].get("Collective name") for e in doc["traceEvents"] if e.get("name") == "record_param_comms"]
    assert len(names) == 27 and names.count("wait") == 6
    c = load_path(str(tc.NCCL_ONE_RANK), workers=1).collectives
    assert len(c) == 21 and sorted(c["op"].unique()) == ["all_reduce", "broadcast"]


def test_overlapping_files_of_one_rank_are_refused(corpus, tmp_path):
    from commscope.errors import UserError

    d = tc.copy_files(corpus["gloo4"], tmp_path / "dup", ["rank0.json"])
    (d / "rank0-copy.json").write_bytes((d / "rank0.json").read_bytes())
    with pytest.raises(UserError, match="rank 0 appears twice"):
        load_path(str(d), workers=1)
