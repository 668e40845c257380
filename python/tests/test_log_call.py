"""Writer.log's ways of being called: the fast path (run[, step], name=value, ...) and every
other call, which the method it stands in for handles (and whose errors it keeps)."""

from __future__ import annotations

import numpy as np
import pytest

import runstore


def read(store, name):
    d = store.refresh().scan(name)
    return list(zip(d["run"].tolist(), d["step"].tolist(), d["value"].tolist(), strict=True))


def test_step_positional_by_keyword_and_by_default(tmp_path):
    store = runstore.open(tmp_path / "s")
    with store.writer() as w:
        w.log("r", 3, a=1.0)
        w.log("r", step=4, a=2.0)
        w.log("r", a=3.0)  # step 0
        w.log(7, a=4.0)
        w.log(run="q", step=1, a=5.0)  # run by keyword: the general path
    assert sorted(read(store, "a"), key=str) == sorted(
        [("r", 3, 1.0), ("r", 4, 2.0), ("r", 0, 3.0), (7, 0, 4.0), ("q", 1, 5.0)], key=str
    )


def test_names_made_at_run_time_are_told_apart_as_the_literals(tmp_path):
    store = runstore.open(tmp_path / "s")
    step_name, run_name = "".join(["st", "ep"]), "".join(["ru", "n"])  # not interned
    with store.writer() as w:
        w.log("r", **{step_name: 5, "a": 1.0})
        with pytest.raises(TypeError):
            w.log("r", **{run_name: 1.0})  # run given twice
        with pytest.raises(TypeError):
            w.log("r", 1, **{step_name: 2, "a": 1.0})  # step given twice
        w.log("r", 6, values={run_name: 2.0, step_name: 3.0, "values": 4.0})
    assert read(store, "a") == [("r", 5, 1.0)]
    assert read(store, "run") == [("r", 6, 2.0)]
    assert read(store, "step") == [("r", 6, 3.0)]
    assert read(store, "values") == [("r", 6, 4.0)]


def test_metrics_that_change_from_step_to_step(tmp_path, rng):
    store = runstore.open(tmp_path / "s")
    names = [f"m{i}" for i in range(12)]
    expected: dict[str, list[tuple[int, float]]] = {n: [] for n in names}
    with store.writer() as w:
        for step in range(400):
            k = int(rng.integers(1, len(names) + 1))  # up to 12: past the 8 kept on the stack
            chosen = list(rng.choice(names, size=k, replace=False))
            vals = {n: float(rng.random()) for n in chosen}
            w.log("run-x", step=step, **vals)
            for n, v in vals.items():
                expected[n].append((step, v))
    for n in names:
        got = [(s, v) for _, s, v in read(store, n)]
        assert got == expected[n], n


def test_a_bad_value_appends_nothing_also_after_the_same_names(tmp_path):
    store = runstore.open(tmp_path / "s")
    with store.writer() as w:
        w.log("r", 0, a=1.0, b=2.0)
        w.log("r", 1, a=1.5, b=2.5)  # the same names: found without a lookup
        with pytest.raises(TypeError):
            w.log("r", 2, a=3.0, b=object())
        with pytest.raises(ValueError, match="dtype|float64"):
            w.log("r", 3, a="text", b=4.0)
        with pytest.raises(ValueError, match="reserved|~"):
            w.log("r", 4, **{"~x": 1.0})
        w.log("r", 5, a=np.float64(6.0), b=7.0)
    assert [s for _, s, _ in read(store, "a")] == [0, 1, 5]
    assert [s for _, s, _ in read(store, "b")] == [0, 1, 5]


def test_errors_of_the_general_path_are_kept(tmp_path):
    store = runstore.open(tmp_path / "s")
    with store.writer() as w:
        with pytest.raises(TypeError):
            w.log()
        with pytest.raises(TypeError):
            w.log("r", 0, 1, a=1.0)  # three positionals
        with pytest.raises(TypeError, match="run"):
            w.log(1.5, a=1.0)
        with pytest.raises(ValueError, match="given twice"):
            w.log("r", a=1.0, values={"a": 2.0})
    assert "a" not in store.refresh().names()
    w2 = store.writer()
    w2.close()
    with pytest.raises(RuntimeError, match="closed"):
        w2.log("r", a=1.0)
