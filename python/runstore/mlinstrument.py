"""runstore.mlinstrument: a backend for ml-instrument's Collector that streams into a store.

ml-instrument (``pip install ml-instrument``, import ``ml_instrumentation``) is the collector
reinforcement-learning labs use: the agent and the environment ``collect(name, value)`` at the
current frame, and the collector buffers the points and hands them to a backend. With

    from ml_instrumentation.Collector import Collector
    import runstore.mlinstrument

    backend = runstore.mlinstrument.Backend("results/run-3")
    collector = Collector(backend=backend, experiment_id=3)

every metric is a series of the store, the experiment id its run and the frame its step; each
batch the collector writes is one commit (durable when it returns). A run restarted from a
checkpoint taken at frame F calls ``backend.resume(exp_id, F)`` before it collects again: what
the killed attempt wrote at frames >= F is hidden, so the store ends with exactly one point per
frame (ml-instrument's own sqlite backend ends with the re-done frames twice).

The store is an ordinary runstore store: ``runstore.open(path).to_pandas()``, ``runstore
report``, several processes (one per run) writing into one store at once.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from typing import Any

import numpy as np
from ml_instrumentation.backends.base import BaseBackend, Point, SqlPoint

from ._store import Store
from ._store import open as _open

__all__ = ["Backend"]


class Backend(BaseBackend):
    """ml-instrument's backend interface on a runstore writer (see the module's text).

    ``store``: a path (created if missing) or an open Store; ``writer_options`` are those of
    :meth:`runstore.Store.writer` (``record_time=True`` keeps each point's wall time)."""

    def __init__(self, store: str | os.PathLike[str] | Store, **writer_options: Any) -> None:
        self._path = store.path if isinstance(store, Store) else os.fspath(store)
        self._options = writer_options
        self._store: Store | None = None
        self._writer: Any = None

    # -- setup and lifecycle -----------------------------------------------------------------

    def init_db(self) -> None:
        if self._writer is None:
            self._store = _open(self._path)
            self._writer = self._store.writer(**self._options)

    def _w(self) -> Any:
        self.init_db()
        return self._writer

    def close(self) -> None:
        """Commits and closes the writer; reading still works afterwards."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def resume(self, exp_id: int | str, frame: int) -> None:
        """For a run restarted from a checkpoint taken at ``frame``: hides what earlier attempts
        wrote for ``exp_id`` at frames >= ``frame`` (``Writer.resume``), durably."""
        self._w().resume(exp_id, frame)

    def __getstate__(self) -> dict[str, Any]:
        if self._writer is not None:
            self._writer.commit()
        return {"path": self._path, "options": self._options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"], **state["options"])  # type: ignore[misc]

    # -- writing -----------------------------------------------------------------------------

    def write_many(self, points: dict[str, dict[int, Point]]) -> None:
        """Appends the collector's buffered points, metric by metric and run by run in one
        vectorised call each, then commits them (the commit is durable when this returns)."""
        w = self._w()
        for metric, sub in points.items():
            by_run: dict[int | str, tuple[list[int], list[Any]]] = defaultdict(lambda: ([], []))
            for p in sub.values():
                frames, values = by_run[p.exp_id]
                frames.append(p.frame)
                values.append(p.data)
            for exp_id, (frames, values) in by_run.items():
                if all(isinstance(v, (int, float, bool, np.number)) for v in values):
                    w.log_many(exp_id, steps=frames, columns={metric: np.asarray(values)})
                else:  # arrays, str, or a mix: one record each
                    for f, v in zip(frames, values, strict=True):
                        w.put(exp_id, metric, v, step=f)
        w.commit()

    # -- reading -----------------------------------------------------------------------------

    def _reader(self) -> Store:
        if self._store is None:
            self._store = _open(self._path)
        return self._store.refresh()

    def get_tables(self) -> set[str]:
        return set(self._reader().names())

    def read_metric(self, metric: str, exp_id: int | str | None = None) -> list[SqlPoint]:
        """The metric's committed points ``(frame, id, measurement)`` (of ``exp_id`` if given),
        by run then frame; [] for a metric or run the store does not have."""
        store = self._reader()
        if metric not in store.names():
            return []
        d = store.scan(metric, runs=None if exp_id is None else [exp_id])
        order = np.lexsort((d["step"], np.array([str(r) for r in d["run"].tolist()])))
        runs, steps, values = d["run"].tolist(), d["step"].tolist(), d["value"]
        return [SqlPoint(steps[i], runs[i], _plain(values[i])) for i in order.tolist()]

    # -- moving data -------------------------------------------------------------------------

    def merge(self, other: str) -> None:
        """Copies every committed point of this store into the store at ``other`` (created if
        missing), one writer and one commit."""
        store = self._reader()
        with _open(other).writer() as w:
            for name in store.names():
                d = store.scan(name)
                if d["value"].dtype != object:
                    w.log_many(list(d["run"].tolist()), steps=d["step"], columns={name: d["value"]})
                else:
                    for r, s, v in zip(
                        d["run"].tolist(), d["step"].tolist(), d["value"], strict=True
                    ):
                        w.put(r, name, v, step=s)

    def dump(self) -> str:
        """What ``load`` needs to find these points again: the store's path, as JSON (the
        points stay in the store; nothing is copied into the text)."""
        if self._writer is not None:
            self._writer.commit()
        return json.dumps({"runstore_store": os.path.abspath(self._path)})

    def load(self, data: Any) -> None:
        """Merges into this store the points of the store that ``dump`` described."""
        src = json.loads(data)["runstore_store"]
        if os.path.abspath(src) == os.path.abspath(self._path):
            return
        Backend(src).merge(self._path)


def _plain(v: Any) -> Any:
    """A scalar record as the Python number sqlite would give back; arrays stay arrays."""
    return v.item() if isinstance(v, np.generic) else v
