"""runstore.export: a store's records in other formats, and back.

Functions over an open :class:`runstore.Store`; ``Store.export_tar``, ``Store.export_parquet``
and ``Store.to_arrow`` are the same functions as methods.

- :func:`export_tar`: the experiments and their outcomes as a .tar.gz of CSVs (and .npy) that
  opens in a spreadsheet; :func:`import_tar` reads it back into a store, dtypes intact.
- :func:`export_parquet`: one Parquet file, a row per experiment (needs pyarrow).
- :func:`to_arrow`: the records as a pyarrow Table, zero-copy where the bytes allow.

Exports stream in bounded memory, and each writes its file whole or not at all, never inside
the store (python/README.md, "Exports"). A CSV of every record, at every step, is the
``runstore export csv`` command.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from . import _arrow, _import, _tar

if TYPE_CHECKING:
    import pyarrow

    from ._checks import RunId, StepWindow
    from ._store import Store

__all__ = ["export_tar", "import_tar", "export_parquet", "to_arrow"]


def export_tar(
    store: Store,
    path: str | os.PathLike[str],
    *,
    chunk_rows: int = 10_000,
    compresslevel: int = 1,
    overwrite: bool = True,
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
    """
    return _tar.export_tar(store, path, chunk_rows, compresslevel, overwrite)


def import_tar(path: str | os.PathLike[str], store: Store, *, chunk_rows: int = 10_000) -> Store:
    """Rebuilds a store from a tarball written by :func:`export_tar` (or ``runstore export
    tar``): writes it into ``store``, an open writable Store.

    The design (ids, parameters with their dtypes, column order), the status of every
    experiment and every outcome (dtypes and shapes as recorded in metadata.json) are written
    to the store (an existing store must not define the same experiments with other
    parameters). Reads the archive as a stream, member by member, ``chunk_rows`` rows at a
    time. Returns the store, refreshed. (:func:`runstore.import_tar` takes the store's path
    and opens it, creating it if missing.)

    Raises RuntimeError for a store opened read-only, ValueError for a file that is not an
    export this version reads.
    """
    if store.read_only:
        raise RuntimeError(f"import_tar: the store {store.path} is open read-only")
    return _import.import_tar(path, store, chunk_rows)


def export_parquet(
    store: Store,
    path: str | os.PathLike[str],
    *,
    row_group_rows: int = 10_000,
    compression: str = "zstd",
    overwrite: bool = True,
) -> dict[str, Any]:
    """Writes one Parquet file: one row per experiment (design order) with the id, the
    parameters, the status columns and every outcome (step 0): scalars as columns,
    fixed-shape arrays as (nested) fixed-size lists. Written row group by row group of
    ``row_group_rows`` rows, in bounded memory. pandas, polars, DuckDB and Spark read it
    without runstore. A store without a design writes :func:`to_arrow`'s table instead.
    Needs pyarrow (the ``arrow`` extra). The file is written as :func:`export_tar` writes
    its own: whole or not at all, mode 0666 minus the umask, replacing an existing file
    unless ``overwrite=False``, never inside the store, errors naming ``path``."""
    return _arrow.export_parquet(store, path, row_group_rows, compression, overwrite)


def to_arrow(
    store: Store,
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
