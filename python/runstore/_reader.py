"""What the modules below :class:`runstore.Store` need of a store, named: :class:`StoreReader`, a
typing Protocol that Store satisfies. The modules Store's methods delegate to (the experiments,
the exports, the tables and files they read and write) are annotated with it, so that none of
them imports ``_store``, even for annotations: the import picture of the package has no circle,
and what a lower module may ask of a store is this list."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import numpy as np

    from . import _attrs
    from ._checks import RunId, StepWindow
    from ._core import Writer


@runtime_checkable
class StoreReader(Protocol):
    """An open store, as the modules below Store use it."""

    @property
    def path(self) -> str:
        """The store's directory."""

    @property
    def read_only(self) -> bool:
        """Whether it was opened read-only."""

    @property
    def _core(self) -> Any:
        """The binding's store (``runstore._core.Store``): scans, aligned reads, series."""

    @property
    def attrs(self) -> _attrs.Attrs:
        """The store's attributes."""

    def refresh(self) -> Any:
        """Sees what was committed since it was opened or last refreshed."""

    def writer(self, **options: Any) -> Writer:
        """A writer of this store (``Store.writer``'s options)."""

    def scan(
        self,
        name: str,
        keys: bool = True,
        runs: Iterable[RunId] | None = None,
        steps: StepWindow | None = None,
        with_time: bool = False,
    ) -> dict[str, np.ndarray]:
        """Every visible record of one series, as columns (``Store.scan``)."""

    def series(self) -> Mapping[str, Any]:
        """Every series, by name, with its dtype, shape and count (``Store.series``)."""
