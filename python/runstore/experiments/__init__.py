"""runstore.experiments: a sweep as records of a store (docs/experiments.md).

A design table (one row of parameters per experiment), a pool of processes that runs what is
not done, each experiment's status, and the results as numpy arrays. Functions over an open
:class:`runstore.Store`; the Store methods ``define_experiments``, ``design``, ``status`` and
``pending`` are the same functions, and ``runstore.grid``, ``runstore.run_experiments`` and
``runstore.load_results`` are these under the names the package has always given them.

    store = runstore.open("sweep.rs")
    experiments.define(store, experiments.grid(lr=[0.1, 0.01], seed=range(10)))
    summary = experiments.run(store, train)          # train(lr, seed) -> dict of outcomes
    table, outcomes = experiments.load_results(store)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from . import _dask_runner, _design, _ray_runner, _runner, _spark_runner
from . import _records as _experiments
from ._design import experiment_id, grid
from ._runner import RunSummary
from ._writer import ExperimentWriter

if TYPE_CHECKING:
    import numpy as np
    import pandas

    from ._checks import RunId
    from ._reader import StoreReader

__all__ = [
    "grid",
    "experiment_id",
    "define",
    "design",
    "status",
    "pending",
    "run",
    "RunSummary",
    "load_results",
    "writer",
    "ExperimentWriter",
]


def define(store: StoreReader, design: Any) -> pandas.DataFrame:
    """Adds experiments to the store's design table; returns the design with their ids.

    ``design`` is a DataFrame or a list of dicts (e.g. :func:`runstore.grid`), one row per
    experiment, one column per parameter. Parameter values are bool, int, float or str
    (numpy scalars and DataFrame columns keep their dtype); a row may lack a parameter
    (absent key, None or pd.NA), and then fn is called without it.

    Ids: from an ``"experiment"`` column (ints or strs) if there is one, otherwise derived
    from the parameters: ``"e"`` + 16 hex digits of the SHA-256 of the row's canonical JSON
    (docs/experiments.md), so the same parameters always get the same id, and two rows with
    identical parameters are refused (ValueError: add a seed or replicate column).

    Defining rows the store already has (same id, same parameters) changes nothing; new
    rows are added after the existing ones; an id whose parameters differ from the stored
    ones raises ValueError, and then nothing is written. A parameter's values are cast to
    the dtype it already has in the store when no value changes (ints to float64, say),
    otherwise ValueError.

    Returns a DataFrame: ``experiment`` then the parameters, in the order of ``design``.
    """
    return _design.define_experiments(store, design)


def design(store: StoreReader) -> pandas.DataFrame:
    """The design table: column ``experiment`` (the id), then one column per parameter.

    Rows in definition order; dtypes as stored (int64, float64, bool, str, ...). Where a row
    lacks a parameter: NaN in float columns, pd.NA in int/bool columns (pandas nullable
    dtypes), None in str columns. Reads the current snapshot (see :meth:`Store.refresh`).
    """
    return _experiments.design_frame(store)


def status(store: StoreReader) -> pandas.DataFrame:
    """One row per experiment, in design order: its state and how it ran.

    Columns: ``experiment``; ``state`` ("pending", "running", "done" or "failed");
    ``error`` (message and traceback of a failure, else None); ``host``; ``started`` and
    ``finished`` (unix time in seconds, float; ``pd.to_datetime(df.started, unit="s")``
    for datetimes); ``seconds`` (run time of fn); ``attempt`` (how many times it was
    started, 0 if never). "running" is committed only for experiments that ran longer than
    a few seconds; a "running" experiment whose sweep was killed stays "running" until it
    runs again. Reads the current snapshot (see :meth:`Store.refresh`).
    """
    return _experiments.status_frame(store)


def pending(store: StoreReader, retry_failed: bool = True) -> list[RunId]:
    """Ids of the experiments that are not done, in design order; failed ones included
    unless ``retry_failed=False``. Reads the current snapshot (see :meth:`Store.refresh`)."""
    return _experiments.pending_ids(store, retry_failed)


def run(
    store: StoreReader,
    fn: Callable[..., Mapping[str, Any] | None],
    workers: int | None = None,
    retry_failed: bool = True,
    progress: bool = True,
    *,
    commit_every: int | None = None,
    start_method: str = "spawn",
    shard: tuple[int, int] | None = None,
    client: Any = None,
    spark: Any = None,
    ray: bool = False,
) -> RunSummary:
    """Runs every experiment of the store's design that is not done, on worker processes.

    Calls ``fn(**params)`` for each pending experiment (in design order, pulled from a queue by
    ``workers`` processes; default: every core this process may use; 0 runs them in this
    process). ``fn`` returns a dict of outcomes (numbers, numpy scalars and arrays, str,
    bytes; None values are left out) or None, and must be picklable (a module-level function).
    ``store`` is a writable Store (:func:`runstore.run_experiments` also takes a path).

    Each worker process opens its own writer; an experiment's outcomes and its status "done"
    are committed together, at the end of the chunk of experiments the worker runs, or earlier
    if it ends a second or more after the worker's previous commit. By default
    (``commit_every=None``) a chunk holds as many experiments as a worker finishes in about a
    second (1 at first, at most 1,000): experiments of a second or more are committed one by
    one, quick ones share a commit (one fsync) and their blocks, where a commit each would
    leave a dozen small blocks per experiment for every reader to index. ``commit_every=k``
    makes every chunk k experiments (1: a commit per experiment). A crash redoes at most the
    finished experiments of one uncommitted chunk, never twice in the results because the
    later commit wins. An exception in fn marks that experiment "failed", with its message and
    traceback in ``store.status()``, and the others go on; a worker process that dies (a
    segfault, the OOM killer) is replaced, the unfinished experiments of its chunk run again
    one by one, and the one that kills a worker again is marked failed.

    Ctrl-C (or SIGTERM) stops the workers cleanly: what finished is committed, the interrupted
    experiments are set back to pending, and KeyboardInterrupt (SystemExit(143) for SIGTERM)
    propagates. After that, or after a ``kill -9`` of everything, the same call again runs only
    what is not done (failed ones too unless ``retry_failed=False``).

    A progress line goes to stderr when it is a terminal and ``progress`` is true.
    ``start_method``: "spawn" (default), "forkserver" or "fork" (a worker's copies of this
    process's writers raise if used: each worker opens its own). Scripts that use "spawn" need
    the usual ``if __name__ == "__main__":`` guard. Signals: docs/experiments.md, "Signals".

    ``shard=(i, n)`` runs only the pending experiments of shard i of n: those whose id hashes
    to i (a function of the id alone, so n runners on any number of nodes never run the same
    experiment, and a rerun of shard i after a kill runs only its own remaining work; skipped
    counts only shard i's). Default: from ``SLURM_ARRAY_TASK_ID`` and ``SLURM_ARRAY_TASK_COUNT``
    (less ``SLURM_ARRAY_TASK_MIN``, over ``SLURM_ARRAY_TASK_STEP``), else ``SLURM_PROCID`` and
    ``SLURM_STEP_NUM_TASKS`` (a step srun started) when set; otherwise every experiment.
    ``shard=(0, 1)`` runs every experiment whatever the environment. ValueError naming shard
    unless 0 <= i < n.

    ``client``: a ``distributed.Client``; the pending experiments (of the shard) then run as
    tasks on the cluster's workers instead of local processes (``workers`` is ignored), each
    Dask worker process writing its results through a writer of its own, with the same status
    records, failure isolation and resume.

    ``spark``: a ``SparkSession`` (or ``SparkContext``); the pending experiments run as Spark
    tasks instead, each task a chunk of experiments written through a writer of its own, closed
    before the task returns (docs/spark.md). ``ray=True``: the same as Ray tasks, on the Ray
    cluster this process is connected to (docs/ray.md). Only one of ``client``, ``spark`` and
    ``ray`` is taken.

    Returns a :class:`RunSummary`: done, failed, skipped, seconds, workers, not_run. Raises
    RuntimeError for a store opened read-only.
    """
    if (client is not None) + (spark is not None) + bool(ray) > 1:
        raise TypeError("run_experiments takes one of client= (Dask), spark= and ray=True")
    if ray:
        return _ray_runner.run(store, fn, retry_failed, progress, commit_every, shard)
    if spark is not None:
        return _spark_runner.run(store, fn, spark, retry_failed, progress, commit_every, shard)
    if client is not None:
        return _dask_runner.run(store, fn, client, retry_failed, progress, commit_every, shard)
    return _runner.run(
        store, fn, workers, retry_failed, progress, commit_every, start_method, shard
    )


def load_results(
    store: StoreReader, names: Iterable[str] | str | None = None
) -> tuple[pandas.DataFrame, dict[str, np.ndarray]]:
    """The results of a sweep: ``(experiments, outcomes)``.

    ``experiments`` is a DataFrame with one row per experiment in design order: ``experiment``,
    the parameters, then the status columns of :func:`status` (state, error, host,
    started, finished, seconds, attempt; a status column whose name a parameter already has
    is called ``status.<name>``). ``outcomes`` maps each outcome name (``names``, default every
    non-reserved series) to an array of shape ``(n_experiments, *outcome_shape)`` in the
    DataFrame's row order, read from step-0 records. Where an experiment has no value (failed,
    pending): NaN in float arrays; int, bool, str and bytes outcomes with gaps come back as
    ``numpy.ma`` masked arrays (mask True where absent), otherwise as plain arrays. Str and
    bytes outcomes and variable-shape ones are object arrays. (:func:`runstore.load_results`
    also takes a path, which it opens read-only.)

    Refreshes the store first. Raises KeyError for an unknown name.
    """
    return _experiments.load_results(store, names)


def writer(store: StoreReader, **writer_options: Any) -> ExperimentWriter:
    """An :class:`ExperimentWriter` on ``store``, for a loop of the caller's own that records
    whole experiments (parameters, status and outcomes) atomically, one ``record`` each::

        with runstore.experiments.writer(store, commit_every_s=5) as w:
            for params in my_design:
                w.record(runstore.experiment_id(params), params, simulate(**params))

    ``writer_options`` are those of :meth:`Store.writer`. Ids are the caller's
    (:func:`experiment_id` gives the ones define would). A context manager: leaving it commits
    and closes."""
    return ExperimentWriter(store, **writer_options)
