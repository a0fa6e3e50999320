"""The report's most exposed labels each give their share of the step time. Collectives in flight together
(gloo runs them side by side; a script that waits on several handles at once) each count the same wait:
where the shares add up to more than the exposed share of the headline, the list says so, instead of
letting 49 % and 49 % read as 98 % of the step spent waiting when 50 % was."""
from __future__ import annotations

from commscope.analyze.report_overview import _shares_overlap


def test_shares_that_add_up_past_the_exposed_total_are_said_to_overlap():
    ranked = [("0.bias", {"exposed_ms": 1533.0, "exposed_in_steps_ms": 1533.0}),
              ("0.weight", {"exposed_ms": 1524.0})]
    said = _shares_overlap(ranked, 3120.0, 50.6)
    assert said == ("the labels' shares add up to 98.0% of the step time, more than the 50.6% exposed in all: "
                    "collectives in flight together each count the same wait, so each share is that label's own and "
                    "they do not add up")
    # one after another, they add up to the total (within rounding): nothing to say
    assert _shares_overlap([("a", {"exposed_ms": 30.0}), ("b", {"exposed_ms": 20.0})], 100.0, 50.0) is None
    assert _shares_overlap(ranked, 0.0, 50.6) is None and _shares_overlap(ranked, 3120.0, None) is None
