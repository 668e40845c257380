"""A series of a store as an Arrow stream (``Store.table``): an object that pyarrow, DuckDB,
polars and pandas take directly through the Arrow PyCapsule interface (``__arrow_c_stream__``,
``__arrow_c_schema__``), without runstore needing pyarrow.

The record batches are made by the C++ core (``include/runstore/arrow.h``) as the consumer pulls
them, at most ``batch_rows`` records each, so that a query over a series larger than memory
runs in bounded memory; their run (integers), step and value buffers are the bytes the core
read (the mapped segment file for an uncompressed block), not copies. Each call of
``__arrow_c_stream__`` reads the series again, from the snapshot the store holds then.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from ._checks import RunId, StepWindow, step_range

#: Records of a batch at most, by default.
BATCH_ROWS = 65536


class SeriesTable:
    """Series ``name`` of a store as an Arrow stream of the columns run, step and value
    (docs/query.md): ``pyarrow.RecordBatchReader.from_stream(t)``, ``duckdb.sql("SELECT ...
    FROM t")``, ``polars.DataFrame(t)``, ``polars.scan_arrow_c_stream(t)`` take it as it is.

    ``runs`` (run ids) and ``steps`` (``range(start, stop)`` or ``(start, stop)``) keep the
    records of those runs and steps only, reading only the blocks that may hold them."""

    def __init__(
        self,
        store: Any,
        name: str,
        runs: Iterable[RunId] | None = None,
        steps: StepWindow | None = None,
        batch_rows: int = BATCH_ROWS,
    ) -> None:
        if not isinstance(name, str):
            raise TypeError(f"table: the name of one series (a str), got {type(name).__name__}")
        if not isinstance(batch_rows, int) or isinstance(batch_rows, bool) or batch_rows < 1:
            raise ValueError(f"table: batch_rows must be an int of at least 1, got {batch_rows!r}")
        self._core = store._core
        self.name = name
        self._runs = None if runs is None else _run_list(runs)
        self._steps = step_range(steps)
        self.batch_rows = batch_rows
        # An unknown series is a KeyError now, not when a consumer first pulls.
        self._core.arrow_schema(name)

    def __arrow_c_schema__(self) -> Any:
        """The schema, in a PyCapsule named "arrow_schema"."""
        return self._core.arrow_schema(self.name)

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        """A new stream of the series, in a PyCapsule named "arrow_array_stream".
        ``requested_schema`` is not followed (the interface lets a producer ignore it): the
        columns are always the series' own types."""
        return self._core.arrow_stream(self.name, self._runs, self._steps, self.batch_rows)

    def __repr__(self) -> str:
        return f"SeriesTable({self.name!r})"


def _run_list(runs: Any) -> list[RunId]:
    """``runs`` as a list (one str or bytes is refused: as a sequence it would be taken for
    its characters)."""
    what = "table: runs must be a list of run ids (int or str)"
    if isinstance(runs, (str, bytes)):
        raise TypeError(f"{what}, got a single {type(runs).__name__}; use runs=[...]")
    try:
        return list(runs)
    except TypeError:
        raise TypeError(f"{what}, got {type(runs).__name__}") from None


#: The view of the experiments table (also "~experiments", which no series can be called).
EXPERIMENTS = "experiments"
#: The series of a design's rows (experiments/_records.py ROW), which a store of experiments has.
DESIGN = "~design/~row"


def _names_in(duckdb: Any, query: str) -> tuple[set[str], set[str] | None] | None:
    """(the tables, the columns) ``query`` names anywhere (a column by the last part of a
    qualified name; None for the columns when it may read every one, a ``*`` or
    ``COLUMNS(...)``), as DuckDB parses it; None when it does not parse (DuckDB then says
    why when it runs)."""
    try:
        text = duckdb.sql("SELECT json_serialize_sql(?)", params=[query]).fetchall()[0][0]
    except duckdb.Error:
        return None
    tree = json.loads(text)
    if tree.get("error"):
        return None
    tables: set[str] = set()
    columns: set[str] | None = set()
    todo: list[Any] = [tree]
    while todo:
        x = todo.pop()
        if isinstance(x, dict):
            if x.get("type") == "BASE_TABLE" and x.get("table_name"):
                tables.add(x["table_name"])
            if x.get("class") == "STAR":
                columns = None
            if columns is not None and x.get("class") == "COLUMN_REF" and x.get("column_names"):
                columns.add(x["column_names"][-1])
            todo.extend(x.values())
        elif isinstance(x, list):
            todo.extend(x)
    return tables, columns


def referenced_columns(duckdb: Any, query: str) -> set[str] | None:
    """The column names ``query`` names (see :func:`_names_in`); None when it may read every
    column or does not parse."""
    names = _names_in(duckdb, query)
    return None if names is None else names[1]


def connect(store: Any, duckdb: Any, query: str | None = None) -> Any:
    """A connection of the module ``duckdb`` with a view of each series of ``store`` (by its
    name: columns run, step, value) and, for a store of experiments, of its experiments table
    (``experiments``, unless a series is called that, and ``"~experiments"``), each read in
    place when a query reads it (``runstore sql``, ``runstore.sql``). Given the ``query`` the
    connection is for, the experiments table is a view only if it names it, and reads only the
    columns it names (a stream cannot be told which columns a query reads)."""
    con = duckdb.connect()
    # DuckDB draws a progress bar on standard output for a long query, terminal or not: in
    # the middle of a CSV.
    con.execute("SET enable_progress_bar = false")
    names = store.names()
    for name in names:
        con.register(name, store.table(name))
    if DESIGN in store._core.names(True):  # a store of experiments (define_experiments)
        named = None if query is None else _names_in(duckdb, query)
        views = {"~" + EXPERIMENTS} | ({EXPERIMENTS} if EXPERIMENTS not in names else set())
        # DuckDB reads a view's schema when it is registered: the experiments table (the
        # design's runs and a window) only for a query that names it.
        if named is None or named[0] & views:
            experiments = store.experiments_table(None if named is None else named[1])
            for view in sorted(views):
                con.register(view, experiments)
    return con
