"""What `report --json` and the terminal summary say of a job with more ranks than they list one by one:
the arrival-lateness distribution puts the planted straggler's stall in its top bucket, each label says
where its name came from, and the terminal's per-rank overlap table lists the representative ranks."""
from __future__ import annotations

import io

from rich.console import Console

from commscope.analyze.summary import SCHEMA_VERSION, summarize
from commscope.load import load_path
from reports.report_terminal import TERMINAL_RANKS, print_report_summary
from scale_jobs import DELAY_MS, scale_job


def test_lateness_representatives_and_the_terminal_at_40_ranks(tmp_path):
    truth = scale_job(tmp_path, ranks=40, straggler=29)
    doc = summarize(load_path(truth["job"]), with_hta=False)
    assert doc["schema_version"] == SCHEMA_VERSION == 13
    late = doc["arrival_lateness"]
    top = late["histogram"][-1]
    # the stall (1.5 s) lands in the last 1-2-5 bucket, [1 s, 2 s), and only the straggler is there
    assert (top["lo_ms"], top["hi_ms"], top["worst_rank"], top["ranks"]) == (1000.0, 2000.0, 29, 1)
    assert DELAY_MS * 0.9 <= top["worst_ms"] <= DELAY_MS * 1.1 and top["worst_step"] == 2
    assert sum(b["arrivals"] for b in late["histogram"]) == late["arrivals"]
    assert late["quantiles"][-1] == {"quantile": 1.0, "lateness_ms": top["worst_ms"]}
    assert {v["label_source"] for v in doc["labels"].values()} == {"recorder"}

    out = io.StringIO()
    print_report_summary(doc, Console(file=out, width=100))
    text = out.getvalue()
    table = text[text.index("Communication overlap by rank"):text.index("Share of each rank")]
    reps = [r["rank"] for r in doc["representative_ranks"]]
    listed = [int(line.split("│")[1]) for line in table.splitlines() if line.startswith("│")]
    assert 40 > TERMINAL_RANKS and listed == sorted(reps) and reps[0] == 29
    assert f"the {len(reps)} representative ranks of 40;" in " ".join(table.split())
