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

Errors: ``ValueError`` (bad input, e.g. a dtype that conflicts with an existing series),
``KeyError`` (no such record or series), ``OSError`` (file-system errors, with errno),
``CorruptionError`` (a checksum failed; the message names the file and offset),
``UnsupportedFormatError`` (a subclass of NotImplementedError: a store written by a newer
runstore), ``FileExistsError`` (an export onto an existing file with overwrite=False),
``RuntimeError`` (writing to a read-only store or a closed writer).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

from . import export
from ._core import (
    CODECS,
    DTYPES,
    FORMAT_VERSION,
    ArrayOwner,
    CorruptionError,
    UnsupportedFormatError,
    Writer,
)
from ._experiments import experiment_id, grid
from ._runner import RunSummary, run_experiments
from ._store import (
    DamagedSegment,
    LazyArray,
    SegmentInfo,
    SeriesInfo,
    Store,
    import_tar,
    open,
)
from ._version import __version__


def load_results(
    store: Store | str | os.PathLike[str], names: Iterable[str] | str | None = None
) -> tuple[pandas.DataFrame, dict[str, np.ndarray]]:
    """The results of a sweep: ``(experiments, outcomes)``.

    ``experiments`` is a DataFrame with one row per experiment in design order: ``experiment``,
    the parameters, then the status columns of :meth:`Store.status` (state, error, host,
    started, finished, seconds, attempt; a status column whose name a parameter already has
    is called ``status.<name>``). ``outcomes`` maps each outcome name (``names``, default every
    non-reserved series) to an array of shape ``(n_experiments, *outcome_shape)`` in the
    DataFrame's row order, read from step-0 records. Where an experiment has no value (failed,
    pending): NaN in float arrays; int, bool, str and bytes outcomes with gaps come back as
    ``numpy.ma`` masked arrays (mask True where absent), otherwise as plain arrays. Str and
    bytes outcomes and variable-shape ones are object arrays.

    Refreshes the store first. Raises KeyError for an unknown name.
    """
    from ._experiments import load_results as _load

    if not isinstance(store, Store):
        store = Store(store, "r")
    return _load(store, names)


if TYPE_CHECKING:
    import numpy as np
    import pandas

__all__ = [
    "export",
    "open",
    "grid",
    "run_experiments",
    "load_results",
    "import_tar",
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
    "UnsupportedFormatError",
    "FORMAT_VERSION",
    "DTYPES",
    "CODECS",
    "__version__",
]
