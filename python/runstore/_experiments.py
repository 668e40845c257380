"""Experiments: a design table, per-experiment status and outcomes, all stored as records.

Layout (docs/experiments.md): every experiment is a run id. Its parameters are records
``(id, "~design/<param>", 0)``, its definition order ``(id, "~design/~row", 0)`` (int64), its
status ``(id, "~status/<field>", 0)``; its outcomes are ordinary series ``(id, name, 0)``. The
order of the parameter columns is one record ``(0, "~design/~params", 0)`` holding a JSON list.
When a key is written again the later commit wins, so a retried experiment's "done" replaces its
"failed", and defining the same rows twice changes nothing.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from . import _attrs, _core
from ._checks import RunId, check_run_id
from ._frame import _NULLABLE, unique_name  # _NULLABLE: numpy dtype -> pandas nullable

if TYPE_CHECKING:
    import pandas

    from ._store import Store


DESIGN = "~design/"
ROW = "~design/~row"
PARAMS = "~design/~params"
STATUS = "~status/"
STATE = "~status/state"
ERROR = "~status/error"
HOST = "~status/host"
STARTED = "~status/started"
FINISHED = "~status/finished"
SECONDS = "~status/seconds"
ATTEMPT = "~status/attempt"

#: Status columns of Store.status(), in order, with the series each comes from.
STATUS_COLUMNS = {
    "state": STATE,
    "error": ERROR,
    "host": HOST,
    "started": STARTED,
    "finished": FINISHED,
    "seconds": SECONDS,
    "attempt": ATTEMPT,
}
STATES = ("pending", "running", "done", "failed")
ID_COLUMN = "experiment"
#: The key of Store.attrs that names categorical parameters: {param: [category, ...]}.
CATEGORIES_ATTR = "categories"


# -- columns with gaps ---------------------------------------------------------------------------


@dataclass
class Column:
    """One column of a table in experiment order: values and which rows have one.

    ``values`` has shape (n, *shape): numeric dtypes for fixed-shape numeric series (NaN or 0
    where absent), an object array (str, bytes, arrays; None where absent) otherwise.
    ``dtype`` is the runstore dtype name ("float64", "string", ...).
    """

    values: np.ndarray
    present: np.ndarray
    dtype: str

    @property
    def complete(self) -> bool:
        return bool(self.present.all())

    def take(self, rows: np.ndarray | slice) -> Column:
        return Column(self.values[rows], self.present[rows], self.dtype)

    def to_pandas(self) -> Any:
        """The column for a DataFrame: NaN where floats are absent, pandas nullable dtypes for
        int/uint/bool columns with gaps, None in object columns."""
        if self.values.ndim != 1:
            raise ValueError("only 1-d columns go into a DataFrame")
        if self.complete or self.values.dtype == object:
            return self.values
        if self.values.dtype.kind == "f":
            out = self.values.copy()
            out[~self.present] = np.nan
            return out
        return _nullable(self.values, self.present)

    def masked(self) -> np.ndarray:
        """numpy view of the column: NaN where float values are absent; a numpy.ma masked array
        for other dtypes with gaps; a plain array when nothing is absent."""
        if self.complete or self.values.dtype.kind == "f":
            return self.values
        mask = np.broadcast_to(
            (~self.present).reshape((-1,) + (1,) * (self.values.ndim - 1)), self.values.shape
        )
        return np.ma.masked_array(self.values, mask=mask.copy())


def _nullable(values: np.ndarray, present: np.ndarray) -> Any:
    import pandas as pd

    dtype = _NULLABLE[values.dtype.name]
    arr_type = pd.api.types.pandas_dtype(dtype).construct_array_type()
    return arr_type(values.copy(), ~present)


def empty_column(n: int, dtype: str, shape: tuple[int, ...] | None) -> Column:
    """A column of n absent values of a runstore dtype and record shape (None: variable)."""
    if dtype in ("string", "bytes") or shape is None:
        values = np.full(n, None, dtype=object)
    else:
        values = np.zeros((n,) + tuple(shape), dtype=np.dtype(dtype))
        if values.dtype.kind == "f":
            values.fill(np.nan)
    return Column(values, np.zeros(n, dtype=bool), dtype)


# -- the experiment index ------------------------------------------------------------------------


class ExperimentIndex:
    """The experiment ids of a store in definition order, and where a run id's row is.

    Built with numpy (int ids: a sorted copy and searchsorted) or a dict (str or mixed ids),
    not pandas: the export path stays free of pandas and its memory."""

    def __init__(self, ids: np.ndarray) -> None:
        self.ids = ids
        self._order: np.ndarray | None = None
        self._sorted: np.ndarray | None = None
        self._dict: dict[Any, int] | None = None
        self._last: np.ndarray | None = None  # the positions last asked, when all were found
        if ids.dtype != object:
            self._order = np.argsort(ids, kind="stable")
            self._sorted = ids[self._order]

    def _lookup(self) -> dict[Any, int]:
        """Id -> row, built at the first lookup of str or mixed ids (not for a table that only
        lists them)."""
        if self._dict is None:
            self._dict = {e: i for i, e in enumerate(self.ids.tolist())}
        return self._dict

    def __len__(self) -> int:
        return len(self.ids)

    def take(self, rows: np.ndarray) -> list[Any]:
        """The ids of rows ``rows``, as Python objects."""
        return self.ids[rows].tolist()

    def take_array(self, rows: np.ndarray | slice) -> np.ndarray:
        """The ids of rows ``rows`` as an array: int64 where every id is an int, else object."""
        return self.ids[rows]

    def string_rows(self) -> np.ndarray:
        """The rows whose id is a str."""
        if self.ids.dtype != object:
            return np.zeros(0, dtype=np.intp)
        return np.flatnonzero([isinstance(e, str) for e in self.ids.tolist()])

    def all(self) -> list[Any]:
        return self.ids.tolist()

    def positions(self, runs: np.ndarray | list[Any]) -> np.ndarray:
        """Row of each run id; -1 for runs that are not experiments."""
        runs = runs if isinstance(runs, np.ndarray) else np.array(runs, dtype=object)
        if len(self.ids) == 0 or len(runs) == 0:
            return np.full(len(runs), -1, dtype=np.intp)
        if self.ids.dtype == object:
            # The series of one log_many (an experiment's status fields, its outcomes) hold
            # their runs in the same order: the last positions are checked against the ids
            # they name (one comparison per run) instead of a lookup per run.
            last = self._last
            if last is not None and len(last) == len(runs) and np.array_equal(self.ids[last], runs):
                return last
            d = self._lookup()
            pos = np.fromiter((d.get(r, -1) for r in runs.tolist()), np.intp, len(runs))
            pos.setflags(write=False)  # shared by the calls that reuse it
            # Kept when every run is an experiment: a run that is not (-1) has no id to check.
            self._last = pos if len(pos) and pos.min() >= 0 else None
            return pos
        assert self._sorted is not None and self._order is not None
        if runs.dtype == object:  # some str runs: only the int ones can match
            is_int = np.fromiter((isinstance(r, int) for r in runs.tolist()), bool, len(runs))
            pos = np.full(len(runs), -1, dtype=np.intp)
            if is_int.any():
                pos[is_int] = self.positions(runs[is_int].astype(np.int64))
            return pos
        k = np.searchsorted(self._sorted, runs)
        k[k == len(self._sorted)] = 0
        found = self._sorted[k] == runs
        return np.where(found, self._order[k], -1).astype(np.intp, copy=False)


class RunList:
    """The experiment ids in definition order as ``scan_aligned`` hands them over (the runs as
    stored, and where each row's run is among them): no Python object per id until ids are
    asked for (:meth:`take`, :meth:`all`), as :class:`ExperimentIndex` gives them."""

    def __init__(self, r: dict[str, Any]) -> None:
        self.ints, self.is_str = r["run"], r["run_is_str"]
        self.ends, self.data, self.order = r["run_ends"], r["run_bytes"], r["order"]

    def __len__(self) -> int:
        return len(self.order)

    def take(self, rows: np.ndarray | list[int] | slice) -> list[Any]:
        """The ids of rows ``rows``, as Python objects."""
        if isinstance(rows, slice):
            rows = np.arange(*rows.indices(len(self)))
        b = memoryview(self.data)  # decoded where it lies: no copy of every id's bytes
        k = self.order[np.asarray(rows, dtype=np.intp)].astype(np.int64)
        hi = self.ends[k]
        lo = np.where(k > 0, self.ends[np.maximum(k - 1, 0)], 0)
        out: list[Any] = []
        for s, a, z, i in zip(self.is_str[k].tolist(), lo.tolist(), hi.tolist(), k.tolist()):
            out.append(str(b[a:z], "utf-8", "surrogateescape") if s else int(self.ints[i]))
        return out

    def all(self) -> list[Any]:
        return self.take(np.arange(len(self)))

    def take_array(self, rows: np.ndarray | slice) -> np.ndarray:
        """The ids of rows ``rows`` as an array, as :meth:`ExperimentIndex.take_array`."""
        ids = self.take(rows)
        if not self.is_str.any():
            return np.array(ids, dtype=np.int64)
        out = np.empty(len(ids), dtype=object)
        out[:] = ids
        return out

    def string_rows(self) -> np.ndarray:
        """The rows whose id is a str."""
        return np.flatnonzero(self.is_str[self.order])

    def index(self) -> ExperimentIndex:
        """The same ids as an :class:`ExperimentIndex` (a Python object per id)."""
        return ExperimentIndex(self.take_array(slice(None)))

    def same(self, other: Any) -> bool:
        """Whether ``other`` is a RunList of the same runs in the same order."""
        return isinstance(other, RunList) and all(
            np.array_equal(a, b)
            for a, b in zip(
                (self.ints, self.is_str, self.ends, self.data, self.order),
                (other.ints, other.is_str, other.ends, other.data, other.order),
            )
        )


def reserved_series(store: Store, counts: bool = True) -> dict[str, dict[str, Any]]:
    """Every series including reserved ones, by name (the _core series() dicts). With
    ``counts=False`` without their counts, and so without resolving any series' keys (which
    reads the blocks of every series whose keys may repeat): their types, for readers of some
    of them."""
    return {d["name"]: d for d in store._core.series(include_reserved=True, counts=counts)}


def load_index(store: Store, infos: dict[str, dict[str, Any]] | None = None) -> ExperimentIndex:
    """The experiment ids in definition order (~design/~row; ties in storage order)."""
    infos = reserved_series(store, counts=False) if infos is None else infos
    if ROW not in infos:
        return ExperimentIndex(np.empty(0, dtype=np.int64))
    d = store._core.scan(ROW)
    store._core.release_pages()  # as read_column does
    keep = d["step"] == 0
    runs, rows = d["run"][keep], d["value"][keep]
    order = np.argsort(rows, kind="stable")
    ids = runs[order]
    return ExperimentIndex(np.array(ids, copy=True))


def read_column(
    store: Store,
    name: str,
    index: ExperimentIndex,
    info: dict[str, Any] | None = None,
) -> Column:
    """Series ``name``'s step-0 records placed in experiment order (a vectorised scan)."""
    info = store._core.series_info(name) if info is None else info
    shape = None if info["variable_shape"] else tuple(info["shape"])
    if len(index) == 0:
        return empty_column(0, info["dtype"], shape)
    # Scanned before the column is made: a store whose headers claim more than its blocks hold
    # is Corruption here, before anything is allocated by what they claim.
    d = store._core.scan(name)
    # The segment pages the scan mapped leave this process's resident set before the column
    # is allocated (they come back from the page cache if touched): a column as large as the
    # scan would otherwise be held beside both.
    store._core.release_pages()
    col = empty_column(len(index), info["dtype"], shape)
    steps = d["step"]
    pos = index.positions(d["run"])
    keep = (pos >= 0) & (steps == 0)
    if not keep.all():
        pos, values = pos[keep], d["value"][keep]
    else:
        values = d["value"]
    if info["dtype"] == "string" and values.dtype == object:
        # One str object per distinct value (states, hosts repeat): a fraction of the memory.
        seen: dict[str, str] = {}
        col.values[pos] = [seen.setdefault(v, v) for v in values.tolist()]
    else:
        col.values[pos] = values
    col.present[pos] = True
    return col


def alignable(info: dict[str, Any]) -> bool:
    """Whether a series is read by :func:`load_aligned`: numbers of one shape, scalar strings."""
    if info["variable_shape"] or info["dtype"] == "bytes":
        return False
    return info["dtype"] != "string" or not info["shape"]


def aligned_design(infos: dict[str, dict[str, Any]]) -> bool:
    """Whether the design's rows order the experiments for :func:`load_aligned` (integers)."""
    row = infos.get(ROW)
    return row is not None and row["dtype"].startswith(("int", "uint")) and not row["shape"]


def load_aligned(
    store: Store, names: Iterable[str], infos: dict[str, dict[str, Any]], ids: bool = True
) -> tuple[ExperimentIndex | RunList, dict[str, Column]]:
    """The experiment index and series ``names`` as Columns in experiment order, those of
    numbers and scalar strings from one scan of each placed on the design's runs, in definition
    order, by the core (``scan_aligned``): no Python object per record, but for the ids and one
    per distinct string, and each record copied once, into its column. Other series go through
    :func:`read_column`. The same columns as :func:`load_index` and :func:`read_column`
    give. With ``ids=False`` the experiments may come as a :class:`RunList` (no Python object
    per id), where every series is read this way."""
    names = list(dict.fromkeys(names))
    if not aligned_design(infos):  # none, or rows that are not integers (written by hand)
        index = load_index(store, infos)
        return index, {n: read_column(store, n, index, infos[n]) for n in names}
    aligned = [n for n in names if alignable(infos[n])]
    ids = ids or len(aligned) < len(names)  # read_column places by ids
    r = store._core.scan_aligned(ROW, aligned, ids=ids, ordered=True)
    cols = r.pop("columns")
    index: ExperimentIndex | RunList = ExperimentIndex(r.pop("ids")) if ids else RunList(r)
    del r
    out: dict[str, Column] = {}
    for n in names:
        if n in cols:
            out[n] = aligned_column(cols.pop(n), infos[n]["dtype"])
        else:
            assert isinstance(index, ExperimentIndex)
            out[n] = read_column(store, n, index, infos[n])
    return index, out


def read_aligned(
    store: Store, runs: list[Any], names: list[str], infos: dict[str, dict[str, Any]]
) -> dict[str, Column]:
    """Series ``names`` (ones :func:`alignable` says) as Columns of the runs ``runs``, row i
    being runs[i]: read by the core from the blocks that may hold those runs alone
    (``read_aligned``)."""
    if not names:
        return {}
    read = store._core.read_aligned(runs, names)["columns"]
    return {n: aligned_column(c, infos[n]["dtype"]) for n, c in read.items()}


def aligned_column(c: dict[str, Any], dtype: str) -> Column:
    """A column of ``scan_aligned``: NaN where floats are absent, None where strings are."""
    present = c["present"]
    if "categories" in c:
        table = np.empty(len(c["categories"]) + 1, dtype=object)  # code -1: the None at the end
        table[:-1] = c["categories"]
        values = table[c["value"]]
    else:
        values = c["value"]
        if values.dtype.kind == "f" and not present.all():
            values[~present] = np.nan
    return Column(values, present, dtype)


def status_of(columns: dict[str, Column], n: int) -> dict[str, Column]:
    """The status Columns by field (state, error, ...) from Columns by series; empty ones for
    the fields no series holds."""
    out: dict[str, Column] = {}
    for col, series in STATUS_COLUMNS.items():
        if series in columns:
            out[col] = columns[series]
        elif col == "attempt":
            out[col] = empty_column(n, "int64", ())
        elif col in ("started", "finished", "seconds"):
            out[col] = empty_column(n, "float64", ())
        else:
            out[col] = empty_column(n, "string", ())
    return out


def status_series(infos: dict[str, dict[str, Any]]) -> list[str]:
    return [s for s in STATUS_COLUMNS.values() if s in infos]


def to_run(columns: dict[str, Column], n: int, retry_failed: bool) -> np.ndarray:
    """The rows a sweep runs, from Columns by series (the state's, if any): every experiment
    not done, and not failed unless ``retry_failed``. No state recorded reads as pending."""
    todo = np.ones(n, dtype=bool)
    st = columns.get(STATE)
    if st is not None:
        todo &= ~(st.present & (st.values == "done"))
        if not retry_failed:
            todo &= ~(st.present & (st.values == "failed"))
    return np.flatnonzero(todo)


def design_columns(store: Store, infos: dict[str, dict[str, Any]]) -> list[str]:
    """Parameter names in the order they were first defined."""
    names = [n[len(DESIGN) :] for n in infos if n.startswith(DESIGN) and n not in (ROW, PARAMS)]
    order: list[str] = []
    if PARAMS in infos:
        try:
            order = json.loads(store._core.get(0, PARAMS, 0))
        except (KeyError, ValueError):
            order = []
    present = set(names)
    ordered = [p for p in order if p in present]
    return ordered + sorted(present.difference(ordered))


def load_design(store: Store) -> tuple[ExperimentIndex, dict[str, Column]]:
    """The experiment index and one Column per parameter."""
    infos = reserved_series(store, counts=False)
    params = design_columns(store, infos)
    index, cols = load_aligned(store, [DESIGN + p for p in params], infos)
    return index, {p: cols[DESIGN + p] for p in params}


def status_frame_columns(status: dict[str, Column]) -> dict[str, Any]:
    """The status columns as they appear in Store.status(): "pending" where there is no state,
    None where there is no error (or an empty one), 0 attempts where never started."""
    state = status["state"].values.copy()
    state[~status["state"].present] = "pending"
    error = status["error"].values.copy()
    if len(error):
        error[np.equal(error, "")] = None
    attempt = status["attempt"].values.astype(np.int64, copy=True)
    attempt[~status["attempt"].present] = 0
    return {
        "state": state,
        "error": error,
        "host": status["host"].values,
        "started": status["started"].values.astype(np.float64, copy=False),
        "finished": status["finished"].values.astype(np.float64, copy=False),
        "seconds": status["seconds"].values.astype(np.float64, copy=False),
        "attempt": attempt,
    }


def status_names(params: Iterable[str]) -> dict[str, str]:
    """Status column -> its column name next to the parameters: "state", ... or, where a
    parameter has that name, "status.state" ("status.state~2" where that is a parameter too)."""
    taken = set(params) | {ID_COLUMN}
    return {c: unique_name(c if c not in taken else f"status.{c}", taken) for c in STATUS_COLUMNS}


def ids_frame_column(index: ExperimentIndex) -> np.ndarray:
    return index.ids


def design_frame(store: Store) -> pandas.DataFrame:
    import pandas as pd

    index, cols = load_design(store)
    data: dict[str, Any] = {ID_COLUMN: index.ids}
    for p, c in cols.items():
        data[p] = c.to_pandas()
    apply_categories(store, data)
    return pd.DataFrame(data)


def apply_categories(store: Store, data: dict[str, Any]) -> None:
    """Makes the parameter columns that ``store.attrs["categories"]`` names pandas Categoricals
    with those categories in that order (a value outside them reads as missing, as pandas
    does)."""
    import pandas as pd

    cats = _attrs.read(store.path)[1].get(CATEGORIES_ATTR)
    if cats is None:
        return
    if not isinstance(cats, dict) or not all(isinstance(v, list) for v in cats.values()):
        raise _attrs.AttrsError(
            f"store attribute {CATEGORIES_ATTR!r} must map parameter names to lists of "
            f"categories, not {cats!r}"
        )
    for name, categories in cats.items():
        if name in data and name != ID_COLUMN:
            data[name] = pd.Categorical(np.asarray(data[name], dtype=object), categories)


def status_frame(store: Store) -> pandas.DataFrame:
    import pandas as pd

    infos = reserved_series(store, counts=False)
    index, cols = load_aligned(store, status_series(infos), infos)
    data: dict[str, Any] = {ID_COLUMN: index.ids}
    data.update(status_frame_columns(status_of(cols, len(index))))
    return pd.DataFrame(data)


def pending_ids(store: Store, retry_failed: bool) -> list[RunId]:
    infos = reserved_series(store, counts=False)
    index, cols = load_aligned(store, [STATE] if STATE in infos else [], infos)
    return index.take(to_run(cols, len(index), retry_failed))


# -- outcomes ------------------------------------------------------------------------------------


def outcome_names(store: Store) -> list[str]:
    return [n for n in store._core.names() if not n.startswith("~")]


def load_results(
    store: Store, names: Iterable[str] | str | None
) -> tuple[pandas.DataFrame, dict[str, np.ndarray]]:
    import pandas as pd

    store.refresh()
    infos = reserved_series(store, counts=False)
    if ROW not in infos:
        raise ValueError(
            f"store {store.path} has no experiment design (no {ROW!r} records): load_results "
            "reads stores written by define_experiments and run_experiments; read other "
            "stores with Store.scan or Store.to_pandas"
        )
    params = design_columns(store, infos)
    if names is None:
        selected = outcome_names(store)
    else:
        selected = [names] if isinstance(names, str) else list(names)
        for n in selected:
            if n not in infos:
                raise KeyError(f"series {n!r} not found")
    # Parameters, status and scalar outcomes in one aligned read; array outcomes after, one
    # at a time.
    scalars = [n for n in selected if alignable(infos[n])]
    index, cols = load_aligned(
        store, [DESIGN + p for p in params] + status_series(infos) + scalars, infos
    )
    data: dict[str, Any] = {ID_COLUMN: index.ids}
    for p in params:
        data[p] = cols.pop(DESIGN + p).to_pandas()
    apply_categories(store, data)
    snames = status_names(params)
    for c, v in status_frame_columns(status_of(cols, len(index))).items():
        data[snames[c]] = v
    experiments = pd.DataFrame(data)
    outcomes = {
        n: (cols[n] if n in cols else read_column(store, n, index, infos[n])).masked()
        for n in selected
    }
    return experiments, outcomes


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


def define_experiments(store: Store, design: Any) -> pandas.DataFrame:
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
    store: Store,
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


# -- a loop of one's own -------------------------------------------------------------------------


def _record_names(
    params: Mapping[str, Any],
    outcomes: Mapping[str, Any] | None,
    state: str,
    keep_none: bool = False,
) -> dict[str, Any]:
    """An experiment record's parameters and outcomes under the names they are stored as,
    checked (a parameter that is None is left out unless ``keep_none``)."""
    if state not in STATES:
        raise ValueError(f"state {state!r}: one of {', '.join(STATES)}")
    out: dict[str, Any] = {}
    for name, v in params.items():
        check_param_name(name)
        if keep_none or v is not None:
            out[DESIGN + name] = v
    for k, v in (outcomes or {}).items():
        if not isinstance(k, str) or not k or k.startswith("~"):
            raise ValueError(f"outcome {k!r}: names are non-empty and do not start with '~'")
        out[k] = v
    return out


class ExperimentWriter:
    """Writes whole experiments (parameters, status and outcomes) from a loop of the caller's
    own: ``runstore.experiments.writer(store)``. Each :meth:`record` is one atomic set of
    records (a commit never holds part of it), in the layout run_experiments writes, so
    ``load_results``, ``status``, ``pending`` and the exports read it as any sweep.

    Rows: an experiment recorded with ``row=None`` goes after every row the store held when the
    writer was made, in the order recorded; ``row=k`` places it at ``k`` (ties in storage
    order). Recording an experiment again (a retry) replaces its records, row included.
    """

    def __init__(self, store: Store, **writer_options: Any) -> None:
        store.refresh()
        infos = reserved_series(store, counts=False)
        self._params = design_columns(store, infos)
        self._next_row = 0
        if ROW in infos:
            r = store._core.scan(ROW)["value"]
            self._next_row = int(r.max()) + 1 if len(r) else 0
        self.first_row = self._next_row
        self._w = store.writer(_allow_reserved=True, **writer_options)

    def record(
        self,
        experiment: RunId,
        params: Mapping[str, Any],
        outcomes: Mapping[str, Any] | None = None,
        *,
        state: str = "done",
        error: str = "",
        row: int | None = None,
        host: str | None = None,
        started: float | None = None,
        finished: float | None = None,
        seconds: float | None = None,
        attempt: int = 1,
    ) -> None:
        """Appends one experiment: ``params`` (its parameters: bool, int, float or str),
        ``outcomes`` (as ``Writer.log`` takes them) and its status (``state`` one of
        "pending", "running", "done", "failed"; ``error`` the failure's text). Visible and
        durable as the writer's commits make it."""
        check_run_id(experiment)
        values = _record_names(params, outcomes, state)
        if row is None:
            row = self._next_row
            self._next_row += 1
        values[ROW] = np.int64(row)
        values[STATE] = state
        values[ERROR] = error
        values[ATTEMPT] = np.int64(attempt)
        for k, v in ((HOST, host), (STARTED, started), (FINISHED, finished), (SECONDS, seconds)):
            if v is not None:
                values[k] = float(v) if k != HOST else str(v)
        self._note_params(params)
        self._w.log(experiment, values=values)

    def record_many(
        self,
        experiments: list[RunId],
        params: Mapping[str, Any],
        outcomes: Mapping[str, Any] | None = None,
        *,
        state: str = "done",
        finished: Any = None,
        rows: Any = None,
    ) -> None:
        """Appends ``len(experiments)`` experiments in one vectorised call, all with state
        ``state``: ``params`` and ``outcomes`` map names to columns of that length (outcome
        arrays stacked along a first axis), ``finished`` a column of unix times, ``rows``
        their rows (default: after the ones recorded so far). An automatic commit
        (commit_every_s, commit_every_bytes) never falls inside the call: its columns become
        visible together."""
        n = len(experiments)
        if set(map(type, experiments)) != {str}:  # str ids need no check: one pass in C
            for e in experiments:
                check_run_id(e)
        columns = _record_names(params, outcomes, state, keep_none=True)
        for name, col in columns.items():
            if len(col) != n:
                raise ValueError(f"column {name!r} has {len(col)} values for {n} experiments")
        if rows is None:
            rows = np.arange(self._next_row, self._next_row + n, dtype=np.int64)
            self._next_row += n
        columns[ROW] = np.asarray(rows, dtype=np.int64)
        columns[STATE] = [state] * n
        columns[ERROR] = [""] * n
        columns[ATTEMPT] = np.ones(n, dtype=np.int64)
        if finished is not None:
            columns[FINISHED] = np.asarray(finished, dtype=np.float64)
        self._note_params(params)
        self._w.log_many(list(experiments), columns=columns)

    def _note_params(self, params: Iterable[str]) -> None:
        """Appends the parameters new to the store to its column order (~design/~params)."""
        new = [p for p in params if p not in self._params]
        if new:
            self._params += new
            self._w.put(0, PARAMS, json.dumps(self._params, ensure_ascii=False))

    def commit(self, wait: bool = True) -> Any:
        return self._w.commit(wait=wait)

    def flush(self, wait: bool = True) -> None:
        self._w.flush(wait=wait)

    def close(self) -> None:
        self._w.close()

    @property
    def writer(self) -> Any:
        """The underlying Writer (its tickets, ``wait_for_commit``, ``durable_ticket``)."""
        return self._w

    def __enter__(self) -> ExperimentWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._w.__exit__(*exc)
