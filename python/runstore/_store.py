"""The Store class: opening a store and reading it.

Store's experiment and export methods are one-line delegations to runstore.experiments and
runstore.export, which this module imports (they never import it); so are the top-level
functions that also take a path and open it (load_results, run_experiments, import_tar)."""

from __future__ import annotations

import operator
import os
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import numpy as np

from . import _attrs, _core, _frame, _progress, _signals, experiments, export
from ._arrow_stream import BATCH_ROWS, JoinedTable, SeriesTable, connect
from ._checks import RunId, StepWindow, step_range
from ._core import Writer
from .export import _import, _tar_stream
from .export._arrow import ExperimentsTable

if TYPE_CHECKING:
    import pandas
    import pyarrow
    import xarray

_MODES = {
    # mode: (read_only, create)
    "a": (False, True),
    "r": (True, False),
    "r+": (False, False),
}
#: on_damaged: whether segments that cannot be read are left out (OnDamaged::kSkip).
_ON_DAMAGED = {"raise": False, "skip": True}
#: How many problems the message of Store.verify's CorruptionError spells out.
_VERIFY_MESSAGE_PROBLEMS = 10
_F = TypeVar("_F", bound=Callable[..., Any])

# A writer's with-block makes SIGTERM raise in the main thread while it runs (_signals).
_core._set_signal_hooks(_signals.enter, _signals.leave)

#: Every Store of this process (see _after_fork_in_child).
_STORES: weakref.WeakSet[Store] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """A Store's lock, held by another thread of the parent at the fork (opening the store),
    would be held for ever in the child, whose one thread is this one: each gets a new one. What
    the core store itself does across fork is in docs/design.md#fork."""
    for s in list(_STORES):
        s._lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _doc(fn: Callable[..., Any]) -> Callable[[_F], _F]:
    """Gives what it decorates (a Store method, or a top-level function that also takes a
    path) the docstring of ``fn``, the module function it delegates to: one text for both."""

    def decorate(method: _F) -> _F:
        method.__doc__ = fn.__doc__
        return method

    return decorate


@dataclass(frozen=True)
class SeriesInfo:
    """What a store holds under one series name."""

    name: str
    #: runstore dtype name: "bool", "int8".."int64", "uint8".."uint64", "float32", "float64",
    #: "string" or "bytes".
    dtype: str
    #: Shape of every record; () for scalars, strings and bytes; None if variable.
    shape: tuple[int, ...] | None
    variable_shape: bool
    #: Visible records (after later commits replaced earlier ones and resume markers hid some).
    count: int
    #: Bytes of its blocks on disk.
    stored_bytes: int
    #: Its rank among the store's series in the order they were first logged (0 first).
    first_logged: int = 0

    @property
    def is_scalar(self) -> bool:
        """True for series of one number, string or bytes per record (a to_pandas column)."""
        return self.shape == ()


@dataclass(frozen=True)
class DamagedSegment:
    """A segment file that a store opened with ``on_damaged="skip"`` left out: its records are
    not read, and keys it overwrote or hid resolve as if it did not exist."""

    #: Path relative to the store ("segments/w1-00000001.rss").
    file: str
    #: What reading it gave: "Corruption" (its bytes are damaged) or "IOError" (it cannot be
    #: opened or read, e.g. it is not a regular file).
    kind: str
    #: The error, naming the file and, for Corruption, the offset.
    message: str


@dataclass(frozen=True)
class SegmentInfo:
    """One segment file of a store."""

    file: str
    writer_id: str
    sequence: int
    sealed: bool
    committed_bytes: int
    file_bytes: int
    commits: int
    blocks: int
    created_ns: int


class Store:
    """A runstore store: a directory of segment files written by any number of writers.

    Reads see a snapshot: the commits made before the store was opened or last refreshed.
    A Store may be used from several threads; it pickles as (path, mode, on_damaged), so it can
    be handed to worker processes, each of which then opens it again. An unpickled Store opens
    the store when it is first used, not when it is unpickled: opening reads every segment's
    index, and a Store passed to thousands of tasks that only name its path (a Dask graph's
    tasks, say) would otherwise read the whole store once per task.
    """

    __slots__ = ("_opened", "_lock", "_path", "_mode", "_on_damaged", "__weakref__")

    def __init__(
        self,
        path: str | os.PathLike[str],
        mode: Literal["a", "r", "r+"] = "a",
        on_damaged: Literal["raise", "skip"] = "raise",
    ) -> None:
        """Opens the store at ``path``; see :func:`runstore.open`."""
        self._set(path, mode, on_damaged)
        self._open()

    def _set(self, path: str | os.PathLike[str], mode: str, on_damaged: str) -> None:
        """Checks and keeps what the store is opened with; opens nothing."""
        if mode not in _MODES:
            raise ValueError(f"mode must be 'a', 'r' or 'r+', got {mode!r}")
        if not isinstance(on_damaged, str) or on_damaged not in _ON_DAMAGED:
            raise ValueError(f"on_damaged must be 'raise' or 'skip', got {on_damaged!r}")
        # An absolute path, so that a pickled Store opens the same store in a worker process
        # whatever its working directory.
        self._path = os.path.abspath(os.fspath(path))
        self._mode = mode
        self._on_damaged = on_damaged
        self._opened: Any = None
        self._lock = threading.Lock()
        _STORES.add(self)

    def _open(self) -> Any:
        with self._lock:  # of this Store only: opening another store need not wait
            if self._opened is None:
                read_only, create = _MODES[self._mode]
                self._opened = _core.Store(
                    self._path,
                    read_only=read_only,
                    create=create,
                    skip_damaged=_ON_DAMAGED[self._on_damaged],
                )
            return self._opened

    @property
    def _core(self) -> Any:
        opened = self._opened
        return opened if opened is not None else self._open()

    # -- properties ---------------------------------------------------------------------------

    @property
    def path(self) -> str:
        """The store's directory."""
        return self._path

    @property
    def mode(self) -> str:
        """The mode it was opened with: 'a', 'r' or 'r+'."""
        return self._mode

    @property
    def read_only(self) -> bool:
        """True if opened with mode='r'."""
        return _MODES[self._mode][0]

    @property
    def on_damaged(self) -> str:
        """What opening and refreshing do with a segment that cannot be read: "raise" or
        "skip" (see :func:`runstore.open`)."""
        return self._on_damaged

    @property
    def damaged_segments(self) -> list[DamagedSegment]:
        """The segments the current snapshot left out because they could not be read, sorted by
        file name; always empty unless the store was opened with ``on_damaged="skip"``."""
        return [DamagedSegment(**d) for d in self._core.damaged_segments()]

    @property
    def attrs(self) -> _attrs.Attrs:
        """The store's attributes: a small JSON document (at most 16 MiB) for metadata that a
        user or an integration keeps with the results (parameter kinds, categories, versions).
        A mapping of str to JSON values; each change is published whole and crash-safe, and
        lands or raises when processes change it at once (docs/format.md, "Attributes").
        ``attrs["categories"] = {param: [...]}`` makes that parameter a pandas Categorical in
        ``design()`` and ``load_results``."""
        return _attrs.Attrs(self.path, self.read_only)

    # -- writing ------------------------------------------------------------------------------

    def writer(
        self,
        *,
        buffer_bytes: int | None = None,
        codec: Literal["none", "lz4", "zstd"] | None = None,
        commit_every_s: float | None = None,
        commit_every_bytes: int | None = None,
        writer_id: str | None = None,
        zstd_level: int | None = None,
        segment_bytes: int | None = None,
        staging_dir: str | os.PathLike[str] | None = None,
        ship_every_s: float | None = None,
        record_time: bool = False,
        _allow_reserved: bool = False,
    ) -> Writer:
        """Creates a writer that appends to this store.

        Use it as a context manager: leaving the ``with`` block commits and closes it, also when
        the block raised (then the exception propagates after the commit). In the main thread,
        SIGTERM (a batch system's preemption) raises ``SystemExit(143)`` in the block, as Ctrl-C
        raises KeyboardInterrupt, so that leaving it commits (docs/experiments.md, "Signals").
        A writer belongs to the process that made it: in a child of fork() its methods raise
        RuntimeError; open a writer there instead.

        Args:
            buffer_bytes: upper bound on memory held for records not yet written (default 64 MiB);
                appends wait for the background writer beyond it.
            codec: compression of series not given one by ``Writer.define``: "none" (default;
                reads are zero-copy), "lz4" or "zstd".
            commit_every_s: commit automatically this many seconds after the first uncommitted
                append (default: never).
            commit_every_bytes: commit automatically after this many bytes (default: never).
            writer_id: unique id, ``[A-Za-z0-9._-]{1,64}``, naming its segment files (default:
                host, pid and randomness). Two live writers with one id write segment files
                of their own (the second takes the next free number), as does a writer that
                restarts with its id.
            zstd_level: zstd compression level (default 3).
            segment_bytes: size at which a segment file is sealed and a new one started
                (default 1 GiB).
            staging_dir: node-local staging (docs/design.md#staging): segments are written and
                committed in this directory on local disk, and each sealed one is shipped into
                the store by a thread of the writer's own. A commit is visible to the store's
                readers once shipped (``Writer.shipped_ticket``, ``Writer.wait_for_shipped``).
                Default: ``$RUNSTORE_STAGING_DIR`` if set; ``""``: no staging. What a crash
                leaves there is shipped by :func:`runstore.sync` (``runstore sync``).
            ship_every_s: with staging, seal and ship at least this often while committed data
                is unshipped (default: at segment_bytes, wait_for_shipped and close).
            record_time: keep the wall-clock time of every ``log`` and ``put`` call (and of
                every record of a ``log_many``), read back with ``scan(name, with_time=True)``
                and ``to_pandas(time=True)``: one float64 record (Unix seconds, microsecond
                resolution) per call and (run, step), in the reserved series ``~time``. Off by
                default: it costs about 0.1 us and 24 bytes per step (docs/performance.md).

        Raises RuntimeError for a store opened read-only, OSError if it is not writable.
        """
        return self._core.writer(
            writer_id=writer_id,
            buffer_bytes=buffer_bytes,
            codec=codec,
            zstd_level=zstd_level,
            commit_every_s=commit_every_s,
            commit_every_bytes=commit_every_bytes,
            segment_bytes=segment_bytes,
            allow_reserved=_allow_reserved,
            staging_dir=None if staging_dir is None else os.fspath(staging_dir),
            ship_every_s=ship_every_s,
            record_time=record_time,
        )

    # -- experiments --------------------------------------------------------------------------

    @_doc(experiments.define)
    def define_experiments(self, design: Any) -> pandas.DataFrame:
        return experiments.define(self, design)

    @_doc(experiments.design)
    def design(self) -> pandas.DataFrame:
        return experiments.design(self)

    @_doc(experiments.status)
    def status(self) -> pandas.DataFrame:
        return experiments.status(self)

    @_doc(experiments.pending)
    def pending(self, retry_failed: bool = True) -> list[RunId]:
        return experiments.pending(self, retry_failed)

    # -- export -------------------------------------------------------------------------------

    @_doc(export.export_tar)
    def export_tar(
        self,
        path: str | os.PathLike[str],
        *,
        chunk_rows: int = 10_000,
        compresslevel: int = 1,
        overwrite: bool = True,
        progress: bool = True,
    ) -> dict[str, Any]:
        return export.export_tar(
            self,
            path,
            chunk_rows=chunk_rows,
            compresslevel=compresslevel,
            overwrite=overwrite,
            progress=progress,
        )

    @_doc(export.export_parquet)
    def export_parquet(
        self,
        path: str | os.PathLike[str],
        *,
        row_group_rows: int = 10_000,
        compression: str = "zstd",
        overwrite: bool = True,
        progress: bool = True,
    ) -> dict[str, Any]:
        return export.export_parquet(
            self,
            path,
            row_group_rows=row_group_rows,
            compression=compression,
            overwrite=overwrite,
            progress=progress,
        )

    @_doc(export.to_xarray)
    def to_xarray(
        self,
        names: Iterable[str] | str | None = None,
        *,
        by_step: bool | None = None,
        lazy: bool | None = None,
        chunks: int | Mapping[str, int] | None = None,
    ) -> xarray.Dataset:
        return export.to_xarray(self, names, by_step=by_step, lazy=lazy, chunks=chunks)

    @_doc(export.to_zarr)
    def to_zarr(
        self,
        path: str | os.PathLike[str],
        names: Iterable[str] | str | None = None,
        *,
        by_step: bool | None = None,
        chunks: int | Mapping[str, int] | None = None,
        overwrite: bool = False,
        progress: bool = True,
    ) -> dict[str, Any]:
        return export.to_zarr(
            self,
            path,
            names,
            by_step=by_step,
            chunks=chunks,
            overwrite=overwrite,
            progress=progress,
        )

    # -- reading ------------------------------------------------------------------------------

    def refresh(self) -> Store:
        """Takes a new snapshot that includes every commit made since open (or the last refresh).

        Arrays returned before stay valid. Returns the store itself.
        """
        self._core.refresh()
        return self

    def write_catalog(self) -> int:
        """Writes the store's catalog and returns the number of sealed segments in it.

        The catalog (``<store>/CATALOG``) caches every sealed segment's index, so that opening
        a store of many segments reads one file instead of every segment's footer. It is only a
        cache: an entry is used while its segment's size, modification time and inode are
        unchanged, and a store opened for writing rewrites it when the store has grown by a
        quarter. Raises ``RuntimeError`` for a store opened read-only.
        """
        return self._core.write_catalog()

    def names(self) -> list[str]:
        """Names of the series with at least one visible record, sorted."""
        return self._core.names()

    def runs(self) -> list[RunId]:
        """Every run id with a visible record, sorted: ints first (numerically), then strs."""
        return self._core.runs()

    def series(self) -> dict[str, SeriesInfo]:
        """Every series, by name (sorted): dtype, shape, record count, bytes on disk."""
        return {d["name"]: SeriesInfo(**d) for d in self._core.series()}

    def series_info(self, name: str) -> SeriesInfo:
        """The SeriesInfo of one series; KeyError if the store has none of that name."""
        return SeriesInfo(**self._core.series_info(name))

    def segments(self) -> list[SegmentInfo]:
        """The segment files the snapshot reads, sorted by writer id and sequence."""
        return [SegmentInfo(**d) for d in self._core.segments()]

    def info(self) -> dict[str, Any]:
        """A summary: path, mode, format version, series, records, segments and bytes on disk."""
        series = self._core.series()
        segments = self._core.segments()
        return {
            "path": self.path,
            "mode": self._mode,
            "format_version": _core.FORMAT_VERSION,
            "series": len(series),
            "records": sum(s["count"] for s in series),
            "segments": len(segments),
            "sealed_segments": sum(1 for s in segments if s["sealed"]),
            "damaged_segments": len(self._core.damaged_segments()),
            "bytes": sum(s["file_bytes"] for s in segments),
        }

    def compact(
        self,
        *,
        dry_run: bool = False,
        older_than: float = 0.0,
        smaller_than: int = 0,
        memory_bytes: int = 256 << 20,
        retain: float = 300.0,
        adopt_unsealed: bool = False,
        progress: bool = True,
    ) -> dict[str, Any]:
        """Merges many small sealed segments into few large ones, ordered by series and run.

        Writers may go on writing and readers reading meanwhile: every read gives the same
        records before, during and after (docs/design.md#compaction). Only sealed segments are
        merged; ``older_than`` (seconds, by each segment's creation time from the clock of the
        node that wrote it) and ``smaller_than`` (bytes of the file) select among them, 0 for
        any. The merge holds at most about ``memory_bytes`` (at least 16 MiB). With
        ``dry_run`` nothing is written. The merged segments stay ``retain`` seconds (readers
        of newer snapshots leave them out), so that a reader holding an older snapshot can
        still read them; a compaction after that removes them (0: at once). Returns the
        report: ``inputs``, ``excluded`` (left out because they share runs with segments
        that stay, across the merged commit's place in commit order), ``staged`` and
        ``held_back`` (placeholders of segments still in some node's staging, and the segments
        committed after their claims, left for a compaction once they are published),
        ``outputs``,
        ``input_bytes``, ``output_bytes``, ``input_records``, ``output_records``,
        ``removed_leftovers``, ``retained`` (replaced segments kept), ``adopted``, ``seconds``.
        With ``adopt_unsealed`` it also merges the unsealed segments crashed writers left: the
        caller asserts that no writer writes into the store directly meanwhile (should one
        commit after all, the compaction stops counting and readers read its inputs as before;
        docs/design.md#adoption).
        The store's snapshot is refreshed. Raises RuntimeError for a read-only store (unless
        ``dry_run``) or one with damaged segments, OSError naming the file. ``progress``: a
        progress line on stderr (the records merged) while it runs, when stderr is a terminal.
        """
        with _progress.Line("runstore compact", progress) as line:
            report = self._core.compact(
                dry_run,
                float(older_than),
                int(smaller_than),
                int(memory_bytes),
                float(retain),
                progress=(lambda d, t: line.bar(d, t, "records")) if line.enabled else None,
                adopt_unsealed=bool(adopt_unsealed),
            )
        self._core.refresh()
        return report

    def verify(self, *, progress: bool = True) -> int:
        """Reads every block of every segment and checks its checksum, continuing past problems.

        Returns the number of blocks checked when there is no problem. Otherwise raises
        CorruptionError once everything has been read: its message is the problem's (naming the
        file and the offset), or for several ``"N problems: first; second; ..."``, and its
        ``problems`` attribute lists every one as ``"Kind: message"``. The segments left out as
        damaged (``on_damaged="skip"``) are problems too, a segment that cannot be read at all
        as ``"IOError: ..."``. ``progress``: a progress line on stderr (the bytes checked) while
        it runs, when stderr is a terminal.
        """
        with _progress.Line("runstore verify", progress) as line:
            report = self._core.verify_all(
                (lambda d, t: line.bar(d >> 20, t >> 20, "MiB")) if line.enabled else None
            )
        problems = [f"{kind}: {message}" for kind, message in report["problems"]]
        if not problems:
            return report["blocks_checked"]
        shown = [p.removeprefix("Corruption: ") for p in problems[:_VERIFY_MESSAGE_PROBLEMS]]
        if len(problems) == 1:
            text = shown[0]
        else:
            text = f"{len(problems)} problems: " + "; ".join(shown)
            if len(problems) > len(shown):
                text += f"; and {len(problems) - len(shown)} more (see .problems)"
        error = _core.CorruptionError(text)
        error.problems = problems
        raise error

    def get(self, run: RunId, name: str, step: int = 0) -> np.ndarray | str | bytes:
        """The value stored under ``(run, name, step)``.

        Returns a read-only numpy array (0-d for scalars) for numeric series, ``str`` for string
        series and ``bytes`` for bytes series. An uncompressed array is a view into the
        memory-mapped segment file (no copy): ``arr.base`` is a :class:`runstore.ArrayOwner`
        that keeps the mapping alive, also after the Store is gone. Compressed values are
        decompressed into memory of their own (``arr.base.zero_copy`` is False). Copy with
        ``np.array(arr)`` to get a writable array.

        Raises KeyError if there is no such record (or it was hidden by ``Writer.resume``).
        """
        return self._core.get(run, name, step)

    def array(self, run: RunId, name: str, step: int = 0) -> LazyArray:
        """The array under ``(run, name, step)``, read and checked as it is indexed.

        Where :meth:`get` checks the whole array before it returns, ``array`` returns at
        once, and indexing it (``a[::16]``, ``a[1000:2000, 3]``, ``a[5]``) reads and checks
        only the 4 KiB chunks that the result reaches: a strided sample or a few rows of an
        array of many gigabytes cost what they read. Results are read-only numpy arrays (views
        of the mapped file, or numpy scalars as numpy returns them); a chunk that fails its
        checksum raises :class:`runstore.CorruptionError` naming the file and offset, and the
        other chunks stay readable. ``np.asarray(a)`` and ``a.read()`` check every chunk and
        return the whole array, as :meth:`get` does.

        Chunked checks apply to arrays of 1 MiB and more written uncompressed by format
        version 3 and later; any other value is checked whole here, as by :meth:`get`.
        Raises KeyError if there is no such record, TypeError for str and bytes series.
        """
        return LazyArray(self._core.get_lazy(run, name, step), (self, run, name, step))

    def scan(
        self,
        name: str,
        keys: bool = True,
        runs: Iterable[RunId] | None = None,
        steps: StepWindow | None = None,
        with_time: bool = False,
    ) -> dict[str, np.ndarray]:
        """Every visible record of one series, as columns.

        Returns ``{"run": ..., "step": ..., "value": ...}``, read-only numpy arrays of equal
        length in storage order (writer by writer, in append order; sort with
        ``np.lexsort((d["step"], d["run"]))`` if needed). "run" is int64 when every run id is an
        int, otherwise an object array of int and str. "value" has shape ``(count, *shape)``
        for fixed-shape numeric series, and is an object array of arrays (variable shape), str
        or bytes otherwise. A series stored in one uncompressed block comes back as views of the
        mapped file.

        With ``keys=False`` the dict holds "value" alone: the same array, without the cost of
        the run and step columns (which format version 2 may store as sequences and then has
        to build).

        With ``runs`` (a list of run ids), only the records of those runs: the history of one
        run is ``store.scan("loss", runs=[run])``. Blocks that hold none of them are not read,
        so in a store written run by run this reads that run's blocks, not the series. With
        ``steps`` (``range(start, stop)`` or ``(start, stop)``: ``start <= step < stop``), only
        the records of those steps; a block whose steps all lie outside is not read, so
        ``scan("loss", runs=[run], steps=(10**6, 10**6 + 1000))`` reads the blocks of those
        1,000 steps of a long run. (Where blocks' keys overlap, as when one writer logs several
        runs step by step or runs are split among writers, the first scan of a snapshot reads
        every block once to resolve duplicate keys; there the filters save copying, not
        reading.)

        With ``with_time=True``, also "time": when each record was logged, float64 Unix
        seconds (microsecond resolution), from writers made with ``record_time=True``; NaN for
        records written without it. Needs ``keys=True``.

        Raises KeyError for an unknown series.
        """
        d = self._core.scan(name, keys, runs, step_range(steps))
        if with_time:
            if not keys:
                raise ValueError("scan: with_time=True needs keys=True (times are found by key)")
            d = dict(d)
            d["time"] = _frame.times_at(self, d["run"], d["step"], runs, steps)
        return d

    def table(
        self,
        name: str | Iterable[str],
        runs: Iterable[RunId] | None = None,
        steps: StepWindow | None = None,
        batch_rows: int = BATCH_ROWS,
    ) -> SeriesTable | JoinedTable:
        """Series ``name`` as an Arrow stream (columns run, step, value) that pyarrow, DuckDB,
        polars and pandas query in place, a batch of at most ``batch_rows`` records at a time:
        ``duckdb.sql("SELECT run, max(value) FROM t GROUP BY run")`` with ``t =
        store.table("loss")``. ``runs`` and ``steps`` as in :meth:`scan`. A list of names is
        those series joined on (run, step): the keys of the first, a column per series (null
        where it lacks the key). See docs/query.md.

        Raises KeyError for an unknown series."""
        if isinstance(name, (str, bytes)) or not isinstance(name, Iterable):
            return SeriesTable(self, name, runs, steps, batch_rows)  # TypeError for not a str
        return JoinedTable(self, name, runs, steps, batch_rows)

    def experiments_table(
        self,
        columns: Iterable[str] | None = None,
        status: str | Iterable[str] | None = None,
        ordered: bool = True,
    ) -> ExperimentsTable:
        """The experiments as one table (a row per experiment: id, parameters, status fields,
        outcomes; the columns of :func:`runstore.export.export_parquet`) as an Arrow stream
        that DuckDB, polars, pyarrow and pandas take as they are, joined by the C++ core a
        window of experiments at a time each time it is queried. With ``columns``, those of
        its columns only (the others are not read; the id when none of them is one); with
        ``status`` ("failed", or a list of "pending", "running", "done", "failed"), the
        experiments in that state only, the other columns read for them alone. Rows in
        definition order; with ``ordered=False`` in the store's order, which reads the design's
        rows once instead of three times and walks a compacted store's series side by side
        (``runstore.sql`` reads it so: SQL orders with ORDER BY). See docs/query.md."""
        return ExperimentsTable(self, columns, status, ordered)

    def to_pandas(
        self,
        names: Iterable[str] | str | None = None,
        runs: Iterable[RunId] | None = None,
        steps: StepWindow | None = None,
        time: bool = False,
    ) -> pandas.DataFrame:
        """A DataFrame with one row per (run, step) and one column per scalar series.

        Columns: "run", "step", then the series in ``names`` (default: every scalar series,
        i.e. one number, string or bytes per record, in the order they were first logged);
        rows sorted by (run, step) (int run ids before
        str ones). Where a series has no record for a row: NaN in float columns; int, uint and
        bool columns that have gaps become pandas nullable dtypes ("Int64", "UInt8",
        "boolean", ...) holding ``pd.NA``, so that no integer is rounded through float64;
        columns without gaps keep their numpy dtype. String and bytes columns hold Python
        objects (None where missing). With ``runs`` and ``steps``, the rows of those runs and
        steps only (see :meth:`scan`). With ``time=True``, a "time" column after "step": when
        the row was logged (float64 Unix seconds; NaN where its writer did not record time,
        see ``Store.writer(record_time=True)``); ``pd.to_datetime(df.time, unit="s")`` makes
        it a datetime.

        Series of arrays have no column: by default they are left out (``series()`` lists
        them; ``scan`` and ``to_xarray`` read them, and ``runstore.mlinstrument``'s
        ``load_all_results`` gives every series, arrays included, as ml-instrument's
        ``id``/``frame`` table). A series named like a column beside them (``run``, ``step``;
        ``time`` with ``time=True``) is the column ``series.<name>`` (``series.<name>~2`` where
        that is taken too), so that no column takes another's place.

        Raises KeyError for an unknown name and ValueError for a series that is not scalar.
        """
        keys = (*_frame.KEY_COLUMNS, "time") if time else _frame.KEY_COLUMNS
        df = _frame.to_pandas(self, names, runs, steps, keys)
        if time:
            df.insert(
                2,
                "time",
                _frame.times_at(self, df["run"].to_numpy(), df["step"].to_numpy(), runs, steps),
            )
        return df

    @_doc(export.to_arrow)
    def to_arrow(
        self,
        names: Iterable[str] | str | None = None,
        runs: Iterable[RunId] | None = None,
        steps: StepWindow | None = None,
    ) -> pyarrow.Table:
        return export.to_arrow(self, names, runs, steps)

    # -- protocol -----------------------------------------------------------------------------

    def __reduce__(self) -> tuple[Any, ...]:
        return (_unpickled_store, (self._path, self._mode, self._on_damaged))

    def __repr__(self) -> str:
        damaged = f" on_damaged={self._on_damaged!r}" if self._on_damaged != "raise" else ""
        return f"<runstore.Store {self.path!r} mode={self._mode!r}{damaged}>"


def _unpickled_store(path: str, mode: str, on_damaged: str) -> Store:
    """A Store that opens ``path`` when first used (Store.__reduce__)."""
    store = Store.__new__(Store)
    store._set(path, mode, on_damaged)
    return store


def _is_basic_index(x: object) -> bool:
    """Whether numpy treats ``x``, one element of an index, as basic indexing (a view)."""
    if x is None or x is Ellipsis or isinstance(x, slice):
        return True
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


class LazyArray:
    """A numeric array of a store whose bytes are checked as they are read
    (:meth:`Store.array`).

    Index it like a numpy array: basic indexing (ints, slices, ``...``, ``None``) checks the
    chunks the result reaches and returns a read-only view (or a numpy scalar); any other
    index (integer arrays, masks) checks the whole array first. ``np.asarray(a)`` and
    :meth:`read` return the whole array, checked.

    It pickles as its store and key (the store as its path and mode), so it can be handed to
    worker processes (a multiprocessing pool, Dask), each of which opens the store again and
    checks what it reads.
    """

    __slots__ = ("_core", "_raw", "_key")

    def __init__(self, core: Any, key: tuple[Store, RunId, str, int]) -> None:
        self._core = core
        self._raw = core.raw()  # unchecked: only what _core has checked is handed out
        self._key = key

    @property
    def shape(self) -> tuple[int, ...]:
        return self._raw.shape

    @property
    def dtype(self) -> np.dtype:
        return self._raw.dtype

    @property
    def ndim(self) -> int:
        return self._raw.ndim

    @property
    def size(self) -> int:
        return self._raw.size

    @property
    def nbytes(self) -> int:
        return self._raw.nbytes

    @property
    def checked(self) -> bool:
        """Whether every byte of the array has been checked."""
        return self._core.all_checked

    def __len__(self) -> int:
        return len(self._raw)

    def __getitem__(self, key: Any) -> Any:
        k = key if isinstance(key, tuple) else (key,)
        if all(_is_basic_index(x) for x in k):
            # Without an Ellipsis numpy returns a scalar for a full integer index, reading the
            # bytes before they could be checked: take a 0-d view, check it, then the scalar.
            scalar = not any(x is Ellipsis for x in k)
            view = self._raw[(*k, Ellipsis)] if scalar else self._raw[k]
            self._core.check_view(view)
            return view[()] if scalar and view.ndim == 0 else view
        self._core.check_all()
        return self._raw[key]

    def read(self) -> np.ndarray:
        """The whole array, every chunk checked (what :meth:`Store.get` returns)."""
        self._core.check_all()
        return self._raw

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        a = self.read()
        if dtype is not None and np.dtype(dtype) != a.dtype:
            if copy is False:
                raise ValueError(f"converting {a.dtype} to {np.dtype(dtype)} needs a copy")
            return a.astype(dtype)
        return a.copy() if copy else a

    def __reduce__(self) -> tuple[Any, ...]:
        return (_lazy_array, self._key)

    def __repr__(self) -> str:
        state = "checked" if self.checked else "checked as read"
        return f"<runstore.LazyArray shape={self.shape} dtype={self.dtype} ({state})>"


def _lazy_array(store: Store, run: RunId, name: str, step: int) -> LazyArray:
    """Unpickles a LazyArray: the record of the store as it is now."""
    return store.array(run, name, step)


def open(  # noqa: A001
    path: str | os.PathLike[str],
    mode: Literal["a", "r", "r+"] = "a",
    on_damaged: Literal["raise", "skip"] = "raise",
) -> Store:
    """Opens the store at ``path``.

    Modes: "a" (default) reads and writes, creating the store (and missing parent directories)
    if it does not exist; "r" only reads (``Store.writer`` raises RuntimeError); "r+" reads and
    writes an existing store.

    ``on_damaged`` says what opening (and :meth:`Store.refresh`) does with a segment file that
    cannot be read, because its bytes are damaged or the file cannot be opened or read:
    "raise" (default) raises CorruptionError or OSError naming the file, since leaving a
    segment out can bring back values it overwrote and records its resume markers hid;
    "skip" reads every other segment, as if that one did not exist, and lists what was left
    out in :attr:`Store.damaged_segments` (and among the problems of :meth:`Store.verify`).

    Raises FileNotFoundError if there is no store and the mode does not create one, ValueError
    if ``path`` is a file or a non-empty directory that is not a store, or holds a NUL
    character, or for an ``on_damaged`` other than "raise" and "skip", UnsupportedFormatError
    for a store written by a newer runstore, CorruptionError or OSError for a damaged or
    unreadable segment (ending in ``(open with on_damaged="skip" to read the other
    segments)``), OSError for other file-system errors.
    """
    return Store(path, mode, on_damaged)


def sync(
    staging_dir: str | os.PathLike[str],
    store: str | os.PathLike[str],
    *,
    wait_s: float = 5.0,
    force: bool = False,
    progress: bool = True,
) -> dict[str, Any]:
    """Ships what staging writers left in ``staging_dir`` into the store at ``store``.

    Every sealed segment a crashed or preempted writer left is published whole, and the
    committed prefix of an unsealed one (it then reads as a crashed writer's segment); each is
    removed from staging once published. The open segment of a writer that is still alive is
    skipped: a writer whose lease file changes while sync watches it for ``wait_s`` seconds is
    alive (leases beat every 0.5 s). ``force=True`` takes every writer for dead without
    watching, for when none can be running (a job's epilogue). Idempotent: run again, or from
    two processes at once, nothing is published twice and no published segment is replaced.

    Returns ``{"shipped", "already_published", "skipped", "cleaned", "damaged_leases"}``
    (lists of file names; a damaged lease is "name: why") and ``"bytes_shipped"``. Raises
    ValueError for a staging directory that is not apart from the store (the store, inside
    it, or holding it: nothing is touched), FileNotFoundError for a missing staging directory
    or store, CorruptionError for a staged segment whose committed data is damaged (it and its
    writer's later segments stay in staging) or a file named like a lease that is not one (a
    FIFO, a giant: left alone, everything else shipped), FileExistsError when the store holds
    other bytes under a staged segment's name (nothing is replaced), OSError for file-system
    errors.
    ``progress``: a progress line on stderr (the lease watch, then the staged segments done)
    while it runs, when stderr is a terminal.
    """
    line = _progress.Line("runstore sync", progress)

    def draw(done: int, staged: int, shipped: int) -> None:
        if staged == 0:
            line.show(f"watching the writers' leases for {wait_s:g} s")
        else:
            line.bar(done, staged, f"segments, {shipped / 2**20:,.1f} MiB shipped")

    with line:
        return _core.sync(
            os.fspath(staging_dir),
            os.fspath(store),
            wait_s=wait_s,
            force=force,
            progress=draw if line.enabled else None,
        )


def segment_budget(mappings: int | None = None, files: int | None = None) -> tuple[int, int]:
    """The process's budget of segment mappings and open segment files, as ``(mappings,
    files)``; given either, sets it first (from the next segment read on).

    Every store the process opens reads through it: a segment is mapped and opened on its first
    read and keeps both while it is among those read most recently; beyond the budget the least
    recently read give theirs up (an array a reader holds keeps its own mapping). The defaults:
    half of ``vm.max_map_count`` (32,765 on Linux) mappings and 32 descriptors, or an eighth of
    ``ulimit -n`` where that is lower (docs/design.md#catalog). The environment variables
    ``RUNSTORE_SEGMENT_MAPPINGS`` and ``RUNSTORE_SEGMENT_FILES``, read when the process first
    opens a store, set it too. Raises TypeError for anything but an int (a bool too), and
    ValueError for a number below 1 or above 2**32, naming it; the budget then stays.
    """
    given = {}
    for name, n in (("mappings", mappings), ("files", files)):
        if n is None:
            continue
        if isinstance(n, (bool, np.bool_)) or not hasattr(type(n), "__index__"):
            raise TypeError(f"segment_budget: {name} must be an int, got {type(n).__name__}")
        if not 1 <= operator.index(n) <= 2**32:
            raise ValueError(f"segment_budget: {name}={n} must be from 1 to 2**32")
        given[name] = operator.index(n)
    return _core.segment_budget(given.get("mappings"), given.get("files"))


def sql(store: Store | str | os.PathLike[str], query: str) -> Any:
    """Runs ``query`` with DuckDB over ``store`` (a Store, or the path of one, opened
    read-only), read in place: each series is a view named as the series (columns run, step,
    value), ``experiments`` the experiments table. Returns DuckDB's relation
    (``.fetchall()``, ``.df()``, ``.pl()``, ``.arrow()``, ``.show()``). Needs DuckDB
    (``pip install 'runstore[sql]'``), not pyarrow. See docs/query.md."""
    import duckdb

    if not isinstance(store, Store):
        store = Store(store, "r")
    return connect(store, duckdb, query).sql(query)


@_doc(experiments.load_results)
def load_results(
    store: Store | str | os.PathLike[str], names: Iterable[str] | str | None = None
) -> tuple[pandas.DataFrame, dict[str, np.ndarray]]:
    if not isinstance(store, Store):
        store = Store(store, "r")
    return experiments.load_results(store, names)


@_doc(experiments.run)
def run_experiments(
    store: Store | str | os.PathLike[str],
    fn: Callable[..., Mapping[str, Any] | None],
    workers: int | None = None,
    retry_failed: bool = True,
    progress: bool = True,
    *,
    commit_every: int | None = None,
    start_method: str = "spawn",
    shard: tuple[int, int] | None = None,
    client: Any = None,
    spark: Any = None,
    ray: bool = False,
) -> experiments.RunSummary:
    if not isinstance(store, Store):
        store = Store(store)
    return experiments.run(
        store,
        fn,
        workers,
        retry_failed,
        progress,
        commit_every=commit_every,
        start_method=start_method,
        shard=shard,
        client=client,
        spark=spark,
        ray=ray,
    )


def import_tar(
    path: str | os.PathLike[str],
    store_path: str | os.PathLike[str],
    *,
    chunk_rows: int = 10_000,
    max_expansion: float | None = _tar_stream.MAX_EXPANSION,
) -> Store:
    """Rebuilds a store from a tarball of :meth:`Store.export_tar`: design, status and
    outcomes with their dtypes and shapes, written to the store at ``store_path``. Returns the
    store.

    Where ``store_path`` does not exist (or is an empty directory), the store is built under a
    temporary name beside it and renamed into place when the whole archive has been read: it
    appears complete or not at all. An existing store receives the import as
    :func:`runstore.export.import_tar` writes it: one commit, published at once. The archive is
    not trusted: see :func:`runstore.export.import_tar` for what is checked and refused."""
    target = os.fspath(store_path)
    if not os.path.lexists(target) or (
        os.path.isdir(target) and not os.path.islink(target) and not os.listdir(target)
    ):
        return _import.import_new(path, target, Store, chunk_rows, max_expansion)
    return export.import_tar(
        path, Store(target), chunk_rows=chunk_rows, max_expansion=max_expansion
    )
