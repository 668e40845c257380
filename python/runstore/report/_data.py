"""What the report of a store shows (``runstore report``, :mod:`runstore.report`), computed from
the store in bounded memory; ``report._page`` draws it.

- The experiments' status: the summary of ``runstore status``
  (:func:`runstore.experiments._status.summary`), how many finished over time, the distribution
  of their run times, and the failures grouped by the line of their error that names it, each
  with its traceback.
- Each numeric scalar outcome: its distribution over every experiment, and against each
  parameter: a scatter of one seeded sample of at most ``max_points`` experiments (the same
  experiments in every scatter) for numeric parameters, box plots over every experiment for
  text and bool parameters and numeric ones of at most LEVELS distinct values.
- Each fixed-shape numeric array outcome: its 5, 25, 50, 75 and 95% quantiles and its mean at
  each index (at most BAND_POINTS evenly spaced ones), over every experiment that has it when
  they hold at most BAND_VALUES values, else over a seeded sample of experiments.
- Each numeric scalar series with records at steps other than 0 (training curves): the curves of
  the first ``max_runs`` runs that have such records, each thinned to at most ``curve_points``
  evenly spaced records.

Memory: the parameters, the status (codes and numbers, ``_status.StatusArrays``, read once) and
the scalar outcomes (placed on the experiments by the core) are arrays of one entry per
experiment, and the ids the runs of the design's read (``_table.ExperimentTable`` with
``ids=False``): no Python object per experiment. An array outcome
is read a chunk of the chosen experiments at a time (about ``_table.CHUNK_BYTES`` of values) into
a buffer of at most BAND_VALUES values. A scalar series is read whole when it has at most
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

if TYPE_CHECKING:
    from .._store import Store

#: Points of a scatter plot at most (a seeded sample of the experiments beyond).
MAX_POINTS = 2000
#: Runs whose curves the page holds at most, and records of each curve at most.
MAX_RUNS = 50
CURVE_POINTS = 1000
#: Seed of every sample the page draws (it says which).
SEED = 0
#: A numeric parameter of at most this many distinct values is drawn as box plots per value.
LEVELS = 8
#: Box plots per plot at most: the most frequent values of a parameter.
MAX_CATEGORIES = 30
#: Quantiles of the bands of array outcomes.
QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)
#: Values of one array outcome held for its quantiles at most (float64: 32 MiB).
BAND_VALUES = 4_000_000
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
    progress: Progress | None = None,
) -> dict[str, Any]:
    """What the page of ``store`` shows: a dict of plain values and numpy arrays (see the module
    docstring). ``store`` is refreshed first."""
    for name, v, low in (
        ("max_points", max_points, 1),
        ("max_runs", max_runs, 0),
        ("curve_points", curve_points, 2),
        ("seed", seed, 0),
    ):
        if not isinstance(v, int) or isinstance(v, bool) or v < low:
            raise ValueError(f"{name} must be an int of at least {low}, got {v!r}")
    progress = progress or _no_progress
    t0 = time.perf_counter()
    progress("reading the design and status", 0, 1)
    # The ids as the runs of the design's read (no Python object per experiment), and the
    # parameters; the status is read once, as codes and numbers (StatusArrays).
    table = ExperimentTable(store, names=[], ids=False, status=False)
    infos = ex.reserved_series(store)
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
    status = _status.StatusArrays.read(store) if table.has_design and table.n else None
    if status is not None:
        model["status"] = _status_part(store, table, status)
    # Experiments whose outcomes are drawn: those done, or every one if none is (a store
    # without status records, or runs without a design).
    rows = np.arange(table.n)
    if status is not None and status.is_state("done").any():
        rows = np.flatnonzero(status.is_state("done"))
    del status

    scalars, arrays, skipped = _classify(series)
    run_order = _RunOrder(store, table)
    outcomes: dict[str, np.ndarray] = {}
    curves: list[dict[str, Any]] = []
    # Placed on the experiments by the core: a series whose every record is there (the step-0
    # record of an experiment) is an outcome read; the others are scanned for their curves.
    aligned = _aligned_outcomes(store, table, infos, scalars)
    for k, name in enumerate(scalars):
        progress("reading scalar series", k, len(scalars))
        if name in aligned:
            outcomes[name] = aligned.pop(name)
            continue
        scan = _scan_scalar(store, name, series[name], table, run_order, max_runs, curve_points)
        if scan["curves"] is not None and max_runs:
            curves.append(scan["curves"])
        elif scan["curves"] is not None:
            skipped.append((name, "curves, and max_runs is 0"))
        else:
            outcomes[name] = scan["column"]
    model["outcomes"] = _outcomes_part(table, outcomes, rows, max_points, seed)
    model["arrays"] = []
    for k, name in enumerate(arrays):
        progress("reading array outcomes", k, len(arrays))
        band = _band(store, name, series[name], table, rows, seed)
        if band is not None:
            model["arrays"].append(band)
    model["curves"] = curves
    model["skipped"] = skipped
    model["seconds"] = time.perf_counter() - t0
    return model


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


def _status_part(store: Store, table: ExperimentTable, st: _status.StatusArrays) -> dict[str, Any]:
    """The summary of ``runstore status`` (and its text), the experiments finished over time,
    the run times of the done ones, and the failures, from the status as arrays (codes and
    numbers; no Python object per experiment)."""
    summary = _status.summary(store, top=5, arrays=st)
    out: dict[str, Any] = {"summary": summary, "text": _status.format_summary(summary)}
    done, failed = st.is_state("done"), st.is_state("failed")
    finished, started, seconds = st.finished, st.started, st.seconds
    ended = (done | failed) & np.isfinite(finished)
    if ended.any():
        t_first = float(np.nanmin(started)) if np.isfinite(started).any() else math.nan
        t0 = min(float(finished[ended].min()), t_first if math.isfinite(t_first) else math.inf)
        t1 = max(float(finished[ended].max()), t0 + 1e-3)
        edges = np.linspace(t0, t1, TIMELINE_BINS + 1)
        n_done = np.searchsorted(np.sort(finished[ended & done]), edges, "right")
        n_failed = np.searchsorted(np.sort(finished[ended & failed]), edges, "right")
        out["timeline"] = {"t": edges, "done": n_done, "failed": n_failed}
    ran = done & np.isfinite(seconds)
    if ran.any():
        out["seconds"] = _histogram(seconds[ran])
    out["failures"] = _failures(table, st, np.flatnonzero(failed))
    return out


#: Numbers in an error line, which group by what they say rather than by their values
#: ("lr=0.1 diverged" and "lr=0.3 diverged" are one error).
_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:0x[0-9a-fA-F]+|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)")


def _failures(
    table: ExperimentTable, st: _status.StatusArrays, failed: np.ndarray
) -> dict[str, Any]:
    """Failed experiments (rows ``failed``) grouped by the line of their error that names it
    (its numbers left out), most frequent first, with the tracebacks and parameters of the
    first few of each. An error text is grouped once, however many experiments share it."""
    line_of: dict[int, str] = {}
    groups: dict[str, list[int]] = {}
    for i, code in zip(failed.tolist(), st.errors[failed].tolist()):
        if code not in line_of:
            error = st.error_names[code] if code >= 0 else None
            line = _status._first_line(error) or "(no error text)"
            line_of[code] = _NUMBER.sub("…", line)
        groups.setdefault(line_of[code], []).append(i)
    ordered = sorted(groups.items(), key=lambda kv: -len(kv[1]))
    out = []
    for line, members in ordered[:FAILURE_GROUPS]:
        examples = []
        for i in members[:FAILURE_EXAMPLES]:
            text, cut = _cut(st.error_at(i))
            host = st.host_at(i)
            examples.append(
                {
                    "experiment": _plain(table.index.take([i])[0]),
                    "attempt": int(st.attempt[i]),
                    "host": None if not isinstance(host, str) else host,
                    "params": _params_of(table, i),
                    "traceback": text,
                    "cut": cut,
                }
            )
        out.append(
            {
                "error": line,
                "count": len(members),
                "ids": [_plain(e) for e in table.index.take(members[:FAILURE_IDS])],
                "examples": examples,
            }
        )
    return {"total": int(len(failed)), "groups": out, "group_count": len(groups)}


def _cut(error: Any) -> tuple[str, int]:
    """A traceback as the page shows it: its start and its end, and how many characters of the
    middle are left out."""
    if not isinstance(error, str):
        return "", 0
    if len(error) <= TRACEBACK_HEAD + TRACEBACK_TAIL:
        return error, 0
    cut = len(error) - TRACEBACK_HEAD - TRACEBACK_TAIL
    return error[:TRACEBACK_HEAD] + "\n...\n" + error[-TRACEBACK_TAIL:], cut


def _params_of(table: ExperimentTable, i: int) -> dict[str, Any]:
    out = {}
    for p, col in table.params.items():
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


def _log_scale(values: np.ndarray) -> bool:
    """Whether finite ``values`` read better on a logarithmic axis: all positive, spanning two
    orders of magnitude or more, and crowded at the low end of a linear one (their median in
    its first tenth), as log-uniform learning rates are and uniform ones are not."""
    if not len(values):
        return False
    lo, hi = float(values.min()), float(values.max())
    if lo <= 0 or hi / lo < 100:
        return False
    return bool((float(np.median(values)) - lo) < 0.1 * (hi - lo))


def _histogram(values: np.ndarray) -> dict[str, Any]:
    """Counts of ``values`` (finite) in BINS bins, on a logarithmic scale if :func:`_log_scale`
    says so."""
    lo, hi = float(values.min()), float(values.max())
    log = _log_scale(values)
    if log:
        edges = np.geomspace(lo, hi, BINS + 1)
    elif hi > lo:
        edges = np.linspace(lo, hi, BINS + 1)
    else:  # one value: one bin around it
        half = max(abs(lo) * 1e-6, 0.5)
        edges = np.array([lo - half, hi + half])
    counts, edges = np.histogram(values, bins=edges)
    return {"edges": edges, "counts": counts, "log": log}


# -- scalar series: outcomes and curves ----------------------------------------------------------


def _aligned_outcomes(
    store: Store, table: ExperimentTable, infos: dict[str, dict[str, Any]], names: list[str]
) -> dict[str, np.ndarray]:
    """The numeric scalar series of ``names`` whose every record is an experiment's step-0
    record, as float64 columns in experiment order (NaN where absent), read by the core on the
    design's runs (``scan_aligned``): no Python object per record."""
    if not table.has_design or not table.n or not names or not ex.aligned_design(infos):
        return {}
    _, cols = ex.load_aligned(store, names, infos, ids=False)
    release_mapped_pages(store)
    out = {}
    for name in names:
        c = cols.pop(name)
        if int(c.present.sum()) == int(infos[name]["count"]):
            values = c.values.astype(np.float64, copy=False)
            if values is not c.values:  # floats are NaN where absent already
                values[~c.present] = np.nan
            out[name] = values
    return out


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
    outcomes: dict[str, np.ndarray],
    rows: np.ndarray,
    max_points: int,
    seed: int,
) -> dict[str, Any]:
    """Every scalar outcome's distribution and plots against the parameters."""
    rng = np.random.default_rng(seed)
    sample = rows if len(rows) <= max_points else np.sort(rng.choice(rows, max_points, False))
    params = []
    for p, col in table.params.items():
        params.append(_param(p, col, sample))
    out = []
    for name, values in outcomes.items():
        finite = np.isfinite(values)
        entry: dict[str, Any] = {"name": name, "n": int(finite.sum())}
        if finite.any():
            v = values[finite]
            entry.update(
                mean=float(v.mean()),
                min=float(v.min()),
                max=float(v.max()),
                median=float(np.median(v)),
                hist=_histogram(v),
            )
            entry["log"] = entry["hist"]["log"]
        with np.errstate(over="ignore"):  # beyond float32: not drawn, as NaN and infinities
            at = values[sample].astype(np.float32)
        entry["sample"] = np.where(np.isfinite(at), at, np.float32(np.nan))
        entry["boxes"] = {
            p["name"]: _boxes(values, p) for p in params if p["kind"] != "numeric" and finite.any()
        }
        out.append(entry)
    for p in params:
        p.pop("_codes", None)
    return {
        "sample": {
            "n": int(len(sample)),
            "of": int(len(rows)),
            "seed": seed,
            "ids": [str(i) for i in table.index.take(sample)],
        },
        "params": params,
        "outcomes": out,
    }


def _param(name: str, col: ex.Column, sample: np.ndarray) -> dict[str, Any]:
    """A parameter as the plots use it: "numeric" (its values at the sample rows, NaN where
    absent) or "levels" (codes of its values, for box plots)."""
    present = col.present
    values = col.values
    numeric = values.dtype.kind in "iuf"
    entry: dict[str, Any] = {"name": name, "dtype": col.dtype, "present": int(present.sum())}
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
                log=_log_scale(values[present].astype(np.float64)),
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
    seed: int,
) -> dict[str, Any] | None:
    """The quantiles and mean at each index of an array outcome, over the experiments ``rows``
    (a seeded sample of them when they would hold more than BAND_VALUES values)."""
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
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an index where every value is NaN
        mean = np.nanmean(used, axis=0)
        # In place (the buffer is not used again): no copy of up to BAND_VALUES values.
        quantile = np.nanquantile if np.isnan(used).any() else np.quantile
        q = quantile(used, QUANTILES, axis=0, overwrite_input=True)
    return {
        "name": name,
        "shape": list(shape),
        "dtype": info["dtype"],
        "index": positions,
        "quantiles": {f"{int(p * 100)}": q[k].astype(np.float32) for k, p in enumerate(QUANTILES)},
        "mean": mean.astype(np.float32),
        "experiments": int(len(used)),
        "of": int(len(rows)),
        "sampled": bool(len(chosen) < len(rows)),
        "thinned": bool(len(positions) < m),
    }
