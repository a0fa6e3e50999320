"""`compare` says when its groups' times measure different work: run directories of different step
counts or of a different preset, batch size, gradient accumulation, world size or profiler window (between the groups or
among one group's runs), on stderr and in --json's `warnings`; like runs get none."""
import json
import zlib

import pytest

from typer.testing import CliRunner

from commscope.analyze.compare import comparability_warnings
from commscope.cli import app
from commscope.load.run_groups import load_group
from rundirs import write_run


def run(path, steps, grad_accum=1, preset="tiny", world_size=2, config=True, profile=None):
    # each run its own measurements: identical ones are copies of one run, which compare counts once
    times = [100.0 + i + zlib.crc32(str(path).encode()) % 997 * 1e-6 for i in range(steps)]
    cfg = {"args": {"preset": preset, "batch_size": 16, "grad_accum": grad_accum, "comm_schedule": "explicit",
                    "profile": profile}}
    return write_run(path, {}, world_size=world_size, config=cfg if config else None,
                     summary={"status": "completed", "step_times_ms": times, "losses": [3.0] * steps})


def test_like_runs_give_no_warning(tmp_path):
    run(tmp_path / "a" / "r1", 40), run(tmp_path / "a" / "r2", 40), run(tmp_path / "b" / "r1", 40)
    assert comparability_warnings([load_group(tmp_path / "a"), load_group(tmp_path / "b")]) == []


def test_step_count_and_work_differences_are_named(tmp_path):
    run(tmp_path / "run2", 40)
    run(tmp_path / "run2h", 10, grad_accum=2)
    got = comparability_warnings([load_group(tmp_path / "run2"), load_group(tmp_path / "run2h")])
    assert got == ["the groups differ in step count: run2 40, run2h 10; their Time +/- compares different work "
                   "(Time is the sum of step times).",
                   "the groups differ in grad accum: run2 1, run2h 2; their Time +/- and per-label rows compare different work."]


def test_runs_within_a_group_and_unknown_config(tmp_path):
    run(tmp_path / "a" / "r1", 40), run(tmp_path / "a" / "r2", 20)
    run(tmp_path / "b" / "r1", 40, config=False)  # recorded by another script: no config.json
    got = comparability_warnings([load_group(tmp_path / "a"), load_group(tmp_path / "b")])
    assert got[0] == "the runs of a differ in step count (40, 20): its Time mixes unlike runs."
    assert "the groups differ in preset: a tiny, b unknown; their Time +/- and per-label rows compare different work." in got
    assert len(got) == 4  # step count within a; preset, batch size, grad accum unknown on b (profile: none on both)


def test_a_profiled_run_against_an_unprofiled_one_is_named(tmp_path):
    """The profiler's steps are in Time (its start and export take seconds): a group profiled by
    `commscope run --profile`, or by a script's profile_steps (a rank 0 profiler trace), against one that
    is not compares the profiler, not only the training."""
    run(tmp_path / "plain", 40)
    run(tmp_path / "prof", 40, profile="5:7")
    recorded = run(tmp_path / "script", 40, config=False)
    (recorded / "rank0").mkdir()
    (recorded / "rank0" / "trace.json.gz").write_bytes(b"")
    groups = [load_group(tmp_path / n) for n in ("plain", "prof", "script")]
    hint = "(Time includes the profiler's steps: its start and trace export take seconds)."
    assert comparability_warnings(groups[:2]) == [
        f"the groups differ in profile: plain none, prof 5:7; their Time +/- compares different work {hint}"]
    assert f"the groups differ in profile: plain none, script a profiler window; their Time +/- compares " \
           f"different work {hint}" in comparability_warnings([groups[0], groups[2]])


def test_the_same_window_asked_for_by_a_script_or_by_commscope_run_is_the_same_work(tmp_path):
    """meta.json's `profile_steps` names a script's window as `commscope run --profile` does: "5:7" is
    "5:7" either way, and a different window is named by its steps on both sides."""
    run(tmp_path / "prof", 40, profile="5:7")
    for name, window in (("same", "5:7"), ("other", "9:11")):
        recorded = run(tmp_path / name, 40, config=False)
        (recorded / "rank0").mkdir()
        (recorded / "rank0" / "trace.json.gz").write_bytes(b"")
        (recorded / "rank0" / "meta.json").write_text(json.dumps({"schema_version": 1, "profile_steps": window}))
    prof, same, other = (load_group(tmp_path / n) for n in ("prof", "same", "other"))
    assert not [w for w in comparability_warnings([prof, same]) if "profile" in w]
    assert [w for w in comparability_warnings([prof, other]) if "profile" in w] == [
        "the groups differ in profile: prof 5:7, other 9:11; their Time +/- compares different work (Time "
        "includes the profiler's steps: its start and trace export take seconds)."]


def test_cli_prints_warnings_on_stderr_and_in_json(tmp_path):
    a, b = run(tmp_path / "run2", 40), run(tmp_path / "run2h", 10)
    res = CliRunner().invoke(app, ["compare", str(a), str(b)])
    assert res.exit_code == 0
    assert "warning: the groups differ in step count: run2 40, run2h 10" in res.stderr
    assert "warning: " not in res.stdout
    # the default target is the speedrun's: the title says so, and not of a target the user gives
    assert "losses < 3.28 (the speedrun's target; --target-loss sets yours)" in " ".join(res.stdout.split())
    res = CliRunner().invoke(app, ["compare", str(a), str(b), "--target-loss", "3.5"])
    assert "losses < 3.5;" in " ".join(res.stdout.split()) and "speedrun's target" not in res.stdout
    res = CliRunner().invoke(app, ["compare", str(a), str(b), "--json"])
    doc = json.loads(res.stdout)
    assert doc["warnings"][0].startswith("the groups differ in step count: run2 40, run2h 10")
    assert [g["steps"] for g in doc["groups"]] == [[40], [10]]


def _group(name, times, losses):
    from pathlib import Path

    from commscope.load.run_groups import Group, RunResult

    return Group(name, Path(name), [RunResult(Path(f"{name}/r{i}"), "run", t, l, 40)
                                    for i, (t, l) in enumerate(zip(times, losses))])


ROUNDED = [0.1 + 0.2, 0.3, 0.3]  # equal but for the last bit: 0.30000000000000004, 0.3, 0.3


def test_times_that_differ_only_by_rounding_give_no_time_p_and_say_why():
    import math
    import warnings

    from commscope.analyze.compare import compare_groups, precision_warnings

    a, b = _group("a", ROUNDED, [3.0, 3.1, 3.2]), _group("b", [2 * x for x in ROUNDED], [3.0, 3.1, 3.2])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # scipy's precision-loss warning is not printed
        table = compare_groups([a, b])
    assert math.isnan(table.loc[1, "time_p"]) and math.isnan(table.loc[1, "slower_p"])
    assert precision_warnings([a, b]) == [
        "the times of b and a differ only by float rounding within each group: Time p is left out (a t-test on "
        "rounding noise is not evidence)."]


def test_one_side_without_spread_keeps_its_p_and_prints_no_scipy_warning():
    """scipy warns when one side's values are equal but for rounding; the other side's spread carries the
    test, so its p stands, without the warning."""
    import math
    import warnings

    from commscope.analyze.compare import compare_groups, precision_warnings

    a, b = _group("a", [0.40, 0.41, 0.42], [3.0, 3.1, 3.2]), _group("b", ROUNDED, [3.0, 3.1, 3.2])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        table = compare_groups([a, b])
    assert 0 < table.loc[1, "time_p"] < 0.01 and not math.isnan(table.loc[1, "slower_p"])
    assert precision_warnings([a, b]) == []


def test_losses_that_differ_only_by_rounding_give_no_loss_p_and_the_cli_says_why(tmp_path):
    from commscope.analyze.compare import compare_groups, precision_warnings

    a = _group("a", [1.0, 1.1, 1.2], [x * 10 for x in ROUNDED])
    table = compare_groups([a, a])
    assert table["loss_p"].isna().all()
    assert precision_warnings([a]) == ["the losses of a differ only by float rounding: its loss p is left out (a "
                                       "t-test on rounding noise is not evidence)."]
    # exactly identical values need no sentence: the table's undefined p says it
    assert precision_warnings([_group("c", [1.0, 1.0], [3.0, 3.0])] * 2) == []

    for g, times in (("a", ROUNDED), ("b", [2 * x for x in ROUNDED])):
        for i, t in enumerate(times):
            write_run(tmp_path / g / f"r{i}", {}, world_size=2,
                      summary={"status": "completed", "step_times_ms": [t * 1000], "losses": [3.0 + i / 10]})
    res = CliRunner().invoke(app, ["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--json"])
    assert res.exit_code == 0, res.stderr
    assert any("differ only by float rounding" in w for w in json.loads(res.stdout)["warnings"])
    assert "RuntimeWarning" not in res.stderr


SAMPLES = {"one run": [1.0], "identical": [1.0, 1.0, 1.0], "rounded": ROUNDED, "rounded x2": [2 * x for x in ROUNDED],
           "spread": [0.40, 0.41, 0.42], "identical 0.3": [0.3, 0.3]}


def test_undefined_test_names_the_reason():
    from commscope.analyze.compare import NO_SPREAD, ROUNDING, TOO_FEW_RUNS, undefined_test

    assert undefined_test([1.0]) == undefined_test([1.0, 2.0], [3.0]) == TOO_FEW_RUNS
    assert undefined_test([1.0, 1.0]) == undefined_test([1.0, 1.0], [2.0, 2.0]) == NO_SPREAD
    assert undefined_test(ROUNDED) == undefined_test(ROUNDED, [0.3, 0.3]) == ROUNDING
    assert undefined_test([0.40, 0.41]) is None and undefined_test([0.40, 0.41], ROUNDED) is None


def test_every_empty_p_is_the_one_decision_and_only_rounding_is_warned():
    """Over every pair of samples, as times and as losses: a p is NaN exactly when undefined_test gives a
    reason, and precision_warnings has a sentence for that test exactly when the reason is ROUNDING."""
    import itertools
    import math
    import warnings

    from commscope.analyze.compare import ROUNDING, compare_groups, precision_warnings, undefined_test

    for (na, ta), (nb, tb) in itertools.product(SAMPLES.items(), repeat=2):
        a = _group("a", ta, [3.0 + x for x in ta])
        b = _group("b", tb, [3.0 + x for x in tb])
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            table = compare_groups([a, b])
        said = precision_warnings([a, b])
        why_t = undefined_test(b.times, a.times)
        assert math.isnan(table.loc[1, "time_p"]) == math.isnan(table.loc[1, "slower_p"]) == (why_t is not None), (na, nb)
        assert any(s.startswith("the times of b and a") for s in said) == (why_t == ROUNDING), (na, nb)
        for i, g in enumerate((a, b)):
            why_l = undefined_test(g.losses)
            assert math.isnan(table.loc[i, "loss_p"]) == (why_l is not None), (na, nb, g.name)
            assert any(s.startswith(f"the losses of {g.name} ") for s in said) == (why_l == ROUNDING), (na, nb)


def test_a_target_far_above_every_loss_gives_its_limit_without_numpy_warnings():
    """--target-loss 1e308 is finite, so allowed: the t statistic overflows to -inf and the one-sided p is
    its limit (0: the losses are below it), with no overflow warning on the user's terminal."""
    import warnings

    from paths import TESTS

    logs = TESTS / "data" / "modded-nanogpt-logs"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = CliRunner().invoke(app, ["compare", str(logs / "baseline"), str(logs / "premul-o"), "--json",
                                       "--target-loss", "1e308"])
    assert res.exit_code == 0, res.output
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)], [str(w.message) for w in caught]
    rows = json.loads(res.stdout)["groups"]
    assert [r["loss_p"] for r in rows] == [0.0, 0.0]


@pytest.mark.parametrize("value", ["-0.5", "-1e308"])
def test_a_negative_target_loss_is_refused_in_one_line(capsys, value):
    """A cross-entropy is never negative: a sign typo would judge every run by a target none can miss."""
    from commscope.cli import main
    from paths import TESTS

    logs = TESTS / "data" / "modded-nanogpt-logs"
    with pytest.raises(SystemExit) as exit_info:
        main(["compare", str(logs / "baseline"), str(logs / "premul-o"), "--target-loss", value])
    out, err = capsys.readouterr()
    assert exit_info.value.code == 2 and out == ""
    assert err.splitlines() == [
        f"commscope: error: --target-loss is a cross-entropy loss, which is never negative: got {float(value)}"]


def test_copies_of_a_run_count_once_and_a_run_in_two_groups_is_named(tmp_path):
    """Copies of one run (the same step times and losses) are no independent samples: within a group the
    copies are skipped, saying of which run; a run in two groups makes the groups share samples."""
    import shutil

    run(tmp_path / "a" / "r1", 40), run(tmp_path / "a" / "r2", 40), run(tmp_path / "b" / "r1", 40)
    for copy in ("r1-copy", "r1-copy2"):
        shutil.copytree(tmp_path / "a" / "r1", tmp_path / "a" / copy)
    shutil.copytree(tmp_path / "a" / "r2", tmp_path / "b" / "r2-from-a")
    a, b = load_group(tmp_path / "a"), load_group(tmp_path / "b")
    assert sorted(r.path.name for r in a.runs) == ["r1", "r2"]
    assert {p.name: why for p, why in a.skipped} == {
        "r1-copy": "a copy of r1 (the same measurements): counted once",
        "r1-copy2": "a copy of r1 (the same measurements): counted once"}
    assert len(b.runs) == 2
    assert comparability_warnings([a, b]) == [
        "1 run appears in more than one group (copies: the same measurements, e.g. in a, b): the groups share "
        "samples, so their difference is understated."]
    res = CliRunner().invoke(app, ["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--json"])
    doc = json.loads(res.stdout)
    assert doc["warnings"] == comparability_warnings([a, b])
