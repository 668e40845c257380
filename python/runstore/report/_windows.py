"""A store's experiments as the report reads them: their scalar columns (parameters, status,
scalar outcomes) a window of experiments at a time, and a seeded sample of at most SAMPLE of
them held whole.

Where the design allows it (its rows are integers, as ``define_experiments`` writes them), each
window is one ``read_aligned`` of the runs of at most ``WINDOW_BYTES`` of columns, and what the
report keeps between windows is bounded by the sample, not by the experiments: the ids stay the
runs of the design's read (``ExperimentTable`` with ``ids=False``, about 24 bytes an
experiment). Otherwise (no design, or one written by hand) the columns are read whole, as one
window, as they always were.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .._memory import release_mapped_pages
from ..experiments import _records as ex
from ..experiments._status import StatusArrays
from ..export._table import ExperimentTable, Outcome

if TYPE_CHECKING:
    from .._store import Store

#: Experiments whose columns the report holds at most, by default (``report.write``'s
#: ``sample``): beyond, its medians, levels, box plots and scatter plots are of a seeded sample
#: of this many (counts, sums, extremes, histograms and the timeline stay exact, gathered a
#: window at a time).
SAMPLE = 200_000
#: Bytes of scalar columns read at a time, about (with what the read holds for each run).
WINDOW_BYTES = 32 << 20
#: Experiments read whole, in one read of each series, at most (None: as many as the sample
#: holds, which then holds every one of them anyway): faster than windows, a read of every
#: record of a series in the design's order where a window looks each record's run up.
READ_WHOLE: int | None = None


@dataclass
class Window:
    """The experiments ``start:stop`` (definition order)."""

    start: int
    stop: int
    #: By parameter name (empty when not asked for), of the experiments ``param_rows``.
    params: dict[str, ex.Column]
    #: Positions in the window (sorted) whose parameters were read; None: every one.
    param_rows: np.ndarray | None
    #: None for a store without a design.
    status: StatusArrays | None
    #: By series: float64, NaN where absent.
    outcomes: dict[str, np.ndarray]

    def params_at(self, rows: np.ndarray | slice) -> dict[str, ex.Column]:
        """The parameters of positions ``rows`` of the window (among ``param_rows``)."""
        at = rows
        if self.param_rows is not None:
            if isinstance(rows, slice):
                rows = np.arange(*rows.indices(self.stop - self.start))
            at = np.searchsorted(self.param_rows, rows)
        return {p: col.take(at) for p, col in self.params.items()}


#: Of a window's experiments and status, the positions (sorted) whose parameters are read.
ParamRows = Callable[[int, int, StatusArrays], np.ndarray]


class Experiments:
    """The experiments of ``store`` (its design's, or its runs without one), read a window at
    a time by :meth:`windows`."""

    def __init__(self, store: Store, sample: int, window_bytes: int | None = None) -> None:
        """``sample``: the experiments are read whole when there are at most this many (the
        report's sample then holds every one of them), a window at a time beyond."""
        self.store = store
        read_whole = sample if READ_WHOLE is None else READ_WHOLE
        store.refresh()
        infos = ex.reserved_series(store)
        self._status_series = ex.status_series(infos) if ex.ROW in infos else []
        # The design's records (one an experiment, unless rows were written again): whether
        # the experiments are more than are read whole.
        window = int(infos.get(ex.ROW, {}).get("count", 0)) > read_whole and all(
            ex.alignable(infos[s]) for s in self._status_series
        )
        table = ExperimentTable(
            store, names=[], ids=False, status=False, window=window, infos=infos
        )
        self.table = table
        #: Every series of the snapshot the table read (reserved ones too), with its counts.
        self.infos = infos
        self.n = table.n
        self.windowed = table.windowed
        self._window_bytes = WINDOW_BYTES if window_bytes is None else window_bytes
        #: The outcomes read with the columns (:meth:`read_outcomes`).
        self.names: list[str] = []
        #: Records of each outcome placed on an experiment, over the windows of the last pass.
        self.present: dict[str, int] = {}
        self.window_rows = max(1, self.n)
        self._held: Window | None = None
        self._held_present: dict[str, int] = {}

    def read_outcomes(self, names: list[str]) -> None:
        """Reads the scalar outcomes among ``names`` that the design places (:attr:`names`)
        with the columns, and sizes the windows for them."""
        infos, table = self.infos, self.table
        if self.windowed:
            self.names = [n for n in names if ex.alignable(infos[n])]
            row_bytes = 400  # the id, and the read's lists of the runs it places
            for s in [ex.DESIGN + p for p in table.param_names] + self._status_series + names:
                o = Outcome(s, infos[s])
                row_bytes += (4 if o.dtype == "string" else o.row_bytes) + 1
            self.window_rows = max(1, self._window_bytes // row_bytes)
        elif table.has_design and self.n and ex.aligned_design(infos):
            self.names = list(names)
        self.present = dict.fromkeys(self.names, 0)

    def windows(
        self,
        names: list[str],
        params: ParamRows | None = None,
        status: list[str] | None = None,
    ) -> Iterator[Window]:
        """The experiments a window at a time, with the outcomes ``names`` (of :attr:`names`),
        the status fields of the series ``status`` (default: every one; the others read as
        absent) and, with ``params``, the parameters of the experiments it picks of each window
        (every one when the experiments are read whole). The counts of :attr:`present` are of
        the windows of the last pass."""
        self.present = dict.fromkeys(self.names, 0)
        if not self.windowed:
            yield self._whole(names, params is not None)
            return
        infos, store = self.infos, self.store
        design = [ex.DESIGN + p for p in self.table.param_names]
        fields = self._status_series if status is None else [s for s in status if s in infos]
        for start in range(0, self.n, self.window_rows):
            stop = min(self.n, start + self.window_rows)
            ids = self.table.index.take_array(slice(start, stop)).tolist()
            cols = store._core.read_aligned(ids, fields + list(names))["columns"]
            release_mapped_pages(store)
            st = StatusArrays.of_columns(cols, stop - start, ids)
            outcomes = {
                n: self._outcome(n, ex.aligned_column(cols.pop(n), infos[n]["dtype"]))
                for n in names
            }
            del cols
            picked: dict[str, ex.Column] = {}
            rows = np.zeros(0, dtype=np.int64)
            if params is not None and design:
                rows = params(start, stop, st)
                cols = store._core.read_aligned([ids[i] for i in rows.tolist()], design)["columns"]
                release_mapped_pages(store)
                picked = {
                    s[len(ex.DESIGN) :]: ex.aligned_column(cols.pop(s), infos[s]["dtype"])
                    for s in design
                }
                del cols
            yield Window(start, stop, picked, rows, st, outcomes)

    def release(self) -> None:
        """Lets go of the experiments read whole (the next pass reads them again)."""
        self._held = None

    def _outcome(self, name: str, col: ex.Column) -> np.ndarray:
        self.present[name] += int(np.count_nonzero(col.present))
        values = col.values.astype(np.float64, copy=False)
        if values is not col.values:  # floats are NaN where absent already
            values[~col.present] = np.nan
        return values

    def _whole(self, names: list[str], params: bool) -> Window:
        """Every experiment as one window, read once and kept for the next pass."""
        if self._held is None:
            table, store = self.table, self.store
            status = None
            if table.has_design and self.n:
                # The ids of the table's read, not a second copy of them.
                runs = table.index if isinstance(table.index, ex.RunList) else None
                status = StatusArrays.read(store, runs)
            outcomes: dict[str, np.ndarray] = {}
            if self.names:
                _, cols = ex.load_aligned(store, self.names, self.infos, ids=False)
                release_mapped_pages(store)
                outcomes = {n: self._outcome(n, cols.pop(n)) for n in self.names}
            held_params = table.params if table.has_design else {}
            self._held = Window(0, self.n, held_params, None, status, outcomes)
            self._held_present = dict(self.present)
        self.present = dict(self._held_present)
        w = self._held
        return Window(
            w.start, w.stop, w.params if params else {}, None, w.status,
            {n: w.outcomes[n] for n in names},
        )  # fmt: skip


class Sample:
    """The experiments at seeded positions, at most ``size`` of them (every one if there are
    no more), and the columns the report gathers of them (:meth:`gather`)."""

    def __init__(self, n: int, seed: int, size: int) -> None:
        self.n = n
        self.whole = n <= size
        if self.whole:
            self.positions = np.arange(n)
        else:
            self.positions = np.sort(np.random.default_rng(seed).choice(n, size, replace=False))
        self._parts: dict[str, list[Any]] = {}

    def __len__(self) -> int:
        return len(self.positions)

    def rows(self, start: int, stop: int) -> np.ndarray | slice:
        """The sampled experiments of the window ``start:stop``, as positions within it: a
        slice of the window when the sample is every experiment (what is gathered of it is
        then a view of the window's columns, not a copy)."""
        if self.whole:
            return slice(0, stop - start)
        lo, hi = np.searchsorted(self.positions, (start, stop))
        return self.positions[lo:hi] - start

    def gather(self, key: str, part: Any) -> None:
        """Adds ``part`` (an array or an ex.Column, of the sampled experiments of the window the
        parts before it were of, in order) to column ``key``."""
        self._parts.setdefault(key, []).append(part)

    def column(self, key: str) -> Any:
        """Column ``key`` of every sampled experiment (an array, or an ex.Column)."""
        parts = self._parts.get(key, [])
        if parts and isinstance(parts[0], ex.Column):
            if len(parts) == 1:
                return parts[0]
            return ex.Column(
                np.concatenate([p.values for p in parts]),
                np.concatenate([p.present for p in parts]),
                parts[0].dtype,
            )
        if len(parts) == 1:
            return parts[0]
        return np.concatenate(parts) if parts else np.zeros(0)


class Extremes:
    """Count, sum, least and greatest of the finite values added (exact over every window)."""

    def __init__(self) -> None:
        self.n = 0
        self.total = 0.0
        self.lo = np.inf
        self.hi = -np.inf

    def add(self, values: np.ndarray) -> None:
        v = values[np.isfinite(values)]
        if len(v):
            self.n += len(v)
            self.total += float(v.sum())
            self.lo = min(self.lo, float(v.min()))
            self.hi = max(self.hi, float(v.max()))
