"""runstore.ema: the EMA workbench's experiments stored as they finish (docs/experiments.md, "The
EMA workbench").

    import runstore.ema
    from ema_workbench import perform_experiments

    cb = runstore.ema.callback("results/sweep")
    store = perform_experiments(model, 100_000, callback=cb)   # each experiment on disk
    experiments, outcomes = runstore.ema.load_results(store)   # as ema_workbench returns them

Every experiment EMA hands the callback is one atomic record set in the store (its parameters,
``scenario``/``policy``/``model``, its status and its outcomes), committed in the background, so
memory stays flat whatever the number of experiments and a kill -9 loses at most the last
commit interval. Its id comes from its content (the parameter values and the model's name), so
after a kill ``remaining(store, scenarios, policies)`` gives the scenarios still to run.
What EMA needs to give its tables back (parameter kinds, categories, outcome classes and shapes,
versions) is kept in ``store.attrs["ema"]``.

Needs the ema-workbench package (3.x, Python 3.12 and later).
"""

from __future__ import annotations

import atexit
import json
import math
import os
import time
import weakref
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd
from ema_workbench import __version__ as ema_version
from ema_workbench.em_framework.callbacks import AbstractCallback
from ema_workbench.em_framework.outcomes import ArrayOutcome, ScalarOutcome, TimeSeriesOutcome
from ema_workbench.em_framework.parameters import (
    BooleanParameter,
    CategoricalParameter,
    IntegerParameter,
)

from .. import _core, _signals
from .._store import Store
from .._store import open as _open
from .._version import __version__
from ..experiments import _design
from ..experiments import _records as ex
from ..experiments._writer import ExperimentWriter
from ..export import _output, _tar

__all__ = ["callback", "remaining", "load_results", "save_results", "experiment_id"]

ATTR = "ema"
EXTRA_COLUMNS = ("scenario", "policy", "model")  # after the parameters, as EMA has them
#: experiments.csv's line ending: pandas quotes a field that holds a character of it, and
#: reads a lone "\r" as a line's end, so a name or a value with a "\r" in it is quoted only
#: when the lines end in "\r\n" (EMA's own save_results writes "\n", and a "\r" in a name
#: or a categorical value breaks its file).
CRLF = "\r\n"


_PLAIN = (float, int, str, bool)


def _plain(v: Any) -> Any:
    """A parameter value as runstore stores it (bool, int, float or str)."""
    if type(v) in _PLAIN:
        return v
    if isinstance(v, np.generic):
        v = v.item()
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    raise TypeError(
        f"parameter value {v!r} of type {type(v).__name__}: runstore stores bool, int, float "
        "or str (give categorical parameters such categories)"
    )


def _values(scenario: Mapping[str, Any], policy: Mapping[str, Any]) -> dict[str, Any]:
    """The parameter values of a (scenario, policy) pair, shaped parameters flattened as EMA
    flattens them (``name_0``, ``name_1``, ...)."""
    out: dict[str, Any] = {}
    # EMA's samples keep their values in a dict, .data: much faster to read than the mapping.
    merged = {**getattr(scenario, "data", scenario), **getattr(policy, "data", policy)}
    for k, v in merged.items():
        if type(v) in _PLAIN:
            out[k] = v
        elif isinstance(v, np.ndarray):
            for i, x in enumerate(v.ravel().tolist()):
                out[f"{k}_{i}"] = _plain(x)
        else:
            out[k] = _plain(v)
    return out


def experiment_id(
    scenario: Mapping[str, Any], policy: Mapping[str, Any] | None = None, model: str = ""
) -> str:
    """The id under which the callback stores the experiment of ``scenario``, ``policy`` and the
    model named ``model``: :func:`runstore.experiment_id` of the parameter values and the
    model's name, so the same experiment gets the same id in every session."""
    return _design.experiment_id({**_values(scenario, policy or {}), "model": model})


def _kind(p: Any) -> dict[str, Any]:
    if isinstance(p, CategoricalParameter):
        cats = [_plain(c.value) for c in p.categories]
        return {"name": p.name, "kind": "categorical", "categories": cats}
    if isinstance(p, BooleanParameter):
        return {"name": p.name, "kind": "boolean"}
    if isinstance(p, IntegerParameter):
        return {"name": p.name, "kind": "integer", "bounds": [p.lower_bound, p.upper_bound]}
    return {"name": p.name, "kind": "real", "bounds": [p.lower_bound, p.upper_bound]}


def _columns(kinds: list[dict[str, Any]], shapes: Mapping[str, Any]) -> list[tuple[str, str]]:
    """EMA's experiments columns and dtypes (DefaultCallback's rules)."""
    dtype = {"categorical": "category", "boolean": "bool", "integer": "int64", "real": "float64"}
    cols: list[tuple[str, str]] = []
    for k in kinds:
        shape = shapes.get(k["name"])
        names = [k["name"]] if not shape else [f"{k['name']}_{i}" for i in range(math.prod(shape))]
        cols += [(n, dtype[k["kind"]]) for n in names]
    return cols + [(c, "category") for c in EXTRA_COLUMNS]


def _check_names(parameters: list[Any], outcomes: list[Any]) -> None:
    """Refuses, before any experiment runs, a parameter or outcome name that the store would
    refuse when the first experiments are written (empty, longer than 255 bytes, with a NUL,
    not Unicode, starting with '~')."""
    for p in parameters:
        _design.check_param_name(p.name)
    for o in outcomes:
        try:
            _core.check_series_name(o.name)
        except ValueError as e:
            raise ValueError(f"outcome {o.name[:80]!r}: {e}") from None


def _outcome_class(o: Any) -> str:
    for cls in (TimeSeriesOutcome, ArrayOutcome, ScalarOutcome):
        if isinstance(o, cls):
            return cls.__name__
    return type(o).__name__


class _Callback(AbstractCallback):
    """The class ``callback`` binds to a store; EMA instantiates it.

    Each experiment is kept as it comes (``_core.EmaBatch``: a reference to it and to its
    outcomes, and the time), and ``batch`` at a time (or when ``flush_every_s`` has passed)
    the batch is written with one vectorised call, then flushed; a commit follows every
    ``commit_every_s``. A commit thus never holds part of an experiment. One C++ call reads a
    batch's values, derives their ids and builds the columns; a batch it does not take (array
    parameters to flatten, a missing outcome, values of other types) goes the Python path."""

    store_path: str = ""
    options: dict[str, Any] = {}
    instances: weakref.WeakSet[_Callback]

    def __init__(
        self,
        uncertainties: list[Any],
        levers: list[Any],
        outcomes: list[Any],
        nr_experiments: int,
        reporting_interval: int | None = None,
        reporting_frequency: int = 10,
        log_progress: bool = False,
    ) -> None:
        super().__init__(
            uncertainties,
            levers,
            outcomes,
            nr_experiments,
            reporting_interval,
            reporting_frequency,
            log_progress,
        )
        opts = type(self).options
        self.flush_every_s = opts["flush_every_s"]
        self.commit_every_s = opts["commit_every_s"]
        self.batch = opts["batch"]
        self.store = _open(type(self).store_path)
        _check_names(uncertainties + levers, outcomes)
        kinds = [_kind(p) for p in uncertainties + levers]
        shapes = {p.name: list(p.shape) for p in uncertainties + levers if p.shape is not None}
        meta = {
            "uncertainties": [p.name for p in uncertainties],
            "levers": [p.name for p in levers],
            "parameters": kinds,
            "shapes": shapes,
            "outcomes": [
                {"name": o.name, "class": _outcome_class(o), "shape": o.shape} for o in outcomes
            ],
            "models": [],
            "versions": {"ema_workbench": ema_version, "runstore": __version__},
        }
        categories = {k["name"]: k["categories"] for k in kinds if k["kind"] == "categorical"}

        def merge(attrs: dict[str, Any]) -> dict[str, Any]:
            # Applied to the newest attributes (again if another process updates them first):
            # the models and categories others noted stay.
            meta["models"] = list(attrs.get(ATTR, {}).get("models", []))
            cats = {**attrs.get(ex.CATEGORIES_ATTR, {}), **categories}
            return {**attrs, ATTR: meta, ex.CATEGORIES_ATTR: cats}

        self.store.attrs.modify(merge)
        self._meta = meta
        # A small buffer: the callback writes often, and memory is what it must keep flat.
        self._w = ExperimentWriter(self.store, buffer_bytes=opts["buffer_bytes"])
        self._outcome_names = [o.name for o in outcomes]
        # The experiments since the last write.
        self._batch = _core.EmaBatch(
            self._outcome_names, self._w.first_row, self.batch, self.flush_every_s
        )
        self._last_commit = time.monotonic()
        self._closed = False
        # Until close, SIGTERM raises SystemExit(143) in the main thread (where the program has
        # no handler of its own), as Ctrl-C raises KeyboardInterrupt: EMA's loop stops, and
        # close_all (a finally, or at exit) commits what was done (docs/experiments.md).
        self._sigterm = _signals.enter()
        type(self).instances.add(self)
        self._finalizer = weakref.finalize(
            self, _finish, self._w, self._batch, self._outcome_names, self._sigterm
        )

    def __call__(self, experiment: Any, outcomes: Mapping[str, Any]) -> None:
        if self._closed:
            raise RuntimeError(f"the runstore callback on {self.store.path} is closed")
        # One call per experiment: kept by reference, with its time; says when to write.
        due = self._batch.keep(experiment, outcomes)
        if due:
            if due & 2:
                self._note_model(experiment.model_name)
            if due & 1:
                self._write()
        # Counts it and draws EMA's progress; at the last experiment that calls close().
        super().__call__(experiment, outcomes)

    def _note_model(self, model: Any) -> None:
        """Adds a model to store.attrs["ema"]["models"] before any of its experiments is
        written."""
        if model not in self._meta["models"]:
            self._meta["models"].append(model)

            def note(attrs: dict[str, Any]) -> dict[str, Any]:
                meta = attrs.get(ATTR, self._meta)
                models = list(dict.fromkeys([*meta.get("models", []), *self._meta["models"]]))
                return {**attrs, ATTR: {**meta, "models": models}}

            self.store.attrs.modify(note)

    def _write(self) -> None:
        """Writes the experiments kept, then flushes, or commits once commit_every_s has
        passed since the last commit."""
        now = time.monotonic()
        _write(self._w, self._batch, self._outcome_names)
        if now - self._last_commit >= self.commit_every_s:
            self._w.commit(wait=False)
            self._last_commit = now
        else:
            # The background thread writes it: EMA's loop goes on meanwhile.
            self._w.flush(wait=False)

    def close(self) -> None:
        """Writes and commits what was recorded and closes the writer (also at interpreter
        exit, and when the callback is garbage collected)."""
        if not self._closed:
            self._closed = True
            self._finalizer()
        super().close()  # EMA's progress bar

    @classmethod
    def close_all(cls) -> None:
        """Commits and closes every callback EMA made from this class."""
        for cb in list(cls.instances):
            cb.close()

    def get_results(self) -> Any:
        self.close()
        self.store.refresh()
        if type(self).options["load"]:
            return load_results(self.store)
        return self.store


def _write(w: ExperimentWriter, batch: _core.EmaBatch, outcome_names: list[str]) -> None:
    """Writes the experiments kept in ``batch`` and empties it: the columns its C++ path builds,
    in one call, or, for a batch that path does not take, the Python path's, grouped by which
    parameters and outcomes the experiments have (one group unless some lack an outcome)."""
    if not len(batch):
        return
    columns = batch.columns()
    if columns is not None:
        ids, params, outcomes, rows, finished = columns
        w.record_many(ids, params, outcomes, rows=rows, finished=finished)
        batch.clear()
        return
    items = batch.items()
    batch.clear()
    rows = []
    try:
        for item in items:  # a value runstore does not store raises: those before it are kept
            rows.append(_row(w, *item, outcome_names))
    finally:
        _write_rows(w, rows)


def _row(
    w: ExperimentWriter,
    experiment: Any,
    outcomes: Mapping[str, Any],
    finished: float,
    outcome_names: list[str],
) -> tuple[str, dict[str, Any], dict[str, Any], int, float]:
    """The Python path: an experiment as (id, parameters, outcomes, row, finished)."""
    params = _values(experiment.scenario, experiment.policy)
    params["model"] = experiment.model_name
    eid = _design.experiment_id_of_plain(params)  # experiment_id(): the parameters and the model
    params["scenario"] = _plain(experiment.scenario.name)
    params["policy"] = _plain(experiment.policy.name)
    values = {k: outcomes[k] for k in outcome_names if outcomes.get(k) is not None}
    return eid, params, values, w.first_row + experiment.experiment_id, finished


def _write_rows(w: ExperimentWriter, rows: list[Any]) -> None:
    """Writes the Python path's rows, one record_many for each set of parameter and outcome
    names."""
    groups: dict[tuple[tuple[str, ...], tuple[str, ...]], list[Any]] = {}
    for row in rows:
        groups.setdefault((tuple(row[1]), tuple(row[2])), []).append(row)
    for (pnames, onames), group in groups.items():
        params = {p: [r[1][p] for r in group] for p in pnames}
        outcomes = {o: _outcome_column([r[2][o] for r in group]) for o in onames}
        w.record_many(
            [r[0] for r in group],
            params,
            outcomes,
            rows=[r[3] for r in group],
            finished=[r[4] for r in group],
        )


def _outcome_column(values: list[Any]) -> Any:
    """An outcome's values for record_many: stacked as numpy.asarray does, but a list as it is
    when it holds masked arrays, which the writer checks one by one (numpy.asarray would keep
    their masked elements as data)."""
    if any(isinstance(v, np.ma.MaskedArray) for v in values):
        return values
    return np.asarray(values)


def _finish(
    w: ExperimentWriter,
    batch: _core.EmaBatch,
    outcome_names: list[str],
    sigterm: bool,
) -> None:
    try:
        _write(w, batch, outcome_names)
    finally:
        try:
            w.close()
        finally:
            _signals.leave(sigterm)  # what the callback's enter() took back


def callback(
    store: str | os.PathLike[str] | Store,
    *,
    commit_every_s: float = 5.0,
    flush_every_s: float = 1.0,
    batch: int = 1000,
    buffer_bytes: int = 8 << 20,
    load: bool = False,
) -> type[AbstractCallback]:
    """A callback class for ``perform_experiments(..., callback=...)`` that stores every
    experiment in ``store`` (a path, created if missing, or an open Store) as it finishes.

    The experiments are written ``batch`` at a time, and at least every ``flush_every_s``, then
    flushed by the writer's background thread (visible to readers and safe from a kill -9 a
    moment later, while EMA goes on); every ``commit_every_s`` also made durable (fdatasync, in
    the background). A kill -9 loses at most the experiments gathered since the last write and
    the flush then under way, which ``remaining`` then gives back. ``buffer_bytes`` bounds the
    writer's memory for records not yet written (``Store.writer``). At the end
    ``perform_experiments`` returns the (read-only) Store, whose tables
    :func:`load_results` gives, or with ``load=True`` those tables at once (as EMA's own
    callback: all in memory). The class's ``close_all()`` commits and closes every callback
    made from it; use it in a ``finally`` when EMA may raise (a model that fails): the experiments
    done before are then committed. At interpreter exit that happens by itself.
    """
    path = store.path if isinstance(store, Store) else os.fspath(store)
    if commit_every_s < 0 or flush_every_s < 0 or batch < 1:
        raise ValueError("commit_every_s and flush_every_s must not be negative, batch positive")
    cls = type(
        "RunstoreCallback",
        (_Callback,),
        {
            "store_path": path,
            "options": {
                "commit_every_s": commit_every_s,
                "flush_every_s": flush_every_s,
                "batch": batch,
                "buffer_bytes": buffer_bytes,
                "load": load,
            },
            "instances": weakref.WeakSet(),
        },
    )

    atexit.register(cls.close_all)
    return cls


def _store(store: str | os.PathLike[str] | Store) -> Store:
    return store if isinstance(store, Store) else _open(os.fspath(store), mode="r")


def _meta(store: Store) -> dict[str, Any]:
    meta = store.attrs.get(ATTR)
    if meta is None:
        raise ValueError(
            f"store {store.path} holds no EMA workbench experiments (no store.attrs['ema']); "
            "it is written by runstore.ema.callback"
        )
    return meta


def remaining(
    store: str | os.PathLike[str] | Store,
    scenarios: Iterable[Any],
    policies: Iterable[Any] | None = None,
    models: Iterable[Any] | None = None,
) -> list[Any]:
    """The scenarios of ``scenarios`` with an experiment that is not done in ``store``, for some
    policy of ``policies`` (default: none, as EMA's without levers) and model of ``models``
    (model objects or names; default: the models the store has seen). After a kill,
    ``perform_experiments(model, scenarios=remaining(...), policies=policies, callback=cb)``
    runs only what is missing."""
    st = _store(store)
    st.refresh()
    names = (
        [getattr(m, "name", m) for m in models]
        if models is not None
        else list(_meta(st).get("models", []))
    )
    if not names:
        raise ValueError(f"store {st.path}: no model has run yet; give models=")
    pols = list(policies) if policies is not None else [{}]
    status = ex.status_frame(st)
    done = set(status[ex.ID_COLUMN][status["state"] == "done"].tolist())
    out = []
    for s in scenarios:
        if any(experiment_id(s, p, m) not in done for p in pols for m in names):
            out.append(s)
    return out


def load_results(
    store: str | os.PathLike[str] | Store,
) -> tuple[pd.DataFrame, dict[str, np.ndarray]]:
    """``(experiments, outcomes)`` as ``ema_workbench.perform_experiments`` (and its
    ``load_results``) return them for the experiments done in ``store``: the DataFrame with
    the parameters (EMA's dtypes: float64, int64, bool, category), ``scenario``, ``policy``
    and ``model`` (category), rows in EMA's experiment order; outcomes as arrays of
    ``(n, *shape)``, masked where an experiment lacks an outcome."""
    st = _store(store)
    meta = _meta(st)
    names = [o["name"] for o in meta["outcomes"] if o["name"] in ex.reserved_series(st)]
    table, outcomes = ex.load_results(st, names)
    done = (table["state"] == "done").to_numpy()
    results = {}
    for name, v in outcomes.items():
        v = v[done]
        if isinstance(v, np.ma.MaskedArray) and not v.mask.any():
            v = v.data
        results[name] = v
    return _ema_table(table, done, meta), results


def _ema_table(table: pd.DataFrame, done: np.ndarray, meta: dict[str, Any]) -> pd.DataFrame:
    """EMA's experiments DataFrame from rows ``done`` of runstore's experiments table."""
    data: dict[str, Any] = {}
    for name, dtype in _columns(meta["parameters"], meta.get("shapes", {})):
        col = table[name][done]
        if dtype == "category":
            col = pd.Series(np.asarray(col, dtype=object)).astype("category")
        else:
            col = pd.Series(np.asarray(col)).astype(dtype)
        data[name] = col.reset_index(drop=True)
    return pd.DataFrame(data)


def save_results(
    store: str | os.PathLike[str] | Store,
    path: str | os.PathLike[str],
    *,
    chunk_rows: int = 10_000,
    compresslevel: int = 6,
) -> None:
    """Writes the store's EMA experiments as ``ema_workbench.save_results`` would (a .tar.gz
    of ``experiments.csv``, one file per outcome and ``metadata.json``) that
    ``ema_workbench.load_results`` reads, streamed: one outcome at a time, ``chunk_rows`` rows
    at a time. Replaces ``path`` if it exists. Cells are written as EMA writes them, a text that
    begins with ``=`` included: EMA's reader would keep a quote put before it as part of the
    value. runstore's own exports (``export_tar``) write no cell a spreadsheet evaluates
    (docs/experiments.md, "No cell is a formula")."""
    st = _store(store)
    meta = _meta(st)
    table, _ = ex.load_results(st, [])
    state = table["state"].to_numpy()
    experiments = _ema_table(table, state == "done", meta)
    done = np.flatnonzero(state == "done")
    index = ex.load_index(st)
    infos = ex.reserved_series(st, counts=False)
    out = _tar._TarOut(_output.ExportFile(path, store_path=st.path), compresslevel)
    try:
        f = out.spool()
        for start in range(0, len(experiments), chunk_rows):
            part = experiments.iloc[start : start + chunk_rows]
            f.write(part.to_csv(header=start == 0, index=False, lineterminator=CRLF).encode())
        if len(experiments) == 0:
            f.write(experiments.to_csv(header=True, index=False, lineterminator=CRLF).encode())
        out.add("experiments.csv", f)
        listed = []
        for o in meta["outcomes"]:
            name = o["name"]
            if name not in infos:
                continue
            col = ex.read_column(st, name, index, infos[name]).masked()[done]
            ext = "cls" if o["class"] == "ScalarOutcome" else ("csv" if col.ndim < 3 else "npy")
            f = out.spool()
            if ext == "npy":
                np.save(f, np.asarray(col))
            else:
                header = o["class"] == "TimeSeriesOutcome"
                for start in range(0, len(col), chunk_rows):
                    part = pd.DataFrame(np.asarray(col[start : start + chunk_rows]))
                    f.write(part.to_csv(header=header and start == 0, index=False).encode("utf-8"))
            out.add(f"{name}.{ext}", f)
            listed.append((o["class"], name, f"{name}.{ext}"))
            del col
        metadata = {
            "version": 0.1,
            "outcomes": listed,
            "experiments": {k: v.name for k, v in experiments.dtypes.to_dict().items()},
        }
        out.add_bytes("metadata.json", json.dumps(metadata).encode())
    except BaseException:
        out.abort()
        raise
    out.close()
