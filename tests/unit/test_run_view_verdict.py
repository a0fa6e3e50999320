"""TerminalView.verdict: after a failed run the doctor's verdict is always printed (an error that says why
there is none, too); after a run the user stopped, only a verdict that says more than "interrupted" is."""
from __future__ import annotations

import io
from types import SimpleNamespace

import pytest
from rich.console import Console

from commscope.commands import _run_view
from commscope.commands._run_view import TerminalView
from commscope.errors import UserError
from instrumented_model.launcher import SAID_BY_INTERRUPTED


def _shown(monkeypatch, found, unless) -> list:
    def diagnose(out):
        if isinstance(found, Exception):
            raise found
        return SimpleNamespace(verdict=found)

    printed = []
    monkeypatch.setattr(_run_view, "diagnose_path", diagnose)
    monkeypatch.setattr(_run_view, "print_run_verdict", lambda console, out, d: printed.append(d))
    TerminalView(Console(file=io.StringIO())).verdict("run", unless=unless)
    return [getattr(d, "verdict", None) or str(d) for d in printed]


@pytest.mark.parametrize("verdict", ["interrupted", "ok", "insufficient", "hang", "crash", "straggler"])
def test_a_failed_run_shows_every_verdict(monkeypatch, verdict):
    assert _shown(monkeypatch, verdict, ()) == [verdict]


def test_a_failed_run_shows_why_there_is_no_verdict(monkeypatch):
    assert _shown(monkeypatch, UserError("run: no rank recorded a step"), ()) == ["run: no rank recorded a step"]


@pytest.mark.parametrize("verdict, shown", [("interrupted", []), ("ok", []), ("insufficient", []),
                                            ("hang", ["hang"]), ("straggler", ["straggler"])])
def test_a_stopped_run_shows_only_what_says_more(monkeypatch, verdict, shown):
    assert _shown(monkeypatch, verdict, SAID_BY_INTERRUPTED) == shown


def test_a_stopped_run_shows_no_error_for_a_missing_verdict(monkeypatch):
    assert _shown(monkeypatch, UserError("run: no rank recorded a step"), SAID_BY_INTERRUPTED) == []


def test_a_quiet_view_asks_the_doctor_nothing(monkeypatch):
    monkeypatch.setattr(_run_view, "diagnose_path", lambda out: pytest.fail("diagnosed a quiet run"))
    TerminalView(Console(file=io.StringIO(), quiet=True)).verdict("run")
