"""Many writers at once: threads of one process and processes of a pool."""

from __future__ import annotations

import multiprocessing
import pickle
import threading
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import numpy as np
import pytest

import runstore

PER_TASK = 2000


def write_task(store: runstore.Store, task: int) -> int:
    """One task: its own writer, PER_TASK experiments, a commit every 500."""
    with store.writer() as w:
        for i in range(PER_TASK):
            run = task * PER_TASK + i
            w.log(run, x=float(run), task=task, trace=np.full(8, run, dtype=np.int32))
            if i % 500 == 499:
                w.commit()
    return task


def check(store: runstore.Store, tasks: int) -> None:
    store.refresh()
    n = tasks * PER_TASK
    d = store.scan("x")
    order = np.argsort(d["run"])
    np.testing.assert_array_equal(d["run"][order], np.arange(n))
    np.testing.assert_array_equal(d["value"][order], np.arange(n, dtype=float))
    t = store.scan("trace")
    np.testing.assert_array_equal(t["value"][np.argsort(t["run"])][:, 3], np.arange(n))
    assert store.verify() > 0


def test_thread_pool_of_writers(store):
    tasks = 8
    with ThreadPoolExecutor(max_workers=4) as pool:
        assert sorted(pool.map(lambda t: write_task(store, t), range(tasks))) == list(range(tasks))
    check(store, tasks)
    assert len({s.writer_id for s in store.segments()}) == tasks


def test_threads_share_one_writer(store):
    def task(t):
        for i in range(PER_TASK):
            run = t * PER_TASK + i
            w.log(run, x=float(run), task=t, trace=np.full(8, run, dtype=np.int32))
        w.commit()

    with store.writer() as w:
        with ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(task, range(4)))
    check(store, 4)


def test_gil_is_released_during_commit_and_large_appends(store):
    """Another thread runs Python while this one is inside put (a large array) or commit."""
    big = np.ones(32 << 20, dtype=np.uint8)
    ticks: list[float] = []
    stop = threading.Event()

    def spin():
        while not stop.is_set() and len(ticks) < 10_000_000:
            ticks.append(time.perf_counter())

    calls = []
    t = threading.Thread(target=spin)
    t.start()
    try:
        time.sleep(0.01)
        with store.writer() as w:
            for i in range(4):
                t0 = time.perf_counter()
                w.put(i, "big", big)
                t1 = time.perf_counter()
                w.commit()
                t2 = time.perf_counter()
                calls += [(t0, t1), (t1, t2)]
    finally:
        stop.set()
        t.join()
    ticks_np = np.array(ticks)
    inside = [int(((ticks_np > a) & (ticks_np < b)).sum()) for a, b in calls]
    # With the GIL held for a whole call, no tick could fall inside it.
    assert sum(1 for k in inside if k > 0) >= len(calls) // 2, inside


def test_refresh_while_writing(store_path):
    """A reader refreshing in one thread sees a growing, always consistent prefix."""
    store = runstore.open(store_path)
    reader = runstore.open(store_path, mode="r")
    done = threading.Event()
    counts = []

    def read():
        while not done.is_set():
            reader.refresh()
            if "x" in reader.names():
                d = reader.scan("x")
                assert len(d["run"]) % 100 == 0  # whole commits only
                counts.append(len(d["run"]))

    t = threading.Thread(target=read)
    t.start()
    try:
        with store.writer() as w:
            for c in range(30):
                w.log_many(np.arange(c * 100, (c + 1) * 100), x=np.ones(100))
                w.commit()
                time.sleep(0.001)
    finally:
        done.set()
        t.join()
    assert counts == sorted(counts)


def process_task(args) -> int:
    path, task = args
    return write_task(runstore.open(path), task)


def test_process_pool_of_writers(store_path):
    runstore.open(store_path)
    tasks = 4
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=4, mp_context=ctx) as pool:
        done = sorted(pool.map(process_task, [(str(store_path), t) for t in range(tasks)]))
    assert done == list(range(tasks))
    store = runstore.open(store_path, mode="r")
    check(store, tasks)
    assert len({s.writer_id for s in store.segments()}) == tasks


def test_an_unpickled_store_reads_nothing_until_it_is_used(store_path):
    # A Store handed to every task of a Dask graph is unpickled once per task: opening it there
    # would read every segment's index each time, where the task may only need its path.
    store = runstore.open(store_path)
    with store.writer() as w:
        w.log(runstore.experiment_id({"x": 1}), step=0, x=1.0)
    blob = pickle.dumps(runstore.open(store_path, mode="r+"))
    moved = store_path.with_name(store_path.name + "-moved")
    store_path.rename(moved)
    again = pickle.loads(blob)  # the directory is gone: nothing is read yet
    assert (again.path, again.mode, again.read_only) == (str(store_path), "r+", False)
    with pytest.raises(FileNotFoundError, match="no store here"):
        again.names()
    moved.rename(store_path)
    first = pickle.loads(blob)
    # The first use opens it, once, whichever of several threads comes first.
    with ThreadPoolExecutor(max_workers=8) as pool:
        assert list(pool.map(lambda _: first.names(), range(32))) == [["x"]] * 32
    assert first.runs() == [runstore.experiment_id({"x": 1})]


def pickled_store_task(args) -> int:
    store, task = args  # a Store pickles as (path, mode) and opens again in the worker
    return write_task(store, task)


def test_store_can_be_sent_to_worker_processes(store_path):
    store = runstore.open(store_path)
    ctx = multiprocessing.get_context("forkserver")
    with ProcessPoolExecutor(max_workers=2, mp_context=ctx) as pool:
        assert sorted(pool.map(pickled_store_task, [(store, t) for t in range(2)])) == [0, 1]
    check(store, 2)
