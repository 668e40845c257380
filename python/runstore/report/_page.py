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
import functools
import html
import json
import math
import time
from collections.abc import Iterator
from importlib import resources
from typing import Any

import numpy as np

from ..experiments import _status

#: Colours of the experiment states (the summary's bar and the plots over time).
STATE_COLOURS = {
    "done": "#2f9e44",
    "failed": "#e03131",
    "running": "#f59f00",
    "pending": "#adb5bd",
}


@functools.cache
def asset(name: str) -> str:
    """The page's own stylesheet or script (``report/_assets/page.css``, ``page.js``, package
    data beside this module), read once."""
    return (resources.files(__package__) / "_assets" / name).read_text(encoding="utf-8")


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
        f"<title>{html.escape(title)}</title>\n<style>\n{asset('page.css')}</style>\n"
        # MathJax, which plotly would fetch for LaTeX labels, is never loaded: there are none.
        "<script>window.PlotlyConfig = {MathJaxConfig: 'local'};</script>\n<script>"
    ).encode()
    yield _inline_script(plotly_js()).encode()
    yield b"</script>\n</head>\n<body>\n"
    yield _body(model, title).encode()
    yield (
        '<script type="application/json" id="rs-data">'
        + script_json(_data(model))
        + "</script>\n<script>\n"
        + asset("page.js")
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
    # Beyond what the report holds whole, medians, levels and box plots are of a sample.
    part = oc.get("quantiles_of")
    boxes_over = "every experiment"
    median = "median"
    if part:
        boxes_over = (
            f"a seeded sample of {_n(part['n'])} of the {_n(part['of'])} experiments "
            f"(seed {sample['seed']})"
        )
        median = "median of the sample"
    out = ["<section id=outcomes><h2>Outcomes</h2>"]
    if part:
        out.append(
            f"<p>Counts, means, extremes and histograms are of every experiment; medians, the "
            f"values of parameters and box plots of {_e(boxes_over)}.</p>"
        )
    if oc["params"]:
        out.append(
            "<p>Each scalar outcome against each parameter: a scatter plot for numeric "
            "parameters ("
            + scatter_sub
            + f"), box plots over {_e(boxes_over)} for text and bool parameters and for numbers "
            "of few values (box: quartiles; whiskers: the furthest values within 1.5 times the "
            "box; dashed line: mean).</p>"
        )
    for k, o in enumerate(oc["outcomes"]):
        stats = (
            f"{_n(o['n'])} values · mean {_num(o.get('mean'))} · {median} "
            f"{_num(o.get('median'))} · min {_num(o.get('min'))} · max {_num(o.get('max'))}"
        )
        cards = [_card(o["name"], "distribution over every experiment", "hist", o=k)]
        for j, p in enumerate(oc["params"]):
            if p["kind"] == "numeric":
                sub = scatter_sub
                fig = "scatter"
            else:
                shown = len(p["levels"])
                sub = f"{shown} values" + (
                    f" (the most frequent of {_n(p['level_count'])}"
                    + (" in the sample)" if part else ")")
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
