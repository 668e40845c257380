"""What the conversion of Python values for the writer (python/src/convert.cc) refuses, at every
entry point that writes a value: numpy masked arrays with a masked element, and text that is not
Unicode.

numpy masked arrays and other subclasses of ndarray.

A store holds no mask: a masked array whose mask hides an element (numpy.ma.masked itself, and
a list holding either) is refused with a TypeError that says so, at log, put, log_many,
record_many, an experiment writer's record, run_experiments' outcomes and runstore.dask.save,
and nothing of the call is appended. A masked array whose mask hides nothing is its data, as
are numpy.matrix, numpy.memmap and objects with __array__. (The EMA callback: test_ema.py.)"""

from __future__ import annotations

import numpy as np
import pytest

import runstore
import runstore.experiments

MASKED = {
    "one masked": np.ma.masked_array([1.0, 2.0], mask=[0, 1]),
    "numpy.ma.masked": np.ma.masked,
    "0-d masked": np.ma.masked_array(3.0, mask=True),
    "int, all masked": np.ma.masked_array(np.arange(4), mask=True),
    "in a list": [1.0, np.ma.masked],
    "array in a list": [np.ma.masked_array([1.0, 2.0], mask=[1, 0])],
    "nested in lists": [[1.0, 2.0], [3.0, np.ma.masked]],
}


def _mentions_the_mask(e: pytest.ExceptionInfo, where: str) -> None:
    text = str(e.value)
    assert "'v'" in text and "masked" in text and "stores no mask" in text, (where, text)


def _entry_points(store):
    """(name, call(value)) for every way the writer API takes one value."""
    w = store.writer()
    ew = runstore.experiments.writer(store)
    return (
        w,
        ew,
        {
            "log": lambda v: w.log(1, v=v),
            "put": lambda v: w.put(1, "v", v),
            "log_many column": lambda v: w.log_many([1], v=[v]),
            "record": lambda v: ew.record("e1", {"x": 1}, {"v": v}),
            "record_many": lambda v: ew.record_many(["e1"], {"x": [1]}, {"v": [v]}),
        },
    )


@pytest.mark.parametrize("case", list(MASKED))
def test_a_masked_element_is_refused_at_every_entry_point_and_nothing_is_appended(tmp_path, case):
    store = runstore.open(tmp_path / "s")
    w, ew, calls = _entry_points(store)
    for name, call in calls.items():
        with pytest.raises(TypeError) as e:
            call(MASKED[case])
        _mentions_the_mask(e, name)
    w.log(2, other=1.0)  # the writers go on
    w.close()
    ew.close()
    store.refresh()
    assert store.names() == ["other"], case
    print(f"{case}: refused by {len(calls)} entry points")


def test_a_masked_column_run_ids_or_steps_are_refused(tmp_path):
    store = runstore.open(tmp_path / "s")
    with store.writer() as w:
        with pytest.raises(TypeError, match="'v': a numpy masked array with 1 of 3"):
            w.log_many([1, 2, 3], v=np.ma.masked_array([1.0, 2.0, 3.0], mask=[0, 1, 0]))
        with pytest.raises(TypeError, match="runs: a numpy masked array with 1 of 2"):
            w.log_many(np.ma.masked_array([1, 2], mask=[0, 1]), v=[1.0, 2.0])
        with pytest.raises(TypeError, match="steps: a numpy masked array with 1 of 2"):
            w.log_many([1, 2], steps=np.ma.masked_array([5, 6], mask=[1, 0]), v=[1.0, 2.0])
        with pytest.raises(TypeError, match="step: a masked element .* not a value"):
            w.log(1, step=np.ma.masked, v=1.0)
        with pytest.raises(TypeError, match="run id: a masked element .* not a value"):
            w.log(np.ma.masked, v=1.0)
        with pytest.raises(TypeError, match=r"steps\[1\]: step: a masked element"):
            w.log_many([1, 2], steps=[5, np.ma.masked], v=[1.0, 2.0])
    store.refresh()
    assert store.names() == []


def test_arrays_whose_mask_hides_nothing_and_other_subclasses_are_their_data(tmp_path):
    class WithArray:
        def __array__(self, dtype=None, copy=None):
            return np.array([[7, 8]], dtype=np.int16)

    memmap = np.memmap(tmp_path / "m.bin", dtype=np.float32, mode="w+", shape=(3,))
    memmap[:] = [1.5, 2.5, 3.5]
    values = {
        "nomask": np.ma.masked_array([1.0, 2.0]),
        "all false": np.ma.masked_array([1.0, 2.0], mask=[0, 0]),
        "matrix": np.matrix([[1, 2], [3, 4]]),
        "memmap": memmap,
        "__array__": WithArray(),
    }
    store = runstore.open(tmp_path / "s")
    with store.writer() as w:
        for name, v in values.items():
            w.put(1, name, v)
        w.log_many([1, 2], steps=np.ma.masked_array([3, 4]), column=np.ma.masked_array([5, 6]))
    store.refresh()
    for name, v in values.items():
        got = store.get(1, name)
        want = np.asarray(v)
        assert type(got) is np.ndarray and got.dtype == want.dtype, name
        np.testing.assert_array_equal(got, want, err_msg=name)
    assert store.scan("column")["step"].tolist() == [3, 4]


def _masked_outcome(x):
    return {"v": np.ma.masked_array([x, 2.0], mask=[0, 1]), "ok": x}


def test_run_experiments_records_a_masked_outcome_as_the_experiments_failure(tmp_path):
    store = runstore.open(tmp_path / "s")
    store.define_experiments(runstore.grid(x=[1.0, 2.0]))
    runstore.run_experiments(store, _masked_outcome, workers=0, progress=False)
    status = store.status()
    assert status["state"].tolist() == ["failed", "failed"]
    assert all("stores no mask" in e for e in status["error"]), status["error"].tolist()
    assert "v" not in store.names() and "ok" not in store.names()


def _maybe_masked(i):
    if i == 1:
        return np.ma.masked_array([1.0, 2.0], mask=[0, 1])
    return np.ma.masked_array(np.arange(3.0))  # nothing masked: its data


def test_dask_save_of_a_masked_array_is_a_failed_receipt(tmp_path):
    pytest.importorskip("distributed")
    import dask
    from distributed import Client, LocalCluster

    import runstore.dask

    store = runstore.open(tmp_path / "s")
    values = [dask.delayed(_maybe_masked)(i) for i in range(3)]
    with (
        LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as c,
        Client(c),
    ):
        receipts = runstore.dask.collect(runstore.dask.save(values, store, name="v"))
    by_part = {r.partition: r for r in receipts}
    assert [by_part[p].ok for p in range(3)] == [True, False, True]
    assert "stores no mask" in by_part[1].error
    store.refresh()
    assert sorted(store.scan("v")["run"].tolist()) == [0, 2]


def test_text_that_is_not_unicode_is_refused_naming_where_it_is(tmp_path):
    """A lone surrogate (what surrogateescape decoding leaves) has no UTF-8 form: as a value, a
    run id, a series name or a parameter name it raises ValueError naming the series or the
    argument and showing the string escaped, never the codec's bare message."""
    store = runstore.open(tmp_path / "s")
    bad = "a\ud800b"
    with store.writer() as w:
        for call, where in [
            (lambda: w.log(1, x=bad), "series 'x': the str 'a\\ud800b'"),
            (lambda: w.log_many([1, 2], x=["ok", bad]), "series 'x': the str 'a\\ud800b'"),
            (lambda: w.put(bad, "x", 1.0), "run id 'a\\ud800b'"),
            (lambda: w.log(1, values={bad: 1.0}), "series name 'a\\ud800b'"),
        ]:
            with pytest.raises(ValueError) as e:
                call()
            assert str(e.value).startswith(where), str(e.value)
            assert "is not valid Unicode text" in str(e.value)
    with pytest.raises(ValueError, match="parameter 'a\\\\ud800b' is not valid Unicode"):
        store.define_experiments([{"experiment": 1, bad: 1.0}])
    with pytest.raises(ValueError, match="parameter 'a\\\\x00b' holds a NUL"):
        store.define_experiments([{"experiment": 1, "a\0b": 1.0}])
    store.refresh()
    assert store.names() == []
