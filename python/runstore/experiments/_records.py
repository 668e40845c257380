"""Experiments as records: the names they are stored under, columns with gaps, the index of
experiment ids, and reading a store's design, status and outcomes back. Defining experiments is
:mod:`runstore.experiments._design`; writing them from a loop of one's own,
:mod:`runstore.experiments._writer`.

Layout (docs/experiments.md): every experiment is a run id. Its parameters are records
``(id, "~design/<param>", 0)``, its definition order ``(id, "~design/~row", 0)`` (int64), its
status ``(id, "~status/<field>", 0)``; its outcomes are ordinary series ``(id, name, 0)``. The
order of the parameter columns is one record ``(0, "~design/~params", 0)`` holding a JSON list.
When a key is written again the later commit wins, so a retried experiment's "done" replaces its
"failed", and defining the same rows twice changes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import _attrs
from .._checks import RunId
from .._frame import _NULLABLE, unique_name  # _NULLABLE: numpy dtype -> pandas nullable

if TYPE_CHECKING:
    import pandas

    from .._reader import StoreReader


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


def reserved_series(store: StoreReader, counts: bool = True) -> dict[str, dict[str, Any]]:
    """Every series including reserved ones, by name (the _core series() dicts). With
    ``counts=False`` without their counts, and so without resolving any series' keys (which
    reads the blocks of every series whose keys may repeat): their types, for readers of some
    of them."""
    return {d["name"]: d for d in store._core.series(include_reserved=True, counts=counts)}


def load_index(
    store: StoreReader, infos: dict[str, dict[str, Any]] | None = None
) -> ExperimentIndex:
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
    store: StoreReader,
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
    store: StoreReader, names: Iterable[str], infos: dict[str, dict[str, Any]], ids: bool = True
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
    store: StoreReader, runs: list[Any], names: list[str], infos: dict[str, dict[str, Any]]
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


def design_columns(store: StoreReader, infos: dict[str, dict[str, Any]]) -> list[str]:
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


def load_design(store: StoreReader) -> tuple[ExperimentIndex, dict[str, Column]]:
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


def design_frame(store: StoreReader) -> pandas.DataFrame:
    import pandas as pd

    index, cols = load_design(store)
    data: dict[str, Any] = {ID_COLUMN: index.ids}
    for p, c in cols.items():
        data[p] = c.to_pandas()
    apply_categories(store, data)
    return pd.DataFrame(data)


def apply_categories(store: StoreReader, data: dict[str, Any]) -> None:
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


def status_frame(store: StoreReader) -> pandas.DataFrame:
    import pandas as pd

    infos = reserved_series(store, counts=False)
    index, cols = load_aligned(store, status_series(infos), infos)
    data: dict[str, Any] = {ID_COLUMN: index.ids}
    data.update(status_frame_columns(status_of(cols, len(index))))
    return pd.DataFrame(data)


def pending_ids(store: StoreReader, retry_failed: bool) -> list[RunId]:
    infos = reserved_series(store, counts=False)
    index, cols = load_aligned(store, [STATE] if STATE in infos else [], infos)
    return index.take(to_run(cols, len(index), retry_failed))


# -- outcomes ------------------------------------------------------------------------------------


def outcome_names(store: StoreReader) -> list[str]:
    return [n for n in store._core.names() if not n.startswith("~")]


def load_results(
    store: StoreReader, names: Iterable[str] | str | None
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
