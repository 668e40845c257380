"""The store's catalog from Python: written, used by the next open, and only a cache."""

from __future__ import annotations

import os

import numpy as np
import pytest

import runstore


def _segments(path: str, n: int) -> None:
    """n sealed segments, one experiment each, as n tasks of a sweep leave them."""
    store = runstore.open(path)
    for i in range(n):
        with store.writer(writer_id=f"task-{i:04d}") as w:
            w.log(f"e{i:016x}", loss=0.5 * i, curve=np.full(8, i, dtype=np.float32))
    store.refresh()


def test_write_catalog_and_read_through_it(tmp_path):
    path = str(tmp_path / "s")
    _segments(path, 40)
    store = runstore.open(path)
    assert store.write_catalog() == 40
    assert os.path.exists(os.path.join(path, "CATALOG"))
    ro = runstore.open(path, "r")
    assert ro.get("e0000000000000021", "loss") == pytest.approx(0.5 * 0x21)
    np.testing.assert_array_equal(ro.get("e0000000000000007", "curve"), np.full(8, 7, np.float32))
    # A damaged catalog costs time, not data.
    with open(os.path.join(path, "CATALOG"), "r+b") as f:
        f.seek(60)
        f.write(b"\xff\xff")
    ro = runstore.open(path, "r")
    assert len(ro.runs()) == 40
    assert ro.get("e0000000000000027", "loss") == pytest.approx(0.5 * 0x27)


def test_write_catalog_needs_a_writable_store(tmp_path):
    path = str(tmp_path / "s")
    _segments(path, 2)
    with pytest.raises(RuntimeError, match="read-only"):
        runstore.open(path, "r").write_catalog()
