"""No module of the product uses a name it never defines or imports. Python finds such a name only when
the line runs, and the lines that run rarely are the error paths: `compare` on runs without step records
raised UserError in a module that never imported it, and the user got a NameError traceback instead of
the one line. pyflakes reads every module without running it."""
import pytest

from paths import ROOT

pyflakes = pytest.importorskip("pyflakes")

FOLDERS = ("commscope", "instrumented_model", "reports", "bench", "scripts", "examples")


def test_no_module_uses_an_undefined_name():
    from pyflakes import api, messages, reporter

    class Collect(reporter.Reporter):
        def __init__(self):
            self.found = []

        def flake(self, message):
            if isinstance(message, (messages.UndefinedName, messages.UndefinedLocal, messages.UndefinedExport)):
                self.found.append(f"{message.filename}:{message.lineno}: {message.message % message.message_args}")

        def syntaxError(self, filename, msg, lineno, offset, text):  # noqa: N802 - pyflakes' name
            self.found.append(f"{filename}:{lineno}: syntax error: {msg}")

        def unexpectedError(self, filename, msg):  # noqa: N802
            self.found.append(f"{filename}: {msg}")

    r = Collect()
    files = sorted(p for f in FOLDERS if (ROOT / f).is_dir() for p in (ROOT / f).rglob("*.py"))
    assert len(files) > 100
    for path in files:
        api.checkPath(str(path), r)
    assert r.found == []
