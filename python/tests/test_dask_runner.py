"""run_experiments(client=...) on a real distributed.LocalCluster with 2 worker processes.

Resume (half the sweep, then a rerun that runs only the rest), a failing fn, and a count of
the real invocations of every experiment from a log each one appends to.
"""

from __future__ import annotations

import collections
import os
from pathlib import Path

import numpy as np
import pytest

import runstore
from runstore.experiments import _runner

distributed = pytest.importorskip("distributed")
HERE = Path(__file__).parent


def work(x, log):
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(fd, f"{x} {os.getpid()}\n".encode())
    os.close(fd)
    if x == 3:
        raise RuntimeError("x=3 is not supported")
    return {"y": 10 * x, "pid": os.getpid()}


@pytest.fixture(scope="module")
def client():
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), old]))
    try:
        with (
            distributed.LocalCluster(
                n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0"
            ) as cluster,
            distributed.Client(cluster) as c,
        ):
            yield c
    finally:
        if old is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = old


def test_dask_run_resumes_isolates_failures_and_runs_each_once(tmp_path, store, client):
    n = 60
    log = str(tmp_path / "calls.log")
    store.define_experiments(runstore.grid(x=range(n), log=[log]))
    ids = store.design()
    half = {int(x) for e, x in zip(ids["experiment"], ids["x"]) if _runner.shard_of(e, 2) == 0}
    first = runstore.run_experiments(store, work, shard=(0, 2), client=client, progress=False)
    print("first half:", first)
    assert first.done + first.failed == len(half) and first.workers == 2
    st = store.status().set_index(ids["x"])
    assert set(st.index[st["state"].isin(["done", "failed"])]) == half

    second = runstore.run_experiments(store, work, client=client, progress=False)
    print("rest:", second)
    retried = 1 if 3 in half else 0  # the failed one is retried
    assert second.done + second.failed == n - len(half) + retried
    assert second.skipped == len(half) - retried

    table, outcomes = runstore.load_results(store)
    failed = table[table["state"] == "failed"]
    assert failed["x"].tolist() == [3] and "x=3 is not supported" in failed["error"].iloc[0]
    ok = (table["state"] == "done").to_numpy()
    assert ok.sum() == n - 1
    np.testing.assert_array_equal(outcomes["y"][ok], 10 * table["x"][ok])
    assert len(set(outcomes["pid"][ok].tolist())) == 2  # both worker processes wrote
    for name in ("y", "~status/state"):
        runs = store.scan(name)["run"].tolist()
        assert len(runs) == len(set(runs))
    calls = collections.Counter(int(line.split()[0]) for line in open(log))
    print("invocations:", sum(calls.values()), "for", n, "experiments")
    assert all(calls[x] == 1 for x in range(n) if x != 3) and calls[3] == 1 + retried
    assert store.pending(retry_failed=False) == []
    again = runstore.run_experiments(store, work, client=client, retry_failed=False)
    assert again.done == 0 and again.skipped == n
