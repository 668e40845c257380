"""A store's results as one HTML page: ``runstore report STORE -o report.html``.

    import runstore.report
    runstore.report.write("results/sweep", "report.html")    # or an open Store

The page is one file that opens without a network (plotly.js and the page's script are
inline, about 5 MB of the file) and shows, as far as the store has them (``report._data``
says how each is computed, in bounded memory):

- the status of the experiments, as ``runstore status`` computes it, with how many finished
  over time and their run times;
- the failures, grouped by their error, with their tracebacks (collapsed);
- each scalar outcome's distribution, and against each parameter: scatter plots for numeric
  parameters (a seeded sample of at most ``max_points`` experiments, said on the page), box
  plots for text and bool parameters and numeric ones of few values;
- each array outcome as quantile bands (5-95%, 25-75%, median) and mean over its index;
- the curves of series logged at many steps (``w.log(run, step=..., loss=...)``), with a choice
  of metric and runs, smoothing and a log scale.

A store with none of these (no records yet) gives a page that says so. Needs plotly
(``pip install plotly``). Imported on its own: ``import runstore`` does not load it, and in the
package only the command ``runstore report`` (:mod:`runstore.commands.report`) imports it.
"""

from __future__ import annotations

import os
import time
from typing import Any, TextIO

import runstore

from .. import _progress
from ..export._output import ExportFile
from . import _data as _report_data
from . import _page as _report_page

__all__ = ["write"]


def write(
    store: runstore.Store | str | os.PathLike[str],
    path: str | os.PathLike[str],
    *,
    overwrite: bool = True,
    title: str | None = None,
    max_points: int = _report_data.MAX_POINTS,
    max_runs: int = _report_data.MAX_RUNS,
    curve_points: int = _report_data.CURVE_POINTS,
    seed: int = _report_data.SEED,
    sample: int = _report_data.SAMPLE,
    progress: bool = True,
) -> dict[str, Any]:
    """Writes the report of ``store`` (a Store, or the path of one, opened read-only) to the
    HTML file ``path``.

    ``max_points``: points of a scatter plot at most (a sample drawn with ``seed`` beyond);
    ``max_runs``: runs whose curves the page holds; ``curve_points``: records of a curve at most
    (evenly spaced steps beyond). ``sample``: experiments the report reads whole and holds at
    most; beyond, it reads them a window at a time, and medians, parameters' values, box plots
    and scatter plots are of a seeded sample of this many (counts, means, extremes, histograms,
    the timeline and the failures stay exact), as the page says. ``title``: the page's title
    (default: the store's path).
    ``progress``: say what is being read on stderr while it runs, when stderr is a terminal.

    The file is written as the exports write theirs (``python/README.md``, "Exports"): whole or
    not at all, mode 0666 minus the umask, never inside the store; an existing file is replaced
    unless ``overwrite=False`` (FileExistsError). Returns ``{"path", "bytes", "plots",
    "experiments", "seconds"}``.

    Raises FileNotFoundError for a missing store, ValueError for a path that is not a store or
    an argument out of range, CorruptionError or OSError for a damaged store, OSError naming
    ``path`` if it cannot be written, ImportError if plotly is not installed.
    """
    t0 = time.perf_counter()
    _report_page.plotly_js()  # ImportError before anything is read, if plotly is missing
    if not isinstance(store, runstore.Store):
        store = runstore.open(store, mode="r")
    bar = _Progress(progress)
    try:
        model = _report_data.collect(
            store,
            max_points=max_points,
            max_runs=max_runs,
            curve_points=curve_points,
            seed=seed,
            sample=sample,
            progress=bar,
        )
        bar("writing the page", 0, 1)
        with ExportFile(path, store_path=store.path, overwrite=overwrite) as out:
            written = 0
            for piece in _report_page.pages(model, title):
                out.file.write(piece)
                written += len(piece)
            out.commit()
    finally:
        bar.close()
    return {
        "path": os.fspath(path),
        "bytes": written,
        "plots": plot_count(model),
        "experiments": model["experiments"],
        "seconds": time.perf_counter() - t0,
    }


def plot_count(model: dict[str, Any]) -> int:
    """How many plots the page of ``model`` draws."""
    st = model.get("status") or {}
    oc = model["outcomes"]
    return (
        ("timeline" in st)
        + ("seconds" in st)
        + len(oc["outcomes"]) * (1 + len(oc["params"]))
        + len(model["arrays"])
        + (1 if model["curves"] else 0)
    )


class _Progress:
    """Says on stderr what is being read (a :class:`runstore._progress.Line`), as
    ``runstore report: reading scalar series 3/12 (1.2 s)``."""

    def __init__(self, enabled: bool, stream: TextIO | None = None) -> None:
        self.line = _progress.Line("runstore report", enabled, stream)

    def __call__(self, what: str, done: int, total: int) -> None:
        count = f" {done + 1}/{total}" if total > 1 else ""
        self.line.show(f"{what}{count} ({self.line.elapsed():.1f} s)", force=done == 0)

    def close(self) -> None:
        self.line.close()
