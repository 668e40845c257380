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

Errors: ``ValueError`` (bad input, e.g. a dtype that conflicts with an existing series),
``KeyError`` (no such record or series), ``OSError`` (file-system errors, with errno),
``CorruptionError`` (a checksum failed; the message names the file and offset),
``UnsupportedFormatError`` (a subclass of NotImplementedError: a store written by a newer
runstore), ``FileExistsError`` (a writer id already in use), ``RuntimeError`` (writing to a
read-only store or a closed writer).
"""

from __future__ import annotations

from ._core import (
    CODECS,
    DTYPES,
    FORMAT_VERSION,
    ArrayOwner,
    CorruptionError,
    UnsupportedFormatError,
    Writer,
)
from ._store import SegmentInfo, SeriesInfo, Store, open

__version__ = "0.1.0"

__all__ = [
    "open",
    "Store",
    "Writer",
    "SeriesInfo",
    "SegmentInfo",
    "ArrayOwner",
    "CorruptionError",
    "UnsupportedFormatError",
    "FORMAT_VERSION",
    "DTYPES",
    "CODECS",
    "__version__",
]
