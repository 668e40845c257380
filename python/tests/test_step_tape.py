"""The step tape (docs/design.md#step-tape): Writer.log calls shaped like the call before them
are held and appended as a batch. Whatever the calls, the store must end up exactly as if each
had been appended when it was made, and every other call of the writer must see them first."""

from __future__ import annotations

import gc
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from conftest import SEED

import runstore

NAMES = ("reward", "loss", "entropy")


def everything(store):
    """Every series of the store as {name: [(run, step, value), ...]} in scan order."""
    store.refresh()
    out = {}
    for name in store.names():
        d = store.scan(name)
        out[name] = list(
            zip(d["run"].tolist(), d["step"].tolist(), d["value"].tolist(), strict=True)
        )
    return out


def random_calls(w, rng, n):
    """n calls of the kinds a training loop and its mistakes make, from one seed."""
    runs = ["run-a", "run-b", 7, 8]
    step = 0
    last = (runs[0], 0)  # the run and step of the last call of log
    w.log(runs[0], step=0, reward=0.0, loss=0.0, entropy=0.0, count=0)  # the series' dtypes
    for _ in range(n):
        kind = rng.random()
        if rng.random() < 0.7:
            step += 1
        else:
            step = int(rng.integers(0, step + 1))  # a step again: later wins
        run = runs[0] if rng.random() < 0.8 else runs[int(rng.integers(0, len(runs)))]
        if isinstance(run, str) and rng.random() < 0.3:
            run = "".join(["run-", run[4:]])  # the same id, another object
        r, lo, e = float(rng.random()), float(rng.random()), float(rng.random())
        if kind < 0.78:
            last = (run, 0 if 0.65 <= kind < 0.70 else step)
        if kind < 0.55:
            w.log(run, step=step, reward=r, loss=lo, entropy=e)
        elif kind < 0.65:
            w.log(run, step, reward=r, loss=lo, entropy=e)  # step by position
        elif kind < 0.70:
            w.log(run, reward=r, loss=lo, entropy=e)  # step 0
        elif kind < 0.78:
            w.log(run, step=step, reward=r)  # another shape
        elif kind < 0.82:
            w.log(run, step=step, count=int(rng.integers(0, 1000)))  # an int series
        elif kind < 0.85:
            with pytest.raises(ValueError, match="dtype float64"):
                w.log(run, step=step, reward=r, loss="bad", entropy=e)  # nothing of it
        elif kind < 0.88:
            with pytest.raises(ValueError, match="dtype float64"):
                w.log(run, step=step, reward=True, loss=lo, entropy=e)  # bool into float64
        elif kind < 0.91:
            w.put(last[0], "reward", r, step=last[1])  # the key a taped call just wrote
        elif kind < 0.94:
            w.log_many(last[0], steps=[last[1], last[1] + 1], loss=np.array([lo, e]))
        elif kind < 0.97:
            w.flush()
        else:
            w.commit(wait=bool(rng.random() < 0.5))


@pytest.mark.parametrize("seed", ["session", 1, 2])
@pytest.mark.parametrize("record_time", [False, True])
def test_taped_calls_store_what_each_call_appended_at_once_would(tmp_path, seed, record_time):
    seed = SEED if seed == "session" else seed  # the session's (RUNSTORE_TEST_SEED) and two fixed
    print(f"seed {seed}")
    rng = np.random.default_rng(seed)
    taped = runstore.open(tmp_path / "taped")
    with taped.writer(record_time=record_time) as w:
        random_calls(w, rng, 3000)
    rng = np.random.default_rng(seed)
    direct = runstore.open(tmp_path / "direct")
    # commit_every_s turns the tape off (and an hour never comes due here).
    with direct.writer(commit_every_s=3600, record_time=record_time) as w:
        random_calls(w, rng, 3000)
    got, want = everything(taped), everything(direct)
    assert set(got) == set(want) >= set(NAMES)
    for name in want:
        assert got[name] == want[name], name
    if record_time:  # a time for every record, as without the tape (the times themselves differ)
        for name in NAMES:
            times = taped.scan(name, with_time=True)["time"]
            assert len(times) == len(want[name]) and not np.isnan(times).any(), name


def test_each_taped_call_keeps_the_time_it_was_made(tmp_path):
    store = runstore.open(tmp_path / "s")
    before = []
    with store.writer(record_time=True) as w:
        for s in range(600):
            before.append(time.time())
            w.log("r", step=s, x=float(s))
            if s % 10 == 9:
                time.sleep(0.002)  # a time taken at the append would be tens of ms late
        before.append(time.time())
    got = store.refresh().scan("x", with_time=True)
    assert got["step"].tolist() == list(range(600))
    # Taken at the call, not when the tape was appended (every 256 calls, or at close).
    slack = 1e-3
    for s, t in enumerate(got["time"].tolist()):
        assert before[s] - slack <= t <= before[s + 1] + slack, (s, t, before[s], before[s + 1])


def test_every_other_call_sees_the_taped_records_first(tmp_path):
    store = runstore.open(tmp_path / "s")
    w = store.writer()
    for s in range(10):
        w.log("r", step=s, a=float(s), b=float(-s))
    assert w.stats()["records_appended"] == 20
    w.flush()
    assert len(runstore.open(tmp_path / "s", mode="r").scan("a")["step"]) == 10
    for s in range(10, 15):
        w.log("r", step=s, a=float(s), b=float(-s))
    w.put("r", "a", 99.0, step=15)  # after them, in order
    w.commit()
    got = runstore.open(tmp_path / "s", mode="r").scan("a")
    assert got["step"].tolist() == list(range(16))
    assert got["value"].tolist()[-1] == 99.0
    for s in range(16, 20):
        w.log("r", step=s, a=float(s), b=float(-s))
    w.resume("r", 18)  # commits the taped records first, then hides steps >= 18
    w.close()
    # b has no step 15 (the put was of a); 18 and 19 are hidden.
    got = runstore.open(tmp_path / "s", mode="r").scan("b")["step"].tolist()
    assert got == [*range(15), 16, 17]


def test_a_writer_dropped_without_close_still_commits_what_was_taped(tmp_path):
    store = runstore.open(tmp_path / "s")
    w = store.writer()
    for s in range(50):
        w.log("r", step=s, x=float(s))
    del w
    gc.collect()
    assert store.refresh().scan("x")["step"].tolist() == list(range(50))


def test_a_call_after_close_raises_however_it_is_shaped(tmp_path):
    w = runstore.open(tmp_path / "s").writer()
    for s in range(3):
        w.log("r", step=s, x=1.0)
    w.close()
    with pytest.raises(RuntimeError, match="closed"):
        w.log("r", step=3, x=1.0)


def test_threads_logging_into_one_writer_lose_and_repeat_nothing(tmp_path):
    store = runstore.open(tmp_path / "s")
    w = store.writer()
    n, threads = 5000, 4
    stop = threading.Event()

    def logger(t):
        for s in range(n):
            w.log(f"thread-{t}", step=s, x=float(s), y=float(t))

    def committer():
        while not stop.is_set():
            w.commit(wait=False)
            time.sleep(0.001)

    c = threading.Thread(target=committer)
    c.start()
    ts = [threading.Thread(target=logger, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    stop.set()
    c.join()
    w.close()
    d = store.refresh().scan("x")
    keys = sorted(zip(d["run"].tolist(), d["step"].tolist(), strict=True))
    assert keys == sorted((f"thread-{t}", s) for t in range(threads) for s in range(n))


def test_a_sigkill_keeps_every_committed_step_and_no_other(tmp_path):
    path = tmp_path / "s"
    code = f"""
import os, signal, runstore
w = runstore.open({str(path)!r}).writer()
for s in range(1234):
    w.log("r", step=s, x=float(s), y=2.0 * s)
w.commit()
for s in range(1234, 1300):
    w.log("r", step=s, x=float(s), y=2.0 * s)   # taped, never committed
os.kill(os.getpid(), signal.SIGKILL)
"""
    p = subprocess.run([sys.executable, "-c", code], check=False)
    assert p.returncode == -signal.SIGKILL
    store = runstore.open(path, mode="r")
    for name, k in (("x", 1.0), ("y", 2.0)):
        d = store.scan(name)
        assert d["step"].tolist() == list(range(1234))
        assert d["value"].tolist() == [k * s for s in range(1234)]


def test_a_timed_commit_finds_what_was_logged_without_another_call(tmp_path):
    store = runstore.open(tmp_path / "s")
    w = store.writer(commit_every_s=0.2)
    for s in range(3):
        w.log("r", step=s, x=float(s))
    deadline = time.monotonic() + 120  # patience for a loaded machine, not a speed check
    reader = runstore.open(tmp_path / "s", mode="r")
    while time.monotonic() < deadline:
        if "x" in reader.refresh().names() and len(reader.scan("x")["step"]) == 3:
            break
        time.sleep(0.05)
    assert reader.scan("x")["step"].tolist() == [0, 1, 2]
    w.close()


def test_a_write_error_is_raised_by_the_call_that_meets_it(tmp_path):
    # The same shape into a series the store already holds with another dtype: the first call
    # raises, and no later call of that shape is taped past the error.
    store = runstore.open(tmp_path / "s")
    with store.writer() as w:
        w.log("r", step=0, x=np.int32(1))
    with store.writer() as w:
        for s in range(3):
            with pytest.raises(ValueError, match="conflicting"):
                w.log("r", step=s + 1, x=1.5)
    assert store.refresh().scan("x")["step"].tolist() == [0]
