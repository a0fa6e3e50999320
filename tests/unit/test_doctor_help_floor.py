"""doctor --help says that on CPU (host-timed) runs the default straggler bar is never below the host floor
(commscope.analyze.doctor_straggler.STRAGGLER_FLOOR_MS_HOST), in words that stay whole at 80 columns; the
help spells the floor out (importing the constant would load pandas for --help), so the two must agree."""
from __future__ import annotations

from cli_result import run_main
from commscope.analyze.doctor_straggler import STRAGGLER_FLOOR_MS_HOST
from commscope.commands.doctor import STRAGGLER_FLOOR_HELP


def test_the_help_floor_is_the_analysis_floor():
    assert STRAGGLER_FLOOR_HELP == f"{STRAGGLER_FLOOR_MS_HOST:g} ms" == "50 ms"


def test_straggler_pct_help_names_the_host_floor_at_80_columns(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("TERM", "dumb")
    code, cap = run_main(capsys, "doctor", "--help")
    out = cap.out
    assert code == 0 and max(len(line) for line in out.splitlines()) <= 80
    words = " ".join(ln.strip("│ ") for ln in out.splitlines())
    words = " ".join(words.split())
    assert ("--straggler-pct <float> Straggler bar as a % of the run's median step time (default 10 for "
            "device-timed arrivals, i.e. GPUs; 100 for CPU (host-timed) ranks, whose speed varies with OS "
            "scheduling, and then never below 50 ms; a % given here has no floor).") in words
