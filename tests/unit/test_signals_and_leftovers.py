"""What a command leaves behind when it is stopped or its output goes away: SIGTERM/SIGHUP end it like
Ctrl-C (exit 128 + the signal, one stderr line, no parse worker left, nothing of HTA's left),
SIGKILL of the command takes its parse workers with it, a closed stdout ends it quietly with 141, an
error naming a path with a newline stays one line, and an unreachable Dask scheduler is refused at once."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from commscope.cli import one_line
from commscope.errors import UserError
from commscope.load import engine

DATA = Path(__file__).resolve().parent.parent / "data"
EVENT = '{"ph":"X","cat":"cpu_op","name":"aten::add","pid":1,"tid":1,"ts":%d.5,"dur":1.0}'
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="signals and /proc as on Linux")


def _default_signals() -> None:
    # as a user's shell starts the command: a test run under nohup must not pass its ignored SIGHUP on
    # (commscope keeps a signal that was ignored when it started ignored, as nohup intends)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def cli(*args, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "commscope", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=_default_signals, **kw)


@pytest.fixture(scope="module")
def slow_run(tmp_path_factory) -> Path:
    """Two ranks of 600k tiny cpu ops (~50 MB each): a second or two of parsing per rank."""
    d = tmp_path_factory.mktemp("signals") / "slow-to-parse-c0ffee"
    d.mkdir()
    body = ",".join(EVENT % (2 * i) for i in range(600_000))
    for rank in range(2):
        (d / f"rank{rank}.json").write_text(
            '{"schemaVersion":1,"distributedInfo":{"backend":"gloo","rank":%d,"world_size":2},'
            '"baseTimeNanoseconds":1790857026000000000,"traceEvents":[%s]}' % (rank, body))
    return d


def alive_with(marker: str) -> list[int]:
    """Processes (zombies aside) whose command line names `marker`."""
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        if p.info["status"] != psutil.STATUS_ZOMBIE and any(marker in a for a in p.info["cmdline"] or ()):
            found.append(p.pid)
    return found


def start_mid_parse(path: Path) -> tuple[subprocess.Popen, list[psutil.Process]]:
    """`report --json path` once its parse worker is running, with that worker."""
    p = cli("report", "--json", path)
    me = psutil.Process(p.pid)
    deadline = time.monotonic() + 30
    while not me.children() and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    kids = me.children(recursive=True)
    time.sleep(0.3)  # into the parse
    assert kids and p.poll() is None, "no parse worker was seen running"
    return p, kids


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core parses in the command's own process")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_sigterm_and_sighup_mid_parse_end_like_ctrl_c_with_no_worker_left(slow_run, sig):
    p, kids = start_mid_parse(slow_run)
    p.send_signal(sig)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 128 + sig, (p.returncode, err)
    assert err == f"commscope: aborted ({sig.name})\n" and out == ""
    assert not [k.pid for k in kids if k.is_running() and k.status() != psutil.STATUS_ZOMBIE]
    assert not alive_with(slow_run.name)


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core parses in the command's own process")
def test_sigkill_of_the_command_takes_its_parse_workers_with_it(slow_run):
    p, kids = start_mid_parse(slow_run)
    p.kill()
    deadline = time.monotonic() + 0.5  # killed with the command, not after its parse (a second or so)
    p.wait(timeout=60)  # not communicate(): a worker left alive would hold the command's stdout
    while alive_with(slow_run.name) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive_with(slow_run.name)
    p.communicate(timeout=60)


FAKE_HTA = textwrap.dedent("""
    import importlib.metadata, json, os, sys, time, types

    SEEN, RUN = sys.argv[1:3]


    class TraceAnalysis:  # HTA that says what it was given, then takes its time
        def __init__(self, trace_files, trace_dir):
            seen = {"dir": trace_dir, "files": {str(r): f for r, f in trace_files.items()},
                    "dir_exists": os.path.exists(trace_dir)}
            with open(SEEN + ".tmp", "w") as f:
                json.dump(seen, f)
            os.replace(SEEN + ".tmp", SEEN)
            time.sleep(120)

    pkg, mod = types.ModuleType("hta"), types.ModuleType("hta.trace_analysis")
    mod.TraceAnalysis = TraceAnalysis
    sys.modules.update({"hta": pkg, "hta.trace_analysis": mod})
    real_version = importlib.metadata.version
    importlib.metadata.version = lambda name: "0.5.0" if name == "holistictraceanalysis" else real_version(name)
    sys.argv = ["commscope", "report", "--json", RUN]
    from commscope.cli import entry
    entry()
""")


def test_hta_reads_the_files_where_they_are_and_sigterm_leaves_nothing(tmp_path):
    """HTA is given each rank's file by its absolute path (no folder of links that a SIGKILL would leave
    behind), and a trace_dir that does not exist, so nothing HTA might write lands in the input."""
    seen_file = tmp_path / "seen.json"
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    p = subprocess.Popen([sys.executable, "-c", FAKE_HTA, str(seen_file), str(DATA / "modded-nanogpt-8xh100")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "TMPDIR": str(tmp)})
    deadline = time.monotonic() + 120
    while not seen_file.exists() and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert seen_file.exists(), p.communicate(timeout=10)
    seen = json.loads(seen_file.read_text())
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 143 and err == "commscope: aborted (SIGTERM)\n", (p.returncode, err)
    fixture = DATA / "modded-nanogpt-8xh100"
    assert seen["files"] == {str(r): str((fixture / f"rank{r}.json.gz").resolve()) for r in range(8)}
    assert Path(seen["dir"]).parent == tmp and not seen["dir_exists"] and not Path(seen["dir"]).exists()
    assert list(tmp.iterdir()) == []


@pytest.mark.parametrize("args", [["plan"], ["--help"], [], ["report", "--json", DATA / "gloo2"],
                                  ["doctor", DATA / "gloo2"]], ids=["plan", "help", "bare", "report", "doctor"])
def test_a_closed_stdout_ends_quietly_with_141(args):
    p = cli(*args)
    p.stdout.close()  # the reader is gone before the command writes (`commscope plan | head -c 0`)
    err = p.stderr.read()
    p.wait(timeout=120)
    assert p.returncode == 141 and err == "", (p.returncode, err)


def test_an_error_about_a_path_with_a_newline_is_one_line(tmp_path):
    d = tmp_path / "two\nlines"
    d.mkdir()
    p = cli("report", "--json", d)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 2 and err.startswith("commscope: error:") and err.count("\n") == 1, err
    assert "two\\nlines" in err


def test_one_line_escapes_every_control_character():
    assert one_line("a\nb\rc\td\x1b[31me\x7f\u2028f é \udcff") == "a\\nb\\rc\\td\\x1b[31me\\x7f\\u2028f é \udcff"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once it is closed


def test_a_refused_scheduler_address_fails_at_once():
    t0 = time.monotonic()
    with pytest.raises(UserError, match=r"cannot reach the Dask scheduler at tcp://127\.0\.0\.1:\d+: Connection refused"):
        engine._probe(f"tcp://127.0.0.1:{closed_port()}", 30.0)
    assert time.monotonic() - t0 < 5


def test_an_address_without_a_port_says_it_tried_dasks_default():
    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", engine.DEFAULT_PORT)) == 0:
            pytest.skip("something listens on Dask's default port here")
    with pytest.raises(UserError, match=r"^cannot reach the Dask scheduler at tcp://127\.0\.0\.1 \(port 8786, Dask's "
                                        r"default: the address names none\): Connection refused$"):
        engine._probe("tcp://127.0.0.1", 5.0)


def test_a_blank_scheduler_address_means_local_processes(tmp_path):
    (tmp_path / "f").write_text("x")
    assert engine.map_files(len, [str(tmp_path / "f")], scheduler="  ", workers=1) == [len(str(tmp_path / "f"))]


def test_report_with_a_refused_scheduler_is_one_line_in_seconds():
    pytest.importorskip("distributed")
    t0 = time.monotonic()
    p = cli("report", "--json", "--scheduler", f"tcp://127.0.0.1:{closed_port()}", DATA / "gloo2")
    out, err = p.communicate(timeout=120)
    assert p.returncode == 2 and err.count("\n") == 1 and "Connection refused" in err, err
    assert time.monotonic() - t0 < 15  # Dask alone retries for its 30 s timeout


def test_an_address_without_a_scheme_is_tcp_and_without_a_port_8786(tmp_path):
    """`--scheduler 127.0.0.1` (docs/analysis.md: an address without a port is tried at 8786) is read as
    tcp://127.0.0.1:8786: Dask itself refuses an address without a port, whatever its scheme."""
    assert engine._full_address("127.0.0.1") == "tcp://127.0.0.1:8786"
    assert engine._full_address("tcp://host") == "tcp://host:8786"
    assert engine._full_address("tls://[::1]") == "tls://[::1]:8786"
    assert engine._full_address("host:9000") == "tcp://host:9000"
    assert engine._full_address("inproc://x") == "inproc://x"
    pytest.importorskip("distributed")
    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", engine.DEFAULT_PORT)) == 0:
            pytest.skip("something listens on Dask's default port here")
    (tmp_path / "f").write_text("x")
    with pytest.raises(UserError, match=r"^cannot reach the Dask scheduler at tcp://127\.0\.0\.1:8786: Connection "
                                        r"refused$"):
        engine.map_files(len, [str(tmp_path / "f")], scheduler="127.0.0.1", connect_timeout_s=5.0)
    port = closed_port()
    with pytest.raises(UserError, match=rf"^cannot reach the Dask scheduler at tcp://127\.0\.0\.1:{port}: "):
        engine.map_files(len, [str(tmp_path / "f")], scheduler=f"127.0.0.1:{port}", connect_timeout_s=5.0)
