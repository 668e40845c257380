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


def test_failed_partition_is_a_receipt_and_the_others_go_on(client, scratch):
    store = runstore.open(scratch / "store")

    def boom(i):
        if i == 5:
            raise ValueError("element five")
        return np.float64(i)

    bag = db.from_sequence(range(10), npartitions=5).map(boom)
    receipts = rsd.collect(rsd.save(bag, store, name="x"), client)
    s = rsd.summarize(receipts)
    print(s)
    assert s["partitions"] == 5 and s["failed"] == 1 and s["ok"] == 4
    assert "ValueError: element five" in s["errors"][2]
    assert [r.partition for r in receipts] == [0, 1, 2, 3, 4]
    store.refresh()
    for i in (0, 1, 2, 3, 6, 7, 8, 9):
        assert float(store.get(i // 2, "x", i % 2)) == float(i)
    with pytest.raises(KeyError):
        store.get(2, "x", 0)  # the failed partition logged nothing
    # Plain compute() is Dask's: the upstream error propagates.
    with pytest.raises(ValueError, match="element five"):
        rsd.save(bag, store, name="x").compute()
    # An error inside the save itself (a value runstore refuses) is a receipt either way.
    bad = db.from_sequence([np.float64(1), object()], npartitions=2)
    r = rsd.save(bad, store, name="y").compute()
    assert [x.ok for x in r] == [True, False] and "object" in r[1].error.lower()
    with pytest.raises(TypeError, match="what runstore.dask.save returned"):
        rsd.collect(42, client)


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
    assert s["ok"] == n // per
    store.refresh()
    for p in range(n // per):
        for step in range(per):
            assert store.array(p, "k", step)[0] == p * per + step
    client.wait_for_workers(2)


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
