"""commscope compare: the record's published table, hand-computed statistics, bad/incomplete input."""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from commscope.cli import app
from reports import compare_terminal
from commscope.analyze.compare import compare_groups, slower_candidates
from commscope.load.run_groups import load_group
from commscope.errors import UserError
from commscope.load.speedrun_log import SEPARATOR, parse_log

from cli_result import exit_code
from rundirs import write_run
from paths import TESTS

FIXTURE = TESTS / "data" / "modded-nanogpt-logs"

# The record README's table (tests/data/README.md), printed with 4 decimals.
PUBLISHED = {
    "baseline": dict(runs=4, time_mean="132.7217", time_std="0.1176", time_delta="0.0000",
                     loss_mean="3.2792", loss_std="0.0008", loss_delta="0.0000", loss_p="0.0632"),
    "premul-o": dict(runs=10, time_mean="131.2106", time_std="0.0660", time_delta="-1.5111",
                     loss_mean="3.2777", loss_std="0.0020", loss_delta="-0.0015", loss_p="0.0024"),
}


def _log(path: Path, steps: int, total: int, final: tuple[float, int] | None, source: str = "") -> Path:
    """A synthetic speedrun log: source, separator, env, separator, step lines."""
    lines = [source or 'print0(f"step:{step}/{train_steps} val_loss:{val_loss:.4f} train_time:{t:.0f}ms")',
             SEPARATOR, "Running Python 3.12", SEPARATOR, "step:0/%d val_loss:10.8258 train_time:0ms" % total]
    lines += [f"step:{s}/{total} train_time:{s * 60}ms step_avg:60.00ms" for s in range(1, steps + 1)]
    if final is not None:
        lines.append(f"step:{total}/{total} val_loss:{final[0]:.4f} train_time:{final[1]}ms step_avg:60.00ms")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def published_groups(tmp_path):
    shutil.copytree(FIXTURE, tmp_path / "logs")
    return [load_group(tmp_path / "logs" / "baseline"), load_group(tmp_path / "logs" / "premul-o")]


def test_fixture_reproduces_published_table(published_groups):
    table = compare_groups(published_groups)
    for row in table.to_dict("records"):
        want = PUBLISHED[row["name"]]
        assert row["runs"] == want["runs"]
        for col, printed in want.items():
            if col != "runs":
                assert f"{row[col]:.4f}" == printed, (row["name"], col, row[col])
    assert math.isnan(table.loc[0, "time_p"])
    assert table.loc[1, "time_p"] < 1e-4  # 1.5 s faster with σ ≈ 0.1 s: overwhelming


def test_fixture_markdown_rows(published_groups):
    md = compare_terminal.comparison_markdown(compare_groups(published_groups)).splitlines()
    assert md[2] == "| baseline | 4 | 132.7217 | 0.1176 | 0.0000 | – | 3.2792 | 0.0008 | 0.0000 | 0.0632 |"
    # Time p as the terminal prints it (the published record's 0.0000 would read as a p of exactly zero)
    assert md[3] == "| premul-o | 10 | 131.2106 | 0.0660 | -1.5111 | <0.0001 | 3.2777 | 0.0020 | -0.0015 | 0.0024 |"


def test_hand_computed_statistics(tmp_path):
    base, cand = tmp_path / "base", tmp_path / "cand"
    base.mkdir(), cand.mkdir()
    for i, (loss, ms) in enumerate([(3.27, 100000), (3.29, 102000), (3.28, 104000)]):
        _log(base / f"{i}.txt", 5, 10, (loss, ms))
    for i, (loss, ms) in enumerate([(3.26, 99000), (3.27, 101000)]):
        _log(cand / f"{i}.txt", 5, 10, (loss, ms))
    t = compare_groups([load_group(base), load_group(cand)], target_loss=3.30)
    b, c = t.iloc[0], t.iloc[1]
    # baseline times 100, 102, 104 s: mean 102, sample σ = 2
    assert b.time_mean == pytest.approx(102.0) and b.time_std == pytest.approx(2.0)
    # candidate 99, 101: mean 100, σ = √2; +/- = -2
    assert c.time_mean == pytest.approx(100.0) and c.time_std == pytest.approx(math.sqrt(2))
    assert c.time_delta == pytest.approx(-2.0)
    # Welch: t = -2 / sqrt(2/2 + 4/3) = -1.3093; df = (7/3)^2 / ((1)^2/1 + (4/3)^2/2) = 5.4444/1.8889 = 2.882
    se2 = 2 / 2 + 4 / 3
    tstat = -2 / math.sqrt(se2)
    df = se2 ** 2 / ((2 / 2) ** 2 / 1 + (4 / 3) ** 2 / 2)
    from scipy.stats import t as student_t
    assert c.time_p == pytest.approx(student_t.cdf(tstat, df), rel=1e-9)
    assert c.slower_p == pytest.approx(1 - c.time_p, rel=1e-9)
    assert 0.1 < c.time_p < 0.2
    # loss p, baseline: mean 3.28, σ 0.01, t = (3.28 - 3.30) / (0.01/√3) = -3.4641, df 2
    assert b.loss_p == pytest.approx(student_t.cdf(-0.02 / (0.01 / math.sqrt(3)), 2), rel=1e-6)
    assert b.loss_p == pytest.approx(0.03709, abs=1e-4)
    assert c.loss_delta == pytest.approx(3.265 - 3.28)


def test_incomplete_and_garbled_logs_are_reported_not_used(tmp_path):
    g = tmp_path / "g"
    g.mkdir()
    _log(g / "good.txt", 10, 10, (3.2799, 120000))
    _log(g / "crashed.txt", 7, 10, None)  # never reached the final validation
    (g / "garbled.log").write_text("hello\nnot a training log\n")
    (g / "README.md").write_text("step:10/10 val_loss:1.0 train_time:1ms")  # not a log suffix: ignored
    group = load_group(g)
    assert [r.path.name for r in group.runs] == ["good.txt"]
    reasons = dict((p.name, why) for p, why in group.skipped)
    assert reasons["crashed.txt"].startswith("incomplete") and "7/10" in reasons["crashed.txt"]
    assert reasons["garbled.log"].startswith("garbled")
    assert group.times == [120.0] and group.losses == [3.2799]


@pytest.mark.parametrize("loss, ok", [(-1e308, False), (-0.5, False), (0.0, True), (3.28, True)])
def test_a_negative_final_loss_is_garbled_not_averaged_in(tmp_path, loss, ok):
    r = parse_log(_log(tmp_path / "x.txt", 10, 10, (loss, 120000)))
    assert r.complete == ok
    if not ok:
        assert r.problem.startswith("garbled: final line has val_loss:") and r.problem.endswith("not a finite loss >= 0")


def test_parse_log_ignores_source_before_separator(tmp_path):
    fake_src = "step:10/10 val_loss:0.0001 train_time:1ms  # a docstring in the script"
    r = parse_log(_log(tmp_path / "x.txt", 3, 10, None, source=fake_src))
    assert not r.complete and r.last_step == 3 and r.val_loss is None


def _run_dir(path: Path, status: str, step_times, losses) -> Path:
    return write_run(path, {}, world_size=2, summary={"status": status, "step_times_ms": step_times, "losses": losses})


def test_run_dirs_total_time_and_last_loss(tmp_path):
    _run_dir(tmp_path / "g" / "r1", "completed", [100.0, 200.0, 300.0], [5.0, 4.0, 3.5])
    _run_dir(tmp_path / "g" / "r2", "failed", [100.0], [5.0])
    (tmp_path / "g" / "r3").mkdir()
    group = load_group(tmp_path / "g")
    assert group.times == [pytest.approx(0.6)] and group.losses == [3.5]
    reasons = dict((p.name, why) for p, why in group.skipped)
    assert "failed" in reasons["r2"] and "summary.json" in reasons["r3"]


def test_empty_group_is_a_user_error(tmp_path):
    (tmp_path / "e").mkdir()
    _log(tmp_path / "e" / "bad.txt", 2, 10, None)
    with pytest.raises(UserError, match="no usable runs"):
        load_group(tmp_path / "e")


def test_a_folder_of_profiler_traces_points_at_report(tmp_path):
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "rank0.json").write_text('{"traceEvents": []}')
    (tmp_path / "t" / "rank1.json.gz").write_bytes(b"")
    with pytest.raises(UserError, match=r"no usable runs \(no run directories or \*\.txt/\*\.log logs; compare reads "
                                        r"runs, not profiler traces: `commscope report` reads a folder of traces\)$"):
        load_group(tmp_path / "t")


def test_slower_candidates():
    import pandas as pd
    t = pd.DataFrame({"name": ["b", "x", "y"], "slower_p": [math.nan, 0.01, 0.2]})
    assert slower_candidates(t, 0.05) == ["x"]
    assert slower_candidates(t, 0.5) == ["x", "y"]



def _invoke(args):
    res = CliRunner().invoke(app, args)
    code = exit_code(res)
    return code, (str(res.exception) if code == 2 else res.output), res


def test_cli_fail_if_slower_and_json(tmp_path):
    shutil.copytree(FIXTURE, tmp_path / "logs")
    base, cand = str(tmp_path / "logs" / "baseline"), str(tmp_path / "logs" / "premul-o")
    code, out, _ = _invoke(["compare", base, cand, "--fail-if-slower", "0.05"])
    assert code == 0 and "131.2106" in out and "-1.5111" in out
    # swap roles: the 4 slow runs are now the candidate and are slower at any sane level
    code, out, _ = _invoke(["compare", cand, base, "--fail-if-slower", "0.01", "--json"])
    assert code == 1
    data = json.loads(out)
    assert data["slower"] == ["baseline"]
    assert data["groups"][0]["time_p"] is None and len(data["groups"][1]["times"]) == 4
    assert data["groups"][1]["time_delta"] == pytest.approx(132.72175 - 131.2106)


def test_cli_bad_input_exit_2(tmp_path):
    assert _invoke(["compare", str(tmp_path / "missing"), str(tmp_path)])[0] == 2
    assert _invoke(["compare", str(FIXTURE / "baseline")])[0] == 2
    assert _invoke(["compare", str(FIXTURE / "baseline"), str(FIXTURE / "premul-o"),
                         "--fail-if-slower", "3"])[0] == 2
    # two outputs asked for: refused, not one of them silently dropped
    assert _invoke(["compare", str(FIXTURE / "baseline"), str(FIXTURE / "premul-o"), "--markdown", "--json"])[:2] == \
        (2, "--markdown and --json each choose the output: give one")


def test_terminal_table_says_a_tiny_p_is_below_0_0001_and_captions_the_label_rows(published_groups, capsys):
    from rich.console import Console

    con = Console(record=True, width=200)
    con.print(compare_terminal.comparison_table(compare_groups(published_groups), 3.28))
    rows = [line for line in con.export_text().splitlines() if "premul-o" in line]
    assert "<0.0001" in rows[0] and "0.0000 │ 3.2777" not in rows[0]
    assert "exposed communication" in compare_terminal.LABEL_DELTAS_CAPTION


def test_logs_and_run_directories_are_not_compared_together(tmp_path):
    """A log's time is a training run to the target loss, a run directory's its summed step times: a group
    mixing them, or groups of different kinds, would put numbers that measure different things in one mean
    or one difference (-129.70 s, "candidate faster", for 6 CPU steps against a 2,160-step H100 log)."""
    runs, logs, mixed = tmp_path / "runs", tmp_path / "logs", tmp_path / "mixed"
    for i, t in enumerate(([100.0, 200.0], [110.0, 190.0])):
        _run_dir(runs / f"r{i}", "completed", t, [5.0, 4.0])
    shutil.copytree(FIXTURE / "baseline", logs)
    shutil.copytree(logs, mixed)
    _run_dir(mixed / "r0", "completed", [100.0, 200.0], [5.0, 4.0])
    code, msg, _ = _invoke(["compare", str(logs), str(runs)])
    assert code == 2 and msg.startswith("the groups hold runs of different kinds (logs: modded-nanogpt logs, "
                                        "runs: commscope run directories)")
    code, msg, _ = _invoke(["compare", str(mixed), str(logs)])
    n_logs = len([p for p in logs.iterdir() if p.suffix in (".txt", ".log")])
    assert code == 2 and msg.startswith(f"{mixed} holds {n_logs} modded-nanogpt logs and 1 commscope run: ")
    assert _invoke(["compare", str(runs), str(runs)])[0] == 0  # one kind: compared


def test_a_log_resaved_or_trimmed_is_a_copy_not_a_second_run(tmp_path):
    """A log copied with one more byte, with CRLF line endings, or as its step lines alone has the same final
    validation as its original: one sample, the others listed as copies (4 baseline logs stay 4)."""
    group = tmp_path / "g"
    shutil.copytree(FIXTURE / "baseline", group)
    first = sorted(group.glob("*.txt"))[0]
    text = first.read_bytes()
    (group / "extra-byte.txt").write_bytes(text + b"\n")
    (group / "crlf.txt").write_bytes(text.replace(b"\n", b"\r\n"))
    (group / "steps-only.txt").write_bytes(b"\n".join(l for l in text.splitlines() if l.startswith(b"step:")) + b"\n")
    g = load_group(group)
    assert len(g.runs) == len(list((FIXTURE / "baseline").glob("*.txt"))) == 4
    assert {p.name: why for p, why in g.skipped} == {
        name: f"a copy of {first.name} (the same measurements): counted once"
        for name in ("crlf.txt", "extra-byte.txt", "steps-only.txt")}


def test_a_log_that_goes_on_after_its_final_validation_is_incomplete(tmp_path):
    """A log with a second run appended that stopped early: its last step reported no final validation loss,
    so it is incomplete (docs/compare.md), not the first run's numbers."""
    src = sorted((FIXTURE / "baseline").glob("*.txt"))[0]
    text = src.read_text()
    steps = [l for l in text.splitlines() if l.startswith("step:")][:12]  # the second run stopped early
    log = tmp_path / "appended.txt"
    log.write_text(text + "\n".join(steps) + "\n")
    res = parse_log(log)
    total = int(steps[0].split("/")[1].split()[0])
    last = int(steps[-1].split(":")[1].split("/")[0])
    assert not res.complete and res.problem == (f"incomplete: goes on after its final validation, to step "
                                                f"{last}/{total} without a final val_loss (two runs in one file?)")
    assert parse_log(src).complete
