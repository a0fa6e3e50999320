"""An unknown option is one line, exit 2, and suggests only options close to what was typed."""
from __future__ import annotations

import pytest

from bad_inputs import invoke


@pytest.mark.parametrize("argv, line", [
    (["run", "--bogus"], "commscope: error: No such option: --bogus (see: commscope run --help)"),
    (["layout", "x", "--jsn"],
     "commscope: error: No such option: --jsn (Possible options: --json) (see: commscope layout --help)"),
    (["plan", "--tflop", "3"],
     "commscope: error: No such option: --tflop (Possible options: --tflops) (see: commscope plan --help)"),
    (["run", "--grad-acum", "2"],
     "commscope: error: No such option: --grad-acum (Possible options: --grad-accum) (see: commscope run --help)"),
])
def test_unknown_option_suggests_only_close_names(argv, line):
    code, out, err = invoke(argv)
    assert (code, out, err) == (2, "", line + "\n")
