"""runstore.ray on a local Ray cluster (a raylet and its worker processes): a Ray Data datasink
that writes from Ray's write tasks and hands the driver receipts, a write task whose worker dies
run again without a record twice, and a Ray Tune callback that keeps every trial's results,
once per iteration even when a trial fails and Tune runs it again."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import _objects
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import ray
from _objects import Trace
from ray import cloudpickle, tune

import runstore
from runstore import ray as rsr

# The workers cannot import this test module: its functions travel by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])
cloudpickle.register_pickle_by_value(_objects)


# Session-scoped: one cluster even if other modules' tests run between this module's.
@pytest.fixture(scope="session")
def cluster():
    # Ray's session directory holds Unix sockets, whose paths may not pass 107 bytes: a short
    # one, not under pytest's (per xdist worker) base directory.
    temp = tempfile.mkdtemp(prefix="ray-")
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        _temp_dir=temp,
        configure_logging=False,
    )
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield
    ray.shutdown()
    shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture
def store(tmp_path: Path) -> runstore.Store:
    return runstore.open(tmp_path / "s", "a")


def test_a_dataset_is_written_by_ray_s_tasks_and_the_driver_gets_receipts(cluster, store):
    rows = [
        {"id": f"exp-{i:03d}", "x": float(i), "n": None if i % 5 == 0 else i, "tag": f"t{i}"}
        for i in range(60)
    ]
    ds = ray.data.from_items(rows, override_num_blocks=4)
    sink = rsr.Datasink(store, run="id")
    ds.write_datasink(sink)
    assert len(sink.receipts) >= 1 and all(r.ok for r in sink.receipts), sink.receipts
    assert rsr.summarize(sink.receipts)["records"] == 60 * 3 - 12  # 12 null cells
    assert os.getpid() not in {int(r.worker.rsplit(":", 1)[1]) for r in sink.receipts}
    assert sorted(store.names()) == ["n", "tag", "x"]
    assert store.get("exp-017", "x") == 17.0 and store.get("exp-017", "tag") == "t17"
    with pytest.raises(KeyError):
        store.get("exp-015", "n")
    assert all(seg.sealed for seg in store.segments())


def test_rows_without_a_run_are_keyed_by_write_task_and_arrays_keep_their_shape(cluster, store):
    table = pa.table({"trace": pa.FixedSizeListArray.from_arrays(pa.array(np.arange(40.0)), 4)})
    ds = ray.data.from_arrow(table).repartition(2)
    sink = rsr.Datasink(store, run_offset=100)
    ds.write_datasink(sink)
    runs = sorted(store.runs())
    assert runs == [100 + r.partition for r in sink.receipts]
    got = np.concatenate([store.scan("trace", runs=[r])["value"] for r in runs])
    np.testing.assert_array_equal(np.sort(got[:, 0]), np.arange(0.0, 40.0, 4))
    assert got.shape == (10, 4)


def test_bad_arguments_are_refused_on_the_driver(cluster, store):
    with pytest.raises(TypeError, match="only together with run"):
        rsr.Datasink(store, step="s")
    with pytest.raises(TypeError, match="'nope' is not a column"):
        ray.data.from_items([{"a": 1}]).write_datasink(rsr.Datasink(store, run="nope"))
    store.writer().close()
    with pytest.raises(ValueError, match="read-only"):
        rsr.Datasink(runstore.open(store.path, "r"))


def test_the_same_save_id_again_writes_nothing_and_hostile_columns_are_refused(cluster, store):
    rows = [{"id": f"e{i}", "x": float(i)} for i in range(40)]
    ds = ray.data.from_items(rows, override_num_blocks=4)
    first = rsr.Datasink(store, run="id", save_id="tune-1")
    ds.write_datasink(first)
    files = {s.file for s in store.segments()}
    again = rsr.Datasink(store, run="id", save_id="tune-1")
    ds.write_datasink(again)
    assert all(r.ok and r.earlier for r in again.receipts), again.receipts
    assert {r.earlier for r in again.receipts} == {r.writer_id for r in first.receipts}
    assert rsr.summarize(again.receipts)["records"] == 40
    assert {s.file for s in store.refresh().segments()} == files  # nothing written again
    # A column that would be a reserved series is refused by name: its block, in the receipt;
    # with on_error="raise" the task fails as Ray's do.
    bad = ray.data.from_items([{"id": "e1", "~saved": 1.0, "y": 2.0}])
    sink = rsr.Datasink(store, run="id")
    bad.write_datasink(sink)
    (r,) = sink.receipts
    assert not r.ok and r.failures == 1 and "block 0 (1 rows)" in r.error and "reserved" in r.error
    with pytest.raises(Exception, match="reserved"):
        bad.write_datasink(rsr.Datasink(store, run="id", on_error="raise"))
    assert "~saved" not in store.refresh().names() and "y" not in store.names()
    # A column of objects whose arrays would drop their attributes: refused, never stripped.
    traces = ray.data.from_items([{"id": f"t{i}", "trace": Trace(i)} for i in range(3)])
    sink = rsr.Datasink(store, run="id")
    traces.write_datasink(sink)
    assert all("cannot save an object of type" in r.error for r in sink.receipts if not r.ok)
    assert rsr.summarize(sink.receipts)["failures"] == 3
    assert "trace" not in store.refresh().names()


def _dies_once(marker: str):
    def fn(batch: dict) -> dict:
        if not os.path.exists(marker):
            open(marker, "w").close()
            os._exit(1)  # the worker process dies mid-task: Ray runs the task again
        return batch

    return fn


def test_a_write_task_whose_worker_died_is_run_again_and_each_record_read_once(
    cluster, store, tmp_path
):
    ds = ray.data.from_items([{"id": i, "x": float(i)} for i in range(20)], override_num_blocks=2)
    ds = ds.map_batches(_dies_once(str(tmp_path / "died")), max_retries=3)
    sink = rsr.Datasink(store, run="id")
    ds.write_datasink(sink)
    assert (tmp_path / "died").exists()
    got = store.scan("x")
    assert len(got["value"]) == 20
    np.testing.assert_array_equal(np.sort(got["value"]), np.arange(20.0))


def _trainable(config: dict) -> None:
    """Five iterations; with config["fail"], the first attempt fails after three (its values
    marked by attempt), and Tune runs the trial again from the start."""
    marker = f"{config['marker']}-{config['lr']}-{config['fail']}"
    attempt = 1 if os.path.exists(marker) else 0
    for i in range(1, 6):
        tune.report({"loss": config["lr"] * i + 100 * attempt, "nested": {"acc": i / 10}})
        if config["fail"] and attempt == 0 and i == 3:
            open(marker, "w").close()
            raise RuntimeError("the first attempt fails at iteration 3")


def test_a_tune_sweep_keeps_every_trial_s_results_once_through_a_restart(cluster, store, tmp_path):
    cb = rsr.TuneCallback(store)
    space = {
        "lr": tune.grid_search([0.1, 0.2]),
        "fail": tune.grid_search([False, True]),
        "marker": str(tmp_path / "failed"),
    }
    tuner = tune.Tuner(
        _trainable,
        param_space=space,
        run_config=tune.RunConfig(
            storage_path=str(tmp_path / "tune"),
            callbacks=[cb],
            failure_config=tune.FailureConfig(max_failures=2),
            verbose=0,
        ),
    )
    results = tuner.fit()
    assert not results.errors
    store.refresh()
    trials = sorted(store.runs())
    assert len(trials) == 4
    loss = store.scan("loss")
    assert len(loss["value"]) == 4 * 5  # each (trial, iteration) once
    assert cb.restarts == 2  # each failing trial reported iterations 1..3 again
    by_trial = {}
    for r, s, v in zip(loss["run"], loss["step"], loss["value"]):
        by_trial.setdefault(r, {})[int(s)] = v
    for r in trials:
        assert sorted(by_trial[r]) == [1, 2, 3, 4, 5]
        assert store.get(r, "tune/state") == "done"
        lr = store.get(r, "config/lr")
        fail = store.get(r, "config/fail")
        shift = 100.0 if fail else 0.0  # the failed trial's values: its second attempt's
        assert by_trial[r] == pytest.approx({i: lr * i + shift for i in range(1, 6)})
    assert store.get(trials[0], "nested/acc", 2) == pytest.approx(0.2)


def _experiment(a: float, b: float) -> dict:
    if a > 0.8:
        raise ValueError(f"a={a} is out of range")
    return {"y": a + b}


def test_run_experiments_runs_a_sweep_s_pending_experiments_as_ray_tasks(cluster, store):
    rng = np.random.default_rng(11)
    design = pd.DataFrame({"a": rng.random(40), "b": rng.random(40)})
    runstore.experiments.define(store, design)
    summary = runstore.run_experiments(store, _experiment, ray=True, progress=False)
    n_failed = int((design["a"] > 0.8).sum())
    assert (summary.done, summary.failed) == (40 - n_failed, n_failed)
    frame, outcomes = runstore.load_results(store)
    ok = frame["state"].to_numpy() == "done"
    np.testing.assert_allclose(outcomes["y"][ok], (design["a"] + design["b"]).to_numpy()[ok])
    assert all(seg.sealed for seg in store.segments())
    again = runstore.run_experiments(store, _experiment, ray=True, progress=False)
    assert (again.done, again.failed, again.skipped) == (0, n_failed, 40 - n_failed)
    with pytest.raises(TypeError, match="one of client="):
        runstore.run_experiments(store, _experiment, ray=True, spark=object())
