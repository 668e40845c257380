"""runstore: results of large parallel computations, written to disk as they are produced.

Any number of writers (threads, processes, nodes) append records ``(run, name, step) -> value``
to one store at once, in bounded memory and crash-safe; readers get them back as numpy arrays
(zero-copy for uncompressed data) and pandas DataFrames.

    import runstore
    store = runstore.open("sweep.rs")             # creates the store if missing
    with store.writer() as w:                     # commits and closes on leaving the block
        w.log(run=17, step=0, loss=0.25, trace=np.arange(100.0))
    store.refresh()                               # see commits made since open
    store.get(17, "loss")                         # array(0.25): a 0-d, read-only array
    store.to_pandas()                             # run, step, one column per scalar series

Experiments (docs/experiments.md): a design table, a process pool that runs what is not done,
and the results as numpy arrays:

    store.define_experiments(runstore.grid(lr=[0.1, 0.01], seed=range(10)))
    summary = runstore.run_experiments(store, train)   # train(lr, seed) -> dict of outcomes
    experiments, outcomes = runstore.load_results(store)
    store.export_tar("results.tar.gz")                  # CSVs for spreadsheets, streamed

Three modules that ``import runstore`` loads: ``runstore`` (open, Store, Writer, LazyArray, the
errors); ``runstore.experiments`` (grid, define, run, status, load_results: a sweep as records)
and ``runstore.export`` (export_tar, import_tar, export_parquet, to_arrow, to_xarray, to_zarr),
functions over an open Store, which has most of them as methods too. Four more are imported on
their own: ``runstore.report`` (the HTML page), ``runstore.dask``, ``runstore.ema`` and
``runstore.mlinstrument`` (the integrations).

Errors: ``ValueError`` (bad input, e.g. a dtype that conflicts with an existing series),
``KeyError`` (no such record or series), ``OSError`` (file-system errors, with errno),
``CorruptionError`` (a checksum failed; the message names the file and offset),
``UnsupportedFormatError`` (a subclass of NotImplementedError: a store written by a newer
runstore), ``FileExistsError`` (an export onto an existing file with overwrite=False),
``RuntimeError`` (writing to a read-only store or a closed writer), ``ResourceExhaustedError``
(a subclass of OSError, errno set: the process ran out of file descriptors or memory; nothing is
wrong with the store).

The wheel also carries the C API (docs/c_api.md): ``runstore.get_include()`` and
``runstore.get_library_dir()`` are its headers' and its library's folders.
"""

from __future__ import annotations

from . import experiments, export
from ._capi import get_include, get_library_dir
from ._core import (
    CODECS,
    DTYPES,
    FORMAT_VERSION,
    ArrayOwner,
    CorruptionError,
    ResourceExhaustedError,
    UnsupportedFormatError,
    Writer,
)
from ._store import (
    DamagedSegment,
    LazyArray,
    SegmentInfo,
    SeriesInfo,
    Store,
    import_tar,
    load_results,
    open,  # noqa: A004 - runstore.open, as io.open and gzip.open
    run_experiments,
    segment_budget,
    sql,
    sync,
)
from ._version import __version__
from .experiments import RunSummary, experiment_id, grid

__all__ = [
    "experiments",
    "export",
    "open",
    "grid",
    "run_experiments",
    "load_results",
    "import_tar",
    "sync",
    "segment_budget",
    "sql",
    "experiment_id",
    "RunSummary",
    "Store",
    "LazyArray",
    "Writer",
    "SeriesInfo",
    "SegmentInfo",
    "DamagedSegment",
    "ArrayOwner",
    "CorruptionError",
    "ResourceExhaustedError",
    "UnsupportedFormatError",
    "FORMAT_VERSION",
    "DTYPES",
    "CODECS",
    "get_include",
    "get_library_dir",
    "__version__",
]
