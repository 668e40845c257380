"""Exports that stream: a tarball of CSVs (and .npy), Parquet, Arrow; and import_tar.

Memory: the experiment index and the scalar columns (parameters, status, scalar outcomes) are
held as arrays of one entry per experiment (tens of bytes each); array outcomes are read
``chunk_rows`` experiments at a time, formatted, and written to a temporary file from which the
tar member is copied. Pages of the store's mapped segment files are released after every chunk
(they are page cache, but they would count in the process's resident set), so the resident set
stays flat however many experiments and outcomes there are.
"""

from __future__ import annotations

import base64
import csv
import datetime
import hashlib
import io
import json
import os
import re
import struct
import tarfile
import time
import zlib
from collections import deque
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from . import _core
from . import _experiments as ex
from ._output import ExportFile
from ._version import __version__

if TYPE_CHECKING:
    import pyarrow

    from ._store import RunId, StepWindow, Store

EXPORT_FORMAT = "runstore-experiments"
EXPORT_VERSION = 1
#: Spreadsheets (Excel, LibreOffice) open at most 16,384 columns: outcomes with more elements
#: than fit next to the experiment id go to .npy files even when they are 1-d or 2-d.
MAX_CSV_ELEMENTS = 16_383
#: Bytes of outcome values read (and formatted) at a time, whatever chunk_rows says.
CHUNK_BYTES = 4 << 20
#: Largest row group of export_parquet, in bytes of outcome values (fewer rows than asked if
#: row_group_rows rows would take more).
PARQUET_ROW_GROUP_BYTES = 32 << 20


# -- releasing mapped pages ----------------------------------------------------------------------



def release_mapped_pages(store) -> None:
    """Drops the pages of the store's mapped segment files from this process's resident set
    (Snapshot::ReleasePages in the core). The mappings are read-only views of files, so nothing
    is lost: a later access reads the page again from the page cache."""
    store._core.release_pages()


# -- the experiment table ------------------------------------------------------------------------


class _Outcome:
    """An outcome series and how it is exported."""

    def __init__(self, name: str, info: dict[str, Any]) -> None:
        self.name = name
        self.dtype: str = info["dtype"]
        self.variable = bool(info["variable_shape"])
        self.shape: tuple[int, ...] | None = None if self.variable else tuple(info["shape"])
        self.info = info
        self.var_len = self.dtype in ("string", "bytes")
        #: Bytes of one record (an estimate for strings, bytes and variable shapes).
        self.row_bytes = 64 if self.var_len or self.shape is None else (
            np.dtype(self.dtype).itemsize * int(np.prod(self.shape, dtype=np.int64)))
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

    def __init__(self, store: Store, names: Iterable[str] | None = None) -> None:
        store.refresh()
        self.store = store
        infos = ex.reserved_series(store)
        self.has_design = ex.ROW in infos
        if self.has_design:
            self.index = ex.load_index(store, infos)
        else:
            runs = store._core.runs()
            int_runs = all(isinstance(r, int) for r in runs)
            ids = np.array(runs, dtype=np.int64 if int_runs else object)
            self.index = ex.ExperimentIndex(ids)
        self.n = len(self.index)
        # The pages each scan touched are released before the next one, so that the resident
        # set never holds more than one series' worth of the mapped files.
        release = lambda: release_mapped_pages(store)  # noqa: E731
        release()
        self.params = {}
        for p in ex.design_columns(store, infos):
            self.params[p] = ex.read_column(store, ex.DESIGN + p, self.index, infos[ex.DESIGN + p])
            release()
        self.status = ex.load_status(store, self.index, infos, after_each=release)
        self.status_names = ex.status_names(self.params)
        selected = ex.outcome_names(store) if names is None else list(names)
        self.outcomes = []
        for n in selected:
            if n not in infos:
                raise KeyError(f"series {n!r} not found")
            o = _Outcome(n, infos[n])
            if o.scalar or o.empty:
                o.column = ex.read_column(store, n, self.index, infos[n])
                release()
            self.outcomes.append(o)

    @property
    def id_dtype(self) -> str:
        ids = self.index.ids
        if ids.dtype != object:
            return "int64"
        return "string" if all(isinstance(i, str) for i in ids.tolist()) else "mixed"

    def status_columns(self) -> dict[str, ex.Column]:
        """Status as exported: "pending" where never started, attempt 0 where never started;
        other fields absent (empty cells) where there is no record, and no error for done."""
        st = self.status
        cols = ex.status_frame_columns(st)
        out = {}
        for c, v in cols.items():
            if c in ("state", "attempt"):
                present = np.ones(self.n, dtype=bool)
            elif c == "error":
                present = np.not_equal(v, None) if len(v) else np.zeros(0, dtype=bool)
            else:
                present = st[c].present
            out[c] = ex.Column(np.asarray(v), present, st[c].dtype if c != "attempt" else "int64")
        return out

    def chunk(self, o: _Outcome, rows: slice) -> ex.Column:
        """Outcome ``o`` for the experiments in ``rows``: read with one key lookup per experiment
        (views of the mapped file, copied into the chunk)."""
        if o.column is not None:
            return o.column.take(rows)
        ids = self.index.ids[rows].tolist()
        # Read before the chunk is made, so that a damaged record is Corruption before anything
        # is allocated by the shape its series' headers claim.
        get, name = self.store._core.get, o.name
        found = []
        for k, eid in enumerate(ids):
            try:
                found.append((k, get(eid, name, 0)))
            except KeyError:
                continue
        col = ex.empty_column(len(ids), o.dtype, o.shape)
        for k, v in found:
            col.values[k] = v
            col.present[k] = True
        return col

    def chunks(self, chunk_rows: int, row_bytes: int = 0, budget: int = CHUNK_BYTES) -> Iterable[slice]:
        """Slices of at most chunk_rows experiments and about ``budget`` bytes of values; the
        store's mapped pages are released after each."""
        rows = max(1, min(chunk_rows, budget // max(1, row_bytes)))
        for start in range(0, self.n, rows):
            yield slice(start, min(self.n, start + rows))
            release_mapped_pages(self.store)


# -- names ---------------------------------------------------------------------------------------

_SAFE = re.compile(rb"[A-Za-z0-9._-]")


def safe_file_name(name: str, used: set[str]) -> str:
    """A file name for a series name: bytes outside [A-Za-z0-9._-] (and a leading '.') escaped
    as %XX, as `runstore export csv` does ('qi/3_17' -> 'qi%2F3_17'); names that escape to more
    than 120 bytes are cut and end in '~' and a hash; a name that equals a used one when case is
    ignored gets '~' and a hash too (for case-insensitive file systems)."""
    out = []
    for i, b in enumerate(name.encode()):
        c = bytes([b])
        out.append(c.decode() if _SAFE.fullmatch(c) and not (i == 0 and c == b".") else f"%{b:02X}")
    s = "".join(out)
    digest = hashlib.sha256(name.encode()).hexdigest()[:12]
    if len(s) > 120:
        cut = s[:100]
        k = cut.find("%", len(cut) - 2)  # do not end inside a %XX escape
        s = (cut if k == -1 else cut[:k]) + "~" + digest
    if s.lower() in used:
        s = s + "~" + digest
    used.add(s.lower())
    return s


def _header(cells: list[str]) -> bytes:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(cells)
    return buf.getvalue().encode()


def _element_names(name: str, shape: tuple[int, ...]) -> list[str]:
    return [name + "".join(f"_{i}" for i in idx) for idx in np.ndindex(*shape)] if shape else [name]


# -- tar -----------------------------------------------------------------------------------------


def _deflate(block: bytes, level: int, zdict: bytes, final: bool) -> bytes:
    if zdict:
        c = zlib.compressobj(level, zlib.DEFLATED, -15, 9, zlib.Z_DEFAULT_STRATEGY, zdict)
    else:
        c = zlib.compressobj(level, zlib.DEFLATED, -15)
    return c.compress(block) + c.flush(zlib.Z_FINISH if final else zlib.Z_SYNC_FLUSH)


class ParallelGzip:
    """A gzip file of one member, compressed by a pool of threads (as pigz does it).

    The input is cut into blocks; each is deflated by itself with the previous 32 KiB as its
    dictionary and ends on a byte boundary (a sync flush), so the pieces concatenate into one
    ordinary deflate stream that any gzip reader takes. zlib releases the GIL while it
    compresses, so the threads also overlap with the caller formatting the next rows. At most
    2 blocks per thread are in flight: memory stays a few MiB."""

    BLOCK = 1 << 20

    def __init__(self, raw: IO[bytes], level: int, threads: int) -> None:
        self.raw = raw
        self.level = level
        self.pool = ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="runstore-gzip")
        self.pending: deque[Any] = deque()
        self.max_pending = 2 * max(1, threads)
        self.buf = bytearray()
        self.crc = 0
        self.size = 0
        self.tail = b""
        # ID1 ID2, CM deflate, no flags, MTIME 0 (reproducible), XFL 0, OS Unix.
        raw.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03")

    def write(self, data: bytes | bytearray | memoryview) -> int:
        self.buf += data
        while len(self.buf) >= self.BLOCK:
            block = bytes(self.buf[: self.BLOCK])
            del self.buf[: self.BLOCK]
            self._submit(block, final=False)
        return len(data)

    def _submit(self, block: bytes, final: bool) -> None:
        self.crc = zlib.crc32(block, self.crc)
        self.size += len(block)
        self.pending.append(self.pool.submit(_deflate, block, self.level, self.tail, final))
        self.tail = (self.tail + block)[-32768:] if len(block) < 32768 else block[-32768:]
        while len(self.pending) > self.max_pending:
            self.raw.write(self.pending.popleft().result())

    def close(self) -> None:
        self._submit(bytes(self.buf), final=True)
        self.buf = bytearray()
        while self.pending:
            self.raw.write(self.pending.popleft().result())
        self.raw.write(struct.pack("<II", self.crc & 0xFFFFFFFF, self.size & 0xFFFFFFFF))
        self.pool.shutdown()

    def abort(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


def _gzip_threads() -> int:
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count() or 1
    return max(1, min(4, cpus))


class _TarOut:
    """A .tar.gz written as a stream; each member is spooled first (tar needs its size)."""

    def __init__(self, out: ExportFile, compresslevel: int) -> None:
        self.out = out
        self.path = out.path
        self.gz = ParallelGzip(out.file, compresslevel, _gzip_threads())
        self.tar = tarfile.open(fileobj=self.gz, mode="w|", format=tarfile.PAX_FORMAT)
        self.mtime = time.time()
        self.members: list[str] = []

    def spool(self) -> IO[bytes]:
        return self.out.spool()

    def add(self, name: str, f: IO[bytes]) -> int:
        size = f.tell()
        f.seek(0)
        info = tarfile.TarInfo(name)
        info.size = size
        info.mtime = int(self.mtime)
        info.mode = 0o644
        self.tar.addfile(info, f)
        f.close()
        self.members.append(name)
        return size

    def add_bytes(self, name: str, data: bytes) -> int:
        f = io.BytesIO()
        f.write(data)
        return self.add(name, f)

    def close(self) -> None:
        self.tar.close()
        self.gz.close()
        self.out.commit()

    def abort(self) -> None:
        for close in (self.tar.close, self.gz.abort):
            try:
                close()
            except Exception:
                pass
        self.out.abort()


def _column_meta(name: str, col: ex.Column, role: str, **extra: Any) -> dict[str, Any]:
    """metadata.json entry of one scalar column, with the rule that tells an empty string from
    an absent value (docs/experiments.md)."""
    m: dict[str, Any] = {"name": name, "role": role, "dtype": col.dtype, **extra}
    missing = int((~col.present).sum())
    m["missing"] = missing
    if col.dtype in ("string", "bytes") and missing:
        vals = col.values[col.present]
        empty = any(len(v) == 0 for v in vals.tolist())
        if empty:
            m["missing_rows"] = np.flatnonzero(~col.present).tolist()
    elif missing and col.values.ndim > 1 and 0 in col.values.shape[1:]:
        # Arrays of no elements have no cells at all: only the list says which are absent.
        m["missing_rows"] = np.flatnonzero(~col.present).tolist()
    return m


def _cells(col: ex.Column) -> tuple[np.ndarray, np.ndarray | None]:
    """(values, absent mask) for csv_rows; bytes values are base64 in the C++ formatter."""
    absent = None if col.complete else ~col.present
    v = col.values
    if v.dtype != object and not v.dtype.isnative:
        v = v.astype(v.dtype.newbyteorder("="))
    return v, absent


def export_tar(store: Store, path: str | os.PathLike[str], *, chunk_rows: int = 10_000,
               compresslevel: int = 1, overwrite: bool = True) -> dict[str, Any]:
    t0 = time.perf_counter()
    # The target is checked (not in the store; absent unless overwrite) before the store is read.
    with ExportFile(path, store_path=store.path, overwrite=overwrite) as f:
        table = ExperimentTable(store)
        out = _TarOut(f, compresslevel)
        try:
            summary = _write_tar(table, out, chunk_rows)
            out.close()
        except BaseException:
            out.abort()
            raise
    summary["seconds"] = time.perf_counter() - t0
    summary["bytes"] = os.path.getsize(f.path)
    return summary


def _write_tar(table: ExperimentTable, out: _TarOut, chunk_rows: int) -> dict[str, Any]:
    used: set[str] = {"experiments.csv", "metadata.json"}
    status = table.status_columns()
    snames = table.status_names

    # experiments.csv: id, parameters, status.
    columns: list[dict[str, Any]] = [{"name": ex.ID_COLUMN, "role": "id", "dtype": table.id_dtype}]
    if table.id_dtype == "mixed":
        ids = table.index.ids.tolist()
        columns[0]["string_id_rows"] = [i for i, e in enumerate(ids) if isinstance(e, str)]
    exp_cols: list[ex.Column] = []
    for p, c in table.params.items():
        columns.append(_column_meta(p, c, "parameter"))
        exp_cols.append(c)
    for field, c in status.items():
        columns.append(_column_meta(snames[field], c, "status", field=field))
        exp_cols.append(c)

    # Outcomes: one member each (and a mask for .npy files).
    used_lower: set[str] = set()
    outcomes: list[dict[str, Any]] = []
    for o in table.outcomes:
        base = "outcomes/" + safe_file_name(o.name, used_lower)
        m: dict[str, Any] = {
            "name": o.name,
            "dtype": o.dtype,
            "shape": list(o.shape) if o.shape is not None else None,
            "variable_shape": o.variable,
        }
        n_elements = int(np.prod(o.shape, dtype=np.int64)) if o.shape is not None else 1
        if o.var_len or o.variable or (o.ndim is not None and o.ndim <= 2 and n_elements <= MAX_CSV_ELEMENTS):
            m["format"] = "csv"
            m["member"] = base + ".csv"
            if o.variable:
                m["columns"] = [ex.ID_COLUMN, o.name + ".shape", o.name]
            else:
                m["columns"] = [ex.ID_COLUMN] + _element_names(o.name, o.shape or ())
            if o.column is not None:
                m.update({k: v for k, v in _column_meta(o.name, o.column, "outcome").items()
                          if k in ("missing", "missing_rows")})
        else:
            m["format"] = "npy"
            m["member"] = base + ".npy"
            m["mask_member"] = base + ".mask.npy"
        outcomes.append(m)

    meta = {
        "format": EXPORT_FORMAT,
        "version": EXPORT_VERSION,
        "runstore_version": __version__,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "store": table.store.path,
        "has_design": table.has_design,
        "experiments": table.n,
        "experiments_member": "experiments.csv",
        "columns": columns,
        "outcomes": outcomes,
        "csv": {
            "encoding": "utf-8",
            "line_end": "\\n",
            "quoting": "RFC 4180: a cell holding a comma, a quote, CR or LF is quoted, quotes doubled",
            "floats": "shortest text that reads back exactly; nan, inf, -inf",
            "bool": "true, false",
            "bytes": "base64 (RFC 4648, padded)",
            "absent": "empty cell (see missing and missing_rows for string and bytes columns)",
        },
    }
    out.add_bytes("metadata.json", json.dumps(meta, indent=1, ensure_ascii=False).encode())

    f = out.spool()
    f.write(_header([c["name"] for c in columns]))
    ids = table.index.ids
    for rows in table.chunks(chunk_rows, 8 * (len(exp_cols) + 1)):
        vals, masks = [ids[rows]], [None]
        for c in exp_cols:
            v, a = _cells(c.take(rows))
            vals.append(v)
            masks.append(a)
        _core.csv_rows(vals, masks, f.write)
    out.add("experiments.csv", f)

    # Records that are not part of the experiment table: at steps other than 0, or of runs
    # that are not experiments. Counted, so that the caller can say so.
    left_out: dict[str, int] = {}
    for o, m in zip(table.outcomes, outcomes):
        write = _write_outcome_csv if m["format"] == "csv" else _write_outcome_npy
        exported = write(table, o, m, out, chunk_rows)
        if o.info["count"] > exported:
            left_out[o.name] = int(o.info["count"] - exported)
    return {"path": out.path, "experiments": table.n, "members": list(out.members), "left_out": left_out}


def _write_outcome_csv(
    table: ExperimentTable, o: _Outcome, m: dict[str, Any], out: _TarOut, chunk_rows: int
) -> int:
    f = out.spool()
    f.write(_header(m["columns"]))
    ids = table.index.ids
    exported = 0
    for rows in table.chunks(chunk_rows, o.row_bytes):
        col = table.chunk(o, rows)
        exported += int(col.present.sum())
        if o.variable:
            shapes = np.full(len(col.values), None, dtype=object)
            texts = np.full(len(col.values), None, dtype=object)
            for k, v in enumerate(col.values.tolist()):
                if v is not None:
                    shapes[k] = json.dumps(list(v.shape))
                    texts[k] = json.dumps(_json_values(v), separators=(",", ":"), allow_nan=True)
            _core.csv_rows([ids[rows], shapes, texts], [None, None, None], f.write)
        else:
            v, a = _cells(col)
            _core.csv_rows([ids[rows], v], [None, a], f.write)
    out.add(m["member"], f)
    return exported


def _json_values(v: np.ndarray) -> Any:
    """A variable-shape value as JSON-ready nested lists (NaN/Infinity for non-finite floats)."""
    return v.tolist()


def _write_outcome_npy(
    table: ExperimentTable, o: _Outcome, m: dict[str, Any], out: _TarOut, chunk_rows: int
) -> int:
    assert o.shape is not None
    dtype = np.dtype(o.dtype)
    header = {
        "descr": np.lib.format.dtype_to_descr(dtype),
        "fortran_order": False,
        "shape": (table.n,) + o.shape,
    }
    f = out.spool()
    if _needs_v2(header):
        np.lib.format.write_array_header_2_0(f, header)
    else:
        np.lib.format.write_array_header_1_0(f, header)
    present = np.zeros(table.n, dtype=bool)
    for rows in table.chunks(chunk_rows, o.row_bytes):
        col = table.chunk(o, rows)
        present[rows] = col.present
        f.write(np.ascontiguousarray(col.values).tobytes())
    mask = io.BytesIO()
    np.save(mask, ~present)
    out.add(m["mask_member"], mask)  # before the data, so that a streaming reader has it first
    out.add(m["member"], f)
    return int(present.sum())


def _needs_v2(header: dict[str, Any]) -> bool:
    try:
        np.lib.format.write_array_header_1_0(io.BytesIO(), header)
        return False
    except ValueError:
        return True


# -- import --------------------------------------------------------------------------------------


def _parse_cells(cells: np.ndarray, dtype: str, shape: tuple[int, ...], meta: dict[str, Any] | None,
                 row0: int) -> ex.Column:
    """Typed values from CSV cells of shape (rows, prod(shape)) (or (rows,) for scalars)."""
    n = cells.shape[0]
    if dtype in ("string", "bytes"):
        cells = cells.reshape(n)
        present = np.ones(n, dtype=bool)
        if meta and meta.get("missing"):
            if "missing_rows" in meta:
                rows = np.asarray(meta["missing_rows"], dtype=np.int64) - row0
                rows = rows[(rows >= 0) & (rows < n)]
                present[rows] = False
            else:
                present = np.fromiter((c != "" for c in cells.tolist()), bool, n)
        values = np.empty(n, dtype=object)
        if dtype == "string":
            values[:] = [c if p else None for c, p in zip(cells.tolist(), present.tolist())]
        else:
            values[:] = [base64.b64decode(c) if p else None for c, p in zip(cells.tolist(), present.tolist())]
        return ex.Column(values, present, dtype)
    flat = cells.reshape(n, -1).astype(str)
    absent = flat == ""
    present = ~absent.any(axis=1)
    if flat.shape[1] == 0 and meta and meta.get("missing_rows"):
        # An outcome of arrays with no elements: no cells, only the list of absent rows.
        rows = np.asarray(meta["missing_rows"], dtype=np.int64) - row0
        present[rows[(rows >= 0) & (rows < n)]] = False
    np_dtype = np.dtype(dtype)
    fill = "0" if np_dtype.kind != "b" else "false"
    filled = np.where(absent, fill, flat)
    if np_dtype.kind == "b":
        values = filled == "true"
    else:
        # float32: parsed as float64 first, then rounded (exact for the shortest float32 text).
        values = filled.astype(np.float64 if np_dtype.kind == "f" else np_dtype).astype(np_dtype)
    values = values.reshape((n,) + shape)
    if np_dtype.kind == "f":
        values[~present] = np.nan
    return ex.Column(values, present, dtype)


def _read_csv_chunks(f: IO[bytes], chunk_rows: int):
    import pandas as pd

    reader = pd.read_csv(f, dtype=object, na_filter=False, keep_default_na=False, chunksize=chunk_rows,
                         encoding="utf-8")
    for df in reader:
        yield df


def _parse_ids(cells: np.ndarray, meta: dict[str, Any], row0: int) -> np.ndarray:
    kind = meta["dtype"]
    if kind == "int64":
        return cells.astype(np.int64)
    out = np.empty(len(cells), dtype=object)
    if kind == "string":
        out[:] = cells.tolist()
        return out
    strs = set(meta.get("string_id_rows", ()))
    out[:] = [c if (row0 + k) in strs else int(c) for k, c in enumerate(cells.tolist())]
    return out


def import_tar(
    path: str | os.PathLike[str], store_path: str | os.PathLike[str], *, chunk_rows: int = 10_000
) -> Store:
    """Rebuilds a store from a tarball written by Store.export_tar (or `runstore export tar`).

    The design (ids, parameters with their dtypes, column order), the status of every
    experiment and every outcome (dtypes and shapes as recorded in metadata.json) are written
    to the store at ``store_path`` (created if missing; an existing store must not define the
    same experiments with other parameters). Reads the archive as a stream, member by member,
    ``chunk_rows`` rows at a time. Returns the store, refreshed.
    """
    from ._store import Store

    store = Store(store_path)
    with tarfile.open(os.fspath(path), mode="r|gz") as tar:
        meta: dict[str, Any] | None = None
        ids: np.ndarray | None = None
        by_member: dict[str, dict[str, Any]] = {}
        masks: dict[str, np.ndarray] = {}
        writer = None
        try:
            for member in tar:
                f = tar.extractfile(member)
                if f is None:
                    continue
                if member.name == "metadata.json":
                    meta = json.loads(f.read().decode())
                    if meta.get("format") != EXPORT_FORMAT or meta.get("version", 0) > EXPORT_VERSION:
                        raise ValueError(f"{path}: not a runstore export this version reads (format "
                                         f"{meta.get('format')!r}, version {meta.get('version')!r})")
                    for m in meta["outcomes"]:
                        by_member[m["member"]] = m
                        if "mask_member" in m:
                            by_member[m["mask_member"]] = m
                    continue
                if meta is None:
                    raise ValueError(f"{path}: metadata.json must be the first member")
                if member.name == meta["experiments_member"]:
                    ids = _import_experiments(store, meta, f, chunk_rows)
                    writer = store.writer(_allow_reserved=True)
                    continue
                m = by_member.get(member.name)
                if m is None or ids is None or writer is None:
                    continue
                if member.name == m.get("mask_member"):
                    masks[m["name"]] = ~np.load(io.BytesIO(f.read()))
                elif m["format"] == "npy":
                    _import_npy(writer, ids, m, f, masks.pop(m["name"], None), chunk_rows)
                else:
                    _import_outcome_csv(writer, ids, m, f, chunk_rows)
                writer.commit()
        finally:
            if writer is not None:
                writer.close()
    if meta is None:
        raise ValueError(f"{path}: no metadata.json: not a runstore export")
    store.refresh()
    return store


def _import_experiments(store: Store, meta: dict[str, Any], f: IO[bytes], chunk_rows: int) -> np.ndarray:
    cols = meta["columns"]
    id_meta = cols[0]
    parts: dict[str, list[ex.Column]] = {c["name"]: [] for c in cols[1:]}
    id_parts = []
    row0 = 0
    for df in _read_csv_chunks(f, chunk_rows):
        raw = [df.iloc[:, k].to_numpy(dtype=object) for k in range(df.shape[1])]
        id_parts.append(_parse_ids(raw[0], id_meta, row0))
        for k, c in enumerate(cols[1:], start=1):
            parts[c["name"]].append(_parse_cells(raw[k], c["dtype"], (), c, row0))
        row0 += len(df)
    ids = np.concatenate(id_parts) if id_parts else np.empty(0, dtype=np.int64)
    if ids.dtype != object and id_meta["dtype"] != "int64":
        ids = ids.astype(object)
    full = {name: _concat(p) for name, p in parts.items()}

    if meta.get("has_design", True):
        params = []
        for c in cols[1:]:
            if c["role"] == "parameter":
                col = full[c["name"]]
                values = col.values
                if values.dtype.kind == "f":
                    values = values.copy()
                    values[~col.present] = 0
                params.append(ex._Param(c["name"], values, col.present))
        ex.define_columns(store, list(ids.tolist()), params, len(ids))
    status = {c["field"]: full[c["name"]] for c in cols[1:] if c["role"] == "status"}
    if status:
        state = status["state"]
        attempt = status.get("attempt")
        started = (state.values != "pending") | (attempt is not None and (attempt.values > 0))
        with store.writer(_allow_reserved=True) as w:
            for field, c in status.items():
                keep = c.present & started
                if field == "error":
                    keep &= np.not_equal(c.values, None)
                if not keep.any():
                    continue
                runs = ids[keep]
                vals = c.values[keep]
                w.log_many(runs.tolist() if runs.dtype == object else runs,
                           **{ex.STATUS_COLUMNS[field]: vals.tolist() if vals.dtype == object else vals})
    return ids


def _concat(parts: list[ex.Column]) -> ex.Column:
    if not parts:
        return ex.Column(np.empty(0), np.empty(0, dtype=bool), "float64")
    values = np.concatenate([p.values for p in parts])
    return ex.Column(values, np.concatenate([p.present for p in parts]), parts[0].dtype)


def _log_column(writer: Any, ids: np.ndarray, name: str, col: ex.Column) -> None:
    if not col.present.any():
        return
    runs = ids[col.present]
    vals = col.values[col.present]
    runs = runs.tolist() if runs.dtype == object else runs
    if vals.dtype == object:
        writer.log_many(runs, **{name: vals.tolist()})
    else:
        writer.log_many(runs, **{name: vals})


def _import_outcome_csv(
    writer: Any, ids: np.ndarray, m: dict[str, Any], f: IO[bytes], chunk_rows: int
) -> None:
    row0 = 0
    shape = tuple(m["shape"]) if m["shape"] is not None else None
    if m["variable_shape"]:
        writer.define(m["name"], m["dtype"], variable_shape=True)
    for df in _read_csv_chunks(f, chunk_rows):
        chunk_ids = ids[row0 : row0 + len(df)]
        if m["variable_shape"]:
            shapes = df.iloc[:, 1].to_numpy(dtype=object)
            texts = df.iloc[:, 2].to_numpy(dtype=object)
            dt = np.dtype(m["dtype"])
            for eid, sh, tx in zip(chunk_ids.tolist(), shapes.tolist(), texts.tolist()):
                if sh == "":
                    continue
                v = np.array(json.loads(tx), dtype=dt).reshape(json.loads(sh))
                writer.put(eid, m["name"], v)
        else:
            cells = df.iloc[:, 1:].to_numpy(dtype=object)
            col = _parse_cells(cells, m["dtype"], shape or (), m, row0)
            _log_column(writer, chunk_ids, m["name"], col)
        row0 += len(df)


def _import_npy(writer: Any, ids: np.ndarray, m: dict[str, Any], f: IO[bytes], present: np.ndarray | None,
                chunk_rows: int) -> None:
    version = np.lib.format.read_magic(f)
    shape, fortran, dtype = (np.lib.format.read_array_header_1_0(f) if version == (1, 0)
                             else np.lib.format.read_array_header_2_0(f))
    n = shape[0]
    row_shape = tuple(shape[1:])
    row_bytes = dtype.itemsize * int(np.prod(row_shape, dtype=np.int64))
    for start in range(0, n, chunk_rows):
        k = min(chunk_rows, n - start)
        buf = f.read(k * row_bytes)
        vals = np.frombuffer(buf, dtype=dtype).reshape((k,) + row_shape)
        p = np.ones(k, dtype=bool) if present is None else present[start : start + k]
        _log_column(writer, ids[start : start + k], m["name"], ex.Column(vals, p, m["dtype"]))


# -- Arrow and Parquet ---------------------------------------------------------------------------


def _arrow_type(dtype: str) -> Any:
    import pyarrow as pa

    if dtype == "string":
        return pa.string()
    if dtype == "bytes":
        return pa.binary()
    return pa.from_numpy_dtype(np.dtype(dtype))


def _zero_copy_primitive(values: np.ndarray) -> Any:
    """An Arrow array over a numpy array's buffer, without a copy (keeps the array alive)."""
    import pyarrow as pa

    values = np.ascontiguousarray(values)
    if values.dtype.kind == "b":
        return pa.array(values)  # Arrow packs bools into bits: a copy
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), len(values), [None, pa.py_buffer(values)])


def _arrow_array(
    values: np.ndarray, present: np.ndarray | None, dtype: str, shape: tuple[int, ...] | None
) -> Any:
    """An Arrow array of n records (values of shape (n, *shape)); nulls where not present."""
    import pyarrow as pa

    n = len(values)
    mask = None if present is None or present.all() else pa.array(~present)
    if dtype in ("string", "bytes"):
        return pa.array(values.tolist(), type=_arrow_type(dtype), mask=None if mask is None else ~present)
    if shape is None:  # variable shape: JSON text of the nested lists
        texts = [None if v is None else json.dumps(v.tolist(), allow_nan=True) for v in values.tolist()]
        return pa.array(texts, type=pa.string())
    if not shape:
        if mask is None:
            return _zero_copy_primitive(values)
        return pa.array(values, mask=~present)
    arr = _zero_copy_primitive(values.reshape(-1))
    for k, d in enumerate(reversed(shape)):
        last = k == len(shape) - 1
        if d == 0:
            # from_arrays cannot count lists of no elements: n * (the dimensions before) of them.
            lists = n * int(np.prod(shape[: len(shape) - 1 - k], dtype=np.int64))
            # A validity bitmap is set where present (the mask is set where absent).
            validity = pa.array(present).buffers()[1] if last and mask is not None else None
            arr = pa.Array.from_buffers(pa.list_(arr.type, 0), lists, [validity], children=[arr])
        else:
            arr = pa.FixedSizeListArray.from_arrays(arr, d, mask=mask if last else None)
    return arr


def _has_empty_fixed_list(t: Any) -> bool:
    import pyarrow as pa

    while pa.types.is_fixed_size_list(t):
        if t.list_size == 0:
            return True
        t = t.value_type
    return False


def _as_lists(t: Any) -> Any:
    import pyarrow as pa

    return pa.list_(_as_lists(t.value_type)) if pa.types.is_fixed_size_list(t) else t


def _for_parquet(data: Any) -> Any:
    """``data`` (a Table or RecordBatch) as Parquet can read it back: a column of fixed-size
    lists with a dimension of 0 (an outcome of shape (100, 0)) becomes lists of variable size
    (Parquet readers refuse fixed-size lists of size 0 they wrote); its shape stays in the
    schema's metadata and in runstore's own."""
    import pyarrow as pa

    if not any(_has_empty_fixed_list(f.type) for f in data.schema):
        return data
    fields, columns = [], []
    for f, c in zip(data.schema, data.columns):
        if _has_empty_fixed_list(f.type):
            f = f.with_type(_as_lists(f.type))
            c = c.cast(f.type)
        fields.append(f)
        columns.append(c)
    schema = pa.schema(fields, metadata=data.schema.metadata)
    return type(data).from_arrays(columns, schema=schema)


def to_arrow(store: Store, names: Iterable[str] | str | None,
             runs: Iterable[RunId] | None = None,
             steps: StepWindow | None = None) -> pyarrow.Table:
    import pandas as pd
    import pyarrow as pa

    from ._frame import run_list, sort_order

    runs = run_list(runs)
    infos = store.series()
    if names is None:
        selected = [n for n, i in infos.items() if i.shape is not None]
    else:
        selected = [names] if isinstance(names, str) else list(names)
        for n in selected:
            if n not in infos:
                raise KeyError(f"series {n!r} not found")
            if infos[n].shape is None:
                raise ValueError(
                    f"series {n!r} has a variable shape, which to_arrow does not convert: use Store.scan"
                )
    if not selected:
        return pa.table({"run": pa.array([], pa.int64()), "step": pa.array([], pa.int64())})
    scans = {n: store.scan(n, runs=runs, steps=steps) for n in selected}
    first = scans[selected[0]]
    same = all(
        len(s["run"]) == len(first["run"]) and np.array_equal(s["step"], first["step"])
        and np.array_equal(s["run"], first["run"]) for s in scans.values()
    )
    columns: dict[str, Any] = {}
    if same:
        run, step = first["run"], first["step"]
        order = sort_order(run, step)
        identity = bool(np.array_equal(order, np.arange(len(order))))
        take = (lambda a: a) if identity else (lambda a: a[order])
        columns["run"] = _run_array(take(run))
        columns["step"] = _zero_copy_primitive(take(step))
        for n in selected:
            i = infos[n]
            columns[n] = _arrow_array(take(scans[n]["value"]), None, i.dtype, i.shape)
        return pa.table(columns)
    # Different keys: the union of keys, sorted; each series placed with gaps.
    mixed = any(s["run"].dtype == object for s in scans.values())
    keys = [
        pd.MultiIndex.from_arrays([s["run"].astype(object) if mixed else s["run"], s["step"]])
        for s in scans.values()
    ]
    union = keys[0]
    for k in keys[1:]:
        union = union.union(k, sort=False)
    run = np.asarray(union.get_level_values(0).to_numpy())
    step = np.asarray(union.get_level_values(1).to_numpy(), dtype=np.int64)
    if run.dtype == object and not any(isinstance(r, str) for r in run.tolist()):
        run = run.astype(np.int64)
    order = sort_order(run, step)
    run, step = run[order], step[order]
    full = pd.MultiIndex.from_arrays([run.astype(object) if mixed else run, step])
    columns["run"] = _run_array(run)
    columns["step"] = _zero_copy_primitive(step)
    for n, k in zip(selected, keys):
        i = infos[n]
        pos = full.get_indexer(k)
        col = ex.empty_column(len(run), i.dtype, i.shape)
        col.values[pos] = scans[n]["value"]
        col.present[pos] = True
        columns[n] = _arrow_array(col.values, col.present, i.dtype, i.shape)
    return pa.table(columns)


def _run_array(run: np.ndarray) -> Any:
    import pyarrow as pa

    if run.dtype != object:
        return _zero_copy_primitive(run)
    # Mixed int and str run ids: Arrow columns have one type, so ints become their decimal text.
    return pa.array([r if isinstance(r, str) else str(r) for r in run.tolist()], type=pa.string())


def _experiment_batch(
    table: ExperimentTable, rows: slice, names: list[str], status: dict[str, ex.Column]
) -> Any:
    import pyarrow as pa

    ids = table.index.ids[rows]
    arrays = [_run_array(ids) if ids.dtype == object else pa.array(ids, type=pa.int64())]
    for p, c in table.params.items():
        cc = c.take(rows)
        arrays.append(_arrow_array(cc.values, cc.present, c.dtype, ()))
    for field, c in status.items():
        cc = c.take(rows)
        arrays.append(_arrow_array(cc.values, cc.present, c.dtype, ()))
    for o in table.outcomes:
        cc = table.chunk(o, rows)
        arrays.append(_arrow_array(cc.values, cc.present, o.dtype, o.shape))
    return pa.RecordBatch.from_arrays(arrays, names=names)


def export_parquet(store: Store, path: str | os.PathLike[str], *, row_group_rows: int = 10_000,
                   compression: str = "zstd", overwrite: bool = True) -> dict[str, Any]:
    import pyarrow.parquet as pq

    t0 = time.perf_counter()
    with ExportFile(path, store_path=store.path, overwrite=overwrite) as out:
        sink = out.file
        infos = ex.reserved_series(store)
        if ex.ROW not in infos:
            t = _for_parquet(to_arrow(store, None))
            pq.write_table(t, sink, row_group_size=row_group_rows, compression=compression)
            rows = t.num_rows
        else:
            table = ExperimentTable(store)
            status = table.status_columns()
            taken = {ex.ID_COLUMN, *table.params, *(table.status_names[f] for f in status)}
            names = [ex.ID_COLUMN, *table.params, *(table.status_names[f] for f in status)]
            outcome_meta = []
            for o in table.outcomes:
                col = o.name if o.name not in taken else f"outcome.{o.name}"
                names.append(col)
                outcome_meta.append({"name": o.name, "column": col, "dtype": o.dtype,
                                     "shape": list(o.shape) if o.shape is not None else None})
            meta = {"format": EXPORT_FORMAT, "version": EXPORT_VERSION, "experiments": table.n,
                    "parameters": list(table.params), "status": {f: table.status_names[f] for f in status},
                    "outcomes": outcome_meta}
            writer = None
            rows = 0
            row_bytes = sum(o.row_bytes for o in table.outcomes) + 64
            for sl in table.chunks(row_group_rows, row_bytes, PARQUET_ROW_GROUP_BYTES):
                batch = _for_parquet(_experiment_batch(table, sl, names, status))
                if writer is None:
                    schema = batch.schema.with_metadata({"runstore": json.dumps(meta)})
                    writer = pq.ParquetWriter(sink, schema, compression=compression)
                writer.write_batch(batch, row_group_size=row_group_rows)
                rows += batch.num_rows
            if writer is None:  # no experiments: an empty table with the columns
                batch = _for_parquet(_experiment_batch(table, slice(0, 0), names, status))
                schema = batch.schema.with_metadata({"runstore": json.dumps(meta)})
                writer = pq.ParquetWriter(sink, schema, compression=compression)
                writer.write_batch(batch)
            writer.close()
        out.commit()
    return {"path": out.path, "rows": rows, "bytes": os.path.getsize(out.path),
            "seconds": time.perf_counter() - t0}
