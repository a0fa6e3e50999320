"""The CLI's own options and its error contract (one line on stderr, exit 2), through commscope.cli.main."""
from __future__ import annotations

import importlib.metadata as md

import pytest

from commscope.cli import main


def run_main(capsys, *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_info:
        main(list(argv))
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def test_version_is_the_installed_distributions(capsys):
    code, out, err = run_main(capsys, "--version")
    assert (code, out, err) == (0, f"commscope {md.version('commscope')}\n", "")


@pytest.mark.parametrize("argv, words", [(["report", "--bogus", "x"], "No such option: --bogus"),
                                         (["plan", "--world-size", "abc"], "'--world-size'"),
                                         (["nosuchcommand"], "No such command")])
def test_usage_errors_are_one_line_and_exit_2(capsys, argv, words):
    code, out, err = run_main(capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("commscope: error: ") and words in err
