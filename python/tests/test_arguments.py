"""Run ids and steps: ints (and strs for run ids) are taken, everything else is refused with an
error that says what was given, the same way in every method that takes them."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

# Python and numpy bools are ints to Python: taken as run 1 or step 1 they would file records
# under a key nobody meant.
BOOLS = [True, False, np.True_, np.False_]
NOT_RUN_IDS = [*BOOLS, 1.0, 1.5, np.float64(2.0), None, b"run", [1]]
NOT_STEPS = [*BOOLS, 1.0, 1.5, np.float32(2.0), None, "1", b"1"]


def type_name(value) -> str:
    return type(value).__name__


def run_id_error(value) -> str:
    return f"run id must be an int or a str, got (numpy\\.)?{type_name(value)}"


def step_error(value) -> str:
    return f"step must be an int, got (numpy\\.)?{type_name(value)}"


@pytest.fixture
def filled(store):
    with store.writer() as w:
        w.log(1, step=1, x=1.0)
        w.log("a", step=0, x=2.0)
    return store.refresh()


@pytest.mark.parametrize("run", NOT_RUN_IDS, ids=repr)
def test_writer_refuses_a_run_id_that_is_not_an_int_or_a_str(store, run):
    with store.writer() as w:
        with pytest.raises(TypeError, match=run_id_error(run)):
            w.log(run, x=1.0)
        with pytest.raises(TypeError, match=run_id_error(run)):
            w.put(run, "x", 1.0)
        with pytest.raises(TypeError, match=run_id_error(run)):
            w.resume(run, 0)
        with pytest.raises(TypeError, match="log_many: runs\\[1\\]: " + run_id_error(run)):
            w.log_many([0, run], x=np.zeros(2))
        objects = np.empty(2, dtype=object)
        objects[:] = [0, run]
        with pytest.raises(TypeError, match="log_many: runs\\[1\\]: " + run_id_error(run)):
            w.log_many(objects, x=np.zeros(2))
    assert store.refresh().runs() == []


@pytest.mark.parametrize("run", NOT_RUN_IDS, ids=repr)
def test_reads_refuse_a_run_id_that_is_not_an_int_or_a_str(filled, run):
    with pytest.raises(TypeError, match=run_id_error(run)):
        filled.get(run, "x", step=1)
    with pytest.raises(TypeError, match=run_id_error(run)):
        filled.array(run, "x", step=1)
    with pytest.raises(TypeError, match="scan: runs\\[0\\]: " + run_id_error(run)):
        filled.scan("x", runs=[run])
    with pytest.raises(TypeError, match=run_id_error(run)):
        filled.to_pandas(runs=[run])


def test_a_bool_array_of_run_ids_is_refused(store):
    with store.writer() as w:
        with pytest.raises(
            TypeError, match="log_many: run ids must be ints or strs, got an array of bool"
        ):
            w.log_many(np.array([True, False]), x=np.zeros(2))
    with pytest.raises(TypeError, match="got an array of bool"):
        store.scan("x", runs=np.array([True]))
    assert store.refresh().runs() == []


@pytest.mark.parametrize("step", NOT_STEPS, ids=repr)
def test_a_step_that_is_not_an_int_is_refused(filled, step):
    with filled.writer() as w:
        with pytest.raises(TypeError, match=step_error(step)):
            w.log(2, step=step, x=1.0)
        with pytest.raises(TypeError, match=step_error(step)):
            w.put(2, "x", 1.0, step=step)
        with pytest.raises(TypeError, match=step_error(step)):
            w.resume(2, step)
        if step is not None:  # steps=None: every record at step 0
            with pytest.raises(TypeError, match="log_many: " + step_error(step)):
                w.log_many([2, 3], steps=step, x=np.zeros(2))
        with pytest.raises(TypeError, match="log_many: steps\\[1\\]: " + step_error(step)):
            w.log_many([2, 3], steps=[0, step], x=np.zeros(2))
    with pytest.raises(TypeError, match=step_error(step)):
        filled.get(1, "x", step=step)
    with pytest.raises(TypeError, match=step_error(step)):
        filled.array(1, "x", step=step)
    if step is not None:
        with pytest.raises(TypeError, match=step_error(step)):
            filled.scan("x", steps=(step, 3))
        with pytest.raises(TypeError, match=step_error(step)):
            filled.to_pandas(steps=(0, step))
    assert filled.refresh().runs() == [1, "a"]


@pytest.mark.parametrize(
    "steps",
    [np.array([True, False]), np.array([0.0, 1.0]), np.array(["0", "1"])],
    ids=lambda a: str(a.dtype),
)
def test_a_step_array_that_is_not_of_ints_is_refused(store, steps):
    with store.writer() as w:
        with pytest.raises(
            TypeError, match=f"log_many: steps must be ints, got an array of {steps.dtype}"
        ):
            w.log_many([1, 2], steps=steps, x=np.zeros(2))
    assert store.refresh().runs() == []


def test_numpy_integers_are_run_ids_and_steps(store):
    with store.writer() as w:
        w.log(np.int64(1), step=np.int32(2), x=1.0)
        w.put(np.uint8(2), "x", 2.0, step=np.uint64(3))
        w.log_many(
            np.array([3, 4], dtype=np.uint64), steps=np.array([4, 5], dtype=np.int16), x=np.zeros(2)
        )
        w.log_many([5, 6], steps=np.array([6, 7], dtype=object), x=np.zeros(2))
        w.log_many([], steps=np.array([]), x=np.zeros(0))
    store.refresh()
    assert store.get(np.int16(1), "x", step=np.int8(2)) == 1.0
    assert store.scan("x")["step"].tolist() == [2, 3, 4, 5, 6, 7]


def test_integers_outside_int64_raise_overflow_error(store):
    with store.writer() as w:
        with pytest.raises(
            OverflowError, match="^step 9223372036854775808 does not fit a 64-bit signed integer$"
        ):
            w.log(1, step=2**63, x=1.0)
        with pytest.raises(OverflowError, match="step -9223372036854775809 does not fit"):
            w.put(1, "x", 1.0, step=-(2**63) - 1)
        with pytest.raises(OverflowError, match="run id 9223372036854775808 does not fit"):
            w.log(2**63, x=1.0)
        with pytest.raises(
            OverflowError, match="log_many: runs\\[1\\]: run id 18446744073709551615 does not fit"
        ):
            w.log_many(np.array([0, 2**64 - 1], dtype=np.uint64), x=np.zeros(2))
        with pytest.raises(
            OverflowError, match="log_many: steps\\[0\\]: step 9223372036854775808 does not fit"
        ):
            w.log_many([1], steps=np.array([2**63], dtype=np.uint64), x=np.zeros(1))
        with pytest.raises(OverflowError, match="log_many: steps\\[1\\]: step 9223372036854775808"):
            w.log_many([1, 2], steps=[0, 2**63], x=np.zeros(2))
    with pytest.raises(OverflowError, match="step 9223372036854775808 does not fit"):
        store.get(1, "x", step=2**63)
    assert store.refresh().runs() == []


def test_none_as_a_run_id_or_a_step_is_a_type_error_naming_it(store):
    with store.writer() as w:
        with pytest.raises(TypeError, match="^run id must be an int or a str, got NoneType$"):
            w.log(None, x=1.0)
        with pytest.raises(TypeError, match="^step must be an int, got NoneType$"):
            w.log(1, step=None, x=1.0)
        with pytest.raises(TypeError, match="^step must be an int, got float$"):
            w.put(1, "x", 1.0, step=2.0)
        with pytest.raises(TypeError, match="^run id must be an int or a str, got NoneType$"):
            w.resume(None, 0)


@pytest.mark.parametrize("eid", [True, np.False_, 3.0, float("nan"), None], ids=repr)
def test_experiment_ids_are_run_ids(store, eid):
    design = pd.DataFrame({"experiment": np.array([7, eid], dtype=object), "x": [1, 2]})
    with pytest.raises(
        TypeError,
        match=f"design: row 1: the experiment id must be an int or a str, "
        f"got (numpy\\.)?{type_name(eid)}",
    ):
        store.define_experiments(design)
    with pytest.raises(TypeError, match="row 0"):
        store.define_experiments([{"experiment": eid, "x": 1}])
    assert store.refresh().design().empty
