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
    client: Any,
    store: Store,
    fn: Callable[..., Any],
    chunks: Any,
    total: int,
    skipped: int,
    t0: float,
    bar: Any,
) -> _runner.RunSummary:
    import time

    from distributed import as_completed

    futures = [
        client.submit(_run_chunk, store.path, type(store), fn, chunk, pure=False)
        for chunk in chunks
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
        n_workers(client),
        total - done - failed,
        failed_ids,
    )


__all__ = ["run", "n_workers"]
