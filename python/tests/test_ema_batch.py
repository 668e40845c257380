"""runstore.ema's two paths store the same: the batch's columns built in C++
(_core.EmaBatch) and the Python path it leaves the batches it does not take to
(ema-workbench 3.x, Python 3.12+).

Each case hands the same experiments, outcomes and finishing times to a callback as EMA would,
once as it runs and once with every batch going the Python path, and compares every record of
the two stores (reserved series included), the series' dtypes, shapes and order, and the
store's attributes."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

pytest.importorskip("ema_workbench")

from ema_workbench import (
    ArrayOutcome,
    BooleanParameter,
    CategoricalParameter,
    IntegerParameter,
    RealParameter,
    ScalarOutcome,
)
from ema_workbench.em_framework.points import Experiment, Sample

import runstore
import runstore.ema
from runstore import _core

UNCERTAINTIES = [
    RealParameter("x", 0.0, 1.0),
    IntegerParameter("n", 1, 5),
    CategoricalParameter("kind", ["a", "b", "c"]),
]
LEVERS = [BooleanParameter("flag"), RealParameter("rate", 0.0, 1.0)]
OUTCOMES = [ScalarOutcome("y"), ArrayOutcome("curve"), ScalarOutcome("count")]


def experiment(i, scenario, policy=None, model="toy", scenario_name=None, policy_name=None):
    s = Sample(name=i if scenario_name is None else scenario_name, **scenario)
    p = Sample(name="None" if policy_name is None else policy_name, **(policy or {}))
    return Experiment(str(i), model, p, s, i)


def plain_outcomes(i):
    return {"y": float(i) * 0.5, "curve": np.linspace(0.0, i, 10), "count": i * 2}


def plain_experiments(n, start=0):
    rng = np.random.default_rng(start)
    out = []
    for i in range(start, start + n):
        scenario = {
            "x": np.float64(rng.random()),
            "n": np.int64(rng.integers(1, 6)),
            "kind": ["a", "b", "c"][i % 3],
        }
        out.append((experiment(i, scenario), plain_outcomes(i)))
    return out


def run(path, pairs, monkeypatch, python_only=False, batch=1000, levers=()):
    """Hands ``pairs`` to a callback on ``path`` with finishing times 1000.0, 1001.0, ...;
    returns how many experiments went in batches whose columns C++ built."""
    clock = itertools.count(1000.0)
    taken = []

    class Counting(_core.EmaBatch):
        def keep(self, experiment, outcomes, finished=None):
            return super().keep(experiment, outcomes, next(clock))  # the times given

        def columns(self):
            got = None if python_only else super().columns()
            if got is not None:
                taken.append(len(self))
            return got

    with monkeypatch.context() as m:
        m.setattr(_core, "EmaBatch", Counting)
        cls = runstore.ema.callback(path, batch=batch, flush_every_s=1e9, commit_every_s=1e9)
        cb = cls(list(UNCERTAINTIES), list(levers), list(OUTCOMES), len(pairs), log_progress=True)
        shared = {}  # as EMA's model, which fills one dict again for every experiment
        for e, o in pairs:
            shared.clear()
            shared.update(o)
            cb(e, shared)
        cb.close()
    return sum(taken)


def contents(path):
    """Every record of the store by series, (run, step) order, with the series' dtypes,
    shapes and order, and the attributes."""
    st = runstore.open(path, mode="r")
    infos = st._core.series(include_reserved=True)
    out = {
        "series": [(d["name"], d["dtype"], tuple(d["shape"]), d["variable_shape"]) for d in infos],
        "attrs": {k: v for k, v in st.attrs.items() if k != "ema"},
        "ema": {k: v for k, v in st.attrs["ema"].items() if k != "versions"},
        "params": st._core.get(0, "~design/~params", 0),
    }
    for d in infos:
        sc = st._core.scan(d["name"])
        runs, steps, values = sc["run"].tolist(), sc["step"].tolist(), sc["value"]
        order = sorted(range(len(runs)), key=lambda i: (runs[i], steps[i]))
        out[d["name"]] = (
            [(runs[i], steps[i]) for i in order],
            [
                values[i] if isinstance(values[i], (str, bytes)) else np.asarray(values[i])
                for i in order
            ],
            values.dtype if isinstance(values, np.ndarray) else None,
        )
    return out


def assert_same_store(a, b):
    ca, cb = contents(a), contents(b)
    assert ca.keys() == cb.keys()
    for k in ca:
        if k in ("series", "attrs", "ema", "params"):
            assert ca[k] == cb[k], k
            continue
        (ka, va, da), (kb, vb, db) = ca[k], cb[k]
        assert ka == kb, k
        assert da == db, k
        assert len(va) == len(vb)
        for x, y in zip(va, vb):
            if isinstance(x, np.ndarray):
                assert isinstance(y, np.ndarray) and x.dtype == y.dtype, k
                np.testing.assert_array_equal(x, y, err_msg=k)
            else:
                assert x == y and type(x) is type(y), k


def both(tmp_path, pairs, monkeypatch, **kw):
    """Runs ``pairs`` through both paths, checks the stores are the same and returns how
    many experiments the C++ batch took."""
    taken = run(tmp_path / "fast", pairs, monkeypatch, **kw)
    run(tmp_path / "python", pairs, monkeypatch, python_only=True, **kw)
    assert_same_store(tmp_path / "fast", tmp_path / "python")
    return taken


def test_plain_experiments_are_taken_and_stored_as_the_python_path_stores_them(
    tmp_path, monkeypatch
):
    pairs = plain_experiments(45)
    assert both(tmp_path, pairs, monkeypatch, batch=20) == 45
    got, _ = runstore.ema.load_results(tmp_path / "fast")
    assert got["x"].tolist() == [float(e.scenario["x"]) for e, _ in pairs]
    ids = runstore.open(tmp_path / "fast").status()["experiment"].tolist()
    assert ids == [runstore.ema.experiment_id(e.scenario, e.policy, "toy") for e, _ in pairs]


def test_levers_python_scalars_and_numpy_scalars_of_other_widths(tmp_path, monkeypatch):
    pairs = []
    for i in range(30):
        scenario = {
            "x": [np.float32(i / 7), float(i) / 3, np.float64(-i)][i % 3],
            "n": [np.int32(i), np.uint8(i), np.int16(-i), np.int8(i), int(i) << 40][i % 5],
            "kind": ["a", "b", 'quote"d \\ ü\n'][i % 3],
        }
        policy = {"flag": [True, np.bool_(False)][i % 2], "rate": i * 0.25}
        out = plain_outcomes(i)
        out["count"] = [np.int64(i), i][i % 2]
        out["y"] = [np.float64(i), 1.5][i % 2]
        pairs.append((experiment(i, scenario, policy, policy_name=f"p{i % 4}"), out))
    assert both(tmp_path, pairs, monkeypatch, batch=11, levers=LEVERS) == 30


def test_a_column_of_mixed_kinds_goes_the_python_path_which_promotes_as_numpy_does(
    tmp_path, monkeypatch
):
    pairs = []
    for i in range(9):
        out = plain_outcomes(i)
        out["count"] = [np.int64(i), i, True][i % 3]
        pairs.append((experiment(i, {"x": 0.5 + i, "n": i, "kind": "a"}), out))
    pairs += [
        (experiment(9 + i, {"x": x, "n": 1, "kind": "a"}), plain_outcomes(9))
        for i, x in enumerate([1, 2.5, True])
    ]
    # A kind changes in each batch (the third experiment of each): both go the Python path.
    assert both(tmp_path, pairs, monkeypatch, batch=6) == 0
    st = runstore.open(tmp_path / "fast")
    assert st.series_info("~design/x").dtype == "float64"
    assert st.series_info("count").dtype == "int64"


def test_special_floats_and_unicode_names(tmp_path, monkeypatch):
    values = [float("nan"), float("inf"), -float("inf"), -0.0, 1e300, 5e-324, 0.1]
    pairs = [
        (
            experiment(i, {"x": v, "n": i, "kind": "a", "größe": "∞"}, scenario_name=f"s{i}"),
            plain_outcomes(i),
        )
        for i, v in enumerate(values)
    ]
    assert both(tmp_path, pairs, monkeypatch) == len(values)


def test_array_parameters_none_and_other_types_go_the_python_path(tmp_path, monkeypatch):
    pairs = plain_experiments(6)
    # An array parameter to flatten (x_0, x_1), a None, a uint64 and a str subclass.
    pairs.append((experiment(6, {"x": np.array([0.5, 0.25]), "n": 1, "kind": "a"}), {}))
    pairs[-1] = (pairs[-1][0], plain_outcomes(6))
    pairs += plain_experiments(3, start=7)
    pairs.append((experiment(10, {"x": 0.5, "n": np.uint64(3), "kind": "a"}), plain_outcomes(10)))
    pairs += plain_experiments(3, start=11)
    # Batches of 5: the second and third hold the two it does not take.
    assert both(tmp_path, pairs, monkeypatch, batch=5) == 5


def test_a_missing_outcome_sends_its_batch_the_python_path(tmp_path, monkeypatch):
    pairs = plain_experiments(12)
    pairs[3][1]["y"] = None  # as EMA gives an outcome the model did not return
    del pairs[6][1]["count"]
    # Batches of 4: the first two go the Python path, the last is taken.
    assert both(tmp_path, pairs, monkeypatch, batch=4) == 4


def test_an_outcome_that_changes_dtype_or_shape_sends_its_batch_the_python_path(
    tmp_path, monkeypatch
):
    pairs = plain_experiments(8)
    pairs[2][1]["curve"] = pairs[2][1]["curve"].astype(np.float32)  # numpy makes float64
    pairs[5][1]["y"] = np.array(pairs[5][1]["y"])  # a 0-d array among floats
    assert both(tmp_path, pairs, monkeypatch, batch=4) == 0


def test_changing_keys_and_a_key_in_both_scenario_and_policy(tmp_path, monkeypatch):
    pairs = plain_experiments(4)
    pairs.append((experiment(4, {"x": 0.5, "n": 2, "kind": "a", "extra": 1}), plain_outcomes(4)))
    pairs += plain_experiments(3, start=5)
    pairs.append((experiment(8, {"x": 0.5, "n": 2, "kind": "a"}, {"n": 3}), plain_outcomes(8)))
    pairs += plain_experiments(3, start=9)
    # Batches of 4: the second and third hold the two it does not take.
    assert both(tmp_path, pairs, monkeypatch, batch=4) == len(pairs) - 8


def test_outcome_arrays_of_any_layout_are_copied_in_c_order(tmp_path, monkeypatch):
    pairs = plain_experiments(8)
    for i, (_, o) in enumerate(pairs):
        grid = np.arange(20.0).reshape(4, 5) * i
        o["curve"] = grid.T if i % 2 else grid[:, ::-1].T.copy()  # strided and contiguous
        o["count"] = np.arange(3, dtype=np.int32) + i
    assert both(tmp_path, pairs, monkeypatch) == 8


def test_models_and_rows_of_several_models(tmp_path, monkeypatch):
    pairs = [
        (experiment(i, {"x": i / 10, "n": 1, "kind": "a"}, model=["m1", "m2"][i % 2]), o)
        for i, (_, o) in enumerate(plain_experiments(10))
    ]
    assert both(tmp_path, pairs, monkeypatch, batch=3) == 10
    assert runstore.open(tmp_path / "fast").attrs["ema"]["models"] == ["m1", "m2"]


def test_the_columns_take_no_batch_they_cannot_store_exactly():
    ok = (experiment(0, {"x": 0.5, "n": 1, "kind": "a"}), {"y": 1.0}, 0.0)
    refused = [
        (experiment(1, {"x": None, "n": 1, "kind": "a"}), {"y": 1.0}),
        (experiment(1, {"x": np.array([1.0]), "n": 1, "kind": "a"}), {"y": 1.0}),
        (experiment(1, {"x": 0.5, "n": 1, "kind": np.str_("a")}), {"y": 1.0}),
        (experiment(1, {"x": 0.5, "n": 2**63, "kind": "a"}), {"y": 1.0}),
        (experiment(1, {"x": 0.5, "n": np.float16(1), "kind": "a"}), {"y": 1.0}),
        (experiment(1, {"x": 0.5, "n": 1, "kind": "a"}), {"y": np.float32(1.0)}),
        (experiment(1, {"x": 0.5, "n": 1, "kind": "a"}), {"y": "text"}),
        (experiment(1, {"x": 0.5, "n": 1, "kind": "a"}), {"y": np.array(["a"])}),
        (experiment(1, {"x": 0.5, "n": 1, "kind": "a"}), {"y": None}),
        (experiment(1, {"x": 0.5, "n": 1}), {"y": 1.0}),
        (experiment(1, {"n": 1, "x": 0.5, "kind": "a"}), {"y": 1.0}),
        (experiment(1, {"x": "0.5", "n": 1, "kind": "a"}), {"y": 1.0}),
        (experiment(1, {"x": 0.5, "n": 1, "kind": "a", "model": "m"}), {"y": 1.0}),
        (experiment(1, {"x": 0.5, "n": 1, "kind": "a"}, model=np.str_("toy")), {"y": 1.0}),
    ]
    for e, o in refused:
        assert batch_of([ok, (e, o, 1.0)]).columns() is None, e
    ids, params, outcomes, rows, finished = batch_of([ok], first_row=5).columns()
    assert ids == [runstore.ema.experiment_id(ok[0].scenario, ok[0].policy, "toy")]
    assert list(params) == ["x", "n", "kind", "model", "scenario", "policy"]
    assert params["x"].dtype == np.float64 and params["n"].dtype == np.int64
    assert params["kind"] == ["a"] and params["policy"] == ["None"]
    assert outcomes["y"].tolist() == [1.0] and rows.tolist() == [5] and finished.tolist() == [0.0]
    # A key named as a column the callback adds, in a batch's first experiment.
    named = (experiment(1, {"x": 0.5, "scenario": 1}), {"y": 1.0}, 0.0)
    assert batch_of([named]).columns() is None


def batch_of(items, first_row=0):
    batch = _core.EmaBatch(["y"], first_row)
    for item in items:
        batch.keep(*item)
    return batch


def test_a_value_runstore_does_not_store_raises_and_keeps_the_experiments_before_it(
    tmp_path, monkeypatch
):
    pairs = plain_experiments(8)
    pairs[5] = (experiment(5, {"x": 0.5, "n": 1, "kind": object()}), plain_outcomes(5))
    with pytest.raises(TypeError, match="parameter value"):
        run(tmp_path / "s", pairs, monkeypatch)
    status = runstore.open(tmp_path / "s").status()
    assert len(status) == 5 and (status["state"] == "done").all()
