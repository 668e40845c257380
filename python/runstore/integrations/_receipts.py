"""What the terminators of runstore.dask and runstore.spark return, added up."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

import numpy as np


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


def value_bytes(value: Any) -> int:
    """The bytes of one logged value, as a receipt counts them."""
    if isinstance(value, np.ndarray):
        return value.nbytes
    if isinstance(value, (bytes, str)):
        return len(value)
    return np.asarray(value).nbytes
