"""Dask terminators over a store: save on the workers, plan partitions, watch memory (docs/dask.md).

``save(collection, store, name=...)`` writes a dask bag, a list of delayed objects, a dask
DataFrame (rows become records) or a dask array (blocks become records) from the workers, with
one writer per worker process, and returns one small :class:`Receipt` per partition, so that
``save(...).compute()`` gathers receipts, not data; :func:`collect` is the terminator that also
turns a partition whose input failed into a failed receipt while the others go on.

Keys are deterministic, so a task Dask runs again (after a worker died) rewrites the same keys
with the same values and the store, later commit wins, reads each record back once; a partition
an earlier attempt had saved whole is not written again (its marker, docs/dask.md):

- bag: ``(run=partition index + run_offset, name, step=index within the partition)``, or with
  ``key=f`` the element's own ``f(element)`` (a run, or a (run, step) pair);
- list of delayed: ``(run=list index + run_offset, name, step=0)``;
- DataFrame: ``(run=partition index + run_offset, column, step=row index within the partition)``;
- array: ``(run=flat block index + run_offset, name, step=0)``.

A bag element that is a dict is logged as one record per key (``Writer.log``); anything else
as one value under ``name`` (``Writer.put``). A bag's partition is saved as it streams, element
by element, and an element that raises costs only itself (its receipt names it).
"""

from __future__ import annotations

import atexit
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import dask
import dask.bag as db
import numpy as np
import psutil
from dask.highlevelgraph import HighLevelGraph
from distributed import WorkerPlugin, get_client, get_worker, wait

from .. import _signals
from .._progress import size_text
from .._store import Store
from . import _receipts
from ._plan import Plan, parse_size, plan
from ._receipts import Receipt, error_text, summarize

__all__ = [
    "Receipt",
    "save",
    "collect",
    "summarize",
    "WriterPlugin",
    "Plan",
    "plan",
    "parse_size",
    "MemoryMonitor",
]


# -- the writer of a worker process -------------------------------------------------------------


class WriterPlugin(WorkerPlugin):
    """Opens ``store``'s writer lazily in the worker process and closes it when the worker stops.

    Writer methods may be called from several threads at once (include/runstore/writer.h), so the
    worker's threads share the one writer; the lock guards only its creation. A writer belongs to
    the process that opened it: in a forked child a new one is opened. In a worker process,
    SIGTERM and SIGINT commit what was logged before the process ends by the signal
    (docs/experiments.md, "Signals"): a partition whose receipt was not returned runs again and
    rewrites the same keys.
    """

    def __init__(self, store: Store, writer_options: dict[str, Any] | None = None) -> None:
        self.store = store
        self.writer_options = dict(writer_options or {})
        self.name = plugin_name(store)
        self._lock = threading.Lock()
        self._writer: Any = None
        self._pid = 0  # the process _writer belongs to
        self._reader: Any = None  # the store as the markers are looked up in it
        self._reader_pid = 0

    def __getstate__(self) -> dict[str, Any]:
        return dict(store=self.store, writer_options=self.writer_options, name=self.name)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["store"], state["writer_options"])

    def setup(self, worker: Any = None) -> None:
        # Called on the worker's event loop, in its main thread: the signal handlers go there.
        _signals.on_stop(self.name, self._commit)

    def writer(self) -> Any:
        with self._lock:
            if self._writer is None or self._writer.closed or self._pid != os.getpid():
                self._writer = self.store.writer(**self.writer_options, _allow_reserved=True)
                self._pid = os.getpid()
            return self._writer

    def saved_earlier(self, save_id: str, log: _receipts.Partition) -> bool:
        """_receipts.saved_earlier on the store refreshed now."""
        with self._lock:
            if self._reader is None or self._reader_pid != os.getpid():
                self._reader = Store(self.store.path, "r")
                self._reader_pid = os.getpid()
            else:
                self._reader.refresh()
            return _receipts.saved_earlier(self._reader, save_id, log)

    def _commit(self) -> None:
        """SIGTERM or SIGINT to the worker process: what is logged is committed."""
        w = self._writer
        if w is not None and not w.closed and self._pid == os.getpid():
            w.commit()

    def teardown(self, worker: Any = None) -> None:
        _signals.forget_stop(self.name)
        with self._lock:
            if self._writer is not None and not self._writer.closed and self._pid == os.getpid():
                self._writer.close()  # commits what is logged, then closes
            self._writer = None


def plugin_name(store: Store) -> str:
    return f"runstore-writer:{os.path.realpath(store.path)}"


#: Writers of processes that are not Dask workers (the synchronous scheduler): closed at exit.
_LOCAL_PLUGINS: dict[str, WriterPlugin] = {}
_LOCAL_LOCK = threading.Lock()


def _after_fork_in_child() -> None:
    # The parent's writers are the parent's (their teardown at the child's exit does nothing
    # there): a child opens its own.
    global _LOCAL_LOCK
    _LOCAL_PLUGINS.clear()
    _LOCAL_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


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


# -- the tasks ----------------------------------------------------------------------------------


def _save_items(items, part, run, name, store, options, keep, key, save_id):
    """Logs one partition's elements as they come (a lazy partition is never held whole),
    marks it saved if whole, and commits; returns (receipt, the elements if keep)."""
    plugin = _plugin(store, options)
    log = _receipts.Partition(part)
    kept: list[Any] | None = [] if keep else None
    error = None
    try:
        if plugin.saved_earlier(save_id, log):  # an earlier attempt's: this one writes nothing
            kept = list(items) if keep else None
        else:
            log.log(plugin.writer, items, run, name, key, kept)
            w = plugin.writer()
            if log.complete:
                _receipts.mark_saved(w, save_id, log)
            w.commit()  # durable before the receipt says ok
    except Exception as e:  # noqa: BLE001 - recorded in the receipt; the others go on
        error = e
    return Receipt(*log.fields(error, _worker_address())), kept


def _save_bag_part(items, part, run, name, store, options, keep, key, save_id):
    receipt, kept = _save_items(items, part, run, name, store, options, keep, key, save_id)
    return ([receipt], kept) if keep else [receipt]


def _save_one(value, part, run, name, store, options, save_id):
    return _save_items([value], part, run, name, store, options, False, None, save_id)[0]


def _save_frame(frame, part, run, store, options, save_id):
    plugin = _plugin(store, options)
    log = _receipts.Partition(part)
    error = None
    try:
        if not plugin.saved_earlier(save_id, log):
            w = plugin.writer()
            n = len(frame)
            columns = {str(c): frame[c].to_numpy() for c in frame.columns}
            for c, values in columns.items():
                _receipts.check_name(c)
                _receipts.check_column(values, c)
            if n:
                w.log_many(np.full(n, run, dtype=np.int64), np.arange(n), columns=columns)
            log.records = n * len(columns)
            log.nbytes = int(sum(v.nbytes for v in columns.values()))
            _receipts.mark_saved(w, save_id, log)
            w.commit()
    except Exception as e:  # noqa: BLE001 - recorded in the receipt
        error = e
    return Receipt(*log.fields(error, _worker_address()))


def _register(store: Store, options: dict[str, Any]) -> None:
    try:
        client = get_client()
    except ValueError:
        return  # no distributed client: the tasks open a writer per process themselves
    plugin = WriterPlugin(store, options)
    client.register_plugin(plugin, name=plugin.name)


def _bag_of_saves(bag: db.Bag, *args: Any) -> db.Bag:
    """A bag of one receipt per partition of ``bag``, each partition's save a task that takes
    the partition's own task as its only input, so that Dask's bag optimisation fuses the two
    and hands the save the partition as a lazy iterator (elements mapped one at a time), not as
    the list that ``to_delayed`` would hold whole."""
    name = "runstore-save-" + dask.base.tokenize(bag, *args)
    layer = {
        (name, i): (_save_bag_part, (bag.name, i), i, i + args[0], *args[1:])
        for i in range(bag.npartitions)
    }
    graph = HighLevelGraph.from_collections(name, layer, dependencies=[bag])
    return db.Bag(graph, name, bag.npartitions)


def save(
    collection: Any,
    store: Store,
    name: str = "value",
    *,
    run_offset: int = 0,
    key: Callable[[Any], Any] | None = None,
    pass_through: bool = False,
    save_id: str | None = None,
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
        key: for a bag, a function of an element giving its run (int or str), or its (run,
            step): records keyed by the data's own identity, so that a save again with another
            partitioning rewrites the same keys (the default, partition and position, would
            not).
        pass_through: for a bag, return ``(data, receipts)``: the data bag, saved as it passes,
            to go on computing with (each partition is then held whole, to be passed on).
        save_id: names this save in the store's markers of partitions saved whole: a task Dask
            runs again after its worker died, whose partition an earlier attempt had saved whole,
            writes nothing (nor computes it, for a bag) and its receipt names that attempt's
            writer (``earlier``). Default: a new id each call; pass the same str again to resume
            a save that stopped (a client that died) without writing its finished partitions
            again.
        writer_options: keyword arguments of :meth:`Store.writer` for the workers' writers.

    Returns a bag of receipts (bag), a list of delayed receipts (list of delayed, DataFrame,
    array); nothing is computed until they are.

    A bag's partition reaches its save as the lazy stream of its elements, mapped one at a time
    (the maps before the save run in the same task), so a worker holds one element at a time,
    and an element that raises (in such a map, in ``key``, or refused by the writer) is counted
    and named in the partition's receipt (``failures``, ``error``, ``ok=False``) while the
    others are saved. A partition that raises otherwise is a receipt with ``ok=False`` and the
    error text; the records it logged before the error stay logged and are committed by that
    worker's next commit (the Writer has no rollback): they carry their right keys, and a rerun
    rewrites them. Raises TypeError for another kind of collection or a ``key`` that is not a
    function, ValueError for a store opened read-only.
    """
    if not isinstance(store, Store):
        raise TypeError(f"store must be a runstore.Store, not {type(store).__name__}")
    if store.read_only:
        raise ValueError(f"store {store.path} is opened read-only; save needs mode 'a'")
    _receipts.check_name(name)
    if not isinstance(run_offset, int) or isinstance(run_offset, bool) or run_offset < 0:
        raise ValueError(f"run_offset must be an int >= 0, not {run_offset!r}")
    if key is not None and not callable(key):
        raise TypeError(f"key must be a function of an element, not {type(key).__name__}")
    if key is not None and not isinstance(collection, db.Bag):
        raise TypeError("key= is for a dask bag")
    save_id = _receipts.new_save_id(save_id)
    options = dict(writer_options or {})
    _register(store, options)
    if isinstance(collection, db.Bag):
        if not pass_through:
            return _bag_of_saves(collection, run_offset, name, store, options, False, key, save_id)
        tasks = [
            dask.delayed(_save_bag_part, pure=True, nout=2)(
                p, i, i + run_offset, name, store, options, True, key, save_id
            )
            for i, p in enumerate(collection.to_delayed(optimize_graph=True))
        ]
        return db.from_delayed([t[1] for t in tasks]), db.from_delayed([t[0] for t in tasks])
    if pass_through:
        raise ValueError("pass_through=True is for a dask bag")
    one = dask.delayed(_save_one, pure=True)
    if isinstance(collection, Sequence) and all(dask.is_dask_collection(x) for x in collection):
        return [
            one(x, i, i + run_offset, name, store, options, save_id)
            for i, x in enumerate(collection)
        ]
    kind = type(collection).__module__
    if kind.startswith("dask.dataframe") or kind.startswith("dask_expr"):
        frame = dask.delayed(_save_frame, pure=True)
        return [
            frame(p, i, i + run_offset, store, options, save_id)
            for i, p in enumerate(collection.to_delayed())
        ]
    if kind.startswith("dask.array"):
        blocks = collection.to_delayed().ravel()
        return [
            one(b, i, i + run_offset, name, store, options, save_id) for i, b in enumerate(blocks)
        ]
    raise TypeError(
        "collection must be a dask bag, a list of delayed objects, a dask DataFrame or a dask "
        f"array, not {type(collection).__name__}"
    )


def collect(receipts: Any, client: Any = None) -> list[Receipt]:
    """The terminator: runs every partition of what :func:`save` returned and gathers one
    :class:`Receipt` per partition, also for those whose *input* failed.

    ``save(...).compute()`` gathers receipts too, but an exception raised upstream of the save
    (in the bag's ``map``, a read, a ``delayed`` input) is Dask's: it propagates out of
    ``compute`` and the other partitions are cancelled. Here every partition runs to its end,
    and one whose computation raised is a receipt with ``ok=False``, the exception text and
    ``worker=""`` (nothing of it was logged). ``receipts`` is the bag or list of delayed that
    ``save`` returned; ``client`` defaults to the current distributed client.
    """
    if isinstance(receipts, db.Bag):
        parts = receipts.to_delayed(optimize_graph=True)
    elif isinstance(receipts, Sequence) and all(dask.is_dask_collection(x) for x in receipts):
        parts = list(receipts)
    else:
        raise TypeError(
            f"receipts must be what runstore.dask.save returned, not {type(receipts).__name__}"
        )
    client = client if client is not None else get_client()
    futures = client.compute(parts)
    wait(futures)
    out: list[Receipt] = []
    for i, f in enumerate(futures):
        if f.status == "finished":
            r = f.result()
            out.extend(r if isinstance(r, list) else [r])
            continue
        try:
            e = f.exception()
            error = error_text(e)
        except Exception as why:  # noqa: BLE001 - a cancelled future has no exception
            error = f"{f.status}: {why}"
        out.append(Receipt(i, 0, 0, False, error, "", 0.0, 0, ""))
    return out


# -- the memory monitor -------------------------------------------------------------------------


class MemoryMonitor:
    """Samples the RSS of the client, the scheduler and every worker process while it is entered.

    The processes must run on this host (a LocalCluster): they are read with psutil by pid.
    ``peaks`` maps a process label to its peak RSS in bytes, ``starts`` to its RSS when the
    monitor was entered; ``samples`` is a list of ``(seconds since start, label, rss)``.
    A process's absolute size depends on what it imported before (a test runner's, on every
    test that ran earlier), so a bound on what a computation costs is a bound on ``growth``.
    """

    def __init__(self, client: Any, interval: float = 0.05) -> None:
        self.client = client
        self.interval = float(interval)
        self.samples: list[tuple[float, str, int]] = []
        self.peaks: dict[str, int] = {}
        self.starts: dict[str, int] = {}
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
            self.starts.setdefault(label, rss)
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

    def growth(self, prefix: str) -> int:
        """The largest rise from start to peak among the processes whose label starts with
        ``prefix``."""
        return max(
            (v - self.starts[k] for k, v in self.peaks.items() if k.startswith(prefix)), default=0
        )

    def table(self) -> str:
        """Peak RSS per process, one line each."""
        return "\n".join(
            f"{label:<40} peak RSS {size_text(v)} (from {size_text(self.starts[label])})"
            for label, v in self.peaks.items()
        )

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
