"""`commscope report INPUT -o OUT --no-hta` in process, for tests that read the page it writes."""
from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from commscope.cli import app


def report_page(path, out: Path, *extra: str) -> str:
    """The HTML page `report` writes for `path` (exit code 0 asserted, with its output on failure)."""
    res = CliRunner().invoke(app, ["report", str(path), "-o", str(out), "--no-hta", *extra])
    assert res.exit_code == 0, res.output
    return Path(out).read_text()
