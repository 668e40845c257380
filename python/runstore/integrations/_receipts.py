"""What the terminators of runstore.dask, runstore.spark and runstore.ray share: a partition's
stream of elements logged one at a time (an element that raises is named, the others go on),
the marker of a partition saved whole, and the receipts, added up."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import time
import traceback
import uuid
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from .. import _core
from .._store import Store


@dataclasses.dataclass(frozen=True)
class Receipt:
    """What one partition's save did: small, so that gathering them costs the client nothing.

    ``ok`` means every element was logged and committed (durable) before the task returned;
    otherwise ``error`` holds the exception text (the first elements that raised, by their
    place in the partition) and ``records`` how many were logged and committed all the same.
    ``failures`` counts the elements that raised (in a map upstream, in ``key``, or refused by
    the writer); ``earlier`` is the writer id of an earlier attempt of the same save that had
    saved this partition whole (a task run again after its worker died): this attempt wrote
    nothing, and ``records`` and ``bytes`` are that attempt's.
    """

    partition: int
    records: int
    bytes: int
    ok: bool
    error: str
    worker: str
    seconds: float
    failures: int
    earlier: str


def summarize(receipts: Iterable[Any]) -> dict[str, Any]:
    """Adds receipts up: partitions, ok, failed, records, bytes, seconds (summed task time),
    failures (elements that raised), saved_earlier (partitions an earlier attempt had saved
    whole, not written again) and the errors of the failed partitions as
    ``{partition: error}``; for receipts that name their attempt (Spark's), also retried: the
    partitions whose accepted attempt was not the first."""
    out: dict[str, Any] = dict(partitions=0, ok=0, failed=0, records=0, bytes=0, seconds=0.0)
    errors: dict[int, str] = {}
    for r in receipts:
        out["partitions"] += 1
        out["ok" if r.ok else "failed"] += 1
        out["records"] += r.records
        out["bytes"] += r.bytes
        out["seconds"] += r.seconds
        out["failures"] = out.get("failures", 0) + r.failures
        out["saved_earlier"] = out.get("saved_earlier", 0) + bool(r.earlier)
        if hasattr(r, "attempt"):
            out["retried"] = out.get("retried", 0) + (r.attempt > 0)
        if not r.ok:
            errors[r.partition] = r.error
    out["errors"] = errors
    return out


#: What a terminator saves as one value: anything else would be converted by its ``__array__``
#: (an obspy Trace keeps its samples, not its id, start time or sampling rate) or refused deeper.
PLAIN = (np.ndarray, np.generic, bool, int, float, complex, str, bytes, list, tuple)


def check_plain(value: Any, name: str) -> None:
    """TypeError naming the type of a value that a save would strip to its array: an object
    with metadata is saved as a dict of its fields (``Writer.log``), never silently stripped."""
    if isinstance(value, PLAIN):
        return
    kind = f"{type(value).__module__}.{type(value).__qualname__}"
    raise TypeError(
        f"cannot save an object of type {kind} under {name!r}: only its array would be kept, "
        "not its attributes; save a dict of its values instead (each key a series: its samples "
        "and its metadata, e.g. {'data': trace.data, 'starttime': str(trace.stats.starttime), "
        "...})"
    )


def check_column(values: Any, name: str) -> None:
    """check_plain for each value of a column (numpy array) of objects: a column of Python
    objects (a Ray dataset's, a DataFrame's) would otherwise have each converted by its
    ``__array__``, its attributes dropped."""
    if isinstance(values, np.ndarray) and values.dtype.kind == "O":
        for v in values:
            if v is not None:
                check_plain(v, name)


def log_item(writer: Any, run: Any, step: int, item: Any, name: str) -> tuple[int, int]:
    """Appends one element a terminator saves: a dict as one record per key (``Writer.log``),
    a plain value as one record under ``name`` (``Writer.put``; any other object refused by
    check_plain). Returns (records, value bytes)."""
    if isinstance(item, dict):
        for key in item:
            check_name(key)
        writer.log(run, step, **item)
        return len(item), sum(value_bytes(v) for v in item.values())
    check_plain(item, name)
    writer.put(run, name, item, step)
    return 1, value_bytes(item)


def value_bytes(value: Any) -> int:
    """The bytes of one logged value, as a receipt counts them."""
    if isinstance(value, np.ndarray):
        return value.nbytes
    if isinstance(value, (bytes, str)):
        return len(value)
    return np.asarray(value).nbytes


def writable_path(store: Any) -> str:
    """The real path of ``store``, an open :class:`runstore.Store` that may be written; TypeError
    or ValueError (read-only) otherwise."""
    if not isinstance(store, Store):
        raise TypeError(f"store must be a runstore.Store, not {type(store).__name__}")
    if store.read_only:
        raise ValueError(f"store {store.path} is opened read-only; it needs mode 'a'")
    return os.path.realpath(store.path)


def error_text(e: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(e), e)).strip()


def check_name(name: Any) -> None:
    """ValueError naming a series name no writer takes (empty, or reserved: it starts with
    '~'), TypeError for one that is not a str; the terminators' writers may write their
    markers in a reserved series, the user's data may not."""
    if not isinstance(name, str):
        raise TypeError(f"a series name must be a str, not {type(name).__name__} {name!r}")
    _core.check_series_name(name)


# -- a partition, element by element ------------------------------------------------------------

#: Elements in a row that may raise before a partition's stream is taken for broken (an
#: iterator that raises without moving on would otherwise be asked forever).
MAX_ERRORS_IN_A_ROW = 1000
#: Errors a receipt quotes (the others are counted).
QUOTED_ERRORS = 3
#: Errors of the writer: the partition stops there (every later element would fail alike).
WRITER_ERRORS = (OSError, MemoryError, RuntimeError, _core.CorruptionError)


class Partition:
    """What one task saves of one partition: its elements logged one at a time, an element that
    raises (in a map upstream that runs in the same task, in ``key``, or refused by the writer)
    counted and named by its place, and the partition going on with the next one."""

    def __init__(self, part: int) -> None:
        self.part = part
        self.start = time.perf_counter()
        self.records = self.nbytes = 0
        self.failures = 0
        self.errors: list[str] = []  # the first QUOTED_ERRORS, with their places
        self.stopped = ""  # why the stream ended before its end, if it did
        self.earlier = ""  # the writer id of an earlier attempt that saved it whole

    def fail(self, place: int, e: BaseException, what: str = "element", count: int = 1) -> None:
        """``count`` elements failed together, as the ``what`` at ``place`` (an element, or a
        block of ``count`` rows)."""
        self.failures += count
        if len(self.errors) < QUOTED_ERRORS:
            rows = f" ({count} rows)" if what != "element" else ""
            self.errors.append(f"{what} {place}{rows}: {error_text(e)}")

    def log(
        self,
        writer: Callable[[], Any],
        items: Iterable[Any],
        run: Any,
        name: str,
        key: Callable[[Any], Any] | None = None,
        kept: list[Any] | None = None,
        strict: bool = False,
    ) -> None:
        """Logs ``items`` with ``writer()`` (called at the first element, so that an empty
        partition opens nothing), each under (``run``, its place) or ``key(item)``; appends
        each to ``kept`` if given. An error of the writer itself (WRITER_ERRORS), or with
        ``strict`` any error, ends it (raised)."""
        it = iter(items)
        place = in_a_row = 0
        w = None  # writer(), at the first element that reaches it
        while True:
            try:
                item = next(it)  # a map upstream, fused into this task, raises here
                if kept is not None:
                    kept.append(item)
                r, s = (run, place) if key is None else key_of(key, item)
                w = writer() if w is None else w
                records, nbytes = log_item(w, r, s, item, name)
            except StopIteration:
                return
            except WRITER_ERRORS:
                raise
            except Exception as e:  # this element's: named, the others go on
                if strict:
                    raise
                self.fail(place, e)
                in_a_row += 1
                if in_a_row >= MAX_ERRORS_IN_A_ROW:
                    self.stopped = f"stopped after {in_a_row} elements in a row raised"
                    return
            else:
                self.records += records
                self.nbytes += nbytes
                in_a_row = 0
            place += 1

    @property
    def complete(self) -> bool:
        return not self.failures and not self.stopped

    def fields(self, error: BaseException | None = None, worker: str = "") -> tuple[Any, ...]:
        """The fields of a :class:`Receipt` (its subclasses add theirs after them)."""
        texts = [error_text(error)] if error is not None else []
        if self.failures:
            texts.append(f"{self.failures} element(s) raised: " + "; ".join(self.errors))
        if self.stopped:
            texts.append(self.stopped)
        text = "; ".join(texts)
        worker = worker or f"{socket.gethostname()}:{os.getpid()}"
        return (self.part, self.records, self.nbytes, not text, text, worker,
                time.perf_counter() - self.start, self.failures, self.earlier)  # fmt: skip


def key_of(key: Callable[[Any], Any], item: Any) -> tuple[Any, int]:
    """(run, step) of an item by the user's key function: a run (int or str), or a (run, step)
    pair; ValueError or TypeError naming what it returned otherwise."""
    k = key(item)
    if not isinstance(k, tuple):
        run, step = k, 0
    elif len(k) == 2:
        run, step = k
    else:
        raise ValueError(f"key must return a run or a (run, step) pair, not {k!r}")
    if isinstance(run, bool) or not isinstance(run, (int, np.integer, str)):
        raise TypeError(f"key must return a run (int or str) or a (run, step) pair, not {k!r}")
    if isinstance(step, bool) or not isinstance(step, (int, np.integer)):
        raise TypeError(f"the step key returned must be an int, not {step!r}")
    return (run if isinstance(run, str) else int(run)), int(step)


# -- the marker of a partition saved whole ------------------------------------------------------

#: The reserved series of the markers: (run "save/<save id>", step = partition), its value the
#: JSON of what the attempt that saved it reported.
SAVED_SERIES = "~saved"


def new_save_id(save_id: str | None) -> str:
    """``save_id``, checked, or a new one (each save call its own)."""
    if save_id is None:
        return uuid.uuid4().hex
    if not isinstance(save_id, str) or not save_id or len(save_id) > 200:
        raise ValueError(f"save_id must be a non-empty str of at most 200 chars, not {save_id!r}")
    return save_id


def saved_earlier(store: Any, save_id: str, log: Partition) -> bool:
    """True if an attempt of save ``save_id`` had saved ``log``'s partition whole, as ``store``
    read it at its last refresh: then ``log`` reports that attempt's writer, records and bytes
    (and its task writes nothing)."""
    try:
        found = json.loads(store.get(f"save/{save_id}", SAVED_SERIES, log.part))
    except (KeyError, ValueError):
        return False
    if not isinstance(found, dict):
        return False
    log.earlier = str(found.get("writer", "?"))
    log.records = int(found.get("records", 0))
    log.nbytes = int(found.get("bytes", 0))
    return True


def mark_saved(writer: Any, save_id: str, log: Partition) -> None:
    """Logs the marker of ``log``'s partition, saved whole, after its records: committed with them
    or after them (commits are ordered), so that a marker seen means every record is."""
    text = json.dumps(dict(writer=writer.writer_id, records=log.records, bytes=log.nbytes))
    writer.put(f"save/{save_id}", SAVED_SERIES, text, log.part)


class TaskWriter(Partition):
    """The writer of one task (an attempt of a Spark partition, a Ray write task): opened at the
    task's first record and closed, its segment sealed, at the task's end, so that nothing of
    one attempt is committed by another and no writer outlives its task in a worker process
    that may end without exit handlers."""

    def __init__(self, path: str, part: int, options: dict[str, Any], save_id: str = "") -> None:
        super().__init__(part)
        self.path, self.options, self.save_id = path, options, save_id
        self.store: Any = None
        self.writer: Any = None
        self.writer_id = ""

    def done_before(self) -> bool:
        """True if an earlier attempt of this save had saved this partition whole (then this one
        reports that attempt's save and writes nothing)."""
        return bool(self.save_id) and saved_earlier(self._store(), self.save_id, self)

    def _store(self) -> Any:
        if self.store is None:
            self.store = Store(self.path, "r+")
        return self.store

    def open(self) -> Any:
        if self.writer is None:
            self.writer = self._store().writer(**self.options, _allow_reserved=True)
            self.writer_id = self.writer.writer_id
        return self.writer

    def close(self, error: BaseException | None) -> tuple[Any, ...]:
        """Marks the partition saved if it was whole, commits and closes the writer (what was
        logged before an error too); returns the fields of a :class:`Receipt`, ok only if every
        element was logged and committed."""
        if self.writer is not None:
            try:
                if error is None and self.complete and self.save_id:
                    mark_saved(self.writer, self.save_id, self)
                self.writer.close()  # commits what is logged, then seals the segment
            except Exception as e:  # noqa: BLE001 - the commit failed: not ok
                error = error or e
        return self.fields(error)
