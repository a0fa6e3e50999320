"""Jobs with more ranks than a report page draws one by one, made for a test by bench/gen_job.py from the
recorded 2-rank CPU run (tests/data/cpurun-hooks-gloo2) into the test's temporary folder.

`scale_job(tmp_path, ranks, straggler)`: a run directory of `ranks` ranks and 4 steps, rank `straggler`
stalling 1.5 s before one collective of step 2 (and rank `desync`'s collective there of twice the bytes,
where given); returns gen_job's ground truth (its `job` is the path)."""
from __future__ import annotations

import importlib
import sys

from paths import ROOT, TESTS

sys.path.insert(0, str(ROOT / "bench"))
gen_job = importlib.import_module("gen_job")  # a bench script, as tests/integration/test_bench_scripts.py imports them

DELAY_MS = 1500


def scale_job(tmp_path, ranks: int = 40, straggler: int = 29, steps: int = 4, desync: int | None = None) -> dict:
    return gen_job.generate(TESTS / "data" / "cpurun-hooks-gloo2", tmp_path / f"job{ranks}", ranks, steps=steps,
                            straggler=straggler, at_step=2, delay_ms=DELAY_MS, desync=desync)
