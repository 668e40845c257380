"""The hostile strings (``_hostile.py``) through ``runstore report``: every string a writer
controls (run ids, series names, parameter names and values, error messages and tracebacks)
reaches the page as data in every context it appears in (HTML text and attributes, the inline
JSON, the plots plotly draws from it), checked in headless Chromium: the script runs, every
plot is drawn, every run, series, parameter and error is listed as it was written, and nothing
of the strings executes or becomes an element. A string a store cannot hold is refused with a
clear error instead.

Six stores: three parts of a sweep with a design and default (hashed) experiment ids, whose
experiments fail with the hostile strings as messages and have them as parameter values and
names; a store of curves whose runs and series have hostile names; one whose scalar outcomes
have them; one whose string series (not drawn, but named) have them.
"""

from __future__ import annotations

import html.parser
import json
import re
from pathlib import Path

import numpy as np
import pytest
from _browser import Browser, Tab, needs_chromium
from _hostile import HOSTILE, STORABLE
from hypothesis import given
from hypothesis import strategies as st

import runstore
import runstore.report
from runstore.report import _data as _report_data
from runstore.report import _page as _report_page

#: Strings per part of the sweep: a text parameter of at most MAX_CATEGORIES values, and at
#: most FAILURE_GROUPS errors, so that the page lists every one.
PART = 23
assert PART <= min(_report_data.MAX_CATEGORIES, _report_data.FAILURE_GROUPS)
#: The hostile strings' own payload: what they do if any of them ever runs.
PWNED = "window.__pwned"


def attempt(fn, *args, **kwargs) -> BaseException | None:
    """The error ``fn(*args, **kwargs)`` raised, or None."""
    try:
        fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - the caller checks which
        return e
    return None


def check_refusal(what: str, key: str, e: BaseException) -> None:
    """A hostile string refused: a ValueError that says what was wrong with it."""
    assert isinstance(e, ValueError), (what, key, repr(e))
    assert re.search(
        r"not valid Unicode text|surrogates not allowed|NUL|empty|longer than|1 to 255 bytes|"
        r"starts with .~.|reserved",
        str(e),
    ), (what, key, str(e))


class Refusals:
    """Which hostile strings a role refused, each refusal checked."""

    def __init__(self) -> None:
        self.refused: dict[str, list[str]] = {}
        self.placed = 0

    def keep(self, what: str, key: str, fn, *args, **kwargs) -> bool:
        """Whether ``fn(*args, **kwargs)`` stored hostile string ``key`` as ``what``."""
        e = attempt(fn, *args, **kwargs)
        if e is None:
            self.placed += 1
            return True
        check_refusal(what, key, e)
        self.refused.setdefault(what, []).append(key)
        return False


def fail_with(label: str, x: float, rep: int, **others: float) -> dict:
    """An experiment of the sweep: the second replicate fails with its label as the message."""
    if rep:
        raise RuntimeError(label)
    return {"y": x}


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> dict[str, runstore.Store]:
    root = tmp_path_factory.mktemp("hostile-report")
    refusals = Refusals()
    out: dict[str, runstore.Store] = {}

    # The sweep, in parts: parameter values, parameter names, error messages; hashed ids.
    items = list(STORABLE.items())
    for part in range(0, len(items), PART):
        store = runstore.open(root / f"sweep-{part // PART}")
        rows = []
        for k, (key, s) in enumerate(items[part : part + PART]):
            named = s not in ("label", "x", "rep", "experiment") and refusals.keep(
                "parameter name",
                key,
                runstore.open(root / "probe" / key).define_experiments,
                [{s: 1.0}],
            )
            for rep in (0, 1):
                rows.append({"label": s, "x": float(k), "rep": rep, **({s: 1.0} if named else {})})
        store.define_experiments(rows)
        summary = runstore.run_experiments(store, fail_with, workers=0, progress=False)
        assert summary.failed == summary.done == len(rows) // 2
        out[f"sweep-{part // PART}"] = store.refresh()

    # Runs and series of curves; the directory's name is hostile too (the page's title).
    curves = runstore.open(root / HOSTILE["html-img-onerror"])
    with curves.writer() as w:
        for key, s in HOSTILE.items():
            if refusals.keep("run id", key, w.log, s, step=1, loss=1.0):
                w.log_many(s, np.arange(2, 5), loss=np.arange(3.0))
            if refusals.keep("series name", key, w.log, "r", step=1, **{s: 0.5}):
                w.log_many("r", np.arange(2, 5), **{s: np.arange(3.0)})
            w.commit()
        w.log_many("r", np.arange(1, 4), loss=np.arange(3.0))
    out["curves"] = curves.refresh()

    outcomes = runstore.open(root / "outcomes")
    with outcomes.writer() as w:
        for name in curves.names():
            if name != "loss":
                w.log_many(np.arange(3), **{name: np.arange(3.0)})
    out["outcomes"] = outcomes.refresh()

    skipped = runstore.open(root / "skipped")
    with skipped.writer() as w:
        for key, s in STORABLE.items():
            refusals.keep("string value", key, w.log, 1, text=s)
            refusals.keep("string series", key, w.log, 1, **{s: "text"})
            w.commit()
    out["skipped"] = skipped.refresh()

    # Nothing but these is ever refused: a lone surrogate (not UTF-8) anywhere; as a name, NUL,
    # the empty string, a reserved '~' name and names beyond the limits.
    names = {"empty", "nul", "reserved-tilde", "reserved-tilde-status", "long-4k", "long-64k"}
    names |= {"long-64k-multibyte"}
    assert set(refusals.refused["series name"]) == {"lone-surrogate"} | names
    assert set(refusals.refused["string series"]) == names  # of STORABLE: no lone surrogate
    assert set(refusals.refused["parameter name"]) == names
    assert set(refusals.refused["run id"]) == {"lone-surrogate"} | {
        n for n in names if n.startswith("long")
    }
    assert "string value" not in refusals.refused
    print(
        f"{len(HOSTILE)} hostile strings in {len(out)} stores: {refusals.placed} placed, "
        + ", ".join(f"{len(v)} refused as {k}" for k, v in refusals.refused.items())
    )
    return out


@pytest.fixture(scope="module")
def pages(stores, tmp_path_factory) -> dict[str, tuple[Path, dict]]:
    """Each store's page (written by runstore.report.write) and the model it draws."""
    root = tmp_path_factory.mktemp("hostile-pages")
    out = {}
    for name, store in stores.items():
        path = root / f"{name}.html"
        runstore.report.write(store, path, progress=False, max_runs=1000)
        out[name] = (path, _report_data.collect(store, max_runs=1000))
    return out


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    b = Browser(tmp_path_factory.mktemp("chromium") / "profile")
    yield b
    b.close()


def page_data(path: Path) -> dict:
    """The page's JSON, as Python's json reads it (it is valid JSON, or this raises)."""
    text = path.read_text(encoding="utf-8")
    m = re.search(r'<script type="application/json" id="rs-data">(.*?)</script>', text, re.S)
    assert m, "the page has no data"
    return json.loads(m.group(1))


def as_html_text(s: str) -> str:
    """What a browser's DOM holds for ``s`` written as HTML text: the HTML parser drops NUL
    and reads CR and CR LF as LF."""
    return s.replace("\r\n", "\n").replace("\r", "\n").replace("\0", "")


def as_plotly_text(s: str) -> str:
    """``s`` with its white space collapsed and trimmed, as plotly draws a title or label."""
    return " ".join(s.replace("\ufeff", " ").split())


def esc(s: str) -> str:
    """The page script's esc(): a name as plotly's titles and hover templates show it."""
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("%", "&#37;")


class _Markup(html.parser.HTMLParser):
    """The elements and event-handler attributes of a page, as an HTML parser reads them."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: dict[str, int] = {}
        self.handlers: list[tuple[str, str]] = []

    def handle_starttag(self, tag, attrs):
        self.tags[tag] = self.tags.get(tag, 0) + 1
        self.handlers += [(tag, k) for k, _ in attrs if k.startswith("on")]


# -- without a browser -----------------------------------------------------------------------------


def test_every_page_holds_valid_json_and_no_markup_of_the_strings(pages):
    for name, (path, model) in pages.items():
        data = page_data(path)
        assert data["ids"] == model["outcomes"]["sample"]["ids"], name
        assert [p["name"] for p in data["params"]] == [
            p["name"] for p in model["outcomes"]["params"]
        ]
        assert [c["name"] for c in data["curves"]] == [c["name"] for c in model["curves"]]
        markup = _Markup()
        markup.feed(path.read_text(encoding="utf-8"))
        assert markup.tags["script"] == 4, (name, markup.tags)  # config, plotly, data, page
        assert not {"img", "svg", "iframe", "object", "embed"} & set(markup.tags), markup.tags
        assert markup.handlers == [], (name, markup.handlers)
    print(f"{len(pages)} pages parsed")


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
        max_leaves=12,
    )
)
def test_script_json_is_data_whatever_its_strings_hold(value):
    text = _report_page.script_json(value)
    assert text.isascii() and not set("<>&") & set(text)
    assert json.loads(text) == value


def test_script_json_of_the_hostile_strings():
    for key, s in STORABLE.items():
        text = _report_page.script_json({s: [s]})
        assert text.isascii() and not set("<>&") & set(text), key
        assert json.loads(text) == {s: [s]}, key
    print(f"{len(STORABLE)} hostile strings as keys and values")


# -- in Chromium -----------------------------------------------------------------------------------

#: What a hostile string could have left in the page, had it become markup or code.
TRACES = f"""JSON.stringify({{
  pwned: typeof {PWNED},
  scripts: document.scripts.length,
  foreign: document.querySelectorAll("img, iframe, object, embed, body svg:not(.main-svg)"
    + ":not(#js-plotly-tester):not(svg.main-svg *):not(.modebar *)").length,
  handlers: Array.from(document.querySelectorAll("*")).filter(
    (e) => Array.from(e.attributes).some((a) => a.name.startsWith("on"))).length,
  body: [document.body.dataset.plots, document.body.dataset.rendered, document.body.dataset.failed],
  plots: document.querySelectorAll("div.plot[data-fig]").length,
}})"""


def texts(tab: Tab, selector: str) -> list[str]:
    return tab.eval(
        f"Array.from(document.querySelectorAll({json.dumps(selector)})).map((e) => e.textContent)"
    )


def open_checked(browser: Browser, pages: dict, name: str) -> Tab:
    """The page in a tab: its script ran without an error, drew every plot, and nothing of
    the strings ran or became an element; the data it parsed is the data written."""
    path, model = pages[name]
    tab = browser.open(path, 1280, 900)
    t = json.loads(tab.eval(TRACES))
    plots, rendered, failed = t["body"]
    assert plots == rendered == str(t["plots"]) and failed == "0", (name, t)
    assert t["plots"] == runstore.report.plot_count(model), name
    assert t["pwned"] == "undefined" and t["scripts"] == 4, (name, t)
    assert t["foreign"] == 0 and t["handlers"] == 0, (name, t)
    parsed = tab.eval("JSON.parse(document.getElementById('rs-data').textContent)")
    assert parsed == page_data(path), name
    assert tab.exceptions() == [], name
    return tab


@needs_chromium
def test_the_sweep_pages_list_every_error_parameter_and_value(browser, pages):
    checked = 0
    for name in sorted(n for n in pages if n.startswith("sweep")):
        tab = open_checked(browser, pages, name)
        model = pages[name][1]
        failures = model["status"]["failures"]
        groups = failures["groups"]
        assert failures["group_count"] == len(groups)  # every error is on the page
        assert texts(tab, "details.failure > summary code") == [
            as_html_text(g["error"]) for g in groups
        ]
        examples = [ex for g in groups for ex in g["examples"]]
        assert texts(tab, "details.traceback pre") == [
            as_html_text(e["traceback"]) for e in examples
        ]
        summaries = texts(tab, "details.traceback > summary")
        for ex, summary in zip(examples, summaries, strict=True):
            assert summary.startswith(ex["experiment"] + " attempt 1")
            for k, v in ex["params"].items():
                assert as_html_text(f"{k}={v}") in summary, (k, v)
            checked += 1
        # Every parameter is drawn against the outcome, under its own name.
        params = model["outcomes"]["params"]
        captions = texts(tab, "figcaption b")
        assert [c for c in captions if c.startswith("y vs ")] == [
            as_html_text(f"y vs {p['name']}") for p in params
        ]
        # The box plot of the text parameter draws a box for every value, labelled with it
        # (plotly's category axis would lose "constructor" or "__proto__": it keeps its
        # categories in an object keyed by them).
        j = next(j for j, p in enumerate(params) if p["name"] == "label")
        levels = params[j]["levels"]
        box = f"div.plot[data-fig=box][data-p='{j}']"
        drawn = tab.eval(
            f"(() => {{ const el = document.querySelector({json.dumps(box)});"
            "return [el.calcdata[0].length, el._fullLayout.xaxis.ticktext,"
            " Array.from(el.querySelectorAll('.xtick text')).map((e) => e.textContent)]; })()"
        )
        assert drawn[0] == len(levels) and drawn[1] == [esc(v) for v in levels], name
        ticks = [as_plotly_text(t) for t in drawn[2]]
        assert [t for t in ticks if t] == [t for v in levels if (t := as_plotly_text(v))]
        checked += len(levels) + len(params)
    print(f"{checked} errors, parameters and values checked on the sweep pages")


@needs_chromium
def test_every_run_and_series_of_curves_is_listed_and_drawn(browser, pages, stores):
    tab = open_checked(browser, pages, "curves")
    model = pages["curves"][1]
    runs = stores["curves"].runs()
    listed = tab.eval("Array.from(document.querySelectorAll('#rs-runs input')).map((b) => b.value)")
    assert sorted(listed) == sorted(runs)
    assert texts(tab, "#rs-runs label") == listed  # text nodes made by the script: exact
    assert tab.eval("document.title") == f"runstore report: {stores['curves'].path}"
    metrics = texts(tab, "#rs-metric option")
    assert metrics == [c["name"] for c in model["curves"]]
    # Every run can be drawn: all of them chosen, one trace each, each named after its run.
    lines = "document.querySelectorAll('#rs-curves .scatterlayer .trace').length"
    tab.eval(
        "{ document.getElementById('rs-all').click();"
        "const m = document.getElementById('rs-metric');"
        f"m.value = '{metrics.index('loss')}'; m.dispatchEvent(new Event('change')); }}"
    )
    assert tab.eval(lines) == len(runs)
    names = tab.eval("document.getElementById('rs-curves').data.map((t) => t.name)")
    assert sorted(names) == sorted(esc(r) for r in runs)
    # One run at a time, those named like properties of every JavaScript object among them.
    for key in ("proto-constructor", "proto-__proto__", "proto-toString", "proto-valueOf"):
        tab.eval(
            "{ document.getElementById('rs-none').click();"
            "const b = Array.from(document.querySelectorAll('#rs-runs input'))"
            f".find((b) => b.value === {json.dumps(HOSTILE[key])});"
            "b.checked = true; b.dispatchEvent(new Event('change', {bubbles: true})); }"
        )
        assert tab.eval(lines) == 1, key
        assert tab.eval("document.getElementById('rs-curves').data[0].name") == HOSTILE[key]
    # Each series is a metric that draws.
    for k, metric in enumerate(metrics):
        tab.eval(
            f"{{ const m = document.getElementById('rs-metric'); m.value = '{k}';"
            "m.dispatchEvent(new Event('change')); }"
        )
        title = tab.eval(
            "(document.querySelector('#rs-curves .ytitle') || {textContent: ''}).textContent"
        )
        assert as_plotly_text(title) == as_plotly_text(metric)
    assert tab.exceptions() == [] and tab.eval(f"typeof {PWNED}") == "undefined"
    print(f"{len(runs)} runs and {len(metrics)} series of curves listed and drawn")


@needs_chromium
def test_every_outcome_and_string_series_is_named(browser, pages):
    tab = open_checked(browser, pages, "outcomes")
    model = pages["outcomes"][1]
    names = [o["name"] for o in model["outcomes"]["outcomes"]]
    assert texts(tab, "#outcomes h3") == [as_html_text(n) for n in names]
    assert texts(tab, "figcaption b") == [as_html_text(n) for n in names]
    titles = tab.eval(
        "Array.from(document.querySelectorAll('div.plot[data-fig=hist]')).map((el) => {"
        " const t = el.querySelector('.xtitle'); return t ? t.textContent : ''; })"
    )
    assert [as_plotly_text(t) for t in titles] == [as_plotly_text(n) for n in names]
    tab = open_checked(browser, pages, "skipped")
    skipped = pages["skipped"][1]["skipped"]
    assert texts(tab, "footer code") == [as_html_text(n) for n, _ in skipped]
    print(f"{len(names)} outcomes and {len(skipped)} string series named")
