"""`commscope run`'s summary table leaves the profiler's steps (its --profile window and the step after
it, the trace's export: the steps the report's headline leaves out) out of rank 0's mean and median step
and the tokens/s beside them, and its label names them; step 0 stays out too."""
from __future__ import annotations

from rich.console import Console

from commscope.analyze.run_step_stats import step_stats
from reports.run_terminal import print_run_summary

TOKENS = 1000  # per step
# steps 0-9: warm-up, steady 100 ms steps, the profiler's 5-7 and its export 8 at 1,000 ms
TIMES = [5000.0, 100.0, 100.0, 100.0, 100.0, 1000.0, 1000.0, 1000.0, 1000.0, 100.0]


def summary(times=TIMES):
    tail = times[1:]
    return {"status": "completed", "world_size": 4, "device": "cpu", "backend": "gloo", "preset": "tiny",
            "steps": len(times), "losses": [1.0] * len(times), "step_times_ms": times,
            "tokens_per_s": TOKENS * len(tail) / (sum(tail) / 1e3), "ranks": {"0": "completed"}, "message": "m"}


def table(stats, s=None) -> str:
    con = Console(record=True, width=200)
    print_run_summary(con, s or summary(), "/tmp/x", stats)
    return con.export_text()


def test_the_profiler_steps_are_left_out_of_the_figures():
    st = step_stats(summary(), "5:8")
    assert st["profiler_steps"] == {5: "profiler window", 6: "profiler window", 7: "profiler window",
                                    8: "profiler export"}
    assert st["mean_ms"] == 100.0 and st["median_ms"] == 100.0
    assert round(st["tokens_per_s"], 6) == round(st["median_tokens_per_s"], 6) == 10_000.0


def test_the_label_names_the_steps_left_out():
    text = table(step_stats(summary(), "5:8"))
    assert ("rank 0's mean step   │ 100.0 ms (excluding step 0, and steps 5–8: profiler window and its "
            "export)") in text
    assert "tokens/s             │ 10,000 " in text
    assert "rank 0's median step │ 100.0 ms, 10,000 tokens/s" in text


def test_without_a_profile_only_step_0_is_left_out():
    st = step_stats(summary())
    assert st["profiler_steps"] == {} and st["mean_ms"] == sum(TIMES[1:]) / 9
    text = table(st)
    assert f"rank 0's mean step   │ {sum(TIMES[1:]) / 9:.1f} ms (excluding step 0)\n" in text.replace(" │\n", "\n")
    assert f"tokens/s             │ {summary()['tokens_per_s']:,.0f} " in text  # summary.json's figure


def test_a_window_past_the_last_step_leaves_out_only_the_steps_present():
    st = step_stats(summary(TIMES[:7]), "5:8")  # the run stopped at step 6
    assert st["profiler_steps"] == {5: "profiler window", 6: "profiler window"} and st["mean_ms"] == 100.0
    assert "(excluding step 0, and steps 5–6: profiler window)" in table(st, summary(TIMES[:7]))


def test_every_step_the_profilers_keeps_them_all():
    """Nothing would be left to average: the figures then include the profiler's steps, and say nothing."""
    times = [5000.0, 1000.0, 1000.0, 1000.0]
    st = step_stats(summary(times), "1:3")
    assert st["profiler_steps"] == {} and st["mean_ms"] == 1000.0
    assert "(excluding step 0)" in table(st, summary(times))


def test_the_next_command_quotes_a_path_a_shell_would_split():
    import shlex

    out = "/tmp/runs/prof ü [1]"
    con = Console(record=True, width=200)
    print_run_summary(con, summary(), out, step_stats(summary()))
    text = con.export_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("next: "))
    assert shlex.split(line.removeprefix("next: ")) == ["commscope", "report", out]  # one argument, as given
    con = Console(record=True, width=200)  # --trace off wrote statuses only: no report to suggest
    print_run_summary(con, summary(), out, step_stats(summary()), recorded=False)
    assert "next: " not in con.export_text()


def test_the_doctor_details_command_quotes_the_path():
    import shlex
    from types import SimpleNamespace

    from reports.run_terminal import print_run_verdict

    out = "/tmp/runs/a b"
    con = Console(record=True, width=200)
    print_run_verdict(con, out, SimpleNamespace(culprit_ranks=[1], summary="ok: fine.", verdict="ok"))
    said = con.export_text()
    assert shlex.split(said[said.index("Details: ") + 9:].strip()) == ["commscope", "doctor", out]
