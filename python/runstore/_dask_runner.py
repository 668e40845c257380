"""runstore.experiments.run(client=...): the pending experiments on the workers of a Dask cluster.

The client submits chunks of experiments (ids, parameters, attempt) as tasks. Each Dask worker
process writes through one writer of its own, created lazily by the first chunk it runs, reused
for the next ones and closed when the process exits; every chunk is committed before its task
returns, so a task's result (the done and failed ids) is only seen once its records are durable.
The records are those of the process pool (_runner._Runner), so status, pending, load_results
and a rerun behave the same. A worker that dies mid-chunk has its task rerun by Dask elsewhere:
the experiments it had committed run again, and the later commit wins, so no key is recorded
twice.
"""

from __future__ import annotations

import atexit
import math
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import _runner

if TYPE_CHECKING:
    from ._store import Store

# Per worker process: store path -> its runner (the writer this process writes with).
_runners: dict[str, _runner._Runner] = {}


def _close_all() -> None:
    for r in _runners.values():
        r.close()
    _runners.clear()


def _after_fork_in_child() -> None:
    # The parent's writers are the parent's: a child (a forked worker process) opens its own.
    _runners.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _run_chunk(
    path: str, store_type: type, fn: Callable[..., Any], chunk: list[Any]
) -> tuple[list[Any], list[Any]]:
    """A Dask task: runs a chunk with this process's writer for ``path`` and commits it."""
    r = _runners.get(path)
    if r is None:
        if not _runners:
            atexit.register(_close_all)
        r = _runners[path] = _runner._Runner(store_type(path, "r+"), fn)
    r.fn = fn
    return r.run_chunk(chunk)


def n_workers(client: Any) -> int:
    return len(client.scheduler_info().get("workers", {}))


def run(
    store: Store,
    fn: Callable[..., Any],
    client: Any,
    retry_failed: bool,
    progress: bool,
    commit_every: int,
    shard: tuple[int, int] | None,
) -> _runner.RunSummary:
    """runstore.experiments.run with client=."""
    from distributed import as_completed

    if store.read_only:
        raise RuntimeError(f"run_experiments: the store {store.path} is open read-only")
    if commit_every < 1:
        raise ValueError("commit_every must be at least 1")
    t0 = time.perf_counter()
    index, params, rows, attempts, skipped = _runner.plan(store, retry_failed, shard)
    workers = max(1, n_workers(client))
    if len(rows) == 0:
        return _runner.RunSummary(0, 0, skipped, time.perf_counter() - t0, 0, 0)
    size = max(1, min(commit_every, math.ceil(len(rows) / (4 * workers))))
    bar = _runner._Progress(len(rows), progress)
    futures = [
        client.submit(_run_chunk, store.path, type(store), fn, chunk, pure=False)
        for chunk in _runner.make_chunks(index, params, rows, attempts, size)
    ]
    done = failed = 0
    failed_ids: list[Any] = []
    try:
        for fut in as_completed(futures):
            d, f = fut.result()
            done += len(d)
            failed += len(f)
            failed_ids += f
            bar.update(done, failed)
    finally:
        bar.close(done, failed)
        store.refresh()
    return _runner.RunSummary(
        done,
        failed,
        skipped,
        time.perf_counter() - t0,
        workers,
        len(rows) - done - failed,
        failed_ids,
    )
