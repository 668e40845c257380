"""runstore.experiments.run(client=...): the pending experiments on the workers of a Dask cluster.

The client submits chunks of experiments (ids, parameters, attempt) as tasks. Each Dask worker
process writes through one writer of its own, created lazily by the first chunk it runs, reused
for the next ones and closed when the process exits; every chunk is committed before its task
returns, so a task's result (the done and failed ids) is only seen once its records are durable.
The records are those of the process pool (_runner._Runner), so status, pending, load_results
and a rerun behave the same. A worker that dies mid-chunk has its task rerun by Dask elsewhere:
the experiments it had committed run again, and the later commit wins, so no key is recorded
twice.

Signals (docs/experiments.md, "Signals"): a Dask worker runs tasks on threads of its own, so
SIGTERM or SIGINT to a worker process (a batch system preempting it) cannot interrupt fn; its
main thread sets the experiment under way back to pending, commits what finished and ends the
process by the signal (the first chunk a process runs puts the handlers in place). The client,
on SIGTERM or Ctrl-C, cancels the tasks not started, says what was done and raises
(SystemExit(143) for SIGTERM); tasks already running finish and commit on their workers.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import _signals
from . import _runner

if TYPE_CHECKING:
    from .._reader import StoreReader

#: Seconds the first task of a worker process waits for its event loop to put the signal
#: handlers in place (a loop that is busy for longer: the task goes on without waiting).
INSTALL_WAIT_S = 30.0

# Per worker process: store path -> its runner (the writer this process writes with).
_runners: dict[str, _runner._Runner] = {}


def _close_all() -> None:
    for r in _runners.values():
        r.close()
    _runners.clear()


def _interrupt_all() -> None:
    """On SIGTERM or SIGINT to this worker process (its main thread): the experiments under way
    back to pending, what finished committed."""
    for r in list(_runners.values()):
        r.interrupt()


def _after_fork_in_child() -> None:
    # The parent's writers are the parent's: a child (a forked worker process) opens its own.
    _runners.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _install_stop_handlers() -> None:
    """In a Dask worker process, has its event loop's thread (the main thread) put the signal
    handlers in place: SIGTERM and SIGINT then run _interrupt_all and end the process by the
    signal (runstore._signals.on_stop). Tasks run on other threads, which cannot install them;
    the task waits until the loop has (a signal that came before would find the worker's own
    handlers, which ignore SIGINT and do not commit)."""
    try:
        from distributed import get_worker

        loop = get_worker().loop
    except (ImportError, ValueError):  # not in a Dask worker (a local scheduler)
        return
    installed = threading.Event()

    def install() -> None:
        try:
            _signals.on_stop("runstore-experiments", _interrupt_all)
        finally:
            installed.set()

    loop.add_callback(install)
    installed.wait(INSTALL_WAIT_S)


def _run_chunk(
    path: str, store_type: type, fn: Callable[..., Any], chunk: list[Any]
) -> tuple[list[Any], list[Any]]:
    """A Dask task: runs a chunk with this process's writer for ``path`` and commits it."""
    r = _runners.get(path)
    if r is None:
        if not _runners:
            atexit.register(_close_all)
            _install_stop_handlers()
        r = _runners[path] = _runner._Runner(store_type(path, "r+"), fn)
    r.fn = fn
    return r.run_chunk(chunk)


def n_workers(client: Any) -> int:
    return len(client.scheduler_info().get("workers", {}))


def run(
    store: StoreReader,
    fn: Callable[..., Any],
    client: Any,
    retry_failed: bool,
    progress: bool,
    commit_every: int | None,
    shard: tuple[int, int] | None,
) -> _runner.RunSummary:
    """runstore.experiments.run with client=."""
    from distributed import as_completed

    if store.read_only:
        raise RuntimeError(f"run_experiments: the store {store.path} is open read-only")
    t0 = time.perf_counter()
    workers = max(1, n_workers(client))
    # Every chunk is submitted at once, before any has run.
    chunks, total, skipped = _runner.cluster_chunks(
        store, retry_failed, shard, commit_every, workers
    )
    if total == 0:
        return _runner.RunSummary(0, 0, skipped, time.perf_counter() - t0, 0, 0)
    tally = _runner.Tally(total, progress)
    futures: list[Any] = []
    sigterm = _signals.enter()  # SIGTERM raises Terminated here, as Ctrl-C KeyboardInterrupt
    try:
        try:
            futures = [
                client.submit(_run_chunk, store.path, type(store), fn, chunk, pure=False)
                for chunk in chunks
            ]
            for fut in as_completed(futures):
                tally.add(*fut.result())
        finally:
            tally.close()
            store.refresh()
    except (KeyboardInterrupt, _signals.Terminated):
        client.cancel(futures)  # those not started never start; running ones finish and commit
        _runner._say_interrupted(tally.done, tally.failed, total - tally.done - tally.failed)
        raise
    finally:
        _signals.leave(sigterm)
    return tally.summary(skipped, t0, workers)
