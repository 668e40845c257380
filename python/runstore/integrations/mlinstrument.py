"""runstore.mlinstrument: a backend for ml-instrument's Collector that streams into a store.

ml-instrument (``pip install ml-instrument``, import ``ml_instrumentation``) is the collector
reinforcement-learning labs use: the agent and the environment ``collect(name, value)`` at the
current frame, and the collector buffers the points and hands them to a backend. With

    from ml_instrumentation.Collector import Collector
    import runstore.mlinstrument

    backend = runstore.mlinstrument.Backend("results/sweep")
    collector = Collector(backend=backend, experiment_id=3)

every metric is a series of the store, the experiment id its run and the frame its step; each
batch the collector writes is one commit (durable when it returns). A run restarted from a
checkpoint (a pickled Collector) calls ``runstore.mlinstrument.resume(collector)`` before it
collects again: what the killed attempt wrote after the checkpoint's frame is hidden, so the
store ends with exactly one point per frame (ml-instrument's own sqlite backend ends with the
re-done frames twice).

The analysis side has ml-instrument's shapes: ``attach_metadata(store, id, params)`` keeps a
run's parameters (as the store's experiment design), and ``load_all_results(store)`` gives the
polars DataFrame ml-instrument's own ``load_all_results`` gives (``frame``, ``id``, a column per
metric, array metrics included, and the parameters joined by id). ``get_run_ids`` finds runs by
their parameters.

The store is an ordinary runstore store: ``runstore report``, ``load_results``, several
processes (one per run) writing into one store at once.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import polars as pl
from ml_instrumentation.backends.base import BaseBackend, Point, SqlPoint

from .._store import Store
from .._store import open as _open

__all__ = [
    "Backend",
    "backend_of",
    "resume",
    "attach_metadata",
    "load_all_results",
    "get_run_ids",
]


class Backend(BaseBackend):
    """ml-instrument's backend interface on a runstore writer (see the module's text).

    ``store``: a path (created if missing) or an open Store; ``writer_options`` are those of
    :meth:`runstore.Store.writer` (``record_time=True`` keeps each point's wall time)."""

    def __init__(self, store: str | os.PathLike[str] | Store, **writer_options: Any) -> None:
        self._path = store.path if isinstance(store, Store) else os.fspath(store)
        self._options = writer_options
        self._store: Store | None = None
        self._writer: Any = None
        self._refused: list[str] = []  # what write_many refused, raised again by close()

    # -- setup and lifecycle -----------------------------------------------------------------

    def init_db(self) -> None:
        if self._writer is None:
            self._store = _open(self._path)
            self._writer = self._store.writer(**self._options)

    def _w(self) -> Any:
        self.init_db()
        return self._writer

    def close(self) -> None:
        """Commits and closes the writer; reading still works afterwards. Raises ValueError
        if a batch had points the store refused (see :meth:`write_many`)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._refused:
            refused, self._refused = self._refused, []
            raise ValueError("runstore refused " + "; ".join(refused))

    def define(self, metric: str, dtype: Any, **options: Any) -> None:
        """Declares a metric before its first point (``Writer.define``): a metric whose arrays
        change shape from frame to frame needs ``variable_shape=True``, or its first array
        fixes the shape of every later one (a point of another shape is refused)."""
        self._w().define(metric, dtype, **options)

    def resume(self, exp_id: int | str, frame: int) -> None:
        """For a run restarted from a checkpoint taken at ``frame``: hides what earlier attempts
        wrote for ``exp_id`` at frames >= ``frame`` (``Writer.resume``), durably. A restored
        Collector reaches its backend through :func:`resume` or :func:`backend_of`."""
        self._w().resume(exp_id, frame)

    def __getstate__(self) -> dict[str, Any]:
        if self._writer is not None:
            self._writer.commit()
        return {"path": self._path, "options": self._options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"], **state["options"])  # type: ignore[misc]

    # -- writing -----------------------------------------------------------------------------

    def write_many(self, points: dict[str, dict[int, Point]]) -> None:
        """Appends the collector's buffered points, metric by metric and run by run in one
        vectorised call each, then commits them (the commit is durable when this returns).

        A metric or run id the store refuses (a name too long, reserved or not Unicode) loses
        only its own points: the others are committed, and the error, naming them, is raised
        here and again by :meth:`close` (ml-instrument's writer thread may drop it)."""
        w = self._w()
        refused = []
        for metric, sub in points.items():
            by_run: dict[int | str, tuple[list[int], list[Any]]] = defaultdict(lambda: ([], []))
            for p in sub.values():
                frames, values = by_run[p.exp_id]
                frames.append(p.frame)
                values.append(p.data)
            for exp_id, (frames, values) in by_run.items():
                try:
                    if all(isinstance(v, (int, float, bool, np.number)) for v in values):
                        w.log_many(exp_id, steps=frames, columns={metric: np.asarray(values)})
                    elif all(isinstance(v, (np.ndarray, str, bytes)) for v in values):
                        w.log_many(exp_id, steps=frames, columns={metric: values})
                    else:  # a mix: one record each
                        for f, v in zip(frames, values, strict=True):
                            w.put(exp_id, metric, v, step=f)
                except (TypeError, ValueError, OverflowError) as e:
                    refused.append(
                        f"{len(frames)} point(s) of metric {_short(metric)}, id {_short(exp_id)}: "
                        f"{e}"
                    )
        w.commit()
        if refused:
            self._refused += refused
            raise ValueError("runstore refused " + "; ".join(refused))

    # -- reading -----------------------------------------------------------------------------

    def _reader(self) -> Store:
        if self._store is None:
            self._store = _open(self._path)
        return self._store.refresh()

    def get_tables(self) -> set[str]:
        return set(self._reader().names())

    def read_metric(self, metric: str, exp_id: int | str | None = None) -> list[SqlPoint]:
        """The metric's committed points ``(frame, id, measurement)`` (of ``exp_id`` if given),
        by run (integer ids in numeric order, then str ids) then frame; [] for a metric or run
        the store does not have."""
        store = self._reader()
        if metric not in store.names():
            return []
        d = store.scan(metric, runs=None if exp_id is None else [exp_id])
        order = np.lexsort((d["step"], _run_ranks(d["run"])))
        runs, steps, values = d["run"].tolist(), d["step"].tolist(), d["value"]
        return [SqlPoint(steps[i], runs[i], _plain(values[i])) for i in order.tolist()]

    # -- moving data -------------------------------------------------------------------------

    def merge(self, other: str) -> None:
        """Copies every committed point of this store, and the parameters that
        :func:`attach_metadata` kept, into the store at ``other`` (created if missing), as
        ml-instrument's merge copies every table; the points with one writer and one commit."""
        store = self._reader()
        target = _open(other)
        infos = store.series()
        with target.writer() as w:
            for name in store.names():
                if infos[name].variable_shape:
                    w.define(name, infos[name].dtype, variable_shape=True)
                d = store.scan(name)
                if d["value"].dtype != object:
                    w.log_many(list(d["run"].tolist()), steps=d["step"], columns={name: d["value"]})
                else:
                    for r, s, v in zip(
                        d["run"].tolist(), d["step"].tolist(), d["value"], strict=True
                    ):
                        w.put(r, name, v, step=s)
        design = store.design()
        if len(design) and len(design.columns) > 1:
            target.define_experiments(design)

    def dump(self) -> str:
        """What ``load`` needs to find these points again: the store's path, as JSON (the
        points stay in the store; nothing is copied into the text)."""
        if self._writer is not None:
            self._writer.commit()
        return json.dumps({"runstore_store": os.path.abspath(self._path)})

    def load(self, data: Any) -> None:
        """Merges into this store the points of the store that ``dump`` described."""
        src = json.loads(data)["runstore_store"]
        if os.path.abspath(src) == os.path.abspath(self._path):
            return
        Backend(src).merge(self._path)


def _plain(v: Any) -> Any:
    """A scalar record as the Python number sqlite would give back; arrays stay arrays."""
    return v.item() if isinstance(v, np.generic) else v


def _short(v: Any) -> str:
    """repr(v), cut to 80 characters: a message names a 64 KiB name without holding it."""
    text = repr(v)
    return text if len(text) <= 80 else text[:77] + "..."


def _run_ranks(runs: np.ndarray) -> np.ndarray:
    """Sort keys of run ids: integer ids in numeric order, then str ids in code-point order
    (the order of Store.runs())."""
    if runs.dtype != object:
        return runs
    ids = runs.tolist()
    rank = {r: i for i, r in enumerate(sorted(set(ids), key=_run_key))}
    return np.fromiter((rank[r] for r in ids), dtype=np.int64, count=len(ids))


def _run_key(r: int | str) -> tuple[bool, int | str]:
    return (isinstance(r, str), r)


# -- a restored Collector --------------------------------------------------------------------------


def backend_of(collector: Any) -> Backend:
    """The runstore :class:`Backend` of an ml-instrument ``Collector``, also of one restored
    from a checkpoint (a pickled Collector carries its backend); TypeError if it has another.
    """
    backend = getattr(collector, "_backend", None)  # the one place its attribute is read
    if not isinstance(backend, Backend):
        raise TypeError(
            f"the collector's backend is {type(backend).__name__}, not "
            "runstore.mlinstrument.Backend"
        )
    return backend


def resume(collector: Any, frame: int | None = None, exp_id: int | str | None = None) -> Backend:
    """For a Collector restored from a checkpoint: hides what earlier attempts wrote for its
    experiment at frames >= ``frame`` (:meth:`Backend.resume`), and returns its backend.

    ``frame`` defaults to the one after the collector's current frame: pickling a Collector
    writes every point it buffered, so the checkpoint holds the frames up to its current one,
    and what a killed attempt wrote after that is hidden. ``exp_id`` defaults to the
    collector's current experiment id."""
    backend = backend_of(collector)
    if exp_id is None:
        exp_id = collector.get_current_experiment_id()
    if frame is None:
        current = collector.get_frame()
        if current < 0:
            raise ValueError(
                "the collector has no current frame (none set since its experiment began); "
                "give the frame to resume from: resume(collector, frame=...)"
            )
        frame = current + 1
    backend.resume(exp_id, frame)
    return backend


# -- analysis, in ml-instrument's shapes -----------------------------------------------------------


def _store_of(store: str | os.PathLike[str] | Store | Backend, mode: str) -> Store:
    if isinstance(store, Backend):
        return store._reader()
    if isinstance(store, Store):
        return store.refresh()
    return _open(os.fspath(store), mode=mode)


def attach_metadata(
    store: str | os.PathLike[str] | Store | Backend,
    id: int | str,  # noqa: A002 - ml-instrument's name for it
    metadata: Mapping[str, Any],
) -> None:
    """Keeps the parameters of run ``id`` (str to bool, int, float or str), as ml-instrument's
    ``attach_metadata(db_path, id, metadata)`` does: :func:`load_all_results` joins them, and
    they are the store's experiment design (``store.design()``). Attaching other values to an
    id that has parameters raises ValueError (ml-instrument would keep both rows)."""
    for name in ("id", "experiment"):
        if name in metadata:
            raise ValueError(
                f"attach_metadata: a parameter named {name!r} would be taken for the run's id; "
                "give it another name"
            )
    _store_of(store, "a").define_experiments([{"experiment": id, **metadata}])


def _column(name: str, values: np.ndarray) -> pl.Series:
    """A metric's values as a polars column: numbers as they are, fixed-shape arrays as an
    Array column of their shape, arrays of varying shape as (nested) List columns of their
    dtype, str and bytes as String and Binary."""
    if values.dtype != object:
        return pl.Series(name, values)
    items = values.tolist()  # the records: arrays stay arrays
    if items and all(isinstance(v, np.ndarray) for v in items):
        ndims, dtypes = {v.ndim for v in items}, {v.dtype for v in items}
        if len(ndims) == 1 and len(dtypes) == 1:
            dtype = pl.Series(np.empty(0, dtype=dtypes.pop())).dtype
            for _ in range(ndims.pop()):
                dtype = pl.List(dtype)
            return pl.Series(name, [v.tolist() for v in items], dtype=dtype)
    items = [v.tolist() if isinstance(v, np.ndarray) else v for v in items]
    return pl.Series(name, items, strict=False)


def _ids_column(runs: np.ndarray) -> pl.Series:
    """Run ids as ml-instrument's ``id`` column: Int64, or String when some are str (an int id
    then in decimal)."""
    if runs.dtype != object:
        return pl.Series("id", runs, dtype=pl.Int64)
    ids = runs.tolist()
    if all(isinstance(r, int) for r in ids):
        return pl.Series("id", ids, dtype=pl.Int64)
    return pl.Series("id", [str(r) for r in ids], dtype=pl.String)


def read_metrics(
    store: str | os.PathLike[str] | Store | Backend,
    metrics: Iterable[str],
    ids: Iterable[int | str] | None = None,
) -> pl.DataFrame:
    """The points of ``metrics`` (of runs ``ids``, default all) as one polars DataFrame:
    ``frame``, ``id``, a column per metric, joined on (id, frame) with nulls where a metric has
    no point, rows by id (as :meth:`Backend.read_metric` orders them) then frame."""
    st = _store_of(store, "r")
    metrics = list(metrics)
    names = set(st.names())
    missing = [m for m in metrics if m not in names]
    if missing:
        raise ValueError(
            f"store {st.path} has no metric {', '.join(map(repr, missing))} "
            f"(it has {', '.join(map(repr, sorted(names))) or 'none'})"
        )
    runs = None if ids is None else list(ids)
    frames = []
    for m in metrics:
        d = st.scan(m, runs=runs)
        frames.append(
            pl.DataFrame(
                [
                    pl.Series("frame", d["step"], dtype=pl.Int64),
                    _ids_column(d["run"]),
                    _column(m, d["value"]),
                ]
            )
        )
    if not frames:
        return pl.DataFrame(schema={"frame": pl.Int64, "id": pl.Int64})
    ids_dtype = pl.String if any(f["id"].dtype == pl.String for f in frames) else pl.Int64
    df = frames[0].with_columns(pl.col("id").cast(ids_dtype))
    for f in frames[1:]:
        df = df.join(
            f.with_columns(pl.col("id").cast(ids_dtype)),
            on=["id", "frame"],
            how="full",
            coalesce=True,
        )
    return _sorted(df)


def _sorted(df: pl.DataFrame) -> pl.DataFrame:
    if df["id"].dtype == pl.String:  # int ids first, in numeric order
        key = df["id"].to_numpy().astype(object)
        ranks = _run_ranks(np.array([_as_run(r) for r in key.tolist()], dtype=object))
        return df.with_columns(pl.Series("_rank", ranks)).sort(["_rank", "frame"]).drop("_rank")
    return df.sort(["id", "frame"])


def _as_run(text: str) -> int | str:
    try:
        return int(text) if str(int(text)) == text else text
    except ValueError:
        return text


def _parameters(st: Store) -> pl.DataFrame | None:
    """The store's experiment design as polars (``id`` and a column per parameter), or None
    if it has none."""
    design = st.design()
    if len(design) == 0 or len(design.columns) < 2:
        return None
    cols = [_ids_column(np.asarray(design["experiment"].tolist(), dtype=object))]
    for c in design.columns[1:]:
        col = design[c]
        values = col.astype(object).where(col.notna(), None).tolist()
        cols.append(pl.Series(str(c), values, strict=False))
    return pl.DataFrame(cols)


def load_all_results(
    store: str | os.PathLike[str] | Store | Backend,
    metrics: Iterable[str] | None = None,
    ids: Iterable[int | str] | None = None,
) -> pl.DataFrame:
    """Every point of the store as ml-instrument's ``load_all_results`` gives a sqlite file's:
    a polars DataFrame with ``frame`` and ``id`` (Int64; String if some ids are str), a column
    per metric (default: every metric, in the order they were first logged; array metrics
    as Array columns of their shape, or List columns where shapes vary; str as String), one row
    per (id, frame) with nulls where a metric has no point, rows by id then frame, and the
    parameters that :func:`attach_metadata` kept joined by ``id``."""
    st = _store_of(store, "r")
    if metrics is None:
        metrics = [i.name for i in sorted(st.series().values(), key=lambda i: i.first_logged)]
    df = read_metrics(st, metrics, ids)
    params = _parameters(st)
    if params is None:
        return df
    params = params.with_columns(pl.col("id").cast(df["id"].dtype))
    clash = [c for c in params.columns if c != "id" and c in df.columns]
    if clash:
        params = params.rename({c: f"{c}_param" for c in clash})
    return df.join(params, on="id", how="left")


def get_run_ids(
    store: str | os.PathLike[str] | Store | Backend, params: Mapping[str, Any]
) -> list[int | str]:
    """The ids of the runs whose parameters (:func:`attach_metadata`) include ``params``, as
    ml-instrument's ``get_run_ids``; in the design's order."""
    design = _store_of(store, "r").design()
    keep = np.ones(len(design), dtype=bool)
    for k, v in params.items():
        if k not in design.columns:
            return []
        keep &= (design[k] == v).to_numpy(dtype=bool, na_value=False)
    return design["experiment"][keep].tolist()
