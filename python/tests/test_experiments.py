"""Experiments: the design table, run_experiments, status, load_results, crash and resume.

The crash tests run real processes: a sweep whose parent and workers are all SIGKILLed part way
(then rerun), a sweep stopped with Ctrl-C (SIGINT to its process group, as a terminal sends
it), and a per-step run killed after its checkpoint and resumed with Writer.resume.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import runstore
from runstore import _core
from runstore.experiments import _design
from runstore.experiments import _records as ex

HERE = Path(__file__).parent


# -- functions run by the workers (importable: spawned workers unpickle them from this module) ----


def square(x, seed=0):
    return {"y": x * x + seed, "curve": np.full(4, float(x)), "label": f"x={x}", "pid": os.getpid()}


def fails_on_odd_x(x, seed=0):
    if x % 2:
        raise RuntimeError(f"odd x={x} is not supported")
    return {"y": x * x + seed}


def fails_unless_flag(x, flag_dir):
    if not os.path.exists(os.path.join(flag_dir, "fixed")) and x == 3:
        raise ValueError("x=3 needs the fix")
    return {"y": float(x)}


def returns_unstorable(x):
    return {"y": float(x), "z": 1j} if x == 1 else {"y": float(x), "z": 0.5}


def crashes_on_two(x):
    if x == 2:
        os._exit(3)  # the worker process dies without a word
    return {"y": x}


def slow(x):
    time.sleep(0.05)
    return {"y": x}


def crashes_on_seven(x, calls):
    with open(os.path.join(calls, str(x)), "a") as f:  # one line per call
        f.write("call\n")
    if x == 7:
        os._exit(3)
    return {"y": x}


def quick(x):
    return {"y": x, "z": -x}


# -- the design ----------------------------------------------------------------------------------


def test_grid_is_the_cartesian_product_first_axis_slowest():
    g = runstore.grid(lr=[0.1, 0.01], seed=range(3))
    assert g == [
        {"lr": 0.1, "seed": 0},
        {"lr": 0.1, "seed": 1},
        {"lr": 0.1, "seed": 2},
        {"lr": 0.01, "seed": 0},
        {"lr": 0.01, "seed": 1},
        {"lr": 0.01, "seed": 2},
    ]
    assert runstore.grid({"opt/lr": [1, 2]}, seed=[0]) == [
        {"opt/lr": 1, "seed": 0},
        {"opt/lr": 2, "seed": 0},
    ]
    with pytest.raises(TypeError, match="list of values"):
        runstore.grid(lr=0.1)


def test_define_is_idempotent_and_adds_new_rows(store):
    d1 = store.define_experiments(runstore.grid(lr=[0.1, 0.01], seed=range(3)))
    assert list(d1.columns) == ["experiment", "lr", "seed"] and len(d1) == 6
    before = store.segments()
    d2 = store.define_experiments(runstore.grid(lr=[0.1, 0.01], seed=range(3)))
    pd.testing.assert_frame_equal(d1, d2)
    assert store.segments() == before  # nothing written
    store.define_experiments(runstore.grid(lr=[0.1, 0.01, 0.001], seed=range(3)))
    design = store.design()
    assert len(design) == 9
    # Old rows keep their place; new ones follow in the order given.
    assert design["experiment"].tolist()[:6] == d1["experiment"].tolist()
    assert design["lr"].tolist()[6:] == [0.001] * 3
    assert store.pending() == design["experiment"].tolist()


def test_define_conflicting_parameters_is_a_value_error_and_writes_nothing(store):
    store.define_experiments([{"experiment": 1, "lr": 0.1}, {"experiment": 2, "lr": 0.2}])
    before = store.segments()
    conflict = r"experiment 2 is already defined with lr=0.2; the design gives lr=0.3"
    with pytest.raises(ValueError, match=conflict):
        store.define_experiments([{"experiment": 3, "lr": 0.5}, {"experiment": 2, "lr": 0.3}])
    with pytest.raises(ValueError, match="already defined"):
        store.define_experiments([{"experiment": 1, "lr": 0.1, "extra": 5}])
    assert store.segments() == before
    assert store.design()["experiment"].tolist() == [1, 2]


def test_the_id_column_of_bytes_is_the_column_pandas_makes_of_their_strs():
    """Derived ids come as bytes (dtype S); the frame's column is what pandas makes of the
    strs, whatever pandas keeps str columns in: from the bytes where it is Arrow, decoded
    where ids are padded or pandas keeps objects."""
    import pandas as pd

    strs = ["e0123456789abcdef", "e00000000000000ff", "eüüüüüüüü"]  # 17 bytes each
    got = pd.DataFrame({"experiment": _design.id_column(np.array([s.encode() for s in strs]))})
    want = pd.DataFrame({"experiment": np.array(strs, dtype=object)})
    pd.testing.assert_frame_equal(got, want)
    padded = np.array([b"abc", b"e0123456789abcdef"])
    got = pd.DataFrame({"experiment": _design.id_column(padded)})
    want = pd.DataFrame({"experiment": np.array(["abc", "e0123456789abcdef"], dtype=object)})
    pd.testing.assert_frame_equal(got, want)
    assert _design.id_column(np.array([], dtype="S17")).tolist() == []
    with pytest.raises((UnicodeDecodeError, ValueError)):
        _design.id_column(np.array([b"\xff" * 17]))
    ints = np.arange(3)
    assert _design.id_column(ints) is ints


def test_duplicate_rows_in_one_design_are_refused(store):
    with pytest.raises(ValueError, match="rows 0 and 2 have the same parameters"):
        store.define_experiments([{"a": 1}, {"a": 2}, {"a": 1}])
    with pytest.raises(ValueError, match="experiment id 'x' is in rows 0 and 1"):
        store.define_experiments([{"experiment": "x", "a": 1}, {"experiment": "x", "a": 2}])
    assert store.design().empty


def test_derived_ids_are_the_documented_hash_and_do_not_depend_on_order(store):
    d = store.define_experiments([{"seed": 3, "lr": 0.1, "name": "adam"}])
    canonical = '{"lr":0.1,"name":"adam","seed":3}'
    expected = "e" + hashlib.sha256(canonical.encode()).hexdigest()[:16]
    assert _design.canonical_params({"seed": 3, "lr": 0.1, "name": "adam"}) == canonical
    assert (
        d["experiment"][0]
        == expected
        == runstore.experiment_id({"name": "adam", "lr": 0.1, "seed": 3})
    )


_plain_scalars = st.one_of(
    st.booleans(),
    st.none(),
    st.integers(),  # beyond 64 bits too
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1e16, 1e-5, 1e-4, 123456789.0, 5e-324, 1.7976931348623157e308]),
    st.text(),  # control characters, quotes, backslashes, any code point but lone surrogates
)


@settings(max_examples=2000, deadline=None)
@given(st.dictionaries(st.text(), _plain_scalars, max_size=8))
def test_the_compiled_id_is_the_encoders_on_random_plain_rows(row):
    """``_core.plain_experiment_id`` (C++) writes the canonical encoder's text and hashes it as
    ``experiment_id`` documents; a row it does not take falls back, never to another id."""
    text = _design._CANONICAL.encode(row)
    assert _core.plain_canonical_text(row) == text
    assert _core.plain_experiment_id(row) == "e" + hashlib.sha256(text.encode()).hexdigest()[:16]
    assert _design.experiment_id_of_plain(row) == runstore.experiment_id(row)


def test_the_compiled_float_text_is_repr_on_random_bit_patterns():
    """The ids' float text (C++: shortest digits, laid out as float.__repr__ lays them out) is
    repr's for doubles of every exponent, subnormals and the layout's edges included."""
    seed = 20240601
    print(f"seed {seed}")
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 2**64, size=200_000, dtype=np.uint64, endpoint=False)
    values = bits.view(np.float64)
    values = values[np.isfinite(values)].tolist()
    values += [v * s for v in (1e-5, 1e-4, 1e15, 1e16, 1e17, 2e16 + 8) for s in (1, -1)]
    values += [
        9.999999999999999e15,
        1e16 - 2,
        0.0001,
        0.00011,
        123.0,
        5e-324,
        2.2250738585072014e-308,
    ]
    values += rng.random(50_000).tolist() + (rng.random(50_000) * 1e6).round(3).tolist()
    for v in values:
        assert _core.plain_canonical_text({"x": v}) == f'{{"x":{v!r}}}', v


def test_rows_the_compiled_id_does_not_take_get_the_encoders_id():
    class F(float):
        pass

    rows = [
        {"x": F(0.5)},  # a float subclass
        {"x": np.float32(0.25)},  # numpy scalars: experiment_id converts them first
        {"x": [1, 2]},  # a list: the encoder writes it
        {1: "a"},  # a key that is not str: the encoder converts it
        {"s": "\ud800"},  # a lone surrogate: refused by encode() in both paths
    ]
    assert _core.plain_experiment_id(rows[0]) is None
    assert _core.plain_experiment_id(rows[2]) is None
    assert _core.plain_experiment_id(rows[3]) is None
    assert _core.plain_experiment_id(rows[4]) is None
    for r in rows[:4]:
        plain = {k: (v.item() if isinstance(v, np.generic) else v) for k, v in r.items()}
        expected = "e" + hashlib.sha256(_design._CANONICAL.encode(plain).encode()).hexdigest()[:16]
        assert runstore.experiment_id(r) == expected
    with pytest.raises(UnicodeEncodeError):
        runstore.experiment_id(rows[4])


def test_two_rows_with_one_hash_prefix_are_refused(store, monkeypatch):
    """A collision of two different rows, found by the columnar ids and by the rows' dicts."""
    fixed = np.array(["e0000000000000000"] * 2, dtype=object)
    monkeypatch.setattr(_design._core, "plain_experiment_ids", lambda *a: (fixed, (0, 1)))
    with pytest.raises(ValueError, match="two different parameter rows hash to the same"):
        store.define_experiments([{"a": 1}, {"a": 2}])
    monkeypatch.setattr(_design._core, "plain_experiment_ids", lambda *a: None)
    monkeypatch.setattr(_design, "experiment_id_of_plain", lambda params: "e0000000000000000")
    with pytest.raises(ValueError, match="two different parameter rows hash to the same"):
        store.define_experiments([{"a": 1}, {"a": 2}])
    assert store.design().empty


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.one_of(st.floats(), st.integers(-(2**63), 2**63 - 1), st.booleans(), st.none()),
            st.one_of(st.text(st.characters(blacklist_categories=("Cs",)), max_size=6), st.none()),
            st.one_of(st.floats(width=32), st.none()),
            st.one_of(st.integers(0, 2**64 - 1), st.none()),
        ),
        min_size=1,
        max_size=20,
    )
)
def test_the_ids_of_a_design_of_columns_are_the_ids_of_its_rows(rows):
    """plain_experiment_ids on columns (float, int, bool, str with gaps; float32; uint64) gives
    for every row what experiment_id gives for the dict of its present values."""
    cols = {
        "f": [r[0] for r in rows],
        "s": [r[1] for r in rows],
        "g": [r[2] for r in rows],
        "u": [r[3] for r in rows],
    }
    names, values, present = [], [], []
    for name, vs in cols.items():
        here = np.array([v is not None for v in vs])
        kinds = {type(v) for v in vs if v is not None}
        if name == "g":
            arr = np.array([v if v is not None else 0.0 for v in vs], dtype=np.float32)
        elif name == "u":
            arr = np.array([v if v is not None else 0 for v in vs], dtype=np.uint64)
        elif kinds <= {float}:
            arr = np.array([v if v is not None else 0.0 for v in vs], dtype=np.float64)
        else:
            arr = np.array([v if v is not None else 0 for v in vs], dtype=object)
        names.append(name)
        values.append(arr)
        present.append(here)
    got = _core.plain_experiment_ids(names, values, present, len(rows))
    want = [
        runstore.experiment_id({n: values[c][i] for c, n in enumerate(names) if present[c][i]})
        for i in range(len(rows))
    ]
    assert got is not None
    assert got[0].dtype == np.dtype("S17")
    assert [b.decode() for b in got[0].tolist()] == want


@pytest.mark.parametrize("ids", ["hashed", "int", "mixed"])
def test_aligned_columns_are_the_columns_read_one_by_one(store, ids):
    """load_aligned (the design's runs and every scalar series in one aligned read) gives the
    index and Columns that load_index and read_column give, for every dtype, with gaps, with
    records of runs that are not experiments, records at other steps, a design row written
    again, and series it does not align (bytes, arrays) read the other way."""
    rng = np.random.default_rng(11)
    n = 300
    if ids == "hashed":
        rows = [{"x": float(i), "k": f"v{i % 4}"} for i in range(n)]
    else:
        made = [1000 - 3 * i if ids == "int" or i % 2 else f"e{i}" for i in range(n)]
        rows = [{"experiment": e, "x": float(i), "k": f"v{i % 4}"} for i, e in enumerate(made)]
    design = store.define_experiments(rows)
    eids = design["experiment"].tolist()
    some = [e for e in eids if rng.random() < 0.7]
    strangers = ["not-one", 99999]
    with store.writer(_allow_reserved=True) as w:
        w.log_many(
            some + strangers,
            f=rng.random(len(some) + 2),
            i=rng.integers(-5, 5, len(some) + 2),
            b=rng.random(len(some) + 2) < 0.5,
            s=[f"s{j % 3}" for j in range(len(some) + 2)],
            by=[b"\x00" * (j % 3) for j in range(len(some) + 2)],
            arr=rng.random((len(some) + 2, 3)),
        )
        w.log_many(some[:10], steps=1, f=np.full(10, -1.0))  # another step: not step 0's
        w.log(eids[5], **{ex.DESIGN + "x": 5.0})  # a design record written again
        w.define("var", "float64", variable_shape=True)  # read the other way
        for j, e in enumerate(some[:5]):
            w.log(e, var=np.zeros(j + 1))
    store.refresh()
    infos = ex.reserved_series(store, counts=False)
    names = ["f", "i", "b", "s", "by", "arr", "var", ex.DESIGN + "x", ex.DESIGN + "k", "f"]
    assert ex.aligned_design(infos)
    index, cols = ex.load_aligned(store, names, infos)
    want_index = ex.load_index(store, infos)
    assert index.ids.tolist() == want_index.ids.tolist() == eids
    assert index.ids.dtype == want_index.ids.dtype
    for name in names:
        want = ex.read_column(store, name, want_index, infos[name])
        got = cols[name]
        assert got.dtype == want.dtype, name
        assert got.present.tolist() == want.present.tolist(), name
        assert got.values.dtype == want.values.dtype, name
        if want.values.dtype == object:
            plain = lambda vs: [v.tolist() if isinstance(v, np.ndarray) else v for v in vs]  # noqa: E731
            assert plain(got.values) == plain(want.values), name
        else:
            np.testing.assert_array_equal(got.values, want.values, err_msg=name)
    # Without ids: the experiments as the runs of the read, ids made for the rows asked; a
    # series read the other way needs the ids.
    runs, _ = ex.load_aligned(store, ["f", "s"], infos, ids=False)
    assert isinstance(runs, ex.RunList) and len(runs) == n
    assert runs.all() == eids and runs.take([5, 0, n - 1]) == [eids[5], eids[0], eids[-1]]
    assert runs.same(ex.load_aligned(store, ["i"], infos, ids=False)[0])
    assert isinstance(ex.load_aligned(store, ["var"], infos, ids=False)[0], ex.ExperimentIndex)
    assert ex.alignable(infos["s"]) and ex.alignable(infos["arr"])
    assert not ex.alignable(infos["by"]) and not ex.alignable(infos["var"])


def test_design_keeps_dtypes_and_absent_parameters(store):
    df = pd.DataFrame(
        {
            "experiment": [10, 11, 12],
            "i8": np.array([1, -2, 3], np.int8),
            "f32": np.array([0.5, 1.5, np.nan], np.float32),
            "u64": np.array([2**64 - 1, 0, 1], np.uint64),
            "flag": [True, False, True],
            "name": ["a,b", 'q"uote', "new\nline"],
            "opt": pd.array([1, None, 3], dtype="Int64"),
        }
    )
    store.define_experiments(df)
    d = store.design()
    assert d["experiment"].tolist() == [10, 11, 12]
    assert d["i8"].dtype == np.int8 and d["f32"].dtype == np.float32 and d["u64"].dtype == np.uint64
    assert d["flag"].dtype == bool and d["u64"][0] == 2**64 - 1 and np.isnan(d["f32"][2])
    assert d["name"].tolist() == ["a,b", 'q"uote', "new\nline"]
    assert str(d["opt"].dtype) == "Int64" and d["opt"].isna().tolist() == [False, True, False]
    # A list of dicts may leave parameters out (a ragged design); fn is called without them.
    store2 = runstore.open(store.path + "2")
    store2.define_experiments([{"model": "a", "depth": 3}, {"model": "b"}])
    d2 = store2.design()
    assert d2["model"].tolist() == ["a", "b"] and d2["depth"].isna().tolist() == [False, True]
    assert str(d2["depth"].dtype) == "Int64"


def test_values_are_cast_to_the_stored_dtype_when_nothing_changes(store):
    store.define_experiments(runstore.grid(x=[0.5, 1.5]))
    store.define_experiments(runstore.grid(x=[2]))  # an int for a float64 parameter
    assert store.design()["x"].tolist() == [0.5, 1.5, 2.0]
    assert store.design()["x"].dtype == np.float64
    store.define_experiments(runstore.grid(x=[2.0]))  # the same experiment: a no-op
    assert len(store.design()) == 3
    with pytest.raises(ValueError, match="stored as float64"):
        store.define_experiments(runstore.grid(x=["text"]))


def test_bad_designs_get_clear_errors(store):
    with pytest.raises(TypeError, match="a DataFrame or a list of dicts"):
        store.define_experiments({"a": [1, 2]})
    with pytest.raises(TypeError, match="mixes"):
        store.define_experiments([{"a": 1}, {"a": "x"}])
    with pytest.raises(ValueError, match="reserved"):
        store.define_experiments([{"~a": 1}])
    with pytest.raises(TypeError, match="experiment id must be an int or a str, got NoneType"):
        store.define_experiments([{"experiment": None, "a": 1}])
    with pytest.raises(ValueError, match="1 to 255 bytes"):
        store.define_experiments([{"experiment": "", "a": 1}])


# -- running -------------------------------------------------------------------------------------


def test_status_before_anything_ran(store):
    store.define_experiments(runstore.grid(x=range(3)))
    st = store.status()
    assert st["state"].tolist() == ["pending"] * 3 and st["attempt"].tolist() == [0] * 3
    assert st["error"].isna().all() and st["started"].isna().all()
    experiments, outcomes = runstore.load_results(store)
    assert outcomes == {} and experiments["state"].tolist() == ["pending"] * 3


def test_the_experiments_module_works_on_an_open_store(store, tmp_path):
    experiments = runstore.experiments
    defined = experiments.define(store, experiments.grid(x=range(4), seed=[7]))
    pd.testing.assert_frame_equal(experiments.design(store), store.design())
    assert experiments.pending(store) == defined["experiment"].tolist()
    s = experiments.run(store, square, workers=1, progress=False)
    assert (s.done, s.failed) == (4, 0) and isinstance(s, runstore.RunSummary)
    assert experiments.pending(store) == [] and (experiments.status(store)["state"] == "done").all()
    table, outcomes = experiments.load_results(store, "y")
    assert outcomes["y"].tolist() == [x * x + 7 for x in range(4)] and len(table) == 4
    with pytest.raises(RuntimeError, match="read-only"):
        experiments.run(runstore.open(store.path, mode="r"), square, workers=0, progress=False)


def test_sweep_runs_every_experiment_on_worker_processes(store):
    store.define_experiments(runstore.grid(x=range(20), seed=[0, 100]))
    s = runstore.run_experiments(store, square, workers=2, progress=False)
    assert (s.done, s.failed, s.skipped, s.not_run, s.workers) == (40, 0, 0, 0, 2)
    experiments, outcomes = runstore.load_results(store)
    assert (experiments["state"] == "done").all() and (experiments["attempt"] == 1).all()
    assert (
        len(set(experiments["host"])) == 1
        and (experiments["finished"] >= experiments["started"]).all()
    )
    np.testing.assert_array_equal(outcomes["y"], experiments["x"] ** 2 + experiments["seed"])
    assert outcomes["curve"].shape == (40, 4) and outcomes["curve"].dtype == np.float64
    np.testing.assert_array_equal(outcomes["curve"][:, 2], experiments["x"].astype(float))
    assert outcomes["label"].tolist() == [f"x={x}" for x in experiments["x"]]
    # Every experiment ran in one of (at most) two worker processes, none in this one.
    assert (
        os.getpid() not in set(outcomes["pid"].tolist()) and len(set(outcomes["pid"].tolist())) <= 2
    )
    # Done is done: a second call runs nothing.
    again = runstore.run_experiments(store, square, workers=2, progress=False)
    assert (again.done, again.skipped) == (0, 40)


def test_failures_keep_their_traceback_and_the_rest_completes(store):
    store.define_experiments(runstore.grid(x=range(10)))
    s = runstore.run_experiments(store, fails_on_odd_x, workers=2, progress=False)
    assert (s.done, s.failed) == (5, 5)
    st = store.status()
    failed = st[st["state"] == "failed"]
    assert sorted(store.design().set_index("experiment").loc[failed["experiment"], "x"]) == [
        1,
        3,
        5,
        7,
        9,
    ]
    for err, x in zip(
        failed["error"], store.design().set_index("experiment").loc[failed["experiment"], "x"]
    ):
        assert err.startswith("Traceback (most recent call last):")
        assert "in fails_on_odd_x" in err and f"RuntimeError: odd x={x} is not supported" in err
    assert st[st["state"] == "done"]["error"].isna().all()
    experiments, outcomes = runstore.load_results(store)
    y = outcomes["y"]
    assert isinstance(y, np.ma.MaskedArray) and y.dtype == np.int64  # ints with gaps: masked
    assert y.mask.tolist() == [bool(x % 2) for x in experiments["x"]]
    assert store.pending(retry_failed=False) == []
    assert len(store.pending()) == 5


def test_retry_failed(tmp_path, store):
    store.define_experiments([{"x": x, "flag_dir": str(tmp_path)} for x in range(5)])
    s = runstore.run_experiments(store, fails_unless_flag, workers=0, progress=False)
    assert (s.done, s.failed) == (4, 1)
    s = runstore.run_experiments(
        store, fails_unless_flag, workers=0, retry_failed=False, progress=False
    )
    assert (s.done, s.failed, s.skipped) == (0, 0, 5)
    (tmp_path / "fixed").touch()
    s = runstore.run_experiments(store, fails_unless_flag, workers=0, progress=False)
    assert (s.done, s.failed, s.skipped) == (1, 0, 4)
    st = store.status()
    assert (st["state"] == "done").all() and st["error"].isna().all()  # "done" replaced "failed"
    assert sorted(st["attempt"]) == [1, 1, 1, 1, 2]
    assert runstore.load_results(store)[1]["y"].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_an_outcome_the_store_refuses_fails_that_experiment_only(store):
    store.define_experiments(runstore.grid(x=range(3)))
    s = runstore.run_experiments(store, returns_unstorable, workers=0, progress=False)
    assert (s.done, s.failed) == (2, 1)
    err = store.status()["error"].dropna().tolist()
    assert len(err) == 1 and "the outcomes could not be stored" in err[0] and "complex" in err[0]
    _, outcomes = runstore.load_results(store)
    assert np.isnan(outcomes["y"][1]) and outcomes["y"][2] == 2.0  # nothing of it was appended


def test_a_worker_process_that_dies_is_replaced_and_its_experiment_failed(store):
    store.define_experiments(runstore.grid(x=range(8)))
    s = runstore.run_experiments(store, crashes_on_two, workers=2, progress=False)
    assert (s.done, s.failed) == (7, 1)
    st = store.status().set_index(store.design()["x"])
    assert st.loc[2, "state"] == "failed" and "exited with code 3" in st.loc[2, "error"]


def test_a_crash_fails_only_the_experiment_that_crashed_not_its_chunk(tmp_path, store):
    calls = tmp_path / "calls"
    calls.mkdir()
    store.define_experiments(runstore.grid(x=range(30), calls=[str(calls)]))
    # Chunks of 4 (a quarter of each worker's share): 7 dies with 4, 5 and 6 finished and not
    # committed. They are run again one by one; 7 then kills a worker of its own.
    s = runstore.run_experiments(
        store, crashes_on_seven, workers=2, commit_every=10, progress=False
    )
    assert (s.done, s.failed, s.not_run, s.failed_ids) == (29, 1, 0, [store.pending()[0]])
    st = store.status().set_index(store.design()["x"])
    assert (st["state"] == "done").sum() == 29 and st.loc[7, "state"] == "failed"
    assert "exited with code 3" in st.loc[7, "error"] and "batch of 1 " in st.loc[7, "error"]
    ran = {int(p.name): len(p.read_text().splitlines()) for p in calls.iterdir()}
    # 7 ran twice, and what its chunk had finished before it once more; on a machine so loaded
    # that 4, 5 and 6 took a second, the worker committed them before 7 (a commit a second at
    # most apart), and 7, alone, failed at once.
    assert 1 <= ran[7] <= 2 and sorted(ran) == list(range(30))
    assert sum(ran.values()) - 30 <= 4, ran
    _, outcomes = runstore.load_results(store)
    assert np.ma.count_masked(outcomes["y"]) == 1 and outcomes["y"].mask[7]


def test_chunk_size_follows_the_rate_of_the_workers_within_its_bounds(store):
    from runstore.experiments._runner import MAX_CHUNK, ChunkSize

    c = ChunkSize(None, cap=10_000)
    assert c() == 1
    for size in (8, 64, 512):  # 1,000 experiments a second: at most 8-fold per chunk
        c.observe(c(), c() / 1000)
        assert c() == size
    c.observe(c(), c() / 1000)
    assert c() == MAX_CHUNK
    c.observe(c(), 10.0)  # slower: 100 a second
    assert c() == 100
    c.observe(c(), 200.0)  # 2 s an experiment: one a chunk, a commit each
    assert c() == 1
    c.observe(0, 0.0)  # a chunk that ran nothing tells nothing
    assert c() == 1
    small = ChunkSize(None, cap=3)
    small.observe(1, 1e-6)
    assert small() == 3  # never more than a quarter of a worker's share
    fixed = ChunkSize(10, cap=4)
    fixed.observe(4, 1e-6)
    assert fixed() == 4
    store.define_experiments(runstore.grid(x=range(2)))
    with pytest.raises(ValueError, match="commit_every"):
        runstore.run_experiments(store, quick, commit_every=0)


def test_quick_experiments_share_commits_and_blocks(store):
    n = 2000
    store.define_experiments(runstore.grid(x=range(n)))
    before = sum(seg.blocks for seg in store.segments())
    s = runstore.run_experiments(store, quick, workers=2, progress=False)
    assert s.done == n
    blocks = sum(seg.blocks for seg in store.segments()) - before
    # With a commit each: about 9 blocks an experiment (one per status field and outcome,
    # the "running" fields in the same blocks). Chunks sized by rate share them.
    print(f"{blocks} blocks for {n} quick experiments on 2 workers ({blocks / n:.3f} each)")
    assert blocks < n
    experiments, outcomes = runstore.load_results(store)
    np.testing.assert_array_equal(outcomes["z"], -experiments["x"])


def test_commit_every_batches_experiments(store):
    store.define_experiments(runstore.grid(x=range(30)))
    s = runstore.run_experiments(store, square, workers=0, commit_every=10, progress=False)
    assert s.done == 30
    assert sum(seg.commits for seg in store.segments()) <= 1 + 3 + 1  # design, 3 batches, close


def test_fn_must_be_picklable(store):
    store.define_experiments(runstore.grid(x=range(2)))
    with pytest.raises(TypeError, match="picklable"):
        runstore.run_experiments(store, lambda x: {"y": x}, workers=1, progress=False)
    assert runstore.run_experiments(store, lambda x: {"y": x}, workers=0, progress=False).done == 2


def test_outcome_names_are_checked(store):
    store.define_experiments(runstore.grid(x=[1]))
    s = runstore.run_experiments(store, _reserved_outcome, workers=0, progress=False)
    assert s.failed == 1 and "reserved" in store.status()["error"][0]


def _reserved_outcome(x):
    return {"~state": "done"}


# -- crashes -------------------------------------------------------------------------------------

SWEEP_SCRIPT = textwrap.dedent(
    """
    import os, signal, sys, time
    import numpy as np
    import runstore

    # Ctrl-C as on a terminal, even when the tests were started with SIGINT ignored (a
    # background job of a non-interactive shell, nohup), which a child inherits.
    signal.signal(signal.SIGINT, signal.default_int_handler)

    CALLS = sys.argv[2]

    def work(x, seed):
        time.sleep(0.01)
        with open(os.path.join(CALLS, f"{x}-{seed}"), "a") as f:  # one line per call
            f.write("call\\n")
        return {"y": x * 1000 + seed, "v": np.full(3, x, dtype=np.int32)}

    if __name__ == "__main__":
        every = None if sys.argv[3] == "None" else int(sys.argv[3])
        s = runstore.run_experiments(
            runstore.open(sys.argv[1]), work, workers=2, progress=False, commit_every=every
        )
        print("summary", s.done, s.failed, s.skipped, flush=True)
    """
)


def _start_sweep(
    tmp_path: Path, store_path: Path, commit_every: int | None = 1
) -> subprocess.Popen:
    script = tmp_path / "sweep.py"
    script.write_text(SWEEP_SCRIPT)
    calls = tmp_path / "calls"
    calls.mkdir(exist_ok=True)
    # Its own session and process group: the parent and its workers, as a terminal job.
    return subprocess.Popen(
        [sys.executable, str(script), str(store_path), str(calls), str(commit_every)],
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_until_done(
    store: runstore.Store, at_least: int, proc: subprocess.Popen, timeout: float = 60
) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the sweep ended early: {proc.communicate()}"
        store.refresh()
        done = int((store.status()["state"] == "done").sum())
        if done >= at_least:
            return done
        time.sleep(0.02)
    raise AssertionError(f"fewer than {at_least} experiments done after {timeout} s")


def _check_exactly_once(store: runstore.Store, n: int) -> pd.DataFrame:
    experiments, outcomes = runstore.load_results(store)
    assert len(experiments) == n and (experiments["state"] == "done").all()
    np.testing.assert_array_equal(outcomes["y"], experiments["x"] * 1000 + experiments["seed"])
    np.testing.assert_array_equal(outcomes["v"][:, 0], experiments["x"])
    # One visible record per experiment and outcome: none lost, none twice.
    for name in ("y", "v", "~status/state"):
        runs = store.scan(name)["run"]
        assert len(runs) == n and len(set(runs.tolist())) == n
    return experiments


@pytest.mark.parametrize("commit_every", [1, None])
def test_sigkill_of_the_whole_sweep_then_rerun_runs_each_experiment_once(
    tmp_path, store, commit_every
):
    n = 200
    store.define_experiments(runstore.grid(x=range(20), seed=range(10)))
    proc = _start_sweep(tmp_path, Path(store.path), commit_every)
    _wait_until_done(store, 40, proc)
    os.killpg(proc.pid, signal.SIGKILL)  # the parent and both workers, at once
    proc.wait()
    time.sleep(0.2)
    store.refresh()
    before = store.status()
    done_before = before[before["state"] == "done"].set_index("experiment")
    assert 40 <= len(done_before) < n, len(done_before)

    proc = _start_sweep(tmp_path, Path(store.path), commit_every)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert f"summary {n - len(done_before)} 0 {len(done_before)}" in out

    experiments = _check_exactly_once(store, n)
    after = store.status().set_index("experiment")
    # Experiments committed before the kill were not run again.
    pd.testing.assert_series_equal(
        after.loc[done_before.index, "finished"], done_before["finished"]
    )
    assert (after.loc[done_before.index, "attempt"] == 1).all()
    calls = {p.name: len(p.read_text().splitlines()) for p in (tmp_path / "calls").iterdir()}
    names = experiments["x"].astype(str) + "-" + experiments["seed"].astype(str)
    key = dict(zip(experiments["experiment"], names))
    assert all(calls[key[e]] == 1 for e in done_before.index)
    # Only what was not committed when killed ran twice: one experiment per worker with a
    # commit each, at most one chunk per worker with chunks sized by rate (25 experiments at
    # most here: a quarter of each worker's share).
    redone = sum(c - 1 for c in calls.values())
    print(f"commit_every={commit_every}: {redone} experiments ran twice")
    assert redone <= (2 if commit_every == 1 else 2 * 25) and len(calls) == n


def test_ctrl_c_stops_the_sweep_cleanly_and_the_rerun_finishes_it(tmp_path, store):
    n = 200
    store.define_experiments(runstore.grid(x=range(20), seed=range(10)))
    proc = _start_sweep(tmp_path, Path(store.path))
    _wait_until_done(store, 30, proc)
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal sends
    out, err = proc.communicate(timeout=60)
    assert proc.returncode != 0 and "interrupted" in err and "Run again to continue" in err, err
    store.refresh()
    st = store.status()
    # Nothing is left "running": the interrupted experiments went back to pending.
    assert set(st["state"]) <= {"done", "pending"}, st["state"].value_counts()
    done = int((st["state"] == "done").sum())
    assert 30 <= done < n
    s = runstore.run_experiments(store, square_like_sweep, workers=2, progress=False)
    assert s.done == n - done and s.skipped == done
    _check_exactly_once(store, n)


def square_like_sweep(x, seed):
    return {"y": x * 1000 + seed, "v": np.full(3, x, dtype=np.int32)}


RESUME_SCRIPT = textwrap.dedent(
    """
    # A per-step run: a checkpoint every 1,000 steps, results committed every 100 steps.
    import json, os, signal, sys
    import runstore

    store_path, ckpt, kill_at = sys.argv[1], sys.argv[2], int(sys.argv[3])
    RUN, STEPS = "train", 10_000
    store = runstore.open(store_path)
    start, state, attempt = 0, 0.0, 1
    if os.path.exists(ckpt):
        with open(ckpt) as f:
            c = json.load(f)
        start, state, attempt = c["step"], c["state"], c["attempt"] + 1
    with store.writer() as w:
        if start:
            w.resume(RUN, start)  # hide what the dead attempt wrote at steps >= start
            store.refresh()
            steps = store.scan("loss")["step"]
            print("visible after resume", len(steps), int(steps.max()), flush=True)
        for step in range(start, STEPS):
            if step == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)  # preempted, without warning
            if step % 1000 == 0 and step > start:
                w.commit()  # every step before this one is durable ...
                with open(ckpt + ".tmp", "w") as f:  # ... before the checkpoint says so
                    json.dump({"step": step, "state": state, "attempt": attempt}, f)
                os.replace(ckpt + ".tmp", ckpt)
            state = state * 0.999 + step % 7
            w.log(RUN, step=step, loss=state, attempt=attempt)
            if step % 100 == 99:
                w.commit()
    """
)


def test_per_step_run_killed_after_its_checkpoint_resumes_with_one_record_per_step(
    tmp_path, store_path
):
    script = tmp_path / "train.py"
    script.write_text(RESUME_SCRIPT)
    ckpt = tmp_path / "ckpt.json"
    attempt = lambda kill_at: subprocess.run(  # noqa: E731
        [sys.executable, str(script), str(store_path), str(ckpt), kill_at],
        capture_output=True,
        text=True,
    )
    p = attempt("7300")
    assert p.returncode == -signal.SIGKILL, p.stderr
    assert json.loads(ckpt.read_text())["step"] == 7000
    store = runstore.open(store_path, "r")
    d = store.scan("loss")
    assert int(d["step"].max()) == 7299  # committed past the checkpoint: these must not stay
    p = attempt("-1")
    assert p.returncode == 0, p.stderr
    assert "visible after resume 7000 6999" in p.stdout
    store.refresh()
    state, expected = 0.0, []
    for step in range(10_000):
        state = state * 0.999 + step % 7
        expected.append(state)
    for name in ("loss", "attempt"):
        d = store.scan(name)
        order = np.argsort(d["step"])
        np.testing.assert_array_equal(d["step"][order], np.arange(10_000))  # exactly one per step
        if name == "loss":
            np.testing.assert_array_equal(d["value"][order], np.array(expected))
        else:
            np.testing.assert_array_equal(d["value"][order], (np.arange(10_000) >= 7000) + 1)


def _echo_params(**params):
    """Fails where told to; else returns its parameters as outcomes, as it got them."""
    if params.get("fail"):
        raise ValueError("told to")
    return {f"got_{k}": v for k, v in params.items() if k != "fail"}


@pytest.mark.parametrize("ids", ["hashed", "str", "int"])
def test_a_rerun_of_a_few_experiments_gets_exactly_their_parameters(tmp_path, ids, monkeypatch):
    """The parent reads the parameters of the experiments it runs alone when they are few (a
    rerun of failures: read_aligned on their runs, a window at a time, and no read of every
    experiment's parameters): every dtype, absent parameters left out, the ids of every kind;
    the same as the first run gave the others."""
    from runstore.experiments import _records as ex
    from runstore.experiments import _runner

    store = runstore.open(tmp_path / "s")
    n = 200
    rows = []
    for i in range(n):
        row = {"lr": i / 7, "name": ["a", "", "é"][i % 3], "k": i, "on": i % 2 == 0}
        if i % 5 == 0:
            del row["name"]
        row["fail"] = i % 17 == 3
        if ids == "str":
            row["experiment"] = f"x{i:04d}"
        elif ids == "int":
            row["experiment"] = 10 * i
        rows.append(row)
    store.define_experiments(rows)
    first = runstore.run_experiments(store, _echo_params, workers=0, progress=False)
    assert first.failed == 12
    # The failures, and two windows of their parameters.
    for r in rows:
        r["fail"] = False
    with store.writer(_allow_reserved=True) as w:  # "told to" no longer
        w.log_many(store.design()["experiment"].tolist(), **{"~design/fail": [False] * n})
    store.refresh()
    monkeypatch.setattr(_runner, "PARAMS_WINDOW", 5)
    read_whole = []
    load_aligned = ex.load_aligned
    monkeypatch.setattr(
        ex, "load_aligned", lambda st, names, *a, **k: read_whole.append(list(names))
        or load_aligned(st, names, *a, **k)
    )  # fmt: skip
    again = runstore.run_experiments(
        store, _echo_params, workers=0, progress=False, retry_failed=True
    )
    assert read_whole == [["~status/state", "~status/attempt"]]
    monkeypatch.undo()
    assert again.done == 12
    experiments, outcomes = runstore.load_results(store)
    assert (experiments["state"] == "done").all()
    for k in ("lr", "k", "on"):
        np.testing.assert_array_equal(np.asarray(outcomes[f"got_{k}"]), experiments[k].to_numpy())
    got = outcomes["got_name"]
    for i, r in enumerate(rows):
        assert (got[i] is np.ma.masked) == ("name" not in r), i
        if "name" in r:
            assert got[i] == r["name"], i
