"""export_tar: a store's experiments as a .tar.gz of CSVs (and .npy) that opens in a spreadsheet.

Each member is formatted ``chunk_rows`` experiments at a time into a temporary file (tar needs
its size first), from which it is copied into the archive, compressed by a pool of threads.
The layout is specified in docs/experiments.md; _import.py reads it back.
"""

from __future__ import annotations

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
from concurrent.futures import ThreadPoolExecutor
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from .. import _core, _progress
from .._version import __version__
from ..experiments import _records as ex
from ._output import ExportFile
from ._table import EXPORT_FORMAT, ExperimentTable, Outcome

if TYPE_CHECKING:
    from .._reader import StoreReader

#: Spreadsheets (Excel, LibreOffice) open at most 16,384 columns: outcomes with more elements
#: than fit next to the experiment id go to .npy files even when they are 1-d or 2-d.
MAX_CSV_ELEMENTS = 16_383
#: The version of the tarball's layout (metadata.json "version"): 2 writes text cells that a
#: spreadsheet would take for a formula with a leading single quote; import_tar reads 1 and 2.
TAR_VERSION = 2


# -- text cells ----------------------------------------------------------------------------------

#: A text that a spreadsheet would take for a formula, after the single quotes it begins with
#: (present/runstore/csv.h, which the C++ formatter uses for the cells themselves).
_FORMULA = re.compile(r"'*[=+\-@\t\r]")


def text_cell(text: str) -> str:
    """A text cell as the exports write it (version 2): with a leading single quote where a
    spreadsheet would take the text for a formula (CWE-1236): after the single quotes it
    begins with, it begins with = + - @ TAB or CR."""
    return "'" + text if _FORMULA.match(text) else text


def text_from_cell(cell: str) -> str:
    """The text of a cell :func:`text_cell` wrote: the cell without its added quote."""
    return cell[1:] if cell.startswith("'") and _FORMULA.match(cell, 1) else cell


# -- names ---------------------------------------------------------------------------------------

_SAFE = re.compile(rb"[A-Za-z0-9._-]")
#: Names Windows keeps for devices, also with an extension (NUL.txt): a file cannot have them.
_WINDOWS_DEVICES = frozenset(
    ["CON", "PRN", "AUX", "NUL"] + [f"{p}{d}" for p in ("COM", "LPT") for d in "123456789"]
)


def portable_name(s: str) -> str:
    """``s`` (already escaped to characters every file system takes) with its first character
    escaped as %XX where Windows would refuse it as a file or directory name: a device name
    (CON, NUL.txt, ...), case ignored. Injective: a '%' of the name itself is always escaped."""
    if s.split(".", 1)[0].upper() in _WINDOWS_DEVICES:
        return f"%{ord(s[0]):02X}" + s[1:]
    return s


def safe_file_name(name: str, used: set[str]) -> str:
    """A file name for a series name: bytes outside [A-Za-z0-9._-] (and a leading '.') escaped
    as %XX, as `runstore export csv` does ('qi/3_17' -> 'qi%2F3_17'), and the first of a name
    Windows keeps for a device ('CON' -> '%43ON'); names that escape to more than 120 bytes are
    cut and end in '~' and a hash; a name that equals a used one when case is ignored gets '~'
    and a hash too (for case-insensitive file systems)."""
    out = []
    for i, b in enumerate(name.encode()):
        c = bytes([b])
        out.append(c.decode() if _SAFE.fullmatch(c) and not (i == 0 and c == b".") else f"%{b:02X}")
    s = portable_name("".join(out))
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
    """The header line: the names as text cells, quoted as every cell is (RFC 4180: a name
    with a comma, a quote, CR or LF)."""
    columns = []
    for c in cells:
        a = np.empty(1, dtype=object)
        a[0] = c
        columns.append(a)
    out = _core.csv_rows(columns, [None] * len(columns), text_cells=True)
    assert isinstance(out, bytes)
    return out


def element_names(name: str, shape: tuple[int, ...]) -> list[str]:
    """The CSV columns of an outcome of ``shape`` (after the id): ``name`` for a scalar,
    ``name_0`` .. for 1-d, ``name_i_j`` (C order) for 2-d."""
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
        self.pool = ThreadPoolExecutor(
            max_workers=max(1, threads), thread_name_prefix="runstore-gzip"
        )
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
            except Exception:  # noqa: BLE001 - the error that made us abort is the one to raise
                pass
        self.out.abort()


class _ColumnStats:
    """The metadata.json entry of one scalar column, gathered a chunk of rows at a time: its
    missing cells, and the rule that tells an empty string from an absent value
    (docs/experiments.md). The absent rows of a column that may need them (strings and bytes;
    arrays of no elements) are kept in a spool file until the end says whether they are."""

    def __init__(self, out: _TarOut, name: str, dtype: str, role: str, **extra: Any) -> None:
        self.meta: dict[str, Any] = {"name": name, "role": role, "dtype": dtype, **extra}
        self.missing = 0
        self.empty = False  # a string or bytes value of length 0 was seen
        self.no_elements = False  # arrays of no elements: no cell shows an absent one
        self._out = out
        self._rows: IO[bytes] | None = None

    def add(self, col: ex.Column, start: int) -> None:
        absent = ~col.present
        missing = int(absent.sum())
        self.missing += missing
        strings = col.dtype in ("string", "bytes")
        if strings and not self.empty:
            self.empty = any(len(v) == 0 for v in col.values[col.present].tolist())
        if col.values.ndim > 1 and 0 in col.values.shape[1:]:
            self.no_elements = True
        if missing and (strings or self.no_elements):
            if self._rows is None:
                self._rows = self._out.spool()
            self._rows.write((np.flatnonzero(absent) + start).astype("<i8").tobytes())

    def entry(self) -> dict[str, Any]:
        m = dict(self.meta, missing=self.missing)
        if self.missing and (self.empty or self.no_elements) and self._rows is not None:
            self._rows.seek(0)
            m["missing_rows"] = np.frombuffer(self._rows.read(), dtype="<i8").tolist()
        if self._rows is not None:
            self._rows.close()
            self._rows = None
        return m


def _cells(col: ex.Column) -> tuple[np.ndarray, np.ndarray | None]:
    """(values, absent mask) for csv_rows; bytes values are base64 in the C++ formatter."""
    absent = None if col.complete else ~col.present
    v = col.values
    if v.dtype != object and not v.dtype.isnative:
        v = v.astype(v.dtype.newbyteorder("="))
    return v, absent


def export_tar(
    store: StoreReader,
    path: str | os.PathLike[str],
    chunk_rows: int,
    compresslevel: int,
    overwrite: bool,
    progress: bool,
) -> dict[str, Any]:
    """runstore.export.export_tar."""
    t0 = time.perf_counter()
    # The target is checked (not in the store; absent unless overwrite) before the store is read.
    with (
        _progress.Line("runstore export tar", progress) as line,
        ExportFile(path, store_path=store.path, overwrite=overwrite) as f,
    ):
        line.show("reading the experiments")
        # The ids stay the runs of the read until a chunk of them is written, and the scalar
        # columns are read a window at a time.
        table = ExperimentTable(store, ids=False, window=True)
        # One pass over the experiments for the scalar columns, one for each array outcome.
        passes = 1 + sum(not _in_first_pass(o) for o in table.outcomes)
        table.progress = _progress.Work(line, table.n * passes, "rows")
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


def _as_csv(o: Outcome) -> bool:
    """Whether outcome ``o``'s member is a CSV file (else .npy): text, varying shapes, and
    arrays of at most 2 dimensions and MAX_CSV_ELEMENTS elements."""
    n_elements = int(np.prod(o.shape, dtype=np.int64)) if o.shape is not None else 1
    return (
        o.var_len
        or o.variable
        or (o.ndim is not None and o.ndim <= 2 and n_elements <= MAX_CSV_ELEMENTS)
    )


def _in_first_pass(o: Outcome) -> bool:
    """Whether outcome ``o`` is written in the pass that writes experiments.csv: a CSV member
    of a scalar (read with the scalar columns) or of arrays of no elements (read whole)."""
    return _as_csv(o) and (o.scalar or o.column is not None)


def _write_tar(table: ExperimentTable, out: _TarOut, chunk_rows: int) -> dict[str, Any]:
    """Writes the archive: experiments.csv and the scalar outcomes' members in one pass over the
    experiments (each spooled, so that metadata.json, which comes first and says what they
    hold, is written once they are), then each array outcome in a pass of its own."""
    snames = table.status_names
    # The status fields, in their order, and their types (of a chunk of no rows).
    first = {f: c.dtype for f, c in table.status_columns(slice(0, 0)).items()}
    status_fields = list(first)

    # experiments.csv: id, parameters, status.
    columns: list[dict[str, Any]] = [{"name": ex.ID_COLUMN, "role": "id", "dtype": table.id_dtype}]
    if table.id_dtype == "mixed":
        columns[0]["string_id_rows"] = table.index.string_rows().tolist()
    dtypes = {p: table.infos[ex.DESIGN + p]["dtype"] for p in table.param_names}
    param_stats = {p: _ColumnStats(out, p, dtypes[p], "parameter") for p in table.param_names}
    status_stats = {
        f: _ColumnStats(out, snames[f], first[f], "status", field=f) for f in status_fields
    }

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
        if _as_csv(o):
            m["format"] = "csv"
            m["member"] = base + ".csv"
            if o.variable:
                m["columns"] = [ex.ID_COLUMN, o.name + ".shape", o.name]
            else:
                m["columns"] = [ex.ID_COLUMN] + element_names(o.name, o.shape or ())
        else:
            m["format"] = "npy"
            m["member"] = base + ".npy"
            m["mask_member"] = base + ".mask.npy"
        outcomes.append(m)

    # The pass over the scalar columns: experiments.csv, and the members of the outcomes read
    # with them (scalars) or whole (arrays of no elements), with what metadata.json says of each.
    with_columns = [(o, m) for o, m in zip(table.outcomes, outcomes) if _in_first_pass(o)]
    outcome_stats = {o.name: _ColumnStats(out, o.name, o.dtype, "outcome") for o, _ in with_columns}
    spools = {o.name: out.spool() for o, _ in with_columns}
    exported: dict[str, int] = {o.name: 0 for o, _ in with_columns}
    f = out.spool()
    f.write(_header([c["name"] for c in columns]
                    + [param_stats[p].meta["name"] for p in table.param_names]
                    + [status_stats[s].meta["name"] for s in status_fields]))  # fmt: skip
    for o, m in with_columns:
        spools[o.name].write(_header(m["columns"]))
    row_bytes = 8 * (len(param_stats) + len(status_stats) + len(with_columns) + 1)
    for rows in table.chunks(chunk_rows, row_bytes):
        ids = table.index.take_array(rows)
        vals, masks = [ids], [None]
        for cols, stats in (
            (table.param_columns(rows), param_stats),
            (table.status_columns(rows), status_stats),
        ):
            for k, c in cols.items():
                stats[k].add(c, rows.start)
                v, a = _cells(c)
                vals.append(v)
                masks.append(a)
        _core.csv_rows(vals, masks, f.write, text_cells=True)
        for o, _ in with_columns:
            col = table.chunk(o, rows)
            outcome_stats[o.name].add(col, rows.start)
            exported[o.name] += int(col.present.sum())
            _write_csv_rows(spools[o.name], ids, o, col)

    columns += [param_stats[p].entry() for p in table.param_names]
    columns += [status_stats[s].entry() for s in status_fields]
    for o, m in with_columns:
        e = outcome_stats[o.name].entry()
        m.update({k: v for k, v in e.items() if k in ("missing", "missing_rows")})

    meta = {
        "format": EXPORT_FORMAT,
        "version": TAR_VERSION,
        "runstore_version": __version__,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "store": table.store.path,
        "has_design": table.has_design,
        "experiments": table.n,
        "experiments_member": "experiments.csv",
        "columns": columns,
        "outcomes": outcomes,
        "csv": {
            "encoding": "utf-8",
            "line_end": "\\n",
            "quoting": (
                "RFC 4180: a cell holding a comma, a quote, CR or LF is quoted, quotes doubled"
            ),
            "floats": "shortest text that reads back exactly; nan, inf, -inf",
            "bool": "true, false",
            "bytes": "base64 (RFC 4648, padded)",
            "absent": "empty cell (see missing and missing_rows for string and bytes columns)",
            "text_cells": (
                "a text cell (a header, a string, a string id, base64 of bytes) that after its "
                "leading single quotes begins with = + - @ TAB or CR is written with one more "
                "single quote first, so that spreadsheets show it as text and never run it as "
                "a formula; numbers are written as they are"
            ),
            "formula_prefix": "'",
        },
    }
    out.add_bytes("metadata.json", json.dumps(meta, indent=1, ensure_ascii=False).encode())
    out.add("experiments.csv", f)

    # The outcomes' members in their order: those written above from their spools, the others
    # now, each a pass over the experiments. Records that are not part of the experiment table
    # (at steps other than 0, or of runs that are not experiments) are counted, so that the
    # caller can say so.
    left_out: dict[str, int] = {}
    for o, m in zip(table.outcomes, outcomes):
        if o.name in spools:
            out.add(m["member"], spools.pop(o.name))
            n_exported = exported[o.name]
        else:
            write = _write_outcome_csv if m["format"] == "csv" else _write_outcome_npy
            n_exported = write(table, o, m, out, chunk_rows)
        if o.info["count"] > n_exported:
            left_out[o.name] = int(o.info["count"] - n_exported)
    return {
        "path": out.path,
        "experiments": table.n,
        "members": list(out.members),
        "left_out": left_out,
    }


def _write_outcome_csv(
    table: ExperimentTable, o: Outcome, m: dict[str, Any], out: _TarOut, chunk_rows: int
) -> int:
    f = out.spool()
    f.write(_header(m["columns"]))
    exported = 0
    for rows in table.chunks(chunk_rows, o.row_bytes):
        col = table.chunk(o, rows)
        exported += int(col.present.sum())
        _write_csv_rows(f, table.index.take_array(rows), o, col)
    out.add(m["member"], f)
    return exported


def _write_csv_rows(f: IO[bytes], ids: np.ndarray, o: Outcome, col: ex.Column) -> None:
    """The rows of outcome ``o``'s member for experiments ``ids`` (their values ``col``)."""
    if o.variable:
        shapes = np.full(len(col.values), None, dtype=object)
        texts = np.full(len(col.values), None, dtype=object)
        for k, v in enumerate(col.values.tolist()):
            if v is not None:
                shapes[k] = json.dumps(list(v.shape))
                texts[k] = json.dumps(_json_values(v), separators=(",", ":"), allow_nan=True)
        # The shape and the values are JSON of numbers, not text: written as they are.
        _core.csv_rows(
            [ids, shapes, texts],
            [None, None, None],
            f.write,
            text_cells=[True, False, False],
        )
    else:
        v, a = _cells(col)
        _core.csv_rows([ids, v], [None, a], f.write, text_cells=True)


def _json_values(v: np.ndarray) -> Any:
    """A variable-shape value as JSON-ready nested lists (NaN/Infinity for non-finite floats)."""
    return v.tolist()


def _write_outcome_npy(
    table: ExperimentTable, o: Outcome, m: dict[str, Any], out: _TarOut, chunk_rows: int
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
    # The mask (True where absent) is spooled a chunk at a time too.
    mask = out.spool()
    np.lib.format.write_array_header_1_0(
        mask, {"descr": "|b1", "fortran_order": False, "shape": (table.n,)}
    )
    exported = 0
    for rows in table.chunks(chunk_rows, o.row_bytes):
        col = table.chunk(o, rows)
        exported += int(col.present.sum())
        mask.write((~col.present).tobytes())
        f.write(np.ascontiguousarray(col.values).tobytes())
    out.add(m["mask_member"], mask)  # before the data, so that a streaming reader has it first
    out.add(m["member"], f)
    return exported


def _needs_v2(header: dict[str, Any]) -> bool:
    try:
        np.lib.format.write_array_header_1_0(io.BytesIO(), header)
        return False
    except ValueError:
        return True
