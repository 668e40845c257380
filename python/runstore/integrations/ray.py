"""Ray over a store: a Ray Data datasink and a Ray Tune callback (docs/ray.md).

``dataset.write_datasink(runstore.ray.Datasink(store, run="id"))`` writes a dataset from Ray's
write tasks, each with a writer of its own that it closes (sealing its segment) before it
returns a small :class:`Receipt`; the driver gathers receipts (``sink.receipts``), never rows.
Each column other than ``run`` and ``step`` is a series; a row is the record
``(row[run], column, row[step] or 0)``, or without ``run``, ``(write task index + run_offset,
column, the row's place among the task's rows)``; a null cell is no record (docs/spark.md,
"Keys", which Spark's DataFrames share). A write task Ray runs again (its worker died) rewrites
the same keys, and readers, for whom the later commit wins, see each record once.

``tune.Tuner(..., run_config=tune.RunConfig(callbacks=[runstore.ray.TuneCallback(store)]))``
records every trial's reported results as they come: trial = run (its trial id), training
iteration = step, each reported number a series; its config as ``config/<key>`` at step 0 and
how it ended in ``tune/state`` ("done" or "error"). A trial Tune restores after a failure
reports its iterations again from its checkpoint: the first such report hides, by a resume
marker (``Writer.resume``), what the lost attempt had reported from that iteration on, so that
each (trial, iteration) is read once, with the values of the attempt that got there last.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import ray.data
from ray import tune

from .._store import Store
from . import _arrow_rows, _receipts
from ._receipts import summarize

__all__ = ["Receipt", "Datasink", "TuneCallback", "summarize"]


@dataclasses.dataclass(frozen=True)
class Receipt(_receipts.Receipt):
    """What one write task of a :class:`Datasink` did (``partition`` is the write task's index);
    ``writer_id`` names the writer whose segment holds its records."""

    writer_id: str


class Datasink(ray.data.Datasink):
    """A Ray Data datasink that writes a dataset's rows to a store from Ray's write tasks.

    Args:
        store: an open, writable :class:`runstore.Store` on a file system every Ray worker sees.
        run, step: the columns of each row's run (int or str) and step (int); without ``run``
            rows are keyed by write task and position.
        run_offset: added to the write task's index where ``run`` is not given.
        on_error: "receipt" or "raise": what a block the writer refuses does (below).
        save_id: names this write in the store's markers of write tasks saved whole: a task Ray
            runs again after an attempt had saved it whole writes nothing, and its receipt names
            that attempt's writer (``earlier``). Default: a new id a Datasink; the same str
            again resumes a write that stopped without writing its finished tasks again.
        writer_options: keyword arguments of :meth:`Store.writer` for the tasks' writers.

    After ``dataset.write_datasink(sink)``, ``sink.receipts`` holds one :class:`Receipt` a write
    task, in task order. A block the writer refuses (a reserved column name, a column of objects
    whose arrays would drop their attributes, a value of another type than its series') costs
    that block, with ``on_error="receipt"`` (the default): its rows are counted in the task's
    receipt (``failures``, ``ok=False``) and named by the block's place, and the task goes on;
    with ``on_error="raise"`` the task raises and the write fails as Ray Data's do. Either way
    the records logged before are committed by the writer's close under their right keys (a
    rerun rewrites them). An error of the writer itself (the disk) fails the write.
    """

    def __init__(
        self,
        store: Store,
        run: str | None = None,
        step: str | None = None,
        *,
        run_offset: int = 0,
        on_error: str = "receipt",
        save_id: str | None = None,
        writer_options: dict[str, Any] | None = None,
    ) -> None:
        self.path = _receipts.writable_path(store)
        self.save_id = _receipts.new_save_id(save_id)
        if on_error not in ("receipt", "raise"):
            raise ValueError(f"on_error must be 'receipt' or 'raise', not {on_error!r}")
        self.on_error = on_error
        if step is not None and run is None:
            raise TypeError("step= names a column only together with run=")
        if not isinstance(run_offset, int) or isinstance(run_offset, bool) or run_offset < 0:
            raise ValueError(f"run_offset must be an int >= 0, not {run_offset!r}")
        self.run, self.step, self.run_offset = run, step, run_offset
        self.options = dict(writer_options or {})
        self.receipts: list[Receipt] = []
        self._store = store

    def on_write_start(self, schema: Any = None) -> None:
        names = [] if schema is None else list(schema.names)
        for arg, col in (("run", self.run), ("step", self.step)):
            if col is not None and names and col not in names:
                raise TypeError(f"{arg}={col!r} is not a column of the dataset: {names}")

    def write(self, blocks: Iterable[Any], ctx: Any) -> Receipt:
        from ray.data.block import BlockAccessor

        task = _receipts.TaskWriter(self.path, ctx.task_idx, self.options, self.save_id)
        rows = _arrow_rows.Rows(self.run, self.step, ctx.task_idx + self.run_offset)
        error = None
        try:
            if not task.done_before():
                tables = (BlockAccessor.for_block(b).to_arrow() for b in blocks)
                rows.log_all(task, tables, self.on_error, "block")
        except Exception as e:  # noqa: BLE001 - raised again once the writer is closed
            error = e
        receipt = Receipt(*task.close(error), task.writer_id)
        if error is not None:
            raise error
        return receipt

    def on_write_complete(self, write_result: Any) -> None:
        self.receipts = sorted(write_result.write_returns, key=lambda r: r.partition)
        self._store.refresh()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_store"] = None  # the tasks open the store by its path
        return state


# -- Ray Tune -----------------------------------------------------------------------------------

#: Result keys that are Tune's bookkeeping, not the trial's metrics.
_BOOKKEEPING = {"training_iteration", "trial_id", "experiment_tag", "date", "hostname"}
_BOOKKEEPING |= {"node_ip", "pid", "timestamp", "done", "should_checkpoint", "config"}


def _numbers(result: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """The numbers and bools of a (nested) result, by "/"-joined names."""
    out: dict[str, Any] = {}
    for k, v in result.items():
        name = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out |= _numbers(v, name + "/")
        elif isinstance(v, (bool, np.bool_)):
            out[name] = bool(v)
        elif isinstance(v, (int, np.integer)) and not isinstance(v, bool):
            out[name] = int(v)
        elif isinstance(v, (float, np.floating)) and math.isfinite(float(v)):
            out[name] = float(v)
    return out


def _config_values(config: Mapping[str, Any]) -> dict[str, Any]:
    values = _numbers(config)
    for k, v in config.items():
        if isinstance(v, str):
            values[k] = v
    return {f"config/{k}": v for k, v in values.items()}


class TuneCallback(tune.Callback):
    """Records a Ray Tune experiment's trials in a store as their results come (on the driver).

    Args:
        store: an open, writable :class:`runstore.Store`.
        metrics: the result keys to keep (nested keys "/"-joined); default every number Tune
            reports but its bookkeeping (iteration, ids, host, times of day).
        commit_every_s: the writer commits at least this often, so that a driver killed loses
            at most that much of the trials' history; every trial's end is committed at once.
        writer_options: further keyword arguments of :meth:`Store.writer`.
    """

    def __init__(
        self,
        store: Store,
        metrics: Iterable[str] | None = None,
        *,
        commit_every_s: float = 5.0,
        writer_options: dict[str, Any] | None = None,
    ) -> None:
        _receipts.writable_path(store)
        self.store = store
        self.metrics = None if metrics is None else set(metrics)
        self.options = {"commit_every_s": commit_every_s, **dict(writer_options or {})}
        self.writer: Any = None
        self._last: dict[str, int] = {}  # trial id -> the last iteration recorded
        self.restarts = 0  # reports of an iteration already recorded: trials restored

    def _w(self) -> Any:
        if self.writer is None or self.writer.closed:
            self.writer = self.store.writer(**self.options)
        return self.writer

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._w().log(trial.trial_id, 0, values=_config_values(trial.config))

    def on_trial_result(
        self, iteration: int, trials: list, trial: Any, result: dict, **info: Any
    ) -> None:
        run = trial.trial_id
        step = int(result.get("training_iteration", self._last.get(run, 0) + 1))
        w = self._w()
        if step <= self._last.get(run, 0):
            # Restored from a checkpoint (or restarted): what the lost attempt reported from
            # this iteration on is hidden; what follows is this attempt's.
            w.resume(run, step)
            self.restarts += 1
        self._last[run] = step
        values = _numbers({k: v for k, v in result.items() if k not in _BOOKKEEPING})
        if self.metrics is not None:
            values = {k: v for k, v in values.items() if k in self.metrics}
        if values:
            w.log(run, step, values=values)

    def _end(self, trial: Any, state: str) -> None:
        w = self._w()
        w.log(trial.trial_id, 0, values={"tune/state": state})
        w.commit()

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._end(trial, "done")

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._end(trial, "error")

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        if self.writer is not None and not self.writer.closed:
            self.writer.close()
        self.store.refresh()

    def __del__(self) -> None:
        w = self.writer
        if w is not None and not w.closed:
            try:
                w.close()
            except Exception:  # noqa: BLE001 - at interpreter exit
                pass
