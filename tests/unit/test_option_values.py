"""Float options of plan, layout, doctor and compare refuse NaN and ±inf in one line (exit 2), before any
input is read; plan's --world-size is capped at the reading commands' COMMSCOPE_MAX_WORLD_SIZE; `run`
refuses an empty --out and a profiler window below step 0 in one line, before anything is written."""
from __future__ import annotations

import time

import pytest

from commscope.cli import main
from commscope.commands._shared import require_finite
from commscope.errors import UserError
from paths import TESTS

GLOO2 = str(TESTS / "data" / "gloo2")
CMP = [GLOO2, GLOO2]  # never read: the option is refused first

FLOAT_OPTIONS = [
    (["plan"], "--tflops"), (["plan"], "--capacity-mb"), (["plan"], "--alpha"),
    (["layout", GLOO2], "--peak-gbps"),
    (["doctor", GLOO2], "--straggler-ms"), (["doctor", GLOO2], "--straggler-pct"),
    (["compare", *CMP], "--target-loss"), (["compare", *CMP], "--fail-if-slower"),
]


def _run(capsys, args):
    try:
        main(args)
        code = 0
    except SystemExit as e:
        code = e.code or 0
    return code, capsys.readouterr()


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
@pytest.mark.parametrize("command,option", FLOAT_OPTIONS, ids=[f"{c[0]}{o}" for c, o in FLOAT_OPTIONS])
def test_a_non_finite_float_option_is_one_line_and_exit_2(capsys, monkeypatch, command, option, value):
    import commscope.load as load

    def never(*a, **k):
        raise AssertionError("the input was read before the option was checked")

    monkeypatch.setattr(load, "load_path", never, raising=False)
    code, out = _run(capsys, [*command, f"{option}={value}"])
    lines = out.err.strip().splitlines()
    assert code == 2 and lines == [f"commscope: error: {option} must be a finite number, got {value}"], out.err
    assert out.out == ""


def test_require_finite_lets_finite_values_and_none_through():
    for v in (None, 0.0, -1.5, 1e308):
        require_finite(v, "--x")
    with pytest.raises(UserError, match="--x must be a finite number, got nan"):
        require_finite(float("nan"), "--x")


def test_plan_capacity_too_large_to_count_in_bytes(capsys):
    code, out = _run(capsys, ["plan", "--capacity-mb", "1e308", "--tp", "2"])
    assert code == 2 and out.err.strip() == "commscope: error: --capacity-mb 1e+308 is too large to count in bytes"


@pytest.mark.parametrize("world_size", ["100000", "100000000000"])
def test_plan_world_size_is_capped_at_once(capsys, world_size):
    t = time.monotonic()
    code, out = _run(capsys, ["plan", "--world-size", world_size])
    assert time.monotonic() - t < 10
    assert code == 2 and out.err.strip().splitlines() == [
        f"commscope: error: --world-size {world_size} is too large; refusing at the limit of 16,384 ranks "
        "(set COMMSCOPE_MAX_WORLD_SIZE=N to raise it)"]


def test_plan_world_size_limit_follows_the_environment(capsys, monkeypatch):
    monkeypatch.setenv("COMMSCOPE_MAX_WORLD_SIZE", "16")
    code, out = _run(capsys, ["plan", "--world-size", "32"])
    assert code == 2 and "refusing at the limit of 16 ranks (set COMMSCOPE_MAX_WORLD_SIZE=N" in out.err
    code, out = _run(capsys, ["plan", "--world-size", "16", "--json"])
    assert code == 0, out.err


def test_run_refuses_an_empty_out_instead_of_writing_the_default_folder(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    code, out = _run(capsys, ["run", "--out=", "--nproc", "1", "--steps", "1"])
    assert code == 2 and out.err.splitlines() == [
        "commscope: error: --out is empty: give the run directory, or leave --out out for "
        "runs/<timestamp>-<preset>-<world size>"]
    assert list(tmp_path.iterdir()) == []  # no runs/<timestamp>


@pytest.mark.parametrize("argv", [["--profile", "-1:2"], ["--profile=-1:2"], ["--profile", "-3"]])
def test_run_says_what_a_profiler_window_must_be(capsys, tmp_path, argv):
    # argparse would take a separate "-1:2" for an option ("expected one argument"): the value reaches the
    # trainer's own check, which says what the window must be
    out_dir = tmp_path / "r"
    code, out = _run(capsys, ["run", "--nproc", "1", "--steps", "3", "--out", str(out_dir), *argv])
    got = argv[-1].split("=")[-1]
    want = f"{got}:{int(got) + 1}" if ":" not in got else got
    assert code == 2 and out.err.splitlines() == [
        f"commscope: error: --profile must be a window START:STOP with 0 <= START < STOP, got {want}"]
    assert not out_dir.exists()


def test_run_joins_each_forwarded_value_to_its_option():
    from instrumented_model.options import to_argv

    assert to_argv({"profile": "-1:2", "inject": ["crash@rank=0,step=1", "-x"], "compile": True, "seed": 0,
                    "lr": None}) == ["--seed=0", "--compile", "--profile=-1:2", "--inject=crash@rank=0,step=1",
                                     "--inject=-x"]


def test_run_help_states_the_trainers_own_defaults_for_options_it_forwards_only_when_given():
    """`--lr`, `--adam-lr`, `--wd` are not forwarded unless given (the optimizer keeps its own default), so the
    help's "Default:" must be the optimizer's: read from its signature, not from a copy."""
    import inspect

    from instrumented_model.optimizer import NorMuonAndAdam
    from instrumented_model.options import TRAINER_OPTIONS

    params = inspect.signature(NorMuonAndAdam.__init__).parameters
    helps = {o.name: o.help for o in TRAINER_OPTIONS}
    for name in ("lr", "adam-lr", "wd"):
        assert helps[name].endswith(f"Default: {params[name.replace('-', '_')].default}."), name
    assert params["split_step"].default is None and "Default: never" in helps["split-step"]
    assert all(o.default is not None or "Default:" in o.help for o in TRAINER_OPTIONS
               if o.type not in ("flag", "many")), \
        [o.name for o in TRAINER_OPTIONS if o.default is None and "Default:" not in o.help and o.type != "flag"]


@pytest.mark.parametrize("option", ["--tflops", "--bytes-per-element", "--capacity-mb"])
def test_a_plan_size_that_is_not_positive_names_its_option_and_value(capsys, option):
    code, out = _run(capsys, ["plan", option, "0", *(["--tp", "2"] if option == "--capacity-mb" else [])])
    assert code == 2 and out.err.strip() == f"commscope: error: {option} must be positive, got 0"


# values that pass a lower-bound check but overflow further on (a 64-bit JSON integer, time.sleep's time_t):
# each is refused in one line before anything is read, written or started
TOO_LARGE = [
    (["plan", "--bytes-per-element", "1000000000000", "--json"],
     "--bytes-per-element must be at most 64 (the widest dtype, complex128, has 16), got 1000000000000"),
    (["run", "--nproc", "2", "--steps", "99999999999999999999999"],
     "--steps must be in 1..2**53-1, got 99999999999999999999999"),
    (["run", "--nproc", "2", "--steps", "2", "--grad-accum", str(2 ** 53)],
     f"--grad-accum must be in 1..2**53-1, got {2 ** 53}"),
    (["run", "--nproc", "2", "--steps", "2", "--inject", "delay@rank=0,step=1,ms=1e308"],
     "--inject 'delay@rank=0,step=1,ms=1e308': ms must be a number in 0..86,400,000 (a day)"),
    (["doctor", GLOO2, "--straggler-ms", "1e308"],
     "--straggler-ms must be > 0 and at most 86,400,000 (a day), got 1e+308"),
    (["run", "--nproc", "2", "--steps", "3", "--split-step", "1000"],
     "--split-step must be a step of this run, 0..2 (--steps 3), got 1000: embed and lm_head would never be untied"),
    (["run", "--nproc", "2", "--steps", "3", "--split-step", "-1"], "--split-step must be a step of this run, 0..2"),
    (["run", "--nproc", "2", "--steps", "2", "--rdzv-endpoint", "garbage"],
     "--rdzv-endpoint must be HOST:PORT (a TCP port, 1..65535), got 'garbage'"),
    (["run", "--nproc", "2", "--steps", "2", "--rdzv-endpoint", "localhost:65536"],
     "--rdzv-endpoint must be HOST:PORT (a TCP port, 1..65535), got 'localhost:65536'"),
    (["run", "--nproc", "2", "--steps", "2", "--rdzv-endpoint", "no-such-host.invalid:29400"],
     "--rdzv-endpoint: host 'no-such-host.invalid' does not resolve"),
    (["run", "--nproc", "2", "--steps", "2", "--nnodes", "2", "--node-rank", "0", "--master-addr", "no-such-host.invalid"],
     "--master-addr: host 'no-such-host.invalid' does not resolve"),
]


@pytest.mark.parametrize("argv,message", TOO_LARGE, ids=[" ".join(a[:1] + a[-2:-1]) for a, _ in TOO_LARGE])
def test_a_value_past_what_the_run_can_hold_is_one_line_and_exit_2(capsys, monkeypatch, tmp_path, argv, message):
    import commscope.load as load

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(load, "load_path", lambda *a, **k: pytest.fail("the input was read"), raising=False)
    code, out = _run(capsys, [*argv, "--out", str(tmp_path / "r")] if argv[0] == "run" else argv)
    lines = out.err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith(f"commscope: error: {message}"), out.err
    assert out.out == "" and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("value", ["1_0", "９", "٣:5", "1.5", "0x2"])
def test_steps_take_ascii_integers_only(capsys, value):
    """int() reads "1_0" as 10 and other scripts' digits as numbers: on a command line they are typos, and
    --steps says what it takes instead of selecting steps nobody wrote."""
    code, out = _run(capsys, ["report", GLOO2, "--json", "--no-hta", "--steps", value])
    assert code == 2 and out.err.strip() == (f"commscope: error: --steps must look like A:B, A, A: or :B with "
                                             f"integer steps, got {value!r}")


def test_an_empty_steps_is_refused_not_read_as_every_step(capsys):
    code, out = _run(capsys, ["report", GLOO2, "--json", "--no-hta", "--steps", ""])
    assert code == 2 and out.err.strip() == ("commscope: error: --steps is empty: give A:B, A, A: or :B, or leave "
                                             "--steps out for every step")


@pytest.mark.parametrize("value", ["1_0", "٣", "5.0"])
def test_a_limit_takes_ascii_digits_only(monkeypatch, value):
    from commscope.load import limits

    monkeypatch.setenv("COMMSCOPE_MAX_TRACE_MB", value)
    with pytest.raises(UserError, match=f"^COMMSCOPE_MAX_TRACE_MB='{value}' is not a whole number$"):
        limits.TRACE_BYTES.value()
    monkeypatch.setenv("COMMSCOPE_MAX_TRACE_MB", " 5 ")
    assert limits.TRACE_BYTES.value() == 5 * 2 ** 20
