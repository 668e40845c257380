"""Spark terminators over a store: every partition written on its executor (docs/spark.md).

``save(rdd_or_dataframe, store, name=...)`` runs one Spark job in which each task writes its
partition through a writer of its own, commits it, and returns one small :class:`Receipt`, so
that the driver gathers receipts, never the data. A partition whose *input* failed (an exception
raised in a map upstream, which Spark runs in the same task) is a receipt with ``ok=False`` and
the error, and the other partitions go on; an RDD element that raises costs only itself: its
partition's receipt counts and names it, and the rest is saved (``on_error="raise"`` lets Spark
retry the task and fail the job instead).

Keys are deterministic, so an attempt Spark runs again (a failed task, a lost executor, a
speculative copy) rewrites the same keys with the same values, and readers, for whom the later
commit wins, see each record once whatever attempt wrote it:

- RDD: ``(run=partition index + run_offset, name, step=index within the partition)``, or with
  ``key=f`` the element's own ``f(element)`` (a run, or a (run, step) pair), which a save with
  another partitioning rewrites alike; an element that is a dict is one record per key
  (``Writer.log``), an array, number, str or bytes one value under ``name``, and any other
  object (one whose ``__array__`` would keep its samples and drop its attributes) is refused
  in its partition's receipt;
- DataFrame: each column other than ``run`` and ``step`` is a series; a row is the record
  ``(run=row[run], column, step=row[step])`` when ``run`` names a column (``step`` defaults to 0:
  a row per run, as a sweep's table of experiments), otherwise ``(run=partition index +
  run_offset, column, step=row index within the partition)``. A null cell is no record.

Every task attempt opens its own writer and closes it at the end of its partition, so its
segment is sealed before its receipt exists (Spark's Python workers end without running exit
handlers: a writer kept open across tasks would be left unsealed), and nothing of one attempt is
committed by another. Each receipt names the attempt Spark accepted (``attempt``,
``stage``, ``task_attempt_id``) and the writer it wrote with (``writer_id``).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

from .._store import Store
from . import _arrow_rows, _receipts
from ._receipts import summarize

__all__ = ["Receipt", "save", "summarize", "StandaloneCluster"]


@dataclasses.dataclass(frozen=True)
class Receipt(_receipts.Receipt):
    """What one partition's save did, as the attempt Spark accepted reports it.

    ``ok`` means its records were committed (durable) before the task returned; otherwise
    ``error`` holds the exception text and ``records`` how many were logged before it (committed
    with the rest of that attempt's writer: they carry their right keys, and a rerun rewrites
    them). ``attempt`` is the task's attempt number (0 for the first run of the partition),
    ``writer_id`` the writer whose segment holds its records.
    """

    attempt: int
    stage: int
    task_attempt_id: int
    writer_id: str


# -- on the executors ---------------------------------------------------------------------------


def _attempt() -> tuple[int, int, int]:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:  # not in a Spark task (called directly)
        return 0, 0, 0
    return ctx.attemptNumber(), ctx.stageId(), ctx.taskAttemptId()


class _Task(_receipts.TaskWriter):
    """One attempt of one partition: its writer, what it logged, its receipt."""

    def __init__(self, path: str, part: int, options: dict[str, Any], save_id: str) -> None:
        super().__init__(path, part, options, save_id)
        self.attempt, self.stage, self.task_id = _attempt()

    def finish(self, error: BaseException | None, on_error: str) -> Receipt:
        receipt = Receipt(*self.close(error), self.attempt, self.stage, self.task_id,
                          self.writer_id)  # fmt: skip
        if error is not None and on_error == "raise":
            raise error
        return receipt


def _rdd_partition(path, name, run_offset, options, on_error, key, save_id):
    def run(part: int, items: Iterator[Any]) -> Iterator[tuple[Any, ...]]:
        task = _Task(path, part, options, save_id)
        error = None
        try:
            if not task.done_before():
                task.log(task.open, items, part + run_offset, name, key, strict=on_error == "raise")
        except Exception as e:  # noqa: BLE001 - the partition's receipt says it
            error = e
        yield dataclasses.astuple(task.finish(error, on_error))

    return run


def _frame_partition(path, run_col, step_col, run_offset, options, on_error, save_id):
    import pyarrow as pa

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        part = ctx.partitionId() if ctx is not None else 0
        task = _Task(path, part, options, save_id)
        error = None
        rows = _arrow_rows.Rows(run_col, step_col, part + run_offset)
        try:
            if not task.done_before():
                rows.log_all(task, batches, on_error, "batch")
        except Exception as e:  # noqa: BLE001 - the partition's receipt says it
            error = e
        receipt = task.finish(error, on_error)
        yield pa.RecordBatch.from_pylist([dataclasses.asdict(receipt)], schema=_arrow_schema())

    return run


def _receipt_fields() -> list[tuple[str, str]]:
    """(name, "int" | "str" | "float" | "bool") of each Receipt field, in order."""
    return [(f.name, str(f.type)) for f in dataclasses.fields(Receipt)]


def _arrow_schema() -> Any:
    import pyarrow as pa

    types = {"int": pa.int64(), "str": pa.string(), "float": pa.float64(), "bool": pa.bool_()}
    return pa.schema([(n, types[t]) for n, t in _receipt_fields()])


def _spark_schema() -> Any:
    from pyspark.sql import types as T

    types = {
        "int": T.LongType(),
        "str": T.StringType(),
        "float": T.DoubleType(),
        "bool": T.BooleanType(),
    }
    return T.StructType([T.StructField(n, types[t], False) for n, t in _receipt_fields()])


# -- on the driver ------------------------------------------------------------------------------


def save(
    data: Any,
    store: Store,
    name: str = "value",
    *,
    run: str | None = None,
    step: str | None = None,
    run_offset: int = 0,
    key: Callable[[Any], Any] | None = None,
    on_error: str = "receipt",
    save_id: str | None = None,
    writer_options: dict[str, Any] | None = None,
) -> list[Receipt]:
    """Writes ``data`` to ``store`` from the executors and returns one receipt per partition,
    in partition order (runs one Spark job).

    Args:
        data: a ``pyspark.RDD`` or a ``pyspark.sql.DataFrame``. The keys are in this module's
            docstring.
        store: an open, writable :class:`runstore.Store` on a file system every executor sees
            (it reaches them as its path).
        name: the series of RDD elements that are not dicts.
        run, step: for a DataFrame, the columns that hold each row's run (int or str) and step
            (int); without ``run``, rows are keyed by partition and position.
        run_offset: added to each partition's run number (RDD, and DataFrame without ``run``),
            so that several saves into one store do not overwrite each other.
        key: for an RDD, a function of an element giving its run, or its (run, step): records
            keyed by the data's own identity, so that a save again with another partitioning
            rewrites the same keys (the default key, partition and position, would not).
        on_error: "receipt" (default): an RDD element that raises (in a map upstream, in
            ``key``, or refused) is counted and named in its partition's receipt, with
            ``ok=False``, and the partition goes on with the next element; a partition whose
            input or write failed otherwise is such a receipt too, and the job goes on.
            "raise": the task fails at the first error, and Spark retries it
            (``spark.task.maxFailures``) and fails the job if every attempt does.
        save_id: names this save in the store's markers of partitions saved whole: an attempt
            of a partition that another attempt of the same save had saved whole writes nothing
            and its receipt names that attempt's writer (``earlier``). Default: a new id each
            call; pass the same str again to resume a save that stopped (a driver that died)
            without writing its finished partitions again.
        writer_options: keyword arguments of :meth:`Store.writer` for the executors' writers.

    Raises TypeError for another kind of data or a column that is not there, ValueError for a
    store opened read-only or a bad ``on_error``.
    """
    path = _receipts.writable_path(store)
    _receipts.check_name(name)
    if not isinstance(run_offset, int) or isinstance(run_offset, bool) or run_offset < 0:
        raise ValueError(f"run_offset must be an int >= 0, not {run_offset!r}")
    if on_error not in ("receipt", "raise"):
        raise ValueError(f"on_error must be 'receipt' or 'raise', not {on_error!r}")
    options = dict(writer_options or {})
    save_id = _receipts.new_save_id(save_id)
    from pyspark import RDD
    from pyspark.sql import DataFrame

    if isinstance(data, DataFrame):
        columns = data.columns
        for arg, col in (("run", run), ("step", step)):
            if col is not None and col not in columns:
                raise TypeError(f"{arg}={col!r} is not a column of the DataFrame: {columns}")
        if step is not None and run is None:
            raise TypeError("step= names a column only together with run=")
        if key is not None:
            raise TypeError("key= is for an RDD; a DataFrame's rows are keyed by run= and step=")
        fn = _frame_partition(path, run, step, run_offset, options, on_error, save_id)
        rows = data.mapInArrow(fn, _spark_schema()).collect()
        receipts = [Receipt(**r.asDict()) for r in rows]
    elif isinstance(data, RDD):
        if run is not None or step is not None:
            raise TypeError("run= and step= name the columns of a DataFrame, not of an RDD")
        if key is not None and not callable(key):
            raise TypeError(f"key must be a function of an element, not {type(key).__name__}")
        fn = _rdd_partition(path, name, run_offset, options, on_error, key, save_id)
        receipts = [Receipt(*t) for t in data.mapPartitionsWithIndex(fn).collect()]
    else:
        raise TypeError(
            f"data must be a pyspark RDD or DataFrame, not {type(data).__module__}."
            f"{type(data).__name__}"
        )
    store.refresh()
    return sorted(receipts, key=lambda r: r.partition)


# -- a cluster of this machine ------------------------------------------------------------------


class StandaloneCluster:
    """A Spark standalone cluster on this machine, for tests, benchmarks and trying things out: a
    master and ``workers`` worker daemons, each bound to a loopback address of its own
    (127.0.0.2, 127.0.0.3, ...), so that Spark sees them as different hosts (it launches a
    speculative copy of a task only on a host where the task is not running). Each worker's
    executor is a JVM of its own with its Python workers, as on a real cluster.

    ``with StandaloneCluster(2) as c: spark = c.session(...)``; leaving it stops the session, the
    workers and the master, and removes their files (``work_dir``, a temporary directory unless
    given). Needs Java and the pyspark package (its ``bin/spark-class``)."""

    def __init__(
        self,
        workers: int = 2,
        cores: int = 1,
        memory: str = "1g",
        work_dir: str | os.PathLike[str] | None = None,
        start_timeout_s: float = 120.0,
    ) -> None:
        if not 1 <= workers <= 250:
            raise ValueError(f"workers must be 1 to 250, not {workers!r}")
        self.workers, self.cores, self.memory = workers, cores, memory
        self.start_timeout_s = start_timeout_s
        self._own_dir = work_dir is None
        self.work_dir = (
            tempfile.mkdtemp(prefix="runstore-spark-") if work_dir is None else str(work_dir)
        )
        self.procs: list[subprocess.Popen[bytes]] = []
        self.master_url = ""
        self._session: Any = None

    def _spark_class(self, *args: str, log: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
        import pyspark

        home = os.path.dirname(pyspark.__file__)
        with open(os.path.join(self.work_dir, log), "wb") as out:
            return subprocess.Popen(
                [os.path.join(home, "bin", "spark-class"), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "SPARK_HOME": home, **env},
                start_new_session=True,
            )

    def _wait_for(self, log: str, pattern: str, count: int = 1) -> re.Match[str]:
        path = os.path.join(self.work_dir, log)
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            with open(path, errors="replace") as f:
                found = list(re.finditer(pattern, f.read()))
            if len(found) >= count:
                return found[count - 1]
            if any(p.poll() is not None for p in self.procs) or time.monotonic() > deadline:
                with open(path, errors="replace") as f:
                    tail = f.read()[-2000:]
                raise RuntimeError(f"the Spark cluster did not start ({log}):\n{tail}")
            time.sleep(0.2)

    def start(self) -> StandaloneCluster:
        self.procs.append(
            self._spark_class(
                "org.apache.spark.deploy.master.Master",
                "--host", "127.0.0.1", "--port", "0", "--webui-port", "0",
                log="master.log",
                env={"SPARK_LOCAL_IP": "127.0.0.1"},
            )
        )  # fmt: skip
        self.master_url = self._wait_for("master.log", r"Starting Spark master at (spark://\S+)")[1]
        for i in range(self.workers):
            host = f"127.0.0.{i + 2}"
            self.procs.append(
                self._spark_class(
                    "org.apache.spark.deploy.worker.Worker",
                    "--host", host, "--cores", str(self.cores), "--memory", self.memory,
                    "--work-dir", os.path.join(self.work_dir, f"worker-{i}"),
                    "--webui-port", "0", self.master_url,
                    log=f"worker-{i}.log",
                    env={"SPARK_LOCAL_IP": host},
                )
            )  # fmt: skip
        self._wait_for("master.log", r"Registering worker", self.workers)
        return self

    def session(self, app_name: str = "runstore", conf: dict[str, Any] | None = None) -> Any:
        """A SparkSession on this cluster whose executors run this Python (``PYSPARK_PYTHON``),
        with the settings of ``conf`` added."""
        from pyspark.sql import SparkSession

        os.environ["PYSPARK_PYTHON"] = sys.executable
        builder = (
            SparkSession.builder.master(self.master_url)
            .appName(app_name)
            .config("spark.ui.enabled", "false")
            .config("spark.executor.memory", self.memory)
            .config("spark.local.dir", os.path.join(self.work_dir, "local"))
        )
        for k, v in (conf or {}).items():
            builder = builder.config(k, str(v))
        self._session = builder.getOrCreate()
        return self._session

    def stop(self) -> None:
        if self._session is not None:
            self._session.stop()
            self._session = None
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for p in reversed(self.procs):
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs.clear()
        if self._own_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self) -> StandaloneCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()
