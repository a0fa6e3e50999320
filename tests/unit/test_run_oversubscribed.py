"""`commscope run` on CPU with more ranks than cores warns that its timings include CPU scheduling."""
from __future__ import annotations

import io

import pytest
from rich.console import Console

from commscope.commands._run_view import TerminalView
from instrumented_model import launcher
from instrumented_model.launcher import Topology, launch_training, oversubscription_note


def test_note_only_for_cpu_runs_with_more_ranks_than_cores():
    assert oversubscription_note("cpu", 8, 2) == (
        "8 CPU ranks on 2 CPU cores: the ranks take turns on the cores, so step times and communication waits "
        "(exposed communication, skew) include CPU scheduling; --nproc 2 or fewer gives timings of the training "
        "itself")
    assert oversubscription_note("cpu", 2, 1).startswith("2 CPU ranks on 1 CPU core: ")
    assert oversubscription_note("cpu", 2, 2) is None
    assert oversubscription_note("cuda", 8, 2) is None


class _Stop(Exception):
    pass


def _stop():
    raise _Stop


@pytest.mark.parametrize("cores, quiet, warned", [(1, False, True), (2, False, False), (1, True, False)])
def test_launch_warns_once_on_stderr(tmp_path, monkeypatch, capsys, cores, quiet, warned):
    """The warning is printed when the launch starts (here stopped right after, before torchrun), once, on
    stderr; a quiet launch (hooks' capture run) and a run that fits the cores print none."""
    monkeypatch.setattr(launcher, "usable_cores", lambda: cores)
    monkeypatch.setattr(launcher, "_sweep_log_dirs", _stop)
    with pytest.raises(_Stop):
        launch_training(["--device", "cpu"], Topology(2), str(tmp_path / "run"),
                        view=TerminalView(Console(file=io.StringIO(), quiet=quiet)))
    err = capsys.readouterr().err
    assert err == ("commscope: warning: 2 CPU ranks on 1 CPU core: the ranks take turns on the cores, so step "
                   "times and communication waits (exposed communication, skew) include CPU scheduling; --nproc 1 "
                   "or fewer gives timings of the training itself\n" if warned else "")
    assert not (tmp_path / "run").exists()  # stopped before the job: the claim is given up


def _run_dir(path, ranks, meta):
    from rundirs import write_run

    step = {"kind": "step", "step": 0, "loss": 1.0, "start_ns": 10**9, "end_ns": 10**9 + 10**6, "tokens": 1}
    return write_run(path, {r: [{**step, "rank": r}] for r in range(ranks)}, meta=meta,
                     summary={"status": "completed", "backend": "gloo", "device": "cpu"})


OVERSUBSCRIBED = ("Oversubscribed CPU run: 4 CPU ranks on 2 CPU cores. The ranks took turns on the cores, so its "
                  "step times and communication waits (exposed communication, skew, stragglers) measure the OS "
                  "scheduler as much as the program; a run with at most one rank per core times the training "
                  "itself.")


@pytest.mark.parametrize("meta, noted", [
    ({"hostname": "h", "device": "cpu", "cpu_cores": 2}, True),
    ({"hostname": "h", "device": "cpu", "cpu_cores": 4}, False),   # one rank per core
    ({"hostname": "h", "device": "cpu"}, False),                   # cores not recorded: nothing to say
    ({"hostname": "h", "device": "cuda:0", "cpu_cores": 2}, False),  # GPU ranks do not take turns on cores
])
def test_report_notes_an_oversubscribed_cpu_run_from_its_meta(tmp_path, meta, noted):
    """The run's warning reaches the report (terminal, --json notes, the page's caveat box all print the
    document's notes) from what each rank recorded in meta.json."""
    from commscope.analyze.summary import evidence_notes
    from commscope.load import load_path

    notes = evidence_notes(load_path(str(_run_dir(tmp_path / "run", 4, meta))))
    assert (OVERSUBSCRIBED in notes) == noted
    assert noted or not any("Oversubscribed" in n for n in notes)


def test_each_crowded_host_is_named_when_the_run_spans_several(tmp_path):
    from commscope.analyze.summary import evidence_notes
    from commscope.load import load_path

    run = _run_dir(tmp_path / "run", 4, {"device": "cpu", "cpu_cores": 1})
    for r in range(4):  # ranks 0-1 on host a (1 core each), ranks 2-3 on host b with 2 cores: only a is crowded
        meta = run / f"rank{r}" / "meta.json"
        doc = __import__("json").loads(meta.read_text())
        meta.write_text(__import__("json").dumps({**doc, "hostname": "ab"[r // 2], "cpu_cores": 1 + r // 2}))
    note = next(n for n in evidence_notes(load_path(str(run))) if n.startswith("Oversubscribed"))
    assert note.startswith("Oversubscribed CPU run: 2 CPU ranks on 1 CPU core of a. The ranks took turns")


def test_meta_cpu_cores_must_be_a_positive_integer(tmp_path):
    from commscope.errors import UserError
    from commscope.load import load_path

    with pytest.raises(UserError, match="cpu_cores.*an integer >= 1"):
        load_path(str(_run_dir(tmp_path / "run", 2, {"device": "cpu", "cpu_cores": 0})))


def test_hosts_alike_are_one_clause_in_natural_order(tmp_path):
    import json

    from commscope.analyze.summary import evidence_notes
    from commscope.load import load_path

    run = _run_dir(tmp_path / "run", 24, {"device": "cpu", "cpu_cores": 1})
    for r in range(24):  # 12 hosts node0..node11 with 2 ranks on 1 core each
        meta = run / f"rank{r}" / "meta.json"
        meta.write_text(json.dumps({**json.loads(meta.read_text()), "hostname": f"node{r // 2}"}))
    note = next(n for n in evidence_notes(load_path(str(run))) if n.startswith("Oversubscribed"))
    assert note.startswith("Oversubscribed CPU run: 2 CPU ranks on 1 CPU core on each of 12 hosts "
                           "(node0, node1, node2, …, node11). The ranks took turns")
