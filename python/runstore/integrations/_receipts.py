"""What the terminators of runstore.dask and runstore.spark return, added up."""

from __future__ import annotations

import dataclasses
import os
import socket
import time
import traceback
from collections.abc import Iterable
from typing import Any

import numpy as np

from .._store import Store


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


def summarize(receipts: Iterable[Any]) -> dict[str, Any]:
    """Adds receipts up: partitions, ok, failed, records, bytes, seconds (summed task time) and the
    errors of the failed partitions as ``{partition: error}``; for receipts that name their
    attempt (Spark's), also retried: the partitions whose accepted attempt was not the first."""
    out: dict[str, Any] = dict(partitions=0, ok=0, failed=0, records=0, bytes=0, seconds=0.0)
    errors: dict[int, str] = {}
    for r in receipts:
        out["partitions"] += 1
        out["ok" if r.ok else "failed"] += 1
        out["records"] += r.records
        out["bytes"] += r.bytes
        out["seconds"] += r.seconds
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


def log_item(writer: Any, run: Any, step: int, item: Any, name: str) -> tuple[int, int]:
    """Appends one element a terminator saves: a dict as one record per key (``Writer.log``),
    a plain value as one record under ``name`` (``Writer.put``; any other object refused by
    check_plain). Returns (records, value bytes)."""
    if isinstance(item, dict):
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


class TaskWriter:
    """The writer of one task (an attempt of a Spark partition, a Ray write task): opened at the
    task's first record and closed, its segment sealed, at the task's end, so that nothing of
    one attempt is committed by another and no writer outlives its task in a worker process
    that may end without exit handlers. Counts what the task logged."""

    def __init__(self, path: str, part: int, options: dict[str, Any]) -> None:
        self.part, self.path, self.options = part, path, options
        self.start = time.perf_counter()
        self.records = self.nbytes = 0
        self.writer: Any = None
        self.writer_id = ""

    def open(self) -> Any:
        if self.writer is None:
            self.writer = Store(self.path, "r+").writer(**self.options)
            self.writer_id = self.writer.writer_id
        return self.writer

    def close(self, error: BaseException | None) -> tuple[Any, ...]:
        """Commits and closes the writer (what was logged before an error too); returns the
        fields of a :class:`Receipt`, ok only if every record was committed."""
        text = "" if error is None else error_text(error)
        if self.writer is not None:
            try:
                self.writer.close()  # commits what is logged, then seals the segment
            except Exception as e:  # noqa: BLE001 - the commit failed: not ok
                text = text or error_text(e)
        worker = f"{socket.gethostname()}:{os.getpid()}"
        return (self.part, self.records, self.nbytes, not text, text, worker,
                time.perf_counter() - self.start)  # fmt: skip
