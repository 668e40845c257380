"""The HTML page of ``runstore report``: one self-contained file that a browser opens without a
network (plotly.js, the page's script and its style are inline), drawn from what
``_report_data.collect`` computed.

Text (the status summary, the failures and their tracebacks, the notes on sampling) is HTML
written here, readable without the script. The plots are drawn by the page's script from one
JSON document: numbers as little-endian typed arrays in base64 (float32 where the plot needs no
more, float64 for times and for parameters float32 would round), so that a plot of 2,000 points
costs about 11 KB a coordinate. The script draws one plot at a time, so that the page shows at
once and the browser stays responsive; when it is done, ``<body>`` carries ``data-plots`` (how
many plots there are), ``data-rendered`` and ``data-failed`` (how many were drawn and how many
could not be, each of those saying why in its place).

Every string of the store is data here, whatever it holds (docs/experiments.md, "The report"):
escaped HTML in text and attributes, :func:`script_json` in the JSON, escaped for plotly's
markup in titles and hover text, and never a key of a plain object in the script (Maps, lists
and positions instead: a run called ``__proto__`` or ``constructor`` is drawn like any other).
"""

from __future__ import annotations

import base64
import html
import json
import math
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from . import _status

#: Colours of the experiment states (the summary's bar and the plots over time).
STATE_COLOURS = {
    "done": "#2f9e44",
    "failed": "#e03131",
    "running": "#f59f00",
    "pending": "#adb5bd",
}


def plotly_js() -> str:
    """plotly.js, from the plotly package (ImportError naming it if it is not installed)."""
    # plotly is the page's one optional dependency: imported where it is used.
    import plotly.offline

    return plotly.offline.get_plotlyjs()


def pages(model: dict[str, Any], title: str | None = None) -> Iterator[bytes]:
    """The page, in pieces (plotly.js is one piece of about 5 MB)."""
    title = title or f"runstore report: {model['store']}"
    yield (
        "<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>\n"
        '<meta name=viewport content="width=device-width, initial-scale=1">\n'
        "<meta name=generator content="
        f'"runstore {html.escape(model["version"])}">\n'
        f"<title>{html.escape(title)}</title>\n<style>{_CSS}</style>\n"
        # MathJax, which plotly would fetch for LaTeX labels, is never loaded: there are none.
        "<script>window.PlotlyConfig = {MathJaxConfig: 'local'};</script>\n<script>"
    ).encode()
    yield _inline_script(plotly_js()).encode()
    yield b"</script>\n</head>\n<body>\n"
    yield _body(model, title).encode()
    yield (
        '<script type="application/json" id="rs-data">'
        + script_json(_data(model))
        + "</script>\n<script>"
        + _JS
        + "</script>\n</body></html>\n"
    ).encode()


def _inline_script(text: str) -> str:
    """JavaScript ``text`` (plotly.js, not a string of the store) safe inside a script element:
    no ``</script`` or ``<!--`` that would end it or change how it ends (``<\\/`` is ``</`` in
    every JavaScript string and regular expression, ``<\\!`` is ``<!``)."""
    return text.replace("</", "<\\/").replace("<!--", "<\\!--")


def script_json(value: Any) -> str:
    """``value`` as JSON that is data inside a ``<script type="application/json">`` element
    whatever its strings hold: ASCII, with ``<``, ``>`` and ``&`` (which can only be inside
    strings) written ``\\u003c``, ``\\u003e``, ``\\u0026``, so that no ``</script``, ``<!--``
    or ``<script`` can end the element or change how the HTML parser reads it; U+2028 and
    U+2029 are escapes too. ``JSON.parse`` of the element's text gives ``value`` back."""
    text = json.dumps(value, separators=(",", ":"), allow_nan=False)  # ASCII: ensure_ascii
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


# -- the data of the plots -----------------------------------------------------------------------


def _typed(a: np.ndarray) -> dict[str, str]:
    """A numeric array as the script reads it: {"$t": "f4"|"f8"|"i4", "b64": ...}."""
    a = np.asarray(a)
    if a.dtype.kind in "iub":
        if len(a) == 0 or (a.min() >= -(2**31) and a.max() < 2**31):
            kind, a = "i4", a.astype("<i4")
        else:
            kind, a = "f8", a.astype("<f8")
    elif a.dtype == np.float32:
        kind, a = "f4", a.astype("<f4")
    else:
        kind, a = "f8", a.astype("<f8")
    return {"$t": kind, "b64": base64.b64encode(np.ascontiguousarray(a).tobytes()).decode()}


def _finite(x: Any) -> Any:
    return x if x is None or not isinstance(x, float) or math.isfinite(x) else None


def _data(model: dict[str, Any]) -> dict[str, Any]:
    """What the script draws, as JSON (every array typed, every float finite or null)."""
    out: dict[str, Any] = {"colours": STATE_COLOURS}
    st = model.get("status")
    if st is not None:
        if "timeline" in st:
            tl = st["timeline"]
            out["timeline"] = {
                "t": _typed(tl["t"] * 1000.0),
                "done": _typed(tl["done"]),
                "failed": _typed(tl["failed"]),
            }
        if "seconds" in st:
            out["seconds"] = _hist(st["seconds"])
    oc = model["outcomes"]
    out["ids"] = oc["sample"]["ids"]
    out["params"] = [
        {
            "name": p["name"],
            "kind": p["kind"],
            "log": p.get("log", False),
            "sample": _typed(p["sample"]) if p["kind"] == "numeric" else None,
            "levels": p.get("levels"),
        }
        for p in oc["params"]
    ]
    out["outcomes"] = [
        {
            "name": o["name"],
            "log": o.get("log", False),
            "sample": _typed(o["sample"]),
            "hist": _hist(o["hist"]) if "hist" in o else None,
            # One entry per parameter, in the order of "params" (null where it has no boxes):
            # a list, so that no parameter's name is ever a key the script looks up.
            "boxes": [
                {k: [_finite(x) for x in v] for k, v in o["boxes"][p["name"]].items()}
                if p["name"] in o["boxes"]
                else None
                for p in oc["params"]
            ],
        }
        for o in oc["outcomes"]
    ]
    out["arrays"] = [
        {
            "name": a["name"],
            "index": _typed(a["index"]),
            "q": {k: _typed(v) for k, v in a["quantiles"].items()},
            "mean": _typed(a["mean"]),
        }
        for a in model["arrays"]
    ]
    out["curves"] = [
        {
            "name": c["name"],
            "runs": [
                {"run": str(r["run"]), "steps": _typed(r["steps"]), "values": _typed(r["values"])}
                for r in c["runs"]
            ],
        }
        for c in model["curves"]
    ]
    return out


def _hist(h: dict[str, Any]) -> dict[str, Any]:
    return {"edges": _typed(h["edges"]), "counts": _typed(h["counts"]), "log": h["log"]}


# -- the text of the page ------------------------------------------------------------------------


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _n(x: int) -> str:
    return f"{x:,}"


def _num(x: float | None) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    return f"{x:.4g}"


def _body(model: dict[str, Any], title: str) -> str:
    st = model.get("status")
    oc = model["outcomes"]
    sections = []
    nav = []
    if st is not None:
        nav.append(("status", "Status"))
        sections.append(_status_section(st))
        if st["failures"]["total"]:
            nav.append(("failures", f"Failures ({_n(st['failures']['total'])})"))
            sections.append(_failures_section(st["failures"]))
    if oc["outcomes"]:
        nav.append(("outcomes", "Outcomes"))
        sections.append(_outcomes_section(model))
    if model["arrays"]:
        nav.append(("arrays", "Array outcomes"))
        sections.append(_arrays_section(model["arrays"]))
    if model["curves"]:
        nav.append(("curves", "Curves"))
        sections.append(_curves_section(model["curves"]))
    if not sections:
        sections.append(
            "<section id=empty><h2>Nothing to show yet</h2><p class=empty>"
            + (
                "The store holds no records."
                if not model["series"] and not model["has_design"]
                else "The store has no experiments (no design: define_experiments or "
                "run_experiments writes one), no numeric outcomes and no series with records at "
                "steps other than 0."
            )
            + "</p></section>"
        )
    generated = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(model["generated"]))
    what = []
    if model["has_design"]:
        what.append(f"{_n(model['experiments'])} experiments")
    else:
        what.append(f"{_n(model['runs'])} runs")
    what.append(f"{_n(model['series'])} series")
    head = (
        f"<header><h1>{_e(title)}</h1><p class=meta><span class=path>{_e(model['store'])}</span>"
        f" · {' · '.join(what)} · generated {_e(generated)} by runstore {_e(model['version'])}"
        "</p>"
        + (
            "<nav>" + "".join(f'<a href="#{k}">{_e(v)}</a>' for k, v in nav) + "</nav>"
            if len(nav) > 1
            else ""
        )
        + "</header>\n<main>\n"
    )
    return head + "\n".join(sections) + "\n" + _notes(model) + "</main>\n"


def _status_section(st: dict[str, Any]) -> str:
    s = st["summary"]
    n = s["experiments"]
    counts = s["counts"]
    cards = [f'<div class="stat total"><b>{_n(n)}</b><span>experiments</span></div>']
    bar = []
    for state in _status.STATES:
        c = counts[state]
        pct = 100.0 * c / n if n else 0.0
        cards.append(
            f'<div class="stat {state}"><b>{_n(c)}</b><span>{state} · {pct:.1f}%</span></div>'
        )
        if c:
            bar.append(f'<i class="{state}" style="width:{pct:.3f}%" title="{state}: {_n(c)}"></i>')
    lists = []
    if s["slowest"]:
        lists.append(
            _table(
                "Slowest",
                ("experiment", "run time", "host"),
                [
                    (e["experiment"], _status.duration(e["seconds"]), e["host"])
                    for e in s["slowest"]
                ],
            )
        )
    if s["running"]:
        lists.append(
            _table(
                "Running longest",
                ("experiment", "running for", "host"),
                [
                    (e["experiment"], _status.duration(e["running_s"]), e["host"])
                    for e in s["running"]
                ],
            )
        )
    plots = []
    if "timeline" in st:
        plots.append(
            _card("Finished over time", "done and failed experiments, cumulative", "timeline")
        )
    if "seconds" in st:
        plots.append(_card("Run time", "of the done experiments, seconds", "seconds"))
    return (
        "<section id=status><h2>Status</h2>"
        f"<div class=stats>{''.join(cards)}</div>"
        f'<div class=bar role=img aria-label="experiments by state">{"".join(bar)}</div>'
        f"<p class=rate>{_e(_status.rate_line(s))}"
        + ("" if s["complete"] else f" · ETA {_e(_status.duration(s['eta_s']))}")
        + "</p>"
        + (f"<div class=grid>{''.join(plots)}</div>" if plots else "")
        + (f"<div class=lists>{''.join(lists)}</div>" if lists else "")
        + f"<details class=text><summary>As <code>runstore status</code> prints it</summary>"
        f"<pre>{_e(st['text'])}</pre></details></section>"
    )


def _table(caption: str, head: tuple[str, ...], rows: list[tuple[Any, ...]]) -> str:
    return (
        f"<table><caption>{_e(caption)}</caption><tr>"
        + "".join(f"<th>{_e(h)}</th>" for h in head)
        + "</tr>"
        + "".join(
            "<tr>" + "".join(f"<td>{_e('' if c is None else c)}</td>" for c in r) + "</tr>"
            for r in rows
        )
        + "</table>"
    )


def _failures_section(f: dict[str, Any]) -> str:
    out = [
        "<section id=failures><h2>Failures</h2>",
        f"<p>{_n(f['total'])} failed experiments, by the line of the error that names it"
        + (
            f" (the {_n(len(f['groups']))} most frequent of {_n(f['group_count'])} errors)"
            if f["group_count"] > len(f["groups"])
            else ""
        )
        + ". Open one to see its experiments and tracebacks.</p>",
    ]
    for g in f["groups"]:
        ids = ", ".join(_e(i) for i in g["ids"])
        more = g["count"] - len(g["ids"])
        out.append(
            f"<details class=failure><summary><span class=count>{_n(g['count'])}</span>"
            f"<code>{_e(g['error'])}</code></summary>"
            f"<p class=ids>{ids}{f' and {_n(more)} more' if more > 0 else ''}</p>"
        )
        for ex in g["examples"]:
            params = ", ".join(f"{_e(k)}={_e(v)}" for k, v in ex["params"].items())
            where = f"attempt {ex['attempt']}" + (f" on {_e(ex['host'])}" if ex["host"] else "")
            cut = (
                f"<p class=cut>{_n(ex['cut'])} characters of the middle left out</p>"
                if ex["cut"]
                else ""
            )
            out.append(
                f"<details class=traceback><summary><code>{_e(ex['experiment'])}</code> "
                f"{where}{' · ' + params if params else ''}</summary>"
                f"<pre>{_e(ex['traceback'])}</pre>{cut}</details>"
            )
        shown = len(g["examples"])
        if g["count"] > shown:
            out.append(f"<p class=cut>tracebacks of the first {shown} shown</p>")
        out.append("</details>")
    out.append("</section>")
    return "\n".join(out)


def _card(title: str, sub: str, fig: str, **attrs: Any) -> str:
    data = "".join(f' data-{k}="{_e(v)}"' for k, v in attrs.items())
    return (
        f"<figure class=card><figcaption><b>{_e(title)}</b><small>{_e(sub)}</small>"
        f'</figcaption><div class=plot data-fig="{fig}"{data}></div></figure>'
    )


def _outcomes_section(model: dict[str, Any]) -> str:
    oc = model["outcomes"]
    sample = oc["sample"]
    sampled = sample["n"] < sample["of"]
    scatter_sub = (
        f"{_n(sample['n'])} of {_n(sample['of'])} experiments (a seeded sample, seed "
        f"{sample['seed']})"
        if sampled
        else f"all {_n(sample['of'])} experiments"
    )
    out = ["<section id=outcomes><h2>Outcomes</h2>"]
    if oc["params"]:
        out.append(
            "<p>Each scalar outcome against each parameter: a scatter plot for numeric "
            "parameters ("
            + scatter_sub
            + "), box plots over every experiment for text and bool parameters and for numbers of "
            "few values (box: quartiles; whiskers: the furthest values within 1.5 times the box; "
            "dashed line: mean).</p>"
        )
    for k, o in enumerate(oc["outcomes"]):
        stats = (
            f"{_n(o['n'])} values · mean {_num(o.get('mean'))} · median {_num(o.get('median'))} "
            f"· min {_num(o.get('min'))} · max {_num(o.get('max'))}"
        )
        cards = [_card(o["name"], "distribution over every experiment", "hist", o=k)]
        for j, p in enumerate(oc["params"]):
            if p["kind"] == "numeric":
                sub = scatter_sub
                fig = "scatter"
            else:
                shown = len(p["levels"])
                sub = f"{shown} values" + (
                    f" (the most frequent of {_n(p['level_count'])})"
                    if p["level_count"] > shown
                    else ""
                )
                fig = "box"
            cards.append(_card(f"{o['name']} vs {p['name']}", sub, fig, o=k, p=j))
        out.append(
            f'<h3 id="outcome-{k}">{_e(o["name"])}</h3><p class=sub>{_e(stats)}</p>'
            f"<div class=grid>{''.join(cards)}</div>"
        )
    out.append("</section>")
    return "\n".join(out)


def _arrays_section(arrays: list[dict[str, Any]]) -> str:
    cards = []
    for k, a in enumerate(arrays):
        shape = "×".join(str(s) for s in a["shape"])
        over = (
            f"{_n(a['experiments'])} of {_n(a['of'])} experiments (a seeded sample)"
            if a["sampled"]
            else f"{_n(a['experiments'])} experiments"
        )
        flat = " (flattened, C order)" if len(a["shape"]) > 1 else ""
        thin = f"; {_n(len(a['index']))} evenly spaced indices" if a["thinned"] else ""
        cards.append(
            _card(
                f"{a['name']} [{shape}]",
                f"quantiles 5-95, 25-75, median and mean over {over}{flat}{thin}",
                "band",
                a=k,
            )
        )
    return (
        "<section id=arrays><h2>Array outcomes</h2>"
        "<p>The 5, 25, 50 (line), 75 and 95% quantiles of each array outcome at each index, "
        "and the mean (dashed).</p>"
        f"<div class=grid>{''.join(cards)}</div></section>"
    )


def _curves_section(curves: list[dict[str, Any]]) -> str:
    notes = []
    for c in curves:
        total = c["runs_with_steps"]
        shown = len(c["runs"])
        thinned = sum(1 for r in c["runs"] if r["count"] > len(r["steps"]))
        what = (
            f"{_n(shown)} of {_n(total)} runs"
            if total is not None and total > shown
            else f"the first {_n(shown)} runs"
            if total is None
            else f"{_n(shown)} runs"
        )
        notes.append(
            f"<li><code>{_e(c['name'])}</code>: {what}, {_n(c['count'])} records"
            + (
                f"; {_n(thinned)} curve{'s' if thinned > 1 else ''} thinned to evenly spaced steps"
                if thinned
                else ""
            )
            + "</li>"
        )
    return (
        "<section id=curves><h2>Curves</h2>"
        "<p>Series logged at many steps, per run. Choose the metric and the runs; smoothing is "
        "an exponential moving average, as TensorBoard's.</p>"
        "<div class=controls>"
        "<label>metric <select id=rs-metric></select></label>"
        "<label>smoothing <input type=range id=rs-smooth min=0 max=0.99 step=0.01 value=0>"
        "<output id=rs-smooth-value>0</output></label>"
        "<label><input type=checkbox id=rs-logy> log scale</label>"
        "</div>"
        "<div class=curves><div class=runs><div class=runs-head>runs "
        "<button type=button id=rs-all>all</button><button type=button id=rs-none>none</button>"
        "<input id=rs-filter type=search placeholder=filter aria-label='filter runs'></div>"
        "<div id=rs-runs></div></div>"
        '<figure class="card wide"><div class="plot tall" data-fig=curves id=rs-curves></div>'
        "</figure></div>"
        f"<ul class=notes>{''.join(notes)}</ul></section>"
    )


def _notes(model: dict[str, Any]) -> str:
    items = []
    if model["skipped"]:
        items.append(
            "Not drawn: "
            + ", ".join(f"<code>{_e(n)}</code> ({_e(why)})" for n, why in model["skipped"])
            + "."
        )
    items.append(
        f"Samples are drawn with seed {model['seed']}, so the same store gives the same page. "
        f"Read in {model['seconds']:.1f} s."
    )
    return "<footer>" + "".join(f"<p>{i}</p>" for i in items) + "</footer>"


_CSS = """
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#212529;
background:#f4f5f7}
header{background:#fff;border-bottom:1px solid #dee2e6;padding:12px 20px 8px}
h1{font-size:18px;margin:0 0 2px;overflow-wrap:anywhere}
h2{font-size:16px;margin:0 0 8px}
h3{font-size:15px;margin:18px 0 0}
.meta{margin:0;color:#6c757d;font-size:12px;overflow-wrap:anywhere}
.path{font-family:ui-monospace,Menlo,Consolas,monospace}
nav{display:flex;flex-wrap:wrap;gap:4px 14px;margin-top:6px}
nav a{color:#1c7ed6;text-decoration:none;font-weight:600}
main{padding:12px 20px 24px;max-width:1600px;margin:0 auto}
section{background:#fff;border:1px solid #dee2e6;border-radius:6px;padding:14px 16px;
margin:0 0 14px}
.stats{display:grid;grid-template-columns:repeat(auto-fill,minmax(110px,1fr));gap:8px}
.stat{border-left:4px solid #495057;padding:2px 8px}
.stat b{display:block;font-size:20px}
.stat span{color:#6c757d;font-size:12px}
.stat.done{border-color:#2f9e44}.stat.failed{border-color:#e03131}
.stat.running{border-color:#f59f00}.stat.pending{border-color:#adb5bd}
.bar{display:flex;height:12px;border-radius:6px;overflow:hidden;background:#e9ecef;
margin:12px 0 4px}
.bar i{display:block;height:100%}
.bar .done{background:#2f9e44}.bar .failed{background:#e03131}
.bar .running{background:#f59f00}.bar .pending{background:#adb5bd}
.rate{color:#495057;margin:4px 0 8px}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(340px,1fr));gap:10px;
margin-top:8px}
.card{margin:0;border:1px solid #e9ecef;border-radius:4px;padding:6px 6px 2px;min-width:0}
.card figcaption{padding:0 4px}
.card figcaption b{display:block;font-size:13px;overflow-wrap:anywhere}
.card small{color:#6c757d;font-size:11px}
.plot{height:250px;width:100%}
.plot.tall{height:420px}
.plot .rs-error{color:#e03131;padding:20px;font-size:12px}
.lists{display:flex;flex-wrap:wrap;gap:8px 24px;margin-top:10px}
table{border-collapse:collapse;font-size:12px}
caption{text-align:left;font-weight:600;padding-bottom:2px}
th,td{text-align:left;padding:2px 10px 2px 0;border-bottom:1px solid #f1f3f5;
overflow-wrap:anywhere}
th{color:#6c757d;font-weight:500}
details{margin:6px 0}
summary{cursor:pointer}
details.failure{border:1px solid #ffc9c9;border-radius:4px;padding:6px 10px;background:#fff5f5}
details.failure>summary code{font-size:13px;overflow-wrap:anywhere}
.count{display:inline-block;min-width:3em;font-weight:700;color:#c92a2a;margin-right:6px}
details.traceback{background:#fff;border:1px solid #f1f3f5;border-radius:4px;padding:4px 8px}
pre{overflow:auto;max-height:420px;background:#f8f9fa;padding:8px;font-size:12px;margin:6px 0}
.ids,.cut,.sub{color:#6c757d;font-size:12px;overflow-wrap:anywhere;margin:4px 0}
code{font-family:ui-monospace,Menlo,Consolas,monospace}
.controls{display:flex;flex-wrap:wrap;gap:8px 18px;align-items:center;margin-bottom:8px}
.controls select{font:inherit;max-width:60vw}
.curves{display:grid;grid-template-columns:220px 1fr;gap:10px}
.runs{border:1px solid #e9ecef;border-radius:4px;padding:6px;max-height:432px;overflow:auto;
font-size:12px}
.runs-head{display:flex;flex-wrap:wrap;gap:4px;align-items:center;margin-bottom:4px}
.runs-head input{width:100%}
.runs label{display:block;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.runs label i{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:4px}
.wide{min-width:0}
.notes{color:#6c757d;font-size:12px}
footer{color:#6c757d;font-size:12px;padding:0 4px}
.empty{color:#6c757d}
@media (max-width:640px){
main{padding:8px}header{padding:10px 10px 6px}section{padding:10px}
.grid{grid-template-columns:1fr}.curves{grid-template-columns:1fr}.runs{max-height:160px}
.plot{height:230px}.plot.tall{height:340px}
}
"""

_JS = r"""
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
"""
