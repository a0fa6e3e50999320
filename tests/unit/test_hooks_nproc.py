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
