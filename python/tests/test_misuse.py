"""The misuse suite: what a careless (or hurried) user does with writers.

- One writer shared by many threads, one of which closes it while the others log, commit and
  flush: every call that returned is committed, every later one raises, nothing is half there.
- Two processes given one writer id (a job started twice, a task rerun while its first attempt
  lives; docs/design.md "Writer ids"): both commit, nothing is lost, and no segment file holds
  records of both.

Writers and stores across fork() are in test_fork.py. Each test prints what it tried.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
from conftest import SEED

import runstore


def test_threads_log_commit_and_flush_while_another_closes_the_writer(store, rng):
    """Calls held on the step tape returned as logged: a close that met them must append them.
    Close drained the tape, then turned it off; a drain that released the GIL (under
    back-pressure) let another thread tape calls in between, and those were never written."""
    threads, per_thread = 6, 4000
    # A small buffer, so that appends wait for space and the writer releases the GIL.
    w = store.writer(buffer_bytes=1 << 16)
    returned: list[list[int]] = [[] for _ in range(threads)]
    errors: list[list[str]] = [[] for _ in range(threads)]
    close_after = int(rng.integers(threads * per_thread // 4, threads * per_thread // 2))
    logged = [0]
    lock = threading.Lock()
    start = threading.Barrier(threads + 1)
    due = threading.Event()

    def log(t: int) -> None:
        start.wait()
        for i in range(per_thread):
            step = t * per_thread + i
            try:
                w.log(t, step=step, x=float(step), y=step)  # one shape: taped
            except RuntimeError as e:
                errors[t].append(str(e))
                continue
            returned[t].append(step)
            with lock:
                logged[0] += 1
                if logged[0] == close_after:
                    due.set()
            try:
                if i % 500 == 499:
                    w.commit(wait=bool(i % 1000))
                elif i % 333 == 0:
                    w.flush(wait=False)
            except RuntimeError as e:
                errors[t].append(str(e))

    def close() -> None:
        start.wait()
        due.wait()
        w.close()

    pool = [threading.Thread(target=log, args=(t,)) for t in range(threads)]
    pool.append(threading.Thread(target=close))
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    store.refresh()
    d = store.scan("x")
    got = set(d["step"].tolist())
    want = {s for r in returned for s in r}
    n_errors = sum(len(e) for e in errors)
    print(
        f"{threads} threads, {threads * per_thread} log calls, close after {close_after} "
        f"(seed {SEED}): "
        f"{len(want)} returned, {n_errors} raised, {len(got)} in the store"
    )
    assert want - got == set(), f"{len(want - got)} calls returned but were not committed"
    assert got == want, "a record whose call raised is in the store"
    assert all("closed" in e for es in errors for e in es), {e for es in errors for e in es}
    y = store.scan("y")  # both values of every call, or neither
    assert set(y["step"].tolist()) == got
    np.testing.assert_array_equal(np.sort(y["value"]), np.sort(d["value"]).astype(np.int64))
    assert store.verify() > 0


SAME_ID = """
import sys
import numpy as np
import runstore
store = runstore.open(sys.argv[1])
first, last = int(sys.argv[2]), int(sys.argv[3])
print("ready", flush=True)
sys.stdin.readline()  # both start together
with store.writer(writer_id="same", segment_bytes=1 << 16) as w:
    for run in range(first, last):
        w.log(run, x=float(run), pad=np.full(512, run, dtype=np.float64))
        if run % 7 == 0:
            w.commit()
"""


def test_two_processes_with_one_writer_id_both_commit_and_share_no_file(store, tmp_path):
    script = tmp_path / "same_id.py"
    script.write_text(textwrap.dedent(SAME_ID))
    ranges = [(0, 400), (1000, 1400)]
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), store.path, str(a), str(b)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for a, b in ranges
    ]
    for p in procs:
        assert p.stdout.readline().strip() == "ready"
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    for p in procs:
        p.communicate(timeout=120)
        assert p.returncode == 0
    store.refresh()
    runs = np.sort(store.scan("x")["run"])
    want = np.concatenate([np.arange(a, b) for a, b in ranges])
    np.testing.assert_array_equal(runs, want)  # nothing lost, nothing twice
    # Each segment file holds the records of one process only: read alone, its runs are all
    # in one process's range.
    segments = sorted(Path(store.path, "segments").glob("same-*.rss"))
    for i, f in enumerate(segments):
        one = tmp_path / f"one{i}"
        (one / "segments").mkdir(parents=True)
        shutil.copy(Path(store.path, "RUNSTORE"), one / "RUNSTORE")
        shutil.copy(f, one / "segments" / f.name)
        got = runstore.open(one, mode="r").scan("x")["run"]
        owners = {next(k for k, (a, b) in enumerate(ranges) if a <= r < b) for r in got.tolist()}
        assert len(owners) <= 1, f"{f.name} holds records of both processes"
    print(
        f"two processes with writer id 'same': {len(segments)} segment files, "
        f"{len(runs)} records, none lost, no file shared"
    )
    assert len(segments) > 2 and store.verify() > 0


def test_arrays_held_past_a_budget_of_four_mappings_stay_right(tmp_path):
    """A process's segment budget, lowered to 4 mappings and 2 open files, over 60 segments: every
    array read stays right while later reads make its segment give its mapping up (an array keeps
    its own). A budget of 0 is refused, naming it, and one in the environment that is not a
    number is named when a store is opened."""
    before = runstore.segment_budget()
    assert before[0] >= 1 and before[1] >= 1
    path = tmp_path / "s"
    st = runstore.open(path)
    n = 60
    for i in range(n):
        with st.writer(writer_id="one") as w:  # a segment each: opened, logged, closed
            w.put(i, "a", np.full(1000, i, dtype=np.float64))
    try:
        assert runstore.segment_budget(4, 2) == (4, 2)
        st = runstore.open(path)
        assert len(st.segments()) == n
        held = [st.get(i, "a") for i in range(n)]
        for i, a in enumerate(held):
            assert a.shape == (1000,) and (a == i).all(), i
        assert sorted(int(r) for r in st.runs()) == list(range(n))
    finally:
        runstore.segment_budget(*before)
    assert runstore.segment_budget() == before
    for bad, error, text in (
        ((0, None), ValueError, "mappings=0 must be from 1 to 2**32"),
        ((None, 0), ValueError, "files=0 must be from 1 to 2**32"),
        ((-1, None), ValueError, "mappings=-1 must be from 1 to 2**32"),
        ((2**70, None), ValueError, f"mappings={2**70} must be from 1 to 2**32"),
        ((True, None), TypeError, "mappings must be an int, got bool"),
        ((None, 1.5), TypeError, "files must be an int, got float"),
        (("8", None), TypeError, "mappings must be an int, got str"),
    ):
        try:
            runstore.segment_budget(*bad)
        except error as e:
            assert text in str(e), (bad, str(e))
        else:
            raise AssertionError(f"segment_budget{bad} was accepted")
        assert runstore.segment_budget() == before
    assert runstore.segment_budget(np.int64(7), None) == (7, before[1])
    runstore.segment_budget(*before)
    code = f"import runstore; runstore.open({str(path)!r})"
    env = {**os.environ, "RUNSTORE_SEGMENT_MAPPINGS": "many"}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode != 0
    assert "RUNSTORE_SEGMENT_MAPPINGS='many' is not a whole number" in r.stderr, r.stderr
    print(f"segment budget: {n} segments read under 4 mappings and 2 files, {n} arrays held")
