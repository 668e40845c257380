"""Writing whole experiments from a loop of one's own (``runstore.experiments.writer``): each
record one atomic set of parameters, status and outcomes, in the layout run_experiments writes
(:mod:`runstore.experiments._records`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from .._checks import RunId, check_run_id
from ._design import check_param_name
from ._records import (
    ATTEMPT,
    DESIGN,
    ERROR,
    FINISHED,
    HOST,
    PARAMS,
    ROW,
    SECONDS,
    STARTED,
    STATE,
    STATES,
    design_columns,
    reserved_series,
)

if TYPE_CHECKING:
    from .._reader import StoreReader


# -- a loop of one's own -------------------------------------------------------------------------


def _record_names(
    params: Mapping[str, Any],
    outcomes: Mapping[str, Any] | None,
    state: str,
    keep_none: bool = False,
) -> dict[str, Any]:
    """An experiment record's parameters and outcomes under the names they are stored as,
    checked (a parameter that is None is left out unless ``keep_none``)."""
    if state not in STATES:
        raise ValueError(f"state {state!r}: one of {', '.join(STATES)}")
    out: dict[str, Any] = {}
    for name, v in params.items():
        check_param_name(name)
        if keep_none or v is not None:
            out[DESIGN + name] = v
    for k, v in (outcomes or {}).items():
        if not isinstance(k, str) or not k or k.startswith("~"):
            raise ValueError(f"outcome {k!r}: names are non-empty and do not start with '~'")
        out[k] = v
    return out


class ExperimentWriter:
    """Writes whole experiments (parameters, status and outcomes) from a loop of the caller's
    own: ``runstore.experiments.writer(store)``. Each :meth:`record` is one atomic set of
    records (a commit never holds part of it), in the layout run_experiments writes, so
    ``load_results``, ``status``, ``pending`` and the exports read it as any sweep.

    Rows: an experiment recorded with ``row=None`` goes after every row the store held when the
    writer was made, in the order recorded; ``row=k`` places it at ``k`` (ties in storage
    order). Recording an experiment again (a retry) replaces its records, row included.
    """

    def __init__(self, store: StoreReader, **writer_options: Any) -> None:
        store.refresh()
        infos = reserved_series(store, counts=False)
        self._params = design_columns(store, infos)
        self._next_row = 0
        if ROW in infos:
            r = store._core.scan(ROW)["value"]
            self._next_row = int(r.max()) + 1 if len(r) else 0
        self.first_row = self._next_row
        self._w = store.writer(_allow_reserved=True, **writer_options)

    def record(
        self,
        experiment: RunId,
        params: Mapping[str, Any],
        outcomes: Mapping[str, Any] | None = None,
        *,
        state: str = "done",
        error: str = "",
        row: int | None = None,
        host: str | None = None,
        started: float | None = None,
        finished: float | None = None,
        seconds: float | None = None,
        attempt: int = 1,
    ) -> None:
        """Appends one experiment: ``params`` (its parameters: bool, int, float or str),
        ``outcomes`` (as ``Writer.log`` takes them) and its status (``state`` one of
        "pending", "running", "done", "failed"; ``error`` the failure's text). Visible and
        durable as the writer's commits make it."""
        check_run_id(experiment)
        values = _record_names(params, outcomes, state)
        if row is None:
            row = self._next_row
            self._next_row += 1
        values[ROW] = np.int64(row)
        values[STATE] = state
        values[ERROR] = error
        values[ATTEMPT] = np.int64(attempt)
        for k, v in ((HOST, host), (STARTED, started), (FINISHED, finished), (SECONDS, seconds)):
            if v is not None:
                values[k] = float(v) if k != HOST else str(v)
        self._note_params(params)
        self._w.log(experiment, values=values)

    def record_many(
        self,
        experiments: list[RunId],
        params: Mapping[str, Any],
        outcomes: Mapping[str, Any] | None = None,
        *,
        state: str = "done",
        finished: Any = None,
        rows: Any = None,
    ) -> None:
        """Appends ``len(experiments)`` experiments in one vectorised call, all with state
        ``state``: ``params`` and ``outcomes`` map names to columns of that length (outcome
        arrays stacked along a first axis), ``finished`` a column of unix times, ``rows``
        their rows (default: after the ones recorded so far). An automatic commit
        (commit_every_s, commit_every_bytes) never falls inside the call: its columns become
        visible together."""
        n = len(experiments)
        if set(map(type, experiments)) != {str}:  # str ids need no check: one pass in C
            for e in experiments:
                check_run_id(e)
        columns = _record_names(params, outcomes, state, keep_none=True)
        for name, col in columns.items():
            if len(col) != n:
                raise ValueError(f"column {name!r} has {len(col)} values for {n} experiments")
        if rows is None:
            rows = np.arange(self._next_row, self._next_row + n, dtype=np.int64)
            self._next_row += n
        columns[ROW] = np.asarray(rows, dtype=np.int64)
        columns[STATE] = [state] * n
        columns[ERROR] = [""] * n
        columns[ATTEMPT] = np.ones(n, dtype=np.int64)
        if finished is not None:
            columns[FINISHED] = np.asarray(finished, dtype=np.float64)
        self._note_params(params)
        self._w.log_many(list(experiments), columns=columns)

    def _note_params(self, params: Iterable[str]) -> None:
        """Appends the parameters new to the store to its column order (~design/~params)."""
        new = [p for p in params if p not in self._params]
        if new:
            self._params += new
            self._w.put(0, PARAMS, json.dumps(self._params, ensure_ascii=False))

    def commit(self, wait: bool = True) -> Any:
        return self._w.commit(wait=wait)

    def flush(self, wait: bool = True) -> None:
        self._w.flush(wait=wait)

    def close(self) -> None:
        self._w.close()

    @property
    def writer(self) -> Any:
        """The underlying Writer (its tickets, ``wait_for_commit``, ``durable_ticket``)."""
        return self._w

    def __enter__(self) -> ExperimentWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._w.__exit__(*exc)
