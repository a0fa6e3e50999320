"""`commscope layout` on the real 8×H100 modded-nanogpt traces (two ranks, copied to a temp dir).

What the fixture holds (see docs/layout.md): the era's tied embedding/lm_head gradient arrives transposed,
so AccumulateGrad copies it (first micro-step) and adds it (later ones) with the generic elementwise
kernel, ~4× slower than the aligned bf16 add of the same size in the same trace. Those are the only
mismatches; matmuls with transposed operands and the many aligned elementwise ops must not be reported.
"""
from __future__ import annotations

import gzip
import json
import shutil
from collections import Counter

import pytest

from commscope.analyze.layout_report import layout_report
from commscope.load import load_path
from paths import TESTS

FIXTURE = TESTS / "data" / "modded-nanogpt-8xh100"


def transposed_grad_ops(rank: int) -> Counter:
    """Read straight from the raw trace (json, not commscope's reader): the cpu ops that copy or add the
    transposed (50304, 768) tied gradient into its contiguous buffer, by name. What the report must find."""
    with gzip.open(FIXTURE / f"rank{rank}.json.gz") as f:
        ev = json.load(f)["traceEvents"]
    return Counter(e["name"] for e in ev if e.get("cat") == "cpu_op" and e["name"] in ("aten::copy_", "aten::add_")
                   and e["args"].get("Input Dims", [])[:2] == [[50304, 768]] * 2
                   and e["args"].get("Input Strides", [])[:2] == [[768, 1], [1, 50304]])


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    d = tmp_path_factory.mktemp("mn8")
    for r in (0, 1):
        shutil.copy(FIXTURE / f"rank{r}.json.gz", d / f"rank{r}.json.gz")
    return d


@pytest.fixture(scope="module")
def report(two_ranks):
    return layout_report(load_path(two_ranks))


def test_only_the_transposed_tied_gradient_is_reported(report):
    high = report.findings[report.findings["confidence"] == "high"]
    # per rank: the copies and adds whose cpu op recorded shapes (one of each in the fixture's two steps)
    raw = {(r, op): n for r in (0, 1) for op, n in transposed_grad_ops(r).items()}
    assert sorted(raw.items()) == [((0, "aten::add_"), 1), ((0, "aten::copy_"), 1), ((1, "aten::add_"), 1),
                                   ((1, "aten::copy_"), 1)]
    assert dict(high.groupby(["rank", "op"]).size()) == raw
    for _, r in high.iterrows():
        assert r["dims"][:2] == [[50304, 768], [50304, 768]]
        assert r["strides"][:2] == [[768, 1], [1, 50304]]
        assert r["where"] == "backward: param (50304, 768) grad accumulation"
        assert "elementwise_kernel<128, 4" in r["kernel"] and "vectorized" not in r["kernel"]
        assert not r["deliberate"]
    # priced against the aligned bf16 add of the same size in the trace (~3.2 TB/s on H100)
    adds = high[high["op"] == "aten::add_"]
    assert adds["peak_source"].eq("aligned twin").all() and (adds["severity"] == "severe").all()
    copies = high[high["op"] == "aten::copy_"]  # no aligned copy of that size: the add, any aligned op
    assert copies["peak_source"].eq("aligned peer").all()
    assert 2800 < adds["peak_gbps"].min() and adds["peak_gbps"].max() < 3400
    assert (adds["pct_of_peak"] < 30).all() and (adds["duration_us"] > 300).all()
    assert (adds["est_saving_us"] > 200).all()


def test_kernel_only_evidence_for_the_launch_outside_the_cpu_window(report):
    low = report.findings[report.findings["confidence"] == "low"]
    # one generic add per rank was launched before the profiler saw its cpu op: found from the kernel alone
    assert sorted(low["rank"]) == [0, 1]
    assert set(low["op"]) == {"CUDAFunctor_add<c10::BFloat16>"}
    assert (low["numel"] == 50304 * 768).all()
    assert low["peak_source"].str.contains("× its vectorized peer").all()
    # shapes were recorded, but its op was not: the kernel is not linked to one (said in the notes too)
    assert (low["where"] == "unknown (kernel not linked to a cpu op with shapes)").all()
    assert any(n.startswith(f"{len(low)} kernel-only finding(s) have no place") for n in report.notes)


def test_contention_pairs_reduce_scatter_with_the_generic_transpose_add(report):
    """Rank 1's reduce_scatter of known size ran alone in another step: the generic add that overlaps it is
    charged. Rank 0's reduce_scatter under the same add was launched before the profiling window: with no
    size, no like collective gives it a baseline (the pre-window ones on these ranks run 36–490 µs, bf16
    and f32), so it is not judged, and the notes say so rather than pool unlike messages."""
    c = report.contention
    assert len(c)
    pair = c[c["kernel"].str.contains("elementwise_kernel<128, 4") & (c["kernel_blocks"] == 75456)]
    assert (pair["op"] == "reduce_scatter").all() and sorted(pair["rank"]) == [1]
    charged = pair.iloc[0]
    assert charged["separable"] and charged["evidence"] == "same rank alone"
    assert charged["attributable_us"] == pytest.approx(charged["duration_us"] - charged["alone_us"])
    assert (pair["capacity_blocks"] == 132 * 16).all()
    assert c["bytes"].notna().all() and c["separable"].astype(bool).all()
    assert (c["attributable_us"] >= 20).all() and c["evidence"].str.startswith("same rank alone").all()
    assert (c["inflation"] >= 1.2).all()
    un = report.contention_unjudged
    under_add = un[un["kernel"].str.contains("elementwise_kernel<128, 4") & (un["kernel_blocks"] == 75456)]
    assert sorted(under_add["rank"]) == [0, 1] and set(under_add["op"]) == {"reduce_scatter"}
    assert (un["overlap_frac"] >= 0.25).all() and set(un["step"]) == {-1}
    note = next(n for n in report.notes if n.startswith("SM contention is not judged for"))
    assert note.startswith(f"SM contention is not judged for {len(un)} collective(s) of unknown size")
    assert report.to_json()["contention_unjudged"][0]["rank"] == int(un["rank"].iloc[0])


def test_cli_json_shape(tmp_path):
    from typer.testing import CliRunner

    from commscope.cli import app

    shutil.copy(FIXTURE / "rank0.json.gz", tmp_path / "rank0.json.gz")
    res = CliRunner().invoke(app, ["layout", str(tmp_path), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert set(doc) == {"device", "findings", "unflagged", "contention", "contention_unjudged", "notes"}
    assert doc["unflagged"] == []  # every mismatch here is ≥ 4× slower than its reference
    # the notes: the kernel-only finding, whose op the profiler did not see, has no place; the collectives
    # launched before the window (no size) that SM-filling kernels overlapped are not judged
    assert [n[:50] for n in doc["notes"]] == ["1 kernel-only finding(s) have no place: their kern",
                                              f"SM contention is not judged for {len(doc['contention_unjudged'])} "
                                              "collective(s) of"]
    assert doc["device"] == "NVIDIA H100 80GB HBM3"
    f = doc["findings"][0]
    for key in ("op", "kernel", "dims", "strides", "duration_us", "achieved_gbps", "peak_gbps", "est_saving_us",
                "where", "confidence", "deliberate"):
        assert key in f
    n = sum(transposed_grad_ops(0).values())  # rank 0: 1 add + 1 copy (high), then 1 kernel-only add (low)
    assert n == 2 and len(doc["findings"]) == n + 1
    assert [x["confidence"] for x in doc["findings"]] == ["high"] * n + ["low"]


def test_cli_json_gives_byte_counts_as_integers():
    """A collective's size in the contention rows is a whole number (its float column's 77266944.0 read as
    a measurement)."""
    from typer.testing import CliRunner

    from commscope.cli import app

    res = CliRunner().invoke(app, ["layout", str(FIXTURE), "--json"])
    assert res.exit_code == 0, res.output
    sizes = [c["bytes"] for c in json.loads(res.stdout)["contention"]]
    known = [b for b in sizes if b is not None]  # a pre-window collective has no size
    assert known and all(type(b) is int and b > 0 for b in known)


def test_cli_errors_are_one_line(tmp_path):
    from typer.testing import CliRunner

    from commscope.cli import app

    res = CliRunner().invoke(app, ["layout", str(tmp_path / "missing")])
    assert res.exit_code != 0 and "does not exist" in str(res.exception)
    res = CliRunner().invoke(app, ["layout", str(tmp_path), "--peak-gbps", "-1"])
    assert "--peak-gbps must be positive" in str(res.exception)


@pytest.mark.parametrize("width", [80, 100, 140, 220])
def test_terminal_tables_fit_the_width_and_never_cut_the_place(report, width):
    """At any width: no line is wider than the console, every finding's place is whole (the actionable
    part), one data row per finding group and per contention row; from 100 columns every contention's
    evidence is whole too (narrower, the longest wraps onto a second line)."""
    from rich.console import Console

    from commscope.analyze.layout_report import grouped
    from reports.layout_terminal import print_layout_findings

    con = Console(width=width, record=True)
    groups = grouped(report.findings)
    print_layout_findings(report, groups, con)
    text = con.export_text()
    lines = text.splitlines()
    assert max(len(x.rstrip()) for x in lines) <= width
    for where in groups["where"]:
        assert str(where) in text
    for why in report.contention["evidence"] if width >= 100 else []:
        assert str(why).removeprefix("not separable: ") in text
    assert sum(x.lstrip().startswith(("add_ ", "copy_ ", "CUDAFun")) for x in lines) == len(groups)
    assert sum(x.split()[:2] in ([r, s] for r in ("0", "1") for s in ("10", "11")) for x in lines if x.strip()) \
        == len(report.contention)
    assert "step —" not in text
    assert "ew<128, 4, …>" in text or "elementwise_kernel<128, 4, …>" in text
    if width >= 140:  # room for the full op and kernel names
        assert "CUDAFunctor_add<c10::BFloat16>" in text and "elementwise_kernel<128, 4, …>" in text


def test_a_collective_outside_any_step_shows_a_dash_explained_under_the_table(report):
    """Step -1 (the collective ran outside every step the trace marks) is "—", with the legend."""
    import dataclasses

    from rich.console import Console

    from commscope.analyze.layout_report import grouped
    from reports.layout_terminal import print_layout_findings

    c = report.contention.copy()
    c.loc[c.index[0], "step"] = -1
    con = Console(width=140, record=True)
    print_layout_findings(dataclasses.replace(report, contention=c), grouped(report.findings), con)
    text = con.export_text()
    assert sum(x.split()[:2] == [str(c["rank"].iloc[0]), "—"] for x in text.splitlines()) == 1
    assert "step —: outside any recorded step" in text


def test_all_eight_ranks_give_the_figures_docs_layout_md_quotes():
    """docs/layout.md, "What it reports on the inputs we have": every figure there, from all 8 ranks."""
    rep = layout_report(load_path(FIXTURE))
    f = rep.findings
    high, low = f[f["confidence"] == "high"], f[f["confidence"] == "low"]
    assert dict(high.groupby("op").size()) == {"aten::add_": 8, "aten::copy_": 8}
    adds, copies = high[high["op"] == "aten::add_"], high[high["op"] == "aten::copy_"]
    assert round(adds["duration_us"].mean(), 1) == 333.2 and round(copies["duration_us"].mean(), 1) == 299.0
    # each rank's own aligned twin: one GPU's bandwidth, not the best of eight
    assert set(high["peak_gbps"].round()) == {3021, 3120, 3145, 3147, 3155, 3162, 3179, 3188}
    assert (high.groupby("rank")["peak_gbps"].nunique() == 1).all()
    assert round(adds["achieved_gbps"].mean()) == 696 and round(copies["achieved_gbps"].mean()) == 517
    assert len(low) == 8 and (round(low["slowdown"].min(), 1), round(low["slowdown"].max(), 1)) == (4.1, 4.6)
    c = rep.contention
    assert len(c) == 5 and int(c["separable"].sum()) == 5
    un = rep.contention_unjudged
    assert len(un) == 58 and set(un["rank"]) == set(range(8)) and set(un["step"]) == {-1}
    assert round(un["duration_us"].max()) == 803
    rank1_rs = c[(c["rank"] == 1) & c["separable"]].sort_values("duration_us").iloc[-1]
    assert (round(rank1_rs["duration_us"]), round(rank1_rs["alone_us"])) == (420, 228)
    sep = c[c["separable"]]
    assert (round(sep["attributable_us"].min()), round(sep["attributable_us"].max())) == (36, 192)


def test_the_page_says_what_the_layout_checks_could_not_judge(two_ranks):
    """The HTML section carries the report's notes, as the terminal prints them: here the kernel-only
    finding without a place and the pre-window collectives not judged for contention."""
    import html

    from commscope.analyze.report_context import report_context
    from commscope.analyze.summary import summarize
    from reports.layout_section import render_layout

    tr = load_path(two_ranks)
    ctx = report_context(tr, summarize(tr, with_hta=False))
    page = render_layout(ctx)
    assert ctx.layout.notes and all(f'<p class="note">{html.escape(n)}</p>' in page for n in ctx.layout.notes)
    assert "SM contention is not judged for" in page


def test_kernels_without_a_duration_are_neither_findings_nor_yardsticks(tmp_path):
    """Every event's dur set to 0 (a trace whose tool wrote no durations): no bandwidth or ratio is computed
    from them (no divide-by-zero warning on stderr, no nan or inf), and no finding
    rests on the generic kernels alone."""
    import warnings

    for r in (0, 1):
        with gzip.open(FIXTURE / f"rank{r}.json.gz") as f:
            doc = json.load(f)
        for e in doc["traceEvents"]:
            if "dur" in e:
                e["dur"] = 0
        (tmp_path / f"rank{r}.json").write_text(json.dumps(doc))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        rep = layout_report(load_path(str(tmp_path), with_ops=True))
    kernel_only = rep.findings[rep.findings["kind"].astype(str).str.contains("kernel", na=False)]
    assert kernel_only.empty


@pytest.mark.parametrize("name", [5, None, ["H100"], {"n": 1}])
def test_a_device_named_by_no_string_is_a_device_this_project_has_not_measured(tmp_path, name):
    """deviceProperties[0].name of the wrong type: `layout` reads the trace as it reads one naming an
    unmeasured GPU (no reference bandwidth), never a traceback."""
    from commscope.analyze.layout_report import device_name

    with gzip.open(FIXTURE / "rank0.json.gz") as f:
        doc = json.load(f)
    doc["deviceProperties"][0]["name"] = name
    with gzip.open(tmp_path / "rank0.json.gz", "wt") as f:
        json.dump(doc, f)
    trace = load_path(str(tmp_path))
    assert device_name(trace.config) is None
    rep = layout_report(trace)
    high = rep.findings[rep.findings["confidence"] == "high"]
    assert rep.device is None and dict(high["op"].value_counts()) == dict(transposed_grad_ops(0))
