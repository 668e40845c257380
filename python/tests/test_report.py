"""``runstore report``: the HTML page of a sweep (status, failures with tracebacks, outcomes against
parameters, quantile bands of array outcomes) and of a store of training curves; what it shows
checked against the stored values, no network reference in it, and drawn in headless Chromium at
a desktop's and a phone's size (the screenshots are kept in $RUNSTORE_TEST_ARTIFACTS, default
build/test-artifacts)."""

from __future__ import annotations

import base64
import html.parser
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from _browser import Browser, Tab, needs_chromium
from _terminal import run_on_terminal

import runstore
import runstore.report
from runstore.report import _data as _report_data
from runstore.report import _windows as _report_windows

DONE_GREEN = (0x2F, 0x9E, 0x44)
FAILED_RED = (0xE0, 0x31, 0x31)
FIRST_RUN_BLUE = (0x1F, 0x77, 0xB4)


def train(lr, opt, seed):
    """An experiment of the sweep: sgd diverges at large learning rates."""
    if opt == "sgd" and lr > 0.01:
        raise FloatingPointError(f"loss diverged at lr={lr}")
    rng = np.random.default_rng(seed + int(lr * 1e6))
    curve = np.exp(-lr * 40 * np.arange(20)) + rng.normal(0, 0.01, 20)
    return {"loss": float(curve[-1] + seed), "acc": float(1 - lr), "curve": curve}


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """72 experiments (default hashed ids): lr numeric, opt text, seed numeric of 3 values; 16
    of them fail with a traceback; outcomes loss, acc (scalars) and curve (20 points)."""
    store = runstore.open(tmp_path_factory.mktemp("report") / "sweep")
    lrs = [float(x) for x in np.geomspace(1e-4, 0.1, 12)]
    store.define_experiments(runstore.grid(lr=lrs, opt=["adam", "sgd"], seed=range(3)))
    summary = runstore.run_experiments(store, train, workers=0, progress=False)
    assert summary.failed == 4 * 3 and summary.done == 72 - 12
    return store.refresh()


@pytest.fixture(scope="module")
def curves(tmp_path_factory):
    """Training curves: 6 runs of 400 steps and one of 3,000, of loss and reward, no design."""
    store = runstore.open(tmp_path_factory.mktemp("report") / "curves")
    with store.writer() as w:
        for k in range(6):
            steps = np.arange(400)
            w.log_many(f"run-{k}", steps, loss=np.exp(-steps / (50 + 20 * k)), reward=steps * 0.1)
        steps = np.arange(0, 30_000, 10)
        w.log_many("long", steps, loss=1 / (1 + steps), reward=np.sqrt(steps))
    return store.refresh()


def write(store, path, **kw):
    r = runstore.report.write(store, path, progress=False, **kw)
    return r, Path(path).read_text()


def data_of(page: str) -> dict:
    """The JSON the page's script draws (typed arrays decoded)."""
    m = re.search(r'<script type="application/json" id="rs-data">(.*?)</script>', page, re.S)
    assert m, "the page has no data"

    def decode(v):
        if isinstance(v, dict) and "$t" in v:
            dt = {"f4": "<f4", "f8": "<f8", "i4": "<i4"}[v["$t"]]
            return np.frombuffer(base64.b64decode(v["b64"]), dtype=dt)
        if isinstance(v, dict):
            return {k: decode(x) for k, x in v.items()}
        if isinstance(v, list):
            return [decode(x) for x in v]
        return v

    return decode(json.loads(m.group(1)))


# -- what the page shows ---------------------------------------------------------------------------


def test_the_page_of_a_sweep_shows_its_status_failures_and_outcomes(sweep, tmp_path):
    r, page = write(sweep, tmp_path / "report.html")
    assert r["experiments"] == 72 and r["bytes"] == len(page.encode())
    # 2 status plots; 2 outcomes x (distribution + 3 parameters); 1 band.
    assert r["plots"] == 2 + 2 * 4 + 1 == page.count('class=plot data-fig="')
    # Status: the counts of `runstore status`, and its text.
    assert '<div class="stat done"><b>60</b><span>done · 83.3%</span>' in page
    assert '<div class="stat failed"><b>12</b><span>failed · 16.7%</span>' in page
    assert "all finished" in page and "Finished over time" in page
    # Failures: one group (the numbers of the messages differ), tracebacks collapsed.
    group = re.search(r"<details class=failure><summary><span class=count>(\d+)</span>", page)
    assert group and group.group(1) == "12"
    assert "FloatingPointError: loss diverged at lr=…" in page
    assert page.count("<details class=traceback>") == _report_data.FAILURE_EXAMPLES
    assert "Traceback (most recent call last)" in page and "in train" in page
    assert "opt=sgd" in page  # the failed experiment's parameters
    # Outcomes against parameters: scatter for lr, box plots for opt and for seed (3 values).
    for title in ("loss vs lr", "loss vs opt", "loss vs seed", "acc vs lr", "curve [20]"):
        assert f"<b>{title}</b>" in page
    assert page.count('data-fig="scatter"') == 2 and page.count('data-fig="box"') == 4


def test_box_plots_and_bands_are_the_stored_values_quantiles(sweep, tmp_path):
    _, page = write(sweep, tmp_path / "report.html")
    d = data_of(page)
    experiments, outcomes = runstore.load_results(sweep)
    done = (experiments["state"] == "done").to_numpy()
    loss = outcomes["loss"]
    opt_names = [p["name"] for p in d["params"]]
    assert opt_names == ["lr", "opt", "seed"]
    assert [p["kind"] for p in d["params"]] == ["numeric", "levels", "levels"]
    loss_entry = next(o for o in d["outcomes"] if o["name"] == "loss")
    boxes = loss_entry["boxes"][1]  # a list in the order of the parameters
    assert d["params"][1]["levels"] == ["adam", "sgd"]
    for k, level in enumerate(["adam", "sgd"]):
        v = loss[done & (experiments["opt"] == level).to_numpy()]
        q1, med, q3 = np.quantile(v, (0.25, 0.5, 0.75))
        assert boxes["n"][k] == len(v)
        assert boxes["q1"][k] == pytest.approx(q1) and boxes["median"][k] == pytest.approx(med)
        assert boxes["q3"][k] == pytest.approx(q3) and boxes["mean"][k] == pytest.approx(v.mean())
        assert v.min() <= boxes["lo"][k] <= q1 and q3 <= boxes["hi"][k] <= v.max()
    # Every done experiment is in the scatter (60 <= max_points), in design order.
    done_ids = experiments["experiment"][done].tolist()
    assert d["ids"] == done_ids
    np.testing.assert_allclose(loss_entry["sample"], loss[done], rtol=1e-6)
    np.testing.assert_array_equal(d["params"][0]["sample"], experiments["lr"][done].to_numpy())
    # The band: quantiles at each index over the done experiments.
    band = d["arrays"][0]
    want = np.quantile(outcomes["curve"][done], _report_data.QUANTILES, axis=0)
    for k, q in enumerate(("5", "25", "50", "75", "95")):
        np.testing.assert_allclose(band["q"][q], want[k], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(band["mean"], outcomes["curve"][done].mean(axis=0), rtol=1e-5)


def test_samples_are_seeded_and_said(sweep, tmp_path):
    _, a = write(sweep, tmp_path / "a.html", max_points=10)
    _, b = write(sweep, tmp_path / "b.html", max_points=10)
    _, c = write(sweep, tmp_path / "c.html", max_points=10, seed=7)
    assert "10 of 60 experiments (a seeded sample, seed 0)" in a
    assert "10 of 60 experiments (a seeded sample, seed 7)" in c
    da, db, dc = data_of(a), data_of(b), data_of(c)
    assert len(da["ids"]) == 10 and da["ids"] == db["ids"] and da["ids"] != dc["ids"]
    assert all(len(o["sample"]) == 10 for o in da["outcomes"])
    # Box plots are over every experiment whatever the sample.
    assert all(sum(o["boxes"][1]["n"]) == 60 for o in da["outcomes"])  # parameter 1: opt


def test_a_band_over_more_values_than_it_holds_is_a_seeded_sample(sweep, tmp_path, monkeypatch):
    monkeypatch.setattr(_report_data, "BAND_VALUES", 20 * 25)  # 25 experiments of 20 values
    model = _report_data.collect(sweep)
    band = model["arrays"][0]
    assert band["sampled"] and band["experiments"] == 25 and band["of"] == 60
    _, page = write(sweep, tmp_path / "report.html")
    assert "over 25 of 60 experiments (a seeded sample)" in page


def _same(a, b, where=""):
    """Whether two models are equal but for their times (and what depends on the clock)."""
    if isinstance(a, dict):
        keys = set(a) - {"generated", "seconds", "rate", "eta_s", "text", "running_s"}
        assert keys == set(b) - {"generated", "seconds", "rate", "eta_s", "text", "running_s"}
        for k in keys:
            # "seconds" of the status is its histogram of run times: compared.
            _same(a[k], b[k], f"{where}/{k}")
        if "edges" in a:
            _same(a["counts"], b["counts"], where + "/counts")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{where}[{i}]")
    elif isinstance(a, np.ndarray):
        assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), where
    elif isinstance(a, float) and np.isnan(a):
        assert np.isnan(b), where
    else:
        assert a == b, (where, a, b)


def test_windows_of_a_few_experiments_give_the_model_of_one_read(sweep, monkeypatch):
    """Read a few experiments at a time (windows of about 8 of the 72), the report is what
    it is read whole: the summary, the failures, histograms, box plots, scatter and bands."""
    whole = _report_data.collect(sweep)
    monkeypatch.setattr(_report_windows, "WINDOW_BYTES", 8 * 600)
    monkeypatch.setattr(_report_windows, "READ_WHOLE", 0)
    exps = _report_windows.Experiments(sweep, 1000)
    exps.read_outcomes(["loss", "acc"])
    assert exps.windowed and exps.window_rows < 12, exps.window_rows
    windowed = _report_data.collect(sweep)
    assert windowed["status"]["summary"]["slowest"] == whole["status"]["summary"]["slowest"]
    _same(whole, windowed)


@pytest.mark.parametrize("read_whole", [0, 1000], ids=["windows", "whole"])
def test_beyond_the_sample_counts_stay_exact_and_the_page_says_so(
    sweep, tmp_path, monkeypatch, read_whole
):
    """With more experiments than the report holds (a sample of 20 of the 72), the
    counts, extremes, means, histograms, timeline, summary and failures are those of every
    experiment, the medians and box plots are of the seeded sample, and the page says which;
    read a few experiments at a time, or whole."""
    whole = _report_data.collect(sweep)
    monkeypatch.setattr(_report_windows, "WINDOW_BYTES", 8 * 600)
    monkeypatch.setattr(_report_windows, "READ_WHOLE", read_whole)
    part = _report_data.collect(sweep, sample=20)
    _same(whole["status"], part["status"])  # the summary and the failures too
    assert part["outcomes"]["quantiles_of"] == {"n": 20, "of": 72}
    for w, p in zip(whole["outcomes"]["outcomes"], part["outcomes"]["outcomes"]):
        assert (w["name"], w["n"], w["min"], w["max"]) == (p["name"], p["n"], p["min"], p["max"])
        assert p["mean"] == pytest.approx(w["mean"], rel=1e-12)
        _same(w["hist"], p["hist"])
        # The median and box plots of the sample: of its 20 experiments, fewer values.
        assert sum(p["boxes"]["opt"]["n"]) < sum(w["boxes"]["opt"]["n"]) == w["n"]
    sample = part["outcomes"]["sample"]
    assert sample["of"] == 60 and 0 < sample["n"] <= 20  # the done ones among the 20
    _, page = write(sweep, tmp_path / "report.html", sample=20)
    assert "medians, the values of parameters and box plots of a seeded sample of 20 of " in page
    assert "the 72 experiments (seed 0)" in page
    _, page = write(sweep, tmp_path / "report.html", sample=20, seed=3)
    assert "(seed 3)" in page and "median of the sample" in page


REPORT_PEAK = """
import sys
import runstore
from runstore.report import _data, _windows
_windows.WINDOW_BYTES = int(sys.argv[2])
store = runstore.open(sys.argv[1], "r")
store.refresh()
def peak():  # VmHWM: ru_maxrss would start from the parent's, the test's
    return int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0])
before = peak()
model = _data.collect(store, sample=int(sys.argv[3]))
assert model["status"]["summary"]["counts"]["failed"] == 1000
print((peak() - before) // 1024)
"""


def test_the_report_holds_a_window_and_a_sample_not_every_experiment(tmp_path):
    """The report's peak memory does not hold every experiment's parameters, status and
    scalar outcomes: with windows of 1 MiB and a sample of 10,000 experiments, the report of
    200,000 experiments (hashed ids, 5 parameters, the status of run_experiments, 3 scalars,
    1,000 failures) grows the resident set by less than 32 MiB (the ids, 4.8 MB, a window, the
    sample), and by more when the window and the sample hold them all, which shows the
    measure sees the columns."""
    store = runstore.open(tmp_path / "s")
    n = 200_000
    rng = np.random.default_rng(5)
    design = store.define_experiments(pd.DataFrame({f"p{i}": rng.random(n) for i in range(5)}))
    ids = design["experiment"].tolist()
    state = np.where(np.arange(n) % 200 == 7, "failed", "done").tolist()
    with store.writer(_allow_reserved=True) as w:
        w.log_many(ids, **{"~status/state": state, "~status/attempt": np.ones(n, np.int64)})
        w.log_many(ids, **{"~status/host": ["node-1"] * n, "~status/seconds": rng.random(n)})
        w.log_many(ids, **{"~status/started": rng.random(n), "~status/finished": rng.random(n)})
        failed = [i for i, s in zip(ids, state) if s == "failed"]
        w.log_many(failed, **{"~status/error": [f"ValueError: at {k}" for k in range(len(failed))]})
        w.log_many(ids, y0=rng.random(n), y1=rng.random(n), y2=rng.random(n))
    del store, design, ids, state

    def peak_growth(window_bytes, sample):
        p = subprocess.run(
            [sys.executable, "-c", REPORT_PEAK, str(tmp_path / "s"), str(window_bytes),
             str(sample)],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert p.returncode == 0, p.stderr
        return int(p.stdout.split()[-1])

    windowed, whole = peak_growth(1 << 20, 10_000), peak_growth(1 << 40, n)
    print(f"report of {n:,} experiments: peak RSS grew {windowed} MiB with windows of 1 MiB and "
          f"a sample of 10,000, {whole} MiB with the columns whole")  # fmt: skip
    assert windowed < 32, f"peak RSS grew by {windowed} MiB"
    assert whole > windowed + 16, (windowed, whole)


def test_curves_of_a_step_indexed_store(curves, tmp_path):
    r, page = write(curves, tmp_path / "report.html", curve_points=500)
    assert r["plots"] == 1 and "id=rs-curves" in page
    assert "<section id=status>" not in page and "7 runs" in page
    d = data_of(page)
    assert [c["name"] for c in d["curves"]] == ["loss", "reward"]
    runs = {x["run"]: x for x in d["curves"][0]["runs"]}
    assert sorted(runs) == sorted([f"run-{k}" for k in range(6)] + ["long"])
    np.testing.assert_array_equal(runs["run-3"]["steps"], np.arange(400))
    np.testing.assert_allclose(runs["run-3"]["values"], np.exp(-np.arange(400) / 110), rtol=1e-6)
    long = runs["long"]
    assert len(long["steps"]) == 500 and long["steps"][0] == 0 and long["steps"][-1] == 29_990
    assert np.all(np.diff(long["steps"]) > 0)
    assert "1 curve thinned to evenly spaced steps" in page
    # At most max_runs runs, the first ones; the page says how many there are.
    _, page = write(curves, tmp_path / "few.html", max_runs=2)
    assert len(data_of(page)["curves"][0]["runs"]) == 2 and "2 of 7 runs" in page


def test_a_series_read_a_chunk_of_runs_at_a_time_gives_the_same_curves(curves, monkeypatch):
    whole = _report_data.collect(curves, max_runs=4, curve_points=100)
    monkeypatch.setattr(_report_data, "SCAN_RECORDS", 500)  # 5,400 records: chunks of runs
    chunked = _report_data.collect(curves, max_runs=4, curve_points=100)
    for a, b in zip(whole["curves"], chunked["curves"], strict=True):
        assert [r["run"] for r in a["runs"]] == [r["run"] for r in b["runs"]]
        for ra, rb in zip(a["runs"], b["runs"]):
            np.testing.assert_array_equal(ra["steps"], rb["steps"])
            np.testing.assert_array_equal(ra["values"], rb["values"])
    assert whole["curves"][0]["runs_with_steps"] == 7
    assert chunked["curves"][0]["runs_with_steps"] is None  # it stopped once it had 4


class _Refs(html.parser.HTMLParser):
    """Every URL a tag's attributes name, and what a browser would fetch to draw the page."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[tuple[str, str, str]] = []
        self.inline_scripts = 0

    def handle_starttag(self, tag, attrs):
        for k, v in attrs:
            if k in ("src", "href", "data", "poster", "srcset", "action") and v is not None:
                self.urls.append((tag, k, v))
        if tag == "script" and not dict(attrs).get("src"):
            self.inline_scripts += 1


def test_the_page_needs_no_network(sweep, curves, tmp_path):
    for store in (sweep, curves):
        _, page = write(store, tmp_path / "report.html", overwrite=True)
        refs = _Refs()
        refs.feed(page)
        remote = [u for u in refs.urls if re.match(r"\s*(https?:)?//", u[2], re.I)]
        assert remote == [], remote
        assert not [u for u in refs.urls if u[0] in ("script", "link", "img", "iframe")]
        assert "plotly.js v" in page and refs.inline_scripts == 4  # config, plotly, data, page
        assert not re.search(r"@import|url\(\s*['\"]?(https?:)?//", page.split("<script>")[0])


def test_an_empty_store_gives_a_page_that_says_so(tmp_path):
    store = runstore.open(tmp_path / "empty")
    store.writer().close()
    r, page = write(tmp_path / "empty", tmp_path / "report.html")
    assert r["plots"] == 0 and "Nothing to show yet" in page and "holds no records" in page


def test_a_sweep_not_started_shows_its_design_as_pending(tmp_path):
    store = runstore.open(tmp_path / "defined")
    store.define_experiments(runstore.grid(x=range(5)))
    r, page = write(store, tmp_path / "report.html")
    assert r["plots"] == 0 and r["experiments"] == 5
    assert '<div class="stat pending"><b>5</b><span>pending · 100.0%</span>' in page
    assert "none finished in the last 5 min 0 s" in page and "<section id=outcomes>" not in page


def test_names_are_text_on_the_page_never_markup(tmp_path):
    store = runstore.open(tmp_path / "names")
    name = '<img src="http://example.com/x.png">%{y}'
    with store.writer() as w:
        w.log_many(np.arange(5), **{name: np.arange(5.0)})
        w.log_many(7, np.arange(1, 50), **{name + "!": np.arange(49.0)})
    _, page = write(store, tmp_path / "report.html", title="<script>alert(1)</script>")
    refs = _Refs()
    refs.feed(page)
    assert not [u for u in refs.urls if u[0] == "img"], refs.urls
    assert "&lt;img src=&quot;http://example.com/x.png&quot;&gt;%{y}" in page
    assert "<title>&lt;script&gt;alert(1)&lt;/script&gt;</title>" in page
    assert [c["name"] for c in data_of(page)["curves"]] == [name + "!"]


# -- the command -----------------------------------------------------------------------------------


def run_cli(*args, **kw):
    return subprocess.run(
        [sys.executable, "-c", "import _runstore_cli, sys; sys.exit(_runstore_cli.main())", *args],
        capture_output=True,
        text=True,
        timeout=120,
        **kw,
    )


def test_the_command(sweep, tmp_path):
    out = tmp_path / "report.html"
    r = run_cli("report", str(sweep.path), "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert re.fullmatch(
        rf"{re.escape(str(out))}: 72 experiments, 11 plots, \d+\.\d MiB in \S+ s\n", r.stdout
    ), r.stdout
    assert r.stderr == ""  # no progress when stderr is not a terminal
    assert oct(out.stat().st_mode & 0o777) == oct(0o666 & ~_umask())
    before = out.read_bytes()
    r = run_cli("report", str(sweep.path), "-o", str(out))
    assert r.returncode == 5 and f"{out} exists; use --force (-f) to replace it" in r.stderr
    assert out.read_bytes() == before
    r = run_cli(
        "--no-progress", "report", str(sweep.path), "-o", str(out), "--force", "--title", "lr sweep"
    )
    assert r.returncode == 0, r.stderr
    assert "<title>lr sweep</title>" in out.read_text()
    assert "a seeded sample of" not in out.read_text()
    r = run_cli("report", str(sweep.path), "-o", str(out), "--force", "--sample", "30")
    assert r.returncode == 0, r.stderr
    assert "box plots of a seeded sample of 30 of the 72 experiments (seed 0)" in out.read_text()
    # Errors: the tool's exit codes, naming what was wrong.
    r = run_cli("report", str(tmp_path / "missing"), "-o", str(tmp_path / "m.html"))
    assert r.returncode == 3 and "runstore: report: NotFound:" in r.stderr, r.stderr
    (tmp_path / "notastore").mkdir()
    (tmp_path / "notastore" / "file").write_text("x")
    r = run_cli("report", str(tmp_path / "notastore"), "-o", str(tmp_path / "n.html"))
    assert r.returncode == 5 and "is not a runstore store" in r.stderr, r.stderr
    r = run_cli("report", str(sweep.path), "-o", str(Path(sweep.path) / "report.html"))
    assert r.returncode == 5 and "refusing to write the export inside the store" in r.stderr
    r = run_cli("report", str(sweep.path))
    assert r.returncode == 1 and "-o/--output" in r.stderr
    r = run_cli("report", str(sweep.path), "-o", str(tmp_path / "x.html"), "--max-points", "0")
    assert r.returncode == 1 and "--max-points: '0' is out of range" in r.stderr
    r = run_cli("report", str(sweep.path), "-o", str(tmp_path / "x.html"), "--sample", "0")
    assert r.returncode == 1 and "--sample: '0' is out of range" in r.stderr
    assert not (tmp_path / "m.html").exists() and not (tmp_path / "x.html").exists()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_progress_is_drawn_on_a_terminal_only(sweep, tmp_path):
    p, drawn = run_on_terminal("report", str(sweep.path), "-o", str(tmp_path / "tty.html"))
    assert p.returncode == 0
    assert b"\rrunstore report: reading" in drawn and drawn.endswith(b"\r"), drawn
    p = run_cli("report", str(sweep.path), "-o", str(tmp_path / "tty.html"), "-f", "--no-progress")
    assert p.returncode == 0 and p.stderr == ""


# -- drawn in a browser ----------------------------------------------------------------------------


@pytest.fixture
def browser(tmp_path):
    b = Browser(tmp_path / "chromium-profile")
    yield b
    b.close()


#: Each plot's box in the viewport and its kind; the page's width and the viewport's.
GEOMETRY = """JSON.stringify({
  plots: Array.from(document.querySelectorAll("div.plot")).map(function (e) {
    const r = e.getBoundingClientRect();
    return [r.left, r.top, r.width, r.height, e.dataset.fig, !!e.dataset.rendered];
  }),
  page: document.documentElement.scrollWidth, viewport: innerWidth,
  body: [document.body.dataset.plots, document.body.dataset.rendered, document.body.dataset.failed]
})"""


def check_drawn(tab: Tab, pixels: np.ndarray, least_visible: int) -> dict:
    """Every plot was drawn; the page is no wider than the viewport; each plot in the
    screenshot has its data drawn (many colours, and coloured pixels where an empty plot has
    only grey axes and labels)."""
    g = json.loads(tab.eval(GEOMETRY))
    plots, rendered, failed = g["body"]
    assert plots == rendered == str(len(g["plots"])) and failed == "0", g["body"]
    assert all(p[5] for p in g["plots"])
    assert g["page"] <= g["viewport"], f"the page is {g['page']} px wide in {g['viewport']}"
    h, w, _ = pixels.shape
    visible = 0
    for left, top, width, height, fig, _ in g["plots"]:
        assert width <= g["viewport"], (fig, width)
        if top < 0 or top + height > h:
            continue
        visible += 1
        region = pixels[int(top) : int(top + height), int(left) : int(left + width)]
        colours = len(np.unique(region.reshape(-1, 3), axis=0))
        # Axes, grid and labels are grey: the data is what is drawn in colour.
        spread = region.max(axis=-1).astype(np.int16) - region.min(axis=-1)
        coloured = int((spread > 40).sum())
        assert colours >= 40 and coloured > 200, (
            f"{fig} at {top:.0f}: {colours} colours, {coloured} coloured pixels"
        )
    assert visible >= least_visible, f"{visible} plots in the screenshot"
    return g


def near(pixels: np.ndarray, rgb: tuple[int, int, int], tol: int = 12) -> int:
    """How many pixels are within ``tol`` of colour ``rgb`` in every channel."""
    return int(np.all(np.abs(pixels.astype(np.int16) - rgb) <= tol, axis=-1).sum())


@needs_chromium
def test_the_sweep_page_draws_in_chromium_on_a_desktop_and_a_phone(sweep, tmp_path, browser):
    page = tmp_path / "sweep.html"
    write(sweep, page)
    desktop = browser.open(page, 1280, 900)
    # Every plot became an SVG with its data: scatter points, boxes, lines.
    dom = desktop.eval("document.documentElement.outerHTML")
    assert dom.count('class="main-svg"') >= 2 * 11
    assert len(re.findall(r'<path class="point"', dom)) >= 2 * 60  # two scatter plots of 60
    assert len(re.findall(r'class="box"', dom)) >= 4  # box plots' traces
    assert re.search(r'class="js-line"[^>]* d="M[-0-9.,LHV]{40,}', dom)  # lines of many vertices
    for tab, name, least in (
        (desktop, "report-sweep-1280x900", 2),
        (browser.open(page, 390, 844, mobile=True), "report-sweep-390x844", 1),
    ):
        pixels = tab.screenshot(name)
        check_drawn(tab, pixels, least)
        # The status bar and the lines of the plot over time: done green, failed red.
        assert near(pixels, DONE_GREEN) > 1500, near(pixels, DONE_GREEN)
        assert near(pixels, FAILED_RED) > 150, near(pixels, FAILED_RED)
    # Opening a failure shows its traceback.
    opened = desktop.eval(
        "document.querySelector('details.failure').open = true;"
        "document.querySelector('details.traceback').open = true;"
        "document.querySelector('details.traceback pre').getBoundingClientRect().height"
    )
    assert opened > 50


@needs_chromium
def test_the_curves_page_draws_in_chromium_and_its_controls_redraw(curves, tmp_path, browser):
    page = tmp_path / "curves.html"
    write(curves, page)
    tab = browser.open(page, 1280, 900)
    pixels = tab.screenshot("report-curves-1280x900")
    check_drawn(tab, pixels, 1)
    assert near(pixels, FIRST_RUN_BLUE, tol=20) > 300
    lines = "document.querySelectorAll('#rs-curves .scatterlayer .trace').length"
    assert tab.eval(lines) == 7  # every run (at most 10 are chosen at first)
    assert tab.eval("document.querySelectorAll('#rs-runs input:checked').length") == 7
    # One run only, then the other metric, then smoothing (a faint raw line under each).
    tab.eval(
        "document.getElementById('rs-none').click();"
        "const b = document.querySelector('#rs-runs input[value=\"long\"]');"
        "b.checked = true; b.dispatchEvent(new Event('change', {bubbles: true}))"
    )
    assert tab.eval(lines) == 1
    tab.eval(
        "const m = document.getElementById('rs-metric'); m.value = '1';"
        "m.dispatchEvent(new Event('change'))"
    )
    assert tab.eval("document.querySelector('#rs-curves .ytitle').textContent") == "reward"
    tab.eval(
        "const s = document.getElementById('rs-smooth'); s.value = '0.9';"
        "s.dispatchEvent(new Event('input'))"
    )
    assert tab.eval(lines) == 2
