"""Store.to_pandas: scalar series joined on (run, step); and the sort order of records, which
to_arrow shares."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from ._checks import step_range

if TYPE_CHECKING:
    import pandas

    from ._checks import RunId, StepWindow
    from ._store import Store

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


def _as_object_runs(run: np.ndarray) -> np.ndarray:
    return run if run.dtype == object else run.astype(object)


#: The reserved series of the writers' record_time (src/store/schema.h kTimeSeries).
TIME_SERIES = "~time"


def times_at(
    store: Store,
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
    store: Store,
    names: Iterable[str] | str | None,
    runs: Iterable[RunId] | None = None,
    steps: StepWindow | None = None,
) -> pandas.DataFrame:
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
            data[n] = scans[n]["value"][order]
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
            data[n] = sorted_scans[n]["value"]
        return pd.DataFrame(data)

    # General case: an outer join on (run, step).
    mixed = any(s["run"].dtype == object for s in scans.values())
    df = None
    for n in selected:
        s = scans[n]
        values = s["value"]
        if values.dtype.name in _NULLABLE:
            values = pd.array(values, dtype=_NULLABLE[values.dtype.name])  # type: ignore[call-overload]
        frame = pd.DataFrame(
            {"run": _as_object_runs(s["run"]) if mixed else s["run"], "step": s["step"], n: values}
        )
        df = frame if df is None else df.merge(frame, on=["run", "step"], how="outer", sort=False)
    assert df is not None
    run = df["run"].to_numpy()
    if run.dtype == object and not any(isinstance(r, str) for r in run):
        run = run.astype(np.int64)
    order = sort_order(run, df["step"].to_numpy())
    df = df.iloc[order].reset_index(drop=True)
    df["run"] = run[order]
    for n in selected:
        col = df[n]
        # Back to the numpy dtype where the join left no gap.
        if str(col.dtype) in _NULLABLE.values() and not col.isna().any():
            df[n] = col.to_numpy(dtype=infos[n].dtype if infos[n].dtype != "bool" else bool)
    return df
