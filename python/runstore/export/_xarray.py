"""to_xarray: a store as an xarray Dataset with a row per run: per experiment in a store with a
design, per run id otherwise (the layout: docs/experiments.md, "xarray and Zarr").

The rows and the columns of one value per row (the experiment index, the parameters and status,
scalar outcomes) come from the experiment table every export reads (``_table.ExperimentTable``);
the other variables are read a chunk of runs at a time by ``_table.read_rows``, into the
Dataset's arrays (eager) or as dask reads the blocks (lazy). Both paths read through one
function, :meth:`Variable.read`, so they give the same values.

A variable's dtype is known before any of its values are read, so that a lazy Dataset and the
Zarr export (which writes chunk by chunk) fix it up front:

- Columns of one value per run (parameters, status, scalar outcomes when not by step) are read
  whole first: they keep their dtype unless some run has no value, and then int, uint and bool
  become float64 with NaN there.
- Arrays and variables by step always have gaps to fill in a general store, so int, uint and
  bool ones are float64 with NaN where absent; ``attrs["runstore_dtype"]`` names the stored
  dtype.
- Floats keep their dtype, NaN where absent. str is numpy's variable-width string dtype with
  None for a missing value (``STRING``: what ``xarray.open_zarr`` gives for Zarr strings too, 16
  bytes an entry, where object arrays would take a Python str each and xarray would copy
  them through pandas); bytes are object arrays, None where absent. xarray's ``isnull()`` sees
  both.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import _attrs
from .._frame import unique_name
from .._memory import release_freed_memory, release_mapped_pages
from .._progress import size_text
from .._version import __version__
from ..experiments import _records as ex
from ._table import CHUNK_BYTES, ExperimentTable, Outcome, read_rows, rows_per_chunk

if TYPE_CHECKING:
    import xarray

    from .._reader import StoreReader

#: Bytes of values in a chunk of a lazy Dataset's variables (dask's chunks), unless chunks=.
LAZY_CHUNK_BYTES = 64 << 20
#: lazy=None builds the Dataset lazily when it would take more than this part of the memory
#: available to the process.
EAGER_MEMORY_FRACTION = 0.5
#: Bytes an entry of an object array (str, bytes) is taken to cost in estimates.
OBJECT_BYTES = 64
#: Names of the Dataset's dimensions of runs and of steps.
RUN, STEP = "run", "step"
#: The dtype of str variables and coordinates: None where absent, which ``isnull()`` sees
#: (also after a pickle, which a NaN na_object does not survive as one).
STRING = np.dtypes.StringDType(na_object=None)

#: What each status coordinate holds (its attrs["description"]).
_STATUS_DESCRIPTIONS = {
    "state": "pending, running, done or failed",
    "error": "message and traceback of a failure",
    "host": "host name of the worker that ran it",
    "started": "unix time the last attempt started, seconds",
    "finished": "unix time the last attempt finished, seconds",
    "seconds": "run time of the function, seconds",
    "attempt": "how many times it was started (0: never)",
}


# -- values --------------------------------------------------------------------------------------


def dataset_dtype(dtype: str, complete: bool) -> np.dtype:
    """The dtype a variable of runstore dtype ``dtype`` has in the Dataset: STRING for str,
    object for bytes; float64 for int, uint and bool ones unless ``complete`` (no value
    absent); else the stored dtype."""
    if dtype == "string":
        return STRING
    if dtype == "bytes":
        return np.dtype(object)
    d = np.dtype(dtype)
    return d if complete or d.kind == "f" else np.dtype(np.float64)


def as_values(col: ex.Column, dtype: np.dtype) -> np.ndarray:
    """The values of ``col`` as the Dataset holds them: ``dtype``, NaN where absent (None for
    str and bytes, as the Column holds them). Without a copy where the dtype is already
    that."""
    v = col.values
    if v.dtype == object:
        return v.astype(dtype) if dtype == STRING else v
    if v.dtype == dtype:
        return v
    out = v.astype(dtype)
    absent = ~col.present
    if absent.any():
        out[absent] = np.nan
    return out


def _itemsize(dtype: np.dtype) -> int:
    """Bytes an entry takes: an object's estimate, or a string's 16 and as many again for the
    text stored beside it when it is longer than 15 bytes."""
    return {"O": OBJECT_BYTES, "T": 2 * dtype.itemsize}.get(dtype.kind, dtype.itemsize)


def memory_available() -> int | None:
    """Bytes of memory this process may still take: what the kernel reports available
    (MemAvailable), or what is left under the limit of the process's cgroup (a container, a
    SLURM job) if that is less; None where neither can be read."""
    found = []
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    found.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError):
        pass
    try:
        with open("/proc/self/cgroup") as f:
            rel = next(
                (line.split(":", 2)[2].strip() for line in f if line.startswith("0::")), None
            )
        if rel is not None:
            base = os.path.join("/sys/fs/cgroup", rel.lstrip("/"))
            with open(os.path.join(base, "memory.max")) as f:
                limit = f.read().strip()
            if limit != "max":
                with open(os.path.join(base, "memory.current")) as f:
                    found.append(max(0, int(limit) - int(f.read().strip())))
    except (OSError, ValueError, IndexError):
        pass
    return min(found) if found else None


# -- variables -----------------------------------------------------------------------------------


class Variable:
    """One data variable of the Dataset: a series read per run (step 0), or per run and step.

    Holds what reading it needs (the store, the experiment index, the steps), so that it
    pickles whole into a dask graph run on other processes, which open the store again."""

    def __init__(
        self,
        name: str,
        outcome: Outcome,
        store: StoreReader,
        index: ex.ExperimentIndex,
        steps: np.ndarray | None,
    ) -> None:
        self.name = name
        self.outcome = outcome
        self.store = store
        self.index = index
        self.steps = steps
        shape = outcome.shape
        assert shape is not None, "variable-shape series are refused before"
        #: A column of one value per run, read whole by the ExperimentTable (None: read in
        #: chunks).
        self.column = outcome.column if steps is None else None
        complete = self.column is not None and self.column.complete
        self.dtype = dataset_dtype(outcome.dtype, complete)
        lead = (len(index),) if steps is None else (len(index), len(steps))
        self.shape = lead + shape
        self.dims = (RUN,) + (() if steps is None else (STEP,))
        self.dims += tuple(f"{name}_dim_{k}" for k in range(len(shape)))
        self.attrs = {
            "runstore_role": "outcome",
            "runstore_series": outcome.name,
            "runstore_dtype": outcome.dtype,
        }

    @property
    def record_bytes(self) -> int:
        """Bytes of one record in the Dataset."""
        return _itemsize(self.dtype) * int(np.prod(self.outcome.shape or (), dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return _itemsize(self.dtype) * int(np.prod(self.shape, dtype=np.int64))

    def read(self, rows: slice, steps: slice | None = None) -> np.ndarray:
        """The values of the runs in ``rows`` (and, by step, of the steps in ``steps``; all
        of them if None), read a part of about CHUNK_BYTES at a time into the array returned:
        one scan of each part's runs, whose mapped pages are released after it."""
        if self.column is not None:
            return as_values(self.column.take(rows), self.dtype)
        if self.steps is not None and steps is None:
            steps = slice(0, len(self.steps))
        # The blocks read before were freed into the C heap, which keeps them (glibc serves
        # blocks below its adaptive threshold from it): given back, memory stays one block.
        release_freed_memory()
        n = rows.stop - rows.start
        lead = (n,) if steps is None else (n, steps.stop - steps.start)
        out = np.empty(lead + self.shape[len(lead) :], self.dtype)
        part_rows, part_width = self.chunk_shape(CHUNK_BYTES)
        for r0 in range(0, n, part_rows):
            r = slice(r0, min(n, r0 + part_rows))
            at = slice(rows.start + r.start, rows.start + r.stop)
            if steps is None:
                out[r] = self._read_part(at, None)
                continue
            for s0 in range(0, lead[1], part_width):
                s = slice(s0, min(lead[1], s0 + part_width))
                window = self.steps[steps.start + s.start : steps.start + s.stop]
                out[r, s] = self._read_part(at, window)
        return out

    def _read_part(self, rows: slice, steps: np.ndarray | None) -> np.ndarray:
        col = read_rows(self.store, self.index, self.outcome, rows, steps)
        release_mapped_pages(self.store)
        return as_values(col, self.dtype)

    def fill(self) -> np.ndarray:
        """The whole variable in memory."""
        if self.column is not None:
            return as_values(self.column, self.dtype)
        return self.read(slice(0, self.shape[0]))

    def chunk_shape(self, budget: int) -> tuple[int, int]:
        """(runs, steps) of a chunk of about ``budget`` bytes: every step of as many runs as
        fit, or part of the steps of one run where one run takes more."""
        width = 1 if self.steps is None else max(1, len(self.steps))
        rec = max(1, self.record_bytes)
        if rec * width > budget:
            width = max(1, budget // rec)
        return rows_per_chunk(max(1, self.shape[0]), rec * width, budget), width


class _Blocks:
    """A variable as dask reads it (``dask.array.from_array``): indexed with a slice per
    dimension, it reads those runs (and steps) from the store and returns them as a numpy
    array."""

    def __init__(self, var: Variable) -> None:
        self.var = var
        self.shape = var.shape
        self.dtype = var.dtype
        self.ndim = len(var.shape)

    def __getitem__(self, key: Any) -> np.ndarray:
        key = key if isinstance(key, tuple) else (key,)
        key = key + (slice(None),) * (self.ndim - len(key))
        lead = 1 if self.var.steps is None else 2
        ranges, rest = [], []
        for idx, size in zip(key[:lead], self.shape[:lead]):
            if isinstance(idx, slice) and idx.step in (None, 1):  # what dask asks for
                start, stop, _ = idx.indices(size)
                ranges.append(slice(start, max(start, stop)))
                rest.append(slice(None))
            else:  # anything else: the whole range, then numpy's indexing
                ranges.append(slice(0, size))
                rest.append(idx)
        block = self.var.read(*ranges)
        return block[tuple(rest) + key[lead:]]


# -- the layout ----------------------------------------------------------------------------------


def _select(
    store: StoreReader, infos: dict[str, dict[str, Any]], names: Any, refuse: Mapping[str, str]
) -> list[str]:
    """The series the Dataset's data variables hold: ``names`` checked, or every series of
    fixed shape. ``refuse``: dtypes left out by default, and refused with ValueError (saying
    the text given for the dtype) when named."""
    available = [n for n in infos if not n.startswith("~")]
    if names is None:
        return [
            n
            for n in available
            if not infos[n]["variable_shape"] and infos[n]["dtype"] not in refuse
        ]
    wanted = [names] if isinstance(names, str) else list(names)
    out: list[str] = []
    for n in wanted:
        if not isinstance(n, str):
            raise TypeError(f"names: a series name is a str, got {type(n).__name__}")
        if n.startswith("~"):
            raise ValueError(
                f"series {n!r} is reserved for runstore: the design and status it belongs to "
                "are the Dataset's coordinates"
            )
        if n not in infos:
            shown = ", ".join(repr(a) for a in available[:20])
            more = f" and {len(available) - 20} more" if len(available) > 20 else ""
            raise KeyError(
                f"series {n!r} not found in the store {store.path}"
                + (f" (its series: {shown}{more})" if available else " (it has no series)")
            )
        if infos[n]["variable_shape"]:
            raise ValueError(
                f"series {n!r} has a variable shape, which an xarray variable cannot hold: "
                "read it with Store.scan"
            )
        if infos[n]["dtype"] in refuse:
            raise ValueError(f"series {n!r} holds {infos[n]['dtype']}: {refuse[infos[n]['dtype']]}")
        if n not in out:
            out.append(n)
    return out


def _parse_chunks(chunks: Any) -> tuple[int | None, int | None]:
    """(runs, steps) per chunk from ``chunks``: None, an int (runs) or a mapping of "run"
    and "step" to ints."""
    if chunks is None:
        return None, None
    given = {RUN: chunks} if not isinstance(chunks, Mapping) else dict(chunks)
    unknown = set(given) - {RUN, STEP}
    if unknown:
        raise ValueError(
            f"chunks: the Dataset is chunked along 'run' and 'step' only, not {sorted(unknown)}"
        )
    for dim, v in given.items():
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"chunks: {dim!r} needs a positive int, got {v!r}")
    run, step = given.get(RUN), given.get(STEP)
    return (None if run is None else int(run)), (None if step is None else int(step))


class Layout:
    """What the Dataset of a store holds, with nothing of the data variables read yet: the
    rows (runs or experiments), the steps, the coordinates along ``run`` (read) and the data
    variables (to read).

    ``by_step``: None for the default (stores with a design: a row per experiment at step 0;
    other stores: by run and step), True for variables of (run, step), False for step 0 only.
    ``refuse``: dtypes that cannot be variables (see :func:`_select`); ``left_out`` lists the
    series of those dtypes that ``names=None`` left out.
    """

    def __init__(
        self,
        store: StoreReader,
        names: Iterable[str] | str | None,
        by_step: bool | None,
        refuse: Mapping[str, str] | None = None,
    ) -> None:
        # The table refreshes the store: what it holds is what the Dataset holds.
        table = ExperimentTable(store, names=[])
        infos = table.infos
        self.store = store
        self.table = table
        self.index = table.index
        self.n = table.n
        self.has_design = table.has_design
        if not self.has_design and not any(not n.startswith("~") for n in infos):
            raise ValueError(
                f"the store {store.path} holds no records: there is nothing to make a Dataset of"
            )
        self.by_step = (not self.has_design) if by_step is None else bool(by_step)
        refuse = refuse or {}
        selected = _select(store, infos, names, refuse)
        self.left_out = [
            n
            for n in infos
            if names is None and not n.startswith("~") and infos[n]["dtype"] in refuse
        ]
        if not selected and not self.has_design:
            raise ValueError(
                f"the store {store.path} has no series of fixed shape to make variables of "
                "(variable-shape series are read with Store.scan)"
            )
        if self.by_step:
            outcomes = [Outcome(n, infos[n]) for n in selected]
            self.steps: np.ndarray | None = self._steps(outcomes)
        else:
            table.add_outcomes(selected)
            outcomes = table.outcomes
            self.steps = None

        self.coords: dict[str, tuple[tuple[str, ...], Any, dict[str, Any]]] = {}
        self.coords[RUN] = ((RUN,), self._run_values(), {"runstore_role": "id"})
        if self.steps is not None:
            self.coords[STEP] = ((STEP,), self.steps, {"runstore_role": "step"})
        if self.has_design:
            self._design_coords()
        # An outcome named like a coordinate is outcome.<name>; names made unique, so that no
        # variable takes another's place (a Dataset is a mapping of names).
        fixed = set(self.coords)
        taken = fixed | {o.name for o in outcomes}
        self.variables = []
        for o in outcomes:
            name = o.name if o.name not in fixed else unique_name(f"outcome.{o.name}", taken)
            self.variables.append(Variable(name, o, store, self.index, self.steps))
        # A dimension of an array, <name>_dim_<k>, must be no variable's name (xarray would
        # take that variable for the dimension's coordinate) nor another array's dimension.
        for v in self.variables:
            lead = 1 if self.steps is None else 2
            v.dims = v.dims[:lead] + tuple(unique_name(d, taken) for d in v.dims[lead:])
        # What the scans of the columns above freed, before the variables are allocated.
        release_freed_memory()
        self.attrs: dict[str, Any] = dict(_attrs.read(store.path)[1])
        self.attrs.update(
            runstore_store=store.path,
            runstore_version=__version__,
            runstore_rows="experiments" if self.has_design else "runs",
        )

    def _run_values(self) -> Any:
        """The run coordinate: the ids; int and str ids together become str (ints as their
        decimal text, as to_arrow does), refused where that makes two ids one. str ids are an
        object pandas Index of the index's own str objects: a str Index (or a STRING array,
        which xarray indexes as one) would copy each of them through pandas, three times the
        memory of the ids for as long as the Dataset lives."""
        import pandas as pd

        ids = self.index.ids
        if ids.dtype != object:
            return ids
        if all(isinstance(i, str) for i in ids.tolist()):
            return pd.Index(ids, dtype=object, copy=False, name=RUN)
        text = np.array([str(i) for i in ids.tolist()], dtype=object)
        if len(set(text.tolist())) != len(text):
            seen: dict[str, Any] = {}
            for i, t in zip(ids.tolist(), text.tolist()):
                if t in seen and seen[t] != i:
                    raise ValueError(
                        f"run ids {seen[t]!r} and {i!r} are both {t!r} as text, which the run "
                        "coordinate of mixed int and str ids holds"
                    )
                seen[t] = i
        return pd.Index(text, dtype=object, copy=False, name=RUN)

    def _design_coords(self) -> None:
        """Parameters and status as coordinates along run."""
        table = self.table
        probe = {p: c.values for p, c in table.params.items()}
        ex.apply_categories(self.store, probe)  # the categories of store.attrs, checked
        taken = set(table.params) | {RUN, STEP} | set(table.status_names.values())
        for p, col in table.params.items():
            name = p if p not in (RUN, STEP) else unique_name(f"param.{p}", taken)
            attrs: dict[str, Any] = {
                "runstore_role": "parameter",
                "runstore_series": ex.DESIGN + p,
                "runstore_dtype": col.dtype,
            }
            if probe[p] is not col.values:  # a pandas Categorical: keep its categories
                attrs["categories"] = list(probe[p].categories.tolist())
            dtype = dataset_dtype(col.dtype, col.complete)
            self.coords[name] = ((RUN,), as_values(col, dtype), attrs)
        for field, col in table.status_columns().items():
            attrs = {
                "runstore_role": "status",
                "runstore_series": ex.STATUS_COLUMNS[field],
                "runstore_dtype": col.dtype,
                "description": _STATUS_DESCRIPTIONS[field],
            }
            dtype = dataset_dtype(col.dtype, col.complete)
            self.coords[table.status_names[field]] = ((RUN,), as_values(col, dtype), attrs)

    def _steps(self, outcomes: list[Outcome]) -> np.ndarray:
        """Every step at which a selected series has a record of a run of the index, sorted:
        one pass over the series' keys, a chunk of runs at a time (about CHUNK_BYTES of
        records, from the series' average per run)."""
        found = [np.empty(0, dtype=np.int64)]
        n = self.n
        for o in outcomes:
            per_run = max(1, o.info["count"] // max(1, n))
            rows = rows_per_chunk(max(1, n), per_run * (o.row_bytes + 16))
            for start in range(0, n, rows):
                # Without a design the index is every run: one chunk of all needs no filter.
                whole = not self.has_design and start == 0 and rows >= n
                ids = None if whole else self.index.ids[start : start + rows].tolist()
                d = self.store._core.scan(o.name, runs=ids)
                found.append(np.unique(d["step"]))
                del d
                release_mapped_pages(self.store)
        return np.unique(np.concatenate(found)).astype(np.int64, copy=False)

    @property
    def nbytes(self) -> int:
        """Bytes the data variables take in memory (an estimate for strings and bytes)."""
        return sum(v.nbytes for v in self.variables)

    def chunking(self, chunks: Any, budget: int) -> tuple[int, int]:
        """(runs, steps) per chunk of a lazy Dataset: ``chunks`` where it says, else chunks of
        about ``budget`` bytes of the largest variable."""
        run_rows, step_width = _parse_chunks(chunks)
        big = max(self.variables, key=lambda v: v.record_bytes, default=None)
        auto_rows, auto_width = big.chunk_shape(budget) if big is not None else (self.n, 1)
        if step_width is None:
            step_width = auto_width
        if run_rows is None:
            if big is not None and self.steps is not None and step_width != auto_width:
                auto_rows = rows_per_chunk(max(1, self.n), big.record_bytes * step_width, budget)
            run_rows = auto_rows
        return max(1, min(run_rows, max(1, self.n))), max(1, step_width)

    def dataset(
        self, lazy: bool, chunks: Any = None, budget: int = LAZY_CHUNK_BYTES
    ) -> xarray.Dataset:
        """The Dataset: data variables read into memory, or (``lazy``) dask arrays that read
        their chunks when computed."""
        import xarray as xr

        if lazy:
            try:
                import dask.array as da
            except ImportError as e:
                raise ImportError(
                    f"a lazy Dataset needs dask ({e}): pip install dask, or runstore[xarray]"
                ) from None
            rows, width = self.chunking(chunks, budget)
            token = secrets.token_hex(8)
        elif chunks is not None:
            raise ValueError("chunks= is for a lazy Dataset: pass lazy=True with it")
        data_vars = {}
        for v in self.variables:
            if not lazy:
                data = v.fill()
            else:
                lead = (rows,) if self.steps is None else (rows, width)
                shape_chunks = lead + tuple(v.shape[len(lead) :])
                source: Any = _Blocks(v) if v.column is None else as_values(v.column, v.dtype)
                data = da.from_array(
                    source,
                    chunks=shape_chunks,
                    name=f"runstore-{token}-{len(data_vars)}",
                    lock=False,
                    meta=np.empty((0,) * len(v.shape), dtype=v.dtype),
                )
            data_vars[v.name] = (v.dims, data, v.attrs)
        release_mapped_pages(self.store)
        return xr.Dataset(data_vars, coords=self.coords, attrs=self.attrs)


def to_xarray(
    store: StoreReader,
    names: Iterable[str] | str | None,
    by_step: bool | None,
    lazy: bool | None,
    chunks: Any,
) -> xarray.Dataset:
    """runstore.export.to_xarray."""
    layout = Layout(store, names, by_step)
    if lazy is None and chunks is None:
        available = memory_available()
        lazy = available is not None and layout.nbytes > EAGER_MEMORY_FRACTION * available
        if lazy:
            try:
                import dask.array  # noqa: F401
            except ImportError:
                raise MemoryError(
                    f"the Dataset of {store.path} would take {size_text(layout.nbytes)}, more than "
                    f"{EAGER_MEMORY_FRACTION:.0%} of the memory available "
                    f"({size_text(available or 0)}), so it is built lazily, which needs dask: pip "
                    "install dask (or runstore[xarray]); lazy=False builds it in memory anyway"
                ) from None
    elif lazy is None:
        lazy = chunks is not None
    return layout.dataset(lazy=lazy, chunks=chunks)
