"""to_zarr: a store's Dataset (``to_xarray``) as a Zarr store that ``xarray.open_zarr`` opens
without runstore, written chunk by chunk of runs in bounded memory.

The Dataset is made lazy (dask arrays over the store, ``_xarray.Layout``) with chunks of about
ZARR_CHUNK_BYTES of values, which become the Zarr chunks, and dask's synchronous scheduler
writes them one at a time: each chunk is read from the store, written and dropped before the
next, so memory holds one chunk whatever the size of the store. The directory is written under
a temporary name beside the target and renamed into place when complete
(``_output.ExportDirectory``).
"""

from __future__ import annotations

import hashlib
import os
import re
import time
import warnings
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import _progress
from ._output import ZARR_MARKERS, ExportDirectory
from ._tar import portable_name
from ._xarray import STRING, Layout

if TYPE_CHECKING:
    import xarray

    from .._reader import StoreReader

#: Bytes of values in a Zarr chunk (of the largest variable), unless chunks= says.
ZARR_CHUNK_BYTES = 8 << 20


#: Why a bytes series is not written (left out by default, refused when named).
_NO_BYTES = (
    "Zarr format 3 has no specified type for bytes of varying length, and the fixed-width one "
    "xarray writes loses trailing NUL bytes; export it with export_parquet or read it with "
    "Store.scan"
)


#: Characters of a name written %XX in a Zarr store: "%" (the escape itself), the path
#: separators "/" (Zarr's) and "\\" (taken for "/" by some readers and by Windows), control
#: characters, and those Windows refuses in a file name.
_ZARR_ESCAPED = re.compile(r'[%/\\\x00-\x1f\x7f:*?"<>|]')
#: Names the top of a Zarr node holds for itself (format 3; format 2's begin with ".").
_ZARR_KEYS = frozenset(["zarr.json"])
#: Longest escaped name kept whole (a node is a directory: 255 bytes on most file systems).
_ZARR_NAME_BYTES = 200


def zarr_name(name: str) -> str:
    """A name as a Zarr node name, which is a directory of the store: "%", "/", "\\", control
    characters and the characters Windows refuses (:*?"<>|) are written %XX; a leading "."
    %2E, a leading "__" %5F_ (Zarr keeps both), a trailing "." or space %2E or %20 (Windows
    drops them); the first character of "zarr.json" (the metadata's own name) or of a
    Windows device name (CON, NUL.txt, ...) %XX. A name longer than 200 bytes so escaped is
    cut and ends in "~" and a hash of the name. Injective (every "%" of the name is escaped),
    so distinct series never share a node; ``attrs["runstore_series"]`` keeps the name."""
    s = _ZARR_ESCAPED.sub(lambda m: "".join(f"%{b:02X}" for b in m.group().encode()), name)
    if s.startswith("."):
        s = "%2E" + s[1:]
    if s.startswith("__"):
        s = "%5F" + s[1:]
    if s.endswith(".") or s.endswith(" "):
        s = s[:-1] + f"%{ord(s[-1]):02X}"
    if s.lower() in _ZARR_KEYS:
        s = f"%{ord(s[0]):02X}" + s[1:]
    s = portable_name(s)
    if len(s.encode()) > _ZARR_NAME_BYTES:
        cut = s.encode()[: _ZARR_NAME_BYTES - 16].decode("utf-8", "ignore")
        k = cut.find("%", len(cut) - 2)  # not inside a %XX escape
        s = (cut if k == -1 else cut[:k]) + "~" + hashlib.sha256(name.encode()).hexdigest()[:12]
    return s


def zarr_names(names: Iterable[str], coordinates: Iterable[str] = ()) -> dict[str, str]:
    """:func:`zarr_name` of each of ``names``, and "~" and a hash added to one that equals an
    earlier one when case is ignored ("Loss" after "loss"), so that no two share a directory
    on a case-insensitive file system (macOS, Windows). In the names of ``coordinates``
    whitespace (a space, U+2028, ...) is written %XX too: xarray lists a variable's
    coordinates in one attribute, split at whitespace, and keeps a coordinate whose name
    holds some as a data variable."""
    out: dict[str, str] = {}
    used: set[str] = set()
    coords = set(coordinates)
    for n in names:
        z = zarr_name(n)
        if n in coords:
            z = "".join("".join(f"%{b:02X}" for b in c.encode()) if c.isspace() else c for c in z)
        if z.lower() in used:
            z += "~" + hashlib.sha256(n.encode()).hexdigest()[:12]
        used.add(z.lower())
        out[n] = z
    return out


def _strings(values: np.ndarray) -> np.ndarray:
    """Strings with None where absent (``_xarray.STRING``) as Zarr holds them: empty there,
    since Zarr's strings have no missing value (xarray writes them so too)."""
    out = values.copy()
    out[np.equal(values, None)] = ""
    return out.astype(np.dtypes.StringDType())


def _for_zarr(ds: xarray.Dataset) -> xarray.Dataset:
    """``ds`` as the Zarr store holds it: strings without a missing value, so that xarray
    writes them as Zarr strings (and never loads a dask array whole to find out what type it
    holds); names that Zarr would split at "/" escaped."""
    import dask.array as da

    for name, var in list(ds.variables.items()):
        if var.dtype != STRING:
            continue
        data = var.data
        if isinstance(data, da.Array):
            meta = np.empty((0,) * var.ndim, dtype=np.dtypes.StringDType())
            data = data.map_blocks(_strings, dtype=meta.dtype, meta=meta)
        else:
            data = _strings(np.asarray(data))
        ds[name] = (var.dims, data, var.attrs)
    # Variables (and coordinates) are directories; dimensions are only names in their
    # metadata, escaped alike so that they read the same.
    renames = zarr_names((str(n) for n in ds.variables), coordinates=(str(c) for c in ds.coords))
    renames.update({str(d): zarr_name(str(d)) for d in ds.dims if d not in ds.variables})
    return ds.rename({n: z for n, z in renames.items() if z != n})


def to_zarr(
    store: StoreReader,
    path: str | os.PathLike[str],
    names: Iterable[str] | str | None,
    by_step: bool | None,
    chunks: Any,
    overwrite: bool,
    progress: bool,
) -> dict[str, Any]:
    """runstore.export.to_zarr."""
    import dask

    t0 = time.perf_counter()
    with _progress.Line("runstore export zarr", progress) as line:
        line.show("reading the experiments")
        layout = Layout(store, names, by_step, refuse={"bytes": _NO_BYTES})
        with ExportDirectory(path, store_path=store.path, overwrite=overwrite) as out:
            ds = _for_zarr(layout.dataset(lazy=True, chunks=chunks, budget=ZARR_CHUNK_BYTES))
            with (
                dask.config.set(scheduler="synchronous"),
                warnings.catch_warnings(),
                _task_progress(line),
            ):
                # Consolidated metadata (one zarr.json holding every array's) lets open_zarr
                # read one file instead of one per array; zarr-python and xarray read it, other
                # readers read the arrays' own metadata, which is written as well.
                warnings.filterwarnings("ignore", message="Consolidated metadata is currently not")
                ds.to_zarr(out.tmp, mode="w", consolidated=True, compute=True)
            out.commit()
    chunk_files = total = 0
    for root, _, files in os.walk(out.path):
        for f in files:
            total += os.path.getsize(os.path.join(root, f))
            chunk_files += f not in ZARR_MARKERS
    return {
        "path": out.path,
        "runs": layout.n,
        "steps": None if layout.steps is None else len(layout.steps),
        "variables": len(ds.data_vars),
        "left_out": layout.left_out,
        "chunks": chunk_files,
        "bytes": total,
        "seconds": time.perf_counter() - t0,
    }


def _task_progress(line: _progress.Line) -> Any:
    """A dask callback that draws the tasks of the write done (each reads or writes a chunk)
    on ``line`` (defined here: dask is imported only when writing)."""
    from dask.callbacks import Callback

    class TaskProgress(Callback):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.total = 0

        def _start_state(self, dsk: Any, state: dict[str, Any]) -> None:
            self.total = sum(len(state[k]) for k in ("ready", "waiting", "running", "finished"))

        def _posttask(self, key: Any, res: Any, dsk: Any, state: dict[str, Any], w: Any) -> None:
            done = len(state["finished"])
            line.bar(done, self.total, "tasks")

    return TaskProgress()
