"""runstore.spark on a real Spark standalone cluster: a master and two workers, each on a loopback
address of its own (two hosts to Spark), each worker's executor a JVM with its Python workers.
save writes every partition on its executor and the driver gathers receipts only; an attempt
Spark runs again (a task that failed, a Python worker killed with SIGKILL, a speculative copy)
leaves each record once, with the values of the attempt Spark accepted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import _objects
import numpy as np
import pandas as pd
import psutil
import pytest
from _objects import Trace
from pyspark import TaskContext, cloudpickle

import runstore
from runstore import spark as rss
from runstore.experiments import define as define_experiments

# The executors cannot import this test module: its functions travel by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])
cloudpickle.register_pickle_by_value(_objects)


# Session-scoped: one cluster even if other modules' tests run between this module's.
@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    # Speculation: a copy of a task that runs 4 times longer than the median, and at least 3 s,
    # once 3 of 4 tasks are done (only the speculation test's tasks take that long).
    conf = {
        "spark.driver.memory": "512m",
        "spark.task.maxFailures": "4",
        "spark.sql.execution.arrow.maxRecordsPerBatch": "1000",
        "spark.speculation": "true",
        "spark.speculation.interval": "100ms",
        "spark.speculation.multiplier": "4",
        "spark.speculation.quantile": "0.75",
        "spark.speculation.minTaskRuntime": "3s",
    }
    with rss.StandaloneCluster(workers=2, work_dir=tmp_path_factory.mktemp("spark")) as cluster:
        session = cluster.session("runstore-test-spark", conf)
        session.sparkContext.setLogLevel("ERROR")
        yield session


@pytest.fixture
def store(tmp_path: Path) -> runstore.Store:
    return runstore.open(tmp_path / "s", "a")


def _element(i: int) -> dict:
    return {"x": float(i), "trace": np.full(16, i, dtype=np.float32)}


def test_rdd_partitions_are_written_on_the_executors_and_the_driver_gets_receipts(spark, store):
    rdd = spark.sparkContext.parallelize(range(40), 4).map(_element)
    receipts = rss.save(rdd, store)
    assert [r.partition for r in receipts] == [0, 1, 2, 3]
    assert all(r.ok and r.error == "" for r in receipts), receipts
    assert sum(r.records for r in receipts) == 80
    # Written by the executors' Python workers, not by this process; a writer each.
    assert os.getpid() not in {int(r.worker.rsplit(":", 1)[1]) for r in receipts}
    assert len({r.writer_id for r in receipts}) == 4
    # Partition p holds elements 10p..10p+9 at steps 0..9 of run p.
    for p in range(4):
        got = store.scan("x", runs=[p])
        assert list(got["step"]) == list(range(10))
        np.testing.assert_array_equal(got["value"], np.arange(10 * p, 10 * p + 10, dtype=float))
        assert store.get(p, "trace", 3)[0] == 10 * p + 3
    # Every task's writer closed its segment before its receipt: none is left open.
    assert all(seg.sealed for seg in store.segments())
    assert rss.summarize(receipts)["records"] == 80


def test_rdd_elements_that_are_not_dicts_go_under_name_and_run_offset_moves_the_runs(spark, store):
    rdd = spark.sparkContext.parallelize([np.arange(4.0) + i for i in range(6)], 3)
    receipts = rss.save(rdd, store, name="block", run_offset=10)
    assert [r.records for r in receipts] == [2, 2, 2]
    assert sorted(store.runs()) == [10, 11, 12]
    np.testing.assert_array_equal(store.get(11, "block", 1), np.arange(4.0) + 3)


def _fail_on_partition_two(x: int) -> int:
    if x == 25:
        raise ValueError("bad input 25")
    return x


def test_an_element_whose_input_failed_is_named_and_the_others_are_saved(spark, store):
    rdd = spark.sparkContext.parallelize(range(40), 4).map(_fail_on_partition_two).map(_element)
    receipts = rss.save(rdd, store)
    failed = [r for r in receipts if not r.ok]
    assert [r.partition for r in failed] == [2]
    assert "element 5: ValueError: bad input 25" in failed[0].error
    assert failed[0].failures == 1 and failed[0].records == 2 * 9  # all but element 25
    for p in (0, 1, 3):
        assert len(store.scan("x", runs=[p])["value"]) == 10
    assert len(store.scan("x", runs=[2])["value"]) == 9
    with pytest.raises(KeyError):
        store.get(2, "x", 5)
    assert rss.summarize(receipts)["errors"] == {2: failed[0].error}
    # Raised instead, the task fails four times and so does the job.
    with pytest.raises(Exception, match="bad input 25"):
        rss.save(rdd, store, on_error="raise", run_offset=100)


def _wrong_then_right(part: int, it):
    """Attempt 0 of partitions 1 and 3 logs wrong values (-1) and then fails (after its writer
    committed them, as a task that raised does); attempt 1 logs the right ones."""
    attempt = TaskContext.get().attemptNumber()
    for x in it:
        yield {"x": -1.0 if (part in (1, 3) and attempt == 0) else float(x)}
        if part in (1, 3) and attempt == 0 and x % 10 == 4:
            raise RuntimeError(f"attempt {attempt} of partition {part} fails")


def test_a_task_spark_retries_leaves_each_record_once_with_the_accepted_attempts_values(
    spark, store
):
    rdd = spark.sparkContext.parallelize(range(40), 4).mapPartitionsWithIndex(_wrong_then_right)
    receipts = rss.save(rdd, store, on_error="raise")
    assert [r.attempt for r in receipts] == [0, 1, 0, 1]
    assert all(r.ok for r in receipts)
    assert rss.summarize(receipts)["retried"] == 2
    got = store.scan("x")
    assert (
        len(got["value"]) == 40
    )  # each key once, though partitions 1 and 3 wrote 5 of theirs twice
    np.testing.assert_array_equal(np.sort(got["value"]), np.arange(40.0))
    # The failed attempts' writers committed their wrong values: they are there, and hidden.
    assert len(store.segments()) == 6


def _killed_in_the_middle(victim: str):
    """Attempt 0 of partition 2 has its Python worker (or the executor JVM that runs it) killed
    by SIGKILL halfway, after its writer flushed records of 32 KiB each past its 64 KiB buffer to
    its segment. A killed Python worker commits nothing; the values it logged carry its attempt
    number, so that what readers see tells the attempts apart."""

    def run(part: int, it):
        ctx = TaskContext.get()
        shift = 1000.0 * ctx.attemptNumber() if victim == "python worker" else 0.0
        for x in it:
            yield {"x": float(x) + shift, "blob": np.full(4096, float(x) + shift)}
            if part == 2 and ctx.attemptNumber() == 0 and x % 10 == 5:
                # A Python worker is forked by its executor's pyspark daemon.
                jvm = psutil.Process(os.getppid()).ppid()
                os.kill(os.getpid() if victim == "python worker" else jvm, signal.SIGKILL)

    return run


@pytest.mark.parametrize("victim", ["python worker", "executor"])
def test_a_process_killed_mid_partition_leaves_each_record_once(spark, store, victim):
    parts = spark.sparkContext.parallelize(range(40), 4)
    rdd = parts.mapPartitionsWithIndex(_killed_in_the_middle(victim))
    receipts = rss.save(rdd, store, on_error="raise", writer_options=dict(buffer_bytes=1 << 16))
    assert [r.attempt for r in receipts] == [0, 0, 1, 0]
    shift = 1000.0 if victim == "python worker" else 0.0
    got = store.scan("x", runs=[2])
    assert list(got["step"]) == list(range(10))
    np.testing.assert_array_equal(got["value"], np.arange(20.0, 30.0) + shift)
    assert len(store.scan("x")["value"]) == 40
    assert store.get(2, "blob", 3)[0] == 23.0 + shift
    if victim == "python worker":
        # The killed attempt's segment: bytes written, none of them committed. A compaction
        # that adopts crashed writers' segments (no writer runs now) reclaims it whole.
        (left,) = [seg for seg in store.segments() if not seg.sealed]
        assert left.file_bytes > 64 * 1024 and left.commits == 0
        before = store.scan("x")
        store.compact(adopt_unsealed=True, retain=0, progress=False)
        assert all(seg.sealed for seg in store.refresh().segments())
        assert left.file not in {seg.file for seg in store.segments()}
        after = store.scan("x")

        def records(got):
            return sorted(zip(got["run"].tolist(), got["step"].tolist(), got["value"].tolist()))

        assert records(after) == records(before)
    # An executor killed under its Python worker: the worker, orphaned, may still finish the
    # partition and commit it (docs/spark.md, "Attempts"); its keys and values are those of the
    # attempt Spark reran, and readers see each key once.


def _slow_first_attempt(part: int, it):
    """Attempt 0 of partition 0 logs wrong values, then stalls: Spark launches a speculative
    copy on the other worker, accepts it, and kills the stalled attempt before it commits."""
    ctx = TaskContext.get()
    stall = part == 0 and ctx.attemptNumber() == 0
    for x in it:
        yield {"x": -float(x) if stall else float(x)}
    if stall:
        time.sleep(60)


def test_a_speculative_copy_that_wins_is_what_readers_see(spark, store):
    rdd = spark.sparkContext.parallelize(range(40), 4).mapPartitionsWithIndex(_slow_first_attempt)
    receipts = rss.save(rdd, store, on_error="raise")
    assert [r.attempt for r in receipts] == [1, 0, 0, 0]
    np.testing.assert_array_equal(store.scan("x", runs=[0])["value"], np.arange(10.0))
    # The stalled attempt was killed with its task, its records never committed: still so once
    # its Python worker is gone (Spark's kill timeout), after a refresh.
    time.sleep(3)
    store.refresh()
    got = store.scan("x")
    assert len(got["value"]) == 40
    np.testing.assert_array_equal(np.sort(got["value"]), np.arange(40.0))
    # Four sealed segments, those of the accepted attempts; the stalled one committed nothing.
    segments = store.segments()
    assert sum(seg.sealed for seg in segments) == 4
    assert all(seg.sealed or seg.commits == 0 for seg in segments)


def test_a_dataframe_s_rows_are_runs_and_its_columns_series(spark, store):
    rows = [
        (f"exp-{i:03d}", i % 3, float(i), None if i % 7 == 0 else i * 10, f"label {i}")
        for i in range(50)
    ]
    df = spark.createDataFrame(rows, "id string, step long, x double, n long, label string")
    receipts = rss.save(df.repartition(3), store, run="id", step="step")
    assert len(receipts) == 3 and all(r.ok for r in receipts), receipts
    assert sorted(store.names()) == ["label", "n", "x"]
    assert store.get("exp-017", "x", 17 % 3) == 17.0
    assert store.get("exp-017", "label", 2) == "label 17"
    n = store.scan("n")
    assert len(n["value"]) == 50 - 8  # a null cell is no record (0, 7, ..., 49)
    with pytest.raises(KeyError):
        store.get("exp-014", "n", 14 % 3)
    # Without run=, a row is keyed by its partition and its place in it.
    s2 = runstore.open(Path(store.path).parent / "s2", "a")
    df2 = spark.createDataFrame([(float(i),) for i in range(12)], "v double").coalesce(2)
    receipts = rss.save(df2, s2)
    assert [r.records for r in receipts] == [6, 6]
    assert sorted(s2.runs()) == [0, 1]
    assert list(s2.scan("v", runs=[1])["step"]) == list(range(6))


def test_bad_arguments_are_refused_on_the_driver(spark, store, tmp_path):
    df = spark.createDataFrame([(1, 2.0)], "r long, v double")
    with pytest.raises(TypeError, match="'nope' is not a column"):
        rss.save(df, store, run="nope")
    with pytest.raises(TypeError, match="only together with run"):
        rss.save(df, store, step="r")
    with pytest.raises(TypeError, match="RDD or DataFrame"):
        rss.save([1, 2], store)
    with pytest.raises(ValueError, match="on_error"):
        rss.save(df, store, on_error="ignore")
    store.writer().close()
    ro = runstore.open(store.path, "r")
    with pytest.raises(ValueError, match="read-only"):
        rss.save(df, ro)
    # A null run is refused in the partition's receipt, naming the column.
    nulls = spark.createDataFrame([(None, 2.0), (1, 3.0)], "r long, v double").coalesce(1)
    (receipt,) = rss.save(nulls, store, run="r")
    assert not receipt.ok and "the run column 'r' has nulls" in receipt.error


def _experiment(a: float, b: float) -> dict:
    if a > 0.8:
        raise ValueError(f"a={a} is out of range")
    return {"y": a + b, "curve": np.linspace(a, b, 8)}


def test_run_experiments_runs_a_sweep_s_pending_experiments_as_spark_tasks(spark, store):
    rng = np.random.default_rng(7)
    design = {"a": rng.random(60), "b": rng.random(60)}
    ids = define_experiments(store, pd.DataFrame(design))
    summary = runstore.run_experiments(store, _experiment, spark=spark, progress=False)
    n_failed = int((design["a"] > 0.8).sum())
    assert (summary.done, summary.failed) == (60 - n_failed, n_failed)
    status = runstore.experiments.status(store)
    assert (status["state"] == "done").sum() == 60 - n_failed
    frame, outcomes = runstore.load_results(store)
    ok = frame["state"].to_numpy() == "done"
    np.testing.assert_allclose(outcomes["y"][ok], (design["a"] + design["b"])[ok])
    assert len(ids) == 60
    assert all(seg.sealed for seg in store.segments())
    # Again: only the failed ones run (and fail) again.
    again = runstore.run_experiments(store, _experiment, spark=spark, progress=False)
    assert (again.done, again.failed, again.skipped) == (0, n_failed, 60 - n_failed)


def test_the_planner_names_spark_s_parameters_and_the_command_prints_it():
    from runstore.integrations._plan import plan

    p = plan(2000, "8MiB", "2GiB", 2, 4, k=0.73, engine="spark")
    assert (p.partition_size, p.n_partitions, p.engine) == (93, 22, "spark")
    assert "spark.executor.pyspark.memory" in p.reasoning
    assert "sc.parallelize(items, 22)" in p.reasoning
    # The same numbers as Dask's plan of the same figures: only the names differ.
    d = plan(2000, "8MiB", "2GiB", 2, 4, k=0.73)
    assert (d.partition_size, d.n_partitions) == (p.partition_size, p.n_partitions)
    assert "spark" not in d.reasoning
    with pytest.raises(ValueError, match="more Python memory or fewer cores"):
        plan(10, "2GiB", "1GiB", 1, 1, engine="spark")
    with pytest.raises(ValueError, match="engine must be"):
        plan(10, "1MiB", "1GiB", 1, 1, engine="ray")
    cmd = [sys.executable, "-m", "runstore", "plan", "--objects", "2000", "--object-bytes"]
    cmd += ["8MiB", "--worker-memory", "2GiB", "--threads", "2", "--workers", "4", "--k", "0.73"]
    r = subprocess.run([*cmd, "--engine", "spark"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout == p.reasoning + "\n"
    bad = subprocess.run([*cmd, "--engine", "flink"], capture_output=True, text=True)
    assert bad.returncode != 0 and "invalid choice: 'flink'" in bad.stderr


def test_an_object_that_would_lose_its_attributes_is_refused_not_stripped(spark, store):
    rdd = spark.sparkContext.parallelize(range(4), 2).map(Trace)
    receipts = rss.save(rdd, store, name="trace")
    assert not any(r.ok for r in receipts)
    assert all("cannot save an object of type" in r.error and "Trace" in r.error for r in receipts)
    assert "trace" not in store.names()
    # As a dict of its samples and metadata it round-trips whole.
    as_dicts = rdd.map(lambda t: {"data": t.data, "id": t.id})
    assert all(r.ok for r in rss.save(as_dicts, store, key=lambda d: d["id"]))
    assert store.get("XX.STA3..BHZ", "id") == "XX.STA3..BHZ"
    np.testing.assert_array_equal(store.get("XX.STA3..BHZ", "data"), np.full(8, 3.0))


def _big(i: int) -> np.ndarray:
    return np.full(16 * 2**20 // 8, float(i))


def _python_workers() -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        if "pyspark.daemon" in " ".join(p.info["cmdline"] or []):
            found.append(p)
            found.extend(p.children(recursive=True))
    return found


def _peak_rss_while(fn) -> int:
    """The largest RSS of a Python worker, sampled every 20 ms while fn() runs."""
    peak = [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            for p in _python_workers():
                try:
                    peak[0] = max(peak[0], p.memory_info().rss)
                except psutil.Error:
                    pass
            stop.wait(0.02)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        fn()
    finally:
        stop.set()
        sampler.join()
    return peak[0]


def test_a_partition_is_saved_element_by_element_in_a_python_worker_s_memory(spark, store):
    """Partitions of 16 objects of 16 MiB (256 MiB) through two maps: the Python workers' peak
    RSS, sampled while the save runs, stays within a few objects of their size at rest; the
    same partitions held whole (``mapPartitions(list)``) are seen to take their size."""
    mib = 2**20
    sc = spark.sparkContext
    sc.parallelize(range(4), 2).map(float).collect()  # the workers started
    rest = max(p.memory_info().rss for p in _python_workers())
    rdd = sc.parallelize(range(32), 2).map(_big).map(np.negative)
    receipts = []
    streamed = _peak_rss_while(lambda: receipts.extend(rss.save(rdd, store, name="big")))
    held = _peak_rss_while(
        lambda: rss.save(rdd.mapPartitions(lambda it: list(it)), store, name="held")
    )
    print(
        f"\nPython worker RSS at rest {rest / mib:.0f} MiB; peak streamed {streamed / mib:.0f} "
        f"MiB, held whole {held / mib:.0f} MiB; partitions of 256 MiB"
    )
    assert all(r.ok for r in receipts) and sum(r.bytes for r in receipts) == 32 * 16 * mib
    assert streamed - rest < 8 * 16 * mib, "a partition was held whole"
    assert held - rest > 8 * 16 * mib, "the sampler does not see a partition held whole"
    assert store.array(1, "big", 15)[0] == -31.0


def test_the_same_save_id_again_writes_no_partition_saved_whole_again(spark, store, tmp_path):
    rdd = spark.sparkContext.parallelize(range(40), 4).map(_fail_on_partition_two).map(_element)
    first = rss.save(rdd, store, save_id="nightly")
    files = {s.file: s.file_bytes for s in store.segments()}
    second = rss.save(rdd, store, save_id="nightly")
    print([(r.partition, r.ok, r.records, r.earlier, r.writer_id) for r in second])
    for a, b in zip(first, second, strict=True):
        # Partitions 0, 1, 3 were saved whole: reported as the first save's, nothing written.
        assert bool(b.earlier) == (a.partition != 2)
        assert b.earlier == (a.writer_id if a.partition != 2 else "")
        assert (b.records, b.bytes) == (a.records, a.bytes)
    grown = [s for s in store.refresh().segments() if s.file not in files]
    assert len(grown) == 1  # the one writer of partition 2, whose element failed again
    assert rss.summarize(second)["saved_earlier"] == 3
    with pytest.raises(ValueError, match="save_id"):
        rss.save(rdd, store, save_id="")


def test_a_key_of_the_data_makes_a_save_with_other_partitions_exactly_once(spark, store):
    items = [{"id": i, "x": float(i)} for i in range(60)]
    for parts in (4, 7):  # the same data saved twice, partitioned otherwise
        rdd = spark.sparkContext.parallelize(items, parts)
        assert all(r.ok for r in rss.save(rdd, store, key=lambda d: (d["id"] % 6, d["id"] // 6)))
    got = store.scan("x")
    assert len(got["value"]) == 60  # by partition and position it would be 60 + 60 - overlap
    assert store.get(5, "x", 3) == 23.0
    with pytest.raises(TypeError, match="key= is for an RDD"):
        rss.save(spark.createDataFrame([(1,)], "a long"), store, key=len)
    with pytest.raises(TypeError, match="key must be a function"):
        rss.save(spark.sparkContext.parallelize([1]), store, key="id")
