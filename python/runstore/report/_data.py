"""What the report of a store shows (``runstore report``, :mod:`runstore.report`), computed from
the store in bounded memory; ``report._page`` draws it.

- The experiments' status: the summary of ``runstore status``
  (:func:`runstore.experiments._status.summary`), how many finished over time, the distribution
  of their run times, and the failures grouped by the line of their error that names it, each
  with its traceback.
- Each numeric scalar outcome: its distribution over every experiment, and against each
  parameter: a scatter of one seeded sample of at most ``max_points`` experiments (the same
  experiments in every scatter) for numeric parameters, box plots over every experiment (or
  the sample, below) for text and bool parameters and numeric ones of at most LEVELS distinct
  values.
- Each fixed-shape numeric array outcome: its 5, 25, 50, 75 and 95% quantiles and its mean at
  each index (at most BAND_POINTS evenly spaced ones), over every experiment that has it when
  they hold at most BAND_VALUES values, else over a seeded sample of experiments.
- Each numeric scalar series with records at steps other than 0 (training curves): the curves of
  the first ``max_runs`` runs that have such records, each thinned to at most ``curve_points``
  evenly spaced records.

Memory: the experiments are read a window at a time (``_windows.Experiments``: parameters,
status and the scalar outcomes the design places, one ``read_aligned`` of at most
``_windows.WINDOW_BYTES`` a window), twice when they are more than ``sample``: the first
pass keeps what is exact over every experiment but for histograms (counts, sums, extremes, the
summary of ``runstore status``, the failures) and the columns of a seeded sample of ``sample``
experiments; the second counts the histograms and the timeline, whose edges the first pass
found. Medians, the levels of parameters, box plots and scatter plots are of the sample (the
page says so when it is not every experiment). What stays between windows is the sample and
the ids as the runs of the design's read (about 24 bytes an experiment, no Python object per
experiment). A store whose design the core cannot place (none, or rows written by hand) is read
as one window, whole. An array outcome is read a chunk of the chosen experiments at a time
(about ``_table.CHUNK_BYTES`` of values) into a buffer of at most BAND_VALUES values. A scalar
series that is not an outcome the design places (curves) is read whole when it has at most
SCAN_RECORDS records, else a chunk of runs at a time (about SCAN_RECORDS records each). The
pages of the store's mapped segment files are released after each read.
"""

from __future__ import annotations

import math
import re
import time
import warnings
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from .._memory import release_mapped_pages
from .._version import __version__
from ..experiments import _records as ex
from ..experiments import _status
from ..export._table import CHUNK_BYTES, ExperimentTable
from . import _windows

if TYPE_CHECKING:
    from .._store import Store

#: Points of a scatter plot at most (a seeded sample of the experiments beyond).
MAX_POINTS = 2000
#: Runs whose curves the page holds at most, and records of each curve at most.
MAX_RUNS = 50
CURVE_POINTS = 1000
#: Seed of every sample the page draws (it says which).
SEED = 0
#: Experiments the report reads whole and holds at most (beyond: a window at a time, and a
#: seeded sample of this many for medians, box plots and scatter plots).
SAMPLE = _windows.SAMPLE
#: A numeric parameter of at most this many distinct values is drawn as box plots per value.
LEVELS = 8
#: Box plots per plot at most: the most frequent values of a parameter.
MAX_CATEGORIES = 30
#: Quantiles of the bands of array outcomes.
QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)
#: Values of one array outcome held for its quantiles at most (float64: 32 MiB).
BAND_VALUES = 4_000_000
#: Bytes of an array outcome's values whose quantiles are computed at a time, about.
QUANTILE_BYTES = 2 << 20
#: Index positions of an array outcome's band at most (evenly spaced beyond).
BAND_POINTS = 1000
#: Records of a scalar series read at a time, about.
SCAN_RECORDS = 2_000_000
#: Failures shown with their traceback at most: groups of one error line, examples per group,
#: and the characters kept of each traceback (its start and, where the error is, its end).
FAILURE_GROUPS = 50
FAILURE_EXAMPLES = 5
FAILURE_IDS = 100
TRACEBACK_HEAD, TRACEBACK_TAIL = 2048, 6144
#: Bins of a histogram.
BINS = 40
TIMELINE_BINS = 120

#: Called as progress(what, done, total) while the report is computed.
Progress = Callable[[str, int, int], None]


def _no_progress(what: str, done: int, total: int) -> None:
    pass


def collect(
    store: Store,
    *,
    max_points: int = MAX_POINTS,
    max_runs: int = MAX_RUNS,
    curve_points: int = CURVE_POINTS,
    seed: int = SEED,
    sample: int = SAMPLE,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """What the page of ``store`` shows: a dict of plain values and numpy arrays (see the module
    docstring). ``store`` is refreshed first."""
    for name, v, low in (
        ("max_points", max_points, 1),
        ("max_runs", max_runs, 0),
        ("curve_points", curve_points, 2),
        ("seed", seed, 0),
        ("sample", sample, 1),
    ):
        if not isinstance(v, int) or isinstance(v, bool) or v < low:
            raise ValueError(f"{name} must be an int of at least {low}, got {v!r}")
    progress = progress or _no_progress
    t0 = time.perf_counter()
    progress("reading the design and status", 0, 1)
    exps = _windows.Experiments(store, sample)
    table, infos = exps.table, exps.infos
    # In the order they were first logged, as to_pandas orders its columns.
    names = sorted(ex.outcome_names(store), key=lambda n: infos[n].get("first_logged", 0))
    series = {n: infos[n] for n in names}
    release_mapped_pages(store)
    model: dict[str, Any] = {
        "store": str(store.path),
        "generated": time.time(),
        "version": __version__,
        # Without a design, the table's experiments are the store's runs.
        "runs": None if table.has_design else table.n,
        "series": len(series),
        "seed": seed,
        "has_design": table.has_design,
        "experiments": table.n if table.has_design else 0,
    }
    scalars, arrays, skipped = _classify(series)
    exps.read_outcomes(scalars)
    picked = _windows.Sample(exps.n, seed, sample)
    status = _StatusStats(table, picked) if table.has_design and table.n else None
    outcomes = {n: _OutcomeStats() for n in exps.names}

    _first_pass(exps, picked, status, outcomes, progress)
    # A series whose every record is an experiment's step-0 record is an outcome read with the
    # columns; the others are scanned for their curves.
    for n in exps.names:
        if exps.present[n] != int(series[n]["count"]):
            del outcomes[n]
    run_order = _RunOrder(store, table)
    curves: list[dict[str, Any]] = []
    held: dict[str, np.ndarray] = {}  # outcomes scanned whole
    for k, name in enumerate(scalars):
        progress("reading scalar series", k, len(scalars))
        if name in outcomes:
            continue
        scan = _scan_scalar(store, name, series[name], table, run_order, max_runs, curve_points)
        if scan["curves"] is not None and max_runs:
            curves.append(scan["curves"])
        elif scan["curves"] is not None:
            skipped.append((name, "curves, and max_runs is 0"))
        else:
            held[name] = scan["column"]
            outcomes[name] = _OutcomeStats()
            outcomes[name].add(held[name], held[name][picked.positions])
    outcomes = {n: outcomes[n] for n in scalars if n in outcomes}  # in the order of the series
    _count_histograms(exps, picked, status, outcomes, held, progress)
    del held
    # Experiments whose outcomes are drawn: those done, or every one if none is (a store
    # without status records, or runs without a design); of the sample.
    rows = np.arange(len(picked))
    drawn = table.n
    if status is not None and status.summary.counts["done"]:
        rows = np.flatnonzero(status.sampled()[0])
        drawn = status.summary.counts["done"]
    if status is not None:
        model["status"] = status.result(store)
    model["outcomes"] = _outcomes_part(table, picked, outcomes, rows, drawn, max_points, seed)
    # What the columns held is let go before the array outcomes are read.
    rows = picked.positions[rows]
    del status, outcomes, picked
    exps.release()
    model["arrays"] = []
    for k, name in enumerate(arrays):
        progress("reading array outcomes", k, len(arrays))
        band = _band(store, name, series[name], table, rows, drawn, seed)
        if band is not None:
            model["arrays"].append(band)
    model["curves"] = curves
    model["skipped"] = skipped
    model["seconds"] = time.perf_counter() - t0
    return model


def _first_pass(
    exps: _windows.Experiments,
    picked: _windows.Sample,
    status: _StatusStats | None,
    outcomes: dict[str, _OutcomeStats],
    progress: Progress,
) -> None:
    """The first pass over the windows: what is exact over every experiment but for
    histograms (counts, sums, extremes, the summary, the failures), and the sample's
    columns."""
    for w in exps.windows(exps.names, params=_param_rows(picked, status is not None)):
        progress("reading the experiments", w.start, exps.n)
        rows = picked.rows(w.start, w.stop)
        if status is not None and w.status is not None:
            status.add(w, rows)
        for p, col in w.params_at(rows).items():
            picked.gather("param:" + p, col)
        for n, values in w.outcomes.items():
            outcomes[n].add(values, values[rows])


def _count_histograms(
    exps: _windows.Experiments,
    picked: _windows.Sample,
    status: _StatusStats | None,
    outcomes: dict[str, _OutcomeStats],
    held: dict[str, np.ndarray],
    progress: Progress,
) -> None:
    """The histograms' edges, then their counts: from the sample when it is every experiment,
    else in a second pass over the windows (and the outcomes ``held`` whole)."""
    if status is not None:
        status.set_edges()
    for o in outcomes.values():
        o.set_edges()
    if picked.whole:
        if status is not None:
            status.count(*status.sampled())
        for o in outcomes.values():
            o.count(o.sample)
        return
    read = [n for n in exps.names if n in outcomes]
    for w in exps.windows(read, status=[ex.STATE, ex.FINISHED, ex.SECONDS]):
        progress("counting the experiments", w.start, exps.n)
        if status is not None and w.status is not None:
            status.count(*_StatusStats.of(w.status))
        for n in read:
            outcomes[n].count(w.outcomes[n])
    for n, values in held.items():
        outcomes[n].count(values)


def _param_rows(picked: _windows.Sample, failures: bool) -> _windows.ParamRows:
    """The experiments of a window whose parameters are read: those sampled, and the failed
    ones (for the failures' examples) if ``failures``."""

    def rows(start: int, stop: int, st: _status.StatusArrays) -> np.ndarray:
        if picked.whole:
            return np.arange(stop - start)
        failed = np.flatnonzero(st.is_state("failed")) if failures else []
        return np.union1d(picked.rows(start, stop), failed).astype(np.int64)

    return rows


# -- which series are what -----------------------------------------------------------------------


def _classify(
    series: dict[str, dict[str, Any]],
) -> tuple[list[str], list[str], list[tuple[str, str]]]:
    """(numeric scalar series, fixed-shape numeric array series, [(name, why not drawn)])."""
    scalars, arrays, skipped = [], [], []
    for name, info in series.items():
        dtype = info["dtype"]
        if dtype in ("string", "bytes"):
            skipped.append((name, f"{dtype} values"))
        elif info["variable_shape"]:
            skipped.append((name, "arrays of varying shapes"))
        elif tuple(info["shape"]) == ():
            scalars.append(name)
        elif 0 in tuple(info["shape"]):
            skipped.append((name, f"arrays of shape {tuple(info['shape'])}, without elements"))
        else:
            arrays.append(name)
    return scalars, arrays, skipped


class _RunOrder:
    """Every run id of the store in the order curves are listed: the experiments in design
    order, then the other runs. Made when first asked for (it reads the run column of every
    block, which a store without curves never needs)."""

    def __init__(self, store: Store, table: ExperimentTable) -> None:
        self._store = store
        self._table = table
        self._index: ex.ExperimentIndex | None = None

    def __call__(self) -> ex.ExperimentIndex:
        if self._index is None:
            if self._table.has_design:
                runs = self._store._core.runs()
                release_mapped_pages(self._store)
                ids = self._table.experiment_index().ids.tolist()
                known = set(ids)
                runs = ids + [r for r in runs if r not in known]
                ints = all(isinstance(r, int) for r in runs)
                self._index = ex.ExperimentIndex(np.array(runs, dtype=np.int64 if ints else object))
            else:
                self._index = self._table.index  # every run, as the table read them
        return self._index


# -- the status ----------------------------------------------------------------------------------


class _StatusStats:
    """The status part of the page, gathered a window at a time: the summary of ``runstore
    status``, the failures, and the timeline of finished experiments and the run times of the
    done ones (their extremes in the first pass, their counts once the edges are known)."""

    def __init__(self, table: ExperimentTable, sample: _windows.Sample) -> None:
        self.table = table
        self.sample = sample
        self.summary = _status.Summary(top=5)
        self.failures = _Failures(table)
        self.finished = _windows.Extremes()  # of the ended experiments
        self.seconds = _windows.Extremes()  # of the done ones
        self.timeline: dict[str, Any] | None = None
        self.seconds_hist: dict[str, Any] | None = None

    @staticmethod
    def of(st: _status.StatusArrays) -> tuple[np.ndarray, ...]:
        """(done, failed, finished, seconds) of ``st``."""
        return st.is_state("done"), st.is_state("failed"), st.finished, st.seconds

    def add(self, w: _windows.Window, rows: np.ndarray | slice) -> None:
        st = w.status
        assert st is not None
        self.summary.add(st)
        self.failures.add(w)
        fields = self.of(st)
        done, failed, finished, seconds = fields
        self.finished.add(finished[done | failed])
        self.seconds.add(seconds[done])
        for key, values in zip(("done", "failed", "finished", "seconds"), fields):
            self.sample.gather("status:" + key, values[rows])

    def sampled(self) -> tuple[np.ndarray, ...]:
        """(done, failed, finished, seconds) of the sampled experiments."""
        return tuple(
            self.sample.column("status:" + k) for k in ("done", "failed", "finished", "seconds")
        )

    def set_edges(self) -> None:
        f = self.finished
        if f.n:
            t_first = self.summary.first_start
            t0 = min(f.lo, t_first)
            t1 = max(f.hi, t0 + 1e-3)
            edges = np.linspace(t0, t1, TIMELINE_BINS + 1)
            zeros = np.zeros(len(edges), dtype=np.int64)
            self.timeline = {"t": edges, "done": zeros, "failed": zeros.copy()}
        if self.seconds.n:
            done, _, _, seconds = self.sampled()
            self.seconds_hist = _edges(self.seconds, seconds[done])

    def count(
        self, done: np.ndarray, failed: np.ndarray, finished: np.ndarray, seconds: np.ndarray
    ) -> None:
        """Adds experiments to the timeline's and the run times' counts."""
        if self.timeline is not None:
            ended = (done | failed) & np.isfinite(finished)
            edges = self.timeline["t"]
            for key, state in (("done", done), ("failed", failed)):
                self.timeline[key] += np.searchsorted(
                    np.sort(finished[ended & state]), edges, "right"
                )
        if self.seconds_hist is not None:
            _count(self.seconds_hist, seconds[done])

    def result(self, store: Store) -> dict[str, Any]:
        summary = self.summary.result(store)
        out: dict[str, Any] = {"summary": summary, "text": _status.format_summary(summary)}
        if self.timeline is not None:
            out["timeline"] = self.timeline
        if self.seconds_hist is not None:
            out["seconds"] = self.seconds_hist
        out["failures"] = self.failures.result()
        return out


#: Numbers in an error line, which group by what they say rather than by their values
#: ("lr=0.1 diverged" and "lr=0.3 diverged" are one error).
_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:0x[0-9a-fA-F]+|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)")


class _Failures:
    """Failed experiments grouped by the line of their error that names it (its numbers left
    out), most frequent first, with the tracebacks and parameters of the first few of each,
    gathered a window at a time. An error text is grouped once a window, however many
    experiments share it."""

    def __init__(self, table: ExperimentTable) -> None:
        self.table = table
        self.total = 0
        # error line -> [count, positions of the first FAILURE_IDS, the first examples]
        self.groups: dict[str, list[Any]] = {}

    def add(self, w: _windows.Window) -> None:
        st = w.status
        assert st is not None
        failed = np.flatnonzero(st.is_state("failed"))
        self.total += len(failed)
        line_of: dict[int, str] = {}
        for i, code in zip(failed.tolist(), st.errors[failed].tolist()):
            if code not in line_of:
                error = st.error_names[code] if code >= 0 else None
                line = _status._first_line(error) or "(no error text)"
                line_of[code] = _NUMBER.sub("…", line)
            group = self.groups.setdefault(line_of[code], [0, [], []])
            group[0] += 1
            if len(group[1]) < FAILURE_IDS:
                group[1].append(w.start + i)
            if len(group[2]) < FAILURE_EXAMPLES:
                text, cut = _cut(st.error_at(i))
                host = st.host_at(i)
                group[2].append(
                    {
                        "experiment": _plain(self.table.index.take([w.start + i])[0]),
                        "attempt": int(st.attempt[i]),
                        "host": None if not isinstance(host, str) else host,
                        "params": _params_of(w.params_at(np.array([i])), 0),
                        "traceback": text,
                        "cut": cut,
                    }
                )

    def result(self) -> dict[str, Any]:
        ordered = sorted(self.groups.items(), key=lambda kv: -kv[1][0])
        out = [
            {
                "error": line,
                "count": count,
                "ids": [_plain(e) for e in self.table.index.take(positions)],
                "examples": examples,
            }
            for line, (count, positions, examples) in ordered[:FAILURE_GROUPS]
        ]
        return {"total": self.total, "groups": out, "group_count": len(self.groups)}


def _cut(error: Any) -> tuple[str, int]:
    """A traceback as the page shows it: its start and its end, and how many characters of the
    middle are left out."""
    if not isinstance(error, str):
        return "", 0
    if len(error) <= TRACEBACK_HEAD + TRACEBACK_TAIL:
        return error, 0
    cut = len(error) - TRACEBACK_HEAD - TRACEBACK_TAIL
    return error[:TRACEBACK_HEAD] + "\n...\n" + error[-TRACEBACK_TAIL:], cut


def _params_of(params: dict[str, ex.Column], i: int) -> dict[str, Any]:
    out = {}
    for p, col in params.items():
        if col.present[i]:
            out[p] = _plain(col.values[i])
    return out


def _plain(v: Any) -> Any:
    """A value as JSON holds it (an int beyond 2**53 as text, a non-finite float as text)."""
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v) if abs(int(v)) < 2**53 else str(int(v))
    if isinstance(v, (float, np.floating)):
        return float(v) if math.isfinite(v) else str(float(v))
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return str(v)


def _log_scale(lo: float, hi: float, median: float) -> bool:
    """Whether finite values from ``lo`` to ``hi`` of that ``median`` read better on a
    logarithmic axis: all positive, spanning two orders of magnitude or more, and crowded at
    the low end of a linear one (their median in its first tenth), as log-uniform learning
    rates are and uniform ones are not."""
    if lo <= 0 or hi / lo < 100:
        return False
    return bool((median - lo) < 0.1 * (hi - lo))


def _log_scale_of(values: np.ndarray) -> bool:
    """:func:`_log_scale` of finite ``values``."""
    if not len(values):
        return False
    return _log_scale(float(values.min()), float(values.max()), float(np.median(values)))


def _edges(extremes: _windows.Extremes, sample: np.ndarray) -> dict[str, Any]:
    """A histogram of BINS bins from the least to the greatest finite value (``extremes``),
    on a logarithmic scale if :func:`_log_scale` says so of the median of ``sample``'s
    finite values (of every value, or of a sample of them); its counts zero until
    :func:`_count`."""
    lo, hi = extremes.lo, extremes.hi
    finite = sample[np.isfinite(sample)]
    log = bool(len(finite)) and _log_scale(lo, hi, float(np.median(finite)))
    if log:
        edges = np.geomspace(lo, hi, BINS + 1)
    elif hi > lo:
        edges = np.linspace(lo, hi, BINS + 1)
    else:  # one value: one bin around it
        half = max(abs(lo) * 1e-6, 0.5)
        edges = np.array([lo - half, hi + half])
    return {"edges": edges, "counts": np.zeros(len(edges) - 1, dtype=np.int64), "log": log}


def _count(hist: dict[str, Any], values: np.ndarray) -> None:
    """Adds the finite ``values`` to the counts of ``hist`` (of :func:`_edges`)."""
    hist["counts"] += np.histogram(values[np.isfinite(values)], bins=hist["edges"])[0]


# -- scalar series: outcomes and curves ----------------------------------------------------------


class _OutcomeStats:
    """A scalar outcome's distribution over every experiment: its count, mean and extremes
    (exact, the first pass), its values at the sampled experiments (its median and box
    plots), and its histogram (:meth:`set_edges`, then :meth:`count`)."""

    def __init__(self) -> None:
        self.extremes = _windows.Extremes()
        self._parts: list[np.ndarray] = []
        self.hist: dict[str, Any] | None = None

    def add(self, values: np.ndarray, sampled: np.ndarray) -> None:
        self.extremes.add(values)
        self._parts.append(sampled)

    @property
    def sample(self) -> np.ndarray:
        if len(self._parts) != 1:
            self._parts = [np.concatenate(self._parts) if self._parts else np.zeros(0)]
        return self._parts[0]

    def set_edges(self) -> None:
        if self.extremes.n:
            self.hist = _edges(self.extremes, self.sample)

    def count(self, values: np.ndarray) -> None:
        if self.hist is not None:
            _count(self.hist, values)


def _scan_chunks(
    store: Store, name: str, count: int, run_order: _RunOrder
) -> Iterator[dict[str, np.ndarray]]:
    """The records of series ``name``: one scan if it has at most SCAN_RECORDS, else one per
    chunk of runs (in ``run_order``) of about SCAN_RECORDS records."""
    if count <= SCAN_RECORDS:
        yield store._core.scan(name)
        release_mapped_pages(store)
        return
    runs = run_order().ids
    per = max(1, len(runs) * SCAN_RECORDS // count)
    for start in range(0, len(runs), per):
        yield store._core.scan(name, runs=runs[start : start + per].tolist())
        release_mapped_pages(store)


def _scan_scalar(
    store: Store,
    name: str,
    info: dict[str, Any],
    table: ExperimentTable,
    run_order: _RunOrder,
    max_runs: int,
    curve_points: int,
) -> dict[str, Any]:
    """A scalar series as an outcome (``column``: its step-0 value per experiment, NaN where
    none) or, if it has records at steps other than 0, as ``curves``."""
    column = np.full(table.n, np.nan)
    runs: list[dict[str, Any]] = []
    with_steps = 0  # runs with records at other steps than 0, among those read
    is_curve = complete = False
    for d in _scan_chunks(store, name, int(info["count"]), run_order):
        step = d["step"]
        value = np.asarray(d["value"], dtype=np.float64)
        other = step != 0
        if not is_curve and table.n:
            zero = ~other
            pos = table.experiment_index().positions(d["run"][zero])
            ok = pos >= 0
            column[pos[ok]] = value[zero][ok]
        if not other.any():
            continue
        is_curve = True
        if len(runs) >= max_runs:
            break  # the curves shown are read; the runs after them are not counted
        order = run_order()
        rpos = order.positions(d["run"])
        curve_runs = np.unique(rpos[other])
        with_steps += len(curve_runs)
        take = curve_runs[: max_runs - len(runs)]
        runs += _curves(order, rpos, step, value, take, curve_points)
    else:
        complete = True
    if not is_curve:
        return {"column": column, "curves": None}
    return {
        "column": None,
        "curves": {
            "name": name,
            "runs": runs,
            # How many runs have such records, when the whole series was read.
            "runs_with_steps": with_steps if complete else None,
            "count": int(info["count"]),
        },
    }


def _curves(
    run_order: ex.ExperimentIndex,
    rpos: np.ndarray,
    step: np.ndarray,
    value: np.ndarray,
    take: np.ndarray,
    points: int,
) -> list[dict[str, Any]]:
    """The curve (records in step order, thinned to ``points``) of each run at the positions
    ``take`` of ``run_order``."""
    sel = np.isin(rpos, take)
    order = np.lexsort((step[sel], rpos[sel]))
    rp, st, va = rpos[sel][order], step[sel][order], value[sel][order]
    cuts = np.flatnonzero(np.diff(rp)) + 1
    out = []
    for r, s, v in zip(np.split(rp, cuts), np.split(st, cuts), np.split(va, cuts)):
        n = len(s)
        if n > points:
            keep = np.unique(np.linspace(0, n - 1, points).round().astype(np.int64))
            s, v = s[keep], v[keep]
        v = np.where(np.isfinite(v), v, np.nan)
        out.append({"run": _plain(run_order.ids[r[0]]), "steps": s, "values": v, "count": n})
    return out


# -- scalar outcomes against the parameters ------------------------------------------------------


def _outcomes_part(
    table: ExperimentTable,
    sample: _windows.Sample,
    outcomes: dict[str, _OutcomeStats],
    rows: np.ndarray,
    drawn: int,
    max_points: int,
    seed: int,
) -> dict[str, Any]:
    """Every scalar outcome's distribution and plots against the parameters; ``rows`` are the
    sampled experiments (positions in ``sample``) that the scatter plots draw from, ``drawn``
    how many experiments they stand for."""
    rng = np.random.default_rng(seed)
    scatter = rows if len(rows) <= max_points else np.sort(rng.choice(rows, max_points, False))
    params = []
    for p in table.param_names:
        params.append(_param(p, sample.column("param:" + p), scatter))
    out = []
    for name, o in outcomes.items():
        values = o.sample
        finite = np.isfinite(values)
        e = o.extremes
        entry: dict[str, Any] = {"name": name, "n": e.n}
        if e.n:
            v = values[finite]
            entry.update(
                # Of every value; a sample's mean would differ in its last bits.
                mean=float(v.mean()) if sample.whole else e.total / e.n,
                min=e.lo,
                max=e.hi,
                median=float(np.median(v)) if len(v) else None,
                hist=o.hist,
            )
            entry["log"] = entry["hist"]["log"]
        with np.errstate(over="ignore"):  # beyond float32: not drawn, as NaN and infinities
            at = values[scatter].astype(np.float32)
        entry["sample"] = np.where(np.isfinite(at), at, np.float32(np.nan))
        entry["boxes"] = {
            p["name"]: _boxes(values, p) for p in params if p["kind"] != "numeric" and finite.any()
        }
        out.append(entry)
    for p in params:
        p.pop("_codes", None)
    return {
        "sample": {
            "n": int(len(scatter)),
            "of": int(drawn),
            "seed": seed,
            "ids": [str(i) for i in table.index.take(sample.positions[scatter])],
        },
        # The experiments that medians, levels and box plots are of, when not every one.
        "quantiles_of": None if sample.whole else {"n": len(sample), "of": sample.n},
        "params": params,
        "outcomes": out,
    }


def _param(name: str, col: ex.Column, sample: np.ndarray) -> dict[str, Any]:
    """A parameter as the plots use it, from its Column ``col`` of the sampled experiments:
    "numeric" (its values at the scatter's rows ``sample``, NaN where absent) or "levels"
    (codes of its values, for box plots)."""
    present = col.present
    values = col.values
    numeric = values.dtype.kind in "iuf"
    entry: dict[str, Any] = {"name": name, "dtype": col.dtype}
    if numeric:
        distinct = np.unique(values[present])
        distinct = distinct[~np.isnan(distinct)] if distinct.dtype.kind == "f" else distinct
        if len(distinct) > LEVELS:
            v = values[sample].astype(np.float64)
            v[~present[sample]] = np.nan
            exact = np.array_equal(v.astype(np.float32).astype(np.float64), v, equal_nan=True)
            entry.update(
                kind="numeric",
                sample=v.astype(np.float32) if exact else v,
                log=_log_scale_of(values[present].astype(np.float64)),
            )
            return entry
    # Levels: text, bool, or few numbers; the most frequent MAX_CATEGORIES of them.
    keys = values[present]
    if values.dtype == object:
        keys = np.array([str(k) for k in keys.tolist()], dtype=object)
    levels, inverse, counts = np.unique(keys, return_inverse=True, return_counts=True)
    kept = np.arange(len(levels))
    if len(levels) > MAX_CATEGORIES:
        kept = np.sort(np.argsort(-counts, kind="stable")[:MAX_CATEGORIES])
    remap = np.full(len(levels), -1, dtype=np.int64)
    remap[kept] = np.arange(len(kept))
    codes = np.full(len(values), -1, dtype=np.int64)
    codes[present] = remap[inverse]
    entry.update(
        kind="levels",
        levels=[_label(levels[k]) for k in kept.tolist()],
        level_count=int(len(levels)),
        _codes=codes,
    )
    return entry


def _label(v: Any) -> str:
    if isinstance(v, (bool, np.bool_)):
        return "true" if v else "false"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        return repr(float(v))
    return str(v)


def _boxes(values: np.ndarray, param: dict[str, Any]) -> dict[str, Any]:
    """Box statistics of ``values`` (finite ones) per level of ``param``: quartiles, whiskers at
    the furthest values within 1.5 IQR of the box, mean and count."""
    codes = param["_codes"]
    ok = np.isfinite(values) & (codes >= 0)
    stats = {k: [] for k in ("q1", "median", "q3", "lo", "hi", "mean", "n")}
    order = np.argsort(codes[ok], kind="stable")
    c, v = codes[ok][order], values[ok][order]
    bounds = np.searchsorted(c, np.arange(len(param["levels"]) + 1))
    for k in range(len(param["levels"])):
        g = v[bounds[k] : bounds[k + 1]]
        if not len(g):
            for s in stats.values():
                s.append(None)
            stats["n"][-1] = 0
            continue
        q1, med, q3 = np.quantile(g, (0.25, 0.5, 0.75))
        iqr = q3 - q1
        lo = g[g >= q1 - 1.5 * iqr].min()
        hi = g[g <= q3 + 1.5 * iqr].max()
        for key, x in (("q1", q1), ("median", med), ("q3", q3), ("lo", lo), ("hi", hi)):
            stats[key].append(float(x))
        stats["mean"].append(float(g.mean()))
        stats["n"].append(int(len(g)))
    return stats


# -- array outcomes: quantile bands --------------------------------------------------------------


def _band(
    store: Store,
    name: str,
    info: dict[str, Any],
    table: ExperimentTable,
    rows: np.ndarray,
    of: int,
    seed: int,
) -> dict[str, Any] | None:
    """The quantiles and mean at each index of an array outcome, over the experiments ``rows``
    (positions; a seeded sample of them when they would hold more than BAND_VALUES values),
    which stand for ``of`` experiments."""
    shape = tuple(info["shape"])
    m = int(np.prod(shape, dtype=np.int64))
    positions = np.arange(m)
    if m > BAND_POINTS:
        positions = np.unique(np.linspace(0, m - 1, BAND_POINTS).round().astype(np.int64))
    cap = max(1, BAND_VALUES // len(positions))
    chosen = rows
    if len(rows) > cap:
        chosen = np.sort(np.random.default_rng(seed).choice(rows, cap, replace=False))
    buf = np.full((len(chosen), len(positions)), np.nan)
    got = np.zeros(len(chosen), dtype=bool)
    row_bytes = np.dtype(info["dtype"]).itemsize * m
    batch = max(1, CHUNK_BYTES // row_bytes)
    for start in range(0, len(chosen), batch):
        part = chosen[start : start + batch]
        ids = table.index.take_array(part)
        d = store._core.scan(name, runs=ids.tolist(), steps=(0, 1))
        if len(d["run"]):
            # Placed by the part's own ids: no index of every experiment's id is built.
            at = ex.ExperimentIndex(ids).positions(d["run"])
            ok = at >= 0
            values = np.asarray(d["value"]).reshape(len(at), m)[:, positions]
            buf[start + at[ok]] = values[ok]
            got[start + at[ok]] = True
        del d
        release_mapped_pages(store)
    used = buf if got.all() else buf[got]
    del buf
    if not len(used):
        return None
    # A few index positions at a time, each copied out contiguous: the work of nanmean and of
    # the quantiles' partitions is that copy's, not a copy of up to BAND_VALUES values.
    mean = np.empty(len(positions))
    q = np.empty((len(QUANTILES), len(positions)))
    width = max(1, QUANTILE_BYTES // (8 * len(used)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an index where every value is NaN
        for j in range(0, len(positions), width):
            part = np.ascontiguousarray(used[:, j : j + width])
            mean[j : j + width] = np.nanmean(part, axis=0)
            quantile = np.nanquantile if np.isnan(part).any() else np.quantile
            q[:, j : j + width] = quantile(part, QUANTILES, axis=0, overwrite_input=True)
    experiments = len(used)
    del used
    return {
        "name": name,
        "shape": list(shape),
        "dtype": info["dtype"],
        "index": positions,
        "quantiles": {f"{int(p * 100)}": q[k].astype(np.float32) for k, p in enumerate(QUANTILES)},
        "mean": mean.astype(np.float32),
        "experiments": int(experiments),
        "of": int(of),
        "sampled": bool(len(chosen) < of),
        "thinned": bool(len(positions) < m),
    }
