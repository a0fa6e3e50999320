"""The report's ranks × steps heatmap colours cells on a ramp that one outlier step cannot flatten
(analyze.report_overview.colour_top), and its legend says which cells lie above the ramp."""
from __future__ import annotations


def test_the_heatmaps_colour_ramp_tops_out_below_an_outlier_step_and_says_so():
    """One step in which every rank waited on a straggler (1.5 s) against ~10 ms elsewhere: with the ramp
    up to the largest cell every other cell would take the palest colour. The ramp tops at the 95th percentile
    then, and the legend counts the cells above it; without outliers it spans every cell."""
    import numpy as np

    from commscope.analyze.report_overview import Heatmap, colour_top
    from reports.overview_section import _legend

    rng = np.random.default_rng(0)
    cells = rng.uniform(5, 15, (64, 40))
    cells[:, 20] = 1500.0  # the straggler's step: 64 of 2560 cells
    cells[3, 5] = np.nan
    top = colour_top(cells)
    assert top == np.nanquantile(cells, 0.95) and 14 < top < 15.1
    assert colour_top(cells[:, :20]) == np.nanmax(cells[:, :20])  # no outlier: the largest cell
    assert colour_top(np.full((2, 2), np.nan)) == 0.0 and colour_top(np.zeros((2, 3))) == 0.0
    hm = Heatmap([0], [(0, 0)], cells, cells, [], scale_ms=top, above_scale=int((cells[~np.isnan(cells)] > top).sum()),
                 max_ms=1500.0)
    legend = _legend(hm, 2559)
    assert (f'0 … {top:,.3f} ms; <span class="ramp" style="width:1.2em;background:rgb(178, 24, 43)"></span> '
            f"{hm.above_scale} cell(s) above it, up to 1,500.000 ms") in legend
    assert 64 <= hm.above_scale <= 128


def test_cells_above_the_ramp_take_a_hue_off_it_so_the_straggler_stands_apart():
    """A column where every rank waited on a straggler saturates; the straggler's own cell there may sit
    exactly at the ramp's top (the 95th percentile can land on it): it must not share the waiting ranks'
    colour, nor the saturated colour of the ramp's darkest cells."""
    from reports.overview_section import ABOVE, _cell_colour, _scale

    top = 159.78
    darkest, _ = _scale(1.0)
    at_top, _ = _cell_colour(159.78, top)  # the straggler's own cell
    waited, fg = _cell_colour(800.0, top)  # the others', waiting on it
    assert at_top == darkest and waited == f"rgb({ABOVE[0]},{ABOVE[1]},{ABOVE[2]})" != darkest and fg == "#fff"
    assert _cell_colour(0.0, top)[0] == _scale(0.0)[0] and _cell_colour(5.0, 0.0)[0] == _scale(0.0)[0]
