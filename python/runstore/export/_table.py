"""A store's experiments as one table (ids, parameters, status, outcomes in design order), read
in bounded memory: what export_tar and export_parquet write, row chunk by row chunk.

Memory: the experiment ids are held as the runs of the design's aligned read (about 24 bytes an
experiment, no Python object per id). A table made with ``window=True`` (the exports) reads its
scalar columns (parameters, status, scalar outcomes) a window of at most ``WINDOW_BYTES`` at a
time, each window one read of the blocks that hold its experiments (``read_aligned``); without
it they are held whole, as arrays of one entry per experiment, for the readers that need all of
them at once (the report, xarray). Array outcomes are read ``chunk_rows`` experiments at a time.
Pages of the store's mapped segment files are released after every chunk (they are page cache,
but they would count in the process's resident set).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import _progress
from .._memory import release_mapped_pages
from ..experiments import _records as ex

if TYPE_CHECKING:
    from .._reader import StoreReader

#: What metadata.json (export_tar) and the Parquet schema's metadata (export_parquet) call
#: the layout they follow (docs/experiments.md), and its version.
EXPORT_FORMAT = "runstore-experiments"
EXPORT_VERSION = 1
#: Bytes of outcome values read (and formatted) at a time, whatever chunk_rows says.
CHUNK_BYTES = 4 << 20
#: Bytes of scalar columns (parameters, status, scalar outcomes) a windowed table reads at a
#: time, about (their values, presence and string codes).
WINDOW_BYTES = 32 << 20


# -- the experiment table ------------------------------------------------------------------------


class Outcome:
    """An outcome series and how it is exported."""

    def __init__(self, name: str, info: dict[str, Any]) -> None:
        self.name = name
        self.dtype: str = info["dtype"]
        self.variable = bool(info["variable_shape"])
        self.shape: tuple[int, ...] | None = None if self.variable else tuple(info["shape"])
        self.info = info
        self.var_len = self.dtype in ("string", "bytes")
        #: Bytes of one record (an estimate for strings, bytes and variable shapes).
        self.row_bytes = (
            64
            if self.var_len or self.shape is None
            else (np.dtype(self.dtype).itemsize * int(np.prod(self.shape, dtype=np.int64)))
        )
        #: Held in memory as one Column (scalars); arrays are read per chunk.
        self.scalar = self.shape == ()
        #: Fixed-shape arrays of no elements ((100, 0)): no cell tells an absent record from an
        #: empty one, so their presence is read up front (a Column of no value bytes) and
        #: recorded in metadata.json (missing, missing_rows).
        self.empty = self.shape is not None and 0 in self.shape
        self.column: ex.Column | None = None

    @property
    def ndim(self) -> int | None:
        return None if self.shape is None else len(self.shape)


class ExperimentTable:
    """A store's experiments as a table: ids, parameters, status, outcomes, in design order.

    A store without a design (no define_experiments) is read as if every run id with a
    visible record were an experiment without parameters."""

    def __init__(
        self,
        store: StoreReader,
        names: Iterable[str] | None = None,
        ids: bool = True,
        window: bool = False,
        status: bool = True,
        infos: dict[str, dict[str, Any]] | None = None,
        params: Iterable[str] | None = None,
    ) -> None:
        """``ids=False``: the ids may be kept as the runs of the aligned read (an
        :class:`ex.RunList`, no Python object per experiment), for readers that take them a chunk
        at a time (``index.take_array``), as the exports do. ``window=True``: the scalar columns
        are read a window of rows at a time (:meth:`columns`), where the design allows (its
        rows are integers and every scalar series is one ``read_aligned`` reads), and
        :attr:`params` and :attr:`status` are not held. ``status=False``: the status series are
        not read (every field absent), for a reader that reads them its own way. ``infos``:
        :func:`ex.reserved_series` of the store, refreshed, if the caller has read it (the
        store is then not refreshed again). ``params``: the parameters read (default every
        one)."""
        if infos is None:
            store.refresh()
            infos = ex.reserved_series(store)
        self.store = store
        #: Every series of the snapshot read, reserved ones included (the _core series dicts).
        self.infos = infos
        self.has_design = ex.ROW in infos
        names = ex.outcome_names(store) if names is None else list(names)
        for n in names:
            if n not in infos:
                raise KeyError(f"series {n!r} not found")
        every_param = ex.design_columns(store, infos)
        wanted_params = None if params is None else set(params)
        params = [p for p in every_param if wanted_params is None or p in wanted_params]
        #: The parameters' names (those read), in the order they were first defined.
        self.param_names = params
        scalars = [n for n in names if Outcome(n, infos[n]).scalar]
        fields = [ex.DESIGN + p for p in params] + (ex.status_series(infos) if status else [])
        self.windowed = (
            window
            and self.has_design
            and ex.aligned_design(infos)
            and all(ex.alignable(infos[n]) for n in fields)
        )
        if self.windowed:  # scalars of bytes are read a chunk at a time, as arrays are
            scalars = [n for n in scalars if ex.alignable(infos[n])]
        #: The series read as scalar columns: parameters, status, scalar outcomes.
        self._scalar_series = wanted = fields + scalars
        self._held: dict[str, ex.Column] | None = None
        self._window: tuple[slice, dict[str, ex.Column]] | None = None
        if self.windowed:
            self.index: ex.ExperimentIndex | ex.RunList
            self.index, _ = ex.load_aligned(store, [], infos, ids=False)
        elif self.has_design:
            # Parameters, status and scalar outcomes in one aligned read (the core releases the
            # pages of each series' scan before the next).
            self.index, self._held = ex.load_aligned(store, wanted, infos, ids=ids)
        else:
            runs = store._core.runs()
            int_runs = all(isinstance(r, int) for r in runs)
            run_ids = np.array(runs, dtype=np.int64 if int_runs else object)
            self.index = ex.ExperimentIndex(run_ids)
            self._held = {n: ex.read_column(store, n, self.index, infos[n]) for n in wanted}
        release_mapped_pages(store)
        self.n = len(self.index)
        # Named beside every parameter, read or not, as the whole table names them.
        self.status_names = ex.status_names(every_param)
        #: Rows a window of the scalar columns holds (every row when they are held whole).
        self.window_rows = max(1, self.n)
        if self.windowed:
            # The id as a Python str, and what the read holds for each run while it places
            # them (its lists of the runs, by hash and sorted), besides the columns.
            row_bytes = 400
            for n in wanted:
                o = Outcome(n, infos[n])
                row_bytes += (4 if o.dtype == "string" else o.row_bytes) + 1
            self.window_rows = max(1, WINDOW_BYTES // row_bytes)
        self.outcomes: list[Outcome] = []
        #: Counts the rows of every chunk handed out (an export's progress bar).
        self.progress = _progress.quiet()
        self.add_outcomes(names)

    @property
    def params(self) -> dict[str, ex.Column]:
        """Every parameter's whole Column (a table not windowed)."""
        assert self._held is not None, "a windowed table holds no whole columns"
        return {p: self._held[ex.DESIGN + p] for p in self.param_names}

    @property
    def status(self) -> dict[str, ex.Column]:
        """Every status field's whole Column (a table not windowed)."""
        assert self._held is not None, "a windowed table holds no whole columns"
        return ex.status_of(self._held, self.n)

    def add_outcomes(self, names: Iterable[str]) -> None:
        """Adds the outcomes ``names`` (KeyError for one the snapshot lacks); the scalar ones
        are read with the table's scalar columns, those of no elements whole (as Columns)."""
        for n in names:
            if n not in self.infos:
                raise KeyError(f"series {n!r} not found")
            o = Outcome(n, self.infos[n])
            if o.scalar and n not in self._scalar_series and self._held is not None:
                self._scalar_series.append(n)
                self._held[n] = ex.read_column(
                    self.store, n, self.experiment_index(), self.infos[n]
                )
                release_mapped_pages(self.store)
            if o.scalar and self._held is not None:
                o.column = self._held[n]
            elif o.empty:
                o.column = ex.read_column(self.store, n, self.experiment_index(), self.infos[n])
                release_mapped_pages(self.store)
            self.outcomes.append(o)

    def experiment_index(self) -> ex.ExperimentIndex:
        """The index with a Python object per id, made from the runs once if asked for."""
        if isinstance(self.index, ex.RunList):
            self.index = self.index.index()
        return self.index

    @property
    def id_dtype(self) -> str:
        strings = len(self.index.string_rows())
        if strings == 0:
            return "int64"
        return "string" if strings == self.n else "mixed"

    def columns(self, rows: slice) -> dict[str, ex.Column]:
        """The scalar columns (parameters, status, scalar outcomes, by series) of the
        experiments in ``rows``, a slice within one window (as :meth:`chunks` gives them):
        taken from the whole columns, or from the window read last, or read now."""
        if self._held is not None:
            return {n: c.take(rows) for n, c in self._held.items()}
        w = self.window_rows
        start = rows.start // w * w
        if rows.stop > start + w:
            raise ValueError(f"rows {rows.start}:{rows.stop} straddle windows of {w} rows")
        if self._window is None or self._window[0].start != start:
            self._window = None  # the window before is freed before the next is read
            window = slice(start, min(self.n, start + w))
            ids = self.index.take_array(window).tolist()
            cols = ex.read_aligned(self.store, ids, self._scalar_series, self.infos)
            del ids
            release_mapped_pages(self.store)
            self._window = (window, cols)
        window, cols = self._window
        at = slice(rows.start - window.start, rows.stop - window.start)
        return {n: c.take(at) for n, c in cols.items()}

    def param_columns(self, rows: slice) -> dict[str, ex.Column]:
        """Every parameter's Column for ``rows`` (see :meth:`columns`)."""
        cols = self.columns(rows)
        return {p: cols[ex.DESIGN + p] for p in self.param_names}

    def status_columns(self, rows: slice | None = None) -> dict[str, ex.Column]:
        """Status as exported (of ``rows``, see :meth:`columns`, or of every experiment of a
        table not windowed): "pending" where never started, attempt 0 where never started;
        other fields absent (empty cells) where there is no record, and no error for done."""
        if rows is None:
            assert self._held is not None, "a windowed table gives its status a window at a time"
            rows = slice(0, self.n)
        cols = self.columns(rows)
        st = ex.status_of(cols, rows.stop - rows.start)
        out = {}
        for c, v in ex.status_frame_columns(st).items():
            if c in ("state", "attempt"):
                present = np.ones(len(v), dtype=bool)
            elif c == "error":
                present = np.not_equal(v, None) if len(v) else np.zeros(0, dtype=bool)
            else:
                present = st[c].present
            out[c] = ex.Column(np.asarray(v), present, st[c].dtype if c != "attempt" else "int64")
        return out

    def chunk(self, o: Outcome, rows: slice) -> ex.Column:
        """Outcome ``o`` for the experiments in ``rows`` (see :func:`read_rows`)."""
        if o.column is not None:
            return o.column.take(rows)
        if o.name in self._scalar_series:
            return self.columns(rows)[o.name]
        return read_rows(self.store, self.index, o, rows)

    def chunks(
        self, chunk_rows: int, row_bytes: int = 0, budget: int = CHUNK_BYTES
    ) -> Iterable[slice]:
        """Slices of at most chunk_rows experiments and about ``budget`` bytes of values, none
        across two windows of the scalar columns; the store's mapped pages are released after
        each."""
        rows = rows_per_chunk(chunk_rows, row_bytes, budget)
        for window in range(0, self.n, self.window_rows):
            end = min(self.n, window + self.window_rows)
            for start in range(window, end, rows):
                stop = min(end, start + rows)
                yield slice(start, stop)
                release_mapped_pages(self.store)
                self.progress.add(stop - start)
        self._window = None


def rows_per_chunk(chunk_rows: int, row_bytes: int, budget: int = CHUNK_BYTES) -> int:
    """Rows of ``row_bytes`` each that a chunk holds: at most ``chunk_rows`` and about
    ``budget`` bytes, at least one."""
    return max(1, min(chunk_rows, budget // max(1, row_bytes)))


def read_rows(
    store: StoreReader,
    index: ex.ExperimentIndex | ex.RunList,
    o: Outcome,
    rows: slice,
    steps: np.ndarray | None = None,
) -> ex.Column:
    """Outcome ``o`` for the runs of ``index`` in ``rows``: one scan of the series filtered to
    their runs, which touches only the blocks that hold them (the run index), copied into the
    chunk in index order.

    Without ``steps``, the step-0 records: values of shape (rows, *shape). With ``steps`` (step
    values, sorted and unique, a contiguous part of the steps the series may hold), the records
    at those steps: values of shape (rows, len(steps), *shape) and ``present`` of shape (rows,
    len(steps)); a record at a step between them that is not one of them (committed after the
    steps were listed) is left out."""
    ids = index.take_array(rows)
    width = 1 if steps is None else len(steps)
    d = None
    if len(ids) and width:
        window = (0, 1) if steps is None else (int(steps[0]), int(steps[-1]) + 1)
        # Read before the chunk is made, so that a damaged record is Corruption before anything
        # is allocated by the shape its series' headers claim.
        d = store._core.scan(o.name, runs=ids.tolist(), steps=window)
    col = ex.empty_column(len(ids) * width, o.dtype, o.shape)
    if d is not None and len(d["run"]):
        # Placed by the chunk's own ids: an index of every experiment's id (a dict of a
        # million strs) is never built for it.
        at = ex.ExperimentIndex(ids).positions(d["run"])
        values, record_steps = d["value"], d["step"]
        if (at < 0).any():  # a run the filter let through that is not the chunk's
            keep = at >= 0
            at, values, record_steps = at[keep], values[keep], record_steps[keep]
        if steps is not None:
            j = np.minimum(np.searchsorted(steps, record_steps), width - 1)
            keep = steps[j] == record_steps
            at = at * width + j
            if not keep.all():
                at, values = at[keep], values[keep]
        if col.values.dtype == object:  # strings, bytes, arrays of varying shapes
            for k, v in zip(at.tolist(), values):
                col.values[k] = v
        else:
            col.values[at] = values
        col.present[at] = True
    if steps is not None:
        col = ex.Column(
            col.values.reshape((len(ids), width) + col.values.shape[1:]),
            col.present.reshape(len(ids), width),
            col.dtype,
        )
    return col
