"""runstore.experiments.run(ray=True): the pending experiments as Ray tasks.

As on Spark (_spark_runner): the driver plans the pending experiments (of the shard) and cuts
them in chunks, a few per CPU of the Ray cluster; each chunk is a Ray task that runs it with a
writer of its own (the process pool's records, _runner._Runner), commits and closes the writer
before it returns the chunk's done and failed ids. A task whose worker dies is run again by Ray
(``max_retries``): the experiments it had committed run again, and the later commit wins, so no
key is recorded twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import _runner

if TYPE_CHECKING:
    from .._reader import StoreReader

#: How often Ray runs a chunk again whose worker process died.
MAX_RETRIES = 3


def run(
    store: StoreReader,
    fn: Callable[..., Any],
    retry_failed: bool = True,
    progress: bool = True,
    commit_every: int | None = None,
    shard: tuple[int, int] | None = None,
) -> _runner.RunSummary:
    """runstore.experiments.run with ray=True (on the Ray cluster this process is connected to,
    or a local one that ray.init() starts)."""
    import ray

    if store.read_only:
        raise RuntimeError(f"run_experiments: the store {store.path} is open read-only")
    if not ray.is_initialized():
        ray.init()
    t0 = time.perf_counter()
    workers = max(1, int(ray.cluster_resources().get("CPU", 1)))
    chunks, total, skipped = _runner.cluster_chunks(
        store, retry_failed, shard, commit_every, workers
    )
    if total == 0:
        return _runner.RunSummary(0, 0, skipped, time.perf_counter() - t0, 0, 0)
    task = ray.remote(max_retries=MAX_RETRIES)(_runner.run_chunk_alone)
    tally = _runner.Tally(total, progress)
    try:
        pending = [task.remote(store.path, type(store), fn, chunk) for chunk in chunks]
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            tally.add(*ray.get(ready[0]))
    finally:
        tally.close()
        store.refresh()
    return tally.summary(skipped, t0, workers)
