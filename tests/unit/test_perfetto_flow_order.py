"""Perfetto export: each collective call's flow arrows run forward in time, in the order the ranks' slices
start, the chain ending at the rank that started last."""
from collections import defaultdict

from commscope.analyze.left_in_flight import left_in_flight
from commscope.load import load_path
from paths import TESTS
from reports.perfetto import build_perfetto


def _flows_and_slices(doc):
    flows = defaultdict(list)
    slices = defaultdict(list)
    for e in doc["traceEvents"]:
        if e["ph"] in ("s", "t", "f"):
            flows[e["id"]].append(e)
        elif e["ph"] == "X" and e.get("cat") == "comm":
            slices[(e["pid"], e["tid"])].append(e)
    return flows, slices


def test_flow_arrows_never_point_back_in_time_on_a_run_dir():
    trace = load_path(str(TESTS / "data" / "cpurun-hooks-gloo2"))
    doc = build_perfetto(trace, left_in_flight(trace))
    flows, slices = _flows_and_slices(doc)
    assert len(flows) == 57  # calls seen on both ranks of the run
    ends_on_rank = defaultdict(int)
    for evs in flows.values():
        assert [e["ph"] for e in evs] == ["s", "f"] and sorted(e["pid"] for e in evs) == [0, 1]
        assert evs[0]["ts"] <= evs[1]["ts"]  # s not after f
        starts = []
        for e in evs:  # each event lies inside exactly one comm slice of its track, just after its start
            inside = [s for s in slices[(e["pid"], e["tid"])] if s["ts"] <= e["ts"] <= s["ts"] + s["dur"]]
            assert len(inside) == 1
            assert 0 <= e["ts"] - inside[0]["ts"] <= 0.001 + 1e-9
            starts.append(inside[0]["ts"])
        assert starts == sorted(starts)  # the chain follows start order: f is the rank that started last
        ends_on_rank[evs[1]["pid"]] += 1
    # both ranks are last in some calls, so the chain is not rank order
    assert ends_on_rank[0] > 0 and ends_on_rank[1] > 0


def test_flow_chains_across_eight_gpus_run_forward():
    trace = load_path(str(TESTS / "data" / "modded-nanogpt-8xh100"))
    doc = build_perfetto(trace, left_in_flight(trace))
    flows, _ = _flows_and_slices(doc)
    steps = [(a["ts"], b["ts"]) for evs in flows.values() for a, b in zip(evs, evs[1:])]
    assert len(steps) == 357
    assert all(a <= b for a, b in steps)
    for evs in flows.values():
        assert evs[0]["ph"] == "s" and evs[-1]["ph"] == "f" and all(e["ph"] == "t" for e in evs[1:-1])
        assert len({e["pid"] for e in evs}) == len(evs)  # one event per rank


def test_cpu_trace_compute_tracks_are_named_as_threads():
    trace = load_path(str(TESTS / "data" / "gloo2"))
    doc = build_perfetto(trace, left_in_flight(trace))
    names = sorted({e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"
                    and e["args"]["name"].startswith("compute")})
    assert names == ["compute (CPU thread 11735)", "compute (CPU thread 11736)"]
