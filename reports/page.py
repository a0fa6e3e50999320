"""Assemble the self-contained HTML report from the sections in `reports.sections.SECTIONS`.

Page order: the open sections first (summary, heatmap, timeline), then every other section as a
collapsed <details> block, so the first screen answers "what is exposed, where" and the rest is one click
away.

Self-contained means it opens offline: plotly.js is embedded once in <head> (no CDN), CSS and the page's
own script (reports/static/report.js) are inline, and nothing references http(s) resources. The embedded
plotly.js is the "basic" partial bundle (bar, scatter, pie; reports/static/plotly-basic.min.js, from the npm
package plotly.js-basic-dist-min at the version of the plotly Python package, MIT; 1.2 MB against the full
bundle's 4.8 MB), and it is embedded gzip-compressed in base64 (0.53 MB): a loader script inflates it with
the browser's DecompressionStream and runs it, and each figure (`figure_html`) is drawn once it has.
Data that report.js draws itself (the heatmap and the rank selector at scale) travels the same way
(`data_html`).
Every figure of the page uses only the bundle's trace types.
A section whose renderer fails is replaced by a one-line error box so one broken analysis does not
cost the whole report.

The page names input files and folders as the file system holds them; a name that is not valid UTF-8
shows its undecodable bytes as `\\xff` (commscope.util.text.printable, applied once to the whole page),
so every section writes paths as they are and the page always encodes.

The head carries `<meta name="generator" content="commscope">`: the marker by which `report`
recognises a page it wrote and may replace (commscope.util.outputs.check_output, own_page).

Invariant: the bundle's version equals plotly.py's plotly.js version (tests/unit/test_report.py checks), so the
figure JSON plotly.py writes is the one the bundle reads.
"""
from __future__ import annotations

import base64
import functools
import gzip
import html
from pathlib import Path

from commscope.analyze.report_context import ReportContext
from commscope.util.outputs import PAGE_GENERATOR, check_output, own_page, write_output
from commscope.util.text import printable, steps_said
from reports.sections import SECTIONS
from reports.tables import listed

STATIC = Path(__file__).with_name("static")
PLOTLY_JS = STATIC / "plotly-basic.min.js"

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:0 24px 40px;color:#222;max-width:1600px}
h1{margin:14px 0 2px;font-size:22px} h2{font-size:18px;margin:0 0 6px} h3{font-size:15px;margin:10px 0 4px}
nav{margin:0 0 8px;font-size:13px} nav a{margin-right:12px}
section{margin-top:18px} table{border-collapse:collapse;margin:6px 0;font-size:13px}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:left} th{background:#f4f4f4;font-weight:600}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap} .note{color:#555;font-size:13px;margin:4px 0}
.empty{color:#888} .error{background:#fee;border:1px solid #d62728;padding:6px}
.scroll{overflow-x:auto;max-width:100%}
.verdict{font-size:16px;padding:8px 12px;border-radius:4px;margin:6px 0}
.verdict.ok{background:#e8f4ea;border-left:5px solid #2a7a2a} .verdict.bad{background:#fbeaea;border-left:5px solid #b00020} .verdict.unsure{background:#fbf5e0;border-left:5px solid #8a6d00}
.headline{font-size:15px;margin:6px 0}
.caveats{background:#fff8e1;border-left:5px solid #d9a400;padding:6px 12px;margin:6px 0;font-size:13px}
.caveats ul{margin:4px 0 0;padding-left:18px} .caveats li{margin:2px 0} .caveats li.problem b{color:#8a1c00} .cols{display:flex;gap:32px;flex-wrap:wrap} .cols>div{flex:1;min-width:320px}
.cols ol{margin:0;padding-left:20px} .cols li{margin:3px 0} .cols ul{margin:2px 0 6px;padding-left:18px;font-size:13px;color:#333}
.swatch{display:inline-block;width:11px;height:11px;border-radius:2px;margin-right:5px;vertical-align:-1px}
table.heatmap td.cell{cursor:pointer;text-align:right;font-variant-numeric:tabular-nums;min-width:34px}
table.heatmap.dense td.cell{min-width:10px;padding:3px 2px;height:16px} table.heatmap.dense th{padding:3px 2px;font-size:11px}
table.heatmap th.drawn{background:#cfe0f3} table.heatmap td.sel{outline:3px solid #d62728;outline-offset:-3px} table.heatmap td.na{color:#aaa}
.heatmap-box{overflow:auto;max-height:1080px;max-width:100%} #heatmap-canvas{cursor:pointer}
.legend{white-space:nowrap;display:inline-block} .ramp{display:inline-block;width:120px;height:10px;vertical-align:middle;margin:0 4px;border:1px solid #ccc}
details{margin-top:10px;border-top:1px solid #e3e3e3;padding-top:6px}
details>summary{cursor:pointer;font-size:16px;font-weight:600;padding:2px 0}
#rank-select{max-width:32em}
@media print{nav,#rank-select{display:none} body{margin:0;max-width:none}
 *{-webkit-print-color-adjust:exact;print-color-adjust:exact}}
"""


# what a reader with JavaScript off is told: the figures, the heatmap canvas and the rank selector stay blank
NOSCRIPT = ('<noscript><p class="caveats">JavaScript is off: the timeline, the heatmap and the rank selector '
            "are drawn by it and stay blank; the summary and every table below are plain HTML.</p></noscript>")


LOADER = """
window.csPlotly = (function () {
  try {
    var b64 = document.getElementById("plotly-gz").textContent.trim();
    var bytes = Uint8Array.from(atob(b64), function (c) { return c.charCodeAt(0); });
    var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    return new Response(stream).text().then(function (code) {
      var s = document.createElement("script");
      s.textContent = code;
      document.head.appendChild(s);
      return window.Plotly;
    });
  } catch (e) { return Promise.reject(e); }
})();
window.csDrawn = {};  // figure id -> the promise of its drawing (report.js adds to drawn figures)
window.csPlot = function (id, fig, config) {
  window.csDrawn[id] = window.csPlotly.then(function (Plotly) {
    return Plotly.newPlot(id, fig.data, fig.layout, config);
  });
  window.csDrawn[id].catch(function (e) {
    document.getElementById(id).textContent = "The figure needs a browser that can inflate the embedded " +
      "plotly.js (DecompressionStream): " + e;
  });
};
"""


@functools.lru_cache(maxsize=1)
def plotly_gz_base64() -> str:
    """The basic bundle, gzip-compressed (deterministic: mtime 0) and base64-encoded."""
    return base64.b64encode(gzip.compress(PLOTLY_JS.read_bytes(), 9, mtime=0)).decode("ascii")


def data_html(obj, script_id: str) -> str:
    """Plain data for reports/static/report.js: JSON, gzip-compressed (mtime 0) in base64, in a script
    element that the browser does not run; report.js inflates it (csData) as the loader inflates plotly.js."""
    import orjson

    raw = gzip.compress(orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY), 9, mtime=0)
    return (f'<script type="application/gzip-base64" id="{html.escape(script_id)}">'
            f'{base64.b64encode(raw).decode("ascii")}</script>')


# Every figure's plotly.js config (4.x names): no "Share chart..." mode bar button, which uploads the
# chart to Plotly Cloud; the page shows a run's data and sends nothing anywhere.
PRIVATE_CONFIG = {"showSendToCloud": False, "modeBarButtonsToRemove": ["sendChartToCloud"]}


def figure_html(fig, div_id: str, config: dict | None = None) -> str:
    """A plotly figure as a div plus the call that draws it once plotly.js is loaded, under `config`
    joined with PRIVATE_CONFIG (which a caller's config cannot undo)."""
    import orjson

    config = dict(config or {})
    config["modeBarButtonsToRemove"] = sorted(set(config.get("modeBarButtonsToRemove", []))
                                              | set(PRIVATE_CONFIG["modeBarButtonsToRemove"]))
    config["showSendToCloud"] = False

    spec = fig.to_json().replace("</", "<\\/")  # a "</script>" inside a hover text must not end the script
    height = fig.layout.height or 450
    return (f'<div id="{div_id}" class="plotly-graph-div" style="height:{int(height)}px;width:100%"></div>'
            f'<script>csPlot("{div_id}", {spec}, {orjson.dumps(config).decode()});</script>')


def _section(sec, ctx: ReportContext, failed: list[str]) -> tuple[str, str] | None:
    try:
        body = sec.render(ctx)
    except Exception as e:  # a failing section is reported in place, the rest of the page stays useful
        failed.append(f"{sec.title}: {type(e).__name__}: {e}")  # and said by the command (never silent)
        body = (f'<p class="error">{html.escape(sec.title)} failed: {html.escape(type(e).__name__)}: '
                f'{html.escape(str(e))}</p>')
    if body is None:
        return None
    title = html.escape(sec.title)
    if sec.open:
        return sec.id, f'<section id="{sec.id}"><h2>{title}</h2>\n{body}\n</section>'
    return sec.id, (f'<details id="{sec.id}"><summary><h2 style="display:inline">{title}</h2></summary>\n{body}\n'
                    '</details>')


def render_html(ctx: ReportContext, failed: list[str] | None = None, weights: dict[str, int] | None = None) -> str:
    """The whole page as a string; `failed` gets "section: error" for each section that failed (its place
    on the page says the error), `weights` each section's id → its bytes (what weight_note names)."""
    title = f"commscope report — {Path(str(ctx.trace.path)).name}"
    parts, nav = [], []
    failed = [] if failed is None else failed
    for sec in sorted(SECTIONS, key=lambda s: (not s.open, s.order)):
        done = _section(sec, ctx, failed)
        if done is None:
            continue
        nav.append(f'<a href="#{sec.id}">{html.escape(sec.title)}</a>')
        parts.append(done[1])
        if weights is not None:
            weights[sec.id] = len(done[1].encode("utf-8", "replace"))  # a lone surrogate: a byte
    script = (STATIC / "report.js").read_text(encoding="utf-8")
    page = ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"{PAGE_GENERATOR}"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{html.escape(title)}</title><style>{CSS}</style>"
            f'<script type="application/gzip-base64" id="plotly-gz">{plotly_gz_base64()}</script>'
            f"<script>{LOADER}</script><script>{script}</script></head>\n<body>"
            f"<h1>{html.escape(title)}</h1>{NOSCRIPT}<nav>{''.join(nav)}</nav>\n" + "\n".join(parts)
            + "\n</body></html>\n")
    return printable(page)  # a file name's undecodable bytes as \xNN, wherever a section wrote it


# What a page is kept to (the weight of the 2-rank page with room for 16 ranks and 40 steps, docs/analysis.md
# "Weight"): a page over it is still written, and the command says why it is heavy.
PAGE_BUDGET_BYTES = 1_500_000


def weight_note(ctx: ReportContext, size: int, weights: dict[str, int]) -> str | None:
    """What the command says of a page of `size` bytes over PAGE_BUDGET_BYTES: its heaviest sections
    (`weights`, render_html's) with what each holds, and how to make them lighter; None within the budget."""
    if size <= PAGE_BUDGET_BYTES:
        return None
    ranked = sorted(weights.items(), key=lambda kv: -kv[1])
    # the heaviest section, and the next if it weighs a tenth of the page too
    heavy = ranked[:1] + [kv for kv in ranked[1:2] if kv[1] >= size / 10]
    titles = {s.id: s.title.lower() for s in SECTIONS}
    said = "; ".join(f"{titles.get(sid, sid)} {n / 1e6:.2f} MB{_holds(ctx, sid)}" for sid, n in heavy)
    # the advice that lightens the heaviest sections: HTA's tables do not depend on the steps drawn
    hta = any(sid in HTA_SECTIONS for sid, _ in heavy)
    steps = any(sid not in HTA_SECTIONS for sid, _ in heavy)
    advice = " and ".join(([STEPS_ADVICE] if steps else []) + (["--no-hta leaves HTA's tables out"] if hta else []))
    return (f"the page weighs {size / 1e6:.2f} MB, over the {PAGE_BUDGET_BYTES / 1e6:.2f} MB a page is kept to "
            f"(heaviest: {said}); {advice}")


HTA_SECTIONS = ("hta", "hta-views")
STEPS_ADVICE = "a narrower --steps A:B draws and lists fewer steps"


def _holds(ctx: ReportContext, section: str) -> str:
    if section == "timeline":
        drawn = steps_said(ctx.window[0], ctx.window[1] - 1) if ctx.window else "every step"
        n_drawn = len(ctx.drawn.ranks) if ctx.drawn is not None else len(ctx.trace.ranks)
        return f", {drawn} of {n_drawn} rank(s)"
    if section == "steps":  # the rows the step breakdown lists (sections.listed: some ranks' only at scale)
        return f", {len(listed(ctx, ctx.summary.get('steps') or [])[0]):,} rows of a rank's step"
    return ""


def write_report(ctx: ReportContext, out: str | Path, failed: list[str] | None = None,
                 weights: dict[str, int] | None = None) -> Path:
    """Write the page to `out` atomically (a failed write leaves what was there and no partial file),
    under commscope's output rule (check_output: checked again here, since the analysis may have taken
    minutes); an unwritable or refused path is one UserError line, not a traceback. `failed`, `weights`:
    as render_html's."""
    out = Path(out)
    page = render_html(ctx, failed, weights).encode("utf-8")
    src = getattr(ctx.trace, "path", None)
    check_output(out, str(src) if src else None, own_page)
    write_output(out, page)
    return out
