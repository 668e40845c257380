(function () {
"use strict";
const D = JSON.parse(document.getElementById("rs-data").textContent);
const TYPES = {f4: Float32Array, f8: Float64Array, i4: Int32Array};
function arr(v) {
  if (v === null || v === undefined) return v;
  const bin = atob(v.b64), bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  return new TYPES[v.$t](bytes.buffer);
}
const C = D.colours, BLUE = "#1c7ed6";
// A name as plotly's titles and hover templates show it: their markup and placeholders escaped.
function esc(s) {
  return String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
    .replace(/%/g, "&#37;");
}
const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
  "#7f7f7f", "#bcbd22", "#17becf"];
const CONFIG = {responsive: true, displaylogo: false, showSendToCloud: false,
  modeBarButtonsToRemove: ["select2d", "lasso2d"], toImageButtonOptions: {scale: 2}};
function axis(title, extra) {
  return Object.assign({title: {text: esc(title), standoff: 4}, automargin: true,
    gridcolor: "#eef0f2",
    zeroline: false, linecolor: "#ced4da", ticks: "outside", tickcolor: "#ced4da"}, extra || {});
}
function layout(x, y, extra) {
  return Object.assign({xaxis: x, yaxis: y, margin: {l: 48, r: 10, t: 6, b: 36},
    font: {family: "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", size: 11},
    paper_bgcolor: "#fff", plot_bgcolor: "#fff", showlegend: false, hovermode: "closest"},
    extra || {});
}
function steps(h, colour) {
  const e = arr(h.edges), c = arr(h.counts), y = new Float64Array(e.length);
  y.set(c); y[e.length - 1] = c.length ? c[c.length - 1] : 0;
  return {type: "scatter", mode: "lines", x: e, y: y, line: {shape: "hv", color: colour, width: 1},
    fill: "tozeroy", fillcolor: colour + "55", hovertemplate: "%{x:.4~g}: %{y}<extra></extra>"};
}
function param(el) { return D.params[+el.dataset.p]; }
function outcome(el) { return D.outcomes[+el.dataset.o]; }
const BUILD = {
  timeline: function () {
    const t = D.timeline, x = arr(t.t);
    const line = (y, name, colour) => ({type: "scatter", mode: "lines", x: x, y: arr(y),
      name: name, line: {color: colour, width: 2}, hovertemplate: name + " %{y}<extra></extra>"});
    return [[line(t.done, "done", C.done), line(t.failed, "failed", C.failed)],
      layout(axis("", {type: "date"}), axis("experiments", {rangemode: "tozero"}),
        {showlegend: true, legend: {x: 0.02, y: 0.98, bgcolor: "rgba(255,255,255,0.7)"},
          hovermode: "x unified"})];
  },
  seconds: function () {
    const h = D.seconds;
    return [[steps(h, C.done)], layout(axis("seconds", h.log ? {type: "log"} : {}),
      axis("experiments", {rangemode: "tozero"}))];
  },
  hist: function (el) {
    const o = outcome(el);
    if (!o.hist) throw new Error("no finite values");
    return [[steps(o.hist, BLUE)], layout(axis(o.name, o.log ? {type: "log"} : {}),
      axis("experiments", {rangemode: "tozero"}))];
  },
  scatter: function (el) {
    const o = outcome(el), p = param(el);
    return [[{type: "scatter", mode: "markers", x: arr(p.sample), y: arr(o.sample),
      text: D.ids.map(esc), marker: {size: 4, color: BLUE, opacity: 0.55},
      hovertemplate: esc(p.name) + "=%{x:.6~g}<br>" + esc(o.name) + "=%{y:.4~g}<br>%{text}" +
        "<extra></extra>"}],
      layout(axis(p.name, p.log ? {type: "log"} : {}), axis(o.name, o.log ? {type: "log"} : {}))];
  },
  box: function (el) {
    const o = outcome(el), p = param(el), b = o.boxes[+el.dataset.p];
    if (!b) throw new Error("no values");
    // The values at positions 0, 1, ... with their text as tick labels: a category axis
    // keeps its categories in an object keyed by them, where values such as "constructor"
    // or "__proto__" (written by any writer) would be lost.
    const at = p.levels.map((v, k) => k), labels = p.levels.map(esc);
    return [[{type: "box", x: at, q1: b.q1, median: b.median, q3: b.q3,
      lowerfence: b.lo, upperfence: b.hi, mean: b.mean, boxmean: true, boxpoints: false,
      marker: {color: BLUE}, line: {width: 1.5}, fillcolor: BLUE + "33",
      customdata: labels.map((l, k) => [l, b.n[k]]),
      hovertemplate: esc(p.name) + "=%{customdata[0]}<br>n=%{customdata[1]}<extra></extra>"}],
      layout(axis(p.name, {tickmode: "array", tickvals: at, ticktext: labels,
        range: [-0.5, at.length - 0.5]}), axis(o.name, o.log ? {type: "log"} : {}))];
  },
  band: function (el) {
    const a = D.arrays[+el.dataset.a], x = arr(a.index), q = {};
    for (const k in a.q) q[k] = arr(a.q[k]);
    const edge = (y) => ({type: "scatter", mode: "lines", x: x, y: y, line: {width: 0},
      hoverinfo: "skip"});
    const fill = (y, name, alpha) => ({type: "scatter", mode: "lines", x: x, y: y, name: name,
      fill: "tonexty", fillcolor: BLUE + alpha, line: {width: 0}, hoverinfo: "skip"});
    return [[edge(q["5"]), fill(q["95"], "5-95%", "2e"), edge(q["25"]),
      fill(q["75"], "25-75%", "55"),
      {type: "scatter", mode: "lines", x: x, y: q["50"], name: "median",
        line: {color: BLUE, width: 2},
        hovertemplate: "index %{x}: median %{y:.4~g}<extra></extra>"},
      {type: "scatter", mode: "lines", x: x, y: arr(a.mean), name: "mean",
        line: {color: "#495057", width: 1, dash: "dash"},
        hovertemplate: "mean %{y:.4~g}<extra></extra>"}],
      layout(axis("index"), axis(a.name), {hovermode: "x"})];
  },
  curves: function () { return curves.figure(); },
};

// -- curves: a metric, the runs chosen, smoothing -------------------------------------------------
const curves = (function () {
  if (!D.curves.length) return null;
  const metric = document.getElementById("rs-metric"), list = document.getElementById("rs-runs");
  const smooth = document.getElementById("rs-smooth"), logy = document.getElementById("rs-logy");
  // Keyed by run ids, which any writer chooses ("__proto__", "constructor"): Maps, never
  // objects, whose inherited properties such names would find.
  const runs = [], index = new Map();
  D.curves.forEach(function (c, k) {
    const o = document.createElement("option");
    o.value = k; o.textContent = c.name; metric.appendChild(o);
    for (const r of c.runs) {
      if (!index.has(r.run)) { index.set(r.run, runs.length); runs.push(r.run); }
    }
  });
  const boxes = runs.map(function (run, k) {
    const label = document.createElement("label"), box = document.createElement("input");
    const swatch = document.createElement("i");
    box.type = "checkbox"; box.checked = k < 10; box.value = run;
    swatch.style.background = PALETTE[k % PALETTE.length];
    label.appendChild(box); label.appendChild(swatch);
    label.appendChild(document.createTextNode(run));
    label.title = run; list.appendChild(label);
    return box;
  });
  const decoded = new Map();
  function series(c, r) {
    const key = c + "/" + r.run;
    if (!decoded.has(key)) decoded.set(key, [arr(r.steps), arr(r.values)]);
    return decoded.get(key);
  }
  function ema(v, w) {
    const out = new Float64Array(v.length);
    let last = 0, n = 0;
    for (let i = 0; i < v.length; i++) {
      if (!isFinite(v[i])) { out[i] = NaN; continue; }
      last = last * w + (1 - w) * v[i]; n++;
      out[i] = last / (1 - Math.pow(w, n));
    }
    return out;
  }
  function figure() {
    const c = +metric.value, m = D.curves[c], w = +smooth.value, traces = [];
    const chosen = new Set(boxes.filter((b) => b.checked).map((b) => b.value));
    for (const r of m.runs) {
      if (!chosen.has(r.run)) continue;
      const s = series(c, r), colour = PALETTE[index.get(r.run) % PALETTE.length];
      const hover = esc(r.run) + " step %{x}: %{y:.5~g}<extra></extra>";
      if (w > 0) {
        traces.push({type: "scatter", mode: "lines", x: s[0], y: s[1], showlegend: false,
          line: {color: colour, width: 1}, opacity: 0.25, hoverinfo: "skip"});
        traces.push({type: "scatter", mode: "lines", x: s[0], y: ema(s[1], w),
          name: esc(r.run), line: {color: colour, width: 1.5}, hovertemplate: hover});
      } else {
        traces.push({type: "scatter", mode: "lines", x: s[0], y: s[1], name: esc(r.run),
          line: {color: colour, width: 1.5}, hovertemplate: hover});
      }
    }
    return [traces, layout(axis("step"), axis(m.name, logy.checked ? {type: "log"} : {}),
      {showlegend: chosen.size <= 12, legend: {orientation: "h", y: -0.18},
        margin: {l: 52, r: 10, t: 10, b: 40}})];
  }
  function redraw() {
    document.getElementById("rs-smooth-value").textContent = (+smooth.value).toFixed(2);
    const el = document.getElementById("rs-curves");
    if (!el.dataset.rendered) return;
    const f = figure();
    Plotly.react(el, f[0], f[1], CONFIG);
  }
  metric.addEventListener("change", redraw);
  smooth.addEventListener("input", redraw);
  logy.addEventListener("change", redraw);
  list.addEventListener("change", redraw);
  document.getElementById("rs-all").addEventListener("click", function () {
    boxes.forEach((b) => { if (b.parentNode.style.display !== "none") b.checked = true; });
    redraw();
  });
  document.getElementById("rs-none").addEventListener("click", function () {
    boxes.forEach((b) => { b.checked = false; }); redraw();
  });
  document.getElementById("rs-filter").addEventListener("input", function (e) {
    const f = e.target.value.toLowerCase();
    boxes.forEach((b) => {
      b.parentNode.style.display = b.value.toLowerCase().includes(f) ? "" : "none";
    });
  });
  return {figure: figure};
})();

// -- drawing, one plot at a time ------------------------------------------------------------------
const plots = Array.prototype.slice.call(document.querySelectorAll("div.plot[data-fig]"));
let rendered = 0, failed = 0;
document.body.dataset.plots = plots.length;
function fail(el, e) {
  failed++;
  el.dataset.failed = "1";
  const m = document.createElement("div");
  m.className = "rs-error";
  m.textContent = "This plot could not be drawn: " + (e && e.message ? e.message : e);
  el.appendChild(m);
}
function next(i) {
  if (i >= plots.length) {
    document.body.dataset.rendered = rendered;
    document.body.dataset.failed = failed;
    return;
  }
  const el = plots[i];
  let spec;
  try {
    spec = BUILD[el.dataset.fig](el);
  } catch (e) {
    fail(el, e);
    setTimeout(next, 0, i + 1);
    return;
  }
  Plotly.newPlot(el, spec[0], spec[1], CONFIG).then(function () {
    rendered++;
    el.dataset.rendered = "1";
  }, function (e) { fail(el, e); }).then(function () { setTimeout(next, 0, i + 1); });
}
next(0);
})();
