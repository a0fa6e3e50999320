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


@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["doctor", "--help"]])
def test_help_and_version_do_not_import_the_analysis_stack(argv):
    """Every command pays the CLI's start: it imports the commands' option tables only, never pandas,
    torch or plotly (a fresh interpreter, since this one has them loaded already)."""
    import subprocess
    import sys

    code = ("import sys\nfrom commscope.cli import main\n"
            f"try:\n    main({argv!r})\nexcept SystemExit as e:\n    rc = e.code\n"
            "heavy = sorted(m for m in ('pandas', 'torch', 'plotly', 'scipy', 'numpy') if m in sys.modules)\n"
            "print('HEAVY', heavy, rc, file=sys.stderr)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.stderr.strip().splitlines()[-1] == "HEAVY [] 0", p.stderr[-2000:]


@pytest.mark.parametrize("argv, rc", [(["--version"], 0), (["report", "/nonexistent/trace-dir", "--json"], 2)])
def test_the_command_line_process_flushes_output_and_runs_atexit_handlers(argv, rc):
    """The program's entry point (cli.entry) ends the process without the interpreter's teardown
    (cli._exit_now): what was printed, the exit code and the atexit handlers are those of a normal exit."""
    import subprocess
    import sys

    code = ("import atexit, sys\natexit.register(lambda: print('atexit ran', file=sys.stderr))\n"
            "class Teardown:\n    def __del__(self):\n        print('torn down', file=sys.stderr)\n"
            "kept = Teardown()\n"  # freed by the interpreter's teardown only
            f"sys.argv = ['commscope', *{argv!r}]\nfrom commscope.cli import entry\nentry()\n"
            "print('not reached', file=sys.stderr)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == rc, p.stderr[-2000:]
    assert p.stderr.endswith("atexit ran\n") and "not reached" not in p.stderr and "torn down" not in p.stderr
    if rc == 0:
        assert p.stdout == f"commscope {md.version('commscope')}\n"
    else:
        assert p.stderr.startswith("commscope: error: ") and p.stderr.count("\n") == 2


def test_every_command_module_registers_the_command_of_its_name():
    """main builds an app with the named command's module alone (cli.build_app): that module must register
    exactly that command, and all of them together make `app`."""
    import typer

    from commscope import cli

    for name in cli.command_names():
        assert list(typer.main.get_command(cli.build_app(name)).commands) == [name]
    assert sorted(typer.main.get_command(cli.app).commands) == cli.command_names()


def test_main_called_in_process_for_the_process_arguments_raises_system_exit(capsys, monkeypatch):
    """Only the program's entry point ends the process itself; main, also called from a module run as
    __main__ (a script driving commands in-process, as tests/bad_inputs.py does), raises SystemExit."""
    monkeypatch.setattr("sys.argv", ["commscope", "--version"])
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 0 and capsys.readouterr().out.startswith("commscope ")


def test_a_script_run_as_main_can_call_main_many_times():
    """A script (module __main__) that drives commands in-process gets back control after each one."""
    import subprocess
    import sys

    code = ("import sys\nfrom commscope.cli import main\ncodes = []\n"
            "for argv in (['--version'], ['report', '/nonexistent/trace-dir', '--json'], ['--version']):\n"
            "    sys.argv = ['commscope', *argv]\n    try:\n        main()\n    except SystemExit as e:\n"
            "        codes.append(e.code)\nprint('codes', codes)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.splitlines()[-1] == "codes [0, 2, 0]" and p.stdout.count("commscope ") == 2


def test_piped_output_is_140_columns_unless_the_user_sets_columns(monkeypatch):
    """Piped tables get 140 columns (rich's 80 would cut label names); a COLUMNS the user set wins."""
    from commscope.commands._shared import output_console

    monkeypatch.delenv("COLUMNS", raising=False)
    assert output_console().width == 140 and output_console(piped_width=160).width == 160
    monkeypatch.setenv("COLUMNS", "100")
    assert output_console().width == 100 and output_console(piped_width=160).width == 100


@pytest.mark.parametrize("command", ["run", "report", "doctor", "hooks", "layout", "compare", "plan", "export"])
def test_help_at_80_columns_prints_every_word_whole(capsys, monkeypatch, command):
    """rich cuts a word wider than the help column with an ellipsis: an example call or a syntax
    (`commscope.size_labels(...)`, `KIND@rank=R,...`) must break into words that fit."""
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("TERM", "dumb")
    code, out, _err = run_main(capsys, command, "--help")
    assert code == 0 and "--help" in out
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "…" not in out
    if command in ("report", "doctor", "export", "layout"):
        assert "commscope.size_labels() makes" in out and "model.named_parameters()" in " ".join(out.split())


def _option_rows(out: str) -> dict[str, str]:
    """The help's option rows, each option name → the rest of its first line (the type column, then help)."""
    rows = {}
    for line in out.splitlines():
        cells = line.strip("│ ").split()
        if cells and cells[0].startswith("--"):
            rows[cells[0]] = " ".join(cells[1:])
    return rows


@pytest.mark.parametrize("argv", [[], *([c] for c in ["run", "report", "doctor", "hooks", "layout", "compare", "plan",
                                                      "export"])])
def test_help_shows_flags_without_a_type(capsys, monkeypatch, argv):
    """A flag takes no value: its row is its name (or its --x / --no-x pair) and its help, never a `<bool>`;
    an option that takes a value keeps its type."""
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("TERM", "dumb")
    code, out, _err = run_main(capsys, *argv, "--help")
    assert code == 0
    rows = _option_rows(out)
    assert rows["--help"] == "Show this message and exit."
    assert "<bool>" not in out and "<>" not in out
    if argv == ["report"]:
        assert rows["--json"].startswith("Print the summary as JSON")
        assert rows["--hta"].startswith("--no-hta Run HTA's analyses")
        assert rows["--steps"].startswith("<str> Steps A <= step < B")
    if argv == []:
        assert rows["--version"] == "Print commscope's version and exit."


def test_every_run_option_that_takes_a_value_says_its_default(capsys, monkeypatch):
    """README: `commscope run --help` gives every option and its default. A flag is off unless given and
    `--inject` is repeatable (none by default); every option that takes a value names its default."""
    monkeypatch.setenv("COLUMNS", "400")
    monkeypatch.setenv("TERM", "dumb")
    code, out, _err = run_main(capsys, "run", "--help")
    assert code == 0
    rows = _option_rows(out)
    takes_value = {k: v for k, v in rows.items() if v.startswith("<") and k != "--inject"}
    assert {"--master-addr", "--master-port", "--node-rank", "--rdzv-endpoint", "--nproc"} <= set(takes_value)
    assert [k for k, v in takes_value.items() if "default" not in v.lower()] == []


@pytest.mark.parametrize("argv", [["report", ""], ["doctor", "", "--json"], ["layout", ""], ["export", "", "--perfetto",
                                                                                              "x.json"],
                                  # right after a flag, "" is the path, not the flag's value
                                  ["report", "--json", ""], ["doctor", "--json", ""], ["hooks", "--json", ""],
                                  ["report", "--no-hta", "", "--json"], ["doctor", "--json", "--", ""],
                                  ["report", "--", "--steps", ""]])
def test_an_empty_path_argument_is_refused_not_read_as_the_current_folder(capsys, argv):
    """click turns "" into the path "."; an unset shell variable, quoted, must not analyse the current folder."""
    code, out, err = run_main(capsys, *argv)
    assert (code, out) == (2, "")
    assert err == "commscope: error: an argument is empty where a path goes: give the path (. for the current folder)\n"


def test_an_empty_option_value_is_left_to_the_options_own_check(capsys):
    code, out, err = run_main(capsys, "report", "x", "--steps", "")
    assert code == 2 and "--steps is empty" in err
