"""`commscope run` on CPU with more ranks than cores warns that its timings include CPU scheduling."""
from __future__ import annotations

import io

import pytest
from rich.console import Console

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
                        console=Console(file=io.StringIO(), quiet=quiet))
    err = capsys.readouterr().err
    assert err == ("commscope: warning: 2 CPU ranks on 1 CPU core: the ranks take turns on the cores, so step "
                   "times and communication waits (exposed communication, skew) include CPU scheduling; --nproc 1 "
                   "or fewer gives timings of the training itself\n" if warned else "")
    assert not (tmp_path / "run").exists()  # stopped before the job: the claim is given up
