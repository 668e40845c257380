"""The Store class: opening a store and reading it."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Literal

import numpy as np

from . import _core
from ._core import Writer

if TYPE_CHECKING:
    import pandas
    import pyarrow

RunId = int | str

_MODES = {
    # mode: (read_only, create)
    "a": (False, True),
    "r": (True, False),
    "r+": (False, False),
}


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

    @property
    def is_scalar(self) -> bool:
        """True for series of one number, string or bytes per record (a to_pandas column)."""
        return self.shape == ()


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
    A Store may be used from several threads; it pickles as (path, mode), so it can be handed
    to worker processes, each of which then opens it again.
    """

    __slots__ = ("_core", "_mode", "__weakref__")

    def __init__(self, path: str | os.PathLike[str], mode: Literal["a", "r", "r+"] = "a") -> None:
        """Opens the store at ``path``; see :func:`runstore.open`."""
        if mode not in _MODES:
            raise ValueError(f"mode must be 'a', 'r' or 'r+', got {mode!r}")
        read_only, create = _MODES[mode]
        # An absolute path, so that a pickled Store opens the same store in a worker process
        # whatever its working directory.
        self._core = _core.Store(os.path.abspath(os.fspath(path)), read_only=read_only, create=create)
        self._mode = mode

    # -- properties ---------------------------------------------------------------------------

    @property
    def path(self) -> str:
        """The store's directory."""
        return self._core.path

    @property
    def mode(self) -> str:
        """The mode it was opened with: 'a', 'r' or 'r+'."""
        return self._mode

    @property
    def read_only(self) -> bool:
        """True if opened with mode='r'."""
        return self._core.read_only

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
    ) -> Writer:
        """Creates a writer that appends to this store.

        Use it as a context manager: leaving the ``with`` block commits and closes it, also when
        the block raised (then the exception propagates after the commit).

        Args:
            buffer_bytes: upper bound on memory held for records not yet written (default 64 MiB);
                appends wait for the background writer beyond it.
            codec: compression of series not given one by ``Writer.define``: "none" (default;
                reads are zero-copy), "lz4" or "zstd".
            commit_every_s: commit automatically this many seconds after the first uncommitted
                append (default: never).
            commit_every_bytes: commit automatically after this many bytes (default: never).
            writer_id: unique id, ``[A-Za-z0-9._-]{1,64}``, naming its segment files (default:
                host, pid and randomness). FileExistsError if another writer uses it.
            zstd_level: zstd compression level (default 3).
            segment_bytes: size at which a segment file is sealed and a new one started
                (default 1 GiB).

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
        )

    # -- reading ------------------------------------------------------------------------------

    def refresh(self) -> Store:
        """Takes a new snapshot that includes every commit made since open (or the last refresh).

        Arrays returned before stay valid. Returns the store itself.
        """
        self._core.refresh()
        return self

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
            "bytes": sum(s["file_bytes"] for s in segments),
        }

    def verify(self) -> int:
        """Reads every block of every segment and checks its checksum.

        Returns the number of blocks checked; raises CorruptionError (naming the file and the
        offset) at the first bad one.
        """
        return self._core.verify()

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

    def scan(self, name: str) -> dict[str, np.ndarray]:
        """Every visible record of one series, as columns.

        Returns ``{"run": ..., "step": ..., "value": ...}``, read-only numpy arrays of equal
        length in storage order (writer by writer, in append order; sort with
        ``np.lexsort((d["step"], d["run"]))`` if needed). "run" is int64 when every run id is an
        int, otherwise an object array of int and str. "value" has shape ``(count, *shape)``
        for fixed-shape numeric series, and is an object array of arrays (variable shape), str
        or bytes otherwise. A series stored in one uncompressed block comes back as views of the
        mapped file.

        Raises KeyError for an unknown series.
        """
        return self._core.scan(name)

    def to_pandas(self, names: Iterable[str] | str | None = None) -> pandas.DataFrame:
        """A DataFrame with one row per (run, step) and one column per scalar series.

        Columns: "run", "step", then the series in ``names`` (default: every scalar series,
        i.e. one number, string or bytes per record), sorted by (run, step) (int run ids before
        str ones). Where a series has no record for a row: NaN in float columns; int, uint and
        bool columns that have gaps become pandas nullable dtypes ("Int64", "UInt8",
        "boolean", ...) holding ``pd.NA``, so that no integer is rounded through float64;
        columns without gaps keep their numpy dtype. String and bytes columns hold Python
        objects (None where missing).

        Raises KeyError for an unknown name and ValueError for a series that is not scalar.
        """
        from ._frame import to_pandas

        return to_pandas(self, names)

    def to_arrow(self, names: Iterable[str] | str | None = None) -> pyarrow.Table:
        """:meth:`to_pandas` as a pyarrow Table (needs the ``arrow`` extra: pyarrow)."""
        import pyarrow as pa

        return pa.Table.from_pandas(self.to_pandas(names), preserve_index=False)

    # -- protocol -----------------------------------------------------------------------------

    def __reduce__(self) -> tuple[Any, ...]:
        return (Store, (self.path, self._mode))

    def __repr__(self) -> str:
        return f"<runstore.Store {self.path!r} mode={self._mode!r}>"


def open(path: str | os.PathLike[str], mode: Literal["a", "r", "r+"] = "a") -> Store:  # noqa: A001
    """Opens the store at ``path``.

    Modes: "a" (default) reads and writes, creating the store (and missing parent directories)
    if it does not exist; "r" only reads (``Store.writer`` raises RuntimeError); "r+" reads and
    writes an existing store.

    Raises FileNotFoundError if there is no store and the mode does not create one, ValueError
    if ``path`` is a file or a non-empty directory that is not a store, UnsupportedFormatError
    for a store written by a newer runstore, OSError for file-system errors.
    """
    return Store(path, mode)
