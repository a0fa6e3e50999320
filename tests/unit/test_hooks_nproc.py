"""`commscope hooks RUN --nproc N`: --nproc sets the ranks of the capture run, made only without RUN, so
with RUN it is refused in one line (exit 2) instead of being ignored; RUN alone still works."""
from __future__ import annotations

from cli_result import run_main
from paths import TESTS

RUN = TESTS / "data" / "cpurun-hooks-gloo2"


def test_nproc_with_a_run_is_refused_in_one_line(capsys):
    code, cap = run_main(capsys, "hooks", RUN, "--nproc", "3")
    assert code == 2
    assert cap.out == ""
    assert cap.err == ("commscope: error: --nproc sets the ranks of the capture run, which is made only "
                       "without RUN; drop --nproc or RUN\n")


def test_a_run_without_nproc_is_shown(capsys):
    code, cap = run_main(capsys, "hooks", RUN)
    assert (code, cap.err) == (0, "")
    assert cap.out.splitlines()[0] == "Hook firing order: 3 steps on each of 2 ranks"


def test_an_interrupted_capture_run_exits_as_run_does(capsys, monkeypatch):
    """The user stopped it (Ctrl-C, SIGTERM): 128 + the signal, summary.json's exit code as `run` exits, and
    the capture run's temporary folder removed; not exit 2, which says bad input."""
    import glob
    import tempfile

    from commscope.commands import hooks

    seen = {}

    class Launcher:
        QuietView = Topology = staticmethod(lambda *a, **k: None)

        @staticmethod
        def launch_training(argv, topology, out, view):
            seen["out"] = out
            return {"status": "interrupted", "exit_code": 143, "message": "interrupted by SIGTERM after 1/2 steps"}

    monkeypatch.setattr(hooks, "launcher", lambda: Launcher)
    before = set(glob.glob(f"{tempfile.gettempdir()}/commscope-hooks-*"))
    code, cap = run_main(capsys, "hooks")
    assert code == 143 and cap.out == ""
    assert cap.err == "commscope: capture run interrupted: interrupted by SIGTERM after 1/2 steps\n"
    assert seen["out"].startswith(tempfile.gettempdir())
    assert set(glob.glob(f"{tempfile.gettempdir()}/commscope-hooks-*")) == before


def test_nproc_below_one_names_only_the_option_hooks_has(capsys):
    for n in ("0", "-3"):
        code, cap = run_main(capsys, "hooks", "--nproc", n)
        assert (code, cap.out) == (2, "")
        assert cap.err == f"commscope: error: --nproc must be >= 1 (the capture run's ranks), got {n}\n"
