"""Store.compact: many small segments merged into few, and every read the same after."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

import runstore


def _dump(store: runstore.Store) -> dict:
    """Every record of every series (reserved ones too), sorted by key, and the frames."""
    out = {}
    for name in store._core.names(include_reserved=True):
        d = store.scan(name)
        runs = [str(r) if isinstance(r, str) else f"{r:020d}" for r in d["run"]]
        order = sorted(
            range(len(runs)), key=lambda i: (isinstance(d["run"][i], str), runs[i], d["step"][i])
        )
        out[name] = [
            (d["run"][i], int(d["step"][i]), np.asarray(d["value"][i]).tobytes()) for i in order
        ]
    return out


def _write(
    store: runstore.Store, rng: np.random.Generator, writers: int = 3, rounds: int = 6
) -> None:
    for _ in range(rounds):
        for w in range(writers):
            with store.writer(writer_id=f"w{w}") as wr:
                for _ in range(20):
                    run = (
                        f"{int(rng.integers(0, 8)):016x}"
                        if rng.random() < 0.5
                        else int(rng.integers(0, 8))
                    )
                    step = int(rng.integers(0, 5))
                    wr.log(
                        run, step, loss=float(rng.random()), vec=rng.random(3).astype(np.float32)
                    )
                if rng.random() < 0.3:
                    wr.resume(int(rng.integers(0, 8)), int(rng.integers(0, 5)))


def test_compact_keeps_every_record_and_merges_the_segments(store, rng):
    _write(store, rng)
    store.refresh()
    before = _dump(store)
    frame_before = store.to_pandas(["loss"])
    n = len(store.segments())
    assert n >= 10

    dry = store.compact(dry_run=True)
    assert dry["dry_run"] and len(dry["inputs"]) == n and dry["outputs"] == []
    assert len(store.segments()) == n

    report = store.compact(memory_bytes=32 << 20)
    assert len(report["inputs"]) == n
    assert len(report["outputs"]) == 1
    assert len(store.segments()) == 1
    after = _dump(store)
    assert after.keys() == before.keys()
    for name in before:
        assert after[name] == before[name], name
    pd.testing.assert_frame_equal(store.to_pandas(["loss"]), frame_before)
    reopened = runstore.open(store.path, mode="r")
    assert _dump(reopened) == before


def test_replaced_segments_stay_for_older_snapshots_until_a_later_compaction(store, rng):
    _write(store, rng)
    store.refresh()
    before = _dump(store)
    old = runstore.open(store.path, mode="r")  # a snapshot that has read nothing yet
    report = store.compact()
    assert report["retained"] == report["inputs"] and report["inputs"]
    for f in report["inputs"]:
        assert os.path.exists(os.path.join(store.path, f)), f
    assert _dump(old) == before, "an older snapshot reads what it had not opened"
    assert len(store.segments()) == 1
    again = store.compact(retain=0)
    assert sorted(again["removed_leftovers"]) == sorted(report["inputs"])
    assert again["retained"] == []
    for f in report["inputs"]:
        assert not os.path.exists(os.path.join(store.path, f)), f
    assert _dump(store) == before
    with pytest.raises(ValueError, match="negative"):
        store.compact(retain=-1)


def test_compact_filters_select_segments(store, rng):
    _write(store, rng, rounds=2)
    store.refresh()
    assert store.compact(older_than=3600)["inputs"] == []
    assert store.compact(smaller_than=1)["inputs"] == []


def _square(x, seed=0):
    return {"y": x * x + seed, "curve": np.arange(3.0) * x}


def test_experiments_read_the_same_after_compaction(store):
    # Three sweeps over a growing design: designs, status records and results
    # in segments of several writer lives.
    for n in (4, 8, 12):
        store.define_experiments(runstore.grid(x=range(n), seed=[0, 1]))
        runstore.run_experiments(store, _square, workers=0, progress=False)
    store.refresh()
    assert len(store.segments()) >= 3
    table, outcomes = runstore.load_results(store)
    status = store.status()
    report = store.compact()
    assert len(report["outputs"]) == 1
    table2, outcomes2 = runstore.load_results(store)
    pd.testing.assert_frame_equal(table, table2)
    assert outcomes.keys() == outcomes2.keys()
    for k in outcomes:
        np.testing.assert_array_equal(outcomes[k], outcomes2[k])
    pd.testing.assert_frame_equal(status, store.status())
    again = runstore.run_experiments(store, _square, workers=0, progress=False)
    assert again.done == 0, "done is still done after compaction"


def test_compact_of_a_read_only_store_is_refused_unless_dry_run(store, rng):
    _write(store, rng, rounds=1)
    reader = runstore.open(store.path, mode="r")
    assert reader.compact(dry_run=True)["dry_run"]
    with pytest.raises(RuntimeError, match="read-only"):
        reader.compact()
    with pytest.raises(ValueError, match="16 MiB"):
        store.compact(memory_bytes=1 << 20)
