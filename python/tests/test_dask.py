"""runstore.dask on a real LocalCluster of worker processes: save writes on the workers and the
client gathers receipts only; a killed worker's tasks rerun without duplicating records."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import dask
import dask.bag as db
import numpy as np
import pytest
from _objects import Trace
from distributed import Client, LocalCluster

import runstore
from runstore import dask as rsd

MiB = 2**20
#: On the repository's disk, not a tmpfs /tmp.
SCRATCH = Path(__file__).resolve().parents[2] / "build" / "test-dask"


@pytest.fixture(scope="module")
def client():
    cluster = LocalCluster(
        n_workers=2,
        threads_per_worker=2,
        processes=True,
        memory_limit="1GiB",
        dashboard_address=":0",
    )
    with Client(cluster) as c:
        yield c
    cluster.close()


@pytest.fixture
def scratch(client):
    path = SCRATCH / f"{os.getpid()}-{time.monotonic_ns()}"
    path.mkdir(parents=True)
    yield path
    # The workers' writers of stores in it close (and commit) before the files go, not after.
    for name in client.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.worker_plugins)):
        if name.startswith(f"runstore-writer:{os.path.realpath(path)}/"):
            client.unregister_worker_plugin(name)
    shutil.rmtree(path, ignore_errors=True)


def make(i: int, nbytes: int) -> np.ndarray:
    """Element i: a deterministic array of nbytes (its first value is i)."""
    a = np.full(nbytes // 8, float(i))
    return a


def spilled(client) -> dict[str, int]:
    return client.run(
        lambda dask_worker: len(dask_worker.data.slow) if hasattr(dask_worker.data, "slow") else 0
    )


def test_save_of_6x_cluster_memory_gathers_only_receipts(client, scratch):
    n, size, per = 400, 16 * MiB, 4
    store = runstore.open(scratch / "store")
    bag = db.from_sequence(range(n), npartitions=n // per).map(make, size)
    before = set(client.run(os.getpid).values())
    with rsd.MemoryMonitor(client) as mon:
        start = time.perf_counter()
        receipts = rsd.save(bag, store, name="trace").compute()
        wall = time.perf_counter() - start
    print(f"\nsave of {n} x {size // MiB} MiB = {n * size / 2**30:.2f} GiB in {wall:.1f} s")
    print(mon.table())
    s = rsd.summarize(receipts)
    print(s)
    assert s["ok"] == n // per and s["failed"] == 0
    assert s["records"] == n and s["bytes"] == n * size
    # A bound on the rise: the client is this test runner, whose size is whatever the tests
    # before it imported; gathering the outputs would raise it by 6.25 GiB.
    assert mon.growth("client") < 64 * MiB and mon.growth("scheduler") < 64 * MiB
    assert set(client.run(os.getpid).values()) == before, "a worker was restarted"
    assert sum(spilled(client).values()) == 0
    store.refresh()
    seen = 0
    for p in range(n // per):
        for step in range(per):
            v = store.array(p, "trace", step)
            assert v.nbytes == size and v[0] == p * per + step
            seen += 1
    assert seen == n


def test_save_streams_a_partition_one_element_at_a_time(client, scratch):
    """A partition of 16 elements of 32 MiB (512 MiB) through two maps: the save takes them one
    at a time, so a worker running two such partitions at once holds a few elements, not the
    1 GiB of both partitions (its memory limit)."""
    n, per, size = 32, 16, 32 * MiB
    store = runstore.open(scratch / "store")
    bag = db.from_sequence(range(n), npartitions=n // per).map(make, size).map(np.negative)
    with rsd.MemoryMonitor(client) as mon:
        receipts = rsd.save(bag, store, name="s").compute()
    print(mon.table())
    s = rsd.summarize(receipts)
    assert s["ok"] == n // per and s["bytes"] == n * size
    growth = mon.growth("worker")
    print(f"worker growth {growth / MiB:.0f} MiB for partitions of {per * size / MiB:.0f} MiB")
    assert growth < 8 * size, "a partition was held whole"
    # What the planner predicts for this cluster (2 workers of 1 GiB, 2 threads) is what it does.
    p = rsd.plan(n, size, "1GiB", 2, 2, k=0.75)
    print(p.reasoning)
    assert mon.peak("worker") <= p.worker_peak(streaming=True) < 0.5 * 2**30
    store.refresh()
    assert store.array(1, "s", 15)[0] == -(1 * per + 15)


def test_compute_gathers_everything_on_the_client(client):
    n, size = 40, 8 * MiB
    bag = db.from_sequence(range(n), npartitions=10).map(make, size)
    with rsd.MemoryMonitor(client) as mon:
        out = bag.compute()
    assert len(out) == n
    del out
    print(
        f"\ncompute() of {n} x {size // MiB} MiB: client peak {mon.peak('client') / MiB:.0f} "
        f"MiB (the data is {n * size / MiB:.0f} MiB)"
    )
    assert mon.peak("client") > n * size / 2


def test_failing_element_is_named_and_the_rest_of_its_partition_saved(client, scratch):
    store = runstore.open(scratch / "store")

    def boom(i):
        if i in (5, 6):
            raise ValueError(f"element {i} of the input")
        return np.float64(i)

    bag = db.from_sequence(range(12), npartitions=4).map(boom)  # partitions of 3
    receipts = rsd.save(bag, store, name="x").compute()
    s = rsd.summarize(receipts)
    print(s)
    assert s["partitions"] == 4 and s["failed"] == 2 and s["failures"] == 2
    assert s["records"] == 10
    # Partition 1 is 3, 4, 5: element 2 raised; partition 2 is 6, 7, 8: element 0 raised.
    assert receipts[1].failures == 1 and "element 2: ValueError: element 5" in receipts[1].error
    assert receipts[2].failures == 1 and "element 0: ValueError: element 6" in receipts[2].error
    assert receipts[1].records == 2 and receipts[2].records == 2
    store.refresh()
    for i in set(range(12)) - {5, 6}:
        assert float(store.get(i // 3, "x", i % 3)) == float(i)
    for run, step in ((1, 2), (2, 0)):
        with pytest.raises(KeyError):
            store.get(run, "x", step)
    # collect() turns a failure outside the stream (a delayed input) into a receipt.
    inputs = [dask.delayed(boom)(i) for i in (1, 5, 2)]
    r = rsd.collect(rsd.save(inputs, store, name="d"), client)
    assert [x.ok for x in r] == [True, False, True] and "element 5" in r[1].error
    # An element runstore refuses (an object whose array would lose its attributes) is named.
    bad = db.from_sequence([np.float64(1), object(), np.float64(3)], npartitions=1)
    r = rsd.save(bad, store, name="y").compute()
    assert r[0].records == 2 and r[0].failures == 1 and "element 1: TypeError" in r[0].error
    with pytest.raises(TypeError, match="what runstore.dask.save returned"):
        rsd.collect(42, client)


def test_key_save_again_with_other_partitions_is_exactly_once(client, scratch):
    store = runstore.open(scratch / "store")

    def trace(i):
        return {"data": np.full(4, float(i)), "station": f"ST{i:02d}"}

    def ident(t):
        return t["station"]

    items = db.from_sequence(range(30), npartitions=6).map(trace)
    first = rsd.summarize(rsd.save(items, store, key=ident).compute())
    again = db.from_sequence(range(30), npartitions=7).map(trace)
    second = rsd.summarize(rsd.save(again, store, key=ident).compute())
    assert first["records"] == second["records"] == 60 and first["failed"] == 0
    store.refresh()
    assert sorted(store.runs()) == [f"ST{i:02d}" for i in range(30)]
    frame = store.to_pandas("station")
    print(frame.head())
    assert len(frame) == 30, "a save with another partitioning duplicated records"
    assert store.get("ST07", "station") == "ST07" and store.get("ST07", "data")[0] == 7.0
    # A key that returns something that is no key is that element's failure, by name.
    bad = db.from_sequence(range(4), npartitions=1).map(trace)
    r = rsd.save(bad, store, key=lambda t: (t["station"], 1, 2)).compute()[0]
    assert r.failures == 4 and "(run, step) pair" in r.error
    r = rsd.save(bad, store, key=lambda t: 1.5).compute()[0]
    assert r.failures == 4 and "int or str" in r.error
    with pytest.raises(TypeError, match="key must be a function"):
        rsd.save(bad, store, key="station")
    with pytest.raises(TypeError, match="for a dask bag"):
        rsd.save([dask.delayed(trace)(1)], store, key=ident)


def test_hostile_names_are_refused_by_name_never_written(client, scratch):
    import dask.dataframe as dd
    import pandas as pd

    store = runstore.open(scratch / "store")
    for name in ("~saved", "~time", ""):
        with pytest.raises(ValueError):
            rsd.save(db.from_sequence([1.0]), store, name=name)
    with pytest.raises(TypeError):
        rsd.save(db.from_sequence([1.0]), store, name=7)
    # Dict keys and DataFrame columns that would be reserved names: that element, that partition.
    items = [{"~saved": 1.0}, {"ok": 2.0}, {"\x1b[31mred": 3.0}]
    r = rsd.save(db.from_sequence(items, npartitions=1), store).compute()[0]
    assert r.failures == 1 and "reserved" in r.error and r.records == 2
    frame = pd.DataFrame({"a": [1.0, 2.0], "~resume": [1.0, 2.0]})
    (rf,) = dask.compute(*rsd.save(dd.from_pandas(frame, npartitions=1), store, run_offset=9))
    assert not rf.ok and "reserved" in rf.error
    odd = pd.DataFrame({"runs": [1.0], "steps": [2.0], "a b/c": [3.0]})
    (ro,) = dask.compute(*rsd.save(dd.from_pandas(odd, npartitions=1), store, run_offset=20))
    assert ro.ok, ro.error
    traces = pd.DataFrame({"trace": [Trace(1), Trace(2)]})
    with dask.config.set({"dataframe.convert-string": False}):  # else Dask makes them str
        frame = dd.from_pandas(traces, npartitions=1)
        (rt,) = dask.compute(*rsd.save(frame, store, run_offset=30))
    assert not rt.ok and "cannot save an object of type" in rt.error
    store.refresh()
    assert "~saved" not in store.names() and "~resume" not in store.names()
    assert "trace" not in store.names()
    assert float(store.get(20, "steps")) == 2.0 and float(store.get(20, "a b/c")) == 3.0
    assert float(store.get(0, "\x1b[31mred", 2)) == 3.0


def test_a_partition_saved_whole_is_not_computed_or_written_again(tmp_path):
    """The same save id again (a task rerun after its worker died, a client that resumes): the
    partitions an earlier attempt saved whole are neither computed nor written again, and their
    receipts say whose they are; partitions that had a failing element are."""
    store = runstore.open(tmp_path / "store")
    calls = []
    first_time = [True]

    def work(i):
        calls.append(i)
        if i == 9 and first_time[0]:
            raise ValueError("nine, the first time")
        return np.full(1000, float(i))

    bag = db.from_sequence(range(12), npartitions=4).map(work)
    with dask.config.set(scheduler="sync"):
        first = rsd.save(bag, store, name="w", save_id="sweep-1").compute()
        segments = len(store.refresh().segments())
        size = sum(f.stat().st_size for f in (tmp_path / "store").rglob("*") if f.is_file())
        calls.clear()
        first_time[0] = False
        second = rsd.save(bag, store, name="w", save_id="sweep-1").compute()
    print([(r.partition, r.ok, r.records, r.earlier) for r in second])
    assert [r.ok for r in first] == [True, True, True, False]
    assert [bool(r.earlier) for r in second] == [True, True, True, False]
    assert all(r.ok for r in second) and sorted(calls) == [9, 10, 11]
    assert [r.records for r in second] == [3, 3, 3, 3] and second[0].bytes == 3 * 8000
    assert len({r.earlier for r in second[:3]}) == 1  # the one writer of this process
    store.refresh()
    assert float(store.get(3, "w", 0)[0]) == 9.0
    grown = sum(f.stat().st_size for f in (tmp_path / "store").rglob("*") if f.is_file()) - size
    print(f"segments {segments} -> {len(store.segments())}, bytes grown {grown}")
    assert grown < 3 * 8000 + 64 * 1024, "finished partitions were written again"
    # Another save id writes again (a new save of the same data is a new save).
    third = rsd.save(bag, store, name="w").compute(scheduler="sync")
    assert not any(r.earlier for r in third)


def test_delayed_frame_array_and_pass_through(client, scratch):
    import dask.array as da
    import pandas as pd

    store = runstore.open(scratch / "store")
    objs = [dask.delayed(np.arange)(i, i + 4) for i in range(4)]  # a fixed-shape series
    r = dask.compute(*rsd.save(objs, store, name="d"))
    assert all(x.ok for x in r)
    import dask.dataframe as dd

    frame = dd.from_pandas(pd.DataFrame({"a": np.arange(10.0), "b": np.arange(10)}), npartitions=3)
    r2 = dask.compute(*rsd.save(frame, store, run_offset=100))
    assert sum(x.records for x in r2) == 20
    arr = da.arange(100.0, chunks=25)
    r3 = dask.compute(*rsd.save(arr, store, name="blk", run_offset=200))
    assert len(r3) == 4
    data, rec = rsd.save(
        db.from_sequence(range(6), npartitions=2).map(np.float64),
        store,
        name="p",
        run_offset=300,
        pass_through=True,
    )
    total, receipts = dask.compute(data.sum(), rec)
    assert total == 15 and len(receipts) == 2
    store.refresh()
    assert list(store.get(3, "d")) == [3, 4, 5, 6]
    assert float(store.get(101, "a", 0)) == 4.0  # partition 1 starts at row 4
    assert list(store.get(201, "blk"))[0] == 25.0
    assert float(store.get(301, "p", 2)) == 5.0


def test_killed_worker_reruns_without_duplicates(client, scratch):
    n, per, size = 120, 2, 2 * MiB
    store = runstore.open(scratch / "store")

    def slow(i):
        time.sleep(0.05)
        return make(i, size)

    bag = db.from_sequence(range(n), npartitions=n // per).map(slow)
    fut = client.compute(rsd.save(bag, store, name="k"))
    victim = sorted(client.run(os.getpid).items())[0]

    def kill():
        time.sleep(1.0)
        os.kill(victim[1], signal.SIGKILL)
        print(f"\nkilled worker {victim[0]} pid {victim[1]}")

    t = threading.Thread(target=kill)
    t.start()
    receipts = fut.result()
    t.join()
    s = rsd.summarize(receipts)
    print(s)
    assert s["ok"] == n // per and s["records"] == n
    # Partitions the dead worker had saved whole and Dask ran again: not written again.
    print(f"saved by the dead worker, not written again: {s['saved_earlier']} partitions")
    store.refresh()
    for p in range(n // per):
        for step in range(per):
            assert store.array(p, "k", step)[0] == p * per + step
    client.wait_for_workers(2)
    # The dead worker's segment is unsealed; once the workers' writers are closed (the job's
    # end), a compaction that adopts it reclaims it whole, its uncommitted tail too.
    client.unregister_worker_plugin(rsd.WriterPlugin(store).name)
    before = store.refresh().segments()
    unsealed = [x for x in before if not x.sealed]
    print(f"segments {len(before)}, unsealed {len(unsealed)}, "
          f"bytes {sum(x.file_bytes for x in before)} (data {n * size})")  # fmt: skip
    assert unsealed, "the killed worker left no unsealed segment"
    store.compact(adopt_unsealed=True, retain=0, progress=False)
    after = store.refresh().segments()
    assert all(x.sealed for x in after)
    on_disk = sum(x.file_bytes for x in after)
    print(f"after compaction: segments {len(after)}, bytes {on_disk}")
    assert n * size <= on_disk < n * size * 1.02
    for p in range(n // per):
        for step in range(per):
            assert store.array(p, "k", step)[0] == p * per + step


def test_plan_reasoning_and_bad_input(tmp_path):
    p = rsd.plan(400, "16MiB", "1GiB", 2, 2, k=0.5)
    print(p.reasoning)
    assert p.partition_size == 16 and p.n_partitions == 25
    p.draw(tmp_path / "plan.png")
    assert (tmp_path / "plan.png").stat().st_size > 1000
    with pytest.raises(ValueError, match="object_bytes"):
        rsd.plan(10, "16 furlongs", "1GiB", 1, 1)
    with pytest.raises(ValueError, match="does not fit"):
        rsd.plan(10, "2GiB", "1GiB", 1, 1)
    with pytest.raises(TypeError, match="n_workers"):
        rsd.plan(10, 8, "1GiB", 1, 1.5)


def test_runstore_plan_command_prints_the_reasoning_and_draws(tmp_path):
    """``runstore plan`` as typed (the environment's command), planned without dask."""
    cmd = [sys.executable, "-m", "runstore", "plan", "--objects", "400", "--object-bytes"]
    cmd += ["16MiB", "--worker-memory", "1GiB", "--threads", "2", "--workers", "2", "--k", "0.5"]
    r = subprocess.run([*cmd, "--draw", str(tmp_path / "p.png")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout == rsd.plan(400, "16MiB", "1GiB", 2, 2, k=0.5).reasoning + "\n"
    assert "25 partitions of up to 16 objects" in r.stdout
    assert (tmp_path / "p.png").stat().st_size > 1000
    bad = subprocess.run([*cmd[:7], "2GiB", *cmd[8:]], capture_output=True, text=True)
    assert bad.returncode == 5 and "does not fit" in bad.stderr  # an invalid argument
    # The planner's module imports neither dask nor distributed.
    probe = (
        "import sys, runstore.integrations._plan; "
        "print('dask' in sys.modules, 'distributed' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
