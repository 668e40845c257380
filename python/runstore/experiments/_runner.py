"""runstore.experiments.run: every pending experiment of a store's design, on a pool of processes.

Each worker process opens its own writer. For each experiment it appends the status "running"
(made visible by a time-based auto-commit if the experiment runs long), calls fn(**params), then
appends the outcomes and the status "done" (or "failed" with the traceback) in one call, and
commits at the end of its chunk (and a second after its last commit at the latest): so an
experiment is done exactly when its outcomes are committed. The parent only hands out chunks of
experiment ids and parameters through a queue, sized by the rate the workers finish them
(ChunkSize), and counts small receipts; it never sees outcomes.
"""

from __future__ import annotations

import collections
import functools
import hashlib
import math
import multiprocessing as mp
import multiprocessing.connection
import os
import pickle
import queue
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import _progress, _signals
from .._memory import release_freed_memory
from . import _records as ex

if TYPE_CHECKING:
    from .._reader import StoreReader

#: Seconds after which a running experiment's "running" status is committed (auto-commit).
RUNNING_VISIBLE_S = 10.0
#: Longest error text kept per experiment; longer tracebacks keep their start and end.
MAX_ERROR_CHARS = 64 * 1024
#: Seconds the workers get to stop after Ctrl-C before they are killed.
STOP_GRACE_S = 10.0
#: Seconds of finished work a worker commits at once at most (besides its chunk's end): a
#: crash redoes at most this much, and the experiments of a commit share blocks.
COMMIT_AFTER_S = 1.0
#: Experiments whose parameters the parent reads at once when it runs a few of a sweep.
PARAMS_WINDOW = 65_536
#: The most experiments of one chunk when commit_every is None (chunks sized by rate).
MAX_CHUNK = 1000


@dataclass(frozen=True)
class RunSummary:
    """What one run_experiments call did."""

    #: Experiments that finished and were committed as done in this call.
    done: int
    #: Experiments that raised in this call (their status holds the message and traceback).
    failed: int
    #: Experiments not run because they were done already (and failed ones, with
    #: retry_failed=False).
    skipped: int
    #: Wall-clock seconds of the call.
    seconds: float
    #: Worker processes used (0: ran in the calling process).
    workers: int = 0
    #: Experiments left not done by this call although it meant to run them (interrupted, or
    #: their worker process died before it started them). A later call runs them.
    not_run: int = 0
    #: Ids of the experiments that failed in this call.
    failed_ids: list[Any] = field(default_factory=list, repr=False)

    def as_dict(self) -> dict[str, Any]:
        return {
            "done": self.done,
            "failed": self.failed,
            "skipped": self.skipped,
            "seconds": self.seconds,
            "workers": self.workers,
            "not_run": self.not_run,
        }

    def __str__(self) -> str:
        s = f"{self.done:,} done, {self.failed:,} failed, {self.skipped:,} skipped"
        s += f" in {self.seconds:.1f} s"
        return s + (f", {self.not_run:,} not run" if self.not_run else "")


class _Stop(BaseException):
    """Raised inside fn when the worker is told to stop (SIGTERM); never caught by fn's
    ``except Exception``."""


class _Flags:
    stop = False
    in_fn = False


def _format_error(e: BaseException) -> str:
    tb = e.__traceback__
    # Leave out the runner's own frame: the traceback starts in fn.
    if tb is not None and tb.tb_frame.f_code is _Runner.run_one.__code__:
        tb = tb.tb_next
    text = "".join(traceback.format_exception(type(e), e, tb))
    # A message that is not Unicode text (a lone surrogate, from a bytes object decoded with
    # surrogateescape) is kept with those code points escaped: the store keeps text as UTF-8,
    # and an experiment's error must never stop the sweep.
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    if len(text) > MAX_ERROR_CHARS:
        head, tail = MAX_ERROR_CHARS // 4, MAX_ERROR_CHARS - MAX_ERROR_CHARS // 4
        text = (
            text[:head] + f"\n[... {len(text) - head - tail:,} characters cut ...]\n" + text[-tail:]
        )
    return text


class _Runner:
    """Runs experiments and writes their status and outcomes with one writer."""

    def __init__(
        self, store: StoreReader, fn: Callable[..., Any], commit_every_s: float = RUNNING_VISIBLE_S
    ) -> None:
        self.fn = fn
        self.writer = store.writer(_allow_reserved=True, commit_every_s=commit_every_s)
        self.host = socket.gethostname()
        #: The experiment whose status says "running" and not yet how it ended (None: none).
        self.current: Any = None
        #: (done ids, failed ids) of the chunk run last, or being run.
        self.finished: tuple[list[Any], list[Any]] = ([], [])
        self.last_commit = time.monotonic()

    def run_one(self, eid: Any, params: dict[str, Any], attempt: int) -> bool:
        """Runs one experiment and appends its records (not committed). True if done."""
        w = self.writer
        started = time.time()
        self.current = eid
        w.log(
            eid,
            **{ex.STATE: "running", ex.HOST: self.host, ex.STARTED: started, ex.ATTEMPT: attempt},
        )
        t0 = time.perf_counter()
        error = None
        try:
            _Flags.in_fn = True
            if _Flags.stop:
                raise _Stop()
            out = self.fn(**params)
        except _signals.Terminated:
            raise  # SIGTERM to this process, not a failure of fn
        except (Exception, SystemExit) as e:  # noqa: BLE001 - whatever fn raises is its failure
            error = _format_error(e)
            out = None
        finally:
            _Flags.in_fn = False
        seconds = time.perf_counter() - t0
        # The host and the attempt are those the "running" record gave: not written again, so
        # that only the state is written twice at one key (every reader resolves such keys).
        status = {ex.FINISHED: time.time(), ex.SECONDS: seconds}
        if error is None:
            try:
                values = _outcomes(out)
                odd = {k: values.pop(k) for k in ("run", "step") if k in values}
                # Outcomes and status in one call: a (time-based) auto-commit never separates
                # them, and a value the store refuses appends nothing.
                w.log(eid, **values, **status, **{ex.STATE: "done", ex.ERROR: ""})
                self.current = None
                for k, v in odd.items():
                    w.put(eid, k, v)
                return True
            except (TypeError, ValueError, OverflowError) as e:
                error = f"{type(e).__name__}: the outcomes could not be stored: {e}\n"
        w.log(eid, **status, **{ex.STATE: "failed", ex.ERROR: error})
        self.current = None
        return False

    def run_chunk(
        self, chunk: list[tuple[Any, dict[str, Any], int]]
    ) -> tuple[list[Any], list[Any]]:
        """Runs the experiments of a chunk, then commits. Returns (done ids, failed ids).

        On _Stop, KeyboardInterrupt or Terminated the interrupted experiment is set back to
        pending, what finished is committed (and left in ``self.finished``), and the exception
        propagates."""
        done: list[Any] = []
        failed: list[Any] = []
        self.finished = (done, failed)
        for eid, params, attempt in chunk:
            if _Flags.stop:
                break
            try:
                ok = self.run_one(eid, params, attempt)
            except BaseException:
                # Interrupted before its outcome was logged: back to pending. One whose
                # outcome was logged is committed as it ended.
                if self.current is not None:
                    self.current = None
                    self.writer.log(eid, **{ex.STATE: "pending"})
                self.writer.commit()
                raise
            (done if ok else failed).append(eid)
            if time.monotonic() - self.last_commit >= COMMIT_AFTER_S:
                self.commit()
        self.commit()
        return done, failed

    def commit(self) -> None:
        self.writer.commit()
        self.last_commit = time.monotonic()

    def interrupt(self) -> None:
        """Sets the experiment under way back to pending and commits what is complete: what a
        process whose work runs on another thread (a Dask worker) does on SIGTERM or SIGINT,
        from its main thread, before it ends."""
        eid = self.current
        if eid is not None:
            self.writer.log(eid, **{ex.STATE: "pending"})
        self.writer.commit()

    def close(self) -> None:
        self.writer.close()


def _outcomes(out: Any) -> dict[str, Any]:
    if out is None:
        return {}
    if not isinstance(out, Mapping):
        raise TypeError(f"fn must return a dict of outcomes (or None), got {type(out).__name__}")
    values = {}
    for k, v in out.items():
        if not isinstance(k, str):
            raise TypeError(f"outcome names must be str, got {k!r}")
        if not k:
            raise ValueError("an outcome name is empty")
        if k.startswith("~"):
            raise ValueError(f"outcome {k!r} starts with '~', which is reserved for runstore")
        if v is not None:  # None: no value for this outcome
            values[k] = v
    return values


# -- worker processes ----------------------------------------------------------------------------


def _on_sigterm(signum: int, frame: Any) -> None:
    _Flags.stop = True
    if _Flags.in_fn:
        raise _Stop()


def _worker_main(
    widx: int,
    open_store: Callable[[], StoreReader],
    fn_bytes: bytes,
    task_q: Any,
    conn: Any,
    parent: int,
) -> None:
    """A worker process: opens the store with ``open_store``, then pulls chunks of experiments
    until it gets None.

    Receipts go to the parent through ``conn``, a pipe of its own written synchronously, so a
    receipt sent before the process dies is never lost in a buffer."""
    # Ctrl-C reaches every process of the terminal's foreground group: the parent decides.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _on_sigterm)

    def send(*msg: Any) -> None:
        try:
            conn.send(msg)
        except OSError:  # the parent is gone (EPIPE): finish the current chunk and stop
            _Flags.stop = True

    try:
        fn = pickle.loads(fn_bytes)
        runner = _Runner(open_store(), fn)
    except BaseException:  # noqa: BLE001 - the parent reports why this worker cannot start
        send("fatal", widx, traceback.format_exc())
        return
    try:
        while not _Flags.stop:
            try:
                item = task_q.get(timeout=0.5)
            except queue.Empty:
                if os.getppid() != parent:  # the parent is gone: stop
                    break
                continue
            if item is None:
                break
            seq, chunk = item
            send("begin", widx, seq)
            try:
                done, failed = runner.run_chunk(chunk)
            except _Stop:
                send("stopped", widx, seq, *runner.finished)  # what finished is committed
                break
            send("end", widx, seq, done, failed)
    finally:
        try:
            runner.close()
        finally:
            send("exit", widx)
            conn.close()


# -- the parent ----------------------------------------------------------------------------------


class Tally:
    """The done and failed ids of a run's chunks as they come back (a Dask or Spark runner), on
    the progress line; then the run's RunSummary."""

    def __init__(self, total: int, progress: bool) -> None:
        self.total = total
        self.done = self.failed = 0
        self.failed_ids: list[Any] = []
        self.bar = _Progress(total, progress)

    def add(self, done: list[Any], failed: list[Any]) -> None:
        self.done += len(done)
        self.failed += len(failed)
        self.failed_ids += failed
        self.bar.update(self.done, self.failed)

    def close(self) -> None:
        self.bar.close(self.done, self.failed)

    def summary(self, skipped: int, t0: float, workers: int) -> RunSummary:
        return RunSummary(
            self.done,
            self.failed,
            skipped,
            time.perf_counter() - t0,
            workers,
            self.total - self.done - self.failed,
            self.failed_ids,
        )


class _Progress:
    """The line a run keeps on stderr: experiments done, failed, rate and ETA; it stays on the
    screen at the end."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total = total
        self.line = _progress.Line("runstore", enabled and total > 0)

    def update(self, done: int, failed: int, force: bool = False) -> None:
        if not self.line.enabled:
            return
        n = done + failed
        el = self.line.elapsed()
        rate = n / el if el > 0 else 0.0
        eta = (self.total - n) / rate if rate > 0 else math.inf
        eta_s = "?" if not math.isfinite(eta) else time.strftime("%H:%M:%S", time.gmtime(eta))
        self.line.show(
            f"{n:,}/{self.total:,} experiments, {failed:,} failed, {rate:,.1f}/s, ETA {eta_s}",
            force,
        )

    def close(self, done: int, failed: int) -> None:
        self.update(done, failed, force=True)
        self.line.close(keep=True)


def _default_workers() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _plan(
    store: StoreReader, retry_failed: bool
) -> tuple[ex.ExperimentIndex | ex.RunList, np.ndarray, np.ndarray, int]:
    """(experiments, rows to run, attempts so far, skipped). The parent holds the state and
    attempt of every experiment as arrays, and its ids as the runs of one aligned read: ids
    become Python objects a chunk at a time (make_chunks)."""
    infos = ex.reserved_series(store, counts=False)
    status = [s for s in (ex.STATE, ex.ATTEMPT) if s in infos]
    index, cols = ex.load_aligned(store, status, infos, ids=False)
    n = len(index)
    attempts = np.zeros(n, dtype=np.int64)
    if ex.ATTEMPT in cols:
        a = cols[ex.ATTEMPT]
        attempts[a.present] = a.values[a.present].astype(np.int64)
    rows = ex.to_run(cols, n, retry_failed)
    del cols
    # What the reads and their temporaries left free on the C heap goes back before the
    # parameters are read: the parent's peak is what it holds, not the sum of both reads'.
    release_freed_memory()
    return index, rows, attempts, n - len(rows)


def _params_of(
    store: StoreReader, index: ex.ExperimentIndex | ex.RunList, rows: np.ndarray
) -> dict[str, ex.Column]:
    """The parameters of the experiments ``rows`` (in that order). Where they are few (a rerun
    of the failed experiments of a large sweep), of those alone, placed on their runs by the
    core a window at a time (``read_aligned``); else of every experiment, then taken."""
    infos = ex.reserved_series(store, counts=False)
    series = [ex.DESIGN + p for p in ex.design_columns(store, infos)]
    few = len(rows) <= len(index) // 4
    if few and isinstance(index, ex.RunList) and all(ex.alignable(infos[s]) for s in series):
        parts: dict[str, list[ex.Column]] = {s: [] for s in series}
        for start in range(0, len(rows), PARAMS_WINDOW):
            ids = index.take_array(rows[start : start + PARAMS_WINDOW]).tolist()
            for s, c in ex.read_aligned(store, ids, series, infos).items():
                parts[s].append(c)
        cols = {
            s: ex.Column(
                np.concatenate([c.values for c in p]) if p else np.zeros(0),
                np.concatenate([c.present for c in p]) if p else np.zeros(0, dtype=bool),
                infos[s]["dtype"],
            )
            for s, p in parts.items()
        }
    else:
        _, cols = ex.load_aligned(store, series, infos, ids=False)
        if len(rows) < len(index):  # rows ascend: all of them are every row, in order
            cols = {s: c.take(rows) for s, c in cols.items()}
    return {s[len(ex.DESIGN) :]: cols[s] for s in series}


def shard_of(eid: Any, n: int) -> int:
    """The shard (0 <= shard < n) an experiment id belongs to: the first 8 bytes of the SHA-256
    of ``"i:<id>"`` (int ids) or ``"s:<id>"`` (str ids), big-endian, modulo n. A function of
    the id alone, so it is the same in every runner and on every rerun (docs/experiments.md)."""
    tag = "s:" if isinstance(eid, str) else "i:"
    digest = hashlib.sha256((tag + str(eid)).encode()).digest()
    return int.from_bytes(digest[:8], "big") % n


def _env_int(env: Mapping[str, str], name: str) -> int:
    try:
        return int(env[name])
    except ValueError:
        raise ValueError(f"shard: {name}={env[name]!r} is not an integer") from None


def shard_from_env(env: Mapping[str, str] | None = None) -> tuple[int, int] | None:
    """(i, n) from a SLURM job array (SLURM_ARRAY_TASK_ID, _MIN, _STEP, _COUNT) or else from the
    tasks of a SLURM job step that srun started (SLURM_PROCID, SLURM_STEP_NUM_TASKS); None
    outside SLURM. SLURM_NTASKS is not used: the batch script itself sees it (the job's task
    count, with SLURM_PROCID 0), and a single runner there must run the whole sweep.

    Array task ids need not start at 0: ``--array=1-8`` gives i = SLURM_ARRAY_TASK_ID -
    SLURM_ARRAY_TASK_MIN, and ``--array=0-14:2`` divides by SLURM_ARRAY_TASK_STEP. An array
    given as a list (``--array=1,3,7``) has no step: there SLURM_ARRAY_TASK_ID must not be
    used, pass shard= yourself."""
    env = os.environ if env is None else env
    if "SLURM_ARRAY_TASK_ID" in env and "SLURM_ARRAY_TASK_COUNT" in env:
        task = _env_int(env, "SLURM_ARRAY_TASK_ID")
        low = _env_int(env, "SLURM_ARRAY_TASK_MIN") if "SLURM_ARRAY_TASK_MIN" in env else 0
        step = _env_int(env, "SLURM_ARRAY_TASK_STEP") if "SLURM_ARRAY_TASK_STEP" in env else 1
        count = _env_int(env, "SLURM_ARRAY_TASK_COUNT")
        if step < 1 or (task - low) % step:
            raise ValueError(
                f"shard: SLURM_ARRAY_TASK_ID={task} is not on the array's range (min {low}, step "
                f"{step}); pass shard=(i, n) explicitly"
            )
        return check_shard(((task - low) // step, count), "SLURM_ARRAY_TASK_ID/COUNT")
    if "SLURM_PROCID" in env and "SLURM_STEP_NUM_TASKS" in env:
        i, n = _env_int(env, "SLURM_PROCID"), _env_int(env, "SLURM_STEP_NUM_TASKS")
        return check_shard((i, n), "SLURM_PROCID/STEP_NUM_TASKS")
    return None


def check_shard(shard: Any, source: str = "shard") -> tuple[int, int]:
    """Validates (i, n): ints with 0 <= i < n."""
    try:
        i, n = shard
    except (TypeError, ValueError):
        raise ValueError(f"shard must be a pair (i, n), got {shard!r}") from None
    if (
        isinstance(i, bool)
        or isinstance(n, bool)
        or not all(isinstance(v, (int, np.integer)) for v in (i, n))
    ):
        raise ValueError(f"shard must be a pair of ints (i, n), got {shard!r}")
    i, n = int(i), int(n)
    if n < 1 or not 0 <= i < n:
        raise ValueError(f"shard {(i, n)} (from {source}) needs n >= 1 and 0 <= i < n")
    return i, n


def plan(
    store: StoreReader, retry_failed: bool, shard: tuple[int, int] | None
) -> tuple[ex.ExperimentIndex, dict[str, ex.Column], np.ndarray, np.ndarray, int]:
    """Refreshes the store, then (index, params, rows to run, attempts so far, skipped) of the
    shard (None: from the environment, see shard_from_env); ``params`` are those of ``rows``,
    in their order."""
    shard = shard_from_env() if shard is None else check_shard(shard)
    store.refresh()
    index, rows, attempts, skipped = _plan(store, retry_failed)
    if shard is not None and shard[1] > 1:
        i, n = shard
        mine = np.fromiter((shard_of(e, n) == i for e in index.all()), bool, len(index))
        skipped = int(mine.sum()) - int(mine[rows].sum())
        rows = rows[mine[rows]]
    return index, _params_of(store, index, rows), rows, attempts, skipped


class ChunkSize:
    """How many experiments the next chunk holds: ``commit_every`` when given, else as many as
    a worker finishes in about COMMIT_AFTER_S (at most MAX_CHUNK), learned from the chunks that
    ended; never more than ``cap``, so that every worker gets several chunks.

    Each chunk is one commit (and the experiments of a commit share one block per series): a
    sweep of quick experiments committed one by one would leave a dozen blocks per experiment,
    which every reader of the store indexes until it is compacted. Sizes start at 1 and grow at
    most 8-fold per chunk that ended; they shrink as soon as experiments get slower."""

    def __init__(self, commit_every: int | None, cap: int) -> None:
        self.fixed = commit_every
        self.cap = max(1, cap)
        self.size = max(1, min(commit_every or 1, self.cap))

    def __call__(self) -> int:
        return self.size

    def observe(self, n: int, seconds: float) -> None:
        """A chunk of ``n`` experiments ended after ``seconds``."""
        if self.fixed is not None or n <= 0:
            return
        fits = int(n * COMMIT_AFTER_S / max(seconds, 1e-6))
        self.size = max(1, min(fits, 8 * self.size, MAX_CHUNK, self.cap))


def make_chunks(
    index: ex.ExperimentIndex | ex.RunList,
    params: dict[str, ex.Column],
    rows: np.ndarray,
    attempts: np.ndarray,
    size: Callable[[], int],
):
    """Yields lists of (id, params, attempt), built lazily, of ``size()`` experiments each;
    ``params`` are those of ``rows``, in their order."""
    start = 0
    while start < len(rows):
        at = slice(start, min(len(rows), start + size()))
        r = rows[at]
        start += len(r)
        ids = index.take(r)
        cols = [(name, c.values[at].tolist(), c.present[at].tolist()) for name, c in params.items()]
        att = (attempts[r] + 1).tolist()
        chunk = []
        for k, eid in enumerate(ids):
            p = {name: vals[k] for name, vals, present in cols if present[k]}
            chunk.append((eid, p, att[k]))
        yield chunk


def cluster_chunks(
    store: StoreReader, retry_failed: bool, shard: tuple[int, int] | None,
    commit_every: int | None, workers: int,
) -> tuple[Any, int, int]:  # fmt: skip
    """A cluster's runner (Dask, Spark, Ray) plans before any chunk has run, so with no rate to
    size chunks by: ``commit_every`` experiments a chunk (one unless given), at most a quarter of
    a worker's share. Returns (the chunks, lazily; how many experiments they hold; skipped)."""
    check_commit_every(commit_every)
    index, params, rows, attempts, skipped = plan(store, retry_failed, shard)
    size = ChunkSize(commit_every or 1, -(-len(rows) // (4 * workers)))
    return make_chunks(index, params, rows, attempts, size), len(rows), skipped


def run_chunk_alone(
    path: str, store_type: type, fn: Callable[..., Any], chunk: list[Any]
) -> tuple[list[Any], list[Any]]:
    """A cluster task (Spark, Ray) that runs one chunk with a writer of its own, committed and
    closed, its segment sealed, before the task's result exists: the task's process may end
    without exit handlers. Returns (done ids, failed ids)."""
    runner = _Runner(store_type(path, "r+"), fn)
    try:
        return runner.run_chunk(chunk)
    finally:
        runner.close()


def run(
    store: StoreReader,
    fn: Callable[..., Mapping[str, Any] | None],
    workers: int | None,
    retry_failed: bool,
    progress: bool,
    commit_every: int | None,
    start_method: str,
    shard: tuple[int, int] | None = None,
) -> RunSummary:
    """runstore.experiments.run."""
    if store.read_only:
        raise RuntimeError(f"run_experiments: the store {store.path} is open read-only")
    check_commit_every(commit_every)
    t0 = time.perf_counter()
    index, params, rows, attempts, skipped = plan(store, retry_failed, shard)
    n_workers = _default_workers() if workers is None else int(workers)
    if n_workers < 0:
        raise ValueError("workers must be >= 0 (0: run in this process)")
    n_workers = min(n_workers, len(rows))
    if len(rows) == 0:
        return RunSummary(0, 0, skipped, time.perf_counter() - t0, 0, 0)
    # A worker commits after each chunk. Chunks are small enough that every worker gets
    # several: workers pull them from a queue, so slow and failing experiments balance out.
    size = ChunkSize(commit_every, math.ceil(len(rows) / max(1, 4 * n_workers)))
    chunks = make_chunks(index, params, rows, attempts, size)
    bar = _Progress(len(rows), progress)
    if n_workers == 0:
        return _run_here(store, fn, chunks, size, len(rows), skipped, t0, bar)
    try:
        fn_bytes = pickle.dumps(fn)
    except Exception as e:
        raise TypeError(
            f"run_experiments: fn must be picklable to reach the worker processes (a function "
            f"defined at the top level of a module, not a lambda or a nested function): {e}"
        ) from e
    return _Pool(
        store, fn_bytes, n_workers, start_method, chunks, size, len(rows), skipped, t0, bar
    ).run()


def check_commit_every(commit_every: int | None) -> None:
    if commit_every is not None and commit_every < 1:
        raise ValueError("commit_every must be at least 1 (or None: chunks sized by rate)")


def _run_here(
    store: StoreReader,
    fn: Callable[..., Any],
    chunks: Any,
    size: ChunkSize,
    total: int,
    skipped: int,
    t0: float,
    bar: _Progress,
) -> RunSummary:
    done = failed = 0
    failed_ids: list[Any] = []
    # SIGTERM raises Terminated (SystemExit(143)) here as Ctrl-C raises KeyboardInterrupt: the
    # experiment under way goes back to pending and what finished is committed (run_chunk).
    sigterm = _signals.enter()
    try:
        runner = _Runner(store, fn)
        try:
            for chunk in chunks:
                began = time.monotonic()
                d, f = runner.run_chunk(chunk)
                size.observe(len(chunk), time.monotonic() - began)
                done += len(d)
                failed += len(f)
                failed_ids += f
                bar.update(done, failed)
        except (KeyboardInterrupt, _signals.Terminated):
            d, f = runner.finished  # of the chunk it interrupted, committed
            done += len(d)
            failed += len(f)
            raise
        finally:
            bar.close(done, failed)
            runner.close()
            store.refresh()
    except (KeyboardInterrupt, _signals.Terminated):
        _say_interrupted(done, failed, total - done - failed)
        raise
    finally:
        _signals.leave(sigterm)
    return RunSummary(
        done, failed, skipped, time.perf_counter() - t0, 0, total - done - failed, failed_ids
    )


def _say_interrupted(done: int, failed: int, not_run: int) -> None:
    print(
        f"\nrunstore: interrupted; {done:,} done and {failed:,} failed in this call, "
        f"{not_run:,} not run. Run again to continue: done experiments are kept.",
        file=sys.stderr,
    )


class _Pool:
    """Worker processes fed through a bounded queue; replaces workers that die."""

    def __init__(
        self,
        store: StoreReader,
        fn_bytes: bytes,
        n: int,
        start_method: str,
        chunks: Any,
        size: ChunkSize,
        total: int,
        skipped: int,
        t0: float,
        bar: _Progress,
    ) -> None:
        self.store = store
        # How a worker opens the store: the parent's Store class (which pickles by name) on its
        # path, mode "r+".
        self.open_store = functools.partial(type(store), store.path, "r+")
        self.fn_bytes = fn_bytes
        self.n = n
        self.ctx = mp.get_context(start_method)
        self.chunks = chunks
        self.size = size
        self.began: dict[int, float] = {}  # worker -> when it began its chunk
        self.total = total
        self.skipped = skipped
        self.t0 = t0
        self.bar = bar
        self.task_q = self.ctx.Queue(maxsize=2 * n)
        self.conns: dict[int, Any] = {}  # worker -> read end of its receipt pipe
        self.procs: dict[int, Any] = {}
        self.exited: set[int] = set()
        self.current: dict[int, int] = {}  # worker -> chunk seq it runs
        #: seq -> chunk (a list of (id, params, attempt)), handed out, not finished.
        self.outstanding: dict[int, list[Any]] = {}
        #: Chunks of one experiment each, of a chunk whose worker died: run again one by one,
        #: before any new chunk, so that only the experiment that crashed its worker fails.
        self.retry: collections.deque[list[Any]] = collections.deque()
        self.next_seq = 0
        self.pending_item: Any = None
        self.chunks_done = False
        self.sentinels = 0
        self.started = 0
        self.done = 0
        self.failed = 0
        self.failed_ids: list[Any] = []
        self.fatal: str | None = None
        self.began_any: set[int] = set()
        self._failure_writer = None

    def _start(self) -> None:
        widx = self.started
        self.started += 1
        r, w = self.ctx.Pipe(duplex=False)
        p = self.ctx.Process(
            target=_worker_main,
            args=(widx, self.open_store, self.fn_bytes, self.task_q, w, os.getpid()),
            name=f"runstore-worker-{widx}",
            # Not daemonic: fn may start processes of its own (a DataLoader, a Pool), which
            # daemonic processes may not. run() stops and joins every worker itself.
            daemon=False,
        )
        # Ctrl-C reaches the whole process group: a worker that got it before _worker_main
        # ignores it would die printing a traceback. It starts with SIGINT blocked (the mask
        # is inherited through fork and exec); here it stays pending until the start is over.
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            p.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        w.close()  # the worker holds the write end: EOF when it exits
        self.procs[widx] = p
        self.conns[widx] = r

    def _feed(self) -> None:
        while True:
            if self.pending_item is None:
                if self.retry:
                    self.pending_item = (self.next_seq, self.retry.popleft())
                    self.next_seq += 1
                elif self.chunks_done:
                    if self.sentinels < self.started:
                        self.pending_item = ("sentinel",)
                    else:
                        return
                else:
                    chunk = next(self.chunks, None)
                    if chunk is None:
                        self.chunks_done = True
                        continue
                    self.pending_item = (self.next_seq, chunk)
                    self.next_seq += 1
            item = None if self.pending_item[0] == "sentinel" else self.pending_item
            try:
                self.task_q.put_nowait(item)
            except queue.Full:
                return
            if item is None:
                self.sentinels += 1
            else:
                self.outstanding[item[0]] = item[1]
            self.pending_item = None

    def _handle(self, msg: tuple[Any, ...]) -> None:
        kind, widx = msg[0], msg[1]
        if kind == "begin":
            self.current[widx] = msg[2]
            self.began[widx] = time.monotonic()
            self.began_any.add(widx)
        elif kind == "end":
            _, _, seq, d, f = msg
            self.current.pop(widx, None)
            self.outstanding.pop(seq, None)
            began = self.began.pop(widx, None)
            if began is not None:
                self.size.observe(len(d) + len(f), time.monotonic() - began)
            self.done += len(d)
            self.failed += len(f)
            self.failed_ids += f
            self.bar.update(self.done, self.failed)
        elif kind == "stopped":  # the rest of its chunk is left pending
            _, _, seq, d, f = msg
            self.current.pop(widx, None)
            self.outstanding.pop(seq, None)
            self.done += len(d)
            self.failed += len(f)
            self.failed_ids += f
        elif kind == "exit":
            self.exited.add(widx)
        elif kind == "fatal":
            self.fatal = msg[2]
            self.exited.add(widx)

    def _drain(self, timeout: float) -> None:
        """Reads the receipts that arrive within ``timeout`` (or until a worker exits)."""
        waitables = list(self.conns.values()) + [p.sentinel for p in self.procs.values()]
        if not waitables:
            return
        mp.connection.wait(waitables, timeout)
        for widx, c in list(self.conns.items()):
            self._read(widx, c)

    def _read(self, widx: int, c: Any) -> None:
        try:
            while c.poll():
                self._handle(c.recv())
        except (EOFError, OSError):  # the worker exited and everything it sent was read
            c.close()
            del self.conns[widx]

    def _work_left(self) -> bool:
        """True while some chunk has not been taken by a worker that started it."""
        if (
            self.retry
            or not self.chunks_done
            or (self.pending_item is not None and self.pending_item[0] != "sentinel")
        ):
            return True
        return bool(set(self.outstanding) - set(self.current.values()))

    def _reap(self) -> None:
        for widx, p in list(self.procs.items()):
            if p.is_alive():
                continue
            p.join()
            del self.procs[widx]
            if widx in self.conns:  # receipts it sent before exiting are still in the pipe
                self._read(widx, self.conns[widx])
            if widx in self.exited and p.exitcode == 0:
                # It took a sentinel meant for a worker that died before taking it, while the
                # chunks of that worker's crash wait behind it: another worker runs them.
                if self.fatal is None and self._work_left():
                    self._start()
                continue
            # It died (killed, out of memory, a segfault or os._exit in fn). One that a stop
            # signal killed before it could handle it (while it started) is replaced: the signal
            # was sent from outside (to the whole job, and then the parent's own handler stops
            # the sweep in a moment), not a sign that it cannot start.
            stopped = p.exitcode in (-signal.SIGTERM, -signal.SIGINT)
            if widx not in self.began_any and self.fatal is None and not stopped:
                self.fatal = (
                    f"worker process {p.name} exited with code {p.exitcode} before it ran anything "
                    "(see its error output above)"
                )
            seq = self.current.pop(widx, None)
            if seq is not None and seq in self.outstanding:
                self._crashed(self.outstanding.pop(seq), p.exitcode)
            if self.fatal is None and self._work_left():
                self._start()  # _feed gives it a sentinel of its own

    def _crashed(self, chunk: list[Any], exitcode: int | None) -> None:
        """Settles the chunk a dead worker was running. What it committed counts as it ended.
        Of the rest, a lone experiment is marked failed (it crashed its worker, or was killed
        with it); several are run again one by one (self.retry), so that only the experiment
        that crashed a worker is marked failed, when it crashes the next one."""
        self.store.refresh()
        ids = [eid for eid, _, _ in chunk]
        str_ids = any(isinstance(i, str) for i in ids)
        index = ex.ExperimentIndex(np.array(ids, dtype=object if str_ids else np.int64))
        reserved = ex.reserved_series(self.store, counts=False)
        state = ex.read_column(self.store, ex.STATE, index) if ex.STATE in reserved else None
        attempt = ex.read_column(self.store, ex.ATTEMPT, index) if ex.ATTEMPT in reserved else None
        rest = []
        for k, item in enumerate(chunk):
            # Ended in this call: "done" or "failed" committed by the attempt the chunk made.
            if (
                state is not None
                and attempt is not None
                and state.present[k]
                and attempt.present[k]
                and state.values[k] in ("done", "failed")
                and int(attempt.values[k]) == item[2]
            ):
                if state.values[k] == "done":
                    self.done += 1
                else:
                    self.failed += 1
                    self.failed_ids.append(item[0])
                continue
            rest.append(item)
        if len(rest) > 1 and self.fatal is None:
            self.retry.extend([item] for item in rest)
            return
        if not rest:
            return
        if exitcode is not None and exitcode < 0:
            how = f"was killed by signal {signal.Signals(-exitcode).name}"
        else:
            how = f"exited with code {exitcode}"
        if self._failure_writer is None:
            self._failure_writer = self.store.writer(_allow_reserved=True)
        w = self._failure_writer
        for eid, _, _ in rest:
            w.log(
                eid,
                **{
                    ex.STATE: "failed",
                    ex.ERROR: f"the worker process running this experiment {how} (the "
                    f"experiment may have crashed it, or it ran in the same batch of {len(rest)} "
                    "as one that did)\n",
                    ex.FINISHED: time.time(),
                },
            )
            self.failed += 1
            self.failed_ids.append(eid)
        w.commit()

    def run(self) -> RunSummary:
        old_term = None
        in_main = threading.current_thread() is threading.main_thread()
        stop_signal: list[int] = []
        if in_main:

            def on_term(signum: int, frame: Any) -> None:
                stop_signal.append(signum)
                # The first one stops the sweep as Ctrl-C does; more (a batch system signals
                # every process of a job, and again through its launcher) do not cut that
                # short. SIGKILL is the hard stop.
                if len(stop_signal) == 1:
                    raise KeyboardInterrupt

            old_term = signal.signal(signal.SIGTERM, on_term)
        interrupted = False
        try:
            for _ in range(self.n):
                self._start()
            while self.procs:
                self._feed()
                self._drain(0.05)
                self._reap()
                if self.fatal is not None:
                    break
        except KeyboardInterrupt:
            interrupted = True
            # A worker the signal killed before its handler was in place is no failure of the
            # sweep: the whole job is being stopped.
            self.fatal = None
        finally:
            try:
                self._stop(kill=self.fatal is not None)
            finally:
                if in_main:
                    signal.signal(signal.SIGTERM, old_term)
                self.bar.close(self.done, self.failed)
                if self._failure_writer is not None:
                    self._failure_writer.close()
                self.task_q.cancel_join_thread()
                self.task_q.close()
                for c in self.conns.values():
                    c.close()
                self.store.refresh()
        if self.fatal is not None:
            raise RuntimeError(f"run_experiments: a worker process failed:\n{self.fatal}")
        summary = RunSummary(
            self.done,
            self.failed,
            self.skipped,
            time.perf_counter() - self.t0,
            self.n,
            self.total - self.done - self.failed,
            self.failed_ids,
        )
        if interrupted:
            _say_interrupted(summary.done, summary.failed, summary.not_run)
            if stop_signal:
                raise SystemExit(128 + stop_signal[0])
            raise KeyboardInterrupt
        return summary

    def _stop(self, kill: bool) -> None:
        """Tells every live worker to stop (SIGTERM), waits for them, kills stragglers."""
        live = [p for p in self.procs.values() if p.is_alive()]
        if not live:
            self._drain(0)
            return
        for p in live:
            if kill:
                p.kill()
            else:
                p.terminate()
        deadline = time.monotonic() + STOP_GRACE_S
        try:
            while any(p.is_alive() for p in live) and time.monotonic() < deadline:
                self._drain(0.05)
        except KeyboardInterrupt:  # a second Ctrl-C: do not wait
            pass
        for p in live:
            if p.is_alive():
                p.kill()
            p.join()
        self._drain(0)
