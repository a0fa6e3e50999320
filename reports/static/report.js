// commscope report: heatmap cells describe themselves on hover and open their steps in the timeline on
// click (the cells come from reports/overview_section.py; their numbers are in data-* attributes).
document.addEventListener("DOMContentLoaded", function () {
  var table = document.getElementById("heatmap-table");
  if (!table) return;
  function describe(td) {
    var s = td.dataset.s.split(":"), lo = +s[0], hi = +s[1] - 1;
    var steps = lo === hi ? "step " + lo : "steps " + lo + "–" + hi + " (mean per step)";
    return "rank " + td.dataset.r + ", " + steps + ": exposed " + (+td.dataset.value).toFixed(3) +
      " ms of a " + (+td.dataset.stepMs).toFixed(3) + " ms step";
  }
  table.addEventListener("mouseover", function (ev) {
    var td = ev.target.closest("td.cell");
    if (td && !td.title) td.title = describe(td);
  });
  table.addEventListener("click", function (ev) {
    var td = ev.target.closest("td.cell");
    if (!td) return;
    var note = document.getElementById("heatmap-note");
    var plot = document.getElementById("timeline-plot");
    if (td.dataset.x0 === undefined || !plot || !window.Plotly) {
      note.textContent = describe(td) + ". Not drawn in the timeline: run the report again with --steps " +
        td.dataset.s + ".";
      return;
    }
    var x0 = parseFloat(td.dataset.x0), x1 = parseFloat(td.dataset.x1), pad = 0.02 * (x1 - x0);
    table.querySelectorAll("td.sel").forEach(function (c) { c.classList.remove("sel"); });
    td.classList.add("sel");
    note.textContent = describe(td) + ": shown in the timeline below.";
    Plotly.relayout(plot, {"xaxis.range": [x0 - pad, x1 + pad], "xaxis.autorange": false});
    document.getElementById("timeline").scrollIntoView();
  });
});
