// commscope report: heatmap cells describe themselves on hover and open their steps in the timeline on
// click (the cells come from reports/overview_section.py; their numbers are in data-* attributes).
// At scale (reports/timeline_ranks.py) the heatmap is a canvas painted here from its data, and a selector
// adds any rank's timeline rows to the figure, drawn here from every rank's compact rows.

// A gzip+base64 JSON document of the page (reports.page.data_html), inflated once.
window.csData = (function () {
  var cache = {};
  return function (id) {
    if (!cache[id]) {
      cache[id] = Promise.resolve().then(function () {
        var b64 = document.getElementById(id).textContent.trim();
        var bytes = Uint8Array.from(atob(b64), function (c) { return c.charCodeAt(0); });
        var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
        return new Response(stream).text();
      }).then(JSON.parse);
    }
    return cache[id];
  };
})();

// Milliseconds as the page's tables write them: three decimals, thousands separated ("1,431.216").
function ms3(v) {
  return v.toLocaleString("en-US", {minimumFractionDigits: 3, maximumFractionDigits: 3});
}

// Once the timeline is drawn (at once on a page without one).
function csTimelineDrawn() {
  return (window.csDrawn || {})["timeline-plot"] || Promise.resolve();
}

// Whether a step mark's or menu entry's text names step `v`: "step 3", "step 3 · no end recorded",
// "step 3 (no end recorded)"; not "step 30".
function csNamesStep(text, v) {
  var t = String(text || ""), name = "step " + v;
  return t === name || t.indexOf(name + " ") === 0;
}

// Zoom the timeline to [x0, x1] ms (steps lo..hi) and bring it into view. The timeline's step dropdown
// (reports/timeline.py) then names that step, or no entry for a range of steps: it must not go on
// naming a step the figure no longer shows.
function csZoom(x0, x1, lo, hi) {
  var plot = document.getElementById("timeline-plot");
  if (!plot) return;
  // the step's mark sits at the first drawn rank's start; a window of a rank that started it later would
  // leave the mark and its label out of view: the zoom reaches back to it
  ((plot.layout || {}).annotations || []).forEach(function (a) {
    if (lo !== undefined && csNamesStep(a.text, lo) && a.x < x0 && a.x > x0 - (x1 - x0)) x0 = a.x;
  });
  var pad = 0.02 * (x1 - x0);
  window.csPlotly.then(function (Plotly) {
    var update = {"xaxis.range": [x0 - pad, x1 + pad], "xaxis.autorange": false};
    var menus = (plot.layout || {}).updatemenus;
    if (menus && menus.length && lo !== undefined) {
      var want = lo === hi ? "step " + lo : null, active = -1;
      menus[0].buttons.forEach(function (b, i) { if (b.label === want) active = i; });
      update["updatemenus[0].active"] = active;
    }
    Plotly.relayout(plot, update);
  });
  document.getElementById("timeline").scrollIntoView();
}

// Step `v` from the timeline's own step menu, for a #step=N the heatmap has no column for (a step begun and
// never ended: "step 3 (no end recorded)"): zoomed to as choosing that entry does; false where the menu
// has no such entry.
function csMenuStep(v, note, said) {
  var plot = document.getElementById("timeline-plot"), menus = plot && plot.layout && plot.layout.updatemenus;
  if (!menus || !menus.length || !window.Plotly) return false;
  var k = menus[0].buttons.findIndex(function (b) { return csNamesStep(b.label, v); });
  if (k < 0) return false;
  var update = Object.assign({}, menus[0].buttons[k].args[0], {"updatemenus[0].active": k});
  update["xaxis.range"] = update["xaxis.range"].slice();
  Plotly.relayout(plot, update);
  if (note) note.textContent = menus[0].buttons[k].label + (said || ": no heatmap column (no rank ended it)") +
    "; shown in the timeline below.";
  document.getElementById("timeline").scrollIntoView();
  return true;
}

// Say `text` in `el` (a note under a figure) and bring it into view: a link whose fragment the page
// cannot follow says why where the reader lands.
function csSay(el, text) {
  if (!el) return;
  el.textContent = text;
  el.scrollIntoView({block: "center"});
}

// Set name=value among the page's fragment parameters (value null: drop it), keeping the others, without
// scrolling or firing hashchange: the address bar then links to what the page shows.
function csSetHashParam(name, value) {
  var parts = location.hash.replace(/^#/, "").split("&").filter(function (p) {
    return p.indexOf("=") > 0 && p.indexOf(name + "=") !== 0;
  });
  if (value !== null) parts.push(name + "=" + encodeURIComponent(value));
  history.replaceState(null, "", parts.length ? "#" + parts.join("&") : location.pathname + location.search);
}

document.addEventListener("DOMContentLoaded", function () {
  var table = document.getElementById("heatmap-table");
  if (!table) return;
  function describe(td) {
    var s = td.dataset.s.split(":"), lo = +s[0], hi = +s[1] - 1;
    var steps = lo === hi ? "step " + lo : "steps " + lo + "–" + hi + " (mean per step)";
    return "rank " + td.dataset.r + ", " + steps + ": exposed " + ms3(+td.dataset.value) +
      " ms of a " + ms3(+td.dataset.stepMs) + " ms step";
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
    table.querySelectorAll("td.sel").forEach(function (c) { c.classList.remove("sel"); });
    if (td.dataset.x0 === undefined || !plot || !window.Plotly) {
      note.textContent = describe(td) + ". Not drawn in the timeline: run the report again with --steps " +
        td.dataset.s + ".";
      return;
    }
    var x0 = parseFloat(td.dataset.x0), x1 = parseFloat(td.dataset.x1);
    td.classList.add("sel");
    note.textContent = describe(td) + ": shown in the timeline below.";
    var s = td.dataset.s.split(":");
    csZoom(x0, x1, +s[0], +s[1] - 1);
  });
  // A link to the page with #step=N opens step N as a click on its first heatmap cell (the first cell of
  // the column holding it) does; a step the page cannot open is said in the heatmap's note, scrolled to.
  function fromHash() {
    var m = /(?:^#|&)step=([^&]*)/.exec(location.hash);
    if (!m) return;
    var v = decodeURIComponent(m[1]), note = document.getElementById("heatmap-note");
    var cells = Array.prototype.slice.call(table.querySelectorAll("td.cell"));
    var bounds = cells.map(function (c) { var s = c.dataset.s.split(":"); return [+s[0], +s[1] - 1]; });
    var lo = Math.min.apply(null, bounds.map(function (b) { return b[0]; }));
    var hi = Math.max.apply(null, bounds.map(function (b) { return b[1]; }));
    var range = cells.length ? " (steps " + lo + "–" + hi + ")" : "";
    if (!/^\d+$/.test(v)) return csSay(note, "#step=" + v + " is not a step: give a whole number" + range + ".");
    var k = bounds.findIndex(function (b) { return b[0] <= +v && +v <= b[1]; });
    if (k < 0) {
      return csTimelineDrawn().then(function () {
        if (!csMenuStep(v, note)) csSay(note, "#step=" + v + ": the heatmap has no step " + v + range + ".");
      });
    }
    var td = cells[k];
    csTimelineDrawn().then(function () {  // once the timeline is in
      // a column of several steps, or one the timeline draws only in part: the step itself from the
      // timeline's menu, where it has one, rather than the whole column or a note to run again
      if ((bounds[k][0] !== bounds[k][1] || td.dataset.x0 === undefined) &&
          csMenuStep(v, note, " (in the heatmap's column of steps " + bounds[k][0] + "–" + bounds[k][1] + ")")) return;
      td.click();
      if (td.dataset.x0 === undefined || !window.Plotly) csSay(note, "#step=" + v + ": " + note.textContent);
    });
  }
  window.addEventListener("hashchange", fromHash);
  fromHash();
});

// ---- at scale: the heatmap as a canvas, one row per rank -----------------------------------------------
document.addEventListener("DOMContentLoaded", function () {
  var canvas = document.getElementById("heatmap-canvas");
  if (!canvas) return;
  var note = document.getElementById("heatmap-note");
  csData("heatmap-gz").then(function (d) {
    var nr = d.ranks.length, nc = d.columns.length;
    var left = 52, top = 22, right = 150, labelH = 12, box = canvas.parentElement;
    // columns as wide as the box allows (6 to 28 px; under 6 px the box scrolls), so the marks on the
    // right stay in view on a narrow window; redrawn when a resized window changes that width
    function fitCol() {
      var avail = Math.min(1100, (box.clientWidth || 1100 + left + right) - left - right);
      return Math.max(6, Math.min(28, Math.floor(avail / nc)));
    }
    var rowH = Math.max(1, Math.min(12, Math.floor(720 / nr))), colW = fitCol();
    var rowOf = {};
    d.ranks.forEach(function (r, i) { rowOf[r] = i; });
    // the representative ranks' markers, top to bottom; a label goes at its row or, where rows are a pixel
    // or two apart (hundreds of ranks), labelH below the one above it, a line leading from its row
    var marks = d.marked.filter(function (m) { return rowOf[m.rank] !== undefined; })
      .sort(function (a, b) { return rowOf[a.rank] - rowOf[b.rank]; });
    var below = -Infinity;
    marks.forEach(function (m) {
      m.y = top + (rowOf[m.rank] + 0.5) * rowH;
      m.labelY = Math.max(m.y, below + labelH);
      below = m.labelY;
    });
    function draw() {
      canvas.width = left + nc * colW + right;
      canvas.height = Math.max(top + nr * rowH + 4, below + labelH / 2 + 2);
      var g = canvas.getContext("2d");
      function colour(v) {  // reports/overview_section.py _cell_colour: light = little exposure (reversed
        // cividis), a hue off the ramp above its top
        if (d.top > 0 && v > d.top) return "rgb(" + d.above.join(",") + ")";
        var x = d.top > 0 ? Math.min(Math.max(v / d.top, 0), 1) : 0, t = 1 - x, n = d.cividis.length - 1;
        var pos = t * n, i = Math.min(Math.floor(pos), n - 1), f = pos - i, a = d.cividis[i], b = d.cividis[i + 1];
        return "rgb(" + [0, 1, 2].map(function (k) { return Math.round(a[k] + (b[k] - a[k]) * f); }).join(",") + ")";
      }
      var img = g.createImageData(nc * colW, nr * rowH);
      for (var i = 0; i < nr; i++) {
        for (var j = 0; j < nc; j++) {
          var v = d.exposed[i * nc + j], rgb = v === null ? [238, 238, 238] :
            colour(v).slice(4, -1).split(",").map(Number);
          for (var y = i * rowH; y < (i + 1) * rowH; y++) {
            for (var x = j * colW; x < (j + 1) * colW; x++) {
              var p = 4 * (y * nc * colW + x);
              img.data[p] = rgb[0]; img.data[p + 1] = rgb[1]; img.data[p + 2] = rgb[2]; img.data[p + 3] = 255;
            }
          }
        }
      }
      g.putImageData(img, left, top);
      g.font = "11px system-ui, sans-serif";
      g.fillStyle = "#444";
      g.textAlign = "right";
      var every = Math.max(1, Math.ceil(nr / 16));  // rank labels on the left
      for (var i = 0; i < nr; i += every) g.fillText("r" + d.ranks[i], left - 4, top + i * rowH + Math.max(rowH, 9));
      g.textAlign = "center";
      var everyC = Math.ceil(28 / colW);  // step labels on top, 28 px apart at least
      for (var j = 0; j < nc; j += everyC) g.fillText(String(d.columns[j][0]), left + (j + 0.5) * colW, top - 6);
      g.textAlign = "left";
      marks.forEach(function (m) {  // the representative ranks, marked on the right
        var y = m.y, x = left + nc * colW + 3;
        g.fillStyle = "#b00020";
        g.strokeStyle = "#b00020";
        g.beginPath(); g.moveTo(x, y); g.lineTo(x + 7, y - 4); g.lineTo(x + 7, y + 4); g.fill();
        if (m.labelY !== y) {
          g.beginPath(); g.moveTo(x + 7, y); g.lineTo(x + 12, m.labelY); g.stroke();
        }
        g.fillText("r" + m.rank, x + 14, m.labelY + 4);
      });
      canvas.dataset.labelY = marks.map(function (m) { return m.rank + ":" + m.labelY; }).join(" ");
    }
    draw();
    var resizing = null;
    window.addEventListener("resize", function () {
      clearTimeout(resizing);
      resizing = setTimeout(function () { var w = fitCol(); if (w !== colW) { colW = w; draw(); } }, 150);
    });
    var win = {};
    d.win.forEach(function (w) { win[w[0]] = [w[1], w[2]]; });
    function cellAt(ev) {
      var r = canvas.getBoundingClientRect();
      var x = (ev.clientX - r.left) * canvas.width / r.width - left, y = (ev.clientY - r.top) * canvas.height / r.height - top;
      var i = Math.floor(y / rowH), j = Math.floor(x / colW);
      return i >= 0 && i < nr && j >= 0 && j < nc ? [i, j] : null;
    }
    function describe(i, j) {
      var c = d.columns[j], v = d.exposed[i * nc + j], st = d.step_ms[i * nc + j];
      var steps = c[0] === c[1] ? "step " + c[0] : "steps " + c[0] + "–" + c[1] + " (mean per step)";
      return "rank " + d.ranks[i] + ", " + steps + (v === null ? ": no data" :
        ": exposed " + ms3(v) + " ms of a " + ms3(st) + " ms step");
    }
    canvas.addEventListener("mousemove", function (ev) {
      var c = cellAt(ev);
      canvas.title = c ? describe(c[0], c[1]) : "";
    });
    canvas.addEventListener("click", function (ev) {
      var c = cellAt(ev);
      if (!c) return;
      var i = c[0], j = c[1], w = win[i * nc + j], col = d.columns[j];
      var sel = document.getElementById("rank-select");
      if (sel) {
        csShowRank(d.ranks[i]);
        csSetHashParam("rank", String(d.ranks[i]));
      }
      if (w) {
        note.textContent = describe(i, j) + ": shown in the timeline below.";
        csZoom(w[0], w[1], col[0], col[1]);
      } else {
        note.textContent = describe(i, j) + ". These steps are not drawn in the timeline: run the report again " +
          "with --steps " + col[0] + ":" + (col[1] + 1) + ".";
      }
    });
    // A link with #step=N zooms the timeline to step N as a click on its column does, for the drawn ranks
    // (the first representative rank's row, else any row the timeline draws there); otherwise it says why.
    function stepFromHash() {
      var m = /(?:^#|&)step=([^&]*)/.exec(location.hash);
      if (!m) return;
      var v = decodeURIComponent(m[1]), lo = d.columns[0][0], hi = d.columns[nc - 1][1];
      var range = " (steps " + lo + "–" + hi + ")";
      if (!/^\d+$/.test(v)) return csSay(note, "#step=" + v + " is not a step: give a whole number" + range + ".");
      var j = d.columns.findIndex(function (c) { return c[0] <= +v && +v <= c[1]; });
      if (j < 0) {
        return csTimelineDrawn().then(function () {
          if (!csMenuStep(v, note)) csSay(note, "#step=" + v + ": the heatmap has no step " + v + range + ".");
        });
      }
      var col = d.columns[j];
      if (col[0] !== col[1]) {  // the step itself from the timeline's menu, as on the table heatmap
        return csTimelineDrawn().then(function () {
          if (!csMenuStep(v, note, " (in the heatmap's column of steps " + col[0] + "–" + col[1] + ")")) openColumn(j, v);
        });
      }
      return openColumn(j, v);
    }
    function openColumn(j, v) {
      var rows = marks.map(function (mk) { return rowOf[mk.rank]; }).concat(d.ranks.map(function (_, i) { return i; }));
      var i = rows.find(function (i) { return win[i * nc + j]; }), col = d.columns[j];
      var steps = col[0] === col[1] ? "step " + col[0] : "steps " + col[0] + "–" + col[1];
      if (i === undefined) {
        return csSay(note, "#step=" + v + ": " + steps + " not drawn in the timeline: run the report again with " +
          "--steps " + col[0] + ":" + (col[1] + 1) + ".");
      }
      var w = win[i * nc + j];
      note.textContent = steps + ": shown in the timeline below.";
      csZoom(w[0], w[1], col[0], col[1]);
    }
    window.addEventListener("hashchange", stepFromHash);
    stepFromHash();
  }).catch(function (e) { note.textContent = "The heatmap needs a browser with DecompressionStream: " + e; });
});

// ---- at scale: any rank's rows, added below the representative ones ------------------------------------
// A comm row's height in rows for its lanes: reports/timeline.py comm_row_span's rule, so an added rank's
// lanes keep the px the figure's own ranks' lanes have.
function csRowSpan(style, lanes) {
  return Math.max(1, Math.min(Math.max(lanes, 1) * style.lane_px, style.comm_row_max_px) / (style.bar * style.row_h));
}

// The rows of rank r as plotly traces, from the compact document (reports/timeline_ranks.py), with the
// styles of reports/timeline.py; y0: the y of the first row's top edge. Returns {traces, rows: [row names],
// ys: [their centres], bottom: the y of the last row's bottom edge, laneH: a lane's thickness in y units}.
function csRankTraces(d, style, r, y0, known) {
  var i = d.index[r], U = d.unit_ns / 1e6, out = [], rows = [], str = d.strings;
  var c = d.compute, k0 = d.off.compute[i], k1 = d.off.compute[i + 1], n0 = d.off.names[i];
  var rowOf = {}, cb = {base: [], x: [], y: [], width: [], text: []}, s = 0;
  for (var k = k0; k < k1; k++) {
    var stream = c.row[k] < 0 ? null : str[c.row[k]];
    if (!(c.row[k] in rowOf)) {
      rowOf[c.row[k]] = rows.length;
      rows.push("r" + r + " compute" + (stream === null ? "" : style.cpu_threads ? " (CPU thread " + stream + ")"
                                                                               : " s" + stream));
    }
    s += c.s[k];
    var names = [], listed = 0;
    for (var m = 0; m < c.nn[k]; m++, n0++) {
      names.push(str[c.name[n0]] + " ×" + c.nk[n0] + " (" + (c.nd[n0] * U).toFixed(3) + " ms)");
      listed += c.nk[n0];
    }
    var where = "rank " + r + (stream === null ? "" : (style.cpu_threads ? " CPU thread " : " stream ") + stream);
    cb.base.push(s * U); cb.x.push(c.d[k] * U); cb.y.push(y0 + 0.5 + rowOf[c.row[k]]); cb.width.push(style.bar);
    cb.text.push("<b>" + where + "</b>: " + c.k[k] + (style.cpu_threads ? " op(s)" : " kernel(s)") + " in " +
                 (c.d[k] * U).toFixed(3) + " ms<br>" +
                 names.join("<br>") + (c.k[k] > listed ? "<br>+" + (c.k[k] - listed) + " more" : ""));
  }
  if (cb.base.length) {
    out.push({type: "bar", orientation: "h", base: cb.base, x: cb.x, y: cb.y, width: cb.width, text: cb.text,
              textposition: "none", hovertemplate: "%{text}<extra></extra>", name: "compute", showlegend: false,
              marker: {color: style.compute_color, line: {width: 0}}});
  }
  var lanes = d.lanes[i], span = csRowSpan(style, lanes), bar = style.bar * span;
  var yc = y0 + rows.length + span / 2, laneH = bar / Math.max(lanes, 1);
  var ys = rows.map(function (_, k) { return y0 + 0.5 + k; }).concat([yc]);
  rows.push("r" + r + " comm");
  var o = d.coll, j0 = d.off.coll[i], j1 = d.off.coll[i + 1], e0 = d.off.spans[i], per = {};
  var ex = {base: [], x: [], y: [], width: []};
  s = 0;
  for (var j = j0; j < j1; j++) {
    s += o.s[j];
    var lab = str[o.label[j]], y = yc - bar / 2 + laneH * (o.lane[j] + 0.5), exposed = 0, at = s;
    for (var m = 0; m < o.ne[j]; m++, e0++) {  // each span from the previous one's end (the first: the bar's start)
      at += o.es[e0];
      ex.base.push(at * U); ex.x.push(o.ed[e0] * U); ex.y.push(y); ex.width.push(laneH * 0.9);
      at += o.ed[e0];
      exposed += o.ed[e0];
    }
    var b = per[lab] || (per[lab] = {base: [], x: [], y: [], width: [], text: [], customdata: [], hovertext: []});
    var phase = o.phase[j] < 0 ? "" : " · " + str[o.phase[j]];
    b.base.push(s * U); b.x.push(o.d[j] * U); b.y.push(y); b.width.push(laneH * 0.9);
    b.text.push(str[o.op[j]] + phase + " · group " + (o.group[j] < 0 ? "" : str[o.group[j]]) + "<br>rank " + r +
                " · " + (o.step[j] === null || o.step[j] < 0 ? "outside every step" : "step " + o.step[j]));
    // the same lines as timeline.py's hovertext: bytes, then launch → start (null: not recorded)
    b.hovertext.push(csBytes(o.bytes[j]) + "<br>" + (o.q[j] === null ? style.l2s_unknown
                                                      : "launch to start " + (o.q[j] * U).toFixed(3) + " ms"));
    b.customdata.push([r, o.step[j], o.seq[j], o.bytes[j] === null ? NaN : o.bytes[j], o.d[j] * U, exposed * U]);
  }
  Object.keys(per).sort().forEach(function (lab) {
    var b = per[lab];
    out.push({type: "bar", orientation: "h", base: b.base, x: b.x, y: b.y, width: b.width, text: b.text,
              customdata: b.customdata, hovertext: b.hovertext, textposition: "none", name: lab, legendgroup: lab,
              showlegend: !known[lab], hovertemplate: style.coll_hover.replace("LABEL", lab),
              marker: {color: style.colors[lab], line: {width: 0}}});
    known[lab] = true;
  });
  if (ex.base.length) {
    out.push({type: "bar", orientation: "h", base: ex.base, x: ex.x, y: ex.y, width: ex.width, hoverinfo: "skip",
              name: "exposed (hatched)", showlegend: false, marker: style.exposed_marker});
  }
  // the collectives left in flight: a trace per label in its colour, as timeline.py draws them, the legend's
  // entry only where the figure has none yet, and a mark at the end of a bar cut at the figure's edge
  var f = d.inflight, stuck = {}, cut = {x: [], y: []};
  s = 0;
  for (var g = d.off.inflight[i]; g < d.off.inflight[i + 1]; g++) {  // timeline.py inflight_text's words
    s += f.s[g];
    var fl = str[f.label[g]], ns = f.t[g] * d.unit_ns, more = f.more[i], fy = yc - bar / 2 + laneH * (f.lane[g] + 0.5);
    var sb = stuck[fl] || (stuck[fl] = {base: [], x: [], y: [], width: [], text: []});
    sb.base.push(s * U); sb.x.push(f.d[g] * U); sb.y.push(fy); sb.width.push(laneH * 0.9);
    if (f.cut[g]) { cut.x.push((s + f.d[g]) * U); cut.y.push(fy); }
    sb.text.push("<b>" + csStr(str, f.label[g]) + "</b> · " + csStr(str, f.op[g]) + " · group " + csStr(str, f.group[g]) +
                 " · seq " + csOr(f.seq[g]) + "<br>rank " + r + " · " +
                 (f.step[g] === null || f.step[g] < 0 ? "outside every step" : "step " + f.step[g]) +
                 "<br><b>never completed</b>: still in flight " + csSpan(ns) + " after its launch, " +
                 (f.w[g] ? "when the watchdog fired" : "at its rank's last record") +
                 (f.ended[g] >= 0 && !f.w[g] ? "<br>its rank ended: " + csEscape(str[f.ended[g]]) : "") +
                 (f.wt[g] === null ? "" : "<br>its rank blocked waiting on it from " + csSpan(f.wt[g] * d.unit_ns) +
                  " after its launch") +
                 (f.cut[g] ? "<br>(cut at the figure's right edge ▶)" : "") + "<br>" + csBytes(f.bytes[g]) +
                 (more ? "<br>rank " + r + " has " + more + " more in flight, not drawn" : ""));
  }
  var stuckLabels = Object.keys(stuck).sort();
  if (stuckLabels.length && !known[style.inflight_name]) {
    out.push({type: "bar", orientation: "h", x: [null], base: [null], y: [null], name: style.inflight_name,
              legendgroup: style.inflight_name, hoverinfo: "skip", marker: style.inflight_legend});
    known[style.inflight_name] = true;
  }
  stuckLabels.forEach(function (lab) {
    var sb = stuck[lab];
    out.push({type: "bar", orientation: "h", base: sb.base, x: sb.x, y: sb.y, width: sb.width, text: sb.text,
              textposition: "none", hovertemplate: "%{text}<extra></extra>", name: style.inflight_name,
              legendgroup: style.inflight_name, showlegend: false,
              marker: Object.assign({}, style.inflight_marker, {color: style.colors[lab]})});
  });
  if (cut.x.length) {
    out.push({type: "scatter", mode: "markers", x: cut.x, y: cut.y, name: style.inflight_name, showlegend: false,
              legendgroup: style.inflight_name, hoverinfo: "skip", cliponaxis: false, marker: style.cut_marker});
  }
  var h = d.hooks, h0 = d.off.hooks[i], h1 = d.off.hooks[i + 1], hooks = {};
  s = 0;
  for (var q = h0; q < h1; q++) {
    s += h.t[q];
    var hl = str[h.label[q]], hk = hooks[hl] || (hooks[hl] = {x: [], y: [], text: []});
    hk.x.push(s * U); hk.y.push(yc - bar / 2);
    hk.text.push("hook " + hl + "<br>rank " + r + " · step " + csOr(h.step[q]) + " · micro-step " + csOr(h.micro[q]) +
                 " · position " + csOr(h.pos[q]));
  }
  Object.keys(hooks).sort().forEach(function (hl) {
    var hk = hooks[hl], marker = Object.assign({}, style.hook_marker, {color: style.colors[hl]});
    out.push({type: "scatter", mode: "markers", x: hk.x, y: hk.y, hovertext: hk.text,
              hovertemplate: "%{hovertext}<extra></extra>", name: "hook " + hl, legendgroup: hl,
              showlegend: !known[hl], marker: marker});
    known[hl] = true;
  });
  return {traces: out, rows: rows, ys: ys, bottom: yc + span / 2, laneH: laneH,
          inflight: d.off.inflight[i + 1] - d.off.inflight[i] + f.more[i]};
}

// Grow the timeline until each of its rows has layout.meta.row_px px (reports/timeline.py figure_height):
// the figure's height leaves room for its margins as plotly.py sets them, and plotly widens them where the
// legend wraps on a narrow window, taking that room from the rows (a comm row's lanes with it).
function csKeepRowPx(gd) {
  var fl = gd._fullLayout, want = ((gd.layout || {}).meta || {}).row_px;
  if (!fl || !want || !fl.yaxis || !fl.yaxis._length) return Promise.resolve();
  var r = fl.yaxis.range, need = Math.ceil(want * Math.abs(r[0] - r[1]) - fl.yaxis._length);
  if (need < 1) return Promise.resolve();
  // at least 2 px: autosize (csHeight) ignores a change of 1 px, and the figure would be asked again forever
  return csHeight(gd, fl.height + Math.max(need, 2));
}

// Give the figure `height` px (and the layout changes of `update`) while its width keeps following the
// page: plotly's relayout of `height` turns autosize off and pins the width where it is, so a window
// narrowed or widened afterwards would leave the plot at its old width. The height goes on the div, and
// autosize reads both sizes from the div.
function csHeight(gd, height, update) {
  gd.style.height = height + "px";
  return window.Plotly.relayout(gd, Object.assign({autosize: true}, update || {}));
}
// The step labels along the timeline's top edge (layout annotations, "step N"), where steps are close
// together at the window's width, would print over each other: a label that would overlap one before it
// moves up a line (STEP_LABEL_LINES lines fit under the step menu), and one that fits on no line is hidden
// (its dotted line stays; zooming in gives it room again). Plotly redraws the labels on every relayout,
// so this runs after each one. data-hidden-step-labels says how many are hidden.
var STEP_LABEL_LINES = 2, STEP_LABEL_GAP_PX = 4, STEP_LABEL_LINE_PX = 13;
function csSpreadStepLabels(gd) {
  var labels = Array.prototype.filter.call(gd.querySelectorAll("g.annotation"), function (g) {
    return /^step /.test(g.textContent);
  });
  labels.forEach(function (g) { g.removeAttribute("transform"); g.style.visibility = ""; });
  var items = labels.map(function (g) { return {g: g, box: g.getBoundingClientRect()}; })
    .sort(function (a, b) { return a.box.left - b.box.left; });
  var ends = [], hidden = 0, right = gd.getBoundingClientRect().right;
  items.forEach(function (it) {
    // a label running past the figure's edge would be cut to another step's name ("step 2" of "step 21")
    if (it.box.right > right) { it.g.style.visibility = "hidden"; hidden++; return; }
    for (var line = 0; line < STEP_LABEL_LINES; line++) {
      if (ends[line] === undefined || ends[line] + STEP_LABEL_GAP_PX <= it.box.left) break;
    }
    if (line === STEP_LABEL_LINES) { it.g.style.visibility = "hidden"; hidden++; return; }
    ends[line] = it.box.right;
    if (line) it.g.setAttribute("transform", "translate(0," + (-line * STEP_LABEL_LINE_PX) + ")");
  });
  gd.dataset.hiddenStepLabels = String(hidden);
}
document.addEventListener("DOMContentLoaded", function () {
  var gd = document.getElementById("timeline-plot"), drawn = window.csDrawn && window.csDrawn["timeline-plot"];
  if (!gd || !drawn) return;
  drawn.then(function () {
    csKeepRowPx(gd);
    csSpreadStepLabels(gd);
    gd.on("plotly_afterplot", function () { csKeepRowPx(gd); csSpreadStepLabels(gd); });  // a resized window re-wraps the legend
    gd.on("plotly_relayout", function (ev) { csFollowMenu(gd, ev); });
  });
});

// The step menu names what the figure shows: after a drag zoom, a pan or a double-click it names the entry
// whose range the view now is (the whole figure after a reset), else none. A relayout that sets the menu
// itself (csZoom, a click on an entry) is left alone.
function csFollowMenu(gd, ev) {
  var menus = gd.layout.updatemenus, xa = gd.layout.xaxis;
  // plotly takes an entry's range array as the axis's own, and a drag zoom then changes it in place, which
  // would change the entry too (choosing it again would go to the dragged range): the axis gets its copy
  if (xa && xa.range) xa.range = xa.range.slice();
  if (!menus || !menus.length || (ev && "updatemenus[0].active" in ev)) return;
  // a relayout that leaves the x axis alone (the selector's new height) keeps the entry a zoom chose: a
  // rank's window of a step is that step, though its range is not the entry's own
  if (ev && !Object.keys(ev).some(function (k) { return k.indexOf("xaxis.") === 0; })) return;
  var r = xa.range || [0, 0], tol = 1e-3 * (Math.abs(r[1] - r[0]) || 1), want = -1;
  menus[0].buttons.forEach(function (b, i) {
    var a = b.args[0], br = a["xaxis.range"];
    if (want < 0 && (a["xaxis.autorange"] === true ? xa.autorange === true :
                     br && Math.abs(br[0] - r[0]) <= tol && Math.abs(br[1] - r[1]) <= tol)) want = i;
  });
  var now = menus[0].active === undefined ? 0 : menus[0].active;
  if (want !== now) Plotly.relayout(gd, {"updatemenus[0].active": want});
}

// A byte count as reports/tables.py byte_size writes it: decimal units, 3 significant digits, "–" unknown.
function csBytes(v) {
  if (v === null || v === undefined || isNaN(v)) return "–";
  if (!isFinite(v)) return "∞";
  if (Math.abs(v) < 999.5) return Math.round(v) + " B";
  var units = ["k", "M", "G", "T", "P", "E"], p = Math.min(Math.floor(Math.floor(Math.log10(Math.abs(v))) / 3), units.length);
  var m = +(v / Math.pow(1000, p)).toPrecision(3);
  if (Math.abs(m) >= 1000 && p < units.length) { p += 1; m = +(v / Math.pow(1000, p)).toPrecision(3); }
  var digits = Math.max(0, 2 - Math.floor(Math.log10(Math.abs(m))));
  return m.toFixed(digits) + " " + units[p - 1] + "B";
}

function csOr(x) { return x === null ? "–" : x; }
function csStr(str, k) { return k < 0 ? "–" : str[k]; }
// Text as Python's html.escape writes it (a rank's error may hold "<" or "&").
function csEscape(t) {
  return t.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;").replace(/'/g, "&#x27;");
}
// A duration in ns as reports/timeline.py span_text says it: seconds from 1 s, else milliseconds.
function csSpan(ns) { return ns >= 1e9 ? (ns / 1e9).toFixed(1) + " s" : (ns / 1e6).toFixed(3) + " ms"; }

// Per-rank offsets into the compact document's item lists.
function csIndex(d) {
  function offsets(n) { var o = [0]; n.forEach(function (x) { o.push(o[o.length - 1] + x); }); return o; }
  d.index = {};
  d.ranks.forEach(function (r, i) { d.index[r] = i; });
  var names = [0], spans = [0], c = d.compute, o = d.coll, k = 0, j = 0;
  c.n.forEach(function (n) { var t = 0; for (var e = k + n; k < e; k++) t += c.nn[k]; names.push(names[names.length - 1] + t); });
  o.n.forEach(function (n) { var t = 0; for (var e = j + n; j < e; j++) t += o.ne[j]; spans.push(spans[spans.length - 1] + t); });
  d.off = {compute: offsets(c.n), coll: offsets(o.n), hooks: offsets(d.hooks.n), flows: offsets(d.flows.n),
           inflight: offsets(d.inflight.n),
           names: names, spans: spans};
  return d;
}

// The lines linking rank r's collective calls across the ranks of yOf (rank -> y of its comm row), from the
// compact document's flow points: per flow through r, its points on those ranks in rank order, flows by
// id, as reports/timeline.py draws them for the figure's ranks. n: how many flows that is.
function csFlowLines(d, yOf, r) {
  var U = d.unit_ns / 1e6, fl = d.flows, by = {};
  Object.keys(yOf).forEach(function (key) {
    var q = +key, i = d.index[q];
    if (i === undefined) return;
    var f = 0, t = 0;
    for (var k = d.off.flows[i]; k < d.off.flows[i + 1]; k++) {
      f += fl.f[k]; t += fl.t[k];
      (by[f] || (by[f] = [])).push([q, t * U]);
    }
  });
  var x = [], y = [], n = 0;
  Object.keys(by).map(Number).sort(function (a, b) { return a - b; }).forEach(function (f) {
    var m = by[f];
    if (m.length < 2 || !m.some(function (p) { return p[0] === r; })) return;
    m.sort(function (a, b) { return a[0] - b[0]; });
    m.forEach(function (p) { x.push(p[1]); y.push(yOf[p[0]]); if (p[0] === r) n++; });
    x.push(null); y.push(null);
  });
  return {x: x, y: y, n: n};
}

// Show rank r's rows below the drawn ranks, replacing the rank shown before (r null: none); a drawn rank
// is already there. Its calls shared with the drawn ranks are linked by a trace of their own, drawn at
// once: choosing a rank is asking to see where its calls meet the others, while the figure's own lines
// (every drawn rank's, off by default) would bury them; its legend entry can hide them.
window.csShowRank = function (r) {
  var sel = document.getElementById("rank-select"), said = document.getElementById("rank-shown");
  var gd = document.getElementById("timeline-plot");
  if (!sel || !gd) return Promise.resolve();
  sel.value = r === null ? "" : String(r);
  // the choice as an attribute too: a saved or dumped page (and its tests) shows which rank is chosen
  Array.prototype.forEach.call(sel.options, function (o) { o.toggleAttribute("selected", o.value === sel.value); });
  return Promise.all([csData("rank-rows-gz"), csData("timeline-style"), window.csDrawn["timeline-plot"]])
    .then(function (all) {
      var d = all[0].index ? all[0] : csIndex(all[0]), style = all[1];
      var st = gd.csShown || (gd.csShown = {traces: 0, vals: gd.layout.yaxis.tickvals.slice(),
                                            ticks: gd.layout.yaxis.ticktext.slice(),
                                            bottom: gd.layout.yaxis.range[0], height: gd._fullLayout.height});
      var added = st.traces, first = gd.data.length - added;
      var gone = added ? Plotly.deleteTraces(gd, Array.from({length: added}, function (_, k) { return first + k; })) : null;
      st.traces = 0;
      gd.dataset.shownFlows = "";
      gd.dataset.shownLanePx = "";
      var ticks = st.ticks, vals = st.vals, bottom = st.bottom, laneH = null, height = st.height, drawnAlready = r !== null && st.ticks.indexOf("r" + r + " comm") >= 0;
      return Promise.resolve(gone).then(function () {
        if (r !== null && d.index[r] !== undefined) {
          var known = {};
          gd.data.forEach(function (t) { if (t.showlegend !== false && t.legendgroup) known[t.legendgroup] = true; });
          // a drawn rank has its rows already: only its flow lines are added
          var made = drawnAlready ? {traces: [], rows: [], ys: [], bottom: st.bottom, laneH: null}
                                  : csRankTraces(d, style, r, st.bottom, known);
          ticks = st.ticks.concat(made.rows);
          vals = st.vals.concat(made.ys);
          bottom = made.bottom;
          laneH = made.laneH;
          var yOf = {};
          ticks.forEach(function (tick, k) { var m = /^r(\d+) comm$/.exec(tick); if (m) yOf[+m[1]] = vals[k]; });
          var lines = csFlowLines(d, yOf, r), name = style.flow_name + ": rank " + r;
          if (lines.n) {
            made.traces.push({type: "scatter", mode: "lines", x: lines.x, y: lines.y, name: name, visible: true,
                              hoverinfo: "skip", line: style.flow_line});
          }
          gd.dataset.shownFlows = String(lines.n);
          st.traces = made.traces.length;
          height = st.height + Math.round(style.row_h * (bottom - st.bottom));
          var stuck = made.inflight ? "; it left " + made.inflight + " collective" + (made.inflight > 1 ? "s" : "") +
            " in flight (outlined in red)" : "";
          var why = (style.why || {})[String(r)];
          said.textContent = "rank " + r + (drawnAlready ? " is one of the drawn ranks" + (why ? " (" + why + ")" : "")
                                                         : ": the last rows of the figure") +
            stuck + (lines.n ? "; the lines \"" + name + "\" link its " + lines.n + " calls shared with the " +
             (drawnAlready ? "other " : "") + "drawn ranks." : ".");
          return made.traces.length ? Plotly.addTraces(gd, made.traces) : null;
        }
        said.textContent = r === null ? "" :
          d.ranks.indexOf(r) < 0 ? "the job has no rank " + r + " (ranks " + d.ranks[0] + "–" +
          d.ranks[d.ranks.length - 1] + ")." : "rank " + r + " has no rows in these steps.";
      }).then(function () {
        gd.dataset.shownRank = st.traces ? String(r) : "";
        return csHeight(gd, height, {"yaxis.tickvals": vals, "yaxis.ticktext": ticks, "yaxis.range": [bottom, -0.5]});
      }).then(function () { return csKeepRowPx(gd); }).then(function () {
        // the added rank's lane thickness as drawn, in px (the plot area's px per y unit): what the page
        // promises (reports/timeline.py LANE_PX), said where a test or a reader can check it
        var ya = gd._fullLayout && gd._fullLayout.yaxis;
        if (laneH !== null && st.traces && ya) gd.dataset.shownLanePx = (laneH * ya._length / (bottom + 0.5)).toFixed(1);
      });
    });
};

document.addEventListener("DOMContentLoaded", function () {
  var sel = document.getElementById("rank-select");
  if (!sel) return;
  Promise.all([csData("rank-rows-gz"), csData("timeline-style")]).then(function (got) {
    var d = got[0], why = got[1].why || {};
    sel.innerHTML = "";
    var none = document.createElement("option");
    none.value = ""; none.textContent = "(none)";
    sel.appendChild(none);
    // A drawn rank says why it is drawn (the doctor's culprits first), so a reader scanning a thousand
    // options finds the ones the analysis singled out without leaving the list.
    d.ranks.forEach(function (r) {
      var o = document.createElement("option");
      o.value = String(r); o.textContent = "rank " + r + (why[String(r)] ? " · drawn: " + why[String(r)] : "");
      sel.appendChild(o);
    });
    sel.disabled = false;
    sel.addEventListener("change", function () {  // the address then links to the rank shown
      csShowRank(sel.value === "" ? null : +sel.value);
      csSetHashParam("rank", sel.value === "" ? null : sel.value);
    });
    // A link to the page with #rank=N shows rank N and scrolls to the timeline; anything else after rank=
    // is said beside the selector, scrolled to.
    function fromHash() {
      var m = /(?:^#|&)rank=([^&]*)/.exec(location.hash);
      if (!m) return;
      var v = decodeURIComponent(m[1]), said = document.getElementById("rank-shown");
      if (/^\d+$/.test(v)) {
        return csShowRank(+v).then(function () {
          if (d.ranks.indexOf(+v) >= 0) document.getElementById("timeline").scrollIntoView();
          else csSay(said, said.textContent);  // the job has no such rank
        });
      }
      return csShowRank(null).then(function () {
        csSay(said, "#rank=" + v + " is not a rank: give a whole number " +
          "from " + d.ranks[0] + " to " + d.ranks[d.ranks.length - 1] + " (#rank=" + d.ranks[0] + ").");
      });
    }
    window.addEventListener("hashchange", fromHash);
    fromHash();
  }).catch(function (e) { document.getElementById("rank-shown").textContent = "cannot read the ranks' rows: " + e; });
});

// The nav links and in-page links point at sections, most of them collapsed details blocks: a link opens the
// block it points at (and any that hold it) before the browser scrolls there, or the click would land on a
// closed one-line summary. A page opened with such a #id opens it too.
function csOpenTarget(hash) {
  var id = hash && hash.charAt(0) === "#" ? decodeURIComponent(hash.slice(1)) : "";
  var el = id ? document.getElementById(id) : null;
  for (var p = el; p; p = p.parentElement) if (p.tagName === "DETAILS") p.open = true;
  return el;
}
document.addEventListener("click", function (ev) {
  var a = ev.target.closest ? ev.target.closest('a[href^="#"]') : null;
  if (a) csOpenTarget(a.getAttribute("href"));
});
document.addEventListener("DOMContentLoaded", function () {
  var el = csOpenTarget(location.hash);
  if (el) el.scrollIntoView();
});
window.addEventListener("hashchange", function () { csOpenTarget(location.hash); });

// Printing (Ctrl-P) prints what is open: every collapsed section opens first, as a reader of paper cannot
// click one open.
window.addEventListener("beforeprint", function () {
  document.querySelectorAll("details").forEach(function (d) { d.open = true; });
});
