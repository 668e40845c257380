"""Wall-clock time per record: Store.writer(record_time=True), scan(with_time=True),
to_pandas(time=True)."""

from __future__ import annotations

import time

import numpy as np
import pytest

import runstore


def test_times_of_log_put_and_log_many(tmp_path):
    store = runstore.open(tmp_path / "s")
    t0 = time.time()
    with store.writer(record_time=True) as w:
        for s in range(50):
            w.log("e3f1c2a9b4d5e6f7", step=s, loss=1.0 / (s + 1), reward=float(s))
            if s == 25:
                time.sleep(0.05)
        w.put(3, "loss", 0.5, step=9)
        w.log_many("q", steps=np.arange(10), loss=np.zeros(10), tag=["a"] * 10)
    t1 = time.time()
    d = store.refresh().scan("loss", with_time=True)
    assert len(d["time"]) == len(d["value"]) == 61
    assert np.all((d["time"] >= t0 - 1e-3) & (d["time"] <= t1 + 1e-3))
    run = d["run"]
    mine = d["time"][np.array([r == "e3f1c2a9b4d5e6f7" for r in run])]
    assert np.all(np.diff(mine) >= 0), "a run's steps were logged in order"
    assert mine[26] - mine[25] >= 0.04, "the pause shows"
    df = store.to_pandas(time=True)
    assert list(df.columns[:3]) == ["run", "step", "time"]
    assert df["time"].notna().all()
    # The time series is runstore's own: not among the user's names.
    assert "~time" not in store.names()


def test_records_of_writers_without_it_have_no_time(tmp_path):
    store = runstore.open(tmp_path / "s")
    with store.writer() as w:
        w.log("a", step=0, loss=1.0)
    assert np.isnan(store.refresh().scan("loss", with_time=True)["time"]).all()
    with store.writer(record_time=True) as w:
        w.log("b", step=0, loss=2.0)
    d = store.refresh().scan("loss", with_time=True)
    by_run = dict(zip(d["run"].tolist(), d["time"].tolist(), strict=True))
    assert np.isnan(by_run["a"]) and not np.isnan(by_run["b"])
    with pytest.raises(ValueError, match="keys=True"):
        store.scan("loss", keys=False, with_time=True)


def test_resume_hides_the_times_of_redone_steps_with_their_records(tmp_path):
    store = runstore.open(tmp_path / "s")
    with store.writer(record_time=True) as w:
        for s in range(10):
            w.log("r", step=s, loss=float(s))
    first = store.refresh().scan("loss", with_time=True)["time"]
    time.sleep(0.02)
    with store.writer(record_time=True) as w:
        w.resume("r", 5)
        for s in range(5, 10):
            w.log("r", step=s, loss=-float(s))
    d = store.refresh().scan("loss", with_time=True)
    order = np.argsort(d["step"])
    assert d["value"][order].tolist() == [0, 1, 2, 3, 4, -5, -6, -7, -8, -9]
    t = d["time"][order]
    assert np.array_equal(t[:5], np.sort(first)[:5])
    assert np.all(t[5:] > np.max(first)), "the redone steps carry their new times"
    df = store.to_pandas(time=True, runs=["r"], steps=(5, 10))
    assert np.array_equal(df["time"].to_numpy(), t[5:])
