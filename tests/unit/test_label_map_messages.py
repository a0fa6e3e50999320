"""--label-map says at once, on stderr and for every command, what the map could not settle, and refuses a
map that names nothing or is not a regular file (one line, exit 2)."""
from __future__ import annotations

import json
import os

import pytest

from commscope.cli import main
from paths import TESTS

FIXTURE = str(TESTS / "data" / "modded-nanogpt-8xh100")


def _run(capsys, *args):
    with pytest.raises(SystemExit) as e:
        main(list(args))
    return e.value.code, capsys.readouterr()


def test_an_unused_label_is_said_on_stderr_by_doctor(tmp_path, capsys):
    m = tmp_path / "map.json"
    m.write_text('{"nothing_this_size": [1234567]}')
    try:
        main(["doctor", FIXTURE, "--json", "--label-map", str(m)])
    except SystemExit as e:
        assert e.code in (0, None)
    err = capsys.readouterr().err
    assert "label map: 1 of 1 label(s) matched no collective" in err and "nothing_this_size" in err


def test_a_map_of_thousands_of_clashing_labels_gives_short_lines(tmp_path, capsys):
    """3000 labels that all claim the same 999 sizes: each note lists a few and counts the rest."""
    m = tmp_path / "map.json"
    m.write_text(json.dumps({f"label_{i}": list(range(1, 1000)) for i in range(3000)}))
    code, out = _run(capsys, "report", str(TESTS / "data" / "gloo2"), "--json", "--no-hta", "--label-map", str(m))
    assert code in (0, None)
    lines = out.err.strip().splitlines()
    assert len(lines) == 2 and all(len(line) < 700 for line in lines), [len(line) for line in lines]
    assert lines[0].startswith("commscope: label map: 999 size(s) claimed by several labels")
    assert "1 B: label_0|label_1|" in lines[0] and "label_9 … 2990 more" in lines[0]
    assert lines[0].endswith("more size(s)")
    assert lines[1].endswith("label_9 … 2990 more")


def test_a_long_label_is_cut_in_the_note():
    import pandas as pd

    from commscope.analyze.labels import relabel_by_size

    _, notes = relabel_by_size(pd.DataFrame(), {"x" * 5000: [8], "y": [8]})
    assert len(notes[0]) < 300 and "x" * 39 + "…|y" in notes[0]


@pytest.mark.parametrize("kind", ["empty", "fifo"])
def test_an_empty_map_or_a_fifo_is_one_line_and_exit_2(tmp_path, capsys, kind):
    m = tmp_path / "map.json"
    if kind == "empty":
        m.write_text("{}")
    else:
        os.mkfifo(m)
    code, out = _run(capsys, "report", FIXTURE, "--json", "--no-hta", "--label-map", str(m))
    lines = out.err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("commscope: error: --label-map ")
    assert ("names no label" if kind == "empty" else "a FIFO") in lines[0]


def test_size_labels_warns_of_shared_sizes_and_refuses_unnamed_parameters():
    torch = pytest.importorskip("torch")
    import commscope

    m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    with pytest.warns(UserWarning, match=r"1 size\(s\) belong to more than one label \(e\.g\. 16 bytes\)"):
        got = commscope.size_labels(m)
    # the weights differ (64 and 16 bytes): two layers, not one repeated, so each keeps its name; the biases
    # are one size, which no map could tell apart anyway
    assert got == {"0.weight": [64], "1.weight": [16], "*.bias": [16]}
    with pytest.raises(TypeError, match=r"model\.parameters\(\) has no names"):
        commscope.size_labels(m.parameters())


def test_hta_rule_undefined_on_the_last_step_is_explained_as_its_cutoff():
    """On the 8×H100 fixture, --steps 11:12 selects only the last profiled step: HTA's rule (which leaves it
    out) has no value on ranks 0, 1, 2 and 7 while the device saw their communication."""
    from commscope.analyze.summary import summarize, undefined_overlap_note
    from commscope.load import load_path

    doc = summarize(load_path(FIXTURE), steps=(11, 12), with_hta=False)
    hta, dev = doc["hta_comm_overlap_pct_by_rank"], doc["device_comm_overlap_pct_by_rank"]
    assert [r for r, v in hta.items() if v is None] == ["0", "1", "2", "7"]
    assert all(dev[r] is not None for r in ("0", "1", "2", "7"))
    note = undefined_overlap_note(doc)
    assert note.startswith("HTA's rule is undefined for rank(s) 0, 1, 2, 7 where the device-only overlap is not")
    assert "no communication time" not in note
