"""Writer semantics: commits, the with-block, refresh, resume, later commits winning."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import runstore


class Boom(Exception):
    pass


def test_with_block_commits_and_closes(store):
    with store.writer() as w:
        w.log(1, x=1.0)
    assert w.closed
    store.refresh()
    assert store.get(1, "x") == 1.0


def test_exception_in_with_block_still_commits_then_reraises(store):
    with pytest.raises(Boom):
        with store.writer() as w:
            w.log(1, x=1.0)
            w.log(2, x=2.0)
            raise Boom("task failed")
    assert w.closed
    store.refresh()
    assert store.get(1, "x") == 1.0 and store.get(2, "x") == 2.0


def test_commit_failure_on_exit_keeps_the_original_exception(store, store_path):
    with pytest.raises(Boom) as e:
        with store.writer(writer_id="w") as w:
            w.log(2, x=2.0)
            # The segment file is created at the first commit: make that fail (ENOTDIR).
            os.rename(store_path / "segments", store_path / "moved")
            (store_path / "segments").write_bytes(b"")
            raise Boom("original")
    assert str(e.value) == "original"
    assert any("committing" in n for n in getattr(e.value, "__notes__", []))


def test_nothing_is_visible_before_commit_and_refresh(store_path):
    store = runstore.open(store_path)
    w = store.writer()
    w.log(1, x=1.0)
    reader = runstore.open(store_path, mode="r")
    assert reader.names() == []
    w.commit()
    assert reader.names() == []  # the snapshot is repeatable
    assert reader.refresh().names() == ["x"]
    assert reader.get(1, "x") == 1.0
    w.close()


def test_refresh_sees_another_writers_commits(store_path):
    reader = runstore.open(store_path)
    other = runstore.open(store_path)
    with other.writer() as w:
        w.log("a", loss=0.5)
        w.commit()
        reader.refresh()
        assert reader.get("a", "loss") == 0.5
        w.log("b", loss=0.25)
    with pytest.raises(KeyError):
        reader.get("b", "loss")
    reader.refresh()
    assert reader.get("b", "loss") == 0.25
    assert reader.runs() == ["a", "b"]


def test_flush_is_visible_at_once_and_counted(store_path):
    store = runstore.open(store_path)
    reader = runstore.open(store_path, mode="r")
    with store.writer() as w:
        w.log(1, x=1.0)
        w.commit()
        w.log_many(np.arange(2, 102), x=np.arange(2.0, 102.0))
        w.flush()
        reader.refresh()
        assert reader.scan("x")["value"].shape == (101,)
        w.commit()  # nothing new: only makes the flush durable
        stats = w.stats()
    assert (stats["commits"], stats["flushes"]) == (2, 1)


def test_flush_without_waiting_becomes_visible_without_another_call(store_path):
    store = runstore.open(store_path)
    reader = runstore.open(store_path, mode="r")
    with store.writer() as w:
        w.log_many("r", steps=np.arange(500), x=np.arange(500.0))
        assert w.flush(wait=False) is None
        deadline = time.monotonic() + 120  # patience for a loaded machine, not a speed check
        while time.monotonic() < deadline:
            if "x" in reader.refresh().names():
                break
            time.sleep(0.01)
        assert reader.scan("x")["value"].tolist() == list(np.arange(500.0))  # all of it
        assert w.stats()["flushes"] == 1


def test_commit_without_waiting_returns_a_ticket_to_wait_for(store_path):
    store = runstore.open(store_path)
    with store.writer() as w:
        tickets = []
        for b in range(4):
            w.log_many(np.arange(b * 100, (b + 1) * 100), x=np.arange(b * 100.0, (b + 1) * 100.0))
            if tickets:
                w.wait_for_commit(tickets[-1])
            tickets.append(w.commit(wait=False))
        assert tickets == sorted(tickets) and len(set(tickets)) == 4
        w.wait_for_commit(tickets[-1])
        w.wait_for_commit(tickets[0])  # earlier: already durable
        store.refresh()
        assert store.scan("x")["value"].shape == (400,)
        assert w.commit() > tickets[-1]  # a waited commit has a ticket too
        with pytest.raises(ValueError, match="gave out no commit ticket 99"):
            w.wait_for_commit(99)
    assert w.stats()["commits"] >= 4


def test_commits_made_without_waiting_share_syncs(store_path):
    """A loop that commits with wait=False and waits only for its last ticket: every record is
    committed, each commit counted once, and no more syncs than commits (group commit; the
    C++ tests show the sharing itself with a held sync). A flush's ticket is not durable until
    a later commit."""
    store = runstore.open(store_path)
    with store.writer() as w:
        for b in range(50):
            w.log_many(np.arange(b * 1000, (b + 1) * 1000), trace=np.ones((1000, 100)))
            ticket = w.commit(wait=False)
            assert w.durable_ticket <= ticket
        w.wait_for_commit(ticket)
        assert w.durable_ticket == ticket
        stats = w.stats()
        assert stats["commits"] == 50 and 1 <= stats["syncs"] <= 50, stats
        w.log(0, late=1.0)
        w.flush()
        with pytest.raises(RuntimeError, match=f"ticket {ticket + 1} .* is a flush's"):
            w.wait_for_commit(ticket + 1)
        later = w.commit()
        w.wait_for_commit(ticket + 1)  # made durable by the commit after it
        assert later == ticket + 2
    assert runstore.open(store_path, mode="r").scan("trace")["value"].shape == (50_000, 100)


def test_flushed_records_survive_kill_9(store_path):
    """A real SIGKILL right after flush(): the records are in the OS's hands, so they are there."""
    child = textwrap.dedent(f"""
        import os, signal, numpy as np, runstore
        w = runstore.open({str(store_path)!r}).writer()
        w.log_many(np.arange(1000), loss=np.arange(1000.0), trace=np.ones((1000, 100)))
        w.commit()
        runs = np.arange(1000, 3000)
        w.log_many(runs, loss=runs.astype(float), trace=np.ones((2000, 100)))
        w.flush()
        runs = np.arange(3000, 4000)
        w.log_many(runs, loss=runs.astype(float), trace=np.ones((1000, 100)))
        os.kill(os.getpid(), signal.SIGKILL)  # neither committed nor closed
    """)
    p = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120)
    assert p.returncode == -signal.SIGKILL, p.stderr
    store = runstore.open(store_path, mode="r")
    loss = store.scan("loss")
    np.testing.assert_array_equal(np.sort(loss["run"]), np.arange(3000))  # not the unflushed 1,000
    np.testing.assert_array_equal(loss["value"], loss["run"].astype(np.float64))
    assert store.scan("trace")["value"].shape == (3000, 100)
    store.verify()


def test_resume_hides_later_steps(store):
    with store.writer() as w:
        for step in range(10):
            w.log(7, step=step, loss=float(step))
        w.log(8, step=5, loss=-1.0)
    with store.writer() as w:
        w.resume(7, 4)  # the run restarts from its checkpoint at step 4
        w.log(7, step=4, loss=40.0)
        w.log(7, step=5, loss=50.0)
    store.refresh()
    d = store.scan("loss")
    got = {(r, s): v for r, s, v in zip(d["run"].tolist(), d["step"].tolist(), d["value"].tolist())}
    assert got == {**{(7, s): float(s) for s in range(4)}, (7, 4): 40.0, (7, 5): 50.0, (8, 5): -1.0}
    with pytest.raises(KeyError):
        store.get(7, "loss", 6)
    assert store.get(7, "loss", 3) == 3.0 and store.get(8, "loss", 5) == -1.0
    df = store.to_pandas()
    assert len(df) == 7
    assert "~resume" not in store.names()


def test_same_key_twice_later_commit_wins(store_path):
    store = runstore.open(store_path)
    with store.writer() as w:
        w.log(1, x=1.0, s="first")
        w.commit()
        w.log(1, x=2.0, s="second")
    # A second writer, committing later still.
    time.sleep(0.002)
    with store.writer() as w:
        w.log(1, x=3.0)
    store.refresh()
    assert store.get(1, "x") == 3.0
    assert store.get(1, "s") == "second"
    assert store.series_info("x").count == 1
    d = store.scan("x")
    assert d["value"].tolist() == [3.0]


def test_log_many_variants(store, rng):
    n = 6
    ints = np.arange(n)
    with store.writer() as w:
        w.log_many(ints, a=ints * 1.5)  # int array, steps None
        w.log_many(list(ints), steps=3, b=ints.astype(np.int32))  # list, one step for all
        w.log_many(ints.astype(np.uint16), steps=ints * 10, c=np.ones((n, 2, 2)))  # steps array
        w.log_many([f"r{i}" for i in range(n)], d=[f"text {i}" for i in range(n)])  # str runs, strs
        w.log_many([0, "x", 1], e=[b"a", b"", b"c"])  # mixed runs, bytes
        w.log_many(np.array(["p", "q"]), f=np.array(["u", "v"]))  # numpy str arrays
        w.log_many(range(3), g=[1.0, 2.0, 3.0])  # a list of floats
        w.log_many([], h=np.zeros(0))  # nothing
        w.define("var", "float32", variable_shape=True)
        w.log_many([0, 1], var=[np.zeros(3, np.float32), np.ones((2, 2), np.float32)])
    store.refresh()
    assert store.get(5, "a") == 7.5
    assert store.get(2, "b", 3) == 2 and store.get(2, "b", 3).dtype == np.int32
    assert store.get(4, "c", 40).shape == (2, 2)
    assert store.get("r3", "d") == "text 3"
    assert store.get("x", "e") == b"" and store.get(1, "e") == b"c"
    assert store.get("q", "f") == "v"
    assert store.get(2, "g") == 3.0
    assert "h" not in store.names()
    assert store.get(1, "var").shape == (2, 2)
    d = store.scan("e")
    assert d["run"].dtype == object and sorted(map(str, d["run"].tolist())) == ["0", "1", "x"]


def test_runs_given_as_bytes_arrays_are_the_str_ids_of_their_utf8(store):
    """An array of dtype S holds str run ids as their UTF-8 bytes (as define_experiments hands
    over its derived ids): logged, scanned and read as those strs; one that is not UTF-8 or is
    longer than a run id may be is refused by its row, and nothing of the call is written."""
    strs = ["e0123456789abcdef", "short", "", "ünï", "x" * 3]
    runs = np.array([r.encode() for r in strs], dtype="S17")  # "short" etc. padded with NUL
    with store.writer() as w:
        w.log_many(runs, a=np.arange(5.0))
        w.log_many(runs[::2], steps=1, a=np.arange(3.0))  # a strided view
        with pytest.raises(ValueError, match=r"runs\[1\]: string run id is not valid UTF-8"):
            w.log_many(np.array([b"ok", b"\xff"], dtype="S2"), b=np.zeros(2))
        with pytest.raises(ValueError, match=r"runs\[0\]: run id of \d+ bytes is longer"):
            w.log_many(np.array([b"y" * 5000]), b=np.zeros(1))
    store.refresh()
    assert "b" not in store.names()
    for i, r in enumerate(strs):
        assert store.get(r, "a") == float(i)
    d = store.scan("a", runs=np.array([b"short", "ünï".encode()]))
    assert sorted(d["run"].tolist()) == ["short", "ünï"]
    assert store.scan("a", runs=strs[::2], steps=(1, 2))["value"].tolist() == [
        0.0,
        1.0,
        2.0,
    ]


def test_log_many_with_one_run_id_for_the_whole_batch(store):
    """A run's curve in one call: one run id (int, numpy int or str, a hashed
    experiment id among them), as many records as steps or values."""
    steps = np.arange(1000, 1100)
    with store.writer() as w:
        w.log_many("e0123456789abcdef", steps=steps, reward=steps * 0.5, loss=-steps * 1.0)
        w.log_many(7, steps=list(range(5)), reward=np.arange(5.0))
        w.log_many(np.int64(8), reward=[1.0, 2.0, 3.0])  # steps None: all step 0, last wins
        w.log_many("empty", steps=np.zeros(0, np.int64), reward=np.zeros(0))
        with pytest.raises(TypeError, match="with one run id, steps or the columns must be"):
            w.log_many("r", steps=3, reward=1.0)
        with pytest.raises(ValueError):
            w.log_many("r", steps=[0, 1, 2], reward=np.zeros(2))  # lengths differ
    store.refresh()
    d = store.scan("reward", runs=["e0123456789abcdef"])
    assert d["step"].tolist() == steps.tolist()
    assert d["value"].tolist() == (steps * 0.5).tolist()
    assert set(d["run"].tolist()) == {"e0123456789abcdef"}
    assert store.get("e0123456789abcdef", "loss", 1099) == -1099.0
    assert store.scan("reward", runs=[7])["value"].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert store.get(8, "reward") == 3.0
    assert "empty" not in store.runs() and "r" not in store.runs()
    # A string run id is one run, never the sequence of its characters.
    assert "e" not in store.runs()


def test_series_named_like_parameters_go_in_a_mapping(store):
    """Metrics named run, step, runs, steps, values, columns or not identifiers can be logged."""
    with store.writer() as w:
        w.log("r", step=3, loss=0.5, values={"step": 30.0, "run": 1.0, "loss/train": 0.25})
        w.log("r", step=4, values=7.0)  # not a dict: a series named "values"
        w.log_many("r", steps=[5, 6], columns={"steps": [50.0, 60.0], "runs": [1, 2]}, x=[0, 1])
        w.log_many([1, 2], columns=np.array([9.0, 8.0]))  # not a dict: a series "columns"
        with pytest.raises(ValueError, match="'loss' is given twice"):
            w.log("r", step=9, loss=1.0, values={"loss": 2.0})
        with pytest.raises(TypeError, match="must be str"):
            w.log("r", step=9, values={1: 2.0})
        with pytest.raises(ValueError, match="'x' is given twice"):
            w.log_many("r", steps=[7], x=[1.0], columns={"x": [2.0]})
    store.refresh()
    assert store.get("r", "step", 3) == 30.0 and store.get("r", "run", 3) == 1.0
    assert store.get("r", "loss/train", 3) == 0.25 and store.get("r", "loss", 3) == 0.5
    assert store.get("r", "values", 4) == 7.0
    assert store.scan("steps")["value"].tolist() == [50.0, 60.0]
    assert store.scan("runs")["step"].tolist() == [5, 6]
    assert store.get(2, "columns") == 8.0
    assert store.series_info("loss").count == 1  # the refused calls appended nothing
    assert "x" in store.names() and store.series_info("x").count == 2


def test_define_variable_shape_and_codec(store):
    with store.writer() as w:
        w.define("img", np.uint8, variable_shape=True, codec="zstd")
        w.define("vec", "float64", shape=(3,))
        w.log(1, img=np.zeros((4, 5), np.uint8), vec=np.ones(3))
        w.log(2, img=np.zeros(7, np.uint8))
        with pytest.raises(ValueError):
            w.log(3, vec=np.ones(4))
    store.refresh()
    info = store.series()
    assert info["img"].variable_shape and info["img"].shape is None
    assert info["vec"].shape == (3,)
    assert store.get(1, "img").shape == (4, 5) and store.get(2, "img").shape == (7,)
    assert not store.get(1, "img").base.zero_copy
    d = store.scan("img")
    assert d["value"].dtype == object
    assert sorted(v.shape for v in d["value"]) == [(4, 5), (7,)]


def test_stats_and_auto_commit(store_path):
    store = runstore.open(store_path)
    reader = runstore.open(store_path, mode="r")
    with store.writer(commit_every_bytes=1000, buffer_bytes=1 << 20) as w:
        for i in range(500):
            w.log(i, x=float(i))
        deadline = time.time() + 5
        while reader.refresh().names() == [] and time.time() < deadline:
            time.sleep(0.01)
        assert reader.names() == ["x"]  # auto-committed without a commit() call
        # The commit record is visible to readers a moment before its fsync
        # returns and the writer counts it.
        while w.stats()["commits"] == 0 and time.time() < deadline:
            time.sleep(0.01)
        s = w.stats()
        assert s["records_appended"] == 500 and s["commits"] >= 1
        assert set(s) >= {
            "bytes_appended",
            "bytes_written",
            "backpressure_waits",
            "peak_buffered_bytes",
        }
    assert "Writer" in repr(w) and "closed" in repr(w)


def test_commit_every_s(store_path):
    store = runstore.open(store_path)
    reader = runstore.open(store_path, mode="r")
    with store.writer(commit_every_s=0.05) as w:
        w.log(1, x=1.0)
        deadline = time.time() + 5
        while reader.refresh().names() == [] and time.time() < deadline:
            time.sleep(0.01)
        assert reader.get(1, "x") == 1.0


def test_back_pressure_keeps_memory_bounded(store_path):
    buffer = 1 << 20
    with runstore.open(store_path).writer(buffer_bytes=buffer) as w:
        block = np.zeros((1000, 100))
        for i in range(40):  # 32 MB through a 1 MiB buffer
            w.log_many(np.arange(i * 1000, (i + 1) * 1000), t=block)
        s = w.stats()
    assert s["peak_buffered_bytes"] <= 2 * buffer
    assert runstore.open(store_path, mode="r").series_info("t").count == 40_000


def test_store_info_segments_and_verify(store):
    with store.writer(writer_id="w1") as w:
        w.log(1, x=1.0, t=np.zeros(10))
    store.refresh()
    info = store.info()
    assert info["series"] == 2 and info["records"] == 2 and info["segments"] == 1
    (seg,) = store.segments()
    assert seg.writer_id == "w1" and seg.sealed and seg.file.startswith("segments/w1-")
    assert store.verify() >= 2


def test_store_pickles_by_path(store_path):
    import pickle

    store = runstore.open(store_path)
    with store.writer() as w:
        w.log(1, x=1.0)
    clone = pickle.loads(pickle.dumps(runstore.open(store_path, mode="r")))
    assert clone.mode == "r" and clone.path == store.path and clone.get(1, "x") == 1.0
    with pytest.raises(TypeError):
        pickle.dumps(store.writer())


def test_log_with_a_conflicting_value_appends_nothing_of_that_call(store):
    with store.writer() as w:
        w.log(1, loss=0.5, epochs=np.int32(3))
        with pytest.raises(ValueError, match="int32"):
            w.log(2, loss=0.25, epochs=2.5)  # epochs is int32: loss must not be appended either
        with pytest.raises(ValueError, match="reserved"):
            w.log(3, **{"~resume": 1})
    store.refresh()
    assert store.get(1, "loss") == 0.5
    with pytest.raises(KeyError):
        store.get(2, "loss")
