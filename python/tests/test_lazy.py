"""Store.array: large arrays read and checked as they are indexed (docs/format.md, "Value
chunks")."""

from __future__ import annotations

import gc
import multiprocessing
import pickle

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import runstore

# Arrays of at least 1 MiB are blocks of their own, checksummed in 4 KiB chunks.
SHAPES = {
    "matrix": ((512, 520), np.float64),  # rows of 4,160 bytes: chunks and rows do not line up
    "cube": ((16, 130, 129), np.float32),
    "bytes": (((1 << 20) + 5,), np.int8),
    "tall": ((70_000, 3), np.int64),
}


@pytest.fixture(scope="module")
def arrays(tmp_path_factory):
    path = tmp_path_factory.mktemp("lazy") / "store"
    rng = np.random.default_rng(7)
    expected = {}
    with runstore.open(path).writer(writer_id="w") as w:
        for name, (shape, dtype) in SHAPES.items():
            a = (rng.standard_normal(shape) * 100).astype(dtype)
            w.put(0, name, a)
            expected[name] = a
    return path, expected


@given(data=st.data(), name=st.sampled_from(sorted(SHAPES)))
def test_basic_indexing_returns_what_numpy_returns(arrays, data, name):
    path, expected = arrays
    a = expected[name]
    key = data.draw(hnp.basic_indices(a.shape, allow_newaxis=True), label="key")
    lazy = runstore.open(path, "r").array(0, name)  # a fresh snapshot: nothing checked yet
    got, want = lazy[key], a[key]
    assert type(got) is type(want)
    if isinstance(want, np.ndarray):
        assert got.shape == want.shape and got.dtype == want.dtype
        assert not got.flags.writeable
    np.testing.assert_array_equal(got, want)


@pytest.fixture(scope="module")
def damaged(tmp_path_factory):
    """The arrays of SHAPES, each with one byte of one chunk damaged: (path, arrays, the
    byte range of the damaged chunk within each array's data)."""
    path = tmp_path_factory.mktemp("damaged") / "store"
    rng = np.random.default_rng(11)
    expected = {}
    with runstore.open(path).writer(writer_id="w") as w:
        for name, (shape, dtype) in SHAPES.items():
            expected[name] = (rng.standard_normal(shape) * 100).astype(dtype)
            w.put(0, name, expected[name])
    (seg,) = (path / "segments").iterdir()
    data = bytearray(seg.read_bytes())
    chunks = {}
    for name, a in expected.items():
        value = data.find(a.tobytes()[:4096])
        chunk = int(rng.integers(0, -(-a.nbytes // 4096)))
        begin, end = chunk * 4096, min((chunk + 1) * 4096, a.nbytes)
        data[value + int(rng.integers(begin, end))] ^= 0x10
        chunks[name] = (begin, end)
    seg.write_bytes(bytes(data))
    return path, expected, chunks


@given(data=st.data(), name=st.sampled_from(sorted(SHAPES)))
def test_an_index_fails_exactly_when_it_reaches_a_damaged_chunk(damaged, data, name):
    path, expected, chunks = damaged
    a = expected[name]
    key = data.draw(hnp.basic_indices(a.shape, allow_newaxis=True), label="key")
    # The bytes the result reaches: those of the elements it holds.
    elements = np.arange(a.size).reshape(a.shape)[key]
    begin, end = chunks[name]
    reaches = bool(np.any((elements * a.itemsize < end) & ((elements + 1) * a.itemsize > begin)))
    lazy = runstore.open(path, "r").array(0, name)
    if reaches:
        with pytest.raises(runstore.CorruptionError, match="value chunk"):
            lazy[key]
    else:
        np.testing.assert_array_equal(lazy[key], a[key])


@given(data=st.data(), name=st.sampled_from(sorted(SHAPES)))
def test_integer_array_indexing_returns_what_numpy_returns(arrays, data, name):
    path, expected = arrays
    a = expected[name]
    key = data.draw(hnp.integer_array_indices(a.shape), label="key")
    lazy = runstore.open(path, "r").array(0, name)
    np.testing.assert_array_equal(lazy[key], a[key])
    assert lazy.checked  # checked whole first


def test_lazy_array_describes_itself_and_reads_whole(arrays):
    path, expected = arrays
    store = runstore.open(path, "r")
    a = expected["matrix"]
    lazy = store.array(0, "matrix")
    assert (lazy.shape, lazy.dtype, lazy.ndim, lazy.size, lazy.nbytes, len(lazy)) == (
        a.shape,
        a.dtype,
        a.ndim,
        a.size,
        a.nbytes,
        len(a),
    )
    assert "LazyArray shape=(512, 520) dtype=float64" in repr(lazy)
    assert not lazy.checked
    lazy[3:5]
    assert not lazy.checked
    whole = np.asarray(lazy)
    assert lazy.checked and "(checked)" in repr(lazy)
    np.testing.assert_array_equal(whole, a)
    assert not whole.flags.writeable and whole.base.zero_copy
    # What one reader checked, the next one of the same store does not check again.
    assert store.array(0, "matrix").checked
    copy = np.array(store.array(0, "matrix"), copy=True)
    assert copy.flags.writeable
    np.testing.assert_array_equal(np.asarray(lazy, dtype=np.float32), a.astype(np.float32))
    with pytest.raises(ValueError, match="needs a copy"):
        lazy.__array__(np.float32, copy=False)
    np.testing.assert_array_equal(store.array(0, "cube").read(), expected["cube"])


def test_views_outlive_the_lazy_array_and_the_store(arrays):
    path, expected = arrays
    store = runstore.open(path, "r")
    lazy = store.array(0, "tall")
    rows = lazy[1000:1010]
    del lazy, store
    gc.collect()
    np.testing.assert_array_equal(rows, expected["tall"][1000:1010])


def test_lazy_array_pickles_as_its_store_and_key(arrays):
    path, expected = arrays
    lazy = runstore.open(path, "r").array(0, "tall", 0)
    lazy[5]
    again = pickle.loads(pickle.dumps(lazy))
    assert isinstance(again, runstore.LazyArray) and not again.checked  # opened anew
    np.testing.assert_array_equal(again[100:200:3], expected["tall"][100:200:3])
    # A worker process reads what it is handed.
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        total = pool.apply(_sum_of_every_tenth_row, (lazy,))
    assert total == int(expected["tall"][::10].sum())


def _sum_of_every_tenth_row(lazy: runstore.LazyArray) -> int:
    return int(lazy[::10].sum())


def test_values_without_chunks_are_checked_whole(store):
    big = np.arange(300_000, dtype=np.float64) % 7  # compressible
    with store.writer(codec="zstd") as w:
        w.put(0, "compressed", big)
    with store.writer() as w:
        w.put(0, "small", np.arange(10.0))
        w.log(0, scalar=2.5, label="text")
    store.refresh()
    for name in ("compressed", "small"):
        lazy = store.array(0, name)
        assert lazy.checked
    np.testing.assert_array_equal(store.array(0, "compressed")[::1000], big[::1000])
    scalar = store.array(0, "scalar")
    assert scalar.shape == () and scalar[()] == 2.5 and isinstance(scalar[()], np.float64)
    with pytest.raises(TypeError, match="series 'label' holds string values"):
        store.array(0, "label")
    with pytest.raises(KeyError):
        store.array(1, "small")
    with pytest.raises(KeyError):
        store.array(0, "absent")


def test_variable_shape_arrays_are_read_lazily(store):
    rng = np.random.default_rng(3)
    shapes = [(600, 500), (501, 700), (1, 300_000)]  # int32, each over 1 MiB
    arrays = [rng.integers(-1000, 1000, size=s).astype(np.int32) for s in shapes]
    with store.writer() as w:
        w.define("v", np.int32, variable_shape=True)
        for run, a in enumerate(arrays):
            w.put(run, "v", a)
    store.refresh()
    for run, a in enumerate(arrays):
        lazy = store.array(run, "v")
        assert lazy.shape == a.shape and not lazy.checked
        np.testing.assert_array_equal(lazy[::7, 3:], a[::7, 3:])
        np.testing.assert_array_equal(lazy[-1], a[-1])
        np.testing.assert_array_equal(lazy.read(), a)


def test_a_damaged_chunk_fails_only_the_reads_that_reach_it(store_path):
    # Rows of 4 KiB: row i is chunk i of the value's data.
    a = np.arange(512 * 512, dtype=np.float64).reshape(512, 512)
    with runstore.open(store_path).writer(writer_id="w") as w:
        w.put(0, "m", a)
    (seg,) = (store_path / "segments").iterdir()
    data = bytearray(seg.read_bytes())
    value = data.find(a.tobytes()[:4096])
    assert value > 0
    data[value + 100 * 4096 + 17] ^= 0x40  # row 100
    seg.write_bytes(bytes(data))

    store = runstore.open(store_path, "r")
    lazy = store.array(0, "m")
    where = f"{seg.name}: offset {value + 100 * 4096}: value chunk 100 of 512"
    np.testing.assert_array_equal(lazy[:100], a[:100])
    np.testing.assert_array_equal(lazy[101:], a[101:])
    np.testing.assert_array_equal(lazy[1::2], a[1::2])
    assert lazy[99, 511] == a[99, 511] and lazy[101, 0] == a[101, 0]
    for key in (100, (100, 17), slice(None, None, 4), (slice(None), 0), Ellipsis, [5, 100]):
        with pytest.raises(runstore.CorruptionError, match=where):
            lazy[key]
    with pytest.raises(runstore.CorruptionError, match=where):
        np.asarray(lazy)
    with pytest.raises(runstore.CorruptionError, match=where):
        store.get(0, "m")
    with pytest.raises(runstore.CorruptionError, match=where):
        store.verify()
    assert not lazy.checked
