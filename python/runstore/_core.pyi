"""Type stubs for runstore._core, the compiled half of the runstore package."""

from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

_RunId = int | str
_Value = (
    bool | int | float | str | bytes | bytearray | np.generic | npt.NDArray[Any] | Sequence[Any]
)
_Codec = Literal["none", "lz4", "zstd"]

FORMAT_VERSION: int
DTYPES: tuple[str, ...]
CODECS: tuple[str, ...]

class CorruptionError(Exception):
    """Stored bytes failed a check; the message names the segment file and the offset."""

class UnsupportedFormatError(NotImplementedError):
    """A store or segment of a format version this build cannot read."""

class ResourceExhaustedError(OSError):
    """The process ran out of file descriptors, memory or memory mappings (errno set)."""

class ArrayOwner:
    """The base of every array returned by Store.get / Store.scan; keeps its bytes alive."""

    @property
    def zero_copy(self) -> bool: ...
    @property
    def address(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def dtype(self) -> str: ...

class Writer:
    """Appends records to a store; made by Store.writer().

    A writer belongs to the process that made it: in a child of fork() every method raises
    RuntimeError (docs/design.md#fork). In the main thread, a with-block makes SIGTERM raise
    SystemExit(143) until it is left (docs/experiments.md, "Signals").
    """

    def log(self, run: _RunId, step: int = 0, **values: _Value) -> None:
        """Appends one record per keyword: (run, name, step) -> value.

        Series named ``run`` or ``step`` (or not identifiers) go in a dict:
        ``values={"step": 3.0}``.
        """
    def put(self, run: _RunId, name: str, value: _Value, step: int = 0) -> None:
        """Appends one value (typically a large array) under (run, name, step)."""
    def log_many(
        self,
        runs: _RunId | Sequence[_RunId] | npt.NDArray[np.integer[Any]],
        steps: int | Sequence[int] | npt.NDArray[np.integer[Any]] | None = None,
        **columns: npt.ArrayLike,
    ) -> None:
        """Vectorised log: record i is (runs[i], name, steps[i]) -> columns[name][i].

        ``runs`` may be one run id: every record is of that run. Columns named ``runs`` or
        ``steps`` (or not identifiers) go in a dict: ``columns={"steps": ...}``.
        """
    def define(
        self,
        name: str,
        dtype: str | type | np.dtype[Any],
        shape: Sequence[int] | None = None,
        variable_shape: bool = False,
        codec: _Codec | None = None,
    ) -> None:
        """Declares a series before its first record (variable shape, codec)."""
    def commit(self, wait: bool = True) -> int:
        """Makes every record appended before the call durable and visible; returns the
        commit's ticket. With wait=False, returns at once; wait_for_commit(ticket) returns
        when it is durable."""
    def wait_for_commit(self, ticket: int) -> None:
        """Returns when the commit of ``ticket`` is durable."""
    @property
    def durable_ticket(self) -> int:
        """The newest ticket durable with every one before it, without waiting."""
    @property
    def shipped_ticket(self) -> int:
        """With staging_dir: the newest ticket shipped into the store with every one before
        it, without waiting (durable_ticket without staging)."""
    def wait_for_shipped(self, ticket: int | None = None) -> None:
        """Seals and ships the segment holding ``ticket`` (default: the last commit) and
        returns once it is visible in the store."""
    def flush(self, wait: bool = True) -> None:
        """Makes every record appended before the call visible and safe from a crash of the
        process (not from a power cut); durable at the next commit() or close. With
        wait=False, returns at once and the background thread writes the flush."""
    def resume(self, run: _RunId, step: int) -> None:
        """Hides this run's records at steps >= step written by earlier commits."""
    def close(self) -> None:
        """Commits, seals the open segment and stops the writer."""
    def stats(self) -> dict[str, int | float]:
        """Counters: records and bytes appended and written, commits, back-pressure waits."""
    @property
    def writer_id(self) -> str: ...
    @property
    def closed(self) -> bool: ...
    def __enter__(self) -> Writer: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool: ...

class LazyValue:
    def raw(self) -> npt.NDArray[Any]: ...
    def check_view(self, view: npt.NDArray[Any]) -> None: ...
    def check_all(self) -> None: ...
    @property
    def all_checked(self) -> bool: ...

class Store:
    """The C++ store; the runstore package wraps it in runstore.Store."""

    def __init__(
        self, path: str, read_only: bool = False, create: bool = True, skip_damaged: bool = False
    ) -> None: ...
    @property
    def path(self) -> str: ...
    @property
    def read_only(self) -> bool: ...
    @property
    def skip_damaged(self) -> bool: ...
    def writer(
        self,
        *,
        writer_id: str | None = None,
        buffer_bytes: int | None = None,
        codec: _Codec | None = None,
        zstd_level: int | None = None,
        commit_every_s: float | None = None,
        commit_every_bytes: int | None = None,
        segment_bytes: int | None = None,
        allow_reserved: bool = False,
        staging_dir: str | None = None,
        ship_every_s: float | None = None,
        record_time: bool = False,
    ) -> Writer: ...
    def refresh(self) -> None: ...
    def write_catalog(self) -> int: ...
    def names(self, include_reserved: bool = False) -> list[str]: ...
    def runs(self) -> list[_RunId]: ...
    def series(
        self, include_reserved: bool = False, counts: bool = True
    ) -> list[dict[str, Any]]: ...
    def series_info(self, name: str) -> dict[str, Any]: ...
    def segments(self) -> list[dict[str, Any]]: ...
    def damaged_segments(self) -> list[dict[str, str]]: ...
    def verify_all(self, progress: Callable[[int, int], None] | None = None) -> dict[str, Any]: ...
    def compact(
        self,
        dry_run: bool = False,
        older_than: float = 0.0,
        smaller_than: int = 0,
        memory_bytes: int = 268435456,
        retain: float = 300.0,
        progress: Callable[[int, int], None] | None = None,
        adopt_unsealed: bool = False,
    ) -> dict[str, Any]: ...
    def get(self, run: _RunId, name: str, step: int = 0) -> npt.NDArray[Any] | str | bytes: ...
    def get_lazy(self, run: _RunId, name: str, step: int = 0) -> LazyValue: ...
    def scan(
        self,
        name: str,
        keys: bool = True,
        runs: Sequence[_RunId] | None = None,
        steps: tuple[int, int] | None = None,
    ) -> dict[str, npt.NDArray[Any]]: ...
    def scan_aligned(
        self,
        base: str,
        names: Sequence[str],
        step: int = 0,
        ids: bool = False,
        ordered: bool = False,
    ) -> dict[str, Any]: ...
    def read_aligned(
        self, runs: Sequence[int | str], names: Sequence[str], step: int = 0
    ) -> dict[str, Any]: ...
    def arrow_stream(
        self,
        name: str,
        runs: Sequence[int | str] | None = None,
        steps: tuple[int, int] | None = None,
        batch_rows: int = 65536,
    ) -> Any: ...
    def arrow_schema(self, name: str) -> Any: ...
    def arrow_join(
        self,
        base: str,
        columns: Sequence[tuple[str, str, int | float | str | None, bool, str]],
        run_field: str = "run",
        step_field: str = "step",
        where_series: str = "",
        where_values: Sequence[str] = (),
        where_fill: str | None = None,
        runs: Sequence[int | str] | None = None,
        steps: tuple[int, int] | None = None,
        batch_rows: int = 65536,
        window_bytes: int = 67108864,
        order_by_base_value: bool = False,
        schema_only: bool = False,
    ) -> Any: ...

class EmaBatch:
    """EMA workbench experiments kept until their batch is written (runstore.ema's callback;
    private)."""

    def __init__(
        self,
        outcomes: Sequence[str],
        first_row: int,
        batch: int = 1000,
        flush_every_s: float = 1.0,
    ) -> None:
        """A batch for a model's outcomes (their names, in order); rows count from first_row.
        keep() says to write it once it holds ``batch`` experiments or ``flush_every_s`` has
        passed since it was last cleared."""
    def keep(
        self, experiment: Any, outcomes: Mapping[str, Any], finished: float | None = None
    ) -> int:
        """Keeps an experiment, its outcomes as they are now and its finishing time (None:
        now). Returns bits: 1, write the batch now; 2, the experiment's model_name differs
        from the last kept one's (the first's too)."""
    def columns(
        self,
    ) -> (
        tuple[
            list[str],
            dict[str, npt.NDArray[Any] | list[str]],
            dict[str, npt.NDArray[Any]],
            npt.NDArray[np.int64],
            npt.NDArray[np.float64],
        ]
        | None
    ):
        """(ids, params, outcomes, rows, finished) of the experiments kept, as
        ExperimentWriter.record_many takes them; None if the batch is not one this takes (the
        Python path then writes its items())."""
    def items(self) -> list[tuple[Any, dict[str, Any], float]]:
        """The experiments kept as (experiment, outcomes, finished), the outcomes a dict of
        those present."""
    def clear(self) -> None:
        """Forgets the experiments kept."""
    def __len__(self) -> int: ...

def plain_experiment_id(params: dict[str, Any]) -> str | None:
    """runstore.experiment_id of a dict of str keys and plain bool, int, float, str or None
    values; None for any other dict (the Python path derives its id)."""

def plain_canonical_text(params: dict[str, Any]) -> str | None:
    """The text plain_experiment_id hashes, or None (for tests)."""

def check_series_name(name: str) -> None:
    """Raises ValueError if a writer would refuse ``name`` as a series name (private)."""

def csv_rows(
    columns: Sequence[npt.NDArray[Any]],
    missing: Sequence[npt.NDArray[np.bool_] | None],
    write: Callable[[bytes], object] | None = None,
    *,
    text_cells: bool | Sequence[bool] = False,
) -> bytes | int:
    """CSV lines of equal-length columns (private; used by Store.export_tar). ``text_cells``
    (for every column, or one bool per column): str and bytes cells that a spreadsheet would
    take for a formula get a leading single quote (present/runstore/csv.h)."""

def _set_signal_hooks(enter: Callable[[], bool], leave: Callable[[bool], None]) -> None:
    """The functions a writer's with-block calls on entry and exit (runstore._signals)."""

def segment_budget(mappings: int | None = None, files: int | None = None) -> tuple[int, int]: ...
def sync(
    staging_dir: str,
    store: str,
    *,
    wait_s: float = 5.0,
    force: bool = False,
    progress: Callable[[int, int, int], None] | None = None,
) -> dict[str, Any]: ...
