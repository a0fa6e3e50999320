"""One function of reports/static/report.js run under node, for tests that check it computes what the Python
side of the page does (the same text, the same sizes)."""
from __future__ import annotations

import json
import subprocess

from paths import ROOT


def js_function(name: str) -> str:
    """The source of report.js's top-level `function NAME` (through its closing brace at column 0)."""
    src = (ROOT / "reports" / "static" / "report.js").read_text(encoding="utf-8")
    start = src.index(f"function {name}")
    return src[start:src.index("\n}\n", start) + 3]


def js_map(name: str, values: list, *before) -> list:
    """`NAME(*before, v)` for each of `values`, under node, as JSON."""
    lead = "".join(f"{json.dumps(b)}, " for b in before)
    code = (f"{js_function(name)}\nconsole.log(JSON.stringify({json.dumps(values)}.map(function (v) "
            f"{{ return {name}({lead}v); }})));")
    out = subprocess.run(["node", "-e", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)
