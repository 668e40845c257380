"""Store.to_pandas: scalar series joined on (run, step); and the sort order of records, which
to_arrow shares."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from ._checks import step_range

if TYPE_CHECKING:
    import pandas

    from ._checks import RunId, StepWindow
    from ._reader import StoreReader

# numpy dtype -> pandas nullable dtype, for int/uint/bool columns with gaps.
_NULLABLE = {
    "bool": "boolean",
    "int8": "Int8",
    "int16": "Int16",
    "int32": "Int32",
    "int64": "Int64",
    "uint8": "UInt8",
    "uint16": "UInt16",
    "uint32": "UInt32",
    "uint64": "UInt64",
}


def sort_order(run: np.ndarray, step: np.ndarray) -> np.ndarray:
    """Indices that sort records by (run, step); int runs before str runs, as runstore orders
    them."""
    if run.dtype != object:
        return np.lexsort((step, run))
    is_str = np.fromiter((isinstance(r, str) for r in run), dtype=bool, count=len(run))
    ints = np.fromiter((0 if s else r for r, s in zip(run, is_str)), dtype=np.int64, count=len(run))
    strs = np.array(["" if not s else r for r, s in zip(run, is_str)], dtype=str)
    return np.lexsort((step, strs, ints, is_str))


def unique_name(name: str, taken: set[str]) -> str:
    """``name``, or where it is in ``taken`` ``name~2``, ``name~3``, ... (the first that is
    not), added to ``taken``: a column named after a series never takes the place of
    another column (a DataFrame, a Dataset or a Parquet schema would lose one)."""
    out, k = name, 2
    while out in taken:
        out, k = f"{name}~{k}", k + 1
    taken.add(out)
    return out


#: The key columns of to_pandas and to_arrow.
KEY_COLUMNS = ("run", "step")


def series_columns(names: Iterable[str], keys: Iterable[str] = KEY_COLUMNS) -> dict[str, str]:
    """The column of each series beside the key columns ``keys``: its name, or for a series
    named like a key column (``run``, ``step``; ``time`` with time=True) ``series.<name>``
    (made unique with :func:`unique_name`)."""
    names = list(names)
    keys = set(keys)
    taken = keys | set(names)
    return {n: unique_name(f"series.{n}", taken) if n in keys else n for n in names}


def _as_object_runs(run: np.ndarray) -> np.ndarray:
    return run if run.dtype == object else run.astype(object)


class KeyUnion:
    """The union of the (run, step) keys of several series, sorted as :func:`sort_order`
    sorts, and where each series' records go in it.

    One sort of every key together, then one pass: O(N log N) for N keys in all, however many
    series there are (an outer join per series costs the size of the table so far each time,
    quadratic in the number of series whose keys differ). A series holds a key once (a scan
    resolves them), so each of its records has a row of its own.

    ``run``, ``step``: the union (run ids int64, or objects where some are str);
    ``positions[i]``: the row of each record of series i, in the order given."""

    def __init__(self, runs: list[np.ndarray], steps: list[np.ndarray]) -> None:
        mixed = any(r.dtype == object for r in runs)
        run = np.concatenate([_as_object_runs(r) if mixed else r for r in runs])
        step = np.concatenate([np.asarray(s, dtype=np.int64) for s in steps])
        order = sort_order(run, step)
        run_sorted, step_sorted = run[order], step[order]
        first = np.ones(len(order), dtype=bool)  # the first record of each key, in key order
        if len(order) > 1:
            first[1:] = (step_sorted[1:] != step_sorted[:-1]) | _differ(run_sorted)
        rows = np.empty(len(order), dtype=np.intp)
        rows[order] = np.cumsum(first) - 1
        self.run = run_sorted[first]
        if self.run.dtype == object and not any(isinstance(r, str) for r in self.run.tolist()):
            self.run = self.run.astype(np.int64)
        self.step = step_sorted[first]
        bounds = np.cumsum([0] + [len(r) for r in runs])
        self.positions = [rows[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


def _differ(run_sorted: np.ndarray) -> np.ndarray:
    """Whether each run id differs from the one before it (``3`` and ``"3"`` differ)."""
    if run_sorted.dtype != object:
        return run_sorted[1:] != run_sorted[:-1]
    a, b = run_sorted[1:].tolist(), run_sorted[:-1].tolist()
    return np.fromiter(
        (type(x) is not type(y) or x != y for x, y in zip(a, b)), dtype=bool, count=len(a)
    )


def _placed(values: np.ndarray, pos: np.ndarray, n: int) -> Any:
    """A column of ``n`` rows with ``values`` at rows ``pos`` and a gap elsewhere: NaN in float
    columns, None in object ones, pd.NA in int, uint and bool ones (pandas nullable dtypes);
    the numpy dtype where nothing is missing."""
    if len(pos) == n:
        out = np.empty(n, dtype=values.dtype)
        out[pos] = values
        return out
    if values.dtype.kind == "f":
        out = np.full(n, np.nan, dtype=values.dtype)
        out[pos] = values
        return out
    if values.dtype == object:
        out = np.full(n, None, dtype=object)
        out[pos] = values
        return out
    import pandas as pd

    data = np.zeros(n, dtype=values.dtype)
    data[pos] = values
    mask = np.ones(n, dtype=bool)
    mask[pos] = False
    arr_type = pd.api.types.pandas_dtype(_NULLABLE[values.dtype.name]).construct_array_type()
    return arr_type(data, mask)


#: The reserved series of the writers' record_time (src/store/schema.h kTimeSeries).
TIME_SERIES = "~time"


def times_at(
    store: StoreReader,
    run: np.ndarray,
    step: np.ndarray,
    runs: Iterable[RunId] | None = None,
    steps: StepWindow | None = None,
) -> np.ndarray:
    """The recorded time of each key (run[i], step[i]): float64 Unix seconds, NaN where none."""
    import pandas as pd

    out = np.full(len(run), np.nan)
    if len(run) == 0 or TIME_SERIES not in store._core.names(True):
        return out
    t = store._core.scan(TIME_SERIES, True, run_list(runs), step_range(steps))
    times = pd.DataFrame({"run": _as_object_runs(t["run"]), "step": t["step"], "time": t["value"]})
    keys = pd.DataFrame({"run": _as_object_runs(np.asarray(run)), "step": np.asarray(step)})
    # Several writers (or a log_many's string column) may have timed one key: the last one.
    times = times.drop_duplicates(["run", "step"], keep="last")
    joined = keys.merge(times, on=["run", "step"], how="left", sort=False)
    out[:] = joined["time"].to_numpy(dtype=np.float64, na_value=np.nan)
    return out


def run_list(runs: Iterable[RunId] | None) -> Iterable[RunId] | None:
    """`runs` as a list, so that a generator serves every series' scan; a str is passed on
    whole, for Store.scan to refuse, rather than split into characters."""
    if runs is None or isinstance(runs, (str, bytes)):
        return runs
    return list(runs)


def to_pandas(
    store: StoreReader,
    names: Iterable[str] | str | None,
    runs: Iterable[RunId] | None = None,
    steps: StepWindow | None = None,
    keys: tuple[str, ...] = KEY_COLUMNS,
) -> pandas.DataFrame:
    """Store.to_pandas without its time column; ``keys``: the names of the columns beside
    the series' (``series_columns``), "time" among them when the caller adds it."""
    import pandas as pd

    runs = run_list(runs)

    infos = store.series()
    if names is None:
        # In the order they were first logged, as TensorBoard and MLflow list them.
        selected = sorted(
            (n for n, i in infos.items() if i.is_scalar), key=lambda n: infos[n].first_logged
        )
    else:
        selected = [names] if isinstance(names, str) else list(names)
        for n in selected:
            if n not in infos:
                raise KeyError(f"series {n!r} not found")
            if not infos[n].is_scalar:
                shape = "variable shape" if infos[n].shape is None else f"shape {infos[n].shape}"
                raise ValueError(
                    f"series {n!r} is not scalar ({infos[n].dtype}, {shape}); "
                    "to_pandas takes series of one value per record: use Store.scan for it"
                )
    if not selected:
        return pd.DataFrame({"run": np.empty(0, np.int64), "step": np.empty(0, np.int64)})
    column = series_columns(selected, keys)
    scans = {n: store.scan(n, runs=runs, steps=steps) for n in selected}

    first = scans[selected[0]]
    run, step = first["run"], first["step"]
    # Fast path: every series has the same keys (one log call wrote them all), most often even
    # in the same order; then the columns line up without a join.
    same = all(
        len(s["run"]) == len(run)
        and np.array_equal(s["step"], step)
        and np.array_equal(s["run"], run)
        for s in scans.values()
    )
    if same:
        order = sort_order(run, step)
        data = {"run": run[order], "step": step[order]}
        for n in selected:
            data[column[n]] = scans[n]["value"][order]
        return pd.DataFrame(data)
    sorted_scans = {}
    for n, s in scans.items():
        o = sort_order(s["run"], s["step"])
        sorted_scans[n] = {k: v[o] for k, v in s.items()}
    first = sorted_scans[selected[0]]
    if all(
        len(s["run"]) == len(first["run"])
        and np.array_equal(s["step"], first["step"])
        and np.array_equal(s["run"], first["run"])
        for s in sorted_scans.values()
    ):
        data = {"run": first["run"], "step": first["step"]}
        for n in selected:
            data[column[n]] = sorted_scans[n]["value"]
        return pd.DataFrame(data)

    # General case: the union of every series' keys, each series placed by position.
    union = KeyUnion([scans[n]["run"] for n in selected], [scans[n]["step"] for n in selected])
    data = {"run": union.run, "step": union.step}
    for n, pos in zip(selected, union.positions):
        data[column[n]] = _placed(scans[n]["value"], pos, len(union.run))
    return pd.DataFrame(data)
