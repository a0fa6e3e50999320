"""A drill's page (a run started with --inject) says what was planted beside the verdict, as the doctor's
terminal does: the planted fault is not evidence, and a reader of the page should know it was a drill."""
from __future__ import annotations

import json

from paths import TESTS
from report_pages import report_page


def test_a_drills_page_says_what_was_injected_as_the_doctor_does(tmp_path):
    """--inject is a drill: the doctor's terminal names what was planted, beside the verdict; the page's
    diagnosis says the same (it was only a key of the configuration table)."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(TESTS / "data" / "cpurun-hooks-gloo2", run)
    cfg = json.loads((run / "config.json").read_text())
    cfg["args"]["inject"] = ["delay@rank=1,step=2,ms=<50>"]
    (run / "config.json").write_text(json.dumps(cfg))
    assert ('id="doctor-injected">This run was started with <code>--inject delay@rank=1,step=2,ms=&lt;50&gt;</code>; '
            "not used for the verdict.</p>") in report_page(run, tmp_path / "r.html")
    assert "doctor-injected" not in report_page(TESTS / "data" / "cpurun-hooks-gloo2", tmp_path / "plain.html")
