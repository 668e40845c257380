"""Series of a store as Arrow streams (``Store.table``): objects that pyarrow, DuckDB,
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
import os
from collections.abc import Iterable
from typing import Any

from ._checks import RunId, StepWindow, step_range
from ._frame import series_columns

#: Records of a batch at most, by default.
BATCH_ROWS = 65536
#: Bytes of keys and values a joined stream holds in a window of rows, by default.
WINDOW_BYTES = 64 << 20


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
        self._core = store._core
        self.name = name
        self._runs = None if runs is None else _run_list(runs)
        self._steps = step_range(steps)
        self.batch_rows = _batch_rows(batch_rows)
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


class JoinedTable:
    """Several series joined on (run, step) as one Arrow stream (``Store.table([...])``,
    docs/query.md): the columns run and step (the keys of the first series, a row each, in the
    order a scan returns them) and a column per series (named as :meth:`Store.to_pandas` names
    them), null where that series has no record at the row's key. A left join on the first
    series: name the one logged at every step first. ``runs`` and ``steps`` as in
    :class:`SeriesTable`; the other series are read only in the blocks that may hold the rows'
    keys. The C++ core joins a window of rows (``window_bytes`` of keys and values) at a time,
    so that the memory a query holds does not grow with the series."""

    def __init__(
        self,
        store: Any,
        names: Iterable[str],
        runs: Iterable[RunId] | None = None,
        steps: StepWindow | None = None,
        batch_rows: int = BATCH_ROWS,
        window_bytes: int = WINDOW_BYTES,
    ) -> None:
        names = list(names)
        if not names or not all(isinstance(n, str) for n in names):
            raise TypeError("table: a list of series names (str), at least one")
        if len(set(names)) != len(names):
            raise ValueError(f"table: a series named twice in {names!r}")
        self._core = store._core
        self.names = names
        column = series_columns(names)
        self._columns = [(n, column[n], None, False, "float64") for n in names]
        self._runs = None if runs is None else _run_list(runs)
        self._steps = step_range(steps)
        self.batch_rows = _batch_rows(batch_rows)
        self.window_bytes = window_bytes
        missing = [n for n in names[1:] if n not in self._core.names()]
        if missing:
            raise KeyError(f"series {missing[0]!r} not found")
        self.__arrow_c_schema__()  # an unknown first series is a KeyError now

    def _join(self, schema_only: bool) -> Any:
        return self._core.arrow_join(
            self.names[0],
            self._columns,
            runs=self._runs,
            steps=self._steps,
            batch_rows=self.batch_rows,
            window_bytes=self.window_bytes,
            schema_only=schema_only,
        )

    def __arrow_c_schema__(self) -> Any:
        """The schema, in a PyCapsule named "arrow_schema"."""
        return self._join(True)

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        """A new stream of the join, in a PyCapsule named "arrow_array_stream"
        (``requested_schema`` is not followed)."""
        return self._join(False)

    def __repr__(self) -> str:
        return f"JoinedTable({self.names!r})"


def _batch_rows(batch_rows: Any) -> int:
    if not isinstance(batch_rows, int) or isinstance(batch_rows, bool) or batch_rows < 1:
        raise ValueError(f"table: batch_rows must be an int of at least 1, got {batch_rows!r}")
    return batch_rows


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


#: The DuckDB connection whose cursors runstore.sql queries with (DuckDB's default one, which
#: ``duckdb.sql`` uses, in the process that first asked), and that process: a database is not
#: carried across fork, so a forked child makes one of its own. A cursor is a connection of
#: its own, whose views and settings no other sees, made in well under a millisecond where a
#: database takes 20-40 ms.
_DATABASE: tuple[int, Any] | None = None


def _cursor(duckdb: Any) -> Any:
    global _DATABASE
    if _DATABASE is None or _DATABASE[0] != os.getpid():
        forked = _DATABASE is not None
        _DATABASE = (os.getpid(), duckdb.connect() if forked else duckdb.default_connection())
    return _DATABASE[1].cursor()


def connect(store: Any, duckdb: Any, query: str | None = None, own: bool = False) -> Any:
    """A connection of the module ``duckdb`` with a view of each series of ``store`` (by its
    name: columns run, step, value) and, for a store of experiments, of its experiments table
    (``experiments``, unless a series is called that, and ``"~experiments"``), each read in
    place when a query reads it (``runstore sql``, ``runstore.sql``). Given the ``query`` the
    connection is for, the experiments table is a view only if it names it, and reads only the
    columns it names (a stream cannot be told which columns a query reads). A cursor of this
    process's database, or with ``own`` a database of its own (whose settings, such as
    ``enable_external_access``, reach no other connection)."""
    con = duckdb.connect() if own else _cursor(duckdb)
    # DuckDB draws a progress bar on standard output for a long query, terminal or not: in
    # the middle of a CSV.
    con.execute("SET enable_progress_bar = false")
    # The series by the types the snapshot's index gives, without resolving their keys (which
    # reads every block of a series whose keys may repeat, as an experiment's status does): a
    # series whose every record is hidden is a view of no rows.
    every = [d["name"] for d in store._core.series(include_reserved=True, counts=False)]
    names = [n for n in every if not n.startswith("~")]
    for name in names:
        con.register(name, store.table(name))
    if DESIGN in every:  # a store of experiments (define_experiments)
        named = None if query is None else _names_in(duckdb, query)
        views = {"~" + EXPERIMENTS} | ({EXPERIMENTS} if EXPERIMENTS not in names else set())
        # DuckDB reads a view's schema when it is registered: the experiments table (the
        # design's runs and a window) only for a query that names it.
        if named is None or named[0] & views:
            # In the store's order: a table of SQL has none but ORDER BY's.
            experiments = store.experiments_table(
                None if named is None else named[1], ordered=False
            )
            for view in sorted(views):
                con.register(view, experiments)
    return con
