"""The launcher's sweep of /tmp folders a SIGKILLed process could not delete: torchrun's log folder
(commscope-torchrun-<pid>-*) and `commscope hooks`' capture run (commscope-hooks-<pid>-*). A folder whose
owner is gone is removed; one of a live process is kept, as is anything else in the temp folder."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile

from instrumented_model import launcher


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_the_folders_of_gone_processes_are_swept_and_no_other(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead, alive = _dead_pid(), os.getpid()
    names = [f"commscope-hooks-{dead}-ab12", f"commscope-torchrun-{dead}-cd34",  # swept
             f"commscope-hooks-{alive}-ef56", f"commscope-torchrun-{alive}-gh78",  # their owner runs
             "commscope-hooks-notapid", f"other-{dead}-x"]  # not ours by name
    for n in names:
        (tmp_path / n / "run").mkdir(parents=True)
    (tmp_path / f"commscope-hooks-{dead}-file").write_text("a file, not a folder we made")
    launcher._sweep_log_dirs()
    assert sorted(os.listdir(tmp_path)) == sorted(names[2:] + [f"commscope-hooks-{dead}-file"])


def test_hooks_names_its_capture_folder_with_its_pid(monkeypatch, tmp_path):
    """The capture folder carries the hooks process's pid, which is what the sweep reads."""
    from commscope.commands import hooks

    seen = []

    def capture(out, nproc):
        seen.append(out.parent.name)
        raise SystemExit(0)

    monkeypatch.setattr(hooks, "capture_run", capture)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    from typer.testing import CliRunner
    from commscope.cli import app

    CliRunner().invoke(app, ["hooks"])
    assert len(seen) == 1 and seen[0].startswith(f"commscope-hooks-{os.getpid()}-")
    assert os.listdir(tmp_path) == []  # removed as the command ends
