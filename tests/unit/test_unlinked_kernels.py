"""Kernels without `args.correlation` cannot be linked to their launches: the loader says so for each rank
(counts may double: a launch and its kernel each become a collective), and HTA, which joins kernels to
launches by it (and took 62 s and 5 GB on 1.2 MB of such traces), is skipped with the reason."""
from __future__ import annotations

import gzip
import shutil

import orjson

from commscope.analyze import hta_bridge
from commscope.load import load_path
from paths import TESTS

FIXTURE = TESTS / "data" / "modded-nanogpt-8xh100"


def test_kernels_without_correlation_are_said_and_hta_is_skipped(tmp_path):
    for r in (0, 1):
        doc = orjson.loads(gzip.decompress((FIXTURE / f"rank{r}.json.gz").read_bytes()))
        for e in doc["traceEvents"]:
            if e.get("cat") == "kernel" and "correlation" in (e.get("args") or {}):
                e["args"]["correlation_id"] = e["args"].pop("correlation")
        (tmp_path / f"rank{r}.json.gz").write_bytes(gzip.compress(orjson.dumps(doc)))
    tr = load_path(str(tmp_path))
    said = [p for p in tr.problems if "carry no args.correlation" in p]
    n_comm = [int(tr.kernels[(tr.kernels["rank"] == r) & tr.kernels["is_comm"]].shape[0]) for r in (0, 1)]
    assert [p.split(": ", 1)[1].split(" communication")[0] for p in said] == [f"{n} of {n}" for n in n_comm]
    assert hta_bridge.compare(tr, {}) == {"status": "skipped", "reason": "the communication kernels carry no "
                                          "args.correlation, which HTA joins kernels to their launches by"}
    whole = load_path(str(FIXTURE))
    assert not [p for p in whole.problems if "correlation" in p]
    shutil.rmtree(tmp_path)
