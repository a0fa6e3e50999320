"""The report's overlap and duration quantities (docs/analysis.md, "The quantities") on the recorded
fixtures, recomputed here from the frames they come from: per label `hidden_pct` and `mean_ms` with their
`duration_basis`; per rank HTA's rule and the device-only number on a GPU trace, which differ because HTA
counts host-side launch ops as compute; the recorded spans' overlap on a CPU run directory."""
import numpy as np
import pytest

from commscope.analyze import exposure, timeline
from commscope.analyze import intervals as iv
from commscope.analyze.summary import SCHEMA_VERSION, summarize
from commscope.load import load_path
from paths import TESTS

GPU = TESTS / "data" / "modded-nanogpt-8xh100"
CPU = TESTS / "data" / "cpurun-hooks-gloo2"


@pytest.fixture(scope="module")
def gpu():
    tr = load_path(str(GPU))
    return tr, summarize(tr, with_hta=False)


@pytest.fixture(scope="module")
def cpu():
    tr = load_path(str(CPU))
    return tr, summarize(tr, with_hta=False)


def per_label_from_frame(tr):
    """Per label over all ranks, straight from the frames: hidden share of the summed duration and mean
    duration in ms. Hidden: on a trace, each collective's duration minus its exposed time (capped at it);
    on a run directory, the part of [launch, end) covered by the rank's compute set, one collective at a
    time (the exposed time there is a wait on that collective only, not the time compute covered)."""
    t = exposure.collective_table(tr)
    d = t["duration_ns"].to_numpy(np.float64)
    if tr.source == "run":
        comp = exposure.compute_sets(tr)
        launch, end = t["call_ns"].to_numpy(np.int64), t["end_ns"].to_numpy(np.int64)
        hidden = np.array([iv.length(iv.intersect((np.array([a]), np.array([b])), comp[r]))
                           for r, a, b in zip(t["rank"], launch, end)])
    else:
        hidden = d - np.minimum(t["exposed_ns"].to_numpy(np.float64), d)
    out = {}
    for label, rows in t.groupby("label").indices.items():
        out[label] = (100 * np.nansum(hidden[rows]) / np.nansum(d[rows]), np.nanmean(d[rows]) / 1e6)
    return t, out


@pytest.mark.parametrize("which", ["gpu", "cpu"])
def test_hidden_pct_per_label_is_the_hidden_share_of_the_duration(which, request):
    tr, doc = request.getfixturevalue(which)
    t, want = per_label_from_frame(tr)
    assert doc["schema_version"] == SCHEMA_VERSION == 13
    assert set(doc["labels"]) == set(want)
    for label, v in doc["labels"].items():
        hidden, mean_ms = want[label]
        assert "overlap_pct" not in v
        assert v["hidden_pct"] == pytest.approx(hidden, abs=0.005)  # rounded to 2 decimals
        assert v["mean_ms"] == pytest.approx(mean_ms, abs=5e-5)     # rounded to 4 decimals
    if which == "gpu":  # a device kernel: the kernel's own start to end
        assert doc["duration_basis"] == "device kernel (trace)"
        np.testing.assert_array_equal(t["duration_ns"], t["end_ns"] - t["start_ns"])
        assert doc["labels"]["_allgather_base"]["hidden_pct"] == 9.86
    else:  # CPU run directory: no execution start, so launch to completion
        assert doc["duration_basis"] == "launch to completion (run directory)"
        assert t["start_ns"].isna().all()
        np.testing.assert_array_equal(t["duration_ns"], t["end_ns"] - t["call_ns"])
        # the 36-byte scalars all_reduce is launched after backward and spends its span queued behind the
        # gradient reduce-scatters: compute hides none of it; mlp's, launched inside backward, 19 %; each
        # below the ranks' overlap of all their communication (26–29 %)
        assert doc["labels"]["scalars"]["hidden_pct"] == 0.0 and doc["labels"]["mlp"]["hidden_pct"] == 19.14
        assert doc["recorded_comm_overlap_pct_by_rank"] == {"0": 29.22, "1": 25.77}


def device_only(tr, rank):
    """|comm ∩ comp| / |comm| over all of one rank's device kernels, with HTA's kernel classes."""
    k = tr.kernels[tr.kernels["rank"] == rank]
    comm = iv.merge(k.loc[k["is_comm"], "start_ns"].to_numpy(), k.loc[k["is_comm"], "end_ns"].to_numpy())
    comp = iv.merge(k.loc[k["hta_compute"], "start_ns"].to_numpy(), k.loc[k["hta_compute"], "end_ns"].to_numpy())
    return 100 * iv.length(iv.intersect(comm, comp)) / iv.length(comm)


def test_gpu_trace_has_hta_rule_and_device_only_overlap_per_rank(gpu):
    tr, doc = gpu
    hta, dev = doc["hta_comm_overlap_pct_by_rank"], doc["device_comm_overlap_pct_by_rank"]
    assert "recorded_comm_overlap_pct_by_rank" not in doc and "overlap_pct_by_rank" not in doc
    # equal to HTA 0.5.0's get_comm_comp_overlap on these traces (tests/integration/test_hta.py)
    assert hta == {"0": 29.23, "1": 21.08, "2": 23.91, "3": 13.87, "4": 12.9, "5": 17.31, "6": 14.32, "7": 30.84}
    assert dev == {"0": 20.5, "1": 25.92, "2": 19.11, "3": 16.39, "4": 18.29, "5": 16.6, "6": 16.37, "7": 16.53}
    for r in range(8):
        assert dev[str(r)] == pytest.approx(device_only(tr, r), abs=0.005)
    assert max(hta[r] - dev[r] for r in hta) == pytest.approx(14.31)  # rank 7: HTA's rule says 14 pp more


def test_hta_rule_counts_host_launch_ops_as_compute(gpu):
    """The part of the difference that is host time: HTA's rule with and without the cpu ops that carry
    args.stream (Triton launches). Adding compute can only add overlap, and here it adds on every rank."""
    tr, doc = gpu
    with_host = timeline.comm_overlap_by_rank(tr, hta_like=True).set_index("rank")["comm_overlap_pct"]
    host_ops = tr.extra.pop("hta_cpu_stream_ops")
    try:
        without = timeline.comm_overlap_by_rank(tr, hta_like=True).set_index("rank")["comm_overlap_pct"]
    finally:
        tr.extra["hta_cpu_stream_ops"] = host_ops
    added = (with_host - without).round(2)
    assert (added > 0).all() and added.tolist() == [9.65, 5.74, 8.56, 1.4, 1.44, 8.25, 3.2, 18.77]
    assert with_host.round(2).tolist() == list(doc["hta_comm_overlap_pct_by_rank"].values())


def test_cpu_run_has_only_the_recorded_spans_overlap(cpu):
    tr, doc = cpu
    assert "hta_comm_overlap_pct_by_rank" not in doc and "device_comm_overlap_pct_by_rank" not in doc
    got = doc["recorded_comm_overlap_pct_by_rank"]
    assert got == {"0": 29.22, "1": 25.77}
    # comm = each collective from its launch to its completion; comp = compute regions minus blocked waits
    c, comp = tr.collectives, exposure.compute_sets(tr)
    for r in tr.ranks:
        mine = c[c["rank"] == r]
        comm = iv.merge(mine["call_ns"].to_numpy(np.int64), mine["end_ns"].to_numpy(np.int64))
        assert got[str(r)] == pytest.approx(100 * iv.length(iv.intersect(comm, comp[r])) / iv.length(comm),
                                            abs=0.005)


def test_the_documented_schema_version_is_the_one_written():
    """docs/analysis.md names the version `report --json` writes and has a row for every version after 2:
    a reader of a document learns there what its keys mean."""
    import re

    from paths import ROOT

    text = (ROOT / "docs" / "analysis.md").read_text(encoding="utf-8")
    assert re.search(r"carries `schema_version` \((\d+)\)", text).group(1) == str(SCHEMA_VERSION)
    rows = [int(v) for v in re.findall(r"^\| (\d+) \| ", text, flags=re.M)]
    assert rows == list(range(3, SCHEMA_VERSION + 1))
