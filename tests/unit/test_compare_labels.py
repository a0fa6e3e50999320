"""Per-label exposed communication of commscope run groups: Welch t CIs, verdicts, CLI output."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from commscope.cli import app
from commscope.analyze.compare_labels import (BOUNDARY_LABEL, PLACEMENT_SUFFIX, STEP_LABEL, compare_labels,
                                              run_samples)
from commscope.load import load_path
from rundirs import write_run
from reports.compare_terminal import label_deltas_text

MS = 1_000_000


def samples_of(*groups) -> list[list]:
    """compare_labels' input for groups of run folders: each run loaded, as `commscope compare` loads it."""
    return [[run_samples(load_path(str(p))) for p in runs] for runs in groups]


def make_run(path: Path, exposed: dict, step_ms: list[float], world_size: int = 2, status="completed",
             gap_ms: float = 0.001):
    """Synthetic run dir: per step, label collectives whose wait blocks `exposed[label][step]` ms; each step
    starts `gap_ms` after the previous one ended."""
    n = len(step_ms)
    events = {}
    for rank in range(world_size):
        t, seq, lines = 10**18, 0, []
        for s, dur in enumerate(step_ms):
            start = t
            cur = start + MS
            for label, per_step in exposed.items():
                w = int(per_step[s] * MS)
                lines.append({"kind": "collective", "rank": rank, "step": s, "label": label, "phase": "reduce",
                              "op": "all_reduce", "bytes": 1024, "dtype": "float32", "group": "0", "group_size": world_size,
                              "seq": seq, "call_ns": cur, "return_ns": cur + 1000, "wait_ns": cur + 2000,
                              "wait_end_ns": cur + 2000 + w, "start_ns": None, "end_ns": cur + 2000 + w, "timing": "wall"})
                seq += 1
                cur += 2000 + w
            end = start + int(dur * MS)
            lines.append({"kind": "step", "rank": rank, "step": s, "loss": 5.0, "start_ns": start, "end_ns": end, "tokens": 64})
            t = end + int(gap_ms * MS)
        events[rank] = lines
    return write_run(path, events, summary={"status": status, "backend": "gloo", "device": "cpu",
                                            "losses": [5.0 - 0.1 * s for s in range(n)], "step_times_ms": step_ms})


def _groups(tmp_path, runs=5):
    base, cand = tmp_path / "base", tmp_path / "cand"
    for i in range(runs):
        # step 0 is warm-up (9 ms waits, 50 ms step) and must be dropped
        make_run(base / f"r{i}", {"attn": [9, 2.0 + 0.1 * i, 2.1, 1.9 + 0.05 * i], "mlp": [9, 1, 1.1 + 0.02 * i, 0.9]},
                 [50, 10 + 0.2 * i, 10.1, 9.9])
        make_run(cand / f"r{i}", {"attn": [9, 0.5 + 0.1 * i, 0.6, 0.4], "mlp": [9, 1.05, 1.0 + 0.03 * i, 0.95],
                                  "lm_head": [9, 0.3, 0.3 + 0.01 * i, 0.32]},
                 [50, 8.5 + 0.1 * i, 8.6, 8.4])
    return base, cand


def test_run_samples_drop_warmup_and_average_ranks(tmp_path):
    r = make_run(tmp_path / "r", {"attn": [9, 2.0, 3.0]}, [50, 10, 12], world_size=2)
    s = run_samples(load_path(str(r)))
    assert sorted(s["step"].unique()) == [1, 2]
    got = {(row.step, row.label): row.ms for row in s.itertuples()}
    # epoch-ns timestamps pass through float64 in the loader (NaN-able columns): 256 ns resolution
    close = dict(abs=1e-3)
    assert got[(1, "attn")] == pytest.approx(2.0, **close) and got[(2, "attn")] == pytest.approx(3.0, **close)
    assert got[(1, STEP_LABEL)] == pytest.approx(10.0, **close) and got[(2, STEP_LABEL)] == pytest.approx(12.0, **close)


def test_verdicts_over_runs(tmp_path):
    base, cand = _groups(tmp_path)
    t = compare_labels(samples_of(sorted(base.iterdir()), sorted(cand.iterdir())), ["base", "cand"])
    by = {r["label"]: r for r in t.to_dict("records")}
    assert by["attn"]["verdict"] == "better" and by["attn"]["ci_high"] < 0
    # per-run means of steps 1..3: base attn (2.0+2.1+1.9)/3 + small per-run offsets
    assert by["attn"]["base_ms"] == pytest.approx(
        sum((2.0 + 0.1 * i + 2.1 + 1.9 + 0.05 * i) / 3 for i in range(5)) / 5, abs=1e-3)
    assert by["mlp"]["verdict"] == "unchanged" and by["mlp"]["ci_low"] < 0 < by["mlp"]["ci_high"]
    # a label only the candidate has: the baseline spent 0 ms on it, but a new (or renamed) label's difference
    # is no verdict on speed, and a note names it
    assert by["lm_head"]["verdict"] == "only in candidate" and by["lm_head"]["base_ms"] == 0.0
    assert by["lm_head"]["delta_ms"] == pytest.approx(by["lm_head"]["cand_ms"]) and math.isnan(by["lm_head"]["ci_low"])
    assert "cand: labels one side never has, 0 ms there and no verdict (added or removed; a renamed label reads as " \
           "one of each): only in cand: lm_head" in t.attrs["notes"]
    step_delta = sum(8.5 + 0.1 * i + 8.6 + 8.4 - (10 + 0.2 * i + 10.1 + 9.9) for i in range(5)) / 15
    assert by[STEP_LABEL]["verdict"] == "better" and by[STEP_LABEL]["delta_ms"] == pytest.approx(step_delta, abs=1e-3)
    assert set(t["unit"]) == {"runs"} and set(t["n_base"]) == {5}


@pytest.mark.parametrize("runs", [1, 2, 4])
def test_too_few_runs_give_no_ci(tmp_path, runs):
    """Below 5 runs a side no CI is given: verdict "too few runs", the means still given."""
    base, cand = _groups(tmp_path, runs=runs)
    t = compare_labels(samples_of(sorted(base.iterdir()), sorted(cand.iterdir())), ["base", "cand"])
    assert set(t["verdict"]) == {"too few runs", "only in candidate"} and t["ci_low"].isna().all()
    assert set(t["n_cand"]) == {runs} and t["delta_ms"].notna().all()
    res = CliRunner().invoke(app, ["compare", str(base), str(cand), "--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)["labels"]
    assert {r["verdict"] for r in rows} == {"too few runs", "only in candidate"} and all(r["ci_low"] is None for r in rows)
    over = label_deltas_text(t).splitlines()[1].split("  ")
    assert ("1 run" if runs == 1 else f"{runs} runs") in [c.strip() for c in over]


def test_cis_are_welch_t_intervals_step_time_alone_the_rest_simultaneous(tmp_path):
    """(step time) at 95%; the other rows of the candidate Bonferroni-simultaneous at 95% together, each
    interval equal to scipy's Welch interval at its level over the per-run means."""
    from scipy import stats

    base, cand = _groups(tmp_path)
    samples = samples_of(sorted(base.iterdir()), sorted(cand.iterdir()))
    t = compare_labels(samples, ["base", "cand"])
    m = len(t) - 2
    assert m == 3  # (step boundary), attn, mlp: not (step time), nor lm_head, which the baseline never has
    for r in t.to_dict("records"):
        if r["label"] == "lm_head":
            assert r["verdict"] == "only in candidate" and math.isnan(r["ci_level"])
            continue
        level = 0.95 if r["label"] == STEP_LABEL else 1 - 0.05 / m
        assert r["ci_level"] == pytest.approx(level)
        if r["ci_low"] == r["ci_high"]:  # both sides flat within float rounding (the boundary's gap): exact
            assert r["label"] == BOUNDARY_LABEL and r["ci_low"] == pytest.approx(r["delta_ms"])
            continue
        per_run = [[df.loc[df["label"] == r["label"], "ms"].mean() if (df["label"] == r["label"]).any() else 0.0
                    for df in g] for g in samples]
        ci = stats.ttest_ind(per_run[1], per_run[0], equal_var=False).confidence_interval(level)
        assert (r["ci_low"], r["ci_high"]) == pytest.approx((ci.low, ci.high), abs=1e-9), r["label"]
    assert t.attrs["ci"] == ("CI: Welch's t interval over runs, 95% for (step time); the other rows of a "
                                   "candidate are 95% all together (each row's interval at 98.33% for 3 rows, "
                                   "Bonferroni), so identical groups read unchanged on every row in 19 comparisons "
                                   "of 20")


def test_identical_groups_read_unchanged_on_every_row():
    """Two groups of 5 runs drawn from one distribution per label, 200 times: a comparison calling any
    label row better or worse must stay near the 5% family-wise rate (a 95% percentile bootstrap per row
    calls some row of 20 changed in 57 of 60 such comparisons)."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(7)
    labels = [f"l{i}" for i in range(20)]

    def run():
        rows = [{"step": s, "label": lab, "ms": rng.lognormal(0.0, 0.4)} for s in range(1, 9) for lab in labels]
        return pd.DataFrame(rows + [{"step": s, "label": STEP_LABEL, "ms": 10 + rng.normal()} for s in range(1, 9)])

    flagged = 0
    for _ in range(200):
        t = compare_labels([[run() for _ in range(5)], [run() for _ in range(5)]], ["base", "cand"])
        rows = t[t["label"] != STEP_LABEL]
        flagged += bool(rows["verdict"].isin(["better", "worse"]).any())
    assert flagged <= 20, flagged  # 5% of 200 is 10; Bonferroni keeps it at or below


def test_cli_shows_labels_for_run_dirs(tmp_path):
    base, cand = _groups(tmp_path)
    res = CliRunner().invoke(app, ["compare", str(base), str(cand), "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert {r["label"]: r["verdict"] for r in data["labels"]}["attn"] == "better"
    # time = sum(step_times_ms) / 1000 per run: base run 0 = (50 + 10 + 10.1 + 9.9) / 1000
    assert data["groups"][0]["times"][0] == pytest.approx(0.08)
    res = CliRunner().invoke(app, ["compare", str(base), str(cand)])
    assert res.exit_code == 0 and "attn" in res.output and "better" in res.output


def test_cli_keeps_the_table_when_a_run_cannot_be_loaded(tmp_path):
    base, cand = _groups(tmp_path, runs=2)
    # a completed summary.json but no rank folders: the time/loss table stands, the labels cannot
    write_run(cand / "r9", {}, world_size=2,
              summary={"status": "completed", "step_times_ms": [1.0], "losses": [2.0]})
    res = CliRunner().invoke(app, ["compare", str(base), str(cand), "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["groups"][1]["runs"] == 3 and "labels" not in data and "rank" in data["labels_error"]


def test_step_boundary_gaps_are_compared_like_a_label(tmp_path):
    """The host time at step boundaries (here the gaps: no compute regions): 3 ms a step in the baseline,
    0.5 ms in the candidate, one sample per step after the first (which has no boundary)."""
    base, cand = tmp_path / "base", tmp_path / "cand"
    for i in range(5):
        make_run(base / f"r{i}", {"attn": [1, 1, 1, 1]}, [20, 10, 10, 10], gap_ms=3.0 + 0.1 * i)
        make_run(cand / f"r{i}", {"attn": [1, 1, 1, 1]}, [20, 10, 10, 10], gap_ms=0.5 + 0.1 * i)
    s = run_samples(load_path(str(base / "r0")))
    got = s[s["label"] == BOUNDARY_LABEL].set_index("step")["ms"]
    assert got.index.tolist() == [1, 2, 3] and got.tolist() == pytest.approx([3.0] * 3, abs=1e-3)
    t = compare_labels(samples_of(sorted(base.iterdir()), sorted(cand.iterdir())), ["base", "cand"])
    row = t[t["label"] == BOUNDARY_LABEL].iloc[0]
    assert row["metric"] == "boundary_ms" and row["verdict"] == "better"
    assert row["base_ms"] == pytest.approx(3.2, abs=1e-3) and row["delta_ms"] == pytest.approx(-2.5, abs=1e-3)
    assert t[t["label"] == "attn"].iloc[0]["verdict"] == "unchanged"


def test_the_profiler_windows_boundary_gives_no_boundary_sample():
    """tests/data/layout/standard profiles step 3: its start-up (seconds) is the profiler's, not the run's
    host time, so steps 1 and 2 give boundary samples and step 3 none; nor does it give a step time (the
    report's headline leaves it out too: step_gaps.profiler_steps)."""
    from commscope.analyze.compare_labels import BOUNDARY_LABEL, STEP_LABEL
    from paths import TESTS

    s = run_samples(load_path(str(TESTS / "data" / "layout" / "standard")))
    bounds = s[s["label"] == BOUNDARY_LABEL]
    assert bounds["step"].tolist() == [1, 2] and bounds["ms"].max() < 100
    assert s[s["label"] == STEP_LABEL]["step"].tolist() == [1, 2]
    assert s.attrs["left_out"] == {3: "profiler window"}


def test_a_run_whose_rank_folders_come_from_two_jobs_is_skipped_not_timed(tmp_path):
    """A run directory with a rank folder copied from another run: compare leaves it out with the reason,
    rather than timing it from its summary.json and only skipping its labels."""
    from commscope.load.run_groups import load_group

    base, cand = _groups(tmp_path)
    for r, job in ((0, "a1"), (1, "b2")):
        meta_path = cand / "r0" / f"rank{r}" / "meta.json"
        meta = json.loads(meta_path.read_text())
        meta["clock"] = {"offset_ns": 0, "error_ns": 0, "method": "barrier-allgather", "rounds": 5, "job": job}
        meta_path.write_text(json.dumps(meta))
    group = load_group(cand)
    assert [r.path.name for r in group.runs] == ["r1", "r2", "r3", "r4"]
    (path, why), = group.skipped
    assert path.name == "r0" and why.startswith(f"mixed: {cand / 'r0'}: its rank folders were recorded by 2 different "
                                                "jobs (meta.json clock.job: rank(s) 0 job a1; rank(s) 1 job b2)")


def test_a_renamed_label_reads_as_one_only_in_each_side_with_no_verdict(tmp_path):
    """attn in the baseline, attention in the candidate: neither 16 ms saved nor 16 ms added, but one label
    only in the baseline and one only in the candidate; the other rows' family leaves both out."""
    base, cand = tmp_path / "base", tmp_path / "cand"
    for i in range(5):
        make_run(base / f"r{i}", {"attn": [9, 16 + 0.1 * i, 16.2], "mlp": [9, 1, 1.1 + 0.02 * i]}, [50, 30, 30.1])
        make_run(cand / f"r{i}", {"attention": [9, 16 + 0.1 * i, 16.1], "mlp": [9, 1, 1.1 + 0.03 * i]}, [50, 30, 30.2])
    t = compare_labels(samples_of(sorted(base.iterdir()), sorted(cand.iterdir())), ["base", "cand"])
    by = {r["label"]: r for r in t.to_dict("records")}
    assert (by["attn"]["verdict"], by["attention"]["verdict"]) == ("only in baseline", "only in candidate")
    assert by["attn"]["cand_ms"] == 0.0 and by["attention"]["base_ms"] == 0.0
    assert {lab for lab, r in by.items() if not math.isnan(r["ci_level"]) and lab != STEP_LABEL} == \
        {"mlp", BOUNDARY_LABEL}
    assert by["mlp"]["ci_level"] == pytest.approx(1 - 0.05 / 2)
    assert t.attrs["notes"][0] == ("cand: labels one side never has, 0 ms there and no verdict (added or removed; a "
                                   "renamed label reads as one of each): only in base: attn; only in cand: attention")


def test_a_placement_row_on_one_side_only_is_named_not_dropped_unsaid(tmp_path):
    """A recorded CPU run (regions: the end of backward is known) against a copy whose 'attn' is renamed: the
    placement rows of attn and of its new name have no counterpart; they get no row, and a note names them."""
    import shutil

    from paths import TESTS

    base, cand = tmp_path / "base" / "r0", tmp_path / "cand" / "r0"
    shutil.copytree(TESTS / "data" / "cpurun-hooks-gloo2", base)
    shutil.copytree(TESTS / "data" / "cpurun-hooks-gloo2", cand)
    for f in cand.glob("rank*/events.jsonl"):
        f.write_text(f.read_text().replace('"label":"attn"', '"label":"attention"'))
    t = compare_labels(samples_of([base], [cand]), ["base", "cand"])
    placed = {lab for lab in t["label"] if lab.endswith(PLACEMENT_SUFFIX)}
    assert placed and not {f"attn{PLACEMENT_SUFFIX}", f"attention{PLACEMENT_SUFFIX}"} & placed
    assert (f"cand: placement rows left out, placed on one side only: attention{PLACEMENT_SUFFIX}, "
            f"attn{PLACEMENT_SUFFIX}") in t.attrs["notes"]
    res = CliRunner().invoke(app, ["compare", str(base), str(cand), "--json"])
    rows = {r["label"]: r for r in json.loads(res.output)["labels"]}
    assert rows["attn"]["verdict"] == "only in baseline" and rows["attn"]["ci_low"] is None
