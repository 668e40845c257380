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
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import _runner

if TYPE_CHECKING:
    from .._reader import StoreReader


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
    sc = getattr(spark, "sparkContext", spark)
    t0 = time.perf_counter()
    workers = max(1, int(sc.defaultParallelism))
    chunks, total, skipped = _runner.cluster_chunks(
        store, retry_failed, shard, commit_every, workers
    )
    if total == 0:
        return _runner.RunSummary(0, 0, skipped, time.perf_counter() - t0, 0, 0)
    chunks = list(chunks)
    path, store_type = store.path, type(store)
    tally = _runner.Tally(total, progress)
    try:
        rdd = sc.parallelize(chunks, len(chunks))  # a chunk a task
        run_chunk = _runner.run_chunk_alone
        for done, failed in rdd.map(lambda c: run_chunk(path, store_type, fn, c)).collect():
            tally.add(done, failed)
    finally:
        tally.close()
        store.refresh()
    return tally.summary(skipped, t0, workers)
