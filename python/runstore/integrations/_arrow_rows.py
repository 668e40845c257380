"""Arrow record batches as records: the rows of a Spark DataFrame (runstore.spark) or of a Ray
dataset (runstore.ray) logged column by column (docs/spark.md, "Keys")."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._receipts import WRITER_ERRORS, check_column, check_name


class Rows:
    """Logs the record batches of one task: each column other than ``run_col`` and ``step_col`` a
    series, a row the record ``(row[run_col], column, row[step_col] or 0)``; without
    ``run_col``, ``(default_run, column, the row's place among the task's rows)``. A null cell is
    no record; a null run or step is refused, naming its column."""

    def __init__(self, run_col: str | None, step_col: str | None, default_run: Any) -> None:
        self.run_col, self.step_col, self.default_run = run_col, step_col, default_run
        self.row = 0  # rows of the task logged before the next batch

    def keys(self, batch: Any) -> tuple[np.ndarray, np.ndarray]:
        n = batch.num_rows
        if self.run_col is None:
            runs = np.full(n, self.default_run, dtype=np.int64)
            steps = np.arange(self.row, self.row + n, dtype=np.int64)
        else:
            runs = _key_column(batch.column(self.run_col), self.run_col, "run")
            steps = (
                _key_column(batch.column(self.step_col), self.step_col, "step")
                if self.step_col is not None
                else np.zeros(n, dtype=np.int64)
            )
        self.row += n
        return runs, steps

    def log_all(self, task: Any, batches: Any, on_error: str, what: str) -> None:
        """Logs ``batches`` (record batches or tables) with ``task.open()``, counting into
        ``task`` (a :class:`~._receipts.TaskWriter`). A batch the writer refuses costs that
        batch: counted and named as the ``what`` at its place (``on_error="receipt"``), or
        raised (``"raise"``); an error of the writer itself is raised."""
        for place, batch in enumerate(batches):
            if not batch.num_rows:
                continue
            try:
                records, nbytes = self.log(task.open(), batch)
            except WRITER_ERRORS:
                raise
            except Exception as e:  # this batch's: named, the others go on
                if on_error == "raise":
                    raise
                task.fail(place, e, what, batch.num_rows)
                continue
            task.records += records
            task.nbytes += nbytes

    def log(self, writer: Any, batch: Any) -> tuple[int, int]:
        """Appends one batch (a pyarrow RecordBatch or Table); returns (records, value bytes)."""
        runs, steps = self.keys(batch)
        columns = []  # every column checked before any is logged: a batch refused is not written
        for name in batch.schema.names:
            if name in (self.run_col, self.step_col):
                continue
            check_name(name)
            col = _array(batch.column(name))
            keep = None
            if col.null_count:
                keep = np.asarray(col.is_valid())
                col = col.filter(col.is_valid())
            values = values_of(col)
            if len(values):
                check_column(values, name)
                columns.append((name, values, keep))
        records = nbytes = 0
        for name, values, keep in columns:
            r = runs if keep is None else runs[keep]
            s = steps if keep is None else steps[keep]
            writer.log_many(r, s, columns={name: values})
            records += len(values)
            nbytes += getattr(values, "nbytes", 0)
        return records, nbytes


def _key_column(col: Any, name: str, what: str) -> np.ndarray:
    col = _array(col)
    if col.null_count:
        raise ValueError(f"the {what} column {name!r} has nulls: every row needs its {what}")
    return values_of(col)


def _array(col: Any) -> Any:
    """A column of a Table (chunked) as one Array; a RecordBatch's as it is."""
    import pyarrow as pa

    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def values_of(col: Any) -> np.ndarray:
    """An Arrow column (an Array or a ChunkedArray) as what log_many takes: numbers and bools as
    numpy arrays (zero-copy where Arrow allows), strings and bytes as object arrays, fixed-size
    lists as 2-D arrays, timestamps and dates as their int64."""
    import pyarrow as pa

    col = _array(col)
    t = col.type
    if pa.types.is_fixed_size_list(t):
        flat = values_of(col.flatten())
        return flat.reshape(len(col), t.list_size)
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        return col.cast(pa.int64()).to_numpy(zero_copy_only=False)
    if pa.types.is_dictionary(t):
        col = col.dictionary_decode()
    return col.to_numpy(zero_copy_only=False)
