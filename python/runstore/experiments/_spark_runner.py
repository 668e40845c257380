"""runstore.experiments.run(spark=...): the pending experiments as tasks of a Spark job.

The driver plans the pending experiments (of the shard) and makes chunks of them, as for a Dask
cluster (_dask_runner), and runs one Spark task a chunk. A task opens a writer of its own (the
process pool's records, _runner._Runner, so status, pending, load_results and a rerun behave the
same), commits its chunk and closes the writer before the task returns its done and failed ids:
Spark's Python workers end without running exit handlers, so a writer kept open across tasks
would be left unsealed. A task Spark runs again (its Python worker or executor lost, a
speculative copy) runs the chunk's experiments again, and the later commit wins, so no key is
recorded twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from . import _runner

if TYPE_CHECKING:
    from .._reader import StoreReader


def _run_chunks(path: str, store_type: type, fn: Callable[..., Any]):
    def run(chunks: Iterator[list[Any]]) -> list[tuple[list[Any], list[Any]]]:
        runner = None
        out = []
        try:
            for chunk in chunks:
                if runner is None:
                    runner = _runner._Runner(store_type(path, "r+"), fn)
                out.append(runner.run_chunk(chunk))
        finally:
            if runner is not None:
                runner.close()  # sealed before the task's result exists
        return out

    return run


def run(
    store: StoreReader,
    fn: Callable[..., Any],
    spark: Any,
    retry_failed: bool = True,
    progress: bool = True,
    commit_every: int | None = None,
    shard: tuple[int, int] | None = None,
) -> _runner.RunSummary:
    """runstore.experiments.run with spark=."""
    if store.read_only:
        raise RuntimeError(f"run_experiments: the store {store.path} is open read-only")
    _runner.check_commit_every(commit_every)
    sc = getattr(spark, "sparkContext", spark)
    t0 = time.perf_counter()
    index, params, rows, attempts, skipped = _runner.plan(store, retry_failed, shard)
    workers = max(1, int(sc.defaultParallelism))
    if len(rows) == 0:
        return _runner.RunSummary(0, 0, skipped, time.perf_counter() - t0, 0, 0)
    size = _runner.ChunkSize(commit_every or 1, -(-len(rows) // (4 * workers)))
    chunks = list(_runner.make_chunks(index, params, rows, attempts, size))
    tally = _runner.Tally(len(rows), progress)
    try:
        rdd = sc.parallelize(chunks, len(chunks))
        for done, failed in rdd.mapPartitions(_run_chunks(store.path, type(store), fn)).collect():
            tally.add(done, failed)
    finally:
        tally.close()
        store.refresh()
    return tally.summary(skipped, t0, workers)
