"""runstore.export: a store's records in other formats, and back.

Functions over an open :class:`runstore.Store`; ``Store.export_tar``, ``Store.export_parquet``
and ``Store.to_arrow`` are the same functions as methods.

- :func:`export_tar`: the experiments and their outcomes as a .tar.gz of CSVs (and .npy) that
  opens in a spreadsheet; :func:`import_tar` reads it back into a store, dtypes intact.
- :func:`export_parquet`: one Parquet file, a row per experiment (needs pyarrow).
- :func:`to_arrow`: the records as a pyarrow Table, zero-copy where the bytes allow.
- :func:`to_xarray`: an xarray Dataset with a row per run (per experiment with a design), the
  parameters and status as coordinates; in memory, or lazily (dask) when larger than memory.
- :func:`to_zarr`: that Dataset as a Zarr store, which ``xarray.open_zarr`` opens without
  runstore (needs the ``xarray`` extra: xarray, zarr, dask).

Exports stream in bounded memory, and each writes its file (or directory) whole or not at all,
never inside the store (python/README.md, "Exports"). A CSV of every record, at every step, is
the ``runstore export csv`` command.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from . import _arrow, _import, _tar, _tar_stream, _xarray, _zarr

if TYPE_CHECKING:
    import pyarrow
    import xarray

    from ._checks import RunId, StepWindow
    from ._reader import StoreReader

__all__ = ["export_tar", "import_tar", "export_parquet", "to_arrow", "to_xarray", "to_zarr"]

#: import_tar's default max_expansion: decompressed bytes an archive may hold per byte of its
#: size (runstore's exports, gzip level 1, expand at most about 230 times).
MAX_EXPANSION = _tar_stream.MAX_EXPANSION


def export_tar(
    store: StoreReader,
    path: str | os.PathLike[str],
    *,
    chunk_rows: int = 10_000,
    compresslevel: int = 1,
    overwrite: bool = True,
    progress: bool = True,
) -> dict[str, Any]:
    """Writes the store's experiments and their outcomes to a .tar.gz that opens in a
    spreadsheet.

    Members: ``metadata.json`` (every dtype and shape, member file names), then
    ``experiments.csv`` (id, parameters, status), one CSV per outcome of up to two
    dimensions (rows in experiment order; a 1-d outcome gets one column per element, a 2-d
    one columns ``<name>_i_j``), and ``.npy`` files for outcomes of three or more
    dimensions. :func:`runstore.import_tar` reads it back with dtypes intact. The layout is
    specified in docs/experiments.md.

    Streamed: rows are formatted ``chunk_rows`` at a time and each member goes through a
    temporary file, so memory does not grow with the outcomes' size. gzip ``compresslevel``
    1 (default) compresses CSVs of floats almost as well as 6 and several times faster. Returns
    a summary: path, experiments, members, bytes, seconds, and left_out: the number of records
    per outcome that are not in the table (records at steps other than 0, or of run ids that
    are not experiments; ``runstore export csv`` writes every record).
    A store without a design exports its runs (every run id with step-0 records) as the
    experiments.

    The file appears whole when complete or not at all, with mode 0666 minus the umask; an
    existing file is replaced, as pandas and numpy do (``overwrite=False``: FileExistsError
    instead; the ``runstore`` command refuses unless ``--force``). On Linux it is written
    without a name (``O_TMPFILE``) and linked into place, so that even a SIGKILL leaves
    nothing behind; where the file system cannot do that (NFS), under a temporary name in
    the same directory, removed on an exception, SIGINT or SIGTERM (see python/README.md).
    Raises ValueError if ``path`` is inside the store, and OSError naming ``path`` (in its
    message and ``filename``) if it cannot be written, e.g. on a full disk.

    ``progress``: draw a progress line on stderr while it runs, when stderr is a terminal.
    """
    return _tar.export_tar(store, path, chunk_rows, compresslevel, overwrite, progress)


def import_tar(
    path: str | os.PathLike[str],
    store: StoreReader,
    *,
    chunk_rows: int = 10_000,
    max_expansion: float | None = _tar_stream.MAX_EXPANSION,
) -> StoreReader:
    """Rebuilds a store from a tarball written by :func:`export_tar` (or ``runstore export
    tar``): writes it into ``store``, an open writable Store.

    The design (ids, parameters with their dtypes, column order), the status of every
    experiment and every outcome (dtypes and shapes as recorded in metadata.json) are written
    to the store (an existing store must not define the same experiments with other
    parameters, nor hold an outcome's series with another dtype or shape). Rows of an
    outcome's CSV are matched to experiments by their ``experiment`` cell, so a sheet sorted or
    filtered in a spreadsheet imports right (an experiment without a row has no value).
    Returns the store, refreshed. (:func:`runstore.import_tar` takes the store's path and
    builds a new store there whole.)

    Whole or nothing: the records are written into a store of their own beside ``store`` and
    committed once; only when the whole archive has been read, with every member metadata.json
    names, is that one segment file linked into ``store``, so that readers see all of the
    import or none of it. After any error ``store`` is as it was.

    The archive is not trusted. It is read as a stream in bounded memory (``chunk_rows`` rows,
    at most 4 MiB of text, at a time); it may decompress to at most ``max_expansion`` times
    its size (64 MiB at least; None: no limit), so that a gzip bomb is refused; a member that
    is a link, a device or a FIFO, a cut or damaged archive, metadata.json that is not what an
    export writes, an outcome named like runstore's own series (``~resume``, ``~status/...``),
    a row whose id is not an experiment, a cell that is not a value of its dtype: each raises
    ValueError naming the archive, the member and the line.

    Raises RuntimeError for a store opened read-only.
    """
    if store.read_only:
        raise RuntimeError(f"import_tar: the store {store.path} is open read-only")
    return _import.import_tar(path, store, chunk_rows, max_expansion)


def export_parquet(
    store: StoreReader,
    path: str | os.PathLike[str],
    *,
    row_group_rows: int = 10_000,
    compression: str = "zstd",
    overwrite: bool = True,
    progress: bool = True,
) -> dict[str, Any]:
    """Writes one Parquet file: one row per experiment (design order) with the id, the
    parameters, the status columns and every outcome (step 0): scalars as columns,
    fixed-shape arrays as (nested) fixed-size lists. Written row group by row group of
    ``row_group_rows`` rows, in bounded memory. pandas, polars, DuckDB and Spark read it
    without runstore. A store without a design writes :func:`to_arrow`'s table instead.
    Needs pyarrow (the ``arrow`` extra). The file is written as :func:`export_tar` writes
    its own: whole or not at all, mode 0666 minus the umask, replacing an existing file
    unless ``overwrite=False``, never inside the store, errors naming ``path``; and a
    progress line on stderr while it runs, when stderr is a terminal (``progress=False``:
    never)."""
    return _arrow.export_parquet(store, path, row_group_rows, compression, overwrite, progress)


def to_arrow(
    store: StoreReader,
    names: Iterable[str] | str | None = None,
    runs: Iterable[RunId] | None = None,
    steps: StepWindow | None = None,
) -> pyarrow.Table:
    """The store's records as a pyarrow Table (needs the ``arrow`` extra: pyarrow).

    Rows and order as :meth:`Store.to_pandas`: one per (run, step), sorted. Columns ``run``,
    ``step``, then one per series in ``names`` (default: every scalar and fixed-shape
    numeric series): scalars as plain columns (strings as ``string``, bytes as
    ``binary``), fixed-shape arrays as fixed-size lists (nested for two or more
    dimensions). Absent values are nulls. Where a series' records are already in that order
    and stored uncompressed in one block, its column is zero-copy: an Arrow buffer over the
    read-only numpy view of the mapped file, which keeps the mapping alive.

    With ``runs`` and ``steps``, the rows of those runs and steps only (see
    :meth:`Store.scan`).

    Raises KeyError for an unknown name and ValueError for a variable-shape series.
    """
    return _arrow.to_arrow(store, names, runs, steps)


def to_xarray(
    store: StoreReader,
    names: Iterable[str] | str | None = None,
    *,
    by_step: bool | None = None,
    lazy: bool | None = None,
    chunks: int | Mapping[str, int] | None = None,
) -> xarray.Dataset:
    """The store as an xarray Dataset (needs xarray; a lazy one dask too: the ``xarray``
    extra), one row per run along the dimension ``run``.

    A store with a design (``define_experiments``) has a row per experiment in design order:
    ``run`` holds the experiment ids (str for derived ids), and the parameters and status
    (``state``, ``error``, ``host``, ``started``, ``finished``, ``seconds``, ``attempt``, named
    as in :func:`runstore.load_results`) are coordinates along ``run``. Each outcome is a data
    variable of its step-0 records: ``(run,)`` for scalars, ``(run, <name>_dim_0, ...)`` for
    arrays. Any other store has a row per run id (sorted as :meth:`Store.runs`; int and str ids
    together become str) and its series are variables of ``(run, step, ...)`` over every step
    any of them has. ``by_step=True`` gives variables by step in a store with a design too,
    ``by_step=False`` step 0 only in any store.

    ``names``: the series to make variables of (default: every series of fixed shape).
    Absent values are NaN; int, uint and bool variables that can have gaps (arrays and
    variables by step always, columns of one value per run when one is missing) are float64
    for that; strings are ``numpy.dtypes.StringDType(na_object=None)`` (str run ids an object
    index), bytes object arrays, None where absent. ``attrs`` say where each
    variable comes from (``runstore_role``, ``runstore_series``, ``runstore_dtype``); the
    Dataset's attrs hold the store's attrs, its path and runstore's version; a parameter with
    categories in ``store.attrs["categories"]`` keeps them in its ``attrs["categories"]``.

    ``lazy``: False reads every variable into memory (each array read a chunk of runs at a time
    straight into its place, so memory is the Dataset and a few MiB); True makes dask arrays
    that read their chunks when computed (``chunks``: runs per chunk, or ``{"run": r, "step":
    s}``; default about 64 MiB of the largest variable); None (default) is lazy when the
    Dataset would take more than half of the memory available to the process (MemAvailable,
    or what its cgroup leaves), or when ``chunks`` is given. A lazy Dataset reads the store
    as it is when computed, within the runs and steps fixed when it was made.

    Raises ValueError for a store without records, a reserved name, or a variable-shape series
    named (read those with :meth:`Store.scan`); KeyError naming a series the store does not
    have; MemoryError when the Dataset is larger than memory and dask is not installed.
    """
    return _xarray.to_xarray(store, names, by_step, lazy, chunks)


def to_zarr(
    store: StoreReader,
    path: str | os.PathLike[str],
    names: Iterable[str] | str | None = None,
    *,
    by_step: bool | None = None,
    chunks: int | Mapping[str, int] | None = None,
    overwrite: bool = False,
    progress: bool = True,
) -> dict[str, Any]:
    """Writes :func:`to_xarray`'s Dataset as a Zarr store (format 3, consolidated metadata)
    at ``path``, which ``xarray.open_zarr(path)`` opens without runstore. Needs xarray, zarr
    and dask (the ``xarray`` extra).

    Streamed: the Dataset is read and written a Zarr chunk at a time (``chunks`` as for
    :func:`to_xarray`; default about 8 MiB of values of the largest variable), so memory
    holds one chunk whatever the size of the store. In the Zarr store, absent strings are empty
    (Zarr strings have no missing value) and each variable's name is escaped where Zarr, a
    file system or Windows would split, merge or refuse it ("/", "\\", "%", control
    characters, zarr.json, CON, names equal but for case: docs/experiments.md), so that every
    series is a variable of its own; ``attrs["runstore_series"]`` keeps the series' name.
    Bytes series are left out (Zarr format 3 specifies no type for them; ``left_out`` names
    them) and refused when named.

    The directory appears whole when complete or not at all: it is written under a temporary
    name beside ``path`` and renamed into place. An existing ``path`` raises FileExistsError
    unless ``overwrite`` (as ``xarray.Dataset.to_zarr`` does), and is then replaced only if it
    is a file, an empty directory or a Zarr store (ValueError otherwise, and when it holds the
    store). Raises ValueError if ``path`` is inside the store, and the errors of
    :func:`to_xarray`. Returns a summary: path, runs, steps (None without a step dimension),
    variables, left_out, chunks (chunk files written), bytes, seconds. ``progress``: draw a
    progress line on stderr while it runs (dask's tasks done), when stderr is a terminal.
    """
    return _zarr.to_zarr(store, path, names, by_step, chunks, overwrite, progress)
