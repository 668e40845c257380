"""Store.to_pandas: one row per (run, step), one column per scalar series."""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import runstore


def test_sweep_table(store):
    with store.writer() as w:
        for i in (3, 1, 2):
            w.log(i, lr=0.1 * i, layers=i, ok=i % 2 == 0, note=f"run {i}", trace=np.zeros(5))
    store.refresh()
    df = store.to_pandas()
    # In the order they were first logged (trace is not scalar).
    assert list(df.columns) == ["run", "step", "lr", "layers", "ok", "note"]
    assert df["run"].tolist() == [1, 2, 3] and df["step"].tolist() == [0, 0, 0]
    assert df["run"].dtype == np.int64 and df["layers"].dtype == np.int64
    assert df["ok"].dtype == bool and df["lr"].dtype == np.float64
    assert df["note"].tolist() == ["run 1", "run 2", "run 3"]
    np.testing.assert_allclose(df["lr"], [0.1, 0.2, 0.3])


def test_columns_keep_the_order_series_were_first_logged(store):
    """As TensorBoard and MLflow list a run's metrics: not by name."""
    with store.writer() as w:
        for step in range(3):
            w.log("r", step=step, reward=1.0, loss=2.0, entropy=0.5)
        w.commit()
        w.log("r", step=3, alpha=0.1, loss=1.5)
    with store.writer() as w2:
        w2.log("s", step=0, zz=1.0, aa=2.0)
    store.refresh()
    cols = ["run", "step", "reward", "loss", "entropy", "alpha", "zz", "aa"]
    assert list(store.to_pandas().columns) == cols
    assert sorted(store.series(), key=lambda n: store.series()[n].first_logged) == cols[2:]
    assert store.series_info("reward").first_logged == 0
    # Asked for by name: the order asked.
    assert list(store.to_pandas(["aa", "reward"]).columns) == ["run", "step", "aa", "reward"]


def test_names_selection_and_errors(store):
    with store.writer() as w:
        w.log(1, a=1.0, b=2.0, v=np.zeros(3))
    store.refresh()
    assert list(store.to_pandas(["b"]).columns) == ["run", "step", "b"]
    assert list(store.to_pandas("a").columns) == ["run", "step", "a"]
    with pytest.raises(ValueError, match="'v' is not scalar"):
        store.to_pandas(["v"])
    with pytest.raises(KeyError):
        store.to_pandas(["nope"])


def test_gaps_use_nullable_dtypes_and_nan(store):
    with store.writer() as w:
        for step in range(4):
            w.log(1, step=step, loss=float(step), epoch=step)
        w.log(1, step=10, loss=9.0)  # no epoch here
        w.log(2, step=0, flag=True, count=np.uint8(3))
    store.refresh()
    df = store.to_pandas()
    assert list(zip(df["run"], df["step"])) == [(1, 0), (1, 1), (1, 2), (1, 3), (1, 10), (2, 0)]
    assert (
        str(df["epoch"].dtype) == "Int64"
        and df["epoch"].isna().tolist() == [False] * 4 + [True] * 2
    )
    assert df["epoch"].iloc[3] == 3
    assert np.isnan(df["loss"].iloc[5]) and df["loss"].dtype == np.float64
    assert (
        str(df["flag"].dtype) == "boolean"
        and bool(df["flag"].iloc[5])
        and df["flag"].isna().sum() == 5
    )
    assert str(df["count"].dtype) == "UInt8" and df["count"].iloc[5] == 3


def test_mixed_run_ids(store):
    with store.writer() as w:
        w.log("b", x=1.0)
        w.log(5, x=2.0)
        w.log("a", x=3.0, y=1)
        w.log(-1, x=4.0)
    store.refresh()
    df = store.to_pandas()
    assert df["run"].tolist() == [-1, 5, "a", "b"]  # ints first, then strs
    assert df["x"].tolist() == [4.0, 2.0, 3.0, 1.0]
    assert df["y"].isna().tolist() == [True, True, False, True]


def test_empty_store(store):
    df = store.to_pandas()
    assert list(df.columns) == ["run", "step"] and len(df) == 0


def test_large_frame_is_fast(store):
    n = 100_000
    runs = np.arange(n)
    with store.writer() as w:
        for start in range(0, n, 10_000):
            r = runs[start : start + 10_000][::-1].copy()  # stored out of order
            w.log_many(r, **{f"p{j}": r * (j + 1.0) for j in range(5)})
    store.refresh()
    df = store.to_pandas()
    assert len(df) == n and df["run"].is_monotonic_increasing
    np.testing.assert_array_equal(df["p2"].to_numpy(), runs * 3.0)


def test_to_arrow(store):
    pa = pytest.importorskip("pyarrow")
    with store.writer() as w:
        w.log(1, x=1.0)
    store.refresh()
    t = store.to_arrow()
    assert isinstance(t, pa.Table) and t.column_names == ["run", "step", "x"]
    assert isinstance(store.to_pandas(), pd.DataFrame)


def test_some_runs(store):
    """to_pandas and to_arrow with runs: the full table's rows of those runs, gaps included."""
    with store.writer() as w:
        for run in [*range(6), "s1", "s2"]:
            for step in range(4):
                values = {"loss": 0.5 * step, "epoch": step}
                if run != 2 or step < 2:  # run 2 has gaps in "acc"
                    values["acc"] = 0.25 * step
                w.log(run, step=step, **values)
            w.commit()
    store.refresh()
    full = store.to_pandas()
    for runs in ([2], [0, "s2", 99], (r for r in [5, 1]), []):
        runs = list(runs)
        part = store.to_pandas(runs=iter(runs))
        want = full[full["run"].isin(runs)].reset_index(drop=True)
        pd.testing.assert_frame_equal(part, want, check_dtype=False)
        table = store.to_arrow(runs=runs)
        expected_runs = want["run"].tolist()
        if any(isinstance(r, str) for r in expected_runs):  # Arrow holds mixed run ids as str
            expected_runs = [str(r) for r in expected_runs]
        assert table.column("run").to_pylist() == expected_runs
        assert table.column("loss").to_pylist() == want["loss"].tolist()
    assert store.to_pandas(runs=[2])["acc"].isna().tolist() == [False, False, True, True]
    window = store.to_pandas(runs=[1, 2], steps=(1, 3))
    pd.testing.assert_frame_equal(
        window,
        full[full["run"].isin([1, 2]) & full["step"].between(1, 2)].reset_index(drop=True),
        check_dtype=False,
    )
    assert store.to_arrow(steps=range(3, 4)).column("step").to_pylist() == [3] * 8
    with pytest.raises(TypeError, match="got a single str"):
        store.to_pandas(runs="s1")


# -- series whose keys differ --------------------------------------------------------------------


def _calls_made(fn) -> int:
    """Python and C function calls made by ``fn()``: an operation count that does not depend
    on the machine's speed."""
    n = 0

    def profile(frame, event, arg):
        nonlocal n
        if event in ("call", "c_call"):
            n += 1

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return n


@pytest.mark.parametrize("method", ["to_pandas", "to_arrow"])
def test_series_with_different_keys_cost_a_constant_per_series(store, method, capsys):
    """Series that share no (run, step) key are placed by one sort of every key, not joined one
    after another (an outer join per series costs the whole table so far each time: 2,000
    series of one record each took 221 s). The count of function calls per series stays flat
    as the series grow from 64 to 256; joining them took about 100 times as many per series,
    and more per series the more there were."""
    pytest.importorskip("pyarrow")
    counts = {}
    logged = 0
    for n_series in (64, 256):
        with store.writer() as w:
            for i in range(logged, n_series):
                w.log(i, step=i, values={f"s{i}": float(i)})
        logged = n_series
        store.refresh()
        frame = getattr(store, method)
        frame()  # imports and caches out of the count
        counts[n_series] = _calls_made(frame)
    per_series = {k: v / k for k, v in counts.items()}
    with capsys.disabled():
        print(f"\n{method}: function calls per series {per_series}")
    assert per_series[256] < 200, per_series
    assert per_series[256] < 1.5 * per_series[64], per_series
    df = store.to_pandas()
    assert df.shape == (256, 258) and df["run"].tolist() == list(range(256))
    assert df["s7"].iloc[7] == 7.0 and df["s7"].isna().sum() == 255


_keys = st.lists(
    st.tuples(st.one_of(st.integers(-3, 3), st.sampled_from(["a", "b", "3"])), st.integers(0, 3)),
    unique=True,
    max_size=8,
)
_kinds = ["float64", "int64", "uint8", "bool", "string", "float32"]


def _value(kind: str, k: int):
    if kind == "string":
        return f"v{k}"
    if kind == "bool":
        return np.bool_(k % 2)
    return np.dtype(kind).type(k)


@settings(max_examples=60)
@given(series=st.lists(st.tuples(st.sampled_from(_kinds), _keys), min_size=1, max_size=5))
def test_to_pandas_places_every_record_as_a_join_would(tmp_path_factory, series):
    """The union of keys against a plain-Python reference: every (run, step) of any series once,
    sorted with int runs before str runs, each value in its row, gaps as NaN/None/pd.NA."""
    store = runstore.open(tmp_path_factory.mktemp("keys") / "store")
    expected: dict[tuple, dict[str, object]] = {}
    with store.writer() as w:
        for j, (kind, keys) in enumerate(series):
            name = f"s{j}"
            for k, (run, step) in enumerate(keys):
                w.log(run, step=step, values={name: _value(kind, k)})
                expected.setdefault((run, step), {})[name] = _value(kind, k)
    store.refresh()
    names = [f"s{j}" for j, (_, keys) in enumerate(series) if keys]
    if not names:
        return
    df = store.to_pandas(names)
    order = sorted(
        expected,
        key=lambda k: (isinstance(k[0], str), str(k[0]) if isinstance(k[0], str) else k[0], k[1]),
    )
    assert list(zip(df["run"].tolist(), df["step"].tolist())) == order
    for name in names:
        got = [None if pd.isna(v) else v for v in df[name].tolist()]
        want = [expected[key].get(name) for key in order]
        assert got == [
            None if v is None else (v.item() if isinstance(v, np.generic) else v) for v in want
        ]


def test_a_series_named_like_a_key_column_keeps_its_own_column(store):
    """A series named run, step (or time, with time=True) wrote its values over the run ids or
    steps; it is the column series.<name> now, made unique where that is a series too."""
    pytest.importorskip("pyarrow")
    with store.writer(record_time=True) as w:
        w.log(1, step=2, values={"run": 10.0, "step": 20.0, "time": 30.0, "series.run": 40.0})
        w.log(3, step=4, values={"run": 11.0})
    store.refresh()
    df = store.to_pandas(time=True)
    assert list(df.columns) == [
        "run",
        "step",
        "time",
        "series.run~2",
        "series.step",
        "series.time",
        "series.run",
    ]
    assert df["run"].tolist() == [1, 3] and df["step"].tolist() == [2, 4]
    assert df["series.run~2"].tolist() == [10.0, 11.0] and df["series.run"].iloc[0] == 40.0
    assert df["series.time"].iloc[0] == 30.0 and df["time"].iloc[0] > 1e9
    t = store.to_arrow()
    assert t.column_names[:2] == ["run", "step"]
    assert sorted(t.column_names[2:]) == ["series.run", "series.run~2", "series.step", "time"]
    assert t.column("run").to_pylist() == [1, 3] and t.column("time").to_pylist()[0] == 30.0
    assert t.column("series.run~2").to_pylist() == [10.0, 11.0]
