"""Damaged segments: a store with one segment that cannot be read fails to open by default,
naming the file and the option; with ``on_damaged="skip"`` it serves every other segment and
says exactly what it left out."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pandas as pd
import pytest

import runstore

WRITERS = 4
RUNS_PER_WRITER = 10
STEPS = 5
HINT = '(open with on_damaged="skip" to read the other segments)'


def loss(run: int, step: int) -> float:
    return run * 100.0 + step * 0.25


def trace(run: int) -> np.ndarray:
    return np.arange(6.0).reshape(2, 3) + run


def make_store(path) -> None:
    """WRITERS writers w0.., writer k logging runs 10k..10k+9: a scalar series per step, an
    array and a string at step 0; and a design of all 40 runs as experiments."""
    store = runstore.open(path)
    n = WRITERS * RUNS_PER_WRITER
    store.define_experiments(pd.DataFrame({"experiment": np.arange(n), "lr": np.arange(n) * 0.1}))
    for k in range(WRITERS):
        with store.writer(writer_id=f"w{k}") as w:
            for run in range(k * RUNS_PER_WRITER, (k + 1) * RUNS_PER_WRITER):
                for step in range(STEPS):
                    w.log(run, step, loss=loss(run, step))
                w.put(run, "trace", trace(run))
                w.put(run, "label", f"run {run}")
                w.put(run, "score", float(run) / 7)


def damage(path) -> list[str]:
    """Flips a byte of w2's segment header (inside the writer id, so that the header checksum
    fails) and puts a FIFO where a segment of writer z would be. Returns both files."""
    seg = path / "segments" / "w2-00000001.rss"
    data = bytearray(seg.read_bytes())
    data[50] ^= 0x08
    seg.write_bytes(bytes(data))
    os.mkfifo(path / "segments" / "z-00000001.rss")
    return ["segments/w2-00000001.rss", "segments/z-00000001.rss"]


@pytest.fixture
def damaged(store_path):
    make_store(store_path)
    return store_path, damage(store_path)


def readable_runs() -> list[int]:
    return [r for r in range(WRITERS * RUNS_PER_WRITER) if r // RUNS_PER_WRITER != 2]


@pytest.mark.parametrize("mode", ["a", "r", "r+"])
def test_a_damaged_segment_fails_open_naming_the_file_and_the_option(damaged, mode):
    path, files = damaged
    with pytest.raises((runstore.CorruptionError, OSError)) as e:
        runstore.open(path, mode=mode)
    assert any(os.path.basename(f) in str(e.value) for f in files), str(e.value)
    assert str(e.value).endswith(HINT)


def test_an_unreadable_segment_alone_is_an_os_error_with_the_hint(store_path):
    make_store(store_path)
    os.mkfifo(store_path / "segments" / "z-00000001.rss")
    with pytest.raises(OSError) as e:
        runstore.open(store_path, mode="r")
    assert "z-00000001.rss" in str(e.value) and "FIFO" in str(e.value)
    assert str(e.value).endswith(HINT)


def test_a_refresh_that_meets_a_damaged_segment_raises_and_keeps_the_snapshot(store_path):
    make_store(store_path)
    store = runstore.open(store_path, mode="r")
    damage(store_path)
    with pytest.raises((runstore.CorruptionError, OSError)) as e:
        store.refresh()
    assert str(e.value).endswith(HINT)
    assert store.get(25, "loss", 3) == loss(25, 3)  # the snapshot taken before


def test_skip_lists_exactly_the_damaged_segments(damaged):
    path, files = damaged
    store = runstore.open(path, mode="r", on_damaged="skip")
    assert store.on_damaged == "skip"
    left_out = store.damaged_segments
    assert [d.file for d in left_out] == files
    assert all(isinstance(d, runstore.DamagedSegment) for d in left_out)
    w2, fifo = left_out
    assert w2.kind == "Corruption" and "w2-00000001.rss" in w2.message and "offset 0" in w2.message
    assert fifo.kind == "IOError" and "FIFO" in fifo.message
    with pytest.raises(AttributeError):
        w2.file = "x"  # frozen
    assert store.info()["damaged_segments"] == 2
    assert "on_damaged='skip'" in repr(store)


def test_skip_reads_every_other_writer_exactly(damaged):
    path, _ = damaged
    store = runstore.open(path, mode="r", on_damaged="skip")
    runs = readable_runs()
    # get
    for run in runs:
        for step in range(STEPS):
            assert store.get(run, "loss", step) == loss(run, step)
        np.testing.assert_array_equal(store.get(run, "trace"), trace(run))
        assert store.get(run, "label") == f"run {run}"
    for step in range(STEPS):
        with pytest.raises(KeyError):
            store.get(25, "loss", step)
    assert sorted(store.runs()) == runs
    # scan
    d = store.scan("loss")
    order = np.lexsort((d["step"], d["run"]))
    want_runs = np.repeat(runs, STEPS)
    want_steps = np.tile(np.arange(STEPS), len(runs))
    np.testing.assert_array_equal(d["run"][order], want_runs)
    np.testing.assert_array_equal(d["step"][order], want_steps)
    np.testing.assert_array_equal(
        d["value"][order], [loss(r, s) for r, s in zip(want_runs, want_steps)]
    )
    t = store.scan("trace")
    order = np.argsort(t["run"])
    np.testing.assert_array_equal(t["value"][order], np.stack([trace(r) for r in runs]))
    # to_pandas
    df = store.to_pandas(["loss", "score"])
    assert list(df["run"].unique()) == runs
    np.testing.assert_array_equal(df["loss"], [loss(r, s) for r in runs for s in range(STEPS)])
    # load_results: the design is intact; w2's experiments have no outcomes
    experiments, outcomes = runstore.load_results(store, ["score", "trace", "label"])
    assert list(experiments["experiment"]) == list(range(WRITERS * RUNS_PER_WRITER))
    score = outcomes["score"]
    for run in range(WRITERS * RUNS_PER_WRITER):
        if run in runs:
            assert score[run] == run / 7
            np.testing.assert_array_equal(outcomes["trace"][run], trace(run))
        else:
            assert np.isnan(score[run]) and np.isnan(outcomes["trace"][run]).all()
    assert outcomes["label"].mask.tolist() == [r not in runs for r in range(40)]


def test_verify_reports_the_damaged_segments(damaged):
    path, files = damaged
    store = runstore.open(path, mode="r", on_damaged="skip")
    with pytest.raises(runstore.CorruptionError) as e:
        store.verify()
    assert str(e.value).startswith("2 problems: ")
    assert all(os.path.basename(f) in str(e.value) for f in files)
    assert len(e.value.problems) == 2
    assert (
        e.value.problems[0].startswith("Corruption: ") and "w2-00000001.rss" in e.value.problems[0]
    )
    assert e.value.problems[1].startswith("IOError: ") and "z-00000001.rss" in e.value.problems[1]


def test_a_healthy_store_has_no_damaged_segments(store_path):
    make_store(store_path)
    for on_damaged in ("raise", "skip"):
        store = runstore.open(store_path, mode="r", on_damaged=on_damaged)
        assert store.damaged_segments == []
        assert store.verify() > 0
    assert runstore.open(store_path).on_damaged == "raise"


@pytest.mark.parametrize("bad", ["ignore", "Skip", "", None, True, 1])
def test_on_damaged_takes_raise_or_skip(store_path, bad):
    with pytest.raises(ValueError, match="on_damaged must be 'raise' or 'skip'"):
        runstore.open(store_path, on_damaged=bad)
    assert not store_path.exists()


def test_a_skipping_store_pickles_with_its_option(damaged):
    path, files = damaged
    store = runstore.open(path, mode="r", on_damaged="skip")
    again = pickle.loads(pickle.dumps(store))
    assert again.on_damaged == "skip" and again.mode == "r"
    assert [d.file for d in again.damaged_segments] == files
    lazy = pickle.loads(pickle.dumps(store.array(5, "trace")))
    np.testing.assert_array_equal(np.asarray(lazy), trace(5))
