"""Kernels whose durations are each in the loader's range but absurd (1e13 µs: 115 days) make the sums of
an op's kernels overflow what a float holds exactly: the op's kernel time is then unknown, and layout and the
HTML report run (it was a traceback)."""
import gzip
import json

from paths import TESTS
from test_cli import run_main


def test_layout_reads_a_trace_of_absurd_kernel_durations(tmp_path, capsys):
    src = TESTS / "data" / "modded-nanogpt-8xh100"
    d = tmp_path / "t"
    d.mkdir()
    doc = json.loads(gzip.decompress((src / "rank0.json.gz").read_bytes()))
    n = 0
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel":
            e["dur"], n = 1e13, n + 1
    assert n > 100
    (d / "rank0.json").write_text(json.dumps(doc))
    code, out, err = run_main(capsys, "layout", str(d), "--json")
    assert code == 0, err
    assert "Traceback" not in err
    json.loads(out)  # a whole document
