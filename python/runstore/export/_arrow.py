"""to_arrow and export_parquet: a store's records as Arrow tables and Parquet files (pyarrow,
the ``arrow`` extra, imported when they are called)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import _progress
from .._frame import KeyUnion, run_list, series_columns, sort_order, unique_name
from ..experiments import _records as ex
from ._output import ExportFile
from ._table import EXPORT_FORMAT, EXPORT_VERSION, ExperimentTable, Outcome

if TYPE_CHECKING:
    import pyarrow

    from .._checks import RunId, StepWindow
    from .._reader import StoreReader

#: Largest row group of export_parquet, in bytes of outcome values (fewer rows than asked if
#: row_group_rows rows would take more).
PARQUET_ROW_GROUP_BYTES = 32 << 20


def _arrow_type(dtype: str) -> Any:
    import pyarrow as pa

    if dtype == "string":
        return pa.string()
    if dtype == "bytes":
        return pa.binary()
    return pa.from_numpy_dtype(np.dtype(dtype))


def _zero_copy_primitive(values: np.ndarray) -> Any:
    """An Arrow array over a numpy array's buffer, without a copy (keeps the array alive)."""
    import pyarrow as pa

    values = np.ascontiguousarray(values)
    if values.dtype.kind == "b":
        return pa.array(values)  # Arrow packs bools into bits: a copy
    return pa.Array.from_buffers(
        pa.from_numpy_dtype(values.dtype), len(values), [None, pa.py_buffer(values)]
    )


def _arrow_array(
    values: np.ndarray, present: np.ndarray | None, dtype: str, shape: tuple[int, ...] | None
) -> Any:
    """An Arrow array of n records (values of shape (n, *shape)); nulls where not present."""
    import pyarrow as pa

    n = len(values)
    mask = None if present is None or present.all() else pa.array(~present)
    if dtype in ("string", "bytes"):
        return pa.array(
            values.tolist(), type=_arrow_type(dtype), mask=None if mask is None else ~present
        )
    if shape is None:  # variable shape: JSON text of the nested lists
        texts = [
            None if v is None else json.dumps(v.tolist(), allow_nan=True) for v in values.tolist()
        ]
        return pa.array(texts, type=pa.string())
    if not shape:
        if mask is None:
            return _zero_copy_primitive(values)
        return pa.array(values, mask=~present)
    arr = _zero_copy_primitive(values.reshape(-1))
    for k, d in enumerate(reversed(shape)):
        last = k == len(shape) - 1
        if d == 0:
            # from_arrays cannot count lists of no elements: n * (the dimensions before) of them.
            lists = n * int(np.prod(shape[: len(shape) - 1 - k], dtype=np.int64))
            # A validity bitmap is set where present (the mask is set where absent).
            validity = pa.array(present).buffers()[1] if last and mask is not None else None
            arr = pa.Array.from_buffers(pa.list_(arr.type, 0), lists, [validity], children=[arr])
        else:
            arr = pa.FixedSizeListArray.from_arrays(arr, d, mask=mask if last else None)
    return arr


def _has_empty_fixed_list(t: Any) -> bool:
    import pyarrow as pa

    while pa.types.is_fixed_size_list(t):
        if t.list_size == 0:
            return True
        t = t.value_type
    return False


def _as_lists(t: Any) -> Any:
    import pyarrow as pa

    return pa.list_(_as_lists(t.value_type)) if pa.types.is_fixed_size_list(t) else t


def _for_parquet(data: Any) -> Any:
    """``data`` (a Table or RecordBatch) as Parquet can read it back: a column of fixed-size
    lists with a dimension of 0 (an outcome of shape (100, 0)) becomes lists of variable size
    (Parquet readers refuse fixed-size lists of size 0 they wrote); its shape stays in the
    schema's metadata and in runstore's own."""
    import pyarrow as pa

    if not any(_has_empty_fixed_list(f.type) for f in data.schema):
        return data
    fields, columns = [], []
    for f, c in zip(data.schema, data.columns):
        if _has_empty_fixed_list(f.type):
            f = f.with_type(_as_lists(f.type))
            c = c.cast(f.type)
        fields.append(f)
        columns.append(c)
    schema = pa.schema(fields, metadata=data.schema.metadata)
    return type(data).from_arrays(columns, schema=schema)


def to_arrow(
    store: StoreReader,
    names: Iterable[str] | str | None,
    runs: Iterable[RunId] | None,
    steps: StepWindow | None,
) -> pyarrow.Table:
    """runstore.export.to_arrow."""
    import pyarrow as pa

    runs = run_list(runs)
    infos = store.series()
    if names is None:
        selected = [n for n, i in infos.items() if i.shape is not None]
    else:
        selected = [names] if isinstance(names, str) else list(names)
        for n in selected:
            if n not in infos:
                raise KeyError(f"series {n!r} not found")
            if infos[n].shape is None:
                raise ValueError(
                    f"series {n!r} has a variable shape, which to_arrow does not convert: "
                    "use Store.scan"
                )
    if not selected:
        return pa.table({"run": pa.array([], pa.int64()), "step": pa.array([], pa.int64())})
    column = series_columns(selected)
    scans = {n: store.scan(n, runs=runs, steps=steps) for n in selected}
    first = scans[selected[0]]
    same = all(
        len(s["run"]) == len(first["run"])
        and np.array_equal(s["step"], first["step"])
        and np.array_equal(s["run"], first["run"])
        for s in scans.values()
    )
    columns: dict[str, Any] = {}
    if same:
        run, step = first["run"], first["step"]
        order = sort_order(run, step)
        identity = bool(np.array_equal(order, np.arange(len(order))))
        take = (lambda a: a) if identity else (lambda a: a[order])
        columns["run"] = _run_array(take(run))
        columns["step"] = _zero_copy_primitive(take(step))
        for n in selected:
            i = infos[n]
            columns[column[n]] = _arrow_array(take(scans[n]["value"]), None, i.dtype, i.shape)
        return pa.table(columns)
    # Different keys: the union of keys, sorted (one sort of them all); each series placed
    # with gaps.
    union = KeyUnion([s["run"] for s in scans.values()], [s["step"] for s in scans.values()])
    columns["run"] = _run_array(union.run)
    columns["step"] = _zero_copy_primitive(union.step)
    for n, pos in zip(selected, union.positions):
        i = infos[n]
        col = ex.empty_column(len(union.run), i.dtype, i.shape)
        col.values[pos] = scans[n]["value"]
        col.present[pos] = True
        columns[column[n]] = _arrow_array(col.values, col.present, i.dtype, i.shape)
    return pa.table(columns)


def _run_array(run: np.ndarray) -> Any:
    import pyarrow as pa

    if run.dtype != object:
        return _zero_copy_primitive(run)
    # Mixed int and str run ids: Arrow columns have one type, so ints become their decimal text.
    return pa.array([r if isinstance(r, str) else str(r) for r in run.tolist()], type=pa.string())


def _experiment_columns(
    params: list[str], status: list[str], outcomes: list[Outcome]
) -> tuple[list[str], list[dict[str, Any]]]:
    """The columns of the experiments table: the id, the parameters, the status fields' columns
    and the outcomes (an outcome named like a column before it renamed ``outcome.NAME``); and
    how each outcome became its column."""
    names = [ex.ID_COLUMN, *params, *status]
    fixed = set(names)
    taken = fixed | {o.name for o in outcomes}
    outcome_meta = []
    for o in outcomes:
        col = o.name if o.name not in fixed else unique_name(f"outcome.{o.name}", taken)
        names.append(col)
        outcome_meta.append(
            {
                "name": o.name,
                "column": col,
                "dtype": o.dtype,
                "shape": list(o.shape) if o.shape is not None else None,
            }
        )
    return names, outcome_meta


def _table_columns(table: ExperimentTable) -> tuple[list[str], list[dict[str, Any]]]:
    """:func:`_experiment_columns` of every column ``table`` reads."""
    status = table.status_columns(slice(0, 0))  # the fields, in their order
    return _experiment_columns(
        table.param_names, [table.status_names[f] for f in status], table.outcomes
    )


#: The type of each status field's column where the store has no record of it, and the value
#: of an experiment without one where it has a value (experiments/_records.status_frame_columns).
_STATUS_TYPES = {
    "state": ("string", "pending"),
    "error": ("string", None),
    "host": ("string", None),
    "started": ("float64", None),
    "finished": ("float64", None),
    "seconds": ("float64", None),
    "attempt": ("int64", 0),
}


class ExperimentsTable:
    """A store's experiments table (a row per experiment: id, parameters, status, outcomes,
    the columns of ``export_parquet``) as an Arrow stream (``Store.experiments_table``): the
    series of the experiments joined on their ids by the C++ core (``JoinedArrowStream``), a
    window of experiments at a time, each time ``__arrow_c_stream__`` is called. With
    ``columns``, only those of its columns (in the table's order; the id when none of them is
    one): the others are not read. With ``status``, the experiments in those states only (no
    state recorded reads as "pending"). Rows in definition order (``ordered``: the core orders
    each window by ``~design/~row``), else in the store's order. Needs no pyarrow."""

    def __init__(
        self,
        store: StoreReader,
        columns: Iterable[str] | None = None,
        status: str | Iterable[str] | None = None,
        ordered: bool = True,
    ) -> None:
        self.store = store
        self.ordered = ordered
        self.columns = None if columns is None else set(columns)
        if isinstance(status, str):
            status = [status]
        self.status = None if status is None else list(status)
        for s in self.status or []:
            if s not in ex.STATES:
                raise ValueError(
                    f"experiments_table: status {s!r} is not one of {', '.join(ex.STATES)}"
                )

    def _join(self, schema_only: bool) -> Any:
        wanted = self.columns
        store = self.store
        store.refresh()
        infos = ex.reserved_series(store, counts=False)
        params = ex.design_columns(store, infos)
        status = ex.status_names(params)
        outcomes = [Outcome(n, infos[n]) for n in ex.outcome_names(store)]
        # The whole table's columns, then those asked for: the same names either way.
        names, meta = _experiment_columns(params, list(status.values()), outcomes)
        if wanted is not None:
            names = [n for n in names if n in wanted] or [ex.ID_COLUMN]
        chosen = set(names)
        columns = [(ex.DESIGN + p, p, None, False, "float64") for p in params if p in chosen]
        for field, col in status.items():
            if col in chosen:
                dtype, fill = _STATUS_TYPES[field]
                series = ex.STATUS_COLUMNS[field]
                columns.append((series, col, fill, field == "error", dtype))
        columns += [
            (m["name"], m["column"], None, False, "float64") for m in meta if m["column"] in chosen
        ]
        if ex.ROW not in infos:
            raise ValueError(
                f"store {store.path} has no experiment design (no {ex.ROW!r} records): the "
                "experiments table is of stores written by define_experiments and run_experiments"
            )
        return store._core.arrow_join(
            ex.ROW,
            columns,
            run_field=ex.ID_COLUMN if ex.ID_COLUMN in chosen else "",
            step_field="",
            where_series=ex.STATE if self.status is not None else "",
            where_values=self.status or [],
            where_fill="pending",
            order_by_base_value=self.ordered,
            schema_only=schema_only,
        )

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        return self._join(False)

    def __arrow_c_schema__(self) -> Any:
        return self._join(True)


def _experiment_batch(
    table: ExperimentTable, rows: slice, names: list[str], outcome_meta: list[dict[str, Any]]
) -> Any:
    """The experiments ``rows`` as a record batch of the columns ``names`` (those of
    :func:`_experiment_columns`, whose ``outcome_meta`` says which outcome each of its last
    columns is; a column not in ``names`` is not read)."""
    import pyarrow as pa

    wanted = set(names)
    arrays = []
    if ex.ID_COLUMN in wanted:
        ids = table.index.take_array(rows)
        arrays.append(_run_array(ids) if ids.dtype == object else pa.array(ids, type=pa.int64()))
    for p, c in table.param_columns(rows).items():
        if p in wanted:
            arrays.append(_arrow_array(c.values, c.present, c.dtype, ()))
    if wanted & set(table.status_names.values()):
        for f, c in table.status_columns(rows).items():
            if table.status_names[f] in wanted:
                arrays.append(_arrow_array(c.values, c.present, c.dtype, ()))
    for o, meta in zip(table.outcomes, outcome_meta):
        if meta["column"] in wanted:
            cc = table.chunk(o, rows)
            arrays.append(_arrow_array(cc.values, cc.present, o.dtype, o.shape))
    return pa.RecordBatch.from_arrays(arrays, names=names)


def export_parquet(
    store: StoreReader,
    path: str | os.PathLike[str],
    row_group_rows: int,
    compression: str,
    overwrite: bool,
    progress: bool,
) -> dict[str, Any]:
    """runstore.export.export_parquet."""
    import pyarrow.parquet as pq

    t0 = time.perf_counter()
    with (
        _progress.Line("runstore export parquet", progress) as line,
        ExportFile(path, store_path=store.path, overwrite=overwrite) as out,
    ):
        line.show("reading the experiments")
        sink = out.file
        infos = ex.reserved_series(store)
        if ex.ROW not in infos:
            t = _for_parquet(to_arrow(store, None, None, None))
            pq.write_table(t, sink, row_group_size=row_group_rows, compression=compression)
            rows = t.num_rows
        else:
            # Ids made and scalar columns read a row group (a window) at a time.
            table = ExperimentTable(store, ids=False, window=True)
            table.progress = _progress.Work(line, table.n, "rows")
            status = table.status_columns(slice(0, 0))  # the fields, in their order
            names, outcome_meta = _table_columns(table)
            meta = {
                "format": EXPORT_FORMAT,
                "version": EXPORT_VERSION,
                "experiments": table.n,
                "parameters": list(table.param_names),
                "status": {f: table.status_names[f] for f in status},
                "outcomes": outcome_meta,
            }
            writer = None
            rows = 0
            row_bytes = sum(o.row_bytes for o in table.outcomes) + 64
            for sl in table.chunks(row_group_rows, row_bytes, PARQUET_ROW_GROUP_BYTES):
                batch = _for_parquet(_experiment_batch(table, sl, names, outcome_meta))
                if writer is None:
                    schema = batch.schema.with_metadata({"runstore": json.dumps(meta)})
                    writer = pq.ParquetWriter(sink, schema, compression=compression)
                writer.write_batch(batch, row_group_size=row_group_rows)
                rows += batch.num_rows
            if writer is None:  # no experiments: an empty table with the columns
                batch = _for_parquet(_experiment_batch(table, slice(0, 0), names, outcome_meta))
                schema = batch.schema.with_metadata({"runstore": json.dumps(meta)})
                writer = pq.ParquetWriter(sink, schema, compression=compression)
                writer.write_batch(batch)
            writer.close()
        out.commit()
    return {
        "path": out.path,
        "rows": rows,
        "bytes": os.path.getsize(out.path),
        "seconds": time.perf_counter() - t0,
    }
