"""Uncompressed arrays come back as read-only views of the mapped segment file."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import numpy as np
import pytest

import runstore


def mappings_of(path: Path) -> list[tuple[int, int]]:
    """Address ranges at which this process maps the file `path` (from /proc/self/maps)."""
    ranges = []
    target = str(path.resolve())
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and parts[5].strip() == target:
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                ranges.append((lo, hi))
    return ranges


def segment_files(path):
    return sorted((path / "segments").glob("*.rss"))


def test_get_returns_a_view_into_the_mapped_segment(store_path, rng):
    matrix = rng.standard_normal((1024, 1024))  # 8 MiB
    with runstore.open(store_path).writer() as w:
        w.put("m", "matrix", matrix)
    store = runstore.open(store_path, mode="r")
    arr = store.get("m", "matrix")
    (seg,) = segment_files(store_path)
    addr = arr.__array_interface__["data"][0]
    assert any(lo <= addr and addr + arr.nbytes <= hi for lo, hi in mappings_of(seg)), (
        "the array does not lie inside the mapping of the segment file"
    )
    assert not arr.flags.owndata and not arr.flags.writeable
    assert arr.flags.c_contiguous and arr.flags.aligned
    assert addr % 64 == 0  # large payloads are 64-byte aligned
    assert isinstance(arr.base, runstore.ArrayOwner)
    assert arr.base.zero_copy and arr.base.address == addr and arr.base.nbytes == matrix.nbytes
    with pytest.raises(ValueError, match="read-only"):
        arr[0, 0] = 1.0
    # Two gets share the same bytes.
    assert store.get("m", "matrix").__array_interface__["data"][0] == addr
    # The owner keeps the mapping alive after the store is gone.
    del store
    gc.collect()
    assert mappings_of(seg)
    np.testing.assert_array_equal(arr, matrix)
    del arr
    gc.collect()
    assert not mappings_of(seg), "the mapping outlived every array"


def resident_kib(path: Path) -> int:
    """Resident KiB of this process's mappings of the file `path` (Rss in /proc/self/smaps)."""
    target, total, inside = str(path.resolve()), 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            first = line.split(maxsplit=1)[0]
            if "-" in first and not first.endswith(":"):  # a mapping's header line
                inside = line.rstrip().endswith(" " + target)
            elif inside and first == "Rss:":
                total += int(line.split()[1])
    return total


def test_pages_of_a_freed_array_leave_resident_memory(store_path, rng):
    # The mapping lives as long as the store; what stays resident must follow the arrays still
    # in use, not every array ever read (a reader going through thousands of arrays).
    arrays = [rng.standard_normal((1024, 1024)) for _ in range(3)]  # 8 MiB each
    with runstore.open(store_path).writer() as w:
        for i, a in enumerate(arrays):
            w.put(i, "a", a)
    store = runstore.open(store_path, mode="r")
    (seg,) = segment_files(store_path)
    views = [store.get(i, "a") for i in range(3)]
    for i in range(3):
        np.testing.assert_array_equal(views[i], arrays[i])  # touches every page
    assert resident_kib(seg) >= 3 * 8192 - 64
    del views[1]
    gc.collect()
    assert 2 * 8192 - 64 <= resident_kib(seg) <= 2 * 8192 + 64
    # The neighbours' bytes are intact, and so is a fresh view of the released one.
    np.testing.assert_array_equal(views[0], arrays[0])
    np.testing.assert_array_equal(views[1], arrays[2])
    np.testing.assert_array_equal(store.get(1, "a"), arrays[1])
    views.clear()
    gc.collect()
    assert resident_kib(seg) < 256


def test_small_values_are_views_too(store_path):
    with runstore.open(store_path).writer() as w:
        w.log(1, x=2.5, v=np.arange(4.0))
    store = runstore.open(store_path, mode="r")
    (seg,) = segment_files(store_path)
    for name in ("x", "v"):
        arr = store.get(1, name)
        addr = arr.__array_interface__["data"][0]
        assert arr.base.zero_copy
        assert any(lo <= addr < hi for lo, hi in mappings_of(seg))


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_compressed_values_are_owned_copies(store_path, codec):
    data = np.arange(100_000, dtype=np.int64)
    with runstore.open(store_path).writer(codec=codec) as w:
        w.put(1, "x", data)
    store = runstore.open(store_path, mode="r")
    arr = store.get(1, "x")
    assert not arr.base.zero_copy and not arr.flags.writeable
    (seg,) = segment_files(store_path)
    addr = arr.__array_interface__["data"][0]
    assert not any(lo <= addr < hi for lo, hi in mappings_of(seg))
    del store
    gc.collect()
    np.testing.assert_array_equal(arr, data)


def test_scan_of_one_block_is_a_view(store_path):
    runs = np.arange(1000) ** 2  # no sequences: the column is stored as it is
    with runstore.open(store_path).writer() as w:
        w.log_many(runs, steps=runs % 7, v=runs * 2.0)
    store = runstore.open(store_path, mode="r")
    d = store.scan("v")
    (seg,) = segment_files(store_path)
    for col in ("run", "step", "value"):
        addr = d[col].__array_interface__["data"][0]
        assert any(lo <= addr < hi for lo, hi in mappings_of(seg)), col
        assert not d[col].flags.writeable
    np.testing.assert_array_equal(d["value"], runs * 2.0)


def test_sequences_of_runs_and_steps_come_back_as_arrays(store_path):
    """A sweep's runs 0, 1, 2, ... and steps 0, 0, 0, ... are stored as sequences
    (docs/format.md, format version 2): the scan builds them; the values stay a view."""
    runs = np.arange(5000, 15000)
    with runstore.open(store_path).writer() as w:
        w.log_many(runs, v=runs * 2.0)
        w.log_many(np.full(1000, 7), steps=np.arange(1000, 0, -1), u=np.arange(1000.0))
        # three runs of 500 steps each: three sequences per key column
        w.log_many(np.repeat([3, 1, 2], 500), steps=np.tile(np.arange(500), 3), r=np.arange(1500.0))
    store = runstore.open(store_path, mode="r")
    rl = store.scan("r")
    np.testing.assert_array_equal(rl["run"], np.repeat([3, 1, 2], 500))
    np.testing.assert_array_equal(rl["step"], np.tile(np.arange(500), 3))
    assert store.get(1, "r", step=499) == 999.0
    d, e = store.scan("v"), store.scan("u")
    np.testing.assert_array_equal(d["run"], runs)
    np.testing.assert_array_equal(d["step"], np.zeros(10000))
    np.testing.assert_array_equal(e["run"], np.full(1000, 7))
    np.testing.assert_array_equal(e["step"], np.arange(1000, 0, -1))
    assert not d["run"].flags.writeable and not d["step"].flags.writeable
    assert not d["run"].base.zero_copy and d["value"].base.zero_copy
    assert store.get(9999, "v") == 9999 * 2.0 and store.get(7, "u", step=1) == 999.0
    # Without keys: the value column alone, the same view of the file.
    (only,) = store.scan("v", keys=False).items()
    assert only[0] == "value" and only[1].base.zero_copy
    np.testing.assert_array_equal(only[1], d["value"])
    # 12,500 records of 8 value bytes: about 100 KB, not the 300 KB with plain key columns.
    (seg,) = segment_files(store_path)
    assert os.path.getsize(seg) < 120_000


def test_writable_copy(store_path):
    with runstore.open(store_path).writer() as w:
        w.put(1, "x", np.zeros(3))
    arr = np.array(runstore.open(store_path, mode="r").get(1, "x"))
    arr[0] = 1
    assert arr.flags.owndata and arr[0] == 1
