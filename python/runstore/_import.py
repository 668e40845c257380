"""import_tar: a store rebuilt from a tarball of export_tar, dtypes and shapes intact.

The archive is read as a stream, member by member (metadata.json first), ``chunk_rows`` rows
at a time.
"""

from __future__ import annotations

import base64
import io
import json
import os
import tarfile
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from . import _experiments as ex
from ._table import EXPORT_FORMAT, EXPORT_VERSION

if TYPE_CHECKING:
    from ._store import Store


def _parse_cells(
    cells: np.ndarray, dtype: str, shape: tuple[int, ...], meta: dict[str, Any] | None, row0: int
) -> ex.Column:
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
            values[:] = [
                base64.b64decode(c) if p else None for c, p in zip(cells.tolist(), present.tolist())
            ]
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

    reader = pd.read_csv(
        f,
        dtype=object,
        na_filter=False,
        keep_default_na=False,
        chunksize=chunk_rows,
        encoding="utf-8",
    )
    yield from reader


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


def import_tar(path: str | os.PathLike[str], store: Store, chunk_rows: int) -> Store:
    """runstore.export.import_tar: reads the archive at ``path`` into ``store``."""
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
                    if (
                        meta.get("format") != EXPORT_FORMAT
                        or meta.get("version", 0) > EXPORT_VERSION
                    ):
                        raise ValueError(
                            f"{path}: not a runstore export this version reads (format "
                            f"{meta.get('format')!r}, version {meta.get('version')!r})"
                        )
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


def _import_experiments(
    store: Store, meta: dict[str, Any], f: IO[bytes], chunk_rows: int
) -> np.ndarray:
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
                w.log_many(
                    runs.tolist() if runs.dtype == object else runs,
                    **{ex.STATUS_COLUMNS[field]: vals.tolist() if vals.dtype == object else vals},
                )
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


def _import_npy(
    writer: Any,
    ids: np.ndarray,
    m: dict[str, Any],
    f: IO[bytes],
    present: np.ndarray | None,
    chunk_rows: int,
) -> None:
    version = np.lib.format.read_magic(f)
    shape, fortran, dtype = (
        np.lib.format.read_array_header_1_0(f)
        if version == (1, 0)
        else np.lib.format.read_array_header_2_0(f)
    )
    n = shape[0]
    row_shape = tuple(shape[1:])
    row_bytes = dtype.itemsize * int(np.prod(row_shape, dtype=np.int64))
    for start in range(0, n, chunk_rows):
        k = min(chunk_rows, n - start)
        buf = f.read(k * row_bytes)
        vals = np.frombuffer(buf, dtype=dtype).reshape((k,) + row_shape)
        p = np.ones(k, dtype=bool) if present is None else present[start : start + k]
        _log_column(writer, ids[start : start + k], m["name"], ex.Column(vals, p, m["dtype"]))
