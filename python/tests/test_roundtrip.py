"""Property-based round trips: what is written is what is read, for every dtype, shape kind,
run-id kind and codec, through log, put and log_many."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import runstore

NUMERIC = [
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float32",
    "float64",
]
CODECS = ["none", "lz4", "zstd"]

int_runs = st.integers(-(2**63), 2**63 - 1) | st.integers(0, 3)
str_runs = st.text(max_size=12) | st.sampled_from(["a", "b", "run-1"])
steps = st.integers(0, 3) | st.integers(-(2**63), 2**63 - 1)


def runs_of(kind: str) -> st.SearchStrategy:
    return {"int": int_runs, "str": str_runs, "mixed": int_runs | str_runs}[kind]


def same(a, b) -> bool:
    """Bit-exact equality of two values as runstore returns them."""
    if isinstance(b, (str, bytes)):
        return type(a) is type(b) and a == b
    a = np.asarray(a)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def expect_scan(d: dict, model: dict, keys: set) -> None:
    """The scan `d` holds the records of `keys`, each once, with the model's values."""
    seen = {}
    for run, step, value in zip(d["run"].tolist(), d["step"].tolist(), d["value"]):
        key = (run, step)
        assert key not in seen, f"duplicate key {key} in scan"
        seen[key] = value
    assert seen.keys() == keys
    for key, value in seen.items():
        assert same(model[key], value), (key, model[key], value)


def check_store(path: Path, name: str, model: dict) -> None:
    """Reads `name` back through get and scan and compares it with model {(run, step): value}."""
    store = runstore.open(path, mode="r")
    for (run, step), value in model.items():
        got = store.get(run, name, step)
        assert same(value, got), (run, step, value, got)
        if isinstance(got, np.ndarray):
            assert not got.flags.writeable
    if not model:
        return
    d = store.scan(name)
    assert len(d["run"]) == len(d["step"]) == len(d["value"]) == len(model)
    expect_scan(d, model, model.keys())
    if all(isinstance(r, int) for r, _ in model):
        assert d["run"].dtype == np.int64
    info = store.series_info(name)
    assert info.count == len(model)
    # A scan of some runs (every other one, and one that no record has) returns what the full
    # scan has of them.
    distinct = sorted({run for run, _ in model}, key=lambda r: (isinstance(r, str), r))
    wanted = distinct[::2] + ["13 characters"]  # longer than any generated str run
    expect_scan(
        store.scan(name, runs=wanted), model, {key for key in model if key[0] in set(wanted)}
    )
    # And a window of steps, of every run and of those runs.
    distinct_steps = sorted({step for _, step in model})
    start, stop = (
        distinct_steps[len(distinct_steps) // 3],
        distinct_steps[2 * len(distinct_steps) // 3],
    )
    for runs in (None, wanted):
        expect_scan(
            store.scan(name, runs=runs, steps=(start, stop)),
            model,
            {(r, s) for r, s in model if start <= s < stop and (runs is None or r in set(runs))},
        )


@st.composite
def numeric_case(draw):
    dtype = np.dtype(draw(st.sampled_from(NUMERIC)))
    shape = draw(st.sampled_from([(), (1,), (3,), (2, 3), (0,), (2, 1, 2)]))
    run_kind = draw(st.sampled_from(["int", "str", "mixed"]))
    codec = draw(st.sampled_from(CODECS))
    method = draw(st.sampled_from(["log", "put", "log_many"]))
    n_commits = draw(st.integers(1, 3))
    commits = []
    for _ in range(n_commits):
        records = draw(
            st.lists(
                st.tuples(runs_of(run_kind), steps, hnp.arrays(dtype, shape)),
                min_size=0,
                max_size=12,
            )
        )
        commits.append(records)
    return dtype, shape, codec, method, commits


@given(numeric_case())
def test_numeric_round_trip(case):
    dtype, shape, codec, method, commits = case
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "s"
        store = runstore.open(path)
        model = {}
        with store.writer(codec=codec) as w:
            for records in commits:
                if method == "log_many" and records:
                    # One call per group of distinct keys, so that the order of duplicates is clear.
                    w.log_many(
                        [r for r, _, _ in records],
                        steps=np.array([s for _, s, _ in records]),
                        x=np.stack([v for _, _, v in records]),
                    )
                else:
                    for run, step, value in records:
                        # Scalars as numpy scalars, so that the dtype is kept.
                        v = value[()] if shape == () else value
                        if method == "log":
                            w.log(run, step=step, x=v)
                        else:
                            w.put(run, "x", v, step=step)
                for run, step, value in records:
                    model[(run, step)] = value
                w.commit()
        check_store(path, "x", model)


@st.composite
def key_layout(draw):
    """Keys in the layouts that are stored as sequences (format version 2): runs one after
    another, each with steps first, first + d, ..., anywhere in the int64 range (wrapping), or
    with steps that break the pattern now and then."""
    big = st.integers(-(2**63), 2**63 - 1)
    keys = []
    for _ in range(draw(st.integers(1, 4))):
        run = draw(big | st.integers(0, 5))
        first, diff = draw(big | st.integers(-3, 3)), draw(st.integers(-2, 3) | big)
        for i in range(draw(st.integers(1, 60))):
            step = (first + i * diff + 2**63) % 2**64 - 2**63  # int64 wrapping, as stored
            if draw(st.integers(0, 30)) == 0:
                step = draw(big)
            keys.append((run, step))
    return list(dict.fromkeys(keys))  # one record per key


@given(keys=key_layout(), codec=st.sampled_from(CODECS), sequential_runs=st.booleans())
def test_key_columns_stored_as_sequences_round_trip(keys, codec, sequential_runs):
    if sequential_runs:  # a sweep: run i, step 0
        keys = [(i, 0) for i in range(len(keys))]
    values = np.arange(len(keys), dtype=np.float64)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "s"
        with runstore.open(path).writer(codec=codec) as w:
            w.log_many(
                [r for r, _ in keys], steps=np.array([s for _, s in keys], dtype=np.int64), x=values
            )
        check_store(path, "x", {k: values[i] for i, k in enumerate(keys)})


@given(
    kind=st.sampled_from(["string", "bytes"]),
    run_kind=st.sampled_from(["int", "str", "mixed"]),
    codec=st.sampled_from(CODECS),
    method=st.sampled_from(["log", "put", "log_many"]),
    data=st.data(),
)
def test_string_and_bytes_round_trip(kind, run_kind, codec, method, data):
    values = st.text(max_size=40) if kind == "string" else st.binary(max_size=40)
    records = data.draw(st.lists(st.tuples(runs_of(run_kind), steps, values), max_size=15))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "s"
        model = {}
        with runstore.open(path).writer(codec=codec) as w:
            if method == "log_many":
                if records:
                    # Distinct keys per call: within one call the later entry wins as well.
                    w.log_many(
                        [r for r, _, _ in records],
                        steps=[s for _, s, _ in records],
                        x=[v for _, _, v in records],
                    )
            else:
                for run, step, value in records:
                    if method == "log":
                        w.log(run, step=step, x=value)
                    else:
                        w.put(run, "x", value, step=step)
            for run, step, value in records:
                model[(run, step)] = value
        check_store(path, "x", model)


@given(
    dtype=st.sampled_from(NUMERIC),
    codec=st.sampled_from(CODECS),
    data=st.data(),
)
def test_variable_shape_round_trip(dtype, codec, data):
    shapes = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)
    records = data.draw(
        st.lists(
            st.tuples(int_runs | str_runs, steps, hnp.arrays(np.dtype(dtype), shapes)), max_size=12
        )
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "s"
        model = {}
        with runstore.open(path).writer() as w:
            w.define("x", dtype, variable_shape=True, codec=codec)
            for run, step, value in records:
                w.put(run, "x", value, step=step)
                model[(run, step)] = value
        check_store(path, "x", model)
        if records:
            info = runstore.open(path, mode="r").series_info("x")
            assert info.variable_shape and info.shape is None


@pytest.mark.parametrize("codec", CODECS)
def test_large_arrays_every_codec(store_path, rng, codec):
    """Arrays above the large-value threshold (1 MiB) take the borrowed, aligned path."""
    big = rng.standard_normal((512, 300))  # 1.2 MB
    ints = rng.integers(0, 1000, size=(300_000,), dtype=np.int32)
    with runstore.open(store_path).writer(codec=codec) as w:
        w.put(0, "big", big)
        w.put("r", "big", big * 2, step=5)
        w.put(1, "ints", ints)
    store = runstore.open(store_path, mode="r")
    np.testing.assert_array_equal(store.get(0, "big"), big)
    np.testing.assert_array_equal(store.get("r", "big", 5), big * 2)
    np.testing.assert_array_equal(store.get(1, "ints"), ints)
    assert store.get(0, "big").ctypes.data % 64 == 0 or codec != "none"


def test_many_records_span_blocks_and_segments(store_path):
    """Enough records for several blocks and (with a small segment size) several segments."""
    n = 50_000
    with runstore.open(store_path).writer(segment_bytes=1 << 20, buffer_bytes=1 << 20) as w:
        for start in range(0, n, 5000):
            runs = np.arange(start, start + 5000)
            w.log_many(runs, v=runs * 0.5, t=np.repeat(runs[:, None], 4, axis=1))
            w.commit()
    store = runstore.open(store_path, mode="r")
    assert len(store.segments()) > 1
    d = store.scan("v")
    order = np.argsort(d["run"])
    np.testing.assert_array_equal(d["run"][order], np.arange(n))
    np.testing.assert_array_equal(d["value"][order], np.arange(n) * 0.5)
    t = store.scan("t")
    assert t["value"].shape == (n, 4)
    np.testing.assert_array_equal(t["value"][np.argsort(t["run"])][:, 2], np.arange(n))
    assert store.get(49_999, "v") == 49_999 * 0.5


def test_unicode_names_and_runs(store_path):
    with runstore.open(store_path).writer() as w:
        w.log("überlauf", **{"qi/3_17": 1.0, "ñame ☃": 2})
    store = runstore.open(store_path, mode="r")
    assert store.names() == sorted(["qi/3_17", "ñame ☃"])
    assert store.get("überlauf", "ñame ☃") == 2
    assert store.runs() == ["überlauf"]


@pytest.mark.parametrize("codec", CODECS)
def test_scan_without_keys_returns_the_same_values(store_path, codec):
    """Many blocks, int and str run ids, numbers and strings: scan(keys=False) is scan()'s
    "value" column alone."""
    store = runstore.open(store_path)
    with store.writer(codec=codec) as w:
        for i in range(3000):
            run = i // 100 if i % 7 else f"r{i}"
            w.log(run, step=i % 100, x=float(i), s=f"text {i}")
            if i % 500 == 499:
                w.commit()  # a block per series and commit: the scan has several
    store.refresh()
    for name in ("x", "s"):
        full, values = store.scan(name), store.scan(name, keys=False)
        assert list(values) == ["value"] and list(full) == ["run", "step", "value"]
        np.testing.assert_array_equal(values["value"], full["value"])
        assert not values["value"].flags.writeable


def test_scan_of_one_run_reads_its_blocks_only(store_path):
    """A store written run by run: the scan of one run is a view of its block, and a damaged
    block of another run is not even read."""
    store = runstore.open(store_path)
    with store.writer() as w:
        for run in range(20):
            w.log_many(np.full(500, run), steps=np.arange(500), loss=np.arange(500) + 1000.5 * run)
            w.commit()  # a block per run
    store.refresh()
    seven = store.scan("loss", runs=[7])
    np.testing.assert_array_equal(seven["step"], np.arange(500))
    (segment,) = (store_path / "segments").glob("*.rss")
    data = bytearray(segment.read_bytes())
    at = data.find(np.float64(7 * 1000.5 + 250).tobytes())
    assert at > 0
    data[at] ^= 0xFF
    segment.write_bytes(bytes(data))
    damaged = runstore.open(store_path, mode="r")
    three = damaged.scan("loss", runs=[3])
    np.testing.assert_array_equal(three["value"], np.arange(500) + 3 * 1000.5)
    assert three["value"].base.zero_copy
    with pytest.raises(runstore.CorruptionError, match="checksum mismatch"):
        damaged.scan("loss", runs=[7, 3])
    # Run 7's steps below 250 share its block with the damaged value: read, and refused.
    with pytest.raises(runstore.CorruptionError):
        damaged.scan("loss", steps=(0, 10))
    with pytest.raises(runstore.CorruptionError):
        damaged.scan("loss")


def test_scan_of_a_window_of_steps_reads_its_blocks_only(store_path):
    """One long run, a block per 1,000 steps: a window of steps reads the blocks it overlaps."""
    store = runstore.open(store_path)
    with store.writer() as w:
        for start in range(0, 20_000, 1000):
            w.log_many(
                np.zeros(1000, dtype=np.int64),
                steps=np.arange(start, start + 1000),
                loss=np.arange(start, start + 1000) * 0.5,
            )
            w.commit()
    store.refresh()
    (segment,) = (store_path / "segments").glob("*.rss")
    data = bytearray(segment.read_bytes())
    at = data.find(np.float64(15_500 * 0.5).tobytes())  # in the block of steps 15,000-15,999
    assert at > 0
    data[at] ^= 0xFF
    segment.write_bytes(bytes(data))
    damaged = runstore.open(store_path, mode="r")
    window = damaged.scan("loss", runs=[0], steps=range(12_345, 14_999 + 1))
    np.testing.assert_array_equal(window["step"], np.arange(12_345, 15_000))
    np.testing.assert_array_equal(window["value"], np.arange(12_345, 15_000) * 0.5)
    with pytest.raises(runstore.CorruptionError):
        damaged.scan("loss", steps=(14_999, 15_001))


def test_scan_runs_must_be_a_list_of_run_ids(store):
    with store.writer() as w:
        w.log(1, x=1.0)
    store.refresh()
    with pytest.raises(TypeError, match="got a single str"):
        store.scan("x", runs="1")
    with pytest.raises(TypeError, match="list of run ids"):
        store.scan("x", runs=1)
    with pytest.raises(TypeError, match="run id must be an int or a str, got float"):
        store.scan("x", runs=[1.0])
    assert store.scan("x", runs=())["value"].shape == (0,)
    with pytest.raises(TypeError, match="steps must be"):
        store.scan("x", steps=5)
    with pytest.raises(ValueError, match="step 1"):
        store.scan("x", steps=range(0, 10, 2))
    assert store.scan("x", steps=(1, 1))["value"].shape == (0,)
    assert store.scan("x", steps=(-(2**80), 2**80))["value"].shape == (1,)
    with pytest.raises(KeyError):
        store.scan("y", runs=[1])
