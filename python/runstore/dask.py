"""Dask terminators over a store: save on the workers, plan partitions, watch memory (docs/dask.md).

``save(collection, store, name=...)`` writes a dask bag, a list of delayed objects, a dask
DataFrame (rows become records) or a dask array (blocks become records) from the workers, with
one writer per worker process, and returns one small :class:`Receipt` per partition, so that
``save(...).compute()`` gathers receipts, not data.

Keys are deterministic, so a task Dask runs again (after a worker died) rewrites the same keys
with the same values and the store, later commit wins, reads each record back once:

- bag: ``(run=partition index + run_offset, name, step=index within the partition)``;
- list of delayed: ``(run=list index + run_offset, name, step=0)``;
- DataFrame: ``(run=partition index + run_offset, column, step=row index within the partition)``;
- array: ``(run=flat block index + run_offset, name, step=0)``.

A bag element that is a dict is logged as one record per key (``Writer.log``); anything else
as one value under ``name`` (``Writer.put``).
"""

from __future__ import annotations

import argparse
import atexit
import dataclasses
import os
import re
import socket
import sys
import threading
import time
import traceback
from collections.abc import Iterable, Sequence
from typing import Any

import dask
import dask.bag as db
import numpy as np
import psutil
from distributed import WorkerPlugin, get_client, get_worker

from ._store import Store

__all__ = [
    "Receipt",
    "save",
    "summarize",
    "WriterPlugin",
    "Plan",
    "plan",
    "parse_size",
    "MemoryMonitor",
]


@dataclasses.dataclass(frozen=True)
class Receipt:
    """What one partition's save did: small, so that gathering them costs the client nothing.

    ``ok`` means its records were committed (durable) before the task returned; otherwise
    ``error`` holds the exception text and ``records`` how many were logged before it.
    """

    partition: int
    records: int
    bytes: int
    ok: bool
    error: str
    worker: str
    seconds: float


def summarize(receipts: Iterable[Receipt]) -> dict[str, Any]:
    """Adds receipts up: partitions, ok, failed, records, bytes, seconds (summed task time) and the
    errors of the failed partitions as ``{partition: error}``."""
    out: dict[str, Any] = dict(partitions=0, ok=0, failed=0, records=0, bytes=0, seconds=0.0)
    errors: dict[int, str] = {}
    for r in receipts:
        out["partitions"] += 1
        out["ok" if r.ok else "failed"] += 1
        out["records"] += r.records
        out["bytes"] += r.bytes
        out["seconds"] += r.seconds
        if not r.ok:
            errors[r.partition] = r.error
    out["errors"] = errors
    return out


# -- the writer of a worker process -------------------------------------------------------------


class WriterPlugin(WorkerPlugin):
    """Opens ``store``'s writer lazily in the worker process and closes it when the worker stops.

    Writer methods may be called from several threads at once (include/runstore/writer.h), so the
    worker's threads share the one writer; the lock guards only its creation.
    """

    def __init__(self, store: Store, writer_options: dict[str, Any] | None = None) -> None:
        self.store = store
        self.writer_options = dict(writer_options or {})
        self.name = plugin_name(store)
        self._lock = threading.Lock()
        self._writer: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return dict(store=self.store, writer_options=self.writer_options, name=self.name)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["store"], state["writer_options"])

    def writer(self) -> Any:
        with self._lock:
            if self._writer is None or self._writer.closed:
                self._writer = self.store.writer(**self.writer_options)
            return self._writer

    def teardown(self, worker: Any = None) -> None:
        with self._lock:
            if self._writer is not None and not self._writer.closed:
                self._writer.close()  # commits what is logged, then closes
            self._writer = None


def plugin_name(store: Store) -> str:
    return f"runstore-writer:{os.path.realpath(store.path)}"


#: Writers of processes that are not Dask workers (the synchronous scheduler): closed at exit.
_LOCAL_PLUGINS: dict[str, WriterPlugin] = {}
_LOCAL_LOCK = threading.Lock()


def _plugin(store: Store, writer_options: dict[str, Any]) -> WriterPlugin:
    try:
        plugin = get_worker().plugins.get(plugin_name(store))
    except ValueError:  # not in a worker
        plugin = None
    if plugin is not None:
        return plugin
    with _LOCAL_LOCK:
        key = plugin_name(store)
        if key not in _LOCAL_PLUGINS:
            _LOCAL_PLUGINS[key] = WriterPlugin(store, writer_options)
            atexit.register(_LOCAL_PLUGINS[key].teardown)
        return _LOCAL_PLUGINS[key]


def _worker_address() -> str:
    try:
        return get_worker().address
    except ValueError:
        return f"{socket.gethostname()}:{os.getpid()}"


def _nbytes(value: Any) -> int:
    if isinstance(value, np.ndarray):
        return value.nbytes
    if isinstance(value, (bytes, str)):
        return len(value)
    return np.asarray(value).nbytes


# -- the tasks ----------------------------------------------------------------------------------


def _save_items(items, part, run, name, store, options, keep):
    """Logs one partition's items and commits; returns (receipt, the items if keep)."""
    start = time.perf_counter()
    records = nbytes = 0
    kept = [] if keep else None
    try:
        w = _plugin(store, options).writer()
        for step, item in enumerate(items):
            if isinstance(item, dict):
                w.log(run, step, **item)
                records += len(item)
                nbytes += sum(_nbytes(v) for v in item.values())
            else:
                w.put(run, name, item, step)
                records += 1
                nbytes += _nbytes(item)
            if keep:
                kept.append(item)
        w.commit()  # durable before the receipt says ok
        ok, error = True, ""
    except Exception as e:  # noqa: BLE001 - recorded in the receipt; the others go on
        ok, error = False, "".join(traceback.format_exception_only(type(e), e)).strip()
    receipt = Receipt(
        part, records, nbytes, ok, error, _worker_address(), time.perf_counter() - start
    )
    return receipt, kept


def _save_bag_part(items, part, run, name, store, options, keep):
    receipt, kept = _save_items(items, part, run, name, store, options, keep)
    return ([receipt], kept) if keep else [receipt]


def _save_one(value, part, run, name, store, options):
    return _save_items([value], part, run, name, store, options, False)[0]


def _save_frame(frame, part, run, store, options):
    start = time.perf_counter()
    try:
        w = _plugin(store, options).writer()
        n = len(frame)
        columns = {str(c): frame[c].to_numpy() for c in frame.columns}
        if n:
            w.log_many(np.full(n, run, dtype=np.int64), np.arange(n), **columns)
        w.commit()
        receipt = Receipt(
            part,
            n * len(columns),
            int(sum(v.nbytes for v in columns.values())),
            True,
            "",
            _worker_address(),
            time.perf_counter() - start,
        )
    except Exception as e:  # noqa: BLE001 - recorded in the receipt
        error = "".join(traceback.format_exception_only(type(e), e)).strip()
        receipt = Receipt(part, 0, 0, False, error, _worker_address(), time.perf_counter() - start)
    return receipt


def _register(store: Store, options: dict[str, Any]) -> None:
    try:
        client = get_client()
    except ValueError:
        return  # no distributed client: the tasks open a writer per process themselves
    plugin = WriterPlugin(store, options)
    client.register_plugin(plugin, name=plugin.name)


def save(
    collection: Any,
    store: Store,
    name: str = "value",
    *,
    run_offset: int = 0,
    pass_through: bool = False,
    writer_options: dict[str, Any] | None = None,
) -> Any:
    """Writes ``collection`` to ``store`` from the workers; returns receipts, one per partition.

    Args:
        collection: a dask bag, a list of ``dask.delayed`` objects, a dask DataFrame or a dask
            array. The keys are in this module's docstring.
        store: an open, writable :class:`runstore.Store` (it pickles as its path).
        name: the series name of bag elements that are not dicts, delayed values and array
            blocks (a DataFrame's columns are named by the columns).
        run_offset: added to each run number, so that several saves into one store do not
            overwrite each other.
        pass_through: for a bag, return ``(data, receipts)``: the data bag, saved as it passes,
            to go on computing with.
        writer_options: keyword arguments of :meth:`Store.writer` for the workers' writers.

    Returns a bag of receipts (bag), a list of delayed receipts (list of delayed, DataFrame,
    array); nothing is computed until they are.

    A partition that raises is a receipt with ``ok=False`` and the error text; the records it
    logged before the error stay logged and are committed by that worker's next commit (the
    Writer has no rollback): they carry their right keys, and a rerun rewrites them.
    Raises TypeError for another kind of collection, ValueError for a store opened read-only.
    """
    if not isinstance(store, Store):
        raise TypeError(f"store must be a runstore.Store, not {type(store).__name__}")
    if store.read_only:
        raise ValueError(f"store {store.path} is opened read-only; save needs mode 'a'")
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty str, not {name!r}")
    if not isinstance(run_offset, int) or run_offset < 0:
        raise ValueError(f"run_offset must be an int >= 0, not {run_offset!r}")
    options = dict(writer_options or {})
    _register(store, options)
    fn = dask.delayed(_save_bag_part, pure=True)
    if isinstance(collection, db.Bag):
        parts = collection.to_delayed(optimize_graph=True)
        if pass_through:
            nout = dict(nout=2)
            tasks = [
                dask.delayed(_save_bag_part, pure=True, **nout)(
                    p, i, i + run_offset, name, store, options, True
                )
                for i, p in enumerate(parts)
            ]
            return db.from_delayed([t[1] for t in tasks]), db.from_delayed([t[0] for t in tasks])
        return db.from_delayed(
            [fn(p, i, i + run_offset, name, store, options, False) for i, p in enumerate(parts)]
        )
    if pass_through:
        raise ValueError("pass_through=True is for a dask bag")
    if isinstance(collection, Sequence) and all(dask.is_dask_collection(x) for x in collection):
        one = dask.delayed(_save_one, pure=True)
        return [one(x, i, i + run_offset, name, store, options) for i, x in enumerate(collection)]
    kind = type(collection).__module__
    if kind.startswith("dask.dataframe") or kind.startswith("dask_expr"):
        frame = dask.delayed(_save_frame, pure=True)
        return [
            frame(p, i, i + run_offset, store, options)
            for i, p in enumerate(collection.to_delayed())
        ]
    if kind.startswith("dask.array"):
        one = dask.delayed(_save_one, pure=True)
        blocks = collection.to_delayed().ravel()
        return [one(b, i, i + run_offset, name, store, options) for i, b in enumerate(blocks)]
    raise TypeError(
        "collection must be a dask bag, a list of delayed objects, a dask DataFrame or a dask "
        f"array, not {type(collection).__name__}"
    )


# -- the partition planner ----------------------------------------------------------------------

_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "kib": 2**10, "m": 10**6, "mb": 10**6}
_UNITS.update({"mib": 2**20, "g": 10**9, "gb": 10**9, "gib": 2**30, "t": 10**12, "tb": 10**12})
_UNITS.update({"tib": 2**40})


def parse_size(text: str | int, what: str = "size") -> int:
    """``"16MiB"`` -> 16777216, ``"2GB"`` -> 2000000000, ``4096`` -> 4096 (bytes)."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text <= 0:
            raise ValueError(f"{what} must be > 0, not {text}")
        return text
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"{what} must be a size like 4096, 16MiB or 2GB, not {text!r}")
    value = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if value <= 0:
        raise ValueError(f"{what} must be > 0, not {text!r}")
    return value


@dataclasses.dataclass(frozen=True)
class Plan:
    """How to partition ``n_objects`` objects of ``object_bytes`` each on the cluster given."""

    n_objects: int
    object_bytes: int
    worker_memory: int
    threads_per_worker: int
    n_workers: int
    k: float
    partition_size: int  # objects per partition
    n_partitions: int
    limited_by: str  # "memory" or "parallelism"

    @property
    def reasoning(self) -> str:
        M, T, D, N, k = (
            self.worker_memory,
            self.threads_per_worker,
            self.object_bytes,
            self.n_objects,
            self.k,
        )
        per_thread = k * M / T
        return "\n".join(
            [
                f"objects N = {N:,}, object size D = {_fmt(D)}, data set N*D = {_fmt(N * D)}",
                f"workers W = {self.n_workers}, memory per worker M = {_fmt(M)}, threads T = {T}",
                f"a worker runs T partitions at once; each may hold k*M/T = {k:g}*{_fmt(M)}/{T}"
                f" = {_fmt(per_thread)}",
                f"objects per partition s = floor(k*M/(D*T)) = {int(per_thread // D):,}",
                f"parallelism: at least W*T = {self.n_workers * T} partitions keep every thread "
                "busy",
                f"-> {self.n_partitions:,} partitions of up to {self.partition_size:,} objects "
                f"({_fmt(self.partition_size * D)} each; limited by {self.limited_by})",
            ]
        )

    def __str__(self) -> str:
        return self.reasoning

    def draw(self, path: str | os.PathLike[str]) -> None:
        """Draws the plan to a PNG: the data set as a row of partition boxes, each worker's memory
        as a box below it holding T partitions at a time."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Rectangle

        shown = min(self.n_partitions, 40)
        fig, ax = plt.subplots(figsize=(10, 3.6))
        w = 1.0 / shown
        for i in range(shown):
            ax.add_patch(Rectangle((i * w, 0.62), w * 0.9, 0.18, fc="#9ecae1", ec="#3182bd"))
        ax.text(
            0,
            0.86,
            f"data set: {self.n_objects:,} objects x {_fmt(self.object_bytes)} = "
            f"{_fmt(self.n_objects * self.object_bytes)} in {self.n_partitions:,} partitions of "
            f"{self.partition_size:,}" + (" (first 40 drawn)" if shown < self.n_partitions else ""),
            fontsize=9,
        )
        nw = min(self.n_workers, 8)
        ww = 1.0 / nw
        part_frac = self.partition_size * self.object_bytes / self.worker_memory
        for j in range(nw):
            x = j * ww
            ax.add_patch(Rectangle((x, 0.05), ww * 0.92, 0.4, fc="white", ec="black"))
            for t in range(self.threads_per_worker):
                h = 0.4 * part_frac
                ax.add_patch(
                    Rectangle(
                        (x + 0.01 * ww, 0.05 + t * h), ww * 0.9, h, fc="#fdae6b", ec="#e6550d"
                    )
                )
            ax.text(x, 0.47, f"worker {j}: M = {_fmt(self.worker_memory)}", fontsize=8)
        ax.text(
            0,
            -0.05,
            f"each worker holds T = {self.threads_per_worker} partitions at once "
            f"= {self.threads_per_worker * part_frac:.0%} of M (k = {self.k:g})",
            fontsize=9,
        )
        ax.set_xlim(0, 1)
        ax.set_ylim(-0.1, 0.95)
        ax.axis("off")
        fig.savefig(path, dpi=80, bbox_inches="tight")
        plt.close(fig)


def _fmt(n: float) -> str:
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"


def plan(
    n_objects: int,
    object_bytes: int | str,
    worker_memory: int | str,
    threads_per_worker: int,
    n_workers: int,
    k: float = 0.25,
) -> Plan:
    """Partition count and size for a bag of ``n_objects`` objects of ``object_bytes`` bytes on
    ``n_workers`` workers of ``worker_memory`` bytes and ``threads_per_worker`` threads.

    A worker runs T tasks at once, each holding one partition; T partitions of s objects of D
    bytes must fit in the fraction k of M: ``s = floor(k*M/(D*T))``, and there are
    ``ceil(N/s)`` partitions, at least ``W*T`` (docs/dask.md derives it and measures k).
    Raises ValueError when one object alone does not fit (``D > k*M/T``) or an argument is out of
    range, TypeError for a non-integer count.
    """
    for arg, v in (
        ("n_objects", n_objects),
        ("threads_per_worker", threads_per_worker),
        ("n_workers", n_workers),
    ):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool):
            raise TypeError(f"{arg} must be an int, not {type(v).__name__}")
        if v <= 0:
            raise ValueError(f"{arg} must be > 0, not {v}")
    D = parse_size(object_bytes, "object_bytes")
    M = parse_size(worker_memory, "worker_memory")
    if not isinstance(k, (int, float)) or not 0 < k <= 1:
        raise ValueError(f"k must be a number in (0, 1], not {k!r}")
    T, W, N = int(threads_per_worker), int(n_workers), int(n_objects)
    s = int(k * M // (D * T))
    if s < 1:
        raise ValueError(
            f"one object of {_fmt(D)} does not fit: k*M/T = {k:g}*{_fmt(M)}/{T} = "
            f"{_fmt(k * M / T)}; give the workers more memory or fewer threads"
        )
    n_parts = -(-N // s)
    limited_by = "memory"
    if n_parts < W * T:
        n_parts = min(N, W * T)
        s = -(-N // n_parts)
        n_parts = -(-N // s)
        limited_by = "parallelism"
    return Plan(N, D, M, T, W, float(k), s, n_parts, limited_by)


def plan_main(argv: list[str]) -> int:
    """``runstore plan``: prints the plan's reasoning (and draws it with --draw FILE)."""
    p = argparse.ArgumentParser(prog="runstore plan", description=plan.__doc__.split("\n")[0])
    p.add_argument("--objects", type=int, required=True, help="number of objects N")
    p.add_argument("--object-bytes", required=True, help="size of one object D, e.g. 16MiB")
    p.add_argument("--worker-memory", required=True, help="memory per worker M, e.g. 4GiB")
    p.add_argument("--threads", type=int, default=1, help="threads per worker T (default 1)")
    p.add_argument("--workers", type=int, default=1, help="number of workers W (default 1)")
    p.add_argument("--k", type=float, default=0.25, help="fraction of M for partitions")
    p.add_argument("--draw", metavar="PNG", help="also draw the plan to this file")
    a = p.parse_args(argv)
    try:
        result = plan(a.objects, a.object_bytes, a.worker_memory, a.threads, a.workers, k=a.k)
    except (TypeError, ValueError) as e:
        print(f"runstore plan: {e}", file=sys.stderr)
        return 2
    print(result.reasoning)
    if a.draw:
        result.draw(a.draw)
    return 0


# -- the memory monitor -------------------------------------------------------------------------


class MemoryMonitor:
    """Samples the RSS of the client, the scheduler and every worker process while it is entered.

    The processes must run on this host (a LocalCluster): they are read with psutil by pid.
    ``peaks`` maps a process label to its peak RSS in bytes; ``samples`` is a list of
    ``(seconds since start, label, rss)``.
    """

    def __init__(self, client: Any, interval: float = 0.05) -> None:
        self.client = client
        self.interval = float(interval)
        self.samples: list[tuple[float, str, int]] = []
        self.peaks: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _pids(self) -> dict[str, int]:
        pids = {"client": os.getpid(), "scheduler": self.client.run_on_scheduler(os.getpid)}
        for i, (addr, pid) in enumerate(sorted(self.client.run(os.getpid).items())):
            pids[f"worker {i} ({addr})"] = pid
        return pids

    def __enter__(self) -> MemoryMonitor:
        self._procs = {label: psutil.Process(pid) for label, pid in self._pids().items()}
        self._t0 = time.perf_counter()
        self._thread = threading.Thread(target=self._run, daemon=True, name="MemoryMonitor")
        self._thread.start()
        return self

    def _sample(self) -> None:
        t = time.perf_counter() - self._t0
        for label, proc in list(self._procs.items()):
            try:
                rss = proc.memory_info().rss
            except psutil.Error:  # the process died (a killed worker)
                continue
            self.samples.append((t, label, rss))
            self.peaks[label] = max(self.peaks.get(label, 0), rss)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()

    def peak(self, prefix: str) -> int:
        """The largest peak among the processes whose label starts with ``prefix``."""
        return max((v for k, v in self.peaks.items() if k.startswith(prefix)), default=0)

    def table(self) -> str:
        """Peak RSS per process, one line each."""
        return "\n".join(f"{label:<40} peak RSS {_fmt(v)}" for label, v in self.peaks.items())

    def plot(self, path: str | os.PathLike[str]) -> None:
        """RSS over time, one line per process, to a PNG."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(8, 4))
        for label in self.peaks:
            pts = [(t, r / 2**20) for t, lab, r in self.samples if lab == label]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=label)
        ax.set_xlabel("seconds")
        ax.set_ylabel("RSS (MiB)")
        ax.legend(fontsize=7)
        fig.savefig(path, dpi=80, bbox_inches="tight")
        plt.close(fig)
