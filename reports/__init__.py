"""All of commscope's rendering: HTML report, terminal tables per command, Perfetto export.

Renderers take analysis results (commscope.analyze) and never
compute them; commands parse, call the analyses, and hand the results here.

Naming:
- `<command>_terminal`: what `commscope <command>` prints: rich tables, plain text, a JSON document it
  shapes (`report_terminal`, `doctor_terminal`, `hooks_terminal`, `layout_terminal`, `compare_terminal`);
  each exposes `print_...` functions that take the analysis result and a rich Console.
- the HTML page: `page` (self-contained assembly), `sections` (the list of section renderers over a
  commscope.analyze.report_context.ReportContext; add a section there), `<topic>_section` (a section
  with its own module, such as `scale_section` for pages of many ranks), `timeline` (the plotly figure of
  analyze.timeline_bars), `timeline_ranks` (every rank's rows as compact data, drawn on demand by the
  page's script at scale), `tables` (HTML tables from plain data), `static/` (the inlined plotly.js basic
  bundle, MIT, and the page's own script);
- `perfetto`: the Chrome-JSON trace of `commscope export --perfetto`.

The package itself imports nothing: a command that only prints (`reports.console`, a `*_terminal`
module) does not pay for the page's modules and plotly.
"""
