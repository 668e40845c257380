"""Writers and stores across fork() (docs/design.md#fork), part of the misuse suite.

A writer belongs to the process that opened it: in a child of fork() (multiprocessing's fork
start method, os.fork) every method raises RuntimeError saying to open a writer in the child, the
step tape's path included; garbage collection there raises nothing and writes nothing; the
parent's writer goes on and loses nothing. A store opened in the parent reads in the child, unless
another thread of the parent was inside one of its calls at the fork, which the child is told.
run_experiments completes a sweep exactly once under each start method.

Each test prints what it tried.
"""

from __future__ import annotations

import gc
import json
import os
import pickle
import sys
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import runstore

FORKED = "a child of fork()"
OPEN_ONE = "Open a writer in this process: store.writer()"


def in_child(body: Callable[[], Any]) -> Any:
    """Runs ``body`` in a child of os.fork() and returns what it returned (JSON), or raises
    AssertionError with the child's traceback. The child leaves with os._exit: nothing of the
    parent's (pytest, its writers) runs its exit code there."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(r)
        try:
            out = {"ok": body()}
        except BaseException:  # noqa: BLE001 - reported to the parent
            out = {"error": traceback.format_exc()}
        with os.fdopen(w, "w") as f:
            json.dump(out, f)
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        text = f.read()
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"child status {status}"
    out = json.loads(text)
    assert "error" not in out, out["error"]
    return out["ok"]


def files_of(*dirs: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``dirs``: (size, mtime_ns)."""
    out = {}
    for d in dirs:
        for p in sorted(Path(d).rglob("*")):
            st = p.lstat()
            out[str(p)] = (st.st_size, st.st_mtime_ns)
    return out


def changed_files(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """What a child changed of ``before``. The parent's own threads go on meanwhile: a staging
    writer's lease thread rewrites its lease (compared by name only), and its shipper may claim
    the next segment number ahead (a new empty segment file)."""
    out = []
    for name, what in before.items():
        if name.endswith(".lease.tmp"):
            continue
        if name not in after:
            out.append(f"{name} was removed")
        elif not name.endswith(".lease") and tuple(after[name]) != tuple(what):
            out.append(f"{name} changed")
    for name, what in after.items():
        if name in before or name.endswith(".lease.tmp"):
            continue
        if not (name.endswith(".rss") and what[0] == 0):
            out.append(f"{name} appeared")
    return out


def every_call(w: runstore.Writer) -> dict[str, Callable[[], Any]]:
    """Every method of a writer, as a child would call it."""
    return {
        "log (the taped shape)": lambda: w.log(0, step=99, a=1.0, b=2),
        "log (another shape)": lambda: w.log(0, step=99, c="x"),
        "log (values=)": lambda: w.log(0, values={"a b": 1.0}),
        "put": lambda: w.put(0, "arr", np.arange(4.0)),
        "log_many": lambda: w.log_many([0, 1], [5, 5], a=np.ones(2)),
        "define": lambda: w.define("new", "float64"),
        "resume": lambda: w.resume(0, 3),
        "flush": lambda: w.flush(),
        "flush(wait=False)": lambda: w.flush(wait=False),
        "commit": lambda: w.commit(),
        "commit(wait=False)": lambda: w.commit(wait=False),
        "wait_for_commit": lambda: w.wait_for_commit(1),
        "wait_for_shipped": lambda: w.wait_for_shipped(),
        "durable_ticket": lambda: w.durable_ticket,
        "shipped_ticket": lambda: w.shipped_ticket,
        "stats": lambda: w.stats(),
        "__enter__": lambda: w.__enter__(),
        "__exit__": lambda: w.__exit__(None, None, None),
        "close": lambda: w.close(),
    }


def check_every_call_refused(w: runstore.Writer) -> dict[str, str]:
    """In the child: calls every method; returns {method: what happened} for those that did not
    raise the fork error."""
    wrong = {}
    for name, call in every_call(w).items():
        try:
            got = call()
        except RuntimeError as e:
            if FORKED not in str(e) or OPEN_ONE not in str(e) or w.writer_id not in str(e):
                wrong[name] = f"RuntimeError without the advice: {e}"
            continue
        except Exception as e:  # noqa: BLE001 - reported
            wrong[name] = f"{type(e).__name__}: {e}"
            continue
        wrong[name] = f"returned {got!r}"
    return wrong


def dropped_in_child(holder: list[Any]) -> list[str]:
    """Drops the writer ``holder`` alone refers to and collects garbage; returns the errors that
    reached sys.unraisablehook meanwhile."""
    unraisable: list[str] = []
    old_hook = sys.unraisablehook
    sys.unraisablehook = lambda u: unraisable.append(repr(u.exc_value))
    try:
        holder.clear()
        gc.collect()
    finally:
        sys.unraisablehook = old_hook
    return unraisable


def test_every_writer_method_raises_in_a_forked_child_and_the_parent_loses_nothing(store, tmp_path):
    holder = [store.writer(writer_id="parent")]  # the only reference, so that a child can drop it
    holder[0].log(0, step=0, a=1.0, b=1)
    holder[0].commit()
    for step in range(1, 50):  # taped (the same shape), neither appended nor committed
        holder[0].log(0, step=step, a=float(step), b=step)
    holder[0].put(1, "arr", np.arange(8.0))  # appended, not committed
    before = files_of(store.path)
    tried = len(every_call(holder[0]))

    def child():
        wrong = check_every_call_refused(holder[0])
        # Garbage collection raises nothing (no unraisable error either) and writes nothing.
        unraisable = dropped_in_child(holder)
        return {"wrong": wrong, "unraisable": unraisable, "files": files_of(store.path)}

    got = in_child(child)
    print(f"{tried} writer methods tried in a forked child, then the writer dropped there")
    w = holder[0]
    assert got["wrong"] == {}, got["wrong"]
    assert got["unraisable"] == []
    assert changed_files(before, got["files"]) == [], "the child wrote"
    # The parent goes on: everything it logged, taped or not, is there.
    w.log(0, step=50, a=50.0, b=50)
    w.close()
    store.refresh()
    a = store.scan("a")
    np.testing.assert_array_equal(np.sort(a["step"]), np.arange(51))
    np.testing.assert_array_equal(store.get(1, "arr"), np.arange(8.0))
    assert "c" not in store.names() and "new" not in store.names()
    assert store.verify() > 0


def test_a_taped_log_in_a_forked_child_raises_instead_of_vanishing(store):
    """The step tape holds calls without reaching the core writer: in a child such a call
    returned None, then nothing was ever written."""
    w = store.writer()
    w.log(7, step=0, loss=0.5)
    w.log(7, step=1, loss=0.25)  # armed and taped

    def child():
        try:
            w.log(7, step=2, loss=0.125)
        except RuntimeError as e:
            return str(e)
        return None

    message = in_child(child)
    print("a taped log call tried in a forked child:", message)
    assert message is not None and FORKED in message and OPEN_ONE in message
    w.close()
    store.refresh()
    assert sorted(store.scan("loss")["step"].tolist()) == [0, 1]


def test_a_with_block_in_a_forked_child_raises_and_keeps_the_blocks_exception(store):
    w = store.writer()
    with w:  # the fork comes inside a block of the parent's: the child leaves it too
        w.log(1, x=1.0)

        def child():
            out = {}
            try:
                with w:  # a block of the child's own: entering it raises
                    pass
            except RuntimeError as e:
                out["enter"] = str(e)
            try:  # the parent's block, left cleanly in the child
                w.__exit__(None, None, None)
            except RuntimeError as e:
                out["clean exit"] = str(e)
            try:  # ... or by an exception: that one goes on, with a note
                raise ValueError("the block's own error")
            except ValueError as e:
                out["kept"] = w.__exit__(ValueError, e, e.__traceback__) is False
                out["notes"] = getattr(e, "__notes__", [])
            return out

        got = in_child(child)
    print("with-blocks in a forked child: entered, left cleanly and left by an exception")
    assert FORKED in got["enter"] and FORKED in got["clean exit"] and got["kept"]
    assert any(FORKED in n and "nothing the block logged was committed" in n for n in got["notes"])
    store.refresh()
    assert store.get(1, "x") == 1.0


def test_a_child_opens_its_own_writer_and_both_commit(store):
    with store.writer(writer_id="parent") as w:
        w.log(0, x=0.0)
        w.commit()

        def child():
            with store.writer() as mine:
                mine.log(1, x=1.0)
            return True

        assert in_child(child)
        w.log(2, x=2.0)
    store.refresh()
    print("a writer opened in a forked child, beside the parent's")
    assert sorted(store.scan("x")["run"].tolist()) == [0, 1, 2]


def test_a_staging_writer_in_a_forked_child_leaves_lease_and_claims_alone(store, tmp_path):
    staging = tmp_path / "staging"
    holder = [store.writer(staging_dir=staging, segment_bytes=1 << 16)]
    for r in range(30):
        holder[0].log(r, x=float(r), pad=np.ones(2048))
        if r % 10 == 9:
            holder[0].commit()
    holder[0].wait_for_shipped()
    holder[0].log(30, x=30.0)
    before = files_of(store.path, staging)

    def child():
        wrong = check_every_call_refused(holder[0])
        unraisable = dropped_in_child(holder)
        return {"wrong": wrong, "unraisable": unraisable, "files": files_of(store.path, staging)}

    got = in_child(child)
    print(f"{len(every_call(holder[0]))} methods of a staging writer tried in a forked child")
    assert got["wrong"] == {} and got["unraisable"] == []
    assert changed_files(before, got["files"]) == []
    holder[0].close()
    assert list(staging.iterdir()) == []  # shipped, lease removed
    store.refresh()
    assert sorted(store.scan("x")["run"].tolist()) == list(range(31))


# -- stores ----------------------------------------------------------------------------------


def test_a_store_opened_in_the_parent_reads_in_a_forked_child(store):
    with store.writer() as w:
        w.log_many(np.arange(100), x=np.arange(100.0))
        w.put(5, "big", np.arange(1 << 18, dtype=np.float64))  # read through its descriptor
    store.refresh()
    lazy = store.array(5, "big")

    def child():
        out = {
            "x": float(store.scan("x")["value"].sum()),
            "get": float(store.get(3, "x")),
            "big": float(np.asarray(lazy[1000:1010]).sum()),
            "names": store.names(),
        }
        with store.writer() as mine:  # the child's own writer, then a refresh
            mine.log(200, x=200.0)
        store.refresh()
        out["after"] = int(store.series_info("x").count)
        return out

    got = in_child(child)
    print("a store opened in the parent read in a forked child: scan, get, a lazy array, refresh")
    assert got == {
        "x": float(np.arange(100.0).sum()),
        "get": 3.0,
        "big": float(np.arange(1000, 1010).sum()),
        "names": ["big", "x"],
        "after": 101,
    }


def test_a_store_in_use_by_another_thread_at_the_fork_raises_in_the_child(store):
    """A thread of the parent inside a call of the store at the fork may hold its locks, which
    no thread of the child will release: the child is told, instead of waiting for ever."""
    with store.writer() as w:
        w.log_many(np.arange(10), x=np.arange(10.0))
    store.refresh()
    inside, forked = threading.Event(), threading.Event()

    def progress(done, total):  # called from within verify, which holds the store
        inside.set()
        forked.wait()

    t = threading.Thread(target=store._core.verify_all, args=(progress,))
    t.start()
    inside.wait()

    def child():
        out = {}
        for name, call in {
            "names": store.names,
            "get": lambda: store.get(1, "x"),
            "refresh": store.refresh,
            "writer": store.writer,
        }.items():
            try:
                call()
                out[name] = "returned"
            except RuntimeError as e:
                out[name] = str(e)
        again = runstore.open(store.path, mode="r")  # as the error says
        out["reopened"] = again.names()
        return out

    try:
        got = in_child(child)
    finally:
        forked.set()
        t.join()
    print(f"{len(got) - 1} calls of a store in use at the fork tried in the child")
    for name in ("names", "get", "refresh", "writer"):
        assert "was in use by another thread" in got[name], (name, got[name])
        assert "Open the store again in this process" in got[name]
    assert got["reopened"] == ["x"]
    assert store.names() == ["x"]  # the parent's store is unharmed


def test_a_store_being_opened_by_another_thread_at_the_fork_opens_in_the_child(store_path):
    """A Store's lazy open takes a lock of its own; one held by a thread of the parent at the
    fork would be held for ever in the child."""
    with runstore.open(store_path).writer() as w:
        w.log(1, x=1.0)
    lazy = pickle.loads(pickle.dumps(runstore.open(store_path)))  # opens when first used
    held, forked = threading.Event(), threading.Event()

    def hold():
        with lazy._lock:  # as a thread inside _open holds it
            held.set()
            forked.wait()

    t = threading.Thread(target=hold)
    t.start()
    held.wait()
    try:
        got = in_child(lambda: lazy.names())
    finally:
        forked.set()
        t.join()
    print("a lazily opened store, its lock held by another thread at the fork, used in the child")
    assert got == ["x"]


# -- run_experiments under each start method ---------------------------------------------------


def square_once(x: int, calls: str) -> dict[str, Any]:
    with open(os.path.join(calls, str(x)), "a") as f:  # one line per call
        f.write("call\n")
    return {"y": x * x}


@pytest.mark.parametrize("start_method", ["fork", "spawn", "forkserver"])
def test_run_experiments_completes_a_sweep_exactly_once_under_each_start_method(
    store, tmp_path, start_method
):
    n = 24
    calls = tmp_path / "calls"
    calls.mkdir()
    store.define_experiments(runstore.grid(x=range(n), calls=[str(calls)]))
    # The parent holds an open writer with records not yet committed: with "fork" every worker
    # has a copy, which none of them may use or harm.
    w = store.writer()
    w.log("parent", note=1.0)
    s = runstore.run_experiments(
        store, square_once, workers=2, progress=False, start_method=start_method
    )
    w.close()
    print(f"run_experiments with start_method={start_method!r}: {s}")
    assert (s.done, s.failed, s.skipped, s.not_run) == (n, 0, 0, 0)
    experiments, outcomes = runstore.load_results(store)
    assert (experiments["state"] == "done").all()
    np.testing.assert_array_equal(outcomes["y"], experiments["x"] ** 2)
    for name in ("y", "~status/state"):
        runs = store.scan(name)["run"]
        assert len(runs) == n and len(set(runs.tolist())) == n
    assert {p.name: p.read_text() for p in calls.iterdir()} == {str(x): "call\n" for x in range(n)}
    assert store.get("parent", "note") == 1.0
