"""The terminal `report` prints its caveats (problems and notes) whole, wrapped at word boundaries."""
from rich.console import Console

from commscope.analyze.summary import summarize
from commscope.load import load_path
from paths import TESTS
from reports.report_terminal import print_report_summary


def render(doc, width=100) -> str:
    con = Console(record=True, width=width)
    print_report_summary(doc, con)
    return con.export_text()


def caveat_block(text: str) -> str:
    return text[text.index("problem while loading:"):]


def test_long_problem_lines_print_whole_at_word_boundaries():
    doc = summarize(load_path(str(TESTS / "data" / "hta-testdata" / "trace_filter")), with_hta=False)
    unpaired = next(p for p in doc["problems"] if "left unpaired" in p)
    assert len(unpaired) == 427  # the all_to_alls with their recorded sizes (test_pair_signatures)
    text = render(doc)
    block = caveat_block(text)
    assert max(len(line) for line in block.splitlines()) <= 100
    # every word of the problem, in order, none split across two lines and none dropped
    assert " ".join(block.split()).count(" ".join(unpaired.split())) == 1
    assert unpaired.split()[-1] == "long))" and "long))\n" in block
    partial = next(n for n in doc["notes"] if n.startswith("Partial: 2 of the job's 128 ranks"))
    assert " ".join(partial.split()) in " ".join(block.split())
    assert "…" not in block.replace("… ", "")  # no cut marker (only the "… N more" line may use one)


def test_kernel_caveat_keeps_its_ending():
    doc = summarize(load_path(str(TESTS / "data" / "hta-testdata" / "distributed_info_unavailable")),
                    with_hta=False)
    text = " ".join(render(doc).split())
    assert ("launched no kernel in the trace: not counted as collectives") in text
