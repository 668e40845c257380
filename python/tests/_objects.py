"""Objects the engines' saves must refuse rather than strip: each has metadata that numpy's
conversion (its ``__array__``) would drop, as obspy's ``Trace`` keeps its samples there and loses
its id, start time and sampling rate (docs/dask.md, "One failing element costs one element")."""

from __future__ import annotations

import numpy as np


class Trace:
    """Samples and an id; ``np.asarray`` of it is the samples alone."""

    def __init__(self, i: int) -> None:
        self.data = np.full(8, float(i))
        self.id = f"XX.STA{i}..BHZ"

    def __array__(self, dtype=None, copy=None):
        return self.data
