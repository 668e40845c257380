"""Defining experiments (``define_experiments``, ``grid``): a design's rows normalised into typed
parameter columns, their default ids (the hash of each row's canonical parameters), checked
against what the store holds, and written as records (layout:
:mod:`runstore.experiments._records`).
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import _core
from .._checks import check_run_id
from ._records import (
    DESIGN,
    ID_COLUMN,
    PARAMS,
    ROW,
    Column,
    design_columns,
    load_index,
    read_column,
    reserved_series,
)

if TYPE_CHECKING:
    import pandas

    from .._reader import StoreReader


# -- defining experiments ------------------------------------------------------------------------


def grid(
    axes: Mapping[str, Iterable[Any]] | None = None, /, **kwargs: Iterable[Any]
) -> list[dict[str, Any]]:
    """The Cartesian product of parameter values, as a list of dicts.

    ``grid(lr=[0.1, 0.01], seed=range(3))`` gives 6 dicts, the first parameter varying slowest:
    ``{"lr": 0.1, "seed": 0}, {"lr": 0.1, "seed": 1}, ...``. Parameter names that are not Python
    identifiers go in a mapping: ``grid({"opt/lr": [0.1, 0.01]}, seed=range(3))``.
    """
    all_axes: dict[str, list[Any]] = {}
    for source in (axes or {}, kwargs):
        for name, values in source.items():
            if name in all_axes:
                raise ValueError(f"grid: parameter {name!r} given twice")
            if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
                raise TypeError(
                    f"grid: parameter {name!r} needs a list of values, got {type(values).__name__} "
                    f"(write [{values!r}] for a single value)"
                )
            all_axes[name] = list(values)
    names = list(all_axes)
    return [dict(zip(names, combo)) for combo in itertools.product(*(all_axes[n] for n in names))]


@dataclass
class _Param:
    name: str
    values: np.ndarray  # numeric dtype, or object array of str
    present: np.ndarray


def _kind(v: Any) -> str:
    if isinstance(v, (bool, np.bool_)):
        return "bool"
    if isinstance(v, (int, np.integer)):
        return "int"
    if isinstance(v, (float, np.floating)):
        return "float"
    if isinstance(v, str):
        return "str"
    return type(v).__name__


def _infer(name: str, values: list[Any], present: np.ndarray) -> np.ndarray:
    """A typed array for one parameter's values (entries where not present are placeholders)."""
    live = [v for v, p in zip(values, present) if p]
    kinds = {_kind(v) for v in live}
    if not kinds:
        return np.zeros(len(values), dtype=np.float64)
    if kinds == {"str"}:
        return np.array([v if p else None for v, p in zip(values, present)], dtype=object)
    bad = kinds - {"bool", "int", "float"}
    if bad or ("bool" in kinds and len(kinds) > 1):
        raise TypeError(
            f"parameter {name!r} mixes or uses unsupported types ({', '.join(sorted(kinds))}); a "
            "parameter is all bool, all numbers (int and float) or all str"
        )
    np_types = {np.asarray(v).dtype for v in live if isinstance(v, np.generic)}
    if kinds == {"bool"}:
        dtype = np.dtype(bool)
    elif kinds == {"int"}:
        all_numpy = all(isinstance(v, np.generic) for v in live)
        dtype = np_types.pop() if len(np_types) == 1 and all_numpy else None
        if dtype is None:
            try:
                dtype = np.asarray(live).dtype
            except OverflowError as e:
                raise ValueError(f"parameter {name!r}: {e}") from None
            if dtype.kind not in "iu":
                raise ValueError(f"parameter {name!r}: integers outside the int64 and uint64 range")
    else:
        dtype = (
            np.dtype(np.float32)
            if np_types == {np.dtype(np.float32)} and all(isinstance(v, np.float32) for v in live)
            else np.dtype(np.float64)
        )
    fill = dtype.type(0)
    return np.array([v if p else fill for v, p in zip(values, present)], dtype=dtype)


def _normalise(design: Any) -> tuple[list[Any] | None, list[_Param]]:
    """(explicit ids or None, parameters) of a DataFrame or a list of dicts."""
    import pandas as pd

    if isinstance(design, pd.DataFrame):
        if not all(isinstance(c, str) for c in design.columns):
            raise TypeError("design: column names must be str")
        if design.columns.duplicated().any():
            raise ValueError(
                f"design: duplicate columns {list(design.columns[design.columns.duplicated()])}"
            )
        ids = None
        params = []
        n = len(design)
        for c in design.columns:
            s = design[c]
            if c == ID_COLUMN:
                ids = s.tolist()
                continue
            if isinstance(s.dtype, pd.CategoricalDtype):
                s = s.astype(object)
            kind = s.dtype.kind
            missing = (
                s.isna().to_numpy()
                if kind not in "biuf" or not isinstance(s.dtype, np.dtype)
                else None
            )
            if isinstance(s.dtype, np.dtype) and kind in "biuf":
                params.append(_Param(c, s.to_numpy(copy=True), np.ones(n, dtype=bool)))
            elif not isinstance(s.dtype, np.dtype) and kind in "biuf":  # pandas nullable
                present = ~missing
                np_dtype = np.dtype(s.dtype.numpy_dtype)
                params.append(
                    _Param(c, s.to_numpy(dtype=np_dtype, na_value=np_dtype.type(0)), present)
                )
            else:
                present = ~missing
                vals = s.tolist()
                params.append(_Param(c, _infer(c, vals, present), present))
        return ids, params
    if isinstance(design, Mapping):
        raise TypeError(
            "design: a DataFrame or a list of dicts (one dict per experiment), got a dict"
        )
    rows = list(design)
    for i, r in enumerate(rows):
        if not isinstance(r, Mapping):
            raise TypeError(f"design: row {i} is a {type(r).__name__}, not a dict")
    names: dict[str, None] = {}
    for r in rows:
        for k in r:
            if not isinstance(k, str):
                raise TypeError(f"design: parameter names must be str, got {k!r}")
            names.setdefault(k, None)
    ids = None
    params = []
    for name in names:
        vals = [r.get(name) for r in rows]
        present = np.fromiter((v is not None for v in vals), bool, len(vals))
        if name == ID_COLUMN:
            ids = vals
            continue
        params.append(_Param(name, _infer(name, vals, present), present))
    return ids, params


def check_param_name(name: str) -> None:
    """Raises ValueError if ``name`` cannot be a parameter of the design, saying why."""
    if not name:
        raise ValueError("design: a parameter name is empty")
    if name.startswith("~"):
        raise ValueError(
            f"design: parameter {name!r} starts with '~', which is reserved for runstore"
        )
    if "\0" in name:
        raise ValueError(f"design: parameter {name!r} holds a NUL character, which no name may")
    try:
        name.encode()
    except UnicodeEncodeError:
        raise ValueError(
            f"design: parameter {name!r} is not valid Unicode text (names are UTF-8)"
        ) from None
    if len((DESIGN + name).encode()) > 255:
        raise ValueError(
            f"design: parameter name {name[:40]!r}... is longer than {255 - len(DESIGN)} bytes"
        )


def _check_ids(ids: list[Any]) -> np.ndarray:
    out = []
    for i, e in enumerate(ids):
        # Run ids as the core takes them: a bool, a float (even 3.0) or None is refused, not
        # taken for run 1 or 3 or a missing id.
        e = check_run_id(e, f"design: row {i}: the experiment id")
        if isinstance(e, int):
            if not -(2**63) <= e < 2**63:
                raise OverflowError(
                    f"design: row {i}: experiment id {e} does not fit a 64-bit signed integer"
                )
        elif not e or len(e.encode()) > 255:
            raise ValueError(f"design: experiment id {e[:40]!r} must be 1 to 255 bytes of UTF-8")
        out.append(e)
    if out and all(isinstance(e, int) for e in out):
        return np.array(out, dtype=np.int64)
    arr = np.empty(len(out), dtype=object)
    arr[:] = out
    return arr


def canonical_params(params: Mapping[str, Any]) -> str:
    """The text a derived experiment id hashes: compact JSON with sorted keys, floats in
    Python's repr form (shortest round trip), NaN and infinities as NaN/Infinity."""
    return _CANONICAL.encode(
        {k: (v.item() if isinstance(v, np.generic) else v) for k, v in params.items()}
    )


#: The encoder of canonical_params, made once (json.dumps with options makes one per call).
_CANONICAL = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=True
)


def experiment_id(params: Mapping[str, Any]) -> str:
    """The id runstore derives for a parameter row without an "experiment" column:
    "e" + the first 16 hex digits of the SHA-256 of :func:`canonical_params`."""
    return experiment_id_of_plain(
        {k: (v.item() if isinstance(v, np.generic) else v) for k, v in params.items()}
    )


def experiment_id_of_plain(params: Mapping[str, Any]) -> str:
    """:func:`experiment_id` of parameters whose values are already plain Python bool, int,
    float or str (no numpy scalars): the same id, without the copy that converts them, in one
    C++ call where the row is plain (the encoder's text and SHA-256, ``experiment_id.cc``)."""
    eid = _core.plain_experiment_id(params)
    if eid is None:
        eid = "e" + hashlib.sha256(_CANONICAL.encode(params).encode()).hexdigest()[:16]
    return eid


def derived_ids(params: list[_Param], n: int) -> np.ndarray:
    """The default ids of the design's rows, computed on the columns in one C++ call where
    every value is plain (an array of dtype S17: the ids' bytes, no Python object per id, as
    writers take runs and :func:`id_column` makes a frame's column), else row by row (an
    object array); ValueError for two rows with one id."""
    got = _core.plain_experiment_ids(
        [p.name for p in params],
        [np.ascontiguousarray(p.values) for p in params],
        [np.ascontiguousarray(p.present, dtype=bool) for p in params],
        n,
    )
    if got is not None:
        ids, dup = got
        if dup is not None:
            j, i = dup
            _refuse_duplicate(_row_dicts(params, n, [j, i]), j, i)
        return ids
    rows = _row_dicts(params, n)
    id_list = [experiment_id_of_plain(r) for r in rows]
    first: dict[str, int] = {}
    for i, e in enumerate(id_list):
        j = first.setdefault(e, i)
        if j != i:
            _refuse_duplicate([rows[j], rows[i]], j, i)
    ids = np.empty(n, dtype=object)
    ids[:] = id_list
    return ids


def id_objects(ids: np.ndarray) -> np.ndarray:
    """Ids as an object array of Python ids (those of dtype S decoded as UTF-8)."""
    if ids.dtype.kind != "S":
        return ids
    out = np.empty(len(ids), dtype=object)
    out[:] = [b.decode() for b in ids.tolist()]
    return out


def id_column(ids: np.ndarray) -> Any:
    """A frame's column of ``ids``: as given, or for ids of dtype S (UTF-8 bytes of str ids)
    the str column pandas makes of their strs. Where pandas keeps str columns in Arrow (pandas
    3 with pyarrow), it is made from the bytes themselves, without a Python object per id."""
    import pandas as pd

    if ids.dtype.kind != "S":
        return ids
    n, width = len(ids), ids.dtype.itemsize
    dtype = pd.Series(["e"]).dtype  # pandas' own type of a column of str
    full = n == 0 or bool(ids.view(np.uint8).reshape(n, width)[:, -1].all())
    if (
        isinstance(dtype, pd.StringDtype)
        and dtype.storage == "pyarrow"
        and full  # every id `width` bytes long (no NUL padding), so offsets are a range
        and n * width < 2**31
    ):
        import pyarrow as pa

        offsets = np.arange(0, width * (n + 1), width, dtype=np.int32)
        data = np.ascontiguousarray(ids)
        arr = pa.Array.from_buffers(
            pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
        )
        arr.validate(full=True)  # UTF-8, as decoding would check
        return pd.Series(arr, dtype=dtype)
    return id_objects(ids)


def _refuse_duplicate(pair: list[dict[str, Any]], j: int, i: int) -> None:
    """The error for rows j and i (their dicts ``pair``) of one id."""
    if canonical_params(pair[0]) == canonical_params(pair[1]):
        raise ValueError(
            f"design: rows {j} and {i} have the same parameters {pair[1]}, so they would "
            "get the same experiment id; add a parameter that tells them apart (a seed or "
            "a replicate number) or give an 'experiment' column"
        )
    # Two different rows with one 64-bit hash prefix.
    raise ValueError("design: two different parameter rows hash to the same experiment id")


def _row_dicts(params: list[_Param], n: int, only: list[int] | None = None) -> list[dict[str, Any]]:
    """The rows as dicts of their present values (rows ``only``, when given)."""
    if only is not None:
        return [
            {p.name: p.values[k].item() if isinstance(p.values[k], np.generic) else p.values[k]
             for p in params if p.present[k]}
            for k in only
        ]  # fmt: skip
    cols = [(p.name, p.values.tolist(), p.present) for p in params]
    rows: list[dict[str, Any]] = [{} for _ in range(n)]
    for name, vals, present in cols:
        if present.all():
            for r, v in zip(rows, vals):
                r[name] = v
        else:
            for r, v, ok in zip(rows, vals, present.tolist()):
                if ok:
                    r[name] = v
    return rows


def _coerce(p: _Param, stored_dtype: str) -> None:
    """Casts p's values to the dtype its series has in the store, if no value changes."""
    have = "string" if p.values.dtype == object else p.values.dtype.name
    if have == stored_dtype or not p.present.any():
        if have != stored_dtype:  # only absent values: any placeholder of the stored dtype
            p.values = (
                np.full(len(p.values), None, dtype=object)
                if stored_dtype == "string"
                else np.zeros(len(p.values), dtype=np.dtype(stored_dtype))
            )
        return
    err = ValueError(
        f"parameter {p.name!r} is stored as {stored_dtype}; the design's values are {have} and "
        f"do not all convert to {stored_dtype} exactly"
    )
    text = have == "string" or stored_dtype in ("string", "bytes")
    if text or (have == "bool") != (stored_dtype == "bool"):
        raise err
    target = np.dtype(stored_dtype)
    live = p.values[p.present]
    with np.errstate(all="ignore"):
        if target.kind in "iu" and live.dtype.kind == "f" and not np.isfinite(live).all():
            raise err
        cast = live.astype(target)
        back = cast.astype(live.dtype)
    if not np.array_equal(back, live, equal_nan=live.dtype.kind == "f"):
        raise err
    if target.kind in "iu" and live.dtype.kind in "iu":
        if not np.array_equal(cast.astype(object), live.astype(object)):
            raise err
    out = np.zeros(len(p.values), dtype=target)
    out[p.present] = cast
    p.values = out


def _same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise equality with NaN equal to NaN."""
    if a.dtype == object or b.dtype == object:
        return np.fromiter((x == y for x, y in zip(a.tolist(), b.tolist())), bool, len(a))
    eq = a == b
    if a.dtype.kind == "f" and b.dtype.kind == "f":
        eq |= np.isnan(a) & np.isnan(b)
    return eq


def define_experiments(store: StoreReader, design: Any) -> pandas.DataFrame:
    explicit_ids, params = _normalise(design)
    if params:
        n = len(params[0].values)
    elif explicit_ids is not None:
        n = len(explicit_ids)
    else:
        n = len(design)
        if n:
            raise ValueError(
                "design: the rows have no parameters; give them an 'experiment' column"
            )
    return define_columns(store, explicit_ids, params, n)


def define_columns(
    store: StoreReader,
    explicit_ids: list[Any] | None,
    params: list[_Param],
    n: int,
    writer: Any = None,
) -> pandas.DataFrame | None:
    """define_experiments on columns: explicit ids (or None) and typed parameter columns.

    The rows are checked against what ``store`` holds and written by a writer of its own, then
    committed, and the design frame is returned; with ``writer`` (a writer with reserved names
    allowed, of this store or of one whose records will join it), written by that writer
    instead and left for its owner to commit (import_tar makes the whole import one commit),
    and None is returned."""
    import pandas as pd

    for p in params:
        check_param_name(p.name)

    store.refresh()
    infos = reserved_series(store, counts=False)
    for p in params:
        info = infos.get(DESIGN + p.name)
        if info is not None:
            _coerce(p, info["dtype"])

    if explicit_ids is not None:
        ids = _check_ids(explicit_ids)
        if len(ids) != len(set(ids.tolist())):
            seen: dict[Any, int] = {}
            for i, e in enumerate(ids.tolist()):
                if e in seen:
                    raise ValueError(f"design: experiment id {e!r} is in rows {seen[e]} and {i}")
                seen[e] = i
    else:
        ids = derived_ids(params, n)

    # Compare with what the store holds for ids it already has.
    index = load_index(store, infos)
    pos = index.positions(id_objects(ids)) if len(index) else np.full(n, -1, dtype=np.intp)
    existing = pos >= 0
    stored_params = design_columns(store, infos)
    if existing.any():
        given = {p.name: p for p in params}
        e_rows = np.flatnonzero(existing)
        e_pos = pos[existing]
        for name in dict.fromkeys(stored_params + list(given)):
            if name in stored_params:
                col = read_column(store, DESIGN + name, index, infos[DESIGN + name])
                s_present, s_values = col.present[e_pos], col.values[e_pos]
            else:
                s_present = np.zeros(len(e_pos), dtype=bool)
                s_values = np.zeros(len(e_pos))
            if name in given:
                g_present, g_values = given[name].present[e_rows], given[name].values[e_rows]
            else:
                g_present = np.zeros(len(e_rows), dtype=bool)
                g_values = np.zeros(len(e_rows))
            differ = s_present != g_present
            both = s_present & g_present
            if both.any():
                differ[both] |= ~_same(s_values[both], g_values[both])
            if differ.any():
                k = int(np.flatnonzero(differ)[0])
                sv = s_values[k] if s_present[k] else "(none)"
                gv = g_values[k] if g_present[k] else "(none)"
                sv = sv.item() if isinstance(sv, np.generic) else sv
                gv = gv.item() if isinstance(gv, np.generic) else gv
                eid = id_objects(ids[e_rows[k] : e_rows[k] + 1])[0]
                eid = eid.item() if isinstance(eid, np.generic) else eid
                raise ValueError(
                    f"experiment {eid!r} is already defined with {name}={sv!r}; the design "
                    f"gives {name}={gv!r} ({int(differ.sum())} experiment(s) differ in {name!r}). "
                    "Give changed experiments new ids"
                )

    new = ~existing
    if new.any():
        # Every row new (a first definition): the columns as they are, not copies of them.
        new = slice(None) if new.all() else new
        new_ids = ids[new]
        runs = new_ids if new_ids.dtype != object else new_ids.tolist()
        first_row = 0
        if ROW in infos:
            r = store._core.scan(ROW)["value"]
            first_row = int(r.max()) + 1 if len(r) else 0
        order = stored_params + [p.name for p in params if p.name not in stored_params]

        def values(p: _Param, keep: Any) -> Any:
            vals = p.values[new] if keep is None else p.values[new][keep]
            return vals.tolist() if vals.dtype == object else vals

        def write(w: Any) -> None:
            # The parameters every new row has go with the rows' numbers in one log_many (the
            # runs converted once); the others each with the runs that have them.
            whole = {ROW: np.arange(first_row, first_row + len(new_ids), dtype=np.int64)}
            for p in params:
                keep = p.present[new]
                if keep.all():
                    whole[DESIGN + p.name] = values(p, None)
                elif keep.any():
                    rr = new_ids[keep]
                    rr = rr if rr.dtype != object else rr.tolist()
                    w.log_many(rr, **{DESIGN + p.name: values(p, keep)})
            w.log_many(runs, **whole)
            if order != stored_params:
                w.put(0, PARAMS, json.dumps(order, ensure_ascii=False))

        if writer is not None:
            write(writer)
        else:
            with store.writer(_allow_reserved=True) as w:
                write(w)
            store.refresh()

    if writer is not None:
        return None
    data: dict[str, Any] = {ID_COLUMN: id_column(ids)}
    for p in params:
        data[p.name] = Column(p.values, p.present, "").to_pandas()
    # Not copied into one block: the columns are this call's own copies of the design's.
    return pd.DataFrame(data, copy=False)
